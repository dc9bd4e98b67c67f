"""One way to make a priced model, one cost account, provider figures checked, hard budgets.

- every registered strategy and the judge, run with ``price_as=M``, records every model call
  priced as M (the run's pricing reaches every client made by ``MemoryEnv.model``);
- every registered strategy honours a hard :class:`Budget`: no call is made whose worst case could
  cross it, so the recorded total stays within it;
- a provider's negative / non-finite cost or token counts are rejected and re-priced, cached >
  input is clamped, both flagged, never summed as is and never a crash;
- ledger spans, local records and the budget arithmetic against hand-computed values.

Model calls go to a scripted client (control flow only: replies chosen from the prompt, tokens
are whitespace words); the store, BM25 and MiniLM are real.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from fakes import ScriptedClient, message_text
from router_files import config, target, write_router

from memfrontier.answerer import Answerer
from memfrontier.api import AsyncMemory
from memfrontier.core.ledger import (
    BudgetExceededError,
    Call,
    Ledger,
    count_event,
    use_ledger,
)
from memfrontier.core.pricebook import PriceBook, UnpricedModelError
from memfrontier.core.types import Budget, Record, Scope
from memfrontier.eval.judge import make_judge
from memfrontier.llm.base import Completion
from memfrontier.llm.metered import MESSAGE_OVERHEAD_TOKENS, MeteredLLM
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import STRATEGIES, MemoryEnv, get_strategy, strategy_class
from memfrontier.strategies.mempilot.pool import PoolProfile, Route
from memfrontier.strategies.mempilot.prompts import DELEGATE_SYSTEM

BOOK = PriceBook.load()
M = "qwen3-14b"  # 0.10 / 0.24 USD per 1M input / output tokens
P = BOOK.get(M)
SCOPE = Scope(user_id="evan")
QUESTION = "What color is the car Evan bought?"
LOCAL_MODELS = {"rules", "minilm", "tier-router"}


def reply(messages, kw) -> str:
    """A plausible reply for every prompt the strategies send (found from the prompt / schema)."""
    system = message_text(messages[0].get("content"))
    schema = kw.get("json_schema") or {}
    props = schema.get("properties", {})
    if system.startswith("You split"):
        return json.dumps({"reasoning": "one topic", "episodes": [{"indices": [1, 2, 3, 4], "topic": "car"}]})
    if system.startswith("You write episodic"):
        return json.dumps(
            {
                "reasoning": "r",
                "title": "Evan bought a car",
                "content": "Evan bought a blue Prius.",
                "timestamp": "2023-05-08T13:56",
            }
        )
    if system.startswith("You maintain"):
        return json.dumps(
            {"reasoning": "new", "decision": "new", "target": 0, "title": "", "content": "", "timestamp": ""}
        )
    if system.startswith("You know some facts"):
        return "Evan bought something."
    if system.startswith(("You update", "You build")):
        return json.dumps({"reasoning": "durable", "facts": ["Evan owns a blue Prius car."]})
    if system.startswith("You compress memories"):
        return "Evan bought a blue Prius on 7 May 2023."
    if system == DELEGATE_SYSTEM:
        return "Evan bought a blue Prius."
    if "runtime_memory" in system:  # the MemPilot policy (tagged text)
        if any(message_text(m.get("content")).startswith("<tool_response>") for m in messages):
            return "<answer>blue</answer>"
        return (
            '<tool_call>{"name": "runtime_memory", "arguments": {"retrieval_query": "Evan car", '
            '"evidence_count": 3, "instruction": "Say what car Evan bought", "model": "model_txt", '
            '"include_images": false}}</tool_call>'
        )
    if "sufficient" in props:
        return json.dumps({"sufficient": True, "missing": ""})
    if "action" in props:
        return json.dumps({"action": {"tool": "rg", "patterns": ["Prius"]}})
    if "actions" in props:
        return json.dumps({"actions": [{"tool": "rg", "patterns": ["Prius"]}]})
    if "label" in props:
        return json.dumps({"label": "CORRECT"})
    if schema:  # a BudgetMem module: an empty answer (the module falls back to a lower tier)
        return json.dumps({"answer": []})
    return "blue"  # the answerer


def Scripted(model_id: str = "gemma-3-270m-q4_k_m") -> ScriptedClient:
    """The suite's scripted client answering every strategy prompt with :func:`reply`."""
    return ScriptedClient(reply, model_id=model_id)


def Stub(**fields) -> ScriptedClient:
    """A client returning one fixed Completion with a provider's reported figures, unvalidated
    (negative, NaN...), as a provider could send them."""
    return ScriptedClient(
        [
            Completion.model_construct(
                **{
                    "text": "four words of reply",
                    "model_id": "gemma-3-270m-q4_k_m",
                    "input_tokens": 0,
                    "cached_tokens": 0,
                    "output_tokens": 0,
                    "reasoning_tokens": 0,
                    "images": 0,
                    "finish_reason": "stop",
                    "exact_usd": None,
                    **fields,
                }
            )
        ],
        model_id="gemma-3-270m-q4_k_m",
    )


def records() -> list[Record]:
    texts = ["I bought a Prius yesterday.", "Nice! What color is it?", "Blue, like my old one.", "Cool, congrats."]
    return [
        Record(
            id=f"evan:D1:{i}",
            scope=SCOPE,
            session_id="D1",
            speaker="Evan" if i % 2 else "Sam",
            timestamp="2023-05-08T13:56:00",
            text=t,
        )
        for i, t in enumerate(texts, 1)
    ]


def pool_profile() -> PoolProfile:
    return PoolProfile(
        name="test",
        endpoint="embedded",
        max_output_tokens=64,
        timeout_s=5,
        routes=[Route(id="model_txt", model="meta-llama/llama-3.1-8b-instruct", modalities=["text"], params="8B")],
    )


def strategy(name: str, client: Scripted, env: MemoryEnv):
    """``name`` configured so that its model calls happen, every client made by ``env.model``.
    Runtime clients are constructor arguments, not config values, hence the class itself."""
    cls = strategy_class(name)
    if name == "budgetmem":  # the capacity tiers on spec-less clients: the path that used to drop price_as
        return cls(
            cls.config_class(
                tiering="capacity",
                tiers="high",
                tiering_options={"models": {t: client for t in ("low", "mid", "high")}},
            )
        )
    if name == "memorycpt":
        return cls(cls.config_class(episodic_k=2, semantic_k=2), summarizer_llm=client)
    if name == "automem":
        return cls(cls.config_class(graph="none"), planner_llm=client, judge_llm=client)
    if name == "mempilot":
        return cls(
            cls.config_class(compressor="offline", constrained=False),
            profile=pool_profile(),
            policy=client,
            route_backends={"model_txt": client},
        )
    if name == "auto":  # a router that predicts budgetmem better (F1 0.9 vs 0.1) and free: it routes there
        path = write_router(
            env.store.view_dir("router") / "router.json",
            config("budgetmem", "budgetmem", f1=target(0.9)),
            config("rag", "rag", f1=target(0.1)),
        )
        return cls(cls.config_class(router=path), members={"budgetmem": strategy("budgetmem", client, env)})
    return get_strategy(name)


def ask(tmp_path, minilm, name: str, *, price_as: str | None = M, budget: Budget | None = None):
    """Build and ask ``name`` on a fresh store; returns (answer or the BudgetExceededError, ledger, client)."""
    client = Scripted()
    store = SQLiteStore(tmp_path / f"store-{name}-{budget is not None}", minilm)
    mem = AsyncMemory(
        store,
        MeteredLLM(client, BOOK, price_as=price_as),
        MeteredLLM(client, BOOK, price_as=price_as),
        prices=BOOK,
        price_as=price_as,
    )
    strat = strategy(name, client, mem.env)
    ledger = Ledger()

    async def go():
        await asyncio.to_thread(store.add, records())
        await mem.construct(strat, SCOPE, ledger)
        try:
            return await mem.answer(
                QUESTION, SCOPE, strat, budget=budget, ledger=ledger, gold_evidence_ids=["evan:D1:3"]
            )
        except BudgetExceededError as e:
            return e

    try:
        return asyncio.run(go()), ledger, client
    finally:
        store.close()


EXPECTED_ROLES = {
    "longctx": {"answerer"},
    "rag": {"answerer"},
    "oracle": {"answerer"},
    "budgetmem": {"answerer", "budgetmem.filter.high", "budgetmem.entity.high", "budgetmem.summary.high"},
    "memorycpt": {"answerer", "summarizer", "segmenter", "episode_generator"},
    "automem": {"answerer", "planner", "judge"},
    "mempilot": {"answerer", "policy", "delegate"},
    "auto": {
        "answerer",
        "budgetmem.filter.high",
        "budgetmem.entity.high",
        "budgetmem.summary.high",
    },  # routed to budgetmem
}


def test_every_registered_strategy_is_covered():
    assert set(EXPECTED_ROLES) == set(STRATEGIES)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_price_as_reaches_every_call_of_every_strategy(tmp_path, minilm, name):
    ans, ledger, _ = ask(tmp_path, minilm, name)
    assert not isinstance(ans, Exception)
    model_calls = [c for c in ledger.calls if c.model_id not in LOCAL_MODELS]
    assert EXPECTED_ROLES[name] <= {c.role for c in model_calls}, {c.role for c in model_calls}
    for c in model_calls:
        assert c.model_id == "gemma-3-270m-q4_k_m" and c.priced_as == M, c
        # MemoryCPT Eq. 4 at M's prices; a MemPilot policy turn's KV-cached prefix is free (MemPilot Eq. 14)
        assert c.usd == pytest.approx(
            1e-6 * (0.10 * (c.input_tokens - c.cached_tokens) + 0.24 * c.output_tokens), rel=1e-12
        ), c
    for c in ledger.calls:
        if c.model_id in LOCAL_MODELS:  # local compute: recorded, $0, no proxy, not priced as anything
            assert (c.usd, c.proxy_s, c.priced_as) == (0.0, 0.0, None) and c.wall_s > 0
    # what lands in predictions.jsonl / summary.json: every role's usage priced as M
    for role, u in ans.usage.by_role.items():
        assert u.priced_as == ([] if role.startswith("budgetmem.") and u.usd == 0 else [M]), (role, u)


def test_judge_follows_the_runs_pricing(tmp_path, minilm):
    client = Scripted()
    store = SQLiteStore(tmp_path / "store", minilm)
    mem = AsyncMemory(
        store, MeteredLLM(client, BOOK, price_as=M), MeteredLLM(client, BOOK, price_as=M), prices=BOOK, price_as=M
    )
    judge = make_judge(mem)
    ledger = Ledger()
    with use_ledger(ledger):
        assert asyncio.run(judge(QUESTION, "blue", "blue")) is True
    (c,) = ledger.calls
    assert (c.role, c.priced_as) == ("judge", M)
    assert c.usd == pytest.approx(1e-6 * (0.10 * c.input_tokens + 0.24 * c.output_tokens), rel=1e-12)
    # a judge on its own spec (built, not called: no server here) gets the run's price_as too
    assert make_judge(mem, "openai:some/unlisted-model", base_url="http://127.0.0.1:9/v1").llm.priced_as == M
    store.close()


def test_env_model_pricing_rules(tmp_path, minilm):
    store = SQLiteStore(tmp_path / "store", minilm)
    base = MeteredLLM(Scripted(), BOOK)
    env = MemoryEnv(store=store, llm=base, answer_llm=base)
    # no run-wide price_as: a route stands for its model; a LoRA adapter is priced as its base
    assert (
        env.model(Scripted(), "delegate", stands_for="meta-llama/llama-3.1-8b-instruct").priced_as
        == "meta-llama/llama-3.1-8b-instruct"
    )
    lora = Scripted("gemma-3-270m-q4_k_m+qar-b")
    assert env.model(lora, "summarizer", adapter="runs/qar").priced_as == "gemma-3-270m-q4_k_m"
    with pytest.raises(UnpricedModelError):  # an unknown model is refused unless the run allows it
        env.model(Scripted("my-local-checkpoint"), "planner")
    loose = MemoryEnv(store=store, llm=MeteredLLM(Scripted(), BOOK, allow_unpriced=True), answer_llm=base)
    unpriced = loose.model(Scripted("my-local-checkpoint"), "planner")
    assert (unpriced.price, unpriced.priced_as) == (None, None)
    # with price_as, everything is priced as it, routes and adapters included
    run_env = MemoryEnv(store=store, llm=base, answer_llm=base, price_as=M)
    assert run_env.model(Scripted(), "delegate", stands_for="meta-llama/llama-3.1-8b-instruct").priced_as == M
    assert run_env.model(lora, "summarizer", adapter="runs/qar").priced_as == M
    # None: the role's side of the env; a MeteredLLM is taken as its maker priced it; clients are cached
    assert env.model(None, "judge") is env.answer_llm and env.model(None, "planner") is env.llm
    assert env.model(base, "x") is base
    c = Scripted()
    assert env.model(c, "planner") is env.model(c, "planner")
    store.close()


# --- hard budgets -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_honours_a_hard_budget(tmp_path, minilm, name):
    free, free_ledger, _ = ask(tmp_path, minilm, name)
    query = [c for c in free_ledger.calls if c.stage == "query"]
    (answer,) = [c for c in query if c.role == "answerer"]
    before = sum(c.usd for c in query if c.role != "answerer")  # what the strategy's own calls cost
    # the least and the most the answer call may cost: its prompt with no context / the full one (as
    # predicted before the call: its message template included), each with the output at its
    # 32-token cap (MemoryCPT Eq. 4 at 0.10 / 0.24 USD per 1M tokens)
    t = MESSAGE_OVERHEAD_TOKENS
    floor = 1e-6 * (0.10 * (len(Answerer(None).prompt(QUESTION, "").split()) + t) + 0.24 * 32)
    ceiling = before + 1e-6 * (0.10 * (answer.input_tokens + t) + 0.24 * 32)
    cap = (floor + ceiling) / 2  # between the answer alone and the whole unbudgeted question
    ans, ledger, _ = ask(tmp_path, minilm, name, budget=Budget(max_usd=cap))
    assert not isinstance(ans, Exception), ans
    assert 0 < ledger.usd("query") <= cap and ans.usage.query.usd <= cap
    budget_events = {e for e in ledger.events if e.startswith("budget.")}
    assert budget_events, dict(ledger.events)  # a call refused or the context cut, and counted
    if before > 0:  # the strategy's calls were cut back: refused before being made, never overshot
        assert any(e.startswith(("budget.call_refused.", "budget.rules_only")) for e in budget_events), budget_events


@pytest.mark.parametrize("cap", [{"max_tokens": 300}, {"max_proxy_s": 3.0}])
def test_token_and_latency_caps_hold_for_budgetmem_and_mempilot(tmp_path, minilm, cap):
    for name in ("budgetmem", "mempilot"):
        ans, ledger, _ = ask(tmp_path / cap.__repr__().replace(" ", ""), minilm, name, budget=Budget(**cap))
        q = [c for c in ledger.calls if c.stage == "query"]
        if "max_tokens" in cap:
            assert sum(c.input_tokens + c.output_tokens for c in q) <= cap["max_tokens"]
        else:
            assert ledger.proxy_s("query") <= cap["max_proxy_s"]


def test_metered_client_refuses_a_call_that_could_cross_the_budget():
    llm = MeteredLLM(Scripted(), BOOK, price_as=M)
    msgs = [{"role": "user", "content": "one two three four five six seven eight nine ten"}]
    n_in = 10 + MESSAGE_OVERHEAD_TOKENS
    worst = 1e-6 * (0.10 * n_in + 0.24 * 100)  # MemoryCPT Eq. 4 at the output cap
    assert llm.max_cost_usd(msgs, 100) == pytest.approx(worst, rel=1e-12)
    ledger = Ledger()
    with use_ledger(ledger):
        with pytest.raises(BudgetExceededError, match="max_usd"):
            asyncio.run(llm.complete(msgs, role="x", max_tokens=100, budget=Budget(max_usd=worst * 0.999)))
        assert ledger.calls == [] and ledger.events == {"budget.call_refused.x": 1}
        asyncio.run(llm.complete(msgs, role="x", max_tokens=100, budget=Budget(max_usd=worst)))
        assert len(ledger.calls) == 1 and ledger.usd() <= worst
        with pytest.raises(BudgetExceededError, match="max_tokens"):  # 20 + 10 + 8 + 100 > 100
            asyncio.run(llm.complete(msgs, role="x", max_tokens=100, budget=Budget(max_tokens=100)))


def Slow() -> ScriptedClient:
    """Each reply comes after 0.01 s, so the other call starts while this one is in flight."""
    return ScriptedClient(lambda messages, kw: (0.01, reply(messages, kw)), model_id="gemma-3-270m-q4_k_m")


def test_concurrent_calls_reserve_their_worst_case():
    llm = MeteredLLM(Slow(), BOOK, price_as=M)
    msgs = [{"role": "user", "content": "one two"}]
    worst = llm.max_cost_usd(msgs, 50)
    ledger = Ledger()

    async def two():
        return await asyncio.gather(
            *(llm.complete(msgs, role=f"r{i}", max_tokens=50, budget=Budget(max_usd=1.5 * worst)) for i in range(2)),
            return_exceptions=True,
        )

    with use_ledger(ledger):
        out = asyncio.run(two())
    assert sum(isinstance(o, BudgetExceededError) for o in out) == 1 and len(ledger.calls) == 1


# --- provider figures --------------------------------------------------------------------------------------------
def _one(**fields) -> Call:
    ledger = Ledger()
    with use_ledger(ledger):
        asyncio.run(
            MeteredLLM(Stub(**fields), BOOK, price_as=M).complete(
                [{"role": "user", "content": "a b c"}], role="r", max_tokens=8
            )
        )
    (c,) = ledger.calls
    assert all(ledger.events[f"usage_repaired.{f}"] == 1 for f in c.flags)
    return c


@pytest.mark.parametrize("bad", [-2100.0, math.nan, math.inf, -math.inf])
def test_negative_or_non_finite_provider_cost_is_repriced_from_tokens(bad):
    c = _one(input_tokens=1000, output_tokens=100, exact_usd=bad)
    assert c.flags == ["provider_cost_rejected"] and not c.usd_exact
    assert c.usd == pytest.approx(1e-6 * (0.10 * 1000 + 0.24 * 100), rel=1e-12)  # 1.24e-4
    good = _one(input_tokens=1000, output_tokens=100, exact_usd=0.5)
    assert (good.usd, good.usd_exact, good.flags) == (0.5, True, [])


def test_a_run_total_never_goes_negative():
    ledger = Ledger()
    with use_ledger(ledger):
        for cost in (0.0004, -2100.0, math.nan):
            asyncio.run(
                MeteredLLM(Stub(input_tokens=1000, output_tokens=100, exact_usd=cost), BOOK, price_as=M).complete(
                    [{"role": "user", "content": "x"}], role="r", max_tokens=8
                )
            )
    assert ledger.usd() == pytest.approx(0.0004 + 2 * 1.24e-4, rel=1e-12)
    assert ledger.usage().query.flagged_calls == 2


def test_cached_above_input_is_clamped_not_a_crash():
    c = _one(input_tokens=100, cached_tokens=500, output_tokens=10)
    assert c.flags == ["cached_tokens_clamped"] and (c.input_tokens, c.cached_tokens) == (100, 100)
    assert c.usd == pytest.approx(1e-6 * (0.10 * 100 + 0.24 * 10), rel=1e-12)  # no cached price: input rate


def test_negative_token_counts_are_recounted():
    c = _one(input_tokens=-5, output_tokens=-1, cached_tokens=-3, reasoning_tokens=-2)
    assert c.flags == [
        "input_tokens_rejected",
        "output_tokens_rejected",
        "cached_tokens_rejected",
        "reasoning_tokens_rejected",
    ]
    # re-counted: "a b c" + the per-message allowance, "four words of reply"
    assert (c.input_tokens, c.output_tokens, c.cached_tokens, c.reasoning_tokens) == (
        3 + MESSAGE_OVERHEAD_TOKENS,
        4,
        0,
        0,
    )
    assert c.usd == pytest.approx(1e-6 * (0.10 * 11 + 0.24 * 4), rel=1e-12) and c.usd >= 0


# --- the ledger -------------------------------------------------------------------------------------
def test_spans_see_only_their_own_calls_even_when_concurrent():
    ledger = Ledger()

    async def module(name: str, usd: float, n: int):
        with ledger.span(name) as s:
            for _ in range(n):
                await asyncio.sleep(0)
                ledger.record(Call(stage="query", role=name, model_id="m", usd=usd, proxy_s=1.0))
        return s

    async def go():
        with ledger.span("all") as outer, ledger.parallel():
            a, b = await asyncio.gather(module("a", 0.25, 2), module("b", 1.0, 3))
        return outer, a, b

    with use_ledger(ledger):
        outer, a, b = asyncio.run(go())
        ledger.record_local("rules", 0.002)
        count_event("e")
        count_event("e", 2)
    assert (a.usd(), a.usage().calls, b.usd(), b.usage().calls) == (0.5, 2, 3.0, 3)
    assert outer.usd() == 3.5 and outer.proxy_s() == 1.0  # one parallel stage: its max (MemPilot Eq. 18)
    local = ledger.calls[-1]
    assert (local.role, local.model_id, local.usd, local.proxy_s, local.wall_s) == ("rules", "local", 0.0, 0.0, 0.002)
    assert ledger.events == {"e": 3}
    count_event("outside")  # no current ledger: nothing to count, no error


def test_would_exceed_names_the_cap():
    ledger = Ledger()
    ledger.record(Call(stage="query", role="r", model_id="m", usd=0.4, input_tokens=80, output_tokens=20, proxy_s=2.0))
    ledger.record(Call(stage="construction", role="r", model_id="m", usd=10.0))  # not a query's spend
    b = Budget(max_usd=0.5, max_tokens=150, max_proxy_s=3.0)
    assert ledger.would_exceed(b, usd=0.1, tokens=50, proxy_s=1.0) is None
    assert "max_usd" in ledger.would_exceed(b, usd=0.11)
    assert "max_tokens" in ledger.would_exceed(b, tokens=51)
    assert "max_proxy_s" in ledger.would_exceed(b, proxy_s=1.01)
    assert "unpriced" in ledger.would_exceed(b, usd=None)
    with ledger.reserve(0.05, 0, 0.0):
        assert "max_usd" in ledger.would_exceed(b, usd=0.06)
    assert ledger.would_exceed(b, usd=0.06) is None
    assert ledger.would_exceed(Budget(), usd=1e9) is None


# --- the real path (embedded Gemma 3 270M) ----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.data
def test_eval_with_price_as_prices_every_recorded_call_as_that_model(tmp_path, locomo_slice):
    """``eval --price-as qwen3-14b --judge`` with BudgetMem's reasoning tiers (LLM calls in every
    module) on one LoCoMo question: every call in the result files is priced as qwen3-14b."""
    from memfrontier.eval.runner import EvalConfig, run_eval

    cfg = EvalConfig(
        dataset="locomo",
        split="test",
        strategy="budgetmem",
        limit=1,
        out=tmp_path / "run",
        judge=True,
        price_as=M,
        strategy_options={"tiering": "reasoning", "tiers": "low"},
        data_root=locomo_slice("conv-49", "conv-50"),
    )
    summary = asyncio.run(run_eval(cfg))
    assert summary["provenance"]["priced_as"] == M
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    roles = row["usage"]["by_role"]
    assert {"budgetmem.filter.low", "budgetmem.summary.low", "answerer"} <= set(roles)
    for role, u in roles.items():
        if u["usd"] > 0:  # model calls (local tiers record $0 and no price)
            assert u["priced_as"] == [M], role
            assert u["usd"] == pytest.approx(1e-6 * (0.10 * u["input_tokens"] + 0.24 * u["output_tokens"]), rel=1e-9)
    judge = row["judge_usage"]
    assert judge["calls"] == 1 and judge["priced_as"] == [M]
    assert row["judge_usd"] == pytest.approx(
        1e-6 * (0.10 * judge["input_tokens"] + 0.24 * judge["output_tokens"]), rel=1e-9
    )


def test_memorycpt_construction_usage_is_the_ledgers_view_of_the_build(tmp_path, minilm):
    client = Scripted()
    store = SQLiteStore(tmp_path / "store", minilm)
    mem = AsyncMemory(
        store, MeteredLLM(client, BOOK, price_as=M), MeteredLLM(client, BOOK, price_as=M), prices=BOOK, price_as=M
    )
    strat = get_strategy("memorycpt")
    store.add(records())
    ledger = asyncio.run(mem.construct(strat, SCOPE))
    built = strat.construction_usage(mem.env, SCOPE)
    u = ledger.usage().construction
    assert u.calls == client.n_calls >= 2
    assert (built["calls"], built["input_tokens"], built["output_tokens"]) == (u.calls, u.input_tokens, u.output_tokens)
    assert built["usd"] == pytest.approx(u.usd, rel=1e-12) and u.usd == pytest.approx(
        sum(1e-6 * (0.10 * c.input_tokens + 0.24 * c.output_tokens) for c in ledger.calls), rel=1e-12
    )
    assert asyncio.run(mem.construct(strat, SCOPE)).calls == []  # built once: the view keeps its cost, no new call
    store.close()

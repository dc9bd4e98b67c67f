"""The hard budget, as a property: for every strategy and randomly drawn budgets (USD, tokens,
latency-proxy seconds, alone and together, zero and tiny ones included), no question's ledger
spends more than its effective cap, every refusal is counted and named in the usage, and an answer
whose usage names no budget event spent exactly what the same question spends without a budget
(nothing was cut silently).

The scripted model answers every structured call with the smallest instance of its schema
(:func:`fakes.any_schema_script`: control flow only, priced as a local model, a token is a word);
a few cases run the embedded model."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from fakes import ScriptedClient, any_schema_script

from memfrontier.api import AsyncMemory
from memfrontier.core.ledger import BudgetExceededError, Ledger
from memfrontier.core.types import Budget, Scope
from memfrontier.strategies import effective_budget

MODEL = "gemma-3-270m-q4_k_m"  # priced and profiled in the price book: USD and proxy caps bind
SCOPE = Scope(user_id="ana")
QUESTION = ("When did Ana move item 7 to box 3?", "2023-06-01T00:00:00Z")
AUTO_ROUTER = Path(__file__).parents[1] / "results/frontier-train-1.5b/router/router.json"
DRAWS = 14

#: label -> (strategy, options): every strategy, BudgetMem at each tier and with its router.
CASES = {
    "rag": ("rag", {}),
    "rag-turns-rr": ("rag-turns-rr", {}),
    "longctx": ("longctx", {}),
    "memorycpt": ("memorycpt", {}),
    "budgetmem-low": ("budgetmem", {"tiers": "low"}),
    "budgetmem-mid": ("budgetmem", {"tiers": "mid"}),
    "budgetmem-high": ("budgetmem", {"tiers": "high"}),
    "budgetmem-router": ("budgetmem", {"router": "ROUTER"}),
    "automem": ("automem", {}),
    "mempilot": ("mempilot", {}),
    "auto": ("auto", {"router": str(AUTO_ROUTER)}),
}


def draw_budget(rng: random.Random) -> Budget:
    """A budget of one, two or three caps; each cap zero, tiny, or log-uniform over the range a
    question spends in (the scripted answer call alone costs ~70 tokens, ~1e-6 USD, ~0.3 s)."""
    caps = rng.sample(["max_usd", "max_tokens", "max_proxy_s"], rng.randint(1, 3))
    ranges = {"max_usd": (1e-9, 1e-9, 1e-4), "max_tokens": (1, 1, 5_000), "max_proxy_s": (1e-4, 1e-4, 10.0)}
    out = {}
    for cap in caps:
        zero, tiny, high = ranges[cap]
        kind = rng.random()
        value = 0 if kind < 0.1 else tiny if kind < 0.2 else 10 ** rng.uniform(-1.5, 0) * high
        out[cap] = int(value) if cap == "max_tokens" else float(value)
    return Budget(**out)


def spent(ledger: Ledger) -> tuple[float, int, float]:
    q = ledger.usage().query
    return q.usd, q.input_tokens + q.output_tokens, q.proxy_s


def within(budget: Budget, usage: tuple[float, int, float]) -> list[str]:
    """The caps of ``budget`` that ``usage`` (USD, tokens, proxy seconds) exceeds."""
    usd, tokens, proxy_s = usage
    over = []
    if budget.max_usd is not None and usd > budget.max_usd * (1 + 1e-9):
        over.append(f"usd {usd} > {budget.max_usd}")
    if budget.max_tokens is not None and tokens > budget.max_tokens:
        over.append(f"tokens {tokens} > {budget.max_tokens}")
    if budget.max_proxy_s is not None and proxy_s > budget.max_proxy_s * (1 + 1e-9):
        over.append(f"proxy_s {proxy_s} > {budget.max_proxy_s}")
    return over


def history() -> list[tuple[str, str, list[dict]]]:
    """Three dated sessions of eight turns, a fact and its correction among them."""
    out = []
    for s in range(3):
        turns = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"Session {s}, turn {i}: Ana keeps item {s * 10 + i} in box {i} of the attic.",
            }
            for i in range(8)
        ]
        if s == 2:
            turns[3]["content"] = "Ana moved item 7 to box 3 yesterday; it is no longer in box 7."
        out.append((f"s{s}", f"2023-05-0{s + 1}T10:00:00Z", turns))
    return out


@pytest.fixture(scope="module")
def memory(tmp_path_factory, minilm):
    """Every strategy's view of one scope, built with the scripted model (poor outputs are accepted:
    the property is about spend, not quality)."""
    from memfrontier.strategies.budgetmem.router import TierRouter

    root = tmp_path_factory.mktemp("budget-property")
    router = root / "tier_router.pt"
    TierRouter.from_embedder(minilm.encode).save(router)
    client = ScriptedClient(any_schema_script("box 3"), model_id=MODEL)
    mem = AsyncMemory.open(root / "store", llm=client, embedder=minilm, fallback_threshold=1.0)

    async def setup():
        for session, when, turns in history():
            await mem.add(turns, user_id="ana", session_id=session, timestamp=when)
        for strategy in ("memorycpt", "automem", "mempilot"):
            await mem.build(strategy, user_id="ana")

    asyncio.run(setup())
    strategies = {
        label: mem.strategy(name, {k: str(router) if v == "ROUTER" else v for k, v in options.items()})
        for label, (name, options) in CASES.items()
    }
    yield mem, strategies
    mem.close()


def ask(
    mem: AsyncMemory, strategy, budget: Budget | None, question: tuple[str, str | None] = QUESTION
) -> tuple[Ledger, str | None, BudgetExceededError | None]:
    ledger = Ledger()
    try:
        ans = asyncio.run(
            mem.answer(question[0], SCOPE, strategy, budget=budget, question_date=question[1], ledger=ledger)
        )
    except BudgetExceededError as exc:
        return ledger, None, exc
    assert ans.usage == ledger.usage()
    return ledger, ans.text, None


@pytest.mark.parametrize("label", list(CASES))
def test_no_strategy_spends_past_its_effective_cap(memory, label):
    mem, strategies = memory
    strategy = strategies[label]
    free, text, refused = ask(mem, strategy, None)
    assert refused is None and text, f"{label} answers without a budget"
    free_usage = spent(free)
    assert free_usage[1] > 0  # the question costs something: the caps below bind
    rng = random.Random(f"budget-{label}")
    outcomes = {"answered": 0, "cut": 0, "refused": 0}
    for _ in range(DRAWS):
        budget = draw_budget(rng)
        cap = effective_budget(strategy.config, budget)
        ledger, text, refused = ask(mem, strategy, budget)
        assert not within(cap, spent(ledger)), f"{label} under {cap}: {within(cap, spent(ledger))}"
        events = ledger.usage().events
        named = {e for e in events if e.startswith("budget.")}
        if refused is not None:
            outcomes["refused"] += 1
            # the refusal is named in the usage it carries (what was spent before it, and why not more)
            assert refused.usage == ledger.usage()
            assert any(e.startswith("budget.call_refused.") for e in refused.usage.events), (label, budget, events)
        elif named:
            outcomes["cut"] += 1
        else:
            outcomes["answered"] += 1
            # no budget event: the question ran as it runs without a budget
            assert spent(ledger)[:2] == free_usage[:2], (label, budget, events)
    # the draws reach the caps: some questions are cut or refused, and (but for zero caps) some pass
    assert outcomes["refused"] + outcomes["cut"] > 0, outcomes
    assert outcomes["answered"] + outcomes["cut"] > 0, outcomes


@pytest.mark.slow
@pytest.mark.parametrize(
    "label,budget",
    [
        ("rag", Budget(max_tokens=300)),
        ("rag", Budget(max_usd=2.5e-6, max_proxy_s=1.0)),
        ("budgetmem-mid", Budget(max_tokens=900)),
        ("longctx", Budget(max_proxy_s=1.0)),
    ],
)
def test_the_embedded_model_keeps_within_the_cap(tmp_path, minilm, label, budget):
    from memfrontier.llm.embedded import MODEL_ID, EmbeddedLLM

    strategy, options = CASES[label]
    mem = AsyncMemory.open(tmp_path / "store", llm=EmbeddedLLM(), embedder=minilm)
    try:

        async def setup():
            for session, when, turns in history():
                await mem.add(turns, user_id="ana", session_id=session, timestamp=when)

        asyncio.run(setup())
        strat = mem.strategy(strategy, options)
        ledger, text, refused = ask(mem, strat, budget)
    finally:
        mem.close()
    assert {c.model_id for c in ledger.calls if c.role == "answerer"} <= {MODEL_ID}
    assert not within(budget, spent(ledger)), within(budget, spent(ledger))
    # each cap leaves room for the question but not for its whole context: answered, the cut counted
    assert refused is None and text, refused
    assert ledger.usage().events == {"budget.context_truncated": 1}


FACTS = [
    "I work as a nurse at the city hospital.",
    "Last month I quit nursing and became a teacher.",
    "My sister lives in Porto.",
    "I adopted a cat named Pixel.",
    "I now teach maths at a secondary school.",
]


@pytest.mark.slow
def test_caps_just_around_the_cut_hold_with_the_embedded_model(tmp_path, minilm):
    """Caps where the answer call starts cutting its context: the model's own count (its tokenizer,
    its template) must not cross them. Sizing the prompt as the question's tokens plus the
    context's spent one token over max_tokens at 10 of these 16 caps (token counts of parts do not
    add up to the whole's)."""
    from memfrontier.llm.embedded import EmbeddedLLM

    mem = AsyncMemory.open(tmp_path / "store", llm=EmbeddedLLM(), embedder=minilm)
    try:

        async def setup():
            for i, fact in enumerate(FACTS):
                await mem.add([{"role": "user", "content": fact}], user_id="ana", session_id=f"s{i}")

        asyncio.run(setup())
        strat = mem.strategy("rag")
        job = ("What is Ana's job now?", None)
        free, _, _ = ask(mem, strat, None, job)
        usd, _, proxy_s = spent(free)
        budgets = [Budget(max_tokens=n) for n in range(100, 116)]
        budgets += [Budget(max_usd=usd * (0.5 + 0.04 * i)) for i in range(13)]
        budgets += [Budget(max_proxy_s=proxy_s * (0.5 + 0.04 * i)) for i in range(13)]
        over, cut = [], 0
        for budget in budgets:
            ledger, _, _ = ask(mem, strat, budget, job)
            over += [f"{budget}: {o}" for o in within(budget, spent(ledger))]
            cut += "budget.context_truncated" in ledger.usage().events
    finally:
        mem.close()
    assert not over, over
    assert cut >= 10  # the caps did cut contexts (they were not all refused outright)

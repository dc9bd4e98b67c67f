"""The ``mempilot`` strategy: control flow, bad inputs, accounting (scripted policy/delegates over a real
SQLite store, MiniLM and bank), and end-to-end runs on real LoCoMo / Mem-Gallery questions with the
embedded model and the local pool (slow)."""

from __future__ import annotations

import asyncio
import json

import pytest
from fakes import ScriptedClient, message_text

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Budget, ImageRef, Preference, Record, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.llm.base import LLMError
from memfrontier.llm.metered import MeteredLLM
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryEnv, Query, get_strategy
from memfrontier.strategies.mempilot import MemPilot, MemPilotConfig
from memfrontier.strategies.mempilot.pool import ModelPool, PoolProfile, Route

BOOK = PriceBook.load()
SCOPE = Scope(user_id="ana")
QUESTION = "What dresses did Lena consider for the gala?"


GEMMA = "gemma-3-270m-q4_k_m"  # priced: the pool and the policy bill in dollars


def call(name, **args) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def ret(q, k=2):
    return call("retrieve_memory", retrieval_query=q, evidence_count=k)


def cur(q, model="model_txt", k=3, instruction="List the dresses Lena considered", images=False):
    return call(
        "runtime_memory",
        retrieval_query=q,
        evidence_count=k,
        instruction=instruction,
        model=model,
        include_images=images,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp")
    img = root / "D1_IMG_001.jpg"
    img.write_bytes(b"\xff\xd8\xff fake jpeg bytes")
    texts = [
        "My sister Lena considered a red silk dress and a blue gown for the gala.",
        "I adopted a grey cat named Miso from the shelter in March 2024.",
        "We hiked Mount Tam on Saturday and saw 3 deer.",
        "Look at the dress Lena finally picked!",
    ]
    recs = [
        Record(
            id=f"ana:D1:{i}", scope=SCOPE, session_id="ana:D1", speaker="Ana", timestamp="2024-05-01T10:00:00", text=t
        )
        for i, t in enumerate(texts)
    ]
    recs[3] = recs[3].model_copy(
        update={
            "images": [
                ImageRef(id="D1:IMG_001", caption="a red silk dress", path=str(img)),
                ImageRef(id="D1:IMG_002", caption="a blue gown", path=str(root / "missing.jpg")),
            ]
        }
    )
    s = SQLiteStore(root / "store", MiniLMEmbedder(num_threads=1), chunk_tokens=24)
    s.add(recs)
    yield s
    s.close()


def profile() -> PoolProfile:
    return PoolProfile(
        name="test",
        endpoint="embedded",
        max_output_tokens=64,
        timeout_s=5,
        routes=[
            Route(id="model_txt", model="meta-llama/llama-3.1-8b-instruct", modalities=["text"], params="8B"),
            Route(
                id="model_vis",
                model="qwen/qwen3-vl-8b-instruct",
                modalities=["text", "image"],
                params="8B",
                endpoint="openai",
            ),
        ],
    )


def _env(store, client) -> MemoryEnv:
    return MemoryEnv(store=store, llm=MeteredLLM(client, BOOK), answer_llm=MeteredLLM(client, BOOK))


def run(store, policy_replies, delegate_replies=(), vision_replies=(), *, budget=None, **options):
    """Build the bank, run one question; returns (context, ledger, policy, delegate, vision, strategy)."""
    policy, delegate, vision = (
        ScriptedClient(r, model_id=GEMMA) for r in (policy_replies, delegate_replies, vision_replies)
    )
    strat = MemPilot(
        MemPilotConfig(compressor="offline", **options),
        profile=profile(),
        policy=policy,
        route_backends={"model_txt": delegate, "model_vis": vision},
    )
    env = _env(store, policy)
    ledger = Ledger()

    async def go():
        with use_ledger(ledger, "construction"):
            await strat.build(env, SCOPE)
        with use_ledger(ledger, "query"):
            return await strat.context(
                Query(text=QUESTION, scope=SCOPE), env, Preference.preset("balanced"), budget or Budget()
            )

    return asyncio.run(go()), ledger, policy, delegate, vision, strat


def test_registered():
    assert isinstance(get_strategy("mempilot", preference="cost"), MemPilot)
    with pytest.raises(ValueError, match="unknown answer_mode 'other'"):
        get_strategy("mempilot", answer_mode="other")
    with pytest.raises(ValueError, match="adapter: no LoRA adapter directory /no/such/adapter"):
        get_strategy("mempilot", adapter="/no/such/adapter")
    with pytest.raises(TypeError):
        MemPilot(max_rounds=3)  # options live in the config only


def test_the_preference_of_the_config_else_the_callers(store):
    def ask(**options):
        return run(store, [ret("Lena"), "<answer>red</answer>"], constrained=False, **options)

    ctx, ledger, *_ = ask()  # run() asks with the caller's balanced preference
    assert ctx.meta["preference"] == Preference.preset("balanced").model_dump()
    assert ctx.meta["preference_source"] == "caller" and ledger.events["preference.config_over_caller"] == 0
    ctx, ledger, *_ = ask(preference="cost")
    assert ctx.meta["preference"] == {"quality": 1.0, "cost": 1.0, "latency": 0.25}
    assert ctx.meta["preference_source"] == "config" and ledger.events["preference.config_over_caller"] == 1


def test_retrieve_and_curate_in_one_stage_with_kv_prefix_accounting(store):
    ctx, ledger, policy, delegate, _, strat = run(
        store,
        [ret("zqx Lena dress options") + "\n" + cur("zqx Lena dress"), "<answer>a red silk dress</answer>"],
        ["Lena considered a red silk dress and a blue gown. Unresolved: which one she chose."],
        constrained=False,
    )
    m = ctx.meta
    assert m["format_valid"] and m["gate_reasons"] == []
    assert (m["rounds"], m["retrieve_calls"], m["curate_calls"], m["delegate_calls"]) == (2, 1, 1, 1)
    assert m["routes"] == ["model_txt"] and m["route_models"] == {"model_txt": "meta-llama/llama-3.1-8b-instruct"}
    assert m["policy_answer"] == "a red silk dress"
    # the meta is the strategy's declared shape, and the run report reads it through that shape
    from memfrontier.eval.reports.mempilot import run_stats
    from memfrontier.strategies.mempilot.meta import MemPilotMeta

    assert strat.meta_model is MemPilotMeta and set(m) == set(MemPilotMeta.model_fields)
    row = {"strategy_meta": m, "f1": 0.5, "usd": 1e-5, "proxy_s": 2.0, "gold": "red silk dress"}
    stats = run_stats([row, {"strategy_meta": {"route": "x"}, "f1": 0.0, "usd": 0.0, "proxy_s": 0.0}])
    assert stats["n"] == 1 and stats["rounds_per_question"] == 2.0 and stats["delegate_calls_per_question"] == 1.0
    assert stats["route_share"] == {"model_txt": 1.0} and stats["policy_answer_f1"] == 1.0
    # the answerer's context: compressed bank texts and the delegate's findings (no policy reasoning)
    assert "Lena considered a red silk dress and a blue gown" in ctx.text and "date: 2024-05-01" in ctx.text
    assert "<tool_call>" not in ctx.text and "ana:D1:0" in ctx.evidence_ids
    # the delegate sees the instruction and raw items, never the retrieval query
    ((dmsgs, dkw),) = delegate.seen
    prompt = message_text(dmsgs[1]["content"])
    assert "Instruction: List the dresses Lena considered" in prompt and "zqx" not in prompt
    assert "- id=ana:D1:0 speaker=Ana time=1 May 2024: My sister Lena" in prompt
    assert dkw["max_tokens"] == 64 and dkw["temperature"] == 0.0
    # ledger: 2 policy calls (KV-prefix: turn 2 pays only the observation), 1 delegate call, no call for retrieve
    pol = [c for c in ledger.calls if c.role == "policy"]
    dele = [c for c in ledger.calls if c.role == "delegate"]
    assert len(pol) == 2 and len(dele) == 1 and len(ledger.calls) == 3
    obs = policy.seen[1][0][-1]["content"]
    assert obs.startswith("<tool_response>\nretrieve_memory results:") and "runtime_memory (model_txt) findings:" in obs
    n_obs = len(obs.split())
    assert pol[0].cached_tokens == 0
    assert pol[1].input_tokens - pol[1].cached_tokens == n_obs
    p = BOOK.get("qwen3-4b-instruct-2507")
    assert pol[1].usd == pytest.approx(1e-6 * (0.05 * n_obs + 0.25 * pol[1].output_tokens))
    assert pol[1].proxy_s == pytest.approx(p.latency.seconds(n_obs, pol[1].output_tokens))
    d = BOOK.get("meta-llama/llama-3.1-8b-instruct")
    assert dele[0].usd == pytest.approx(d.usd(dele[0].input_tokens, dele[0].output_tokens))
    # one account: every call priced by its metered client as the model it stands for
    assert [c.priced_as for c in ledger.calls] == [
        "qwen3-4b-instruct-2507",
        "meta-llama/llama-3.1-8b-instruct",
        "qwen3-4b-instruct-2507",
    ]
    # the trajectory's cost and latency (the ledger's view) against Eq. 14 / Eq. 19 by hand:
    # turn 1 pays its whole prompt, turn 2 only the observation; policy 0.05 / 0.25, 8B 0.05 / 0.08 USD per 1M
    n0 = sum(len(message_text(x["content"]).split()) for x in policy.seen[0][0])
    assert (pol[0].input_tokens, pol[0].cached_tokens) == (n0, 0)
    o0, o1, d_in, d_out = pol[0].output_tokens, pol[1].output_tokens, dele[0].input_tokens, dele[0].output_tokens
    usd = 1e-6 * (0.05 * n0 + 0.25 * o0) + 1e-6 * (0.05 * n_obs + 0.25 * o1) + 1e-6 * (0.05 * d_in + 0.08 * d_out)
    assert m["trajectory_usd"] == pytest.approx(usd, rel=1e-12)
    # Eq. 15-16 (policy: 0.332 + 3.0e-6 n_in + 6.64e-3 n_out) and Eq. 17 (8B: 0.439 + 3.6e-5 n_in + 4.99e-3 n_out),
    # three stages one after another (Eq. 19)
    secs = (
        (0.332 + 3.0e-6 * n0 + 6.64e-3 * o0)
        + (0.332 + 3.0e-6 * n_obs + 6.64e-3 * o1)
        + (0.439 + 3.6e-5 * d_in + 4.99e-3 * d_out)
    )
    assert m["trajectory_proxy_s"] == pytest.approx(secs, rel=1e-12)
    assert ledger.usd("query") == pytest.approx(usd, rel=1e-12)  # no second account: the ledger is the total


def test_parallel_stage_counts_max_latency(store):
    ctx, ledger, *_ = run(
        store,
        [cur("Lena dress") + cur("cat adoption", instruction="Name the cat"), "<answer>x</answer>"],
        ["short finding", "a much longer finding " * 10],
        constrained=False,
    )
    dele = [c for c in ledger.calls if c.role == "delegate"]
    assert len(dele) == 2 and dele[0].parallel_stage == dele[1].parallel_stage
    pol = [c for c in ledger.calls if c.role == "policy"]
    assert ledger.proxy_s("query") == pytest.approx(sum(c.proxy_s for c in pol) + max(c.proxy_s for c in dele))
    assert ctx.meta["delegate_calls"] == 2


def test_bad_policy_inputs_become_observations(store):
    replies = [
        '<tool_call>{"name": "retrieve_memory", "arguments": {"retrieval_query": "q",}</tool_call>',  # bad JSON
        cur("Lena", model="gpt-9"),  # unknown model
        ret("<answer>red</answer>"),  # answer tag in a query
        ret("a") + ret("b") + ret("c"),  # three calls: the third is not run
        cur("Lena", instruction="x" * 600),  # over-long instruction
        "<answer>red</answer>",
    ]
    ctx, ledger, policy, delegate, *_ = run(store, replies, constrained=False)
    ev = ledger.events
    for e in (
        "mempilot.invalid_call.bad_json",
        "mempilot.invalid_call.unknown_model",
        "mempilot.invalid_call.answer_in_query",
        "mempilot.too_many_calls",
        "mempilot.invalid_call.too_long",
    ):
        assert ev[e] == 1, (e, dict(ev))
    assert delegate.seen == []  # nothing invalid reached a delegate
    obs = [m["content"] for m in policy.seen[-1][0] if m["role"] == "user"][1:]
    assert "error: tool call is not valid JSON" in obs[0] and "unknown model 'gpt-9'" in obs[1]
    assert "at most 2 tool calls per turn" in obs[3] and "the limit is 512" in obs[4]
    m = ctx.meta
    assert not m["format_valid"] and m["policy_answer"] == "red" and m["retrieve_calls"] == 2
    assert any("3 tool calls" in r for r in m["gate_reasons"])


def test_delegate_failures_and_images(store):
    policy = [
        cur("Lena dress"),
        cur("Lena gown"),
        cur("Lena outfit"),
        cur("the dress Lena picked", model="model_vis", k=5, images=True),
        cur("dress photo", k=5, images=True),
        "<answer>red</answer>",
    ]
    delegate = [LLMError("HTTP 500: boom"), "I think <answer>red</answer>", (1.0, "too late"), "captions only"]
    ctx, ledger, pol, dele, vis, _ = run(
        store, policy, delegate, ["it is a red silk dress"], constrained=False, delegate_timeout_s=0.2
    )
    ev = ledger.events
    assert ev["mempilot.delegate_error"] == 1 and ev["llm_error.delegate"] == 1
    assert ev["mempilot.delegate_answer_tag"] == 1 and ev["mempilot.delegate_timeout"] == 1
    assert ev["mempilot.image_missing"] == 1 and ev["mempilot.images_to_text_model"] == 1
    m = ctx.meta
    assert m["tool_errors"] == 3 and not m["format_valid"] and "3 tool execution error(s)" in m["gate_reasons"]
    assert m["image_requests"] == 4 and m["image_accesses"] == 1  # 2 asked per call; 1 file exists
    ((vmsgs, _),) = vis.seen
    parts = vmsgs[1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"] and parts[1]["image_url"]["url"].startswith(
        "data:image/jpeg;base64,"
    )
    vcall = [c for c in ledger.calls if c.role == "delegate" and c.model_id == "gemma-3-270m-q4_k_m" and c.images]
    assert len(vcall) == 1 and vcall[0].images == 1  # the image enters the latency proxy (Eq. 17)
    obs = [mm["content"] for mm in pol.seen[-1][0] if mm["role"] == "user"][1:]
    assert "failed (HTTP 500: boom)" in obs[0] and "contained an <answer> tag" in obs[1] and "timed out" in obs[2]
    assert "image D1:IMG_002: missing file; caption only" in obs[3]
    assert "cannot see images" in obs[4]
    assert "I think" not in ctx.text and "it is a red silk dress" in ctx.text


def test_constrained_turns_schemas_and_unreadable_output(store):
    calls = {
        "tool_calls": [{"name": "retrieve_memory", "arguments": {"retrieval_query": "Lena dress", "evidence_count": 2}}]
    }
    ctx, ledger, policy, *_ = run(
        store, [json.dumps(calls), "not json at all", json.dumps({"answer": "red dress"})], max_rounds=3
    )
    schemas = [kw["json_schema"] for _, kw in policy.seen]
    assert schemas[0]["required"] == ["tool_calls"]  # first turn must consult memory
    assert "anyOf" in schemas[1]  # tools or answer
    assert schemas[2]["required"] == ["answer"]  # last round: answer only
    assert ledger.events["mempilot.unreadable_turn"] == 1
    assert ctx.meta["segments"][0].startswith('<tool_call>{"name": "retrieve_memory"')
    assert ctx.meta["segments"][2] == "<answer>red dress</answer>" and ctx.meta["policy_answer"] == "red dress"
    assert not ctx.meta["format_valid"]  # turn 2 had no tool call


def test_repeat_then_answer_only_and_budget_stop(store):
    calls = json.dumps(
        {"tool_calls": [{"name": "retrieve_memory", "arguments": {"retrieval_query": "Lena", "evidence_count": 2}}]}
    )
    ctx, ledger, policy, *_ = run(store, [calls, calls, json.dumps({"answer": "red"})])
    assert ledger.events["mempilot.repeated_call"] == 1
    assert policy.seen[2][1]["json_schema"]["required"] == ["answer"]
    assert ctx.meta["repeated_calls"] == 1 and ctx.meta["retrieve_calls"] == 1 and ctx.meta["format_valid"]
    # a hard USD budget that holds the first turn's worst case (its prompt + 256 output tokens at
    # qwen3-4b's 0.05 / 0.25 USD per 1M, MemPilot Eq. 14) but not the second's: turn 2 is never made
    strat = MemPilot(
        MemPilotConfig(compressor="offline", constrained=False),
        profile=profile(),
        policy=ScriptedClient(model_id=GEMMA),
    )
    msgs = (
        strat.orchestrator(_env(store, ScriptedClient(model_id=GEMMA)), Preference.preset("balanced"), Budget())
        .start(QUESTION, "0")
        .messages
    )
    n_in = sum(len(m["content"].split()) + 8 for m in msgs)  # predicted prompt: words + 8 per message
    cap = 1e-6 * (0.05 * n_in + 0.25 * 256) * 1.0001
    ctx, ledger, policy, *_ = run(
        store, [ret("Lena"), "<answer>red</answer>"], constrained=False, budget=Budget(max_usd=cap)
    )
    assert [c.role for c in ledger.calls] == ["policy"] and len(policy.seen) == 1
    assert ledger.events["budget.call_refused.policy"] == 1 and ctx.meta["stopped_by_budget"]
    assert 0 < ledger.usd("query") <= cap and ctx.meta["trajectory_usd"] == ledger.usd("query")
    # a cap below any turn: nothing is spent
    ctx, ledger, policy, *_ = run(store, [ret("Lena")], constrained=False, budget=Budget(max_usd=1e-9))
    assert ledger.calls == [] and policy.seen == [] and ctx.meta["stopped_by_budget"]


def test_policy_failure_and_permutation(store):
    ctx, ledger, *_ = run(store, [LLMError("down")], constrained=False)
    assert ledger.events["llm_error.policy"] == 1 and ctx.meta["policy_error"] == "down" and ctx.text == ""
    strat = get_strategy("mempilot", pool="local")
    pool = ModelPool(strat.profile, BOOK)
    from memfrontier.strategies.mempilot.orchestrator import Orchestrator

    env = _env(None, ScriptedClient(model_id=GEMMA))
    orch = Orchestrator(pool=pool, views=None, policy=env.llm, env=env)
    a, b, c = orch.start(QUESTION, "0"), orch.start(QUESTION, "0"), orch.start(QUESTION, "1")
    assert a.model_order == b.model_order and a.tool_order == b.tool_order
    assert sorted(a.model_order) == sorted(pool.ids)
    assert (a.model_order, a.tool_order) != (c.model_order, c.tool_order)
    system = a.messages[0]["content"]
    assert system.index(a.model_order[0]) < system.index(a.model_order[1])  # cards in the permuted order
    assert "meta-llama" not in system and "qwen" not in system  # only opaque ids


# ----------------------------------------------------------------------------- end to end (real model)


async def _e2e(tmp_path, records, questions):
    from memfrontier.api import AsyncMemory

    mem = AsyncMemory.open(tmp_path / "store")
    await asyncio.to_thread(mem.store.add, records)
    # smoke sizes: at most 3 policy turns, observations cut to 256 tokens (shorter prompts per turn)
    strat = get_strategy("mempilot", pool="local", preference="balanced", max_rounds=3, max_observation_tokens=256)
    scope = records[0].scope
    await mem.construct(strat, scope)
    assert strat.bank(mem.env).count(scope, "compressed") == len(mem.store.chunks(scope))
    out = []
    for q in questions:
        ans = await mem.ask(q.question, user_id=scope.user_id, strategy=strat)
        out.append(ans)
    mem.close()
    return out


def _check(ans):
    m = ans.meta
    assert m["rounds"] >= 2 and m["retrieve_calls"] + m["curate_calls"] >= 1  # first turn consults memory
    assert isinstance(m["format_valid"], bool) and m["pool"] == "local"
    roles = ans.usage.by_role
    assert roles["policy"].calls == m["rounds"] and roles["answerer"].calls == 1
    assert roles["policy"].cached_tokens > 0  # later turns reuse the prefix (Eq. 14)
    assert ans.usage.query.usd > 0 and ans.usage.query.proxy_s > 0
    assert ans.context.strip() and isinstance(ans.text, str)


@pytest.mark.slow
@pytest.mark.data
def test_end_to_end_locomo_local_pool(tmp_path):
    from memfrontier.eval.datasets import load_dataset

    conv = next(c for c in load_dataset("locomo", "test") if c.id == "conv-49")
    recs = [r for r in conv.records if r.session_id in ("conv-49:session_1", "conv-49:session_2")]
    ids = {r.id for r in recs}
    qs = [q for q in conv.questions if q.evidence_ids and set(q.evidence_ids) <= ids][:1]
    (ans,) = asyncio.run(_e2e(tmp_path, recs, qs))
    _check(ans)


@pytest.mark.slow
@pytest.mark.data
def test_end_to_end_mem_gallery_local_pool(tmp_path):
    from memfrontier.eval.datasets import load_dataset

    conv = load_dataset("mem_gallery", "test")[0]
    recs = [r for r in conv.records if r.session_id.endswith(":D1")]
    ids = {r.id for r in recs}
    qs = [q for q in conv.questions if q.evidence_ids and set(q.evidence_ids) <= ids][:1]
    (ans,) = asyncio.run(_e2e(tmp_path, recs, qs))
    _check(ans)


def test_pool_profiles(tmp_path):
    from memfrontier.core.pricebook import UnpricedModelError

    local, table3 = PoolProfile.load("local"), PoolProfile.load("table3")
    assert local.ids == table3.ids and len(local.ids) == 12 and local.endpoint == "embedded"
    assert "STAND-IN" in local.description and table3.base_url == "https://openrouter.ai/api/v1"
    assert local.card("model_b791") == "- model_b791: input text + image; parameters 8B"
    pool = ModelPool(table3, BOOK)
    assert pool.sees_pixels("model_b791") and not pool.sees_pixels("model_7ab3")
    assert ModelPool(local, BOOK).is_vision("model_b791") and not ModelPool(local, BOOK).sees_pixels("model_b791")
    # Table 3 numbers come from the price book entry of each route's model
    p = BOOK.get(table3.route("model_9a74").model)
    assert (p.input_usd_per_mtok, p.output_usd_per_mtok, p.latency.img_s_per_image) == (0.21, 1.90, 1.722)
    with pytest.raises(KeyError, match="no route 'model_x'"):
        table3.route("model_x")
    bad = tmp_path / "pool.yaml"
    bad.write_text(
        "name: p\nroutes:\n  - {id: a, model: meta-llama/llama-3.1-8b-instruct}\n  - {id: a, model: qwen3-14b}\n"
    )
    with pytest.raises(ValueError, match="duplicate route ids: a"):
        PoolProfile.load(bad)
    bad.write_text("name: p\nroutes:\n  - {id: r1, model: not-a-priced-model}\n")
    with pytest.raises(UnpricedModelError):
        ModelPool(PoolProfile.load(bad), BOOK)
    with pytest.raises(ValueError, match="unknown pool"):
        PoolProfile.load("tabel3")
    with pytest.raises(KeyError, match="unknown routes"):
        ModelPool(local, BOOK, backends={"nope": ScriptedClient(model_id=GEMMA)})


def _fake_install(monkeypatch, tmp_path):
    """Make the registry's installed check pass for the split models (nothing is loaded here)."""
    from memfrontier.llm import local_models

    monkeypatch.setattr(local_models, "model_file", lambda m, directory=None: tmp_path / m.hub.file)


def test_bench_pool_routes_are_three_real_sizes_each_priced_as_itself(store, tmp_path, monkeypatch):
    from memfrontier.llm.embedded import EmbeddedLLM

    bench = PoolProfile.load("bench")
    assert bench.endpoint == "embedded" and bench.policy_price_as is None and len(bench.ids) == 3
    routes = bench.routes
    assert [r.local_model for r in routes] == ["gemma-3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b"]
    assert [r.model for r in routes] == [GEMMA, "qwen2.5-coder-0.5b-q4_k_m", "qwen2.5-coder-1.5b-q4_k_m"]
    assert [bench.card(r.id).rsplit(" ", 1)[1] for r in routes] == ["270M", "0.5B", "1.5B"]
    _fake_install(monkeypatch, tmp_path)
    policy = ScriptedClient(model_id="qwen2.5-coder-1.5b-q4_k_m")
    strat = MemPilot(MemPilotConfig(pool="bench", compressor="offline"), policy=policy)
    env = _env(store, policy)
    pool = strat.pool(env)
    # one call of 1000 input and 100 output tokens on each route, by hand from core/prices/v1.yaml:
    # USD = (1000 * in + 100 * out) / 1e6; proxy s = base + 1000 * in_s + 100 * out_s (Eq. 15-17)
    want = {
        GEMMA: (1.2e-5, 0.05 + 1.5 + 2.0),
        "qwen2.5-coder-0.5b-q4_k_m": (1.1e-5, 0.3 + 6.0 + 5.0),
        "qwen2.5-coder-1.5b-q4_k_m": (4.4e-5, 0.3 + 12.0 + 8.0),
    }
    for r in routes:
        llm = pool.llm(r.id, env)
        assert llm.priced_as == r.model and llm.model_id == r.model  # served by that model, priced as itself
        backend = llm.client.client
        assert isinstance(backend, EmbeddedLLM) and backend.entry.name == r.local_model
        assert (llm.price.usd(1000, 100), llm.price.latency.seconds(1000, 100)) == pytest.approx(want[r.model])
    # the policy is priced as the model that runs it, and its cards show the real sizes
    orch = strat.orchestrator(env, Preference(), Budget())
    assert orch.policy.priced_as == "qwen2.5-coder-1.5b-q4_k_m"
    system = orch.start(QUESTION, "0").messages[0]["content"]
    assert all(f"parameters {p}" in system for p in ("270M", "0.5B", "1.5B")) and "qwen" not in system


def test_bench_pool_refuses_a_model_that_is_not_installed(tmp_path, monkeypatch):
    from memfrontier.llm.local_models import ModelNotInstalledError

    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    bench = PoolProfile.load("bench")  # the profile itself loads anywhere
    with pytest.raises(ModelNotInstalledError, match=r"'qwen2.5-0.5b' is not installed .*make bench-model"):
        MemPilot(MemPilotConfig(pool="bench"))
    with pytest.raises(ModelNotInstalledError, match="make bench-model"):
        ModelPool(bench, BOOK)
    with pytest.raises(ValueError, match="unknown local model 'qwen-9b'"):
        Route(id="r", model=GEMMA, local_model="qwen-9b")
    with pytest.raises(ValueError, match="local_model is for embedded routes only: r"):
        PoolProfile(name="p", endpoint="openai", routes=[Route(id="r", model=GEMMA, local_model="gemma-3-270m")])

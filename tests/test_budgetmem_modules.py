"""BudgetMem modules and pipeline with real components: LoCoMo conv-49 (sessions 1-3) in a real
SQLite/BM25/MiniLM store, MiniLM for the Mid tiers, the embedded Gemma 3 270M for the High tier.

A scripted fake model appears only in the control-flow tests of the fallback chain."""

from __future__ import annotations

import asyncio
from datetime import date, datetime

import numpy as np
import pytest
from fakes import ScriptedClient

from memfrontier import Memory
from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Budget, Chunk, Preference, Scope
from memfrontier.eval.datasets import load_dataset
from memfrontier.llm.embedded import MODEL_ID
from memfrontier.llm.metered import MeteredLLM
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import HYBRID_RRF
from memfrontier.strategies import MemoryEnv, Query, get_strategy
from memfrontier.strategies.budgetmem import (
    EXTRACTORS,
    MODULES,
    BudgetMem,
    BudgetMemConfig,
    BudgetMemModules,
    CapacityTiering,
    ModuleCache,
    ReasoningTiering,
    SummaryInput,
)
from memfrontier.strategies.budgetmem.rules import resolve_temporal, temporal_cues

# most tests read conv-49 from the benchmark data (module fixtures): skipped without it, failed under CI
pytestmark = pytest.mark.data

QUESTION = "When did Evan go to Jasper with his family?"
SCOPE = Scope(user_id="conv-49")


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    (conv,) = [c for c in load_dataset("locomo", "test") if c.id == "conv-49"]
    m = Memory.open(tmp_path_factory.mktemp("bm-store"))
    sessions = {f"conv-49:session_{i}" for i in (1, 2, 3)}
    m.aio.store.add([r for r in conv.records if r.session_id in sessions])
    yield m
    m.close()


@pytest.fixture(scope="module")
def chunks(memory):
    """The two smallest of the top-5 chunks for the question (short High-tier prompts)."""
    hits = hybrid_search(memory.aio.store, QUESTION, SCOPE, HYBRID_RRF, 5)
    small = sorted((h.chunk for h in hits), key=lambda c: c.n_tokens)[:2]
    assert len(small) == 2 and all(c.timestamp for c in small)
    return small


@pytest.fixture(scope="module")
def rt(memory):
    return BudgetMemModules(memory.aio.env, "implementation", config=BudgetMemConfig(module_topk=2, max_relations=4))


def module_input(module: str, chunks: list[Chunk]):
    if module == "summary":
        return SummaryInput(
            chunks=chunks,
            entity=["Evan - took - family to Jasper (2023-05-24)"],
            temporal=["weekend of 2023-05-20: Evan: Last weekend, I took my family to Jasper."],
            topic=["2023-05-24: topics: road, trip, jasper"],
        )
    return chunks


def check_contract(module: str, out, inp, topk: int, max_relations: int):
    if module == "filter":
        assert isinstance(out, list) and all(isinstance(c, Chunk) for c in out)
        assert 1 <= len(out) <= topk
        assert {c.id for c in out} <= {c.id for c in inp}
    elif module in EXTRACTORS:
        assert isinstance(out, list) and all(isinstance(s, str) and s.strip() for s in out)
        assert len(out) <= max_relations and len(set(out)) == len(out)
    else:
        assert isinstance(out, str) and out.strip()


# --- the tier interface, every module x every tier (implementation tiering) -----------------
@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("tier", ["low", "mid"])
def test_local_tiers_meet_the_contract_and_cost_nothing(rt, chunks, module, tier):
    inp = module_input(module, chunks)
    ledger = Ledger()
    with use_ledger(ledger):
        out = run(rt.modules[module].run(QUESTION, inp, tier))
    check_contract(module, out, inp, rt.module_topk, rt.max_relations)
    (call,) = ledger.calls
    assert call.role == f"budgetmem.{module}"
    assert call.model_id == {"low": "rules", "mid": "minilm"}[tier]
    assert call.usd == 0.0 and call.proxy_s == 0.0 and call.wall_s > 0
    assert call.input_tokens == call.output_tokens == 0
    assert not ledger.events  # nothing fell back


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_high_tier_calls_the_embedded_llm_and_meets_the_contract(rt, chunks, module):
    inp = module_input(module, chunks)
    ledger = Ledger()
    with use_ledger(ledger):
        res = run(rt.run_traced(rt.modules[module], QUESTION, inp, "high"))
    check_contract(module, res.output, inp, rt.module_topk, rt.max_relations)
    high = [c for c in ledger.calls if c.role == f"budgetmem.{module}.high"]
    assert len(high) == 1
    c = high[0]
    assert c.model_id == MODEL_ID and c.input_tokens > 0 and c.output_tokens > 0
    assert c.usd > 0 and c.proxy_s > 0 and c.error is None
    assert res.usd == pytest.approx(c.usd)
    # a High output that did not parse would have fallen back visibly, never silently
    if res.tier_used == "high":
        assert res.fallbacks == [] and not ledger.events
    else:
        assert ledger.events[f"fallback.{module}.high"] == 1


def test_filter_tiers_rank_the_relevant_chunk_first(rt, memory):
    hits = hybrid_search(memory.aio.store, QUESTION, SCOPE, HYBRID_RRF, 5)
    inp = [h.chunk for h in hits]
    jasper = [c for c in inp if "Jasper" in c.text]
    assert jasper
    with use_ledger(Ledger()):
        for tier in ("low", "mid"):
            out = run(rt.filter.run(QUESTION, inp, tier))
            assert "Jasper" in out[0].text


def test_empty_filter_result_passes_the_top_chunks_on(rt, chunks):
    ledger = Ledger()
    with use_ledger(ledger):
        out = run(rt.filter.run("zzqx vvbn", chunks, "low"))  # no keyword overlap at all
    assert [c.id for c in out] == [c.id for c in chunks[: rt.module_topk]]
    assert ledger.events["filter.empty.low"] == 1


# --- rules: temporal resolution ---------------------------------------------------------------
def test_low_temporal_resolves_relative_dates_against_the_session_date(rt):
    # 18 May 2023 is a Thursday: yesterday = 17 May, last Friday = 12 May, last weekend = 13 May
    chunk = Chunk(
        id="c-t",
        scope=SCOPE,
        session_id="s",
        timestamp="2023-05-18T13:47:00",
        text='Evan said, "I went hiking yesterday with my dog."\n'
        'Sam said, "Last Friday I started painting. Two weeks ago I bought a kayak."\n'
        'Evan said, "Last weekend we drove to Jasper."',
        record_ids=["r1", "r2", "r3"],
        n_tokens=40,
    )
    assert date(2023, 5, 18).weekday() == 3
    ledger = Ledger()
    with use_ledger(ledger):
        out = run(rt.temporal.run("When did Evan go hiking?", [chunk], "low"))
    assert out[0] == "2023-05-17: Evan: I went hiking yesterday with my dog."
    rt_all = BudgetMemModules(rt.env, config=BudgetMemConfig(max_relations=10))
    with use_ledger(Ledger()):
        facts = run(rt_all.temporal.run("painting", [chunk], "low"))
    assert "2023-05-12: Sam: Last Friday I started painting." in facts
    assert "week of 2023-05-04: Sam: Two weeks ago I bought a kayak." in facts
    assert "weekend of 2023-05-13: Evan: Last weekend we drove to Jasper." in facts
    assert ledger.calls[0].model_id == "rules" and ledger.calls[0].usd == 0.0


def test_temporal_cues_and_resolution_edge_cases():
    base = datetime(2023, 5, 18, 13, 47)
    assert temporal_cues("I may go. In May 2023 we met on 7 May.") == ["May 2023", "7 May"]
    assert resolve_temporal("7 May 2023", base) == "2023-05-07"
    assert resolve_temporal("last year", base) == "2022"
    assert resolve_temporal("last month", base) == "2023-04"
    assert resolve_temporal("recently", base) is None
    assert resolve_temporal("yesterday", None) is None


# --- fallback chain (scripted fake model: control flow only) ----------------------------------
def fake_env(memory, client) -> MemoryEnv:
    llm = MeteredLLM(client, PriceBook.load(), allow_unpriced=True)
    return MemoryEnv(store=memory.aio.store, llm=llm, answer_llm=llm)


def test_unparseable_high_output_falls_back_to_mid_and_is_counted(memory, chunks):
    rt = BudgetMemModules(
        fake_env(memory, ScriptedClient(["Sure! Evan went to Jasper."], model_id="scripted-fake", repeat_last=True)),
        config=BudgetMemConfig(module_topk=2),
    )
    ledger = Ledger()
    with use_ledger(ledger):
        res = run(rt.run_traced(rt.entity, QUESTION, chunks, "high"))
        scores = run(rt.run_traced(rt.filter, QUESTION, chunks, "high"))  # prose, no scores
    assert res.tier == "high" and res.tier_used == "mid" and res.fallbacks == ["high"]
    assert res.output == run(rt.entity.run(QUESTION, chunks, "mid"))
    assert scores.tier_used == "mid" and len(scores.output) >= 1
    assert ledger.events["fallback.entity.high"] == 1 and ledger.events["fallback.filter.high"] == 1
    # why each fell back is counted beside it (a refused run names it)
    assert ledger.events["output_rejected.entity.high.unparseable"] == 1
    assert ledger.events["output_rejected.filter.high.unparseable"] == 1
    roles = [(c.role, c.model_id) for c in ledger.calls]
    assert roles[:2] == [("budgetmem.entity.high", "scripted-fake"), ("budgetmem.entity", "minilm")]


def test_wrong_number_of_filter_scores_falls_back(memory, chunks):
    rt = BudgetMemModules(
        fake_env(memory, ScriptedClient(['{"answer": [7]}'], repeat_last=True)), config=BudgetMemConfig(module_topk=2)
    )
    ledger = Ledger()
    with use_ledger(ledger):
        res = run(rt.run_traced(rt.filter, QUESTION, chunks, "high"))
    assert res.tier_used == "mid" and ledger.events["fallback.filter.high"] == 1
    assert ledger.events["output_rejected.filter.high.wrong_count"] == 1


def test_llm_tierings_fall_through_every_tier_to_the_rules(memory, chunks):
    client = ScriptedClient(["no json", "still none", "nothing"])
    rt = BudgetMemModules(fake_env(memory, client), ReasoningTiering(), config=BudgetMemConfig(module_topk=2))
    ledger = Ledger()
    with use_ledger(ledger):
        res = run(rt.run_traced(rt.temporal, QUESTION, chunks, "high"))
    assert res.fallbacks == ["high", "mid", "low"] and res.tier_used == "rules"
    assert client.n_calls == 3
    assert [c.role for c in ledger.calls] == [
        "budgetmem.temporal.high",
        "budgetmem.temporal.mid",
        "budgetmem.temporal.low",
        "budgetmem.temporal",
    ]
    assert {k: v for k, v in ledger.events.items()} == {
        "fallback.temporal.high": 1,
        "fallback.temporal.mid": 1,
        "fallback.temporal.low": 1,
        "output_rejected.temporal.high.unparseable": 1,
        "output_rejected.temporal.mid.unparseable": 1,
        "output_rejected.temporal.low.unparseable": 1,
    }


def test_valid_scripted_json_is_used(memory, chunks):
    reply = '{"answer": ["Evan - visited - Jasper (May 2023)", "Evan - visited - Jasper (May 2023)", " "]}'
    rt = BudgetMemModules(fake_env(memory, ScriptedClient([reply], repeat_last=True)))
    with use_ledger(Ledger()):
        out = run(rt.entity.run(QUESTION, chunks, "high"))
    assert out == ["Evan - visited - Jasper (May 2023)"]


# --- cache ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cache_returns_the_same_output_without_new_calls(memory, chunks, tmp_path):
    cache = ModuleCache(tmp_path / "cache.json")
    rt = BudgetMemModules(memory.aio.env, cache=cache, config=BudgetMemConfig(module_topk=2, max_relations=4))
    ledger = Ledger()
    with use_ledger(ledger):
        first = run(rt.run_traced(rt.topic, QUESTION, chunks, "high"))
        n = len(ledger.calls)
        second = run(rt.run_traced(rt.topic, QUESTION, chunks, "high"))
        filt = run(rt.filter.run(QUESTION, chunks, "mid"))
        filt_again = run(rt.filter.run(QUESTION, chunks, "mid"))
    assert n == 1 and first.calls == 1 and first.usd > 0 and not first.cached
    assert second.cached and second.output == first.output and second.usd == first.usd
    assert len(ledger.calls) == n + 1  # only the first filter run was executed
    assert [c.id for c in filt_again] == [c.id for c in filt]
    assert ledger.events["cache_hit.topic"] == 1 and ledger.events["cache_hit.filter"] == 1
    # another question, tier or input is another key
    with use_ledger(Ledger()) as other:
        run(rt.topic.run(QUESTION, chunks, "low"))
    assert len(other.calls) == 1
    # persisted: a fresh cache from the file hits without a model call
    cache.save()
    rt2 = BudgetMemModules(
        memory.aio.env,
        cache=ModuleCache(tmp_path / "cache.json"),
        config=BudgetMemConfig(module_topk=2, max_relations=4),
    )
    with use_ledger(Ledger()) as again:
        third = run(rt2.topic.run(QUESTION, chunks, "high"))
    assert third == first.output and again.calls == []


# --- the other tiering strategies on the embedded model ----------------------------------------
@pytest.mark.slow
def test_reasoning_and_capacity_tierings_run_on_the_embedded_model(memory, chunks):
    small = chunks[:1]
    for tiering, tier in (
        (ReasoningTiering(), "mid"),
        (CapacityTiering({"low": "local", "mid": "local", "high": "local"}), "low"),
    ):
        rt = BudgetMemModules(memory.aio.env, tiering, config=BudgetMemConfig(module_topk=1, max_relations=3))
        ledger = Ledger()
        with use_ledger(ledger):
            res = run(rt.run_traced(rt.entity, QUESTION, small, tier))
        check_contract("entity", res.output, small, 1, 3)
        c = ledger.calls[0]
        assert c.role == f"budgetmem.entity.{tier}" and c.model_id == MODEL_ID and c.output_tokens > 0


def test_capacity_tiering_needs_three_tiers():
    with pytest.raises(ValueError):
        CapacityTiering({"low": "local", "high": "local"})
    t = CapacityTiering()
    assert t.specs["high"] == "openai:meta-llama/llama-3.3-70b-instruct"
    assert CapacityTiering("hosted").specs == t.specs
    with pytest.raises(ValueError, match="unknown capacity preset 'lokal'; choose one of hosted, local"):
        CapacityTiering("lokal")


LOCAL_TIERS = {"low": "local:gemma-3-270m", "mid": "local:qwen2.5-0.5b", "high": "local:qwen2.5-1.5b"}


def test_capacity_local_preset_is_three_embedded_models_priced_as_themselves(memory, tmp_path, monkeypatch):
    from memfrontier.llm import local_models

    # the registry's installed check passes for the split models (nothing of theirs is loaded here)
    monkeypatch.setattr(local_models, "model_file", lambda m, directory=None: tmp_path / m.hub.file)
    strat = get_strategy("budgetmem", tiering="capacity", tiering_options={"models": "local"}, tiers="low")
    assert strat.tiering.specs == LOCAL_TIERS
    # an env of its own: the clients it caches point at the stand-in files and must not reach other tests
    shared = memory.aio.env
    env = MemoryEnv(store=shared.store, llm=shared.llm, answer_llm=shared.answer_llm)
    t = strat.tiering
    models = {tier: t.model(tier, env) for tier in LOCAL_TIERS}
    assert {tier: (m.model_id, m.priced_as) for tier, m in models.items()} == {
        "low": ("gemma-3-270m-q4_k_m",) * 2,
        "mid": ("qwen2.5-coder-0.5b-q4_k_m",) * 2,
        "high": ("qwen2.5-coder-1.5b-q4_k_m",) * 2,
    }
    # 1000 input + 100 output tokens, by hand from core/prices/v1.yaml (USD; proxy seconds, Eq. 15-17)
    assert [m.price.usd(1000, 100) for m in models.values()] == pytest.approx([1.2e-5, 1.1e-5, 4.4e-5])
    assert [m.price.latency.seconds(1000, 100) for m in models.values()] == pytest.approx([3.55, 11.3, 20.3])
    assert t.fingerprint(env) == (
        "capacity|reflect|low=gemma-3-270m-q4_k_m|mid=qwen2.5-coder-0.5b-q4_k_m|high=qwen2.5-coder-1.5b-q4_k_m"
    )
    # one client per spec and env; one loaded model per process, whichever tier, env or module uses it
    assert t.model("mid", env) is models["mid"]
    other = MemoryEnv(store=env.store, llm=env.llm, answer_llm=env.answer_llm)
    low_again = t.model("low", other)
    assert low_again is not models["low"]
    assert low_again.client._model()[0] is models["low"].client._model()[0] is env.llm.client._model()[0]


def test_capacity_local_preset_refuses_a_model_that_is_not_installed(tmp_path, monkeypatch):
    from memfrontier.llm.local_models import ModelNotInstalledError

    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    with pytest.raises(ModelNotInstalledError, match=r"'qwen2.5-0.5b' is not installed .*make bench-model"):
        get_strategy("budgetmem", tiering="capacity", tiering_options={"models": "local"}, tiers="low")


@pytest.mark.slow
def test_capacity_local_mid_tier_runs_on_the_installed_qwen_0_5b(memory, chunks):
    from memfrontier.llm import embedded, local_models

    try:
        entry = local_models.require_installed("qwen2.5-0.5b")
    except local_models.ModelNotInstalledError as e:
        pytest.skip(f"bench model not installed: {e}")
    small = chunks[:1]
    ledger = Ledger()
    rt = BudgetMemModules(
        memory.aio.env, CapacityTiering("local"), config=BudgetMemConfig(module_topk=1, max_relations=3)
    )
    with use_ledger(ledger):
        res = run(rt.run_traced(rt.entity, QUESTION, small, "mid"))
    check_contract("entity", res.output, small, 1, 3)
    # another tiering in another env (as another strategy's): the same loaded model
    other = MemoryEnv(store=memory.aio.store, llm=memory.aio.env.llm, answer_llm=memory.aio.env.answer_llm)
    mid = CapacityTiering("local").model("mid", other)
    assert mid is not rt.tiering.model("mid", memory.aio.env)
    assert mid.client._model()[0] is rt.tiering.model("mid", memory.aio.env).client._model()[0]
    assert [k for k in embedded._MODELS if k[0] == entry.path()] == [(entry.path(), entry.n_ctx)]
    c = ledger.calls[0]
    assert (c.role, c.model_id, c.priced_as) == (
        "budgetmem.entity.mid",
        "qwen2.5-coder-0.5b-q4_k_m",
        "qwen2.5-coder-0.5b-q4_k_m",
    )
    assert c.output_tokens > 0 and c.usd == pytest.approx((c.input_tokens * 0.01 + c.output_tokens * 0.01) / 1e6)


# --- the strategy end to end --------------------------------------------------------------------
@pytest.mark.slow
def test_pipeline_end_to_end_with_one_parallel_extraction_stage(memory):
    strat = BudgetMem(
        BudgetMemConfig(
            k=2,
            module_topk=2,
            max_relations=4,
            tiers={"filter": "mid", "entity": "high", "temporal": "high", "topic": "high", "summary": "high"},
        )
    )
    ans = memory.ask(QUESTION, user_id="conv-49", strategy=strat)
    assert ans.strategy == "budgetmem"
    meta = ans.meta
    assert meta["tiers"] == {"filter": "mid", "entity": "high", "temporal": "high", "topic": "high", "summary": "high"}
    assert set(meta["tiers_used"]) == set(MODULES) and meta["extraction_usd"] > 0
    assert 1 <= len(meta["filtered_chunks"]) <= 2 and set(meta["filtered_chunks"]) <= set(meta["retrieved_chunks"])
    assert ans.context.strip() and ans.evidence_ids
    assert all(i.startswith("conv-49:D") for i in ans.evidence_ids)
    roles = ans.usage.by_role
    assert roles["budgetmem.filter"].calls == 1 and roles["budgetmem.filter"].usd == 0.0
    for m in ("entity", "temporal", "topic", "summary"):
        assert roles[f"budgetmem.{m}.high"].calls == 1 and roles[f"budgetmem.{m}.high"].input_tokens > 0
    assert roles["answerer"].calls == 1
    assert ans.usage.query.usd > 0 and ans.usage.query.proxy_s > 0


@pytest.mark.slow
def test_extraction_calls_share_one_parallel_stage(memory):
    ledger = Ledger()
    strat = BudgetMem(
        BudgetMemConfig(
            k=2,
            module_topk=2,
            max_relations=3,
            tiers={"filter": "low", "entity": "high", "temporal": "mid", "topic": "high", "summary": "low"},
        )
    )
    memory._run(memory.aio.answer(QUESTION, Scope(user_id="conv-49"), strat, ledger=ledger))
    stage = {c.role: c.parallel_stage for c in ledger.calls}
    ext = {stage["budgetmem.entity.high"], stage["budgetmem.temporal"], stage["budgetmem.topic.high"]}
    assert len(ext) == 1
    (p,) = ext
    assert p not in (stage["budgetmem.filter"], stage["budgetmem.summary"], stage["answerer"])
    # the stage counts as its slowest call in the latency proxy (MemPilot Eq. 18)
    ext_calls = [c for c in ledger.calls if c.parallel_stage == p]
    others = [c for c in ledger.calls if c.parallel_stage != p]
    assert ledger.proxy_s() == pytest.approx(max(c.proxy_s for c in ext_calls) + sum(c.proxy_s for c in others))


def test_all_low_pipeline_through_the_registry(memory):
    strat = get_strategy("budgetmem", tiers="low")
    ledger = Ledger()
    with use_ledger(ledger):
        ctx = run(strat.context(Query(text=QUESTION, scope=SCOPE), memory.aio.env, Preference(), Budget()))
    assert "Jasper" in ctx.text and ctx.meta["tiers_used"] == {m: "low" for m in MODULES}
    assert all(c.usd == 0.0 and c.model_id == "rules" for c in ledger.calls)
    assert ctx.meta["extraction_usd"] == 0.0
    assert len({c.parallel_stage for c in ledger.calls}) == 3  # filter | 3 extractors | summary


class StubRouter:
    """A deterministic ``decide`` (control flow of the routing only)."""

    def __init__(self, tiers: dict[str, str]):
        self.tiers = tiers
        self.seen: list[tuple[str, int, bool]] = []

    def decide(self, query_emb, input_emb, module, greedy):
        self.seen.append((module, int(np.asarray(input_emb).shape[0]), greedy))
        return self.tiers[module], -1.0986, 0.25


def test_router_decides_tiers_from_query_and_input_embeddings(memory):
    router = StubRouter({"filter": "mid", "entity": "low", "temporal": "mid", "topic": "low", "summary": "mid"})
    strat = BudgetMem(BudgetMemConfig(k=3, greedy=False), router=router)
    with use_ledger(Ledger()) as ledger:
        ctx = run(strat.context(Query(text=QUESTION, scope=SCOPE), memory.aio.env, Preference(), Budget()))
    assert [s[0] for s in router.seen] == list(MODULES)
    assert all(dim == 384 and greedy is False for _, dim, greedy in router.seen)
    assert ctx.meta["tiers"] == router.tiers and ctx.meta["k"] == 3
    assert [d["module"] for d in ctx.meta["decisions"]] == list(MODULES)
    assert len(ctx.meta["query_emb"]) == 384 and len(ctx.meta["decisions"][0]["input_emb"]) == 384
    assert ledger.usage().by_role["budgetmem.router"].calls == 3  # filter, extractors, summary
    with pytest.raises(ValueError):
        BudgetMem(BudgetMemConfig(tiers="low"), router=router)


def test_no_retrieved_chunks_gives_an_empty_counted_context(memory):
    strat = BudgetMem(BudgetMemConfig(tiers="low"))
    with use_ledger(Ledger()) as ledger:
        ctx = run(
            strat.context(Query(text=QUESTION, scope=Scope(user_id="nobody")), memory.aio.env, Preference(), Budget())
        )
    assert ctx.text == "" and ctx.evidence_ids == [] and ledger.events["budgetmem.no_chunks"] == 1


@pytest.mark.slow
def test_hard_budget_stops_paid_module_calls(memory):
    strat = BudgetMem(BudgetMemConfig(k=1, module_topk=1, tiers="high"))
    with use_ledger(Ledger()) as ledger:
        ctx = run(strat.context(Query(text=QUESTION, scope=SCOPE), memory.aio.env, Preference(), Budget(max_tokens=10)))
    # no High call fits 10 tokens (prompt + max_tokens): none is made, each module falls back to Mid
    assert [c for c in ledger.calls if c.usd or c.input_tokens] == []
    assert all(ledger.events[f"budget.call_refused.budgetmem.{m}.high"] == 1 for m in MODULES)
    assert ctx.meta["tiers_used"] == {m: "mid" for m in MODULES}
    assert ctx.meta["fallbacks"] == {m: ["high"] for m in MODULES}


@pytest.mark.slow
def test_real_tier_router_checkpoint_is_loaded_and_used(memory, tmp_path):
    torch = pytest.importorskip("torch")
    from memfrontier.strategies.budgetmem.router import TierRouter

    torch.manual_seed(0)
    path = tmp_path / "router.pt"
    TierRouter.from_embedder(memory.aio.store.embedder.encode).save(path)
    strat = get_strategy("budgetmem", k=1, module_topk=1, max_relations=3, router=path)
    with use_ledger(Ledger()):
        ctx = run(strat.context(Query(text=QUESTION, scope=SCOPE), memory.aio.env, Preference(), Budget()))
    decisions = ctx.meta["decisions"]
    assert [d["module"] for d in decisions] == list(MODULES)
    assert all(d["tier"] in ("low", "mid", "high") and d["logprob"] < 0 for d in decisions)
    assert ctx.meta["tiers"] == {d["module"]: d["tier"] for d in decisions}
    assert "query_emb" not in ctx.meta  # greedy (test-time) decisions keep no states

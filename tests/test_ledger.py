"""Ledger, price book and cost equations against hand-computed values."""

import asyncio
import math

import pytest
from fakes import ScriptedClient

from memfrontier.core.cost import amortization_table, amortized_cost_usd, qpc, trajectory_proxy_s
from memfrontier.core.ledger import Ledger, sum_usage_records, use_ledger
from memfrontier.core.pricebook import ModelPrice, PriceBook, UnpricedModelError
from memfrontier.llm.base import Completion, LLMError
from memfrontier.llm.metered import MeteredLLM


def test_call_usd_memorycpt_eq4():
    # 1000 input tokens at $0.10/M + 200 output at $0.24/M = 1.0e-4 + 4.8e-5
    p = ModelPrice(input_usd_per_mtok=0.10, output_usd_per_mtok=0.24)
    assert p.usd(1000, 200) == pytest.approx(1.48e-4, rel=1e-12)


def test_cached_and_reasoning_tokens_not_double_counted():
    # 10,000 input of which 4,000 cached; 500 output of which 100 reasoning.
    # 6,000 x $1 + 4,000 x $0.25 + 500 x $5 = 9,500 micro-USD
    p = ModelPrice(input_usd_per_mtok=1.0, output_usd_per_mtok=5.0, cached_input_usd_per_mtok=0.25)
    assert p.usd(10_000, 500, cached_tokens=4_000, reasoning_tokens=100) == pytest.approx(9.5e-3)
    with pytest.raises(ValueError):
        p.usd(10, 5, cached_tokens=11)


def test_latency_profile_mempilot_eq17():
    # Llama-3.3-70B (0.475, 9.2e-5, 2.194e-2): 1000 in, 50 out -> 0.475 + 0.092 + 1.097
    book = PriceBook.load()
    prof = book.get("meta-llama/llama-3.3-70b-instruct").latency
    assert prof.seconds(1000, 50) == pytest.approx(1.664)
    vlm = book.get("qwen/qwen3-vl-8b-instruct").latency
    assert vlm.seconds(0, 0, 2) == pytest.approx(0.332 + 2 * 0.225)


def test_parallel_stages_mempilot_eq18_19():
    # stage s1: 1.0 s; parallel stage p: max(2.0, 3.0); stage s2: 0.5 -> 4.5 s
    assert trajectory_proxy_s([("s1", 1.0), ("p", 2.0), ("p", 3.0), ("s2", 0.5)]) == pytest.approx(4.5)


def test_amortized_cost_eq3_and_qpc_eq6():
    assert amortized_cost_usd(0.03, 100, 3.46e-4) == pytest.approx(6.46e-4)
    assert amortized_cost_usd(0.03, math.inf, 3.46e-4) == pytest.approx(3.46e-4)
    with pytest.raises(ValueError):
        amortized_cost_usd(1.0, 0, 0.0)
    # MemoryCPT Table 2: F1 0.479 at $3.46e-4/question -> QPC 0.138
    assert qpc(0.479, 3.46e-4) == pytest.approx(0.13844, abs=1e-5)
    assert math.isinf(qpc(0.5, 0.0)) and math.isnan(qpc(0.0, 0.0))


def test_amortization_table_memorycpt_eq20():
    # store built for 0.04 USD (0.01 + 0.03), 1e-4 USD online: C(40) = 0.04/40 + 1e-4 = 1.1e-3,
    # C(314) = 0.04/314 + 1e-4 = 2.27389e-4, C(inf) = 1e-4; keys ascending, "inf" last
    t = amortization_table(0.04, 1e-4, {314, 40, math.inf, 1})
    assert list(t) == ["1", "40", "314", "inf"]
    assert t["1"] == pytest.approx(0.0401) and t["40"] == pytest.approx(1.1e-3)
    assert t["314"] == pytest.approx(2.273885e-4, rel=1e-6) and t["inf"] == pytest.approx(1e-4)
    with pytest.raises(ValueError):
        amortization_table(0.04, 1e-4, {0, 10})


def test_price_book_roles_give_memorycpt_c_ref():
    # MemoryCPT Eq. 15/19: C_ref = 60 (p7B_out + p14B_in) + 8 p14B_out = 1.392e-5 USD
    book = PriceBook.load()
    s, a = book.for_role("memorycpt.summarizer"), book.for_role("memorycpt.answerer")
    c_ref = 1e-6 * (60 * (s.output_usd_per_mtok + a.input_usd_per_mtok) + 8 * a.output_usd_per_mtok)
    assert c_ref == pytest.approx(1.392e-5)


def test_unknown_model_is_an_error_and_aliases_resolve(tmp_path):
    book = PriceBook.load()
    with pytest.raises(UnpricedModelError, match="not in price book"):
        book.get("acme/mystery-model")
    assert book.get("Qwen/Qwen3-14B").output_usd_per_mtok == 0.24
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: x\nmodels: {m: {input_usd_per_mtok: -1, output_usd_per_mtok: 1}}\n")
    with pytest.raises(ValueError, match="malformed price book"):
        PriceBook.load(bad)


def _answer_once(llm) -> Ledger:
    """One ``answerer`` call through ``llm`` under a fresh ledger; returns the ledger."""
    ledger = Ledger()

    async def run():
        with use_ledger(ledger):
            await llm.complete([], role="answerer")

    asyncio.run(run())
    return ledger


def test_metered_llm_records_every_call_in_the_current_ledger():
    book = PriceBook.load()
    client = ScriptedClient(
        model_id="qwen3-14b",
        replies=[
            Completion(text="a", model_id="qwen3-14b", input_tokens=1000, output_tokens=200),
            Completion(text="b", model_id="qwen3-14b", input_tokens=10, output_tokens=2, exact_usd=0.5),
            Completion(text="c", model_id="qwen3-14b", input_tokens=100, output_tokens=10),
            Completion(text="d", model_id="qwen3-14b", input_tokens=100, output_tokens=10),
            LLMError("boom"),
        ],
    )
    llm = MeteredLLM(client, book)
    ledger = Ledger()

    async def run():
        with use_ledger(ledger, "query"):
            await llm.complete([], role="answerer")
            await llm.complete([], role="judge")
            with ledger.parallel():
                await asyncio.gather(llm.complete([], role="delegate"), llm.complete([], role="delegate"))
            with pytest.raises(LLMError):
                await llm.complete([], role="answerer")

    asyncio.run(run())
    ok = [c for c in ledger.calls if c.error is None]
    assert len(ledger.calls) == 5 and len(ok) == 4
    assert ok[0].usd == pytest.approx(1.48e-4) and not ok[0].usd_exact
    assert ok[1].usd == 0.5 and ok[1].usd_exact
    assert ok[2].parallel_stage == ok[3].parallel_stage != ok[0].parallel_stage
    fallback = book.fallback_latency  # qwen3-14b has no profile of its own
    expected = fallback.seconds(1000, 200) + fallback.seconds(10, 2) + fallback.seconds(100, 10)
    assert ledger.proxy_s() == pytest.approx(expected)
    u = ledger.usage()
    assert u.query.calls == 5 and u.query.input_tokens == 1210
    assert u.by_role["delegate"].calls == 2
    assert u.events == {"llm_error.answerer": 1}


def test_unpriced_model_fails_fast_or_is_flagged():
    book = PriceBook.load()
    with pytest.raises(UnpricedModelError):
        MeteredLLM(ScriptedClient(model_id="acme/x"), book)
    llm = MeteredLLM(
        ScriptedClient(model_id="acme/x", replies=[Completion(text="x", model_id="acme/x", input_tokens=5)]),
        book,
        allow_unpriced=True,
    )
    ledger = _answer_once(llm)
    (call,) = ledger.calls
    assert call.unpriced and call.usd is None
    assert ledger.usage().query.unpriced_calls == 1


def test_price_as_reads_a_local_run_in_hosted_dollars():
    book = PriceBook.load()
    client = ScriptedClient(
        model_id="gemma-3-270m-q4_k_m",
        replies=[Completion(text="x", model_id="gemma-3-270m-q4_k_m", input_tokens=1000, output_tokens=200)],
    )
    llm = MeteredLLM(client, book, price_as="qwen3-14b")
    (call,) = _answer_once(llm).calls
    assert call.model_id == "gemma-3-270m-q4_k_m" and call.usd == pytest.approx(1.48e-4)
    with pytest.raises(UnpricedModelError):
        MeteredLLM(client, book, price_as="acme/x", allow_unpriced=True)


def test_sum_usage_records_adds_numbers_and_counters_and_drops_the_rest():
    recs = [
        {"calls": 2, "usd": 0.5, "priced_as": ["m"], "flag": True, "events": {"a.fallback.x": 1}},
        {"calls": 3, "usd": 0.25, "events": {"a.fallback.x": 2, "b": 1}, "calls_by_role": {"x": 3}},
    ]
    assert sum_usage_records(recs) == {
        "calls": 5,
        "usd": 0.75,
        "events": {"a.fallback.x": 3, "b": 1},
        "calls_by_role": {"x": 3},
    }
    assert sum_usage_records([]) == {}


def test_a_span_counts_the_events_of_its_block_including_worker_threads():
    from memfrontier.core.ledger import count_event

    ledger = Ledger()

    async def main():
        count_event("before")
        with ledger.span("unit") as span:
            count_event("memorycpt.fallback.segmenter")
            await asyncio.to_thread(count_event, "llm_error.segmenter")  # a model's worker thread
        count_event("after")
        return span

    with use_ledger(ledger, "construction"):
        span = asyncio.run(main())
    assert span.events == {"memorycpt.fallback.segmenter": 1, "llm_error.segmenter": 1}
    assert ledger.events == {"before": 1, "memorycpt.fallback.segmenter": 1, "llm_error.segmenter": 1, "after": 1}
    assert span.record_json()["events"] == dict(span.events) and span.record_json()["calls_by_role"] == {}

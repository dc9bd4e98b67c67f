"""A degraded run is never reported as the configuration that was asked for: per-role error and
fallback shares, the threshold, unpriced cost, and BudgetMem's tier ratios of what ran."""

import asyncio
import json
import socket

import pytest
from rich.console import Console

from memfrontier.core.fallbacks import FallbackError, exceeded_message, fallback_report
from memfrontier.core.ledger import FallbackRecord, Ledger, use_ledger
from memfrontier.eval.metrics import summarize
from memfrontier.eval.reports.summary import fallback_table, summary_table


def row(by_role=None, events=None, call_errors=(), meta=None, fallbacks=(), **kw):
    return {
        "usage": {
            "by_role": {r: {"calls": n} for r, n in (by_role or {}).items()},
            "events": events or {},
            "fallbacks": [fb(*f) if isinstance(f, tuple) else f for f in fallbacks],
        },
        "call_errors": list(call_errors),
        "strategy_meta": meta or {},
        **kw,
    }


def fb(role, reason=None, step=0, module=None, tier=None):
    """A fallback record as a row stores it (FallbackRecord.model_dump())."""
    return FallbackRecord(
        role=role, module=module or role.split(".")[-2 if tier else -1], tier=tier, reason=reason, step=step
    ).model_dump()


def render(table) -> str:
    c = Console(width=250, record=True)
    c.print(table)
    return c.export_text()


def test_shares_by_role_hand_computed():
    # 3 questions. budgetmem.filter.high: 3 calls, 2 failed (llm_error) and fell back (a record each).
    # answerer: 3 calls, none failed. indexer: 4 calls, 1 fell back (one record).
    high = fb("budgetmem.filter.high", "llm_error", tier="high")
    rows = [
        row(
            {"budgetmem.filter.high": 1, "answerer": 1, "indexer": 2},
            {"llm_error.budgetmem.filter.high": 1},
            [{"role": "budgetmem.filter.high", "error": "m: connection failed after 1 attempt(s)"}],
            fallbacks=[high, fb("indexer", "unparsable")],
        ),
        row(
            {"budgetmem.filter.high": 1, "answerer": 1, "indexer": 2},
            {"llm_error.budgetmem.filter.high": 1},
            [{"role": "budgetmem.filter.high", "error": "second"}],
            fallbacks=[high],
        ),
        row({"budgetmem.filter.high": 1, "answerer": 1}),
    ]
    rep = fallback_report(rows)
    f = rep["by_role"]["budgetmem.filter.high"]
    assert (f["calls"], f["errors"], f["fallbacks"]) == (3, 2, 2)
    assert f["error_share"] == pytest.approx(2 / 3) and f["fallback_share"] == pytest.approx(2 / 3)
    assert f["first_error"] == "m: connection failed after 1 attempt(s)"
    i = rep["by_role"]["indexer"]
    assert (i["calls"], i["errors"], i["fallbacks"], i["fallback_share"]) == (4, 0, 1, 0.25)
    assert rep["by_role"]["answerer"] == {
        "calls": 3,
        "errors": 0,
        "fallbacks": 0,
        "error_share": 0.0,
        "fallback_share": 0.0,
        "first_error": None,
        "top_rejection": None,
    }
    assert rep["exceeded"] == ["budgetmem.filter.high", "indexer"]  # worst first
    assert fallback_report(rows, threshold=0.25)["exceeded"] == ["budgetmem.filter.high"]  # 0.25 is not above
    msg = exceeded_message(rep)
    assert "role 'budgetmem.filter.high': 2 of 3 calls failed (67%), 2 fell back (67%); threshold 5%" in msg
    assert "1 more role(s)" in msg and "First error: m: connection failed" in msg and "--allow-fallbacks" in msg


def test_unmetered_failures_count_as_calls_and_take_the_strategy_message():
    # MemPilot's policy call is made by the strategy itself: no ledger call, one llm_error event
    # per question; its message is in the meta as policy_error.
    rows = [row({"answerer": 1}, {"llm_error.policy": 1}, meta={"policy_error": "HTTP 500: boom"})] * 4
    rep = fallback_report(rows)
    assert rep["by_role"]["policy"]["calls"] == 4 and rep["by_role"]["policy"]["error_share"] == 1.0
    assert rep["by_role"]["policy"]["first_error"] == "HTTP 500: boom"
    assert rep["exceeded"] == ["policy"]


def test_a_clean_run_exceeds_nothing_and_bad_threshold_is_refused():
    rep = fallback_report([row({"answerer": 1})] * 20)
    assert rep["exceeded"] == [] and exceeded_message(rep) is None
    assert "every model call of the run succeeded" in render(fallback_table({"fallbacks": rep}))
    # one failure in 20 calls is exactly 5%: not above the default threshold
    rep = fallback_report([row({"answerer": 1}, {"llm_error.answerer": 1})] + [row({"answerer": 1})] * 19)
    assert rep["by_role"]["answerer"]["error_share"] == 0.05 and rep["exceeded"] == []
    with pytest.raises(ValueError, match="threshold"):
        fallback_report([], threshold=1.5)


def test_unpriced_cost_prints_unpriced_never_inf():
    rows = [
        {"category": "1", "f1": 0.5, "em": False, "usd": 0.0, "unpriced_calls": 2, "proxy_s": 1.0, "wall_s": 1.0},
        {"category": "1", "f1": 0.7, "em": False, "usd": 1e-4, "unpriced_calls": 0, "proxy_s": 1.0, "wall_s": 1.0},
    ]
    g = summarize(rows)
    assert g["all"]["unpriced_questions"] == 1
    assert g["all"]["usd_per_question"] is None and g["all"]["qpc"] is None and g["all"]["usd_total"] is None
    text = render(summary_table({"config": {"dataset": "x"}, "questions": 2, "metrics": g}))
    assert "unpriced" in text and "inf" not in text
    priced = summarize([{**rows[1], "f1": 0.5}])["all"]
    assert priced["usd_per_question"] == 1e-4 and priced["qpc"] == pytest.approx(0.5)  # 0.5 / (1e-4 x 1e4)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once the socket is closed


@pytest.mark.slow
@pytest.mark.data
def test_budgetmem_high_against_a_dead_server_is_refused_then_kept_when_allowed(tmp_path, locomo_slice):
    # Every High-tier call fails and falls back. The run still writes its
    # results, but ends in FallbackError naming the role and the error; the tier table counts
    # what ran (mid), and --allow-fallbacks keeps the same run (resumed, nothing recomputed).
    from memfrontier.eval.runner import EvalConfig, run_eval

    models = {"low": "local", "mid": "local", "high": "openai:meta-llama/llama-3.3-70b-instruct"}
    cfg = EvalConfig(
        dataset="locomo",
        split="test",
        strategy="budgetmem",
        limit=1,
        out=tmp_path / "run",
        data_root=locomo_slice("conv-49", "conv-50"),  # small inputs: 2 chunks, 2 relations
        strategy_options={
            "k": 2,
            "module_topk": 2,
            "max_relations": 2,
            "tiering": "capacity",
            "tiers": "high",
            "tiering_options": {
                "models": models,
                "base_url": f"http://127.0.0.1:{_closed_port()}/v1",
                "max_retries": 0,
            },
        },
    )
    with pytest.raises(FallbackError) as ei:
        asyncio.run(run_eval(cfg))
    msg = str(ei.value)
    assert "role 'budgetmem." in msg and ".high'" in msg and "/v1 failed after 1 attempt" in msg, msg
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary == ei.value.summary
    high = {r: v for r, v in summary["fallbacks"]["by_role"].items() if r.endswith(".high")}
    assert high and all(v["error_share"] == 1.0 and v["fallback_share"] == 1.0 for v in high.values())
    assert summary["choices"]["tiers"]["filter"] == {"high": 1.0}  # planned
    assert "high" not in summary["choices"]["tiers_used"]["filter"]  # what ran
    kept = asyncio.run(run_eval(cfg.model_copy(update={"allow_fallbacks": True})))
    assert kept["questions"] == 1 and kept["fallbacks"]["exceeded"] == summary["fallbacks"]["exceeded"]


def test_cli_eval_prints_the_shares_and_exits_3_naming_the_role(tmp_path, monkeypatch):
    # Control flow of the command only: the runner is replaced by one that ends as a degraded run does.
    from typer.testing import CliRunner

    import memfrontier.eval.runner as runner
    from memfrontier.cli import app

    rows = [
        row(
            {"budgetmem.filter.high": 1, "answerer": 1},
            {"llm_error.budgetmem.filter.high": 1},
            [{"role": "budgetmem.filter.high", "error": "connection refused"}],
            fallbacks=[fb("budgetmem.filter.high", "llm_error", tier="high")],
        )
    ]
    summary = {
        "config": {"dataset": "locomo", "split": "test", "strategy": "budgetmem"},
        "questions": 1,
        "metrics": summarize(
            [{"category": "1", "f1": 0.5, "em": False, "usd": 1e-5, "proxy_s": 1.0, "wall_s": 1.0}], dataset="locomo"
        ),
        "fallbacks": fallback_report(rows),
        "choices": {"tiers": {"filter": {"high": 1.0}}, "tiers_used": {"filter": {"mid": 1.0}}},
    }
    seen = {}

    async def degraded(cfg, on_progress=None):
        seen["cfg"] = cfg
        if cfg.allow_fallbacks:
            return summary
        raise FallbackError(exceeded_message(summary["fallbacks"]), summary)

    monkeypatch.setattr(runner, "run_eval", degraded)
    args = ["eval", "--strategy", "budgetmem", "--set", "tiers=high", "--out", str(tmp_path / "run")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 3, res.output
    out = " ".join(res.output.split())
    assert "budgetmem.filter.high" in out and "100%" in out and "connection refused" in out
    assert "tier that ran per module (after fallbacks)" in out and "tier planned per module" in out
    assert "role 'budgetmem.filter.high'" in out and "--allow-fallbacks" in out
    assert seen["cfg"].fallback_threshold == 0.05 and not seen["cfg"].allow_fallbacks
    res = CliRunner().invoke(app, [*args, "--allow-fallbacks", "--fallback-threshold", "0.5"])
    assert res.exit_code == 0, res.output
    assert seen["cfg"].allow_fallbacks and seen["cfg"].fallback_threshold == 0.5


def test_construction_failures_count_with_the_query_ones():
    # AutoMEM's indexer runs offline: 10 calls, 3 fell back (3 records), one of them an error.
    construction = [
        {
            "calls_by_role": {"indexer": 10},
            "events": {"llm_error.indexer": 1},
            "fallbacks": [fb("indexer", "unparsable")] * 3,
            "call_errors": [{"role": "indexer", "error": "HTTP 500: response_format"}],
        },
        {"calls": 0, "events": {}},
    ]  # a store built by an earlier run: nothing ran here
    rep = fallback_report([row({"answerer": 2})], construction=construction)
    assert rep["by_role"]["indexer"] == {
        "calls": 10,
        "errors": 1,
        "fallbacks": 3,
        "error_share": 0.1,
        "fallback_share": 0.3,
        "first_error": "HTTP 500: response_format",
        "top_rejection": "unparsable (3)",
    }
    assert rep["exceeded"] == ["indexer"] and rep["by_role"]["answerer"]["calls"] == 2


def test_a_strategys_fallbacks_count_for_their_own_role_only():
    # MemoryCPT's construction: the segmenter fell back twice (its reasons: one unparsable reply, one
    # model error), the episode generator once; "memorycpt.*" events are counters, not fallbacks.
    construction = [
        {
            "calls_by_role": {"segmenter": 20, "episode_generator": 40},
            "events": {
                "memorycpt.llm_error.segmenter": 1,
                "llm_error.segmenter": 1,
                "memorycpt.op_rejected.segmenter": 5,
            },
            "fallbacks": [
                fb("segmenter", "unparsable"),
                fb("segmenter", "llm_error"),
                fb("episode_generator", "instruction_echo"),
            ],
        }
    ]
    rep = fallback_report([], construction=construction)
    seg, ep = rep["by_role"]["segmenter"], rep["by_role"]["episode_generator"]
    assert (seg["errors"], seg["fallbacks"], seg["fallback_share"]) == (1, 2, 0.1)  # 2 / 20
    assert (ep["errors"], ep["fallbacks"], ep["fallback_share"]) == (0, 1, 0.025)  # 1 / 40
    assert rep["exceeded"] == ["segmenter"] and set(rep["by_role"]) == {"segmenter", "episode_generator"}
    assert seg["top_rejection"] == "unparsable (1)"  # equal counts: the later name, deterministically


def test_a_chain_that_fell_two_steps_counts_once():
    # BudgetMem: one filter execution asked for High fell to Mid and then to the rules floor (two
    # records: step 0 at high, step 1 at mid); another asked for Mid ran. 2 High calls, 2 Mid calls
    # in all. High: 1 fallback of 2 calls (50%); Mid: the step-1 record is the same execution, not a
    # fallback of its own, so 0 of 2.
    ledger = Ledger()
    with use_ledger(ledger):
        from memfrontier.core.ledger import record_fallback

        record_fallback(role="budgetmem.filter.high", module="filter", tier="high", reason="wrong_count", step=0)
        record_fallback(role="budgetmem.filter.mid", module="filter", tier="mid", reason="empty", step=1)
    usage = ledger.usage().model_dump()
    assert [(f["role"], f["step"]) for f in usage["fallbacks"]] == [
        ("budgetmem.filter.high", 0),
        ("budgetmem.filter.mid", 1),
    ]
    rows = [
        {"usage": {**usage, "by_role": {"budgetmem.filter.high": {"calls": 2}, "budgetmem.filter.mid": {"calls": 2}}}}
    ]
    rep = fallback_report(rows)
    high, mid = rep["by_role"]["budgetmem.filter.high"], rep["by_role"]["budgetmem.filter.mid"]
    assert (high["fallbacks"], high["fallback_share"], high["top_rejection"]) == (1, 0.5, "wrong_count (1)")
    assert (mid["fallbacks"], mid["fallback_share"], mid["top_rejection"]) == (0, 0.0, None)
    assert rep["exceeded"] == ["budgetmem.filter.high"]


def test_a_role_refused_without_a_call_error_is_refused_for_its_reason():
    # The 270M model's episodes echo the instructions: 9 calls, 4 fell back after their retry, 3 of
    # them last refused as instruction_echo, 1 as unparsable: the message names the reason, not
    # "no message recorded".
    construction = [
        {
            "calls_by_role": {"episode_generator": 9},
            "events": {"memorycpt.op_rejected.episode_generator": 8},
            "fallbacks": [fb("episode_generator", "instruction_echo")] * 3 + [fb("episode_generator", "unparsable")],
        }
    ]
    rep = fallback_report([], construction=construction)
    ep = rep["by_role"]["episode_generator"]
    assert ep["first_error"] is None
    assert ep["top_rejection"] == "instruction_echo (3)"
    msg = exceeded_message(rep)
    assert "4 fell back (44%)" in msg
    assert "First error: outputs refused, most often instruction_echo (3)" in msg
    assert "instruction_echo" in render(fallback_table({"fallbacks": rep}))


def test_a_budgetmem_tier_refused_for_its_output_names_its_own_module_and_tier():
    # BudgetMem capacity tiering, Low tier (the 270M model) on 30 questions: its summary module
    # came back empty twice (2 of 30 = 6.7%, above 5%) while the filter at the same tier fell back
    # once (wrong_count). Each role's reason is its own records', not another module's.
    rows = [
        {
            "usage": {
                "by_role": {"budgetmem.summary.low": {"calls": 15}, "budgetmem.filter.low": {"calls": 15}},
                "events": {},
                "fallbacks": f,
            }
        }
        for f in (
            [fb("budgetmem.summary.low", "empty", tier="low")] * 2
            + [fb("budgetmem.filter.low", "wrong_count", tier="low")],
            [],
        )
    ]
    rep = fallback_report(rows)
    summ, filt = rep["by_role"]["budgetmem.summary.low"], rep["by_role"]["budgetmem.filter.low"]
    assert (summ["calls"], summ["fallbacks"], filt["fallbacks"]) == (30, 2, 1)
    assert rep["exceeded"] == ["budgetmem.summary.low"]
    assert summ["top_rejection"] == "empty (2)"
    assert filt["top_rejection"] == "wrong_count (1)"
    assert "2 fell back (7%); threshold 5%. First error: outputs refused, most often empty (2)" in exceeded_message(rep)

"""BudgetMem router training, evaluation with a trained router, and the sweep report.

The training tests use real components end to end (LoCoMo conv-41's first two sessions in a real
SQLite/BM25/MiniLM store, implementation tiering with the embedded Gemma 3 270M as the High tier,
the real answerer) in a test-sized configuration: 2 PPO updates of 2 questions, 1 validation
question, K=1. The sweep report is checked on synthetic run summaries (it only formats them)."""

from __future__ import annotations

import asyncio
import csv
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.core.types import Question
from memfrontier.eval.runner import EvalConfig, run_eval
from memfrontier.eval.sweeps.budgetmem import plan_budgetmem_sweep, write_sweep_report
from memfrontier.strategies.budgetmem.router import MODULES, TIERS, TierRouter
from memfrontier.train.budgetmem_trainer import (
    RouterPPOConfig,
    failure_counts,
    router_dir_name,
    split_questions,
    train_router,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = dict(conversations=["conv-41"], k=1, module_topk=1, max_relations=2)


# --------------------------------------------------------------------------- real training
@pytest.fixture(scope="module")
def trained(tmp_path_factory, locomo_slice):
    root = tmp_path_factory.mktemp("bm-train")
    cfg = RouterPPOConfig(
        lam=0.3,
        updates=2,
        batch_questions=2,
        val_questions=1,
        train_questions=4,
        out=root / "routers" / router_dir_name(0.3),
        data_root=locomo_slice("conv-41"),
        **SMALL,
    )
    return cfg, asyncio.run(train_router(cfg))


@pytest.mark.slow
@pytest.mark.data
def test_training_logs_one_finite_line_per_update(trained):
    cfg, summary = trained
    log = [json.loads(line) for line in (cfg.out / "train_log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2]
    for r in log:
        assert r["episodes"] == 2
        for key in (
            "mean_reward",
            "std_reward",
            "r_task",
            "r_cost",
            "alpha",
            "policy_loss",
            "value_loss",
            "entropy",
            "val_reward",
            "val_f1",
            "train_questions_per_s",
        ):
            assert isinstance(r[key], float) and math.isfinite(r[key]), key
        assert set(r["tier_ratios"]) == set(MODULES)
        assert r["llm_errors"] == sum(n for k, n in r["failure_events"].items() if k.startswith("llm_error."))
        assert r["fallbacks"] == sum(n for k, n in r["failure_events"].items() if k.startswith("fallback."))
        for ratios in r["tier_ratios"].values():
            assert set(ratios) <= set(TIERS) and sum(ratios.values()) == pytest.approx(1.0)
    assert (cfg.out / "reward_curve.png").read_bytes()[:8] == PNG_MAGIC
    assert summary["fallbacks"] == sum(r["fallbacks"] for r in log)
    assert summary["llm_errors"] == sum(r["llm_errors"] for r in log)
    assert summary["best_update"] in (1, 2) and summary["train_questions"] == 4 and summary["val_questions"] == 1
    assert summary["provenance"]["seed"] == 42 and summary["provenance"]["data_sha256"]
    assert summary["provenance"]["prompt_versions"]["strategy"]
    assert (cfg.store_dir / "store.db").is_file() and cfg.cache_file.is_file()


@pytest.mark.slow
@pytest.mark.data
def test_second_identical_run_makes_no_model_calls(trained):
    cfg, first = trained
    again = asyncio.run(train_router(cfg.model_copy(update={"out": cfg.out.parent / "again"})))
    assert again["llm_calls"] == 0  # module outputs and answers all come from the cache file
    assert again["module_cache"]["misses"] == 0 and again["module_cache"]["hits"] > 0
    rows = [json.loads(line) for line in (cfg.out.parent / "again" / "train_log.jsonl").read_text().splitlines()]
    before = [json.loads(line) for line in (cfg.out / "train_log.jsonl").read_text().splitlines()]
    assert [r["mean_reward"] for r in rows] == pytest.approx([r["mean_reward"] for r in before])
    assert rows[0]["extraction_usd_per_question"] == pytest.approx(before[0]["extraction_usd_per_question"])


@pytest.mark.slow
@pytest.mark.data
def test_trained_checkpoint_drives_eval(trained, tmp_path):
    cfg, _ = trained
    best = cfg.out / "router_best.pt"
    TierRouter.load(best)
    ecfg = EvalConfig(
        split="train",
        strategy="budgetmem",
        limit=1,
        store=cfg.store_dir,
        out=tmp_path / "eval",
        data_root=cfg.data_root,
        strategy_options={"router": str(best), "k": 1, "module_topk": 1, "max_relations": 2},
    )
    summary = asyncio.run(run_eval(ecfg))
    assert summary["questions"] == 1
    assert set(summary["choices"]["tiers"]) == set(MODULES)
    assert summary["provenance"]["recipes"] == ["hybrid_rrf"]
    (row,) = [json.loads(line) for line in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()]
    assert row["strategy_meta"]["router"] is True
    assert "query_emb" not in row["strategy_meta"]  # greedy at test time: no states recorded
    assert json.loads((tmp_path / "eval" / "run.json").read_text())["strategy_option_sha256"]["router"]


# --------------------------------------------------------------------------- fast unit tests
def _q(i: int, cat: str) -> Question:
    return Question(id=f"q{i}", conversation_id="c", question=f"question {i}?", answer="a", category=cat)


def test_split_is_stratified_disjoint_and_seeded():
    qs = [_q(i, str(1 + i % 4)) for i in range(40)]
    train, val = split_questions(qs, 8, None, seed=42)
    assert len(val) == 8 and len(train) == 32
    assert {q.id for q in train}.isdisjoint(q.id for q in val)
    assert sorted(q.category for q in val) == ["1", "1", "2", "2", "3", "3", "4", "4"]
    assert [q.id for q in split_questions(qs, 8, None, seed=42)[1]] == [q.id for q in val]
    assert [q.id for q in split_questions(qs, 8, None, seed=7)[1]] != [q.id for q in val]
    assert len(split_questions(qs, 8, 6, seed=42)[0]) == 6
    with pytest.raises(ValueError, match="none to train"):
        split_questions(qs, 40, None, seed=42)


def test_failure_counts_sum_errors_and_fallbacks_only():
    events = [
        {"fallback.entity.high": 1, "cache_hit.entity": 3, "llm_error.budgetmem.entity.high": 1},
        {},
        {"fallback.entity.high": 2, "fallback.summary.high": 1, "budget.context_truncated": 1},
    ]
    assert failure_counts(events) == {
        "llm_errors": 1,
        "fallbacks": 4,
        "failure_events": {"fallback.entity.high": 3, "fallback.summary.high": 1, "llm_error.budgetmem.entity.high": 1},
    }
    assert failure_counts([]) == {"llm_errors": 0, "fallbacks": 0, "failure_events": {}}


def test_eval_identity_hashes_a_router_file(tmp_path):
    ckpt = tmp_path / "router.pt"
    ckpt.write_bytes(b"one")
    cfg = EvalConfig(strategy="budgetmem", strategy_options={"router": str(ckpt), "tiers": None})
    first = cfg.identity()
    assert set(first["strategy_option_sha256"]) == {"router"}
    ckpt.write_bytes(b"two")  # retrained at the same path: a resumed run must not mix the two
    assert cfg.identity() != first
    assert "strategy_option_sha256" not in EvalConfig(strategy="rag", strategy_options={"k": 3}).identity()


def test_cli_rejects_bad_router_and_misplaced_flags(tmp_path):
    run = CliRunner().invoke
    bogus = tmp_path / "bogus.pt"
    bogus.write_text("not a checkpoint")
    res = run(app, ["eval", "--strategy", "budgetmem", "--set", f"router={bogus}", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "not a readable router checkpoint" in res.output
    small = tmp_path / "small.pt"
    TierRouter(emb_dim=8, hidden=4).save(small)
    res = run(app, ["eval", "--strategy", "budgetmem", "--set", f"router={small}", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "8-d embeddings" in res.output
    res = run(app, ["eval", "--strategy", "rag", "--set", "tiers=low", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "unknown key 'tiers'; keys: k, retrievers" in res.output
    res = run(app, ["eval", "--strategy", "budgetmem", "--set", "tiers=max", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "unknown tiers 'max'" in res.output
    res = run(app, ["train", "router", "--reward", "bleu"])
    assert res.exit_code == 2 and "reward: Input should be 'f1' or 'judge' (got 'bleu')" in " ".join(res.output.split())
    assert not (tmp_path / "o").exists()  # nothing ran


def test_sweep_plan_skips_missing_routers(tmp_path):
    (tmp_path / "lambda_0.3").mkdir()
    TierRouter(emb_dim=8, hidden=4).save(tmp_path / "lambda_0.3" / "router_best.pt")
    runs, missing = plan_budgetmem_sweep([0.0, 0.3], [1, 5], router_dir=tmp_path, k=5, options={"module_topk": 2})
    assert [r.name for r in runs] == ["lambda_0.3", "fixed_low", "fixed_mid", "fixed_high", "k_1", "k_5"]
    assert missing == [tmp_path / "lambda_0" / "router_best.pt"]
    by = {r.name: r for r in runs}
    assert by["lambda_0.3"].options == {
        "module_topk": 2,
        "k": 5,
        "router": str(tmp_path / "lambda_0.3" / "router_best.pt"),
    }
    assert by["k_5"].options == by["fixed_mid"].options  # run once, shared by both points


def _summary(f1: float, usd: float, tiers: dict | None = None, judge: float | None = None) -> dict:
    s = {
        "questions": 10,
        "metrics": {
            "1": {},
            "all (1-4)": {
                "n_questions": 10,
                "f1": f1,
                "judge_accuracy": judge,
                "usd_per_question": usd,
                "qpc": f1 / (usd * 1e4),
                "proxy_s_mean": 1.0,
                "wall_s_mean": 2.0,
            },
        },
    }
    if tiers:
        s["choices"] = {"tiers": tiers}
    return s


def test_sweep_report_writes_tables_and_plots(tmp_path):
    def ratios(high):
        return {m: {"low": 1 - high, "high": high} for m in MODULES}

    results = [
        {
            "name": f"lambda_{lam:g}",
            "kind": "lambda",
            "label": f"λ={lam:g}",
            "lam": lam,
            "k": 5,
            "options": {"router": "x.pt"},
            "summary": _summary(0.3 - lam / 10, 2e-5 * (1 - lam), ratios(1 - lam), 0.4),
        }
        for lam in (0.0, 0.5, 0.9)
    ]
    results += [
        {
            "name": f"fixed_{t}",
            "kind": "fixed",
            "label": f"all {t}",
            "lam": None,
            "k": 5,
            "options": {"tiers": t},
            "summary": _summary(0.1 * (i + 1), 1e-5 * (i + 1), {m: {t: 1.0} for m in MODULES}),
        }
        for i, t in enumerate(TIERS)
    ]
    results += [
        {
            "name": f"k_{k}",
            "kind": "k",
            "label": f"K={k}",
            "lam": None,
            "k": k,
            "options": {"tiers": "mid", "k": k},
            "summary": _summary(0.05 * k, 1e-6 * k),
        }
        for k in (1, 3, 5)
    ]
    written = write_sweep_report(results, tmp_path, missing=[tmp_path / "lambda_0.1" / "router_best.pt"])
    assert set(written) == {"csv", "md", "pareto", "tier_ratios", "k_sweep"}
    for key in ("pareto", "tier_ratios", "k_sweep"):
        assert written[key].read_bytes()[:8] == PNG_MAGIC
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert [r["run"] for r in rows] == [r["name"] for r in results]
    assert float(rows[0]["usd_x1e4"]) == pytest.approx(0.2) and float(rows[0]["tier_filter_high"]) == 1.0
    assert rows[-1]["tier_filter_high"] == ""  # no tier ratios in that summary
    md = (tmp_path / "sweep.md").read_text()
    assert "| 0.9 | summary | 0.90 | 0.00 | 0.10 |" in md and "lambda_0.1" in md


def test_train_router_options_are_the_config_fields(tmp_path, monkeypatch):
    from memfrontier.train import budgetmem_trainer
    from memfrontier.train.configs import RouterPPOConfig

    res = CliRunner().invoke(app, ["train", "router", "--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0
    flags = {"lam": "--lambda", "conversations": "--conversation"}
    for name, field in RouterPPOConfig.model_fields.items():
        assert flags.get(name, "--" + name.replace("_", "-")) in res.output, name
        assert field.description.split(" (")[0][:30] in " ".join(res.output.split()), name
    got = []

    async def fake_train(cfg, on_progress=None):
        got.append(cfg)
        raise ValueError("stopped before training")

    monkeypatch.setattr(budgetmem_trainer, "train_router", fake_train)
    cfg_file = tmp_path / "router.yaml"
    cfg_file.write_text("updates: 7\nk: 9\n")
    res = CliRunner().invoke(
        app,
        [
            "train",
            "router",
            "--lambda",
            "0.5",
            "--no-align",
            "--conversation",
            "conv-1",
            "--conversation",
            "conv-2",
            "--config",
            str(cfg_file),
            "--set",
            "k=3",
        ],
    )
    assert res.exit_code == 2 and "stopped before training" in res.output
    (cfg,) = got
    assert (cfg.lam, cfg.align, cfg.conversations, cfg.updates, cfg.k) == (0.5, False, ["conv-1", "conv-2"], 7, 3)
    assert cfg.out == Path("runs/budgetmem/routers/lambda_0.5") and cfg.batch_questions == 32
    res = CliRunner().invoke(app, ["train", "router", "--set", "lr=-1"])
    assert res.exit_code == 2 and "lr: Input should be greater than 0 (got -1)" in " ".join(res.output.split())

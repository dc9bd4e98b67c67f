"""The frontier: amortized QPC (MemoryCPT Eq. 3, 5-6), the Pareto set, bootstrap intervals and the
report over eval output folders (written by hand here; the end-to-end run is in test_frontier_e2e)."""

from __future__ import annotations

import json

import pytest

from memfrontier.frontier.plots import point_labels
from memfrontier.frontier.report import build_report, write_report
from memfrontier.frontier.spec import FrontierSpec, load_spec
from memfrontier.frontier.stats import (
    amortized_qpc,
    bootstrap_ci,
    frontier_at,
    mixture_at,
    paired_diff_ci,
    pareto_front,
)
from memfrontier.frontier.tables import category_lines, render_markdown


def test_amortized_qpc_is_memorycpt_eq_5_6():
    # F1 0.479, online 3.0e-4 USD/q, construction 0.0144 USD over n=314 questions:
    # C(n) = 0.0144/314 + 3.0e-4 = 3.45860e-4 USD -> x1e4 = 3.45860 -> QPC = 0.479 / 3.45860 = 0.13850
    assert amortized_qpc(0.479, 3.0e-4, 0.0144, 314) == pytest.approx(0.13850, abs=5e-5)
    # the online-only figure the eval summary reports beside it: 0.479 / 3.0
    assert amortized_qpc(0.479, 3.0e-4, 0.0, 1) == pytest.approx(0.159667, abs=1e-6)
    assert amortized_qpc(0.5, 0.0, 0.0, 10) is None  # free: no QPC, never inf


def test_frontier_at_by_hand():
    pts = {"a": (1.0, 0.3), "b": (2.0, 0.5), "c": (3.0, 0.4), "d": (2.0, 0.5)}
    assert frontier_at(2.5, pts) == ("b", True)  # best F1 at cost <= 2.5; b and d tie: the label
    assert frontier_at(1.0, pts) == ("a", True)
    assert frontier_at(9.0, pts) == ("b", True)  # c costs more and scores less: not the frontier's value
    assert frontier_at(0.5, pts) == ("a", False)  # below every point: the cheapest
    assert frontier_at(1.0, {}) == (None, False)


def test_mixture_at_is_the_upper_concave_hull():
    # a (1, 0.3), b (2, 0.5), c (3, 0.55), d (4, 0.8), e (5, 0.7): the hull is a - b - d (slopes 0.2
    # then 0.15; c lies below the chord b-d: 0.5 + 0.3 / 2 = 0.65 > 0.55), flat after d; e is never mixed in
    pts = {"a": (1.0, 0.3), "b": (2.0, 0.5), "c": (3.0, 0.55), "d": (4.0, 0.8), "e": (5.0, 0.7)}
    assert mixture_at(1.5, pts) == [("a", 0.5), ("b", 0.5)]
    mix = mixture_at(3.5, pts)  # b w + d (1 - w), 2w + 4(1 - w) = 3.5 -> w = 0.25
    assert [m[0] for m in mix] == ["b", "d"] and [m[1] for m in mix] == pytest.approx([0.25, 0.75])
    assert mixture_at(2.0, pts) == [("b", 1.0)] and mixture_at(9.0, pts) == [("d", 1.0)]
    assert mixture_at(0.5, pts) == [] and mixture_at(1.0, {}) == []
    # a point on a chord is not a vertex; equal cost keeps the better one
    assert mixture_at(2.0, {"a": (1.0, 0.25), "b": (2.0, 0.5), "c": (3.0, 0.75), "c2": (3.0, 0.125)}) == [
        ("a", 0.5),
        ("c", 0.5),
    ]


def test_pareto_front_by_hand():
    # (cost, quality): b dominates d (cheaper, better); a and c trade off; e duplicates a
    pts = [(1.0, 0.3), (2.0, 0.5), (4.0, 0.6), (3.0, 0.4), (1.0, 0.3)]
    assert pareto_front(pts) == [True, True, True, False, True]


def test_configurations_at_the_same_point_share_one_plot_label():
    rows = [
        {"label": "rag-k4", "usd": 0.39, "f1": 0.298},
        {"label": "auto-balanced", "usd": 0.395, "f1": 0.282},
        {"label": "auto-cost", "usd": 0.395, "f1": 0.282},
        {"label": "unpriced", "usd": None, "f1": 0.1},
    ]
    assert point_labels(rows, "usd") == [(0.39, 0.298, "rag-k4"), (0.395, 0.282, "auto-balanced = auto-cost")]


def test_the_same_rows_draw_the_same_plot_files(tmp_path, monkeypatch):
    """The label placement runs a fixed number of steps (not a time limit), so re-reporting a
    frontier leaves its plots unchanged byte for byte, on a machine of any speed (here: one whose
    clock runs a second per reading, as a time-limited placement would see on a slow machine)."""
    import itertools

    import adjustText

    from memfrontier.frontier.plots import plot_frontier

    def row(label, strategy, usd, f1, pareto=False):
        return {"label": label, "strategy": strategy, "usd_x1e4_amortized": usd, "proxy_s": usd * 30, "f1": f1,
                "f1_low": f1 - 0.1, "f1_high": f1 + 0.1, "pareto_cost": pareto, "pareto_latency": pareto}  # fmt: skip

    rows = [row("rag", "rag", 0.73, 0.37, True), row("rag-k4", "rag", 0.38, 0.36, True)]
    rows += [row(f"memorycpt-{i}", "memorycpt", 7.0, 0.25 + 0.01 * i) for i in range(3)]
    first = plot_frontier(rows, tmp_path / "a", "t")
    monkeypatch.setattr(adjustText, "timer", itertools.count().__next__)  # a slow machine's clock
    again = plot_frontier(rows, tmp_path / "b", "t")
    for key in ("plot_cost", "plot_latency"):
        assert first[key].read_bytes() == again[key].read_bytes()


def test_the_outermost_labels_stay_inside_the_axes():
    """A point at the right edge is labelled on its left ("memorycpt-no-qar" ran off the plot)."""
    from memfrontier.eval.plots import _figure
    from memfrontier.frontier.plots import _panel

    def row(label, strategy, usd, f1):
        return {"label": label, "strategy": strategy, "usd_x1e4_amortized": usd, "f1": f1, "f1_low": f1 - 0.1,
                "f1_high": f1 + 0.1, "pareto_cost": False}  # fmt: skip

    rows = [row("oracle", "oracle", 0.1, 0.47), row("rag", "rag", 0.73, 0.37)]
    rows += [row(f"memorycpt-no-{x}", "memorycpt", 7.0, 0.25 + 0.02 * i) for i, x in enumerate(("qar", "fs", "x"))]
    fig, (ax,) = _figure(1, width=7.0, height=5.0)
    _panel(ax, rows, "usd_x1e4_amortized", "pareto_cost", "usd", "t", True)
    fig.canvas.draw()
    box = ax.get_window_extent()
    texts = {t.get_text(): t.get_window_extent() for t in ax.texts}
    assert len(texts) == 5
    for label, b in texts.items():
        assert box.x0 <= b.x0 and b.x1 <= box.x1, label
    assert texts["memorycpt-no-qar"].x1 < ax.transData.transform((7.0, 0.25))[0]  # on the point's left


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    vals = [0.0, 1.0] * 20
    m, lo, hi = bootstrap_ci(vals, seed=3)
    assert m == 0.5 and lo < 0.5 < hi
    assert (m, lo, hi) == bootstrap_ci(vals, seed=3)
    # normal approximation: sd of the mean = 0.5/sqrt(40) = 0.079 -> half-width ~0.155
    assert 0.10 < hi - m < 0.21 and 0.10 < m - lo < 0.21
    assert bootstrap_ci([0.7], seed=0) == (0.7, 0.7, 0.7)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_paired_difference_uses_shared_questions_only():
    a = {"q1": 0.6, "q2": 0.4, "q3": 1.0}
    b = {"q1": 0.5, "q2": 0.3, "q9": 0.0}
    d = paired_diff_ci(a, b)
    assert (
        d["n"] == 2
        and d["mean"] == pytest.approx(0.1)
        and d["low"] == pytest.approx(0.1)
        and d["high"] == pytest.approx(0.1)
    )
    assert paired_diff_ci({"x": 1.0}, {"y": 1.0})["mean"] is None


def _write_run(path, rows, construction_usd=0.0, answer_model="m", unpriced=False):
    path.mkdir(parents=True)
    with (path / "predictions.jsonl").open("w") as f:
        for r in rows:
            q = {"calls": 1, "input_tokens": 100, "output_tokens": 10, "unpriced_calls": int(unpriced)}
            f.write(json.dumps({**r, "usage": {"by_stage": {"query": q}}, "proxy_s": 1.0, "wall_s": 2.0}) + "\n")
    summary = {
        "config": {"dataset": "locomo"},
        "questions": len(rows),
        "construction": {"conv-1": {"usd": construction_usd}},
        "events": {},
        "provenance": {"answer_model": answer_model},
    }
    (path / "summary.json").write_text(json.dumps(summary))


def _rows(f1s, usd, cats=("1", "2", "5")):
    return [
        {"id": f"q{i}", "category": cats[i % len(cats)], "f1": f, "usd": usd, "evidence_recall": 1.0}
        for i, f in enumerate(f1s)
    ]


def test_report_scores_shared_questions_pairs_against_rag_and_writes_files(tmp_path):
    _write_run(tmp_path / "rag", _rows([0.5, 0.5, 0.0, 0.5], 2e-4))
    # memorycpt: +0.2 F1 on each scored question, cheaper online, a construction cost
    _write_run(tmp_path / "cpt", _rows([0.7, 0.7, 0.9, 0.7, 0.7], 1e-4), construction_usd=4e-4)
    runs = [
        {"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"},
        {"label": "memorycpt", "strategy": "memorycpt", "dir": tmp_path / "cpt"},
        {"label": "router", "strategy": "budgetmem", "dir": None, "status": "missing router.pt"},
    ]
    rep = build_report(runs)
    assert rep["question_ids"] == ["q0", "q1", "q2", "q3"]  # q4 only memorycpt answered
    rag, cpt, router = rep["rows"]
    # category 5 (q2) is excluded from LoCoMo's overall: rag F1 = mean(0.5, 0.5, 0.5)
    assert rag["n"] == 3 and rag["f1"] == pytest.approx(0.5)
    assert cpt["f1"] == pytest.approx(0.7) and cpt["d_f1"] == pytest.approx(0.2)
    assert cpt["d_f1_low"] == pytest.approx(0.2) and cpt["d_usd_x1e4"] == pytest.approx(-1.0)
    # C(n): 4e-4 USD over the 5 questions the run answered + 1e-4 online = 1.8e-4 -> x1e4 = 1.8
    assert cpt["usd_x1e4_amortized"] == pytest.approx(1.8)
    assert cpt["qpc"] == pytest.approx(0.7 / 1.8) and cpt["qpc_online"] == pytest.approx(0.7 / 1.0)
    assert cpt["pareto_cost"] and not rag["pareto_cost"]  # better and cheaper
    assert router["status"] == "missing router.pt"
    md = render_markdown(rep)
    assert "not run: missing router.pt" in md and "0.700 [0.700, 0.700]" in md
    assert "| rag | 3 | 0.500 [0.500, 0.500] | reference |" in md  # no 0 [0, 0] against itself
    paths = write_report(rep, tmp_path / "out")
    for key in ("json", "csv", "md", "plot_cost", "plot_latency", "html"):
        assert paths[key].is_file() and paths[key].stat().st_size > 0
    header = paths["csv"].read_text().splitlines()[0].split(",")
    assert header[:5] == ["label", "strategy", "status", "n", "f1"]


def test_the_terminal_table_keeps_whole_names_and_only_finished_rows(tmp_path):
    """The CLI's table fits a terminal: a long configuration name is never cut (Rich used to make
    four 'budgetmem…' rows of the Markdown table), unfinished configurations are left out."""
    from rich.console import Console

    from memfrontier.cli import frontier_table

    _write_run(tmp_path / "rag", _rows([0.5, 0.5], 2e-4))
    _write_run(tmp_path / "cap", _rows([0.4, 0.6], 1e-4))
    rep = build_report(
        [
            {"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"},
            {"label": "budgetmem-capacity-high", "strategy": "budgetmem", "dir": tmp_path / "cap"},
            {"label": "budgetmem-router-0.5", "strategy": "budgetmem", "dir": None, "status": "not run yet"},
        ]
    )

    def printed(width: int) -> str:
        console = Console(width=width, record=True)
        console.print(frontier_table(rep))
        return console.export_text()

    narrow = printed(80)  # cells wrap, the name does not, nor any header word
    assert "budgetmem-capacity-high" in narrow and "budgetmem-router-0.5" not in narrow
    assert "…" not in narrow and max(map(len, narrow.splitlines())) <= 80
    assert "frontier (2 questions)" in narrow  # every row answered both: the title says n, no n column
    # F1 mean(0.4, 0.6) = 0.5; C(n) = 1e-4 USD/q -> 1.0000 USD×1e4/q; QPC 0.5 / 1.0; ΔF1 vs rag 0.0
    row = next(line for line in printed(160).splitlines() if "budgetmem-capacity-high" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:5] == ["budgetmem-capacity-high", "0.500 [0.400, 0.600]", "0.000 [-0.100, 0.100]", "1.0000", "0.500"]


def _report_with_construction(tmp_path, label: str, entry: dict) -> tuple[dict, dict]:
    """(report, summary) of rag and ``label`` whose second conversation's construction is ``entry``."""
    _write_run(tmp_path / "rag", _rows([0.5, 0.5], 2e-4))
    _write_run(tmp_path / label, _rows([0.4, 0.6], 2e-4), construction_usd=1e-4)
    summary = json.loads((tmp_path / label / "summary.json").read_text())
    summary["construction"]["conv-2"] = entry
    (tmp_path / label / "summary.json").write_text(json.dumps(summary))
    rep = build_report(
        [
            {"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"},
            {"label": label, "strategy": label, "dir": tmp_path / label},
        ]
    )
    return rep, summary


def test_a_construction_cost_with_unrecorded_windows_is_flagged(tmp_path):
    rep, _ = _report_with_construction(tmp_path, "automem", {"usd": 1e-4, "windows_without_usage": 30})
    assert rep["notes"] == [
        "automem: construction cost incomplete, 30 index windows were built before their cost "
        "was recorded (its C(n) and QPC understate the cost)"
    ]
    assert rep["notes"][0] in render_markdown(rep)


def test_memory_sessions_built_without_their_failures_recorded_are_flagged(tmp_path):
    """A MemoryCPT store built before sessions kept their events: the shares cover the rest only;
    the frontier notes it and eval's fallback table says it under the table."""
    from memfrontier.eval.reports.summary import fallback_table

    rep, summary = _report_with_construction(tmp_path, "memorycpt", {"usd": 1e-4, "sessions_without_events": 18})
    assert rep["notes"] == [
        "memorycpt: 18 memory sessions were built before their fallbacks were recorded; "
        "its fallback shares cover the others only"
    ]
    assert fallback_table(summary).caption == (
        "18 memory sessions were built before their fallbacks were recorded: not counted here"
    )
    assert fallback_table({"construction": {"c": {"usd": 0.0}}}).caption is None


def test_the_oracle_anchor_is_shown_but_never_in_the_pareto_set(tmp_path):
    """oracle reads the gold evidence: better and cheaper than rag here, yet rag stays on the front
    (the only deployable configuration) and oracle is marked as the anchor."""
    _write_run(tmp_path / "rag", _rows([0.5, 0.5], 2e-4))
    _write_run(tmp_path / "oracle", _rows([0.9, 0.9], 1e-5))
    rep = build_report(
        [
            {"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"},
            {"label": "oracle", "strategy": "oracle", "dir": tmp_path / "oracle"},
        ]
    )
    rag, oracle = rep["rows"]
    assert rag["pareto_cost"] is True and rag["pareto_latency"] is True and rag["anchor"] is False
    assert oracle["anchor"] is True and oracle["pareto_cost"] is None and oracle["pareto_latency"] is None
    assert "| anchor (gold evidence) |" in render_markdown(rep)


def test_unpriced_run_prints_unpriced_not_inf(tmp_path):
    _write_run(tmp_path / "rag", _rows([0.5, 0.5], 0.0), unpriced=True)
    rep = build_report([{"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"}])
    assert rep["rows"][0]["qpc"] is None
    md = render_markdown(rep)
    assert "unpriced" in md and "inf" not in md


def test_default_spec_covers_every_strategy_family():
    spec = load_spec()
    assert {c.strategy for c in spec.configurations} == {
        "oracle",
        "longctx",
        "rag",
        "budgetmem",
        "memorycpt",
        "automem",
        "mempilot",
        "auto",
    }
    assert spec.select(["rag"])[0].options == {"k": 8}
    with pytest.raises(ValueError, match="unknown configuration"):
        spec.select(["nope"])
    bench = ["model:qwen2.5-0.5b", "model:qwen2.5-1.5b"]
    for tier in ("low", "mid", "high"):  # BudgetMem's capacity tiering on the local models
        (c,) = spec.select([f"budgetmem-capacity-{tier}"])
        assert c.options == {"tiering": "capacity", "tiering_options": {"models": "local"}, "tiers": tier}
        assert c.requires == bench
    for pref in ("perf", "balanced", "cost"):  # MemPilot on the pool of real sizes; the router at each preset
        (c,) = spec.select([f"mempilot-{pref}"])
        assert c.options == {"preference": pref, "pool": "bench"} and c.requires == bench
        (c,) = spec.select([f"auto-{pref}"])
        assert c.options == {"router": "runs/auto/router.json", "preference": pref}
        assert c.requires == ["runs/auto/router.json"]


def test_a_missing_bench_model_is_not_run_with_the_install_command(tmp_path, monkeypatch):
    import asyncio

    from memfrontier.eval.runner import EvalConfig
    from memfrontier.frontier.run import run_frontier

    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "no-models"))  # nothing installed
    hint = "install with: make bench-model (or: python -m memfrontier.llm.local_models install)"
    spec = FrontierSpec.model_validate(
        {
            "name": "bench",
            "configurations": [
                {
                    "label": "cap",
                    "strategy": "budgetmem",
                    "options": {"tiering": "capacity", "tiering_options": {"models": "local"}},
                    "requires": ["model:qwen2.5-0.5b", "model:qwen2.5-1.5b"],
                },
                {"label": "both", "strategy": "budgetmem", "requires": [str(tmp_path / "r.pt"), "model:qwen2.5-1.5b"]},
                {"label": "gemma", "strategy": "rag", "requires": ["model:gemma-3-270m"]},
            ],
        }
    )  # packaged: always there
    cap, both, gemma = spec.configurations
    assert cap.unmet() == f"models qwen2.5-0.5b, qwen2.5-1.5b not installed; {hint}"
    assert both.unmet() == f"missing {tmp_path / 'r.pt'}; model qwen2.5-1.5b not installed; {hint}"
    assert gemma.unmet() is None
    seen = []
    rep = asyncio.run(
        run_frontier(
            spec,
            EvalConfig(strategy="rag", limit=1),
            tmp_path / "out",
            labels=["both", "cap"],
            on_config=lambda label, status: seen.append((label, status)),
        )
    )
    rows = {r["label"]: r for r in rep["rows"]}
    # tried in the order asked for, reported in the spec's
    assert seen == [("both", f"not run: {both.unmet()}"), ("cap", f"not run: {cap.unmet()}")]
    assert list(rows) == ["cap", "both"] and rep["selected"] == ["both", "cap"]
    assert rows["cap"]["status"] == f"not run: {cap.unmet()}" and rows["cap"]["n"] == 0
    assert not (tmp_path / "out" / "configs" / "cap").exists()  # nothing ran in its place
    assert f"not run: models qwen2.5-0.5b, qwen2.5-1.5b not installed; {hint}" in render_markdown(rep)
    assert rep["files"] == {} and not (tmp_path / "out" / "frontier.md").exists()  # nothing finished: no report
    with pytest.raises(ValueError, match="unknown local model 'llama-70b'"):
        FrontierSpec.model_validate(
            {"configurations": [{"label": "a", "strategy": "rag", "requires": ["model:llama-70b"]}]}
        )


def test_report_only_says_how_far_each_unfinished_configuration_got(tmp_path):
    """--report-only runs nothing; a configuration without a summary is "not run yet" when it never
    started and "started: K questions answered" when it was interrupted (or is running)."""
    import asyncio

    from memfrontier.eval.runner import EvalConfig
    from memfrontier.frontier.run import config_dir, run_frontier

    spec = FrontierSpec.model_validate(
        {
            "name": "s",
            "configurations": [
                {"label": "a", "strategy": "rag"},
                {"label": "b", "strategy": "rag"},
                {"label": "c", "strategy": "oracle"},
            ],
        }
    )
    out = tmp_path / "out"
    config_dir(out, "a").mkdir(parents=True)
    (config_dir(out, "a") / "predictions.jsonl").write_text('{"id": "q1"}\n{"id": "q2"}\n\n')
    config_dir(out, "b").mkdir(parents=True)  # started: its construction, no answer yet
    rep = asyncio.run(run_frontier(spec, EvalConfig(strategy="rag", limit=2), out, report_only=True))
    assert {r["label"]: r["status"] for r in rep["rows"]} == {
        "a": "started: 2 questions answered",
        "b": "started: 0 questions answered",
        "c": "not run yet",
    }
    assert not config_dir(out, "c").exists()
    md = render_markdown(rep)
    assert "| a | - | started: 2 questions answered |" in md and "| c | - | not run yet |" in md
    assert rep["files"] == {} and not (out / "frontier.md").exists()  # nothing finished: nothing written

    # the report is of the runs found: the options they recorded, whatever flags --report-only got
    ident = EvalConfig(strategy="rag", limit=40, llm="local:qwen2.5-1.5b").identity()
    (config_dir(out, "a") / "run.json").write_text(json.dumps(ident))
    rep = asyncio.run(run_frontier(spec, EvalConfig(strategy="rag", limit=2), out, report_only=True))
    assert (rep["run_options"]["llm"], rep["run_options"]["limit"]) == ("local:qwen2.5-1.5b", 40)
    assert "limit 2 given, 40 recorded" in rep["notes"][-1]
    # options left at their defaults (as on a command line without the flag) are not "given"
    rep = asyncio.run(run_frontier(spec, EvalConfig(strategy="rag"), out, report_only=True, given={"seed"}))
    assert not any("as recorded" in n for n in rep["notes"])
    rep = asyncio.run(run_frontier(spec, EvalConfig(strategy="rag", limit=2), out, report_only=True, given={"limit"}))
    assert rep["notes"][-1] == "report of the runs as recorded (limit 2 given, 40 recorded)"
    assert rep["title"] == "frontier (s spec): locomo test, limit 40, local:qwen2.5-1.5b"
    (config_dir(out, "b") / "run.json").write_text(json.dumps({**ident, "limit": 10}))
    rep = asyncio.run(run_frontier(spec, EvalConfig(strategy="rag", limit=2), out, report_only=True))
    assert rep["notes"][-1] == "the configurations were run with different options: limit 10, 40"


def test_a_finished_configuration_is_reported_when_its_requirements_are_missing_now(tmp_path, monkeypatch):
    """A finished run stands: the report (and --report-only from another working directory, where
    the auto rows' relative router path does not resolve) shows it, not "not run: missing ..."."""
    import asyncio

    from memfrontier.eval.runner import EvalConfig
    from memfrontier.frontier.run import config_dir, run_frontier

    spec = FrontierSpec.model_validate(
        {
            "name": "s",
            "configurations": [
                {"label": "rag", "strategy": "rag"},
                {"label": "auto", "strategy": "rag", "requires": ["runs/auto/router.json"]},
            ],
        }
    )
    out = tmp_path / "out"
    base = EvalConfig(strategy="rag", limit=2)
    for label, f1 in (("rag", [0.5, 0.5]), ("auto", [1.0, 0.0])):
        _write_run(config_dir(out, label), _rows(f1, 1e-4, cats=("1",)))
    monkeypatch.chdir(tmp_path)  # runs/auto/router.json does not resolve here
    assert spec.configurations[1].unmet() == "missing runs/auto/router.json"
    seen = []
    rep = asyncio.run(run_frontier(spec, base, out, report_only=True, on_config=lambda *a: seen.append(a)))
    assert seen == [("rag", "done"), ("auto", "done")]
    assert {r["label"]: (r["status"], r["n"]) for r in rep["rows"]} == {"rag": ("ok", 2), "auto": ("ok", 2)}
    # a configuration that has not finished still says why it cannot run
    (config_dir(out, "auto") / "summary.json").unlink()
    rep = asyncio.run(run_frontier(spec, base, out, labels=["auto"]))
    assert {r["label"]: r["status"] for r in rep["rows"]}["auto"] == "not run: missing runs/auto/router.json"


def test_frontier_mistakes_fail_before_anything_runs(tmp_path):
    """A spec or flags that cannot run as given fail with one line naming every problem, exit 2,
    and nothing is written (each check here runs in well under a second: no model is loaded)."""
    from typer.testing import CliRunner

    from memfrontier.cli import app

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "configurations:\n  - {label: a, strategy: nosuch}\n  - {label: b, strategy: rag, options: {k: banana}}\n"
        "  - {label: rag, strategy: rag, options: {nosuchkey: 1}}\n"
    )
    out = tmp_path / "out"

    def fails(*args):
        res = CliRunner().invoke(app, ["frontier", *args])
        assert res.exit_code == 2, res.output
        assert not out.exists()
        return " ".join(res.output.split())

    assert fails("--spec", str(spec), "--out", str(out)) == (
        "error: the frontier spec cannot run as given (nothing was run): a: unknown strategy 'nosuch'; available: "
        "auto, automem, budgetmem, longctx, memorycpt, mempilot, oracle, rag, rag-turns, rag-turns-rr; b: strategy rag: k='banana': Input "
        "should be a valid integer; rag: strategy rag: unknown key 'nosuchkey'; keys: k, retrievers, unit, neighbours, neighbour_hits, max_tokens, rerank, fold, excerpt_tokens, turn_style"
    )
    assert fails("--only", ",,", "--out", str(out)) == "error: no configuration named (an empty --only)"
    assert fails("--only", "", "--out", str(out)) == "error: no configuration named (an empty --only)"
    assert fails("--only", "rag,oracle,rag", "--out", str(out)) == "error: configuration(s) named twice: rag"
    # the data and models every configuration shares: one error before any configuration, not one each
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What is my cat's name?",
        "answer": "Miso",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_dates": ["2023/05/02 (Tue) 09:30"],
        "haystack_session_ids": ["answer_b"],
        "answer_session_ids": ["answer_b"],
        "haystack_sessions": [[{"role": "user", "content": "I adopted a cat named Miso.", "has_answer": True}]],
    }
    data = tmp_path / "lme.json"
    data.write_text(json.dumps([item]))
    lme = ("--dataset", "longmemeval", "--data-file", str(data), "--only", "oracle,rag", "--out", str(out))
    assert fails(*lme, "--llm", "bogus").startswith("error: unknown LLM spec 'bogus'")
    assert fails(*lme, "--llm", "local:qwen9").startswith("error: unknown local model 'qwen9'")
    assert fails(
        "--dataset", "longmemeval", "--split", "all", "--data-file", str(tmp_path / "nope.json"), "--out", str(out)
    ) == (f"error: longmemeval data file not found: {tmp_path / 'nope.json'} (the file given as the data file)")
    assert "--reference 'nosuch' is not a configuration of the spec" in fails(
        "--only", "rag", "--reference", "nosuch", "--out", str(out)
    )
    (tmp_path / "file").write_text("x")
    assert fails("--only", "rag", "--out", str(tmp_path / "file" / "sub")) == (
        f"error: 1 validation error for the options: out: {tmp_path / 'file'} is a file, not a folder "
        f"(in {tmp_path / 'file' / 'sub'})"
    )
    assert fails("--report-only", "--out", str(out)) == (
        f"error: no frontier runs in {out} (no configs/ folder); give the --out of a frontier run"
    )
    done = tmp_path / "done"
    (done / "configs").mkdir(parents=True)  # a report is checked as a run is (it said "ΔF1 vs nosuch": all -)
    res = CliRunner().invoke(app, ["frontier", "--report-only", "--reference", "nosuch", "--out", str(done)])
    assert res.exit_code == 2 and "--reference 'nosuch' is not a configuration of the spec" in res.output
    spec.write_bytes(b"\xff\xfe")
    assert fails("--spec", str(spec)).startswith(f"error: cannot read frontier spec {spec}: 'utf-8' codec can't decode")
    spec.write_text("configurations:\n  - {label: rag, strategy: rag, bad: 1}\n  - {label: x}\n")
    assert fails("--spec", str(spec)) == (
        f"error: 2 validation errors for frontier spec {spec}: configurations.0.bad: "
        "unknown field; configurations.1.strategy: Field required (got {'label': 'x'})"
    )


def test_ctrl_c_says_how_to_resume(capsys):
    import typer

    from memfrontier.cli import RESUME_HINT, known_errors

    with pytest.raises(typer.Exit) as e, known_errors(interrupted=RESUME_HINT):
        raise KeyboardInterrupt
    assert e.value.exit_code == 130
    assert " ".join(capsys.readouterr().err.split()) == (
        "interrupted; what was built and the questions answered so far are kept: run the same command again to resume"
    )


def test_f1_by_category_table_names_locomo_categories(tmp_path):
    _write_run(tmp_path / "rag", _rows([0.5, 1.0, 0.0, 0.25], 2e-4, cats=("1", "2")))
    rep = build_report([{"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"}])
    rep["run_options"] = {"dataset": "locomo"}
    # category 1: questions 0 and 2 (F1 0.5, 0.0) -> 0.25; category 2: questions 1 and 3 (1.0, 0.25) -> 0.625
    assert category_lines(rep)[3:] == [
        "| configuration | 1 multi-hop (n=2) | 2 temporal (n=2) |",
        "|---|---|---|",
        "| rag | 0.250 [0.000, 0.500] | 0.625 [0.250, 1.000] |",
    ]
    assert "## F1 by category" in render_markdown(rep)
    # a category with one question has a value, not a zero-width interval
    _write_run(tmp_path / "one", _rows([0.5, 1.0, 0.25], 2e-4, cats=("1", "2", "1")))
    rep = build_report([{"label": "rag", "strategy": "rag", "dir": tmp_path / "one"}])
    rep["run_options"] = {"dataset": "locomo"}
    assert category_lines(rep)[-1] == "| rag | 0.375 [0.250, 0.500] | 1.000 (n=1) |"


def test_spec_rejects_duplicate_and_unsafe_labels(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        FrontierSpec.model_validate({"configurations": [{"label": "a", "strategy": "rag"}] * 2})
    with pytest.raises(ValueError, match="label"):
        FrontierSpec.model_validate({"configurations": [{"label": "../x", "strategy": "rag"}]})
    bad = tmp_path / "s.yaml"
    bad.write_text("configurations: [ {label: a")
    with pytest.raises(ValueError, match="cannot read frontier spec"):
        load_spec(bad)


def test_a_run_above_the_fallback_threshold_is_refused_unless_allowed(tmp_path):
    _write_run(tmp_path / "rag", _rows([0.5, 0.5], 1e-4))
    s = json.loads((tmp_path / "rag" / "summary.json").read_text())
    s["fallbacks"] = {"exceeded": ["budgetmem.filter.high"]}
    (tmp_path / "rag" / "summary.json").write_text(json.dumps(s))
    runs = [{"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"}]
    row = build_report(runs)["rows"][0]
    assert row["status"].startswith("refused") and "budgetmem.filter.high" in row["status"]
    s["fallbacks"] = {  # with the shares (as fallback_report writes them), the row says how much fell back
        "threshold": 0.05,
        "by_role": {
            "indexer": {"calls": 73, "errors": 0, "fallbacks": 34, "error_share": 0.0, "fallback_share": 34 / 73,
                        "top_rejection": "copied_turns (30)"},
            "answerer": {"calls": 2, "errors": 1, "fallbacks": 0, "error_share": 0.5, "fallback_share": 0.0},
        },
        "exceeded": ["indexer", "answerer"],
    }  # fmt: skip
    (tmp_path / "rag" / "summary.json").write_text(json.dumps(s))
    report = build_report(runs)
    assert report["rows"][0]["status"] == (
        "refused: model calls failed or fell back above the threshold in indexer: of 73 calls 34 fell back "
        "(47%), top reason copied_turns (30); answerer: of 2 calls 1 failed (50%) "
        "(threshold 5%; --allow-fallbacks keeps the row)"
    )
    assert "| rag | - | refused: model calls failed" in render_markdown(report)  # not "not run"
    kept = build_report(runs, allow_fallbacks=True)
    assert kept["rows"][0]["status"] == "ok" and "rag (indexer, answerer)" in render_markdown(kept)


@pytest.mark.slow
@pytest.mark.data
def test_frontier_runs_configurations_on_the_same_questions_and_resumes(tmp_path, locomo_slice):
    """End to end with the embedded models: two configurations and one whose router is missing."""
    from typer.testing import CliRunner

    from memfrontier.cli import app

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: smoke\nconfigurations:\n  - {label: oracle, strategy: oracle}\n"
        "  - {label: rag, strategy: rag, options: {k: 4}}\n"
        f"  - {{label: router, strategy: budgetmem, requires: [{tmp_path / 'none.pt'}]}}\n"
    )
    out = tmp_path / "out"
    args = [
        "frontier",
        "--spec",
        str(spec),
        "--limit",
        "2",
        "--out",
        str(out),
        "--data-root",
        str(locomo_slice("conv-49", "conv-50")),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output  # one configuration could not run: not a success
    assert "1 of 3 configurations did not finish: router" in " ".join(res.output.split())
    assert "2/2 rag: answering · mean F1" in res.output  # off a terminal, a progress line per configuration
    rep = json.loads((out / "frontier.json").read_text())
    rows = {r["label"]: r for r in rep["rows"]}
    assert rows["router"]["status"] == f"not run: missing {tmp_path / 'none.pt'}"
    assert rows["oracle"]["n"] == rows["rag"]["n"] == 2 and len(rep["question_ids"]) == 2
    assert rows["oracle"]["evidence_recall"] == 1.0 and rows["rag"]["d_f1"] == 0.0
    assert rows["oracle"]["usd_x1e4_online"] > 0 and rows["oracle"]["provenance"]["answer_model"]
    for label in ("oracle", "rag"):  # one eval run (and ledger) per configuration
        assert len((out / "configs" / label / "predictions.jsonl").read_text().splitlines()) == 2
    mtime = (out / "configs" / "rag" / "summary.json").stat().st_mtime
    assert CliRunner().invoke(app, args).exit_code == 1  # resumed: nothing rerun
    assert (out / "configs" / "rag" / "summary.json").stat().st_mtime == mtime
    # one configuration asked for: the report keeps the other finished one (and its paired differences)
    res = CliRunner().invoke(app, [*args, "--only", "oracle"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "frontier.json").read_text())
    assert [r["label"] for r in rep["rows"]] == ["oracle", "rag"] and rep["selected"] == ["oracle"]
    assert rep["rows"][0]["d_f1"] == pytest.approx(rows["oracle"]["d_f1"])
    # a run that cannot be this folder's (another --limit) leaves the report as it was
    before = (out / "frontier.md").read_text()
    res = CliRunner().invoke(app, [*args, "--only", "oracle,rag", "--limit", "3"])
    assert res.exit_code == 2, res.output  # refused at once, for every configuration it names
    assert (
        f"error: {out} holds runs with other options (nothing was run): oracle (limit: 2 -> 3); rag (limit: 2 -> 3)"
    ) in " ".join(res.output.split())
    assert (out / "frontier.md").read_text() == before


def test_a_changed_price_book_is_another_run(tmp_path):
    """Resuming under another price-book version would mix two books in one summary: the version
    is part of the run's identity (so the frontier reruns the configuration)."""
    from importlib import resources

    from memfrontier.core.pricebook import PriceBook
    from memfrontier.eval.runner import EvalConfig

    text = resources.files("memfrontier.core.prices").joinpath("v1.yaml").read_text("utf-8")
    version = PriceBook.load().version
    other = tmp_path / "other.yaml"
    other.write_text(text.replace(f'version: "{version}"', 'version: "other-v9"'), "utf-8")
    assert EvalConfig(strategy="rag").identity()["price_book_version"] == version
    assert EvalConfig(strategy="rag", price_book=other).identity()["price_book_version"] == "other-v9"


def test_judge_accuracy_is_a_column_of_the_markdown_table(tmp_path):
    rows = _rows([1.0, 0.0, 0.5], 1e-4, cats=("1",))
    for r, verdict in zip(rows, (True, False, True)):
        r["judge"] = verdict
    _write_run(tmp_path / "rag", rows)
    _write_run(tmp_path / "plain", _rows([1.0, 0.0, 0.5], 1e-4, cats=("1",)))
    rep = build_report(
        [
            {"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"},
            {"label": "plain", "strategy": "rag", "dir": tmp_path / "plain"},
        ]
    )
    md = render_markdown(rep).splitlines()
    head = md[2].split("|")
    col = head.index(" judge accuracy ")
    cells = {line.split("|")[1].strip(): line.split("|")[col].strip() for line in md[4:6]}
    assert cells == {"rag": "0.667", "plain": "-"}  # 2 of 3 judged correct; an unjudged run shows none


def test_report_only_names_a_refused_configuration_in_its_output(tmp_path):
    """A run refused for its fallbacks is named on the terminal with why (once), not only in the
    files, and the exit code of --report-only stays 0 (it reports, it runs nothing)."""
    from typer.testing import CliRunner

    from memfrontier.cli import app
    from memfrontier.eval.runner import EvalConfig
    from memfrontier.frontier.run import _eval_config, config_dir

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "name: s\nconfigurations:\n  - {label: rag, strategy: rag}\n  - {label: am, strategy: automem}\n"
    )
    spec = load_spec(spec_file)
    out = tmp_path / "out"
    for i, label in enumerate(("rag", "am")):
        _write_run(config_dir(out, label), _rows([0.5, 0.5], 1e-4))
        ident = _eval_config(EvalConfig(strategy="rag"), out, spec.configurations[i]).identity()
        (config_dir(out, label) / "run.json").write_text(json.dumps(ident))
    summary = config_dir(out, "am") / "summary.json"
    s = json.loads(summary.read_text())
    s["fallbacks"] = {
        "threshold": 0.05,
        "by_role": {"indexer": {"calls": 10, "errors": 0, "fallbacks": 5, "error_share": 0.0, "fallback_share": 0.5}},
        "exceeded": ["indexer"],
    }
    summary.write_text(json.dumps(s))
    res = CliRunner().invoke(app, ["frontier", "--spec", str(spec_file), "--report-only", "--out", str(out)])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert said.count("am: refused: model calls failed or fell back above the threshold in indexer: of 10 calls") == 1


def test_an_export_keeps_no_benchmark_text_rebuilds_the_same_report_and_resumes_elsewhere(tmp_path):
    """--export: the question, the gold answer and a strategy's retrieved text are not in it; the
    report rebuilt from it equals the original; a configuration copied from it into another
    frontier's configs/ is finished there (kept, not rerun)."""
    import asyncio
    import shutil

    from typer.testing import CliRunner

    from memfrontier.cli import app
    from memfrontier.eval.runner import EvalConfig
    from memfrontier.frontier.run import _eval_config, config_dir, run_frontier

    spec = FrontierSpec.model_validate(
        {
            "name": "s",
            "configurations": [{"label": "rag", "strategy": "rag"}, {"label": "memorycpt", "strategy": "memorycpt"}],
        }
    )
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "name: s\nconfigurations:\n  - {label: rag, strategy: rag}\n  - {label: memorycpt, strategy: memorycpt}\n"
    )
    out, dest = tmp_path / "out", tmp_path / "results"
    base = EvalConfig(strategy="rag", limit=4)
    secret = {"question": "What car did Evan buy in May?", "gold": "a blue Prius"}
    meta = {
        "episodes": 3,
        "summary_skipped": False,
        "context": "Evan: I bought a blue Prius",
        "tiers": {"filter": "mid"},
    }
    for label, f1s in (("rag", [0.5, 0.5, 0.0, 0.5]), ("memorycpt", [0.7, 0.25, 0.9, 1.0])):
        _write_run(
            config_dir(out, label),
            [{**r, **secret, "prediction": "a car", "strategy_meta": meta} for r in _rows(f1s, 2e-4)],
        )
        ident = _eval_config(base, out, spec.configurations[0 if label == "rag" else 1]).identity()
        (config_dir(out, label) / "run.json").write_text(json.dumps(ident))

    inside = CliRunner().invoke(
        app, ["frontier", "--spec", str(spec_file), "--report-only", "--out", str(out), "--export", str(out / "pub")]
    )
    assert inside.exit_code == 2 and "must be a folder outside" in " ".join(inside.output.split())
    assert not (out / "frontier.md").exists()  # refused before anything was written
    res = CliRunner().invoke(
        app, ["frontier", "--spec", str(spec_file), "--report-only", "--out", str(out), "--export", str(dest)]
    )
    assert res.exit_code == 0, res.output
    assert "exported 2 finished configurations" in " ".join(res.output.split())
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert "configs/memorycpt/predictions.jsonl" in files and "configs/rag/run.json" in files
    assert "configs/rag/summary.json" in files and "frontier.md" in files and "frontier.csv" in files
    for p in dest.rglob("*"):
        if p.is_file() and p.suffix != ".png":
            assert "Prius" not in p.read_text() and "What car" not in p.read_text(), p
    row = json.loads((dest / "configs" / "rag" / "predictions.jsonl").read_text().splitlines()[0])
    assert row["prediction"] == "a car" and row["f1"] == 0.5 and row["id"] == "q0"
    assert row["strategy_meta"] == {"episodes": 3, "summary_skipped": False, "tiers": {"filter": "mid"}}
    assert "question" not in row and "gold" not in row

    again = CliRunner().invoke(app, ["frontier", "--spec", str(spec_file), "--report-only", "--out", str(dest)])
    assert again.exit_code == 0, again.output
    keys = ("label", "n", "f1", "f1_low", "f1_high", "d_f1", "d_f1_low", "d_f1_high", "usd_x1e4_amortized", "qpc")
    first = json.loads((out / "frontier.json").read_text())["rows"]
    second = json.loads((dest / "frontier.json").read_text())["rows"]
    assert [{k: r.get(k) for k in keys} for r in second] == [{k: r.get(k) for k in keys} for r in first]
    assert first[1]["d_f1"] == pytest.approx((0.2 - 0.25 + 0.5) / 3)  # scored q0, q1, q3 (q2 is category 5)

    out2 = tmp_path / "elsewhere"
    shutil.copytree(dest / "configs" / "rag", config_dir(out2, "rag"))
    seen = []
    rep = asyncio.run(run_frontier(spec, base, out2, labels=["rag"], on_config=lambda *a: seen.append(a)))
    assert seen == [("rag", "kept")] and rep["rows"][0]["f1"] == pytest.approx(0.5)

    # exported from a run that holds memorycpt only: the export keeps rag, and its report covers both
    out3 = tmp_path / "other-machine"
    shutil.copytree(config_dir(out, "memorycpt"), config_dir(out3, "memorycpt"))
    res = CliRunner().invoke(
        app, ["frontier", "--spec", str(spec_file), "--report-only", "--out", str(out3), "--export", str(dest)]
    )
    assert res.exit_code == 0, res.output
    merged = {r["label"]: r for r in json.loads((dest / "frontier.json").read_text())["rows"]}
    assert merged["rag"]["status"] == "ok" and merged["memorycpt"]["d_f1"] == pytest.approx(first[1]["d_f1"])
    # a destination that is a file, or holds a file where a configuration goes: refused, nothing written
    for bad, inner in ((tmp_path / "a-file", None), (tmp_path / "d", "configs/rag")):
        target = bad if inner is None else bad / inner
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x")
        res = CliRunner().invoke(
            app, ["frontier", "--spec", str(spec_file), "--report-only", "--out", str(out), "--export", str(bad)]
        )
        assert res.exit_code == 2 and "exists and is not a folder" in " ".join(res.output.split()), res.output
    assert sorted(p.name for p in (tmp_path / "d").rglob("*")) == ["configs", "rag"]


@pytest.mark.slow
@pytest.mark.data
def test_a_started_configuration_exported_resumes_on_another_machine(tmp_path, locomo_slice):
    """A frontier longer than one machine's stay: a configuration exported before it finished
    (answered rows, no summary) is reported as started, and copied into another --out resumes
    there after its last answered question; a finished export is never replaced by a partial one."""
    import shutil

    from typer.testing import CliRunner

    from memfrontier.cli import app

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\nconfigurations:\n  - {label: oracle, strategy: oracle}\n")
    data = str(locomo_slice("conv-49"))
    out, dest, elsewhere = tmp_path / "out", tmp_path / "results", tmp_path / "elsewhere"
    args = ["frontier", "--spec", str(spec), "--limit", "3", "--data-root", data]
    assert CliRunner().invoke(app, [*args, "--out", str(out)]).exit_code == 0
    run_dir = out / "configs" / "oracle"
    full = (run_dir / "predictions.jsonl").read_text().splitlines()
    (run_dir / "summary.json").unlink()  # stopped after two answers
    (run_dir / "predictions.jsonl").write_text("".join(x + "\n" for x in full[:2]))

    res = CliRunner().invoke(app, [*args, "--report-only", "--out", str(out), "--export", str(dest)])
    said = " ".join(res.output.split())
    assert res.exit_code == 0 and "exported 0 finished configurations and 1 started (oracle" in said, res.output
    assert "it holds no finished configuration yet, so no report was written there" in said
    carried = dest / "configs" / "oracle"
    assert sorted(p.name for p in carried.iterdir()) == ["predictions.jsonl", "run.json"]
    assert [json.loads(x)["id"] for x in (carried / "predictions.jsonl").read_text().splitlines()] == [
        json.loads(x)["id"] for x in full[:2]
    ]
    assert all("question" not in json.loads(x) for x in (carried / "predictions.jsonl").read_text().splitlines())
    res = CliRunner().invoke(app, [*args, "--report-only", "--out", str(dest)])
    assert res.exit_code == 1 and "oracle: started: 2 questions answered" in " ".join(res.output.split())

    shutil.copytree(carried, elsewhere / "configs" / "oracle")
    res = CliRunner().invoke(app, [*args, "--out", str(elsewhere)])
    assert res.exit_code == 0, res.output
    assert "oracle: resuming, 2 of 3 questions already answered" in " ".join(res.output.split())
    rows = [json.loads(x) for x in (elsewhere / "configs/oracle/predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [json.loads(x)["id"] for x in full]
    assert "question" not in rows[0] and "question" in rows[2]  # only the third was asked here
    summary = json.loads((elsewhere / "configs/oracle/summary.json").read_text())
    assert summary["questions"] == 3

    # finished there, exported again: the finished export stands against a later partial one
    res = CliRunner().invoke(app, [*args, "--report-only", "--out", str(elsewhere), "--export", str(dest)])
    assert "exported 1 finished configuration to" in " ".join(res.output.split()), res.output
    assert (carried / "summary.json").is_file() and len((carried / "predictions.jsonl").read_text().splitlines()) == 3
    res = CliRunner().invoke(app, [*args, "--report-only", "--out", str(out), "--export", str(dest)])
    said = " ".join(res.output.split())
    assert "exported 0 finished configurations to" in said, res.output
    assert f"not exported: oracle (started here, finished in {dest}: the finished run is kept)" in said
    assert (carried / "summary.json").is_file() and len((carried / "predictions.jsonl").read_text().splitlines()) == 3

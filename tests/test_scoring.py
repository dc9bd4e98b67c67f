"""`memfrontier score`: any system's predictions under our protocol; question slicing."""

import json

import pytest
from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.eval.datasets import load_dataset
from memfrontier.eval.runner import select_questions
from memfrontier.eval.scoring import ScoreInputError, score_file

ROWS = [
    {"id": "a", "category": 4, "answer": "Paris", "prediction": "in Paris"},  # P=1/2 R=1 -> 2/3
    {"id": "b", "category": 1, "answer": "apples, pears", "prediction": "pears"},  # mean(0, 1) = 0.5
    {"id": "c", "category": 3, "answer": "likely yes; she said so", "prediction": "yes likely"},  # 1.0
    {"id": "d", "category": 2, "answer": 2022, "prediction": "in 2021"},  # 0.0
    {"id": "e", "category": 5, "prediction": "Not mentioned in the conversation"},  # abstention 1
]


def test_score_file_official_rules(tmp_path):
    f = tmp_path / "preds.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    summary = score_file(f, dataset="locomo", out=tmp_path / "out")
    scored = [json.loads(line) for line in (tmp_path / "out" / "scored.jsonl").read_text().splitlines()]
    assert [round(r["f1"], 4) for r in scored] == [0.6667, 0.5, 1.0, 0.0, 1.0]
    m = summary["metrics"]
    assert m["all (1-4)"]["n_questions"] == 4
    assert m["all (1-4)"]["f1"] == pytest.approx((2 / 3 + 0.5 + 1.0 + 0.0) / 4)
    assert m["5"]["n_questions"] == 1 and m["5"]["f1"] == 1.0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["provenance"]["predictions_sha256"]


def test_score_rejects_bad_lines(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"category": 4, "answer": "x", "prediction": "x"}\n{not json\n')
    with pytest.raises(ScoreInputError, match="bad.jsonl:2"):
        score_file(f, dataset="locomo", out=tmp_path / "o")
    f.write_text('{"category": 2, "prediction": "x"}\n')
    with pytest.raises(ScoreInputError, match="needs an 'answer'"):
        score_file(f, dataset="locomo", out=tmp_path / "o")


def test_score_cli(tmp_path):
    f = tmp_path / "preds.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    res = CliRunner().invoke(app, ["score", "--dataset", "locomo", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "scored preds.jsonl" in res.output
    assert "all (1-4)" in json.loads((tmp_path / "o" / "summary.json").read_text())["metrics"]
    res = CliRunner().invoke(app, ["score", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "no such predictions file" in res.output


def test_score_accepts_evals_own_predictions_file(tmp_path):
    """``eval`` writes the gold answer as ``gold`` (and its own f1); ``score`` reads it as the answer."""
    rows = [
        {
            "id": r["id"],
            "conversation_id": "conv-1",
            "category": str(r["category"]),
            "question": "q?",
            "gold": r.get("answer"),
            "prediction": r["prediction"],
            "f1": 0.123,
            "em": False,
        }
        for r in ROWS
    ]
    f = tmp_path / "predictions.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(app, ["score", "--dataset", "locomo", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    scored = [json.loads(line) for line in (tmp_path / "o" / "scored.jsonl").read_text().splitlines()]
    assert [round(r["f1"], 4) for r in scored] == [0.6667, 0.5, 1.0, 0.0, 1.0]
    assert [r["em"] for r in scored] == [False, False, False, False, False]
    f.write_text(json.dumps({"category": 4, "answer": "Paris", "gold": "Rome", "prediction": "Paris"}) + "\n")
    assert score_file(f, dataset="locomo", out=tmp_path / "o2")["metrics"]["all (1-4)"]["f1"] == 1.0  # answer first


@pytest.mark.data
def test_slice_is_seeded_and_covers_every_category():
    convs = load_dataset("locomo", "test")
    qs = select_questions(convs, 40, seed=42)
    assert len(qs) == 40
    cats = {q.category for q in qs}
    assert cats == {"1", "2", "3", "4"}
    assert [q.id for q in qs] == [q.id for q in select_questions(convs, 40, seed=42)]
    assert [q.id for q in qs] != [q.id for q in select_questions(convs, 40, seed=7)]
    assert len(select_questions(convs, None, seed=42)) == 314


def test_the_run_tables_fit_80_columns_without_cutting_a_header():
    """The eval summary, construction and fallback tables at 80 columns: no '…', no line over 80."""
    from rich.console import Console

    from memfrontier.eval.reports.summary import construction_table, fallback_table, summary_table

    g = {
        "n_questions": 4,
        "f1": 0.5,
        "em": 0.25,
        "judge_accuracy": 0.75,
        "evidence_recall": 0.75,
        "usd_per_question": 1.23e-6,
        "proxy_s_mean": 1.5,
        "wall_s_mean": 2.5,
        "qpc": 406504.07,
    }
    summary = {
        "config": {"dataset": "locomo", "split": "test", "strategy": "rag"},
        "questions": 1,
        "metrics": {"1": g, "5": g, "all (1-4)": g},
        "construction": {
            "conv-1": {"calls": 3, "input_tokens": 1000, "output_tokens": 200, "usd": 1e-5, "proxy_s": 3.2}
        },
        "amortized_usd_per_question": {"1": 1e-5, "10": 2e-6},
        "fallbacks": {
            "threshold": 0.05,
            "by_role": {
                "answerer": {"calls": 4, "errors": 1, "fallbacks": 0, "error_share": 0.25, "fallback_share": 0.0}
            },
        },
    }
    console = Console(width=80, record=True)
    for table in (summary_table(summary), construction_table(summary), fallback_table(summary)):
        console.print(table)
    text = console.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    for header in ("category", "judge", "recall", "×1e4/q", "QPC", "conversation", "fallback", "· 1 question"):
        assert header in text
    assert "1 questions" not in text and "1 conversation above" in text


UNICODE_ROWS = [
    # 她 住 在 东 京 (5 words) vs 东 京 (2): P = 2/5, R = 1 -> F1 = 4/7; officially one word each -> 0
    {"id": "u1", "category": 2, "answer": "东京", "prediction": "她住在东京"},
    {"id": "u2", "category": 4, "answer": "Tokyo", "prediction": "Tokyo。"},  # 1.0; officially 0
    {"id": "u3", "category": 4, "answer": "Paris", "prediction": "in Paris"},  # ASCII: 2/3 under both
]


def test_score_names_its_scorer_and_the_unicode_one_reads_any_script(tmp_path):
    f = tmp_path / "preds.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in UNICODE_ROWS), "utf-8")
    for scorer, f1s in (("locomo", [0.0, 0.0, 2 / 3]), ("unicode", [4 / 7, 1.0, 2 / 3])):
        out = tmp_path / scorer
        summary = score_file(f, dataset="locomo", out=out, scorer=scorer)
        scored = [json.loads(line) for line in (out / "scored.jsonl").read_text("utf-8").splitlines()]
        assert [r["f1"] for r in scored] == pytest.approx(f1s)
        written = json.loads((out / "summary.json").read_text("utf-8"))
        assert written["config"]["scorer"] == written["provenance"]["scorer"] == scorer == summary["config"]["scorer"]
    assert score_file(f, dataset="locomo", out=tmp_path / "d")["provenance"]["scorer"] == "locomo"  # the default
    res = CliRunner().invoke(app, ["score", str(f), "--scorer", "unicode", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "cli" / "summary.json").read_text())["provenance"]["scorer"] == "unicode"
    res = CliRunner().invoke(app, ["score", str(f), "--scorer", "nfkc", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 2 and "'nfkc' is no scorer; choose locomo or unicode" in " ".join(res.output.split())


def test_a_runs_scorer_is_an_option_of_eval_and_frontier_and_part_of_its_identity():
    """The default is the official scorer, absent from ``run.json`` (runs recorded before the option
    still resume); another scorer is another run, named in ``run.json`` and the summary."""
    from memfrontier.core.types import Question
    from memfrontier.eval.config import EvalConfig
    from memfrontier.eval.tasks import score_f1

    assert "scorer" not in EvalConfig().identity() and EvalConfig().scorer == "locomo"
    assert EvalConfig(scorer="unicode").identity()["scorer"] == "unicode"
    with pytest.raises(ValueError, match="scorer"):
        EvalConfig(scorer="nfkc")
    q = Question(id="q", conversation_id="c", question="Where?", answer="东京", category="2")
    assert score_f1("locomo", "她住在东京", q) == 0.0
    assert score_f1("locomo", "她住在东京", q, "unicode") == pytest.approx(4 / 7)
    for command in ("eval", "frontier"):
        res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--scorer" in res.output, command
        res = CliRunner().invoke(app, [command, "--scorer", "nfkc"])
        assert res.exit_code == 2 and "is no scorer" in res.output, command

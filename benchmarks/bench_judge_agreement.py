"""How far the LLM judge agrees with a person: its verdicts on answers labelled by hand.

Reads a run's ``predictions.jsonl`` (an exported one is enough: the questions and gold answers are
read again from the dataset by id) and a JSONL of hand labels (``{"id", "correct": bool, "why"}``,
one per judged answer), asks the run's judge protocol (LongMemEval's per-type prompts for
``longmemeval`` / ``longmemeval_s``, MemoryCPT's otherwise) on ``--llm`` for each labelled answer,
and reports the agreement: accuracy, false positives (the judge says CORRECT, the person WRONG),
false negatives, Cohen's kappa, by question type, and beside it the same counts for token F1 read
as a verdict (F1 >= 0.5), the figure the reports lead with.

Writes ``<out>/agreement.json`` (every row: id, type, hand label, verdict, F1; the totals;
provenance) and ``<out>/agreement.md``.

    .venv/bin/python benchmarks/bench_judge_agreement.py --predictions RUN/configs/rag/predictions.jsonl \\
        --labels results/judge-agreement/labels-lme-s-rag.jsonl --dataset longmemeval_s --split test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from memfrontier.api import AsyncMemory  # noqa: E402
from memfrontier.core.jsonio import write_json_atomic, write_text_atomic  # noqa: E402
from memfrontier.core.provenance import provenance, sha256_file  # noqa: E402
from memfrontier.eval.datasets import dataset_path, load_dataset  # noqa: E402
from memfrontier.eval.judge import judge_prompt_version, make_judge  # noqa: E402
from memfrontier.eval.tasks import score_f1  # noqa: E402

F1_CORRECT = 0.5


def counts(pairs: list[tuple[bool, bool]]) -> dict:
    """``pairs`` of (hand label, verdict) -> n, accuracy, false positives / negatives and Cohen's kappa
    (1 - (1 - p_o) / (1 - p_e), p_e from the two raters' CORRECT shares; 0 when p_e is 1)."""
    n = len(pairs)
    if not n:
        return {"n": 0}
    agree = sum(h == v for h, v in pairs) / n
    fp = sum(v and not h for h, v in pairs)
    fn = sum(h and not v for h, v in pairs)
    ph, pv = sum(h for h, _ in pairs) / n, sum(v for _, v in pairs) / n
    pe = ph * pv + (1 - ph) * (1 - pv)
    kappa = 0.0 if pe == 1 else (agree - pe) / (1 - pe)
    return {"n": n, "accuracy": agree, "false_positives": fp, "false_negatives": fn, "kappa": kappa, "hand_correct": ph}


async def judge_rows(args, rows: list[dict], questions: dict) -> list[dict]:
    mem = AsyncMemory.open(tempfile.mkdtemp(), llm=args.llm)
    judge = make_judge(mem, dataset=args.dataset)
    out = []
    try:
        for i, r in enumerate(rows, 1):
            q = questions[r["id"]]
            verdict = await judge(
                q.question,
                q.answer or "(no answer: the question is unanswerable)",
                r["prediction"],
                question_type=q.category,
                abstention=q.abstention,
                question_date=q.question_date,
            )
            out.append({**r, "verdict": verdict, "f1": score_f1(args.dataset, r["prediction"], q)})
            print(f"{i}/{len(rows)} {r['id']}: hand {r['correct']}, judge {verdict}", flush=True)
    finally:
        mem.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="The LLM judge's agreement with hand labels (false positives/negatives).")
    ap.add_argument("--predictions", required=True, type=Path, help="a run's predictions.jsonl")
    ap.add_argument("--labels", required=True, type=Path, help='JSONL of {"id", "correct": bool, "why"}')
    ap.add_argument("--dataset", default="longmemeval_s")
    ap.add_argument("--split", default="test")
    ap.add_argument("--llm", default="local:qwen2.5-1.5b", help="the judge model (the bench answerer by default)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "judge-agreement")
    args = ap.parse_args()

    preds = {r["id"]: r for r in map(json.loads, args.predictions.read_text("utf-8").splitlines()) if r}
    labels = [json.loads(line) for line in args.labels.read_text("utf-8").splitlines() if line.strip()]
    missing = [x["id"] for x in labels if x["id"] not in preds]
    if missing:
        ap.error(f"{len(missing)} labelled ids are not in {args.predictions}: {missing[:5]}")
    questions = {q.id: q for c in load_dataset(args.dataset, args.split) for q in c.questions}
    rows = [{"id": x["id"], "correct": bool(x["correct"]), "prediction": preds[x["id"]]["prediction"]} for x in labels]
    judged = asyncio.run(judge_rows(args, rows, questions))
    dated = all(questions[x["id"]].question_date for x in labels)  # LongMemEval's questions all carry one

    ok = [r for r in judged if r["verdict"] is not None]
    by_type: dict[str, list] = defaultdict(list)
    for r in ok:
        by_type[questions[r["id"]].category].append(r)
    result = {
        "judge": counts([(r["correct"], r["verdict"]) for r in ok]),
        "f1_as_verdict": counts([(r["correct"], r["f1"] >= F1_CORRECT) for r in judged]),
        "judge_errors": len(judged) - len(ok),
        "by_type": {
            t: {
                "judge": counts([(r["correct"], r["verdict"]) for r in rs]),
                "f1_as_verdict": counts([(r["correct"], r["f1"] >= F1_CORRECT) for r in rs]),
            }
            for t, rs in sorted(by_type.items())
        },
        "rows": judged,
        "provenance": provenance(
            data_file=str(dataset_path(args.dataset)),
            data_sha256=sha256_file(dataset_path(args.dataset)),
            judge_model=args.llm,
            prompt_versions={"judge": judge_prompt_version(args.dataset, dated)},
            predictions=str(args.predictions),
            predictions_sha256=sha256_file(args.predictions),
            labels=str(args.labels),
            labels_sha256=sha256_file(args.labels),
        ),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "agreement.json", result)

    def line(name: str, c: dict) -> str:
        if not c.get("n"):
            return f"| {name} | 0 | - | - | - | - |"
        return (
            f"| {name} | {c['n']} | {c['accuracy']:.3f} | {c['false_positives']} | {c['false_negatives']} "
            f"| {c['kappa']:.2f} |"
        )

    md = [
        "# The judge against hand labels",
        "",
        f"Judge: {args.llm}, prompt {judge_prompt_version(args.dataset, dated)}; answers: `{args.predictions}`; hand labels: "
        f"`{args.labels}` ({len(labels)} answers, {result['judge']['hand_correct'] * len(ok):.0f} of {len(ok)} "
        f"judged ones correct by hand). F1 as a verdict: F1 >= {F1_CORRECT}. Judge errors (no label): "
        f"{result['judge_errors']}.",
        "",
        "| rater | n | agreement | false positives | false negatives | Cohen's kappa |",
        "|---|---|---|---|---|---|",
        line("judge (all)", result["judge"]),
        line("F1 >= 0.5 (all)", result["f1_as_verdict"]),
    ]
    for t, c in result["by_type"].items():
        md += [line(f"judge, {t}", c["judge"]), line(f"F1 >= 0.5, {t}", c["f1_as_verdict"])]
    write_text_atomic(args.out / "agreement.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What ``make demo``'s F1 means: the run's token F1 with its 95% bootstrap interval, next to the
README's figure for the same configuration, read from a frontier report (``frontier.json`` and the
configuration's ``predictions.jsonl`` under ``results/``), never from a number written here.

Usage: ``python scripts/demo_report.py RUN_DIR [--reference results/frontier-locomo-1.5b]
[--label rag]``. Prints three lines: the run's F1 over its questions; the reference's F1 and
interval over its slice; the reference's F1 on the questions both answered (the like-for-like
comparison, when they share any). Exit status 1 when a file is missing or the label is not a row
of the reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memfrontier.frontier.stats import bootstrap_ci


def _f1s(predictions: Path) -> dict[str, float]:
    """Question id -> token F1 of a run's ``predictions.jsonl`` (the last line of an id wins)."""
    out: dict[str, float] = {}
    for line in predictions.read_text("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("f1") is not None:
                out[row["id"]] = float(row["f1"])
    return out


def report(run_dir: Path, reference: Path, label: str) -> list[str]:
    """The report's lines (see the module docstring). Raises FileNotFoundError, KeyError (no row
    ``label`` with a result in ``reference/frontier.json``) or ValueError (a run without scored
    questions)."""
    run = _f1s(run_dir / "predictions.jsonl")
    if not run:
        raise ValueError(f"{run_dir / 'predictions.jsonl'} holds no scored question")
    llm = json.loads((run_dir / "summary.json").read_text("utf-8"))["config"].get("llm")
    f1, lo, hi = bootstrap_ci(list(run.values()))
    frontier = json.loads((reference / "frontier.json").read_text("utf-8"))
    rows = [r for r in frontier["rows"] if r.get("label") == label and r.get("status") == "ok"]
    if not rows:
        raise KeyError(f"no result for {label!r} in {reference / 'frontier.json'}")
    ref = rows[0]
    model = frontier.get("run_options", {}).get("llm")
    lines = [
        f"demo: {label} F1 {f1:.3f} [{lo:.3f}, {hi:.3f}] on {len(run)} questions ({run_dir}, {llm})",
        (
            f"README's figure: {label} F1 {ref['f1']:.3f} [{ref['f1_low']:.3f}, {ref['f1_high']:.3f}] on its "
            f"{ref['n']}-question slice ({reference}, {model})"
        ),
    ]
    ref_preds = reference / "configs" / label / "predictions.jsonl"
    shared = sorted(set(run) & set(_f1s(ref_preds))) if ref_preds.is_file() else []
    if shared:
        ref_f1 = _f1s(ref_preds)
        mine = sum(run[q] for q in shared) / len(shared)
        theirs = sum(ref_f1[q] for q in shared) / len(shared)
        lines.append(
            f"on the {len(shared)} questions both answered: demo {mine:.3f}, README's run {theirs:.3f} (same "
            "model, seed and questions: these should agree closely; the intervals above are wide because "
            "each question moves F1 by up to 1/n)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="demo_report.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--reference", type=Path, default=Path("results/frontier-locomo-1.5b"))
    ap.add_argument("--label", default="rag")
    args = ap.parse_args(argv)
    try:
        lines = report(args.run_dir, args.reference, args.label)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

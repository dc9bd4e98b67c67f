"""Two ``bench_retrieval.py`` runs side by side: per set and configuration, evidence recall and
context tokens of each, and B minus A paired by question with its 95% bootstrap interval (the
frontier's :func:`~memfrontier.frontier.stats.paired_diff_ci`). For a change that must not lose
quality (another embedder, derived vectors), A is the run before and B the run after.

    python benchmarks/compare_retrieval.py A/retrieval.json B/retrieval.json [--within 0.01]

``--within``: the largest loss of mean recall accepted; the last column says whether B holds it
(a loss measured in the paired mean, not the interval: the interval says how sure it is).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memfrontier.frontier.stats import paired_diff_ci  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="retrieval.json of the run before")
    ap.add_argument("b", type=Path, help="retrieval.json of the run after")
    ap.add_argument("--within", type=float, default=0.01, help="largest accepted loss of mean recall")
    args = ap.parse_args()
    docs = [json.loads(p.read_text("utf-8")) for p in (args.a, args.b)]
    models = [d.get("provenance", {}).get("models", {}).get("embedder", "?") for d in docs]
    print(f"A: {args.a} (embedder {models[0]})\nB: {args.b} (embedder {models[1]})\n")
    print(
        f"| set | configuration | n | recall A | recall B | B - A [95% interval] | tokens A / B | loss <= {args.within} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in docs[0]["results"].items():
        for label, ra in rows.items():
            rb = docs[1]["results"].get(name, {}).get(label)
            if rb is None or "recall_by_question" not in ra or "recall_by_question" not in rb:
                continue
            d = paired_diff_ci(rb["recall_by_question"], ra["recall_by_question"])
            print(
                f"| {name} | {label} | {d['n']} | {ra['evidence_recall']:.3f} | {rb['evidence_recall']:.3f} | "
                f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | "
                f"{ra['context_tokens_mean']:.0f} / {rb['context_tokens_mean']:.0f} | "
                f"{'yes' if d['mean'] >= -args.within else 'no'} |"
            )


if __name__ == "__main__":
    main()

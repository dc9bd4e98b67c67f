"""What the prompt benchmarks share (bench_qad_episode.py, bench_indexer_notes.py): their command
line and the turns they read, the first sessions of LoCoMo test conversations or LongMemEval
questions."""

from __future__ import annotations

import argparse

from memfrontier.eval.datasets import load_dataset
from memfrontier.train.qar import first_sessions


def parse_args(doc: str, model_help: str) -> argparse.Namespace:
    """``--llm`` (default the 1.5B bench model), ``--dataset``, ``--conversation``, ``--sessions``,
    ``--data-root``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", default="local:qwen2.5-1.5b", help=f"{model_help} (make_llm spec)")
    ap.add_argument("--dataset", choices=("locomo", "longmemeval"), default="locomo")
    ap.add_argument(
        "--conversation", default="conv-49", help="conversation ids, comma-separated (LongMemEval: question ids)"
    )
    ap.add_argument("--sessions", type=int, default=4, help="first sessions of each conversation")
    ap.add_argument("--data-root", default=None)
    return ap.parse_args()


def conversation_turns(args: argparse.Namespace):
    """(ids, records of the first ``args.sessions`` sessions of each conversation named by
    ``args.conversation``) of the LoCoMo test split or the LongMemEval file. Raises SystemExit
    naming an id that is not in the data."""
    split = "test" if args.dataset == "locomo" else "all"
    wanted = [c.strip() for c in args.conversation.split(",") if c.strip()]
    convs = {c.id: c for c in load_dataset(args.dataset, split, data_root=args.data_root)}
    missing = [c for c in wanted if c not in convs]
    if missing or not wanted:
        raise SystemExit(f"not in {args.dataset} ({split}): {', '.join(missing) or '(no id given)'}")
    return ",".join(wanted), [r for c in wanted for r in first_sessions(convs[c].records, args.sessions)]

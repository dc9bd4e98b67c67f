"""What the prompt benchmarks share (bench_qad_episode.py, bench_indexer_notes.py): their command
line and the turns they read, the first sessions of one LoCoMo test conversation."""

from __future__ import annotations

import argparse

from memfrontier.eval.datasets import load_dataset
from memfrontier.train.qar import first_sessions


def parse_args(doc: str, model_help: str) -> argparse.Namespace:
    """``--llm`` (default the 1.5B bench model), ``--conversation``, ``--sessions``, ``--data-root``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", default="local:qwen2.5-1.5b", help=f"{model_help} (make_llm spec)")
    ap.add_argument("--conversation", default="conv-49")
    ap.add_argument("--sessions", type=int, default=4, help="first sessions of the conversation")
    ap.add_argument("--data-root", default=None)
    return ap.parse_args()


def conversation_turns(args: argparse.Namespace):
    """(conversation, records of its first ``args.sessions`` sessions) of the LoCoMo test split."""
    (conv,) = [c for c in load_dataset("locomo", "test", data_root=args.data_root) if c.id == args.conversation]
    return conv, first_sessions(conv.records, args.sessions)

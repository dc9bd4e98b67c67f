"""Wall time of one evaluation run in this process (asyncio) and on local Ray, same slice.

Runs the LoCoMo test slice (``--limit`` questions, ``--strategy``, embedded models) once without
Ray and once with ``--ray local`` and ``--workers`` workers, each into its own output folder (so
each ingests and builds its own store), and prints both wall times, their ratio (Ray / local;
Ray's start-up is included), and whether every prediction row is the same apart from measured
wall times. Needs the ``ray`` extra.

    .venv/bin/python benchmarks/bench_ray.py [--limit 12] [--workers 2] [--strategy rag]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from memfrontier.eval.runner import EvalConfig, run_eval


def _without_wall(x):
    if isinstance(x, dict):
        return {k: _without_wall(v) for k, v in x.items() if "wall" not in k}
    if isinstance(x, list):
        return [_without_wall(v) for v in x]
    return x


def _rows(out: Path) -> dict[str, dict]:
    lines = (out / "predictions.jsonl").read_text("utf-8").splitlines()
    return {r["id"]: _without_wall(r) for r in map(json.loads, lines)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--strategy", default="rag")
    ap.add_argument("--data-root", type=Path, default=None)
    args = ap.parse_args()

    base = EvalConfig(
        dataset="locomo", split="test", strategy=args.strategy, limit=args.limit, data_root=args.data_root
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        asyncio.run(run_eval(base.model_copy(update={"out": root / "local"})))
        local_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        asyncio.run(
            run_eval(base.model_copy(update={"out": root / "ray", "ray": "local", "concurrency": args.workers}))
        )
        ray_s = time.perf_counter() - t0
        same = _rows(root / "local") == _rows(root / "ray")
    print(f"{args.strategy}, {args.limit} LoCoMo test questions, embedded models")
    print(f"local (asyncio, 1 process):        {local_s:8.1f} s")
    print(f"ray local ({args.workers} workers, incl. start): {ray_s:8.1f} s   ratio ray/local {ray_s / local_s:.2f}")
    print(f"predictions identical (wall times aside): {same}")


if __name__ == "__main__":
    main()

"""The frontier's own overhead: the same configurations run as separate ``eval`` runs and as one
``frontier`` run (same questions, same store reuse), wall time of each, and the ratio.

The frontier adds a spec, a shared store (so ingest and view construction happen once instead of
once per configuration) and the report (bootstrap intervals, Pareto set, plots). Goal: frontier
wall time within 1.05x of the sum of its eval runs over a store that is already built (``--warm``,
the default here: both paths first ingest into their store, then time the answering and the
report). Two configurations (oracle and rag) on the embedded models.

    .venv/bin/python benchmarks/bench_frontier.py [--limit 6] [--rounds 3] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from memfrontier.eval.runner import EvalConfig, run_eval
from memfrontier.frontier.run import run_frontier
from memfrontier.frontier.spec import FrontierSpec

CONFIGS = [{"label": "oracle", "strategy": "oracle"}, {"label": "rag", "strategy": "rag", "options": {"k": 4}}]


async def main(args) -> None:
    spec = FrontierSpec.model_validate({"name": "bench", "configurations": CONFIGS})
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = EvalConfig(limit=args.limit, data_root=args.data_root, seed=7)
        # warm both paths' stores (ingest + MiniLM) with a one-question run, so timing is answering + reporting
        for c in CONFIGS:
            await run_eval(
                base.model_copy(
                    update={
                        "strategy": c["strategy"],
                        "strategy_options": c.get("options", {}),
                        "limit": 1,
                        "out": tmp / "warm" / c["label"],
                        "store": tmp / "store-e",
                    }
                )
            )
        await run_frontier(spec, base.model_copy(update={"limit": 1, "store": tmp / "store-f"}), tmp / "fwarm")

        evals, fronts = [], []
        for r in range(args.rounds):  # alternate the order: a machine shared with other jobs drifts
            order = ("evals", "frontier") if r % 2 == 0 else ("frontier", "evals")
            for which in order:
                t0 = time.perf_counter()
                if which == "evals":
                    for c in CONFIGS:
                        await run_eval(
                            base.model_copy(
                                update={
                                    "strategy": c["strategy"],
                                    "strategy_options": c.get("options", {}),
                                    "out": tmp / f"evals{r}" / c["label"],
                                    "store": tmp / "store-e",
                                }
                            )
                        )
                    evals.append(time.perf_counter() - t0)
                else:
                    report = await run_frontier(
                        spec, base.model_copy(update={"store": tmp / "store-f"}), tmp / f"front{r}"
                    )
                    fronts.append(time.perf_counter() - t0)
    n = len(report["question_ids"])
    ratios = [f / e for f, e in zip(fronts, evals)]
    print(f"{len(CONFIGS)} configurations x {n} questions, embedded models, warm stores, {args.rounds} rounds")
    for r, (e, f, q) in enumerate(zip(evals, fronts, ratios)):
        print(f"round {r}: sum of eval runs {e:7.1f} s   frontier run {f:7.1f} s   ratio {q:.3f}")
    print(f"median ratio {statistics.median(ratios):.3f} (goal <= 1.05)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds, the order of the two paths alternating")
    ap.add_argument("--data-root", type=Path, default=None)
    asyncio.run(main(ap.parse_args()))

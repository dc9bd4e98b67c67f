"""Micro-benchmark of BudgetMem tier-router decisions (goal: < 5 ms per question on two cores).

One question = 5 tier decisions in pipeline order: ``filter`` (1 forward), ``entity`` /
``temporal`` / ``topic`` from one shared state (1 batched forward via ``decide_many``, or 3
forwards with ``--unbatched``), ``summary`` (1 forward). The router has the default size
(384-d MiniLM embeddings, hidden 256); embeddings are random unit vectors (the router's cost does
not depend on their values; computing them is the embedder's cost, not the router's).

Prints p50 / p95 / mean milliseconds per question and the share under 5 ms, greedy (test time)
and sampled (training), once with torch's default intra-op threads (as on the machine) and once
with 1 thread (or only with ``--threads N``). On an oversubscribed machine (load average above
the core count) multi-threaded tiny matmuls wait on descheduled workers and the tail explodes;
the load average is printed for that reason.

Usage::

    .venv/bin/python benchmarks/bench_router.py [--questions 2000] [--threads N] [--unbatched]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch

from memfrontier.strategies.budgetmem.router import TierRouter

EXTRACTION = ["entity", "temporal", "topic"]


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def one_question(router, q, s0, s1, s2, greedy, gen, batched) -> list[str]:
    tiers = [router.decide(q, s0, "filter", greedy, gen)[0]]
    if batched:
        tiers += [t for t, _, _ in router.decide_many(q, s1, EXTRACTION, greedy, gen)]
    else:
        tiers += [router.decide(q, s1, m, greedy, gen)[0] for m in EXTRACTION]
    tiers.append(router.decide(q, s2, "summary", greedy, gen)[0])
    return tiers


def run(router, states, greedy, batched, warmup=50) -> list[float]:
    gen = torch.Generator().manual_seed(0)
    times_ms = []
    for i, (q, s0, s1, s2) in enumerate(states):
        t0 = time.perf_counter()
        one_question(router, q, s0, s1, s2, greedy, gen, batched)
        if i >= warmup:
            times_ms.append((time.perf_counter() - t0) * 1e3)
    return times_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--unbatched", action="store_true", help="3 separate forwards for the extraction modules")
    ap.add_argument("--emb-dim", type=int, default=384)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()
    thread_counts = [args.threads] if args.threads else sorted({torch.get_num_threads(), 1}, reverse=True)

    torch.manual_seed(0)
    router = TierRouter(emb_dim=args.emb_dim, hidden=args.hidden).eval()
    rng = np.random.default_rng(0)
    n = args.questions + 50
    q, s0, s1, s2 = (_unit(rng, n, args.emb_dim) for _ in range(4))
    states = list(zip(q, s0, s1, s2))
    n_params = sum(p.numel() for p in router.parameters())

    print(
        f"torch {torch.__version__} | python {platform.python_version()} | cpus {os.cpu_count()} | "
        f"default torch threads {torch.get_num_threads()}"
    )
    print(
        f"router emb_dim={args.emb_dim} hidden={args.hidden} params={n_params:,} | "
        f"{args.questions} questions x 5 decisions, extraction {'unbatched' if args.unbatched else 'batched'}"
    )
    for threads in thread_counts:
        torch.set_num_threads(threads)
        print(f"torch threads {threads} | load avg {os.getloadavg()[0]:.2f}")
        for greedy in (True, False):
            t = run(router, states, greedy, not args.unbatched)
            p50, p95 = np.percentile(t, [50, 95])
            under = float(np.mean(np.asarray(t) < 5.0))
            print(
                f"  {'greedy (test) ' if greedy else 'sampled (train)'}: per question p50 {p50:.3f} ms  "
                f"p95 {p95:.3f} ms  mean {statistics.fmean(t):.3f} ms  under 5 ms {under:.1%}"
            )


if __name__ == "__main__":
    main()

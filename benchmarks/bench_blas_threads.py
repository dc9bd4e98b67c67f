"""NumPy's OpenBLAS threads in the memory path: the products a query runs, with OpenBLAS's
default thread count against one thread (memfrontier's default, ``core/threads.py``), quiet and
beside a load of ``--load-procs`` ``while True: pass`` processes (default: four per core). On the
2-core box two or four spinning processes did not always show the effect and eight did; two
frontier runs of the 1.5B model (llama.cpp, two threads each) did: p95 12 ms with the default
threads, 63 us with one.

The products, float32: a query against a scope's vectors (``n x 384 @ 384``, the dense scan of
a store partition or a memory bank; n = 600, a LoCoMo conversation's turns) and the turn
reranker's hidden layer (``64 x 384 @ 384 x 32``). Prints p50 / p95 per setting and the ratio of
the default to one thread, measured in the same run.

    python benchmarks/bench_blas_threads.py            # about a minute
    python benchmarks/bench_blas_threads.py --n 5000 --repeats 500 --load-procs 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from threadpoolctl import ThreadpoolController


def start_load(n: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    time.sleep(0.5)
    return procs


def timed(fn, repeats: int) -> list[float]:
    for _ in range(20):  # warm-up: thread pools started, caches filled
        fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=600, help="vectors in the scope (rows of the dense scan)")
    ap.add_argument("--repeats", type=int, default=2000)
    ap.add_argument("--load-procs", type=int, default=4 * (os.cpu_count() or 1), help="busy processes of the load")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    m = rng.normal(size=(args.n, 384)).astype(np.float32)
    q = rng.normal(size=384).astype(np.float32)
    p = rng.normal(size=(64, 384)).astype(np.float32)
    w = rng.normal(size=(32, 384)).astype(np.float32)

    def step():
        m @ q
        p @ w.T

    blas = ThreadpoolController().select(internal_api="openblas")
    default = max(i["num_threads"] for i in blas.info()) if blas.info() else 1
    print(
        f"OpenBLAS default threads: {default}; scope {args.n} x 384; {args.repeats} repeats; load: {args.load_procs} busy processes"
    )
    for load in (False, True):
        procs = start_load(args.load_procs) if load else []
        try:
            res = {}
            for threads in (default, 1):
                with blas.limit(limits=threads):
                    ts = timed(step, args.repeats)
                res[threads] = (statistics.median(ts), sorted(ts)[int(0.95 * len(ts))])
                print(
                    f"{'loaded' if load else 'quiet ':6}  {threads} thread(s)  p50 {1e6 * res[threads][0]:8.0f} us"
                    f"  p95 {1e6 * res[threads][1]:8.0f} us",
                    flush=True,
                )
            print(
                f"{'loaded' if load else 'quiet ':6}  default / one thread: p50 x{res[default][0] / res[1][0]:.1f}, "
                f"p95 x{res[default][1] / res[1][1]:.1f}"
            )
        finally:
            for pr in procs:
                pr.kill()


if __name__ == "__main__":
    main()

"""The CPU thread policy of the process: how many threads each CPU-bound piece may use.

Memory runs beside a model server, an agent, a database, an eval: its cores are usually busy. A
torch encode split over N intra-op (OpenMP) threads waits at every layer for the slowest thread;
when another process holds a core, that thread is descheduled and the whole encode stalls. On the
2-core development box (already shared), one MiniLM query took ~50 ms with 1 thread and 180 ms
with 2, 850 ms with 2 under a synthetic two-process CPU load, when OpenMP threads spin while they
wait (its default). With passive waiting the 2-thread collapse disappears (~30 ms quiet, ~60 ms
loaded, like 1 thread), and a 256-sentence ingest batch gains at most ~15% from a second thread
(none under load). ``benchmarks/bench_overhead.py --threads`` prints the figures of the machine it
runs on. Hence:

- **OpenMP waits passively** (``OMP_WAIT_POLICY=PASSIVE``, :func:`passive_omp_wait`) in the
  serving paths: the embedder sets it before it first imports torch, the llama.cpp backend when
  it is imported; a value set by the user wins. A spinning waiter burns the core another thread
  or process needs: a llama.cpp decode slowed ~25x and a torch encode ~10x on shared cores. It
  only takes effect if it comes before the OpenMP runtime loads (the training modules, which
  import torch first, keep OpenMP's default).

- **torch (MiniLM query and batch encodes, the routers): 1 intra-op thread by default.**
  ``torch.set_num_threads`` is process-wide and not safe to flip around individual encodes while
  other threads encode, so the count is set once, when the first embedder model loads
  (:func:`apply_torch_threads`), and holds for the whole process. A dedicated ingest machine with
  idle cores may raise it: ``MEMFRONTIER_TORCH_THREADS=4`` (or ``MiniLMEmbedder(num_threads=4)``,
  which wins over the variable).
- **Where that work runs: the CPU pool, ``os.cpu_count()`` threads by default.** A strategy, the
  eval runner, the facade and the servers never embed or search on the event loop: they hand the
  call to :func:`run_cpu`, one process-wide thread pool (:func:`cpu_executor`) of
  :func:`cpu_workers` threads (``MEMFRONTIER_CPU_WORKERS``). Each job is one query's embedding
  (one intra-op thread, above) plus its dense scan and BM25 scoring, so one worker per core keeps
  every core busy; more workers than cores only time-slice the same cores, and each question's
  search then takes longer (at concurrency 16 on 2 cores the loop would otherwise run up to
  ``min(32, cores + 4)`` searches at once in asyncio's default pool).
- **NumPy's BLAS (OpenBLAS): 1 thread by default.** The memory path's matrix products are small
  (a query against a scope's few hundred vectors, a reranker's 64 candidates), a few tens of
  microseconds on one thread. OpenBLAS splits them over every core and its threads spin while they
  wait: beside two 1.5B-model frontier runs on the 2-core box, ``M @ q`` for a 600 x 384 matrix and
  a 64 x 384 by 384 x 32 product took 12 ms p95 with OpenBLAS's default threads against 63 us with
  one (quiet: about 50 us either way; ``benchmarks/bench_blas_threads.py``). Applying it costs
  ~50 ms once per process (threadpoolctl finds the loaded libraries). The count is set once per
  process (threadpoolctl, OpenBLAS only: torch keeps its own count), when the CPU pool or the
  first embedder is made (:func:`apply_blas_threads`); ``MEMFRONTIER_BLAS_THREADS`` raises it.
- **BM25**: scored in Python/numpy over the store's term index (SQLite store) or inside
  PostgreSQL, in the CPU pool's thread, one thread per query; nothing to set.
- **The embedded LLM (llama.cpp)**: ``os.cpu_count()`` by default (decoding is the work the user
  waits for and uses every core it gets); ``MEMFRONTIER_LLM_THREADS`` or the ``n_threads``
  argument sets it (:func:`llm_threads`).

Invalid settings (not a positive integer) raise :class:`ThreadConfigError` naming the variable
and the value, at first use rather than silently falling back.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

#: Environment variable: torch intra-op threads (positive integer; default :data:`DEFAULT_TORCH_THREADS`).
TORCH_THREADS_ENV = "MEMFRONTIER_TORCH_THREADS"
#: Environment variable: llama.cpp threads of the embedded LLM (positive integer; default ``os.cpu_count()``).
LLM_THREADS_ENV = "MEMFRONTIER_LLM_THREADS"
#: Environment variable: threads of the CPU pool (:func:`cpu_executor`; default ``os.cpu_count()``).
CPU_WORKERS_ENV = "MEMFRONTIER_CPU_WORKERS"
#: Environment variable: OpenBLAS threads of NumPy (positive integer; default :data:`DEFAULT_BLAS_THREADS`).
BLAS_THREADS_ENV = "MEMFRONTIER_BLAS_THREADS"
#: torch intra-op threads when nothing is configured.
DEFAULT_TORCH_THREADS = 1
#: OpenBLAS threads when nothing is configured.
DEFAULT_BLAS_THREADS = 1


def passive_omp_wait() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless the user set a policy. libgomp reads it when it loads
    (first ``import torch`` / ``import llama_cpp``), so call it before; subprocesses inherit it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class ThreadConfigError(ValueError):
    """A thread count that is not a positive integer (from the environment or an argument)."""


def _positive(value: object, source: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if isinstance(value, bool) or n < 1 or (isinstance(value, float) and value != n):
        raise ThreadConfigError(f"{source} must be a positive integer number of threads, got {value!r}")
    return n


def torch_threads(explicit: int | None = None) -> int:
    """Intra-op threads for torch: ``explicit`` if given, else ``$MEMFRONTIER_TORCH_THREADS``, else 1.

    Raises :class:`ThreadConfigError` if the chosen value is not a positive integer."""
    if explicit is not None:
        return _positive(explicit, "num_threads")
    raw = os.environ.get(TORCH_THREADS_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_TORCH_THREADS
    return _positive(raw, TORCH_THREADS_ENV)


def blas_threads() -> int:
    """OpenBLAS threads: ``$MEMFRONTIER_BLAS_THREADS``, else 1. Raises :class:`ThreadConfigError`
    if it is not a positive integer."""
    raw = os.environ.get(BLAS_THREADS_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_BLAS_THREADS
    return _positive(raw, BLAS_THREADS_ENV)


def llm_threads(explicit: int | None = None) -> int:
    """llama.cpp threads: ``explicit`` if given, else ``$MEMFRONTIER_LLM_THREADS``, else ``os.cpu_count()``.

    Raises :class:`ThreadConfigError` if the chosen value is not a positive integer."""
    if explicit is not None:
        return _positive(explicit, "n_threads")
    raw = os.environ.get(LLM_THREADS_ENV)
    if raw is None or raw.strip() == "":
        return os.cpu_count() or 1
    return _positive(raw, LLM_THREADS_ENV)


def cpu_workers(explicit: int | None = None) -> int:
    """Threads of the CPU pool: ``explicit`` if given, else ``$MEMFRONTIER_CPU_WORKERS``, else
    ``os.cpu_count()``. Raises :class:`ThreadConfigError` if it is not a positive integer."""
    if explicit is not None:
        return _positive(explicit, "workers")
    raw = os.environ.get(CPU_WORKERS_ENV)
    if raw is None or raw.strip() == "":
        return os.cpu_count() or 1
    return _positive(raw, CPU_WORKERS_ENV)


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def cpu_executor() -> ThreadPoolExecutor:
    """The process-wide pool for CPU-bound memory work (embedding, dense and BM25 search, chunking
    an ingest): :func:`cpu_workers` threads, created on first use, sized once per process."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            apply_blas_threads()
            _POOL = ThreadPoolExecutor(max_workers=cpu_workers(), thread_name_prefix="memfrontier-cpu")
        return _POOL


async def run_cpu(fn, /, *args, **kwargs):
    """``await run_cpu(fn, *args, **kwargs)``: ``fn`` in :func:`cpu_executor`, off the event loop,
    with the caller's context variables (the ledger in use), as :func:`asyncio.to_thread` does
    in asyncio's default pool."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(cpu_executor(), call)


_TORCH_LOCK = threading.Lock()


def apply_torch_threads(explicit: int | None = None) -> int:
    """Set torch's process-wide intra-op thread count to :func:`torch_threads` (``explicit``) and
    return it. Imports torch (call it where the model loads, not at import time). Idempotent;
    the last caller's value holds for the whole process (there is one count per process)."""
    n = torch_threads(explicit)
    import torch

    with _TORCH_LOCK:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    return n


_BLAS_LOCK = threading.Lock()
_BLAS_APPLIED: int | None = None


def apply_blas_threads() -> int:
    """Limit the OpenBLAS libraries loaded in this process (NumPy's) to :func:`blas_threads`
    threads, once per process (later calls return the count; a changed variable is not re-read).
    Returns the count."""
    global _BLAS_APPLIED
    with _BLAS_LOCK:
        if _BLAS_APPLIED is None:
            n = blas_threads()
            import numpy  # noqa: F401  (its OpenBLAS must be loaded to be found)
            from threadpoolctl import ThreadpoolController

            ThreadpoolController().select(internal_api="openblas").limit(limits=n)
            _BLAS_APPLIED = n
        return _BLAS_APPLIED


__all__ = [
    "BLAS_THREADS_ENV",
    "CPU_WORKERS_ENV",
    "DEFAULT_BLAS_THREADS",
    "DEFAULT_TORCH_THREADS",
    "LLM_THREADS_ENV",
    "TORCH_THREADS_ENV",
    "ThreadConfigError",
    "apply_blas_threads",
    "apply_torch_threads",
    "blas_threads",
    "cpu_executor",
    "cpu_workers",
    "llm_threads",
    "passive_omp_wait",
    "run_cpu",
    "torch_threads",
]

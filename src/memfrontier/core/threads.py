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
- **BM25**: runs inside SQLite FTS5 / PostgreSQL, one thread per query; nothing to set.
- **The embedded LLM (llama.cpp)**: ``os.cpu_count()`` by default (decoding is the work the user
  waits for and uses every core it gets); ``MEMFRONTIER_LLM_THREADS`` or the ``n_threads``
  argument sets it (:func:`llm_threads`).

Invalid settings (not a positive integer) raise :class:`ThreadConfigError` naming the variable
and the value, at first use rather than silently falling back.
"""

from __future__ import annotations

import os
import threading

#: Environment variable: torch intra-op threads (positive integer; default :data:`DEFAULT_TORCH_THREADS`).
TORCH_THREADS_ENV = "MEMFRONTIER_TORCH_THREADS"
#: Environment variable: llama.cpp threads of the embedded LLM (positive integer; default ``os.cpu_count()``).
LLM_THREADS_ENV = "MEMFRONTIER_LLM_THREADS"
#: torch intra-op threads when nothing is configured.
DEFAULT_TORCH_THREADS = 1


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


def llm_threads(explicit: int | None = None) -> int:
    """llama.cpp threads: ``explicit`` if given, else ``$MEMFRONTIER_LLM_THREADS``, else ``os.cpu_count()``.

    Raises :class:`ThreadConfigError` if the chosen value is not a positive integer."""
    if explicit is not None:
        return _positive(explicit, "n_threads")
    raw = os.environ.get(LLM_THREADS_ENV)
    if raw is None or raw.strip() == "":
        return os.cpu_count() or 1
    return _positive(raw, LLM_THREADS_ENV)


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


__all__ = [
    "DEFAULT_TORCH_THREADS",
    "LLM_THREADS_ENV",
    "TORCH_THREADS_ENV",
    "ThreadConfigError",
    "apply_torch_threads",
    "llm_threads",
    "passive_omp_wait",
    "torch_threads",
]

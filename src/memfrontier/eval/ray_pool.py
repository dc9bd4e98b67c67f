"""Evaluation on Ray: the protocol's conversations and questions as tasks of a pool of workers.

``memfrontier eval|frontier --ray ADDRESS`` (``EvalConfig.ray``) runs the two loops of
:func:`~memfrontier.eval.runner.run_eval` on Ray instead of this process's event loop
(:class:`RayPool`, an :class:`~memfrontier.eval.executor.Executor`):

1. ingest + offline construction, one task per conversation;
2. once every conversation is built (BM25 statistics and views are then the same as in a local
   run), the questions, one task each.

Each worker is a Ray actor that opens the run's store, models, judge and strategy once with
:func:`~memfrontier.eval.tasks.open_run` (its own model clients and ledgers) and runs one task at
a time with the same functions as the local path (:func:`~memfrontier.eval.tasks.construct`,
:func:`~memfrontier.eval.tasks.answer_question`). The driver receives each result as it finishes
and writes it exactly as the local path does (``predictions.jsonl`` appended and fsynced,
``summary.json`` at the end), so a run interrupted under Ray resumes locally or under Ray, and a
deterministic strategy (greedy decoding) gives the same predictions, scores and costs either way.

Addresses: ``"local"`` starts Ray on this machine (``ray.init()``); ``"auto"`` joins the cluster
running on it; anything else (``"ray://head:10001"``) is passed to ``ray.init(address=...)``.
Workers: ``EvalConfig.concurrency``, at most the cluster's CPUs and the number of tasks; each
reserves one CPU. Every worker opens the store by path: on a cluster the store (and any file a
strategy option names) must be at the same absolute path on every node, and memfrontier must be
installed there (``pip install 'memfrontier[ray]'``). Ray is an optional extra; without it
:class:`RayUnavailableError` says how to install it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from ..core.types import Conversation, Question
from .config import EvalConfig
from .summary import structured_output_modes
from .tasks import answer_question, construct, open_run

#: Address that starts a local Ray instead of joining a cluster.
LOCAL = "local"
#: Paths of an EvalConfig that workers open; sent to them absolute.
_PATH_FIELDS = ("out", "store", "data_root", "data_file", "price_book")


class RayUnavailableError(ImportError):
    """``--ray`` was asked for but Ray is not installed."""


def require_ray():
    """The ``ray`` module; RayUnavailableError (naming the extra to install) without it."""
    try:
        import ray
    except ImportError as e:  # optional extra
        raise RayUnavailableError("--ray needs Ray, an optional extra: pip install 'memfrontier[ray]'") from e
    return ray


def init_ray(address: str) -> None:
    """Connect this process to Ray at ``address`` (see the module doc) unless it already is.
    Raises ValueError for an empty address and RayUnavailableError without Ray."""
    if not address or not address.strip():
        raise ValueError("ray address must be 'local', 'auto' or a cluster address such as ray://head:10001")
    ray = require_ray()
    if ray.is_initialized():
        return
    if address == LOCAL:
        ray.init(include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)


class EvalWorker:
    """One Ray worker of a run: its own store handle, model clients, judge and strategy. Tasks run
    one at a time (the actor is created with ``max_concurrency=1``)."""

    def __init__(self, cfg: dict):
        self.cfg = EvalConfig.model_validate(cfg)
        self.mem, self.judge, self.strategy = open_run(self.cfg)

    async def construct(self, conv: Conversation) -> tuple[str, dict]:
        return conv.id, await construct(self.mem, self.strategy, conv)

    async def answer(self, q: Question) -> dict:
        return await answer_question(self.mem, self.strategy, self.judge, self.cfg.dataset, q, self.cfg.scorer)

    async def structured_output_modes(self) -> dict[str, str]:
        return structured_output_modes()

    async def close(self) -> None:
        self.mem.close()


def worker_config(cfg: EvalConfig) -> dict:
    """``cfg`` as sent to workers: JSON, with its paths made absolute (a worker's working
    directory is not the driver's) and ``ray`` cleared (a worker runs its tasks in-process)."""
    data = cfg.model_dump(mode="json")
    for name in _PATH_FIELDS:
        if data.get(name) is not None:
            data[name] = str(Path(data[name]).resolve())
    if data.get("store") is None:
        data["store"] = str((Path(cfg.out) / "store").resolve())
    data["ray"] = None
    return data


class RayPool:
    """The workers of one run, an :class:`~memfrontier.eval.executor.Executor`. ``items``: the most
    tasks either loop will have (no more workers than that are started). Construction sends no
    progress events but ``ingest`` (the runner's) and does not stop a doomed build early. Call
    :meth:`close` when done (the workers release their store)."""

    def __init__(self, cfg: EvalConfig, *, items: int):
        init_ray(cfg.ray)
        ray = require_ray()
        self._ray = ray
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers_n = max(1, min(cfg.concurrency, cpus, items))
        actor = ray.remote(num_cpus=1, max_concurrency=1)(EvalWorker)
        conf = worker_config(cfg)
        self._workers = [actor.remote(conf) for _ in range(self.workers_n)]

    async def _map(self, method: str, items: Iterable) -> AsyncIterator:
        """Results of ``worker.method(item)`` for every item, in the order they finish; each
        worker has one task at a time. A task's error is raised here (as its own type)."""
        todo = list(items)[::-1]
        running: dict = {}
        idle = list(self._workers)
        while todo or running:
            while todo and idle:
                w = idle.pop()
                running[getattr(w, method).remote(todo.pop())] = w
            ready, _ = await asyncio.to_thread(self._ray.wait, list(running), num_returns=1)
            for ref in ready:
                idle.append(running.pop(ref))
                yield await asyncio.to_thread(self._ray.get, ref)

    def construct(self, convs: list[Conversation]) -> AsyncIterator[tuple[str, dict]]:
        """``(conversation id, construction entry)`` for each conversation, as they finish."""
        return self._map("construct", convs)

    def answer(self, questions: list[Question]) -> AsyncIterator[dict]:
        """The ``predictions.jsonl`` row of each question, as they finish."""
        return self._map("answer", questions)

    def structured_output_modes(self) -> dict[str, str]:
        """The structured-output modes the workers' endpoints settled on, merged."""
        merged: dict[str, str] = {}
        for modes in self._ray.get([w.structured_output_modes.remote() for w in self._workers]):
            merged.update(modes)
        return merged

    def close(self) -> None:
        """Close the workers' stores and end the workers (Ray itself stays up for the next run)."""
        try:  # after a failed task a worker may be gone: wait a bounded time, then end them all
            self._ray.wait([w.close.remote() for w in self._workers], num_returns=len(self._workers), timeout=60)
        finally:
            for w in self._workers:
                self._ray.kill(w)
            self._workers = []

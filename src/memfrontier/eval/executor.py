"""Where a run's work runs: the :class:`Executor` interface and the in-process one.

:func:`~memfrontier.eval.runner.run_eval` has one loop over an executor: every conversation is
built (:meth:`Executor.construct`) before any question is asked (:meth:`Executor.answer`); each
yields its results as they finish and the runner writes them. :class:`LocalExecutor` runs them on
this process's event loop; :class:`~memfrontier.eval.ray_pool.RayPool` on Ray workers. Both run
the same units of work (:mod:`memfrontier.eval.tasks`), so they give the same results.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from ..core.types import Conversation, Question
from .metrics import DEFAULT_SCORER, Scorer
from .summary import structured_output_modes
from .tasks import answer_question, construct


class Executor(Protocol):
    """Runs a run's construction and questions; :meth:`close` when done."""

    def construct(self, convs: list[Conversation]) -> AsyncIterator[tuple[str, dict]]:
        """``(conversation id, construction entry)`` (:func:`~memfrontier.eval.tasks.construct`'s)
        for each of ``convs``, as they finish."""

    def answer(self, questions: list[Question]) -> AsyncIterator[dict]:
        """The ``predictions.jsonl`` row (:func:`~memfrontier.eval.tasks.answer_question`'s) of
        each question, as they finish. Closed early, it stops the questions not yet finished."""

    def structured_output_modes(self) -> dict[str, str]:
        """The structured-output mode each OpenAI-compatible endpoint of the run settled on."""

    def close(self) -> None:
        """Release what the executor opened (not the memory it was given)."""


class LocalExecutor:
    """This process's event loop, on the run's ``mem``, ``strategy`` and ``judge`` (owned by the
    caller). Conversations are built one after another, with ``progress`` events (``embed``,
    ``build``, ``construct``: :func:`~memfrontier.eval.tasks.construct`) and ``stop_above`` (the
    fallback threshold a doomed build stops at; None: build on), each judged with the entries of
    those built before it and the turns still to build. Questions run ``concurrency`` at a time,
    scheduled in the given order, scored with ``scorer`` (:data:`~memfrontier.eval.metrics.SCORERS`)."""

    def __init__(
        self,
        mem,
        strategy,
        judge,
        dataset: str,
        *,
        concurrency: int = 1,
        progress: Callable | None = None,
        stop_above: float | None = None,
        scorer: Scorer = DEFAULT_SCORER,
    ):
        self.mem, self.strategy, self.judge, self.dataset, self.scorer = mem, strategy, judge, dataset, scorer
        self.concurrency = max(1, concurrency)
        self.progress = progress
        self.stop_above = stop_above

    async def construct(self, convs: list[Conversation]) -> AsyncIterator[tuple[str, dict]]:
        settled: list[dict] = []
        for i, c in enumerate(convs):
            entry = await construct(
                self.mem,
                self.strategy,
                c,
                self.progress,
                stop_above=self.stop_above,
                settled=list(settled),
                turns_left=sum(len(x.records) for x in convs[i + 1 :]),
            )
            settled.append(entry)
            yield c.id, entry
        warm = getattr(self.mem, "warm_answerer", None)
        if warm is not None:  # the answering model's client, before the first wave of questions
            await warm()

    def answer(self, questions: list[Question]) -> AsyncIterator[dict]:
        sem = asyncio.Semaphore(self.concurrency)

        async def one(q: Question) -> dict:
            async with sem:
                return await answer_question(self.mem, self.strategy, self.judge, self.dataset, q, self.scorer)

        return as_completed_in_order([one(q) for q in questions])

    def structured_output_modes(self) -> dict[str, str]:
        return structured_output_modes()

    def close(self) -> None:
        pass


async def as_completed_in_order(aws):
    """Yield the results of ``aws`` as they finish. They are scheduled in the given order, so under a
    semaphore of one they also run in it: questions in dataset order, a conversation's questions one
    after another (a local model then reuses the shared prompt prefix, e.g. longctx's whole history).
    ``asyncio.as_completed`` alone schedules a set, in hash order. Closed early (an error, Ctrl-C),
    it cancels the questions not yet finished and waits for them, so none is left running against
    a store that is about to close."""
    futs = [asyncio.ensure_future(a) for a in aws]
    try:
        for fut in asyncio.as_completed(futs):
            yield await fut
    finally:
        unfinished = [f for f in futs if not f.done()]
        for f in unfinished:
            f.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)

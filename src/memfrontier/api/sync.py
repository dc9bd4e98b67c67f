"""The synchronous facade: :class:`Memory`, the async core run on a private event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

from ..core.types import Budget, Hit, Preference, Record
from ..store.base import AddResult
from ..strategies import (
    Strategy,
    StrategyConfig,
)
from .memory import AsyncMemory
from .models import Answer, BuildReport, Recall


async def _drain() -> None:
    """Wait for every other task of the running loop, then its default executor's threads."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_default_executor()


class Memory:
    """Synchronous facade: the same methods, parameters and defaults as :class:`AsyncMemory`'s verbs
    (see its docstrings).

    Safe to share across threads: every call is submitted to one private event loop that runs in
    a daemon thread (``asyncio.run_coroutine_threadsafe``) and the calling thread waits for its
    result; the store underneath serialises writes. :meth:`close` stops the loop and joins the
    thread. Calling a sync method from inside the facade's own loop raises RuntimeError (use
    :attr:`aio` there).
    """

    def __init__(self, inner: AsyncMemory):
        self._inner = inner
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memfrontier-memory-loop", daemon=True)
        self._thread.start()
        self._closed = False
        self._close_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path, **kwargs) -> "Memory":
        """See :meth:`AsyncMemory.open`."""
        return cls(AsyncMemory.open(path, **kwargs))

    @property
    def aio(self) -> AsyncMemory:
        return self._inner

    def _run(self, coro):
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync Memory method was called from its own event loop; await Memory.aio instead")
        with self._close_lock:  # a call is either submitted before close() drains, or refused
            if self._closed:
                coro.close()
                raise RuntimeError("this Memory is closed")
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    def add(
        self,
        messages,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        session_id: str = "default",
        timestamp: str | None = None,
    ) -> AddResult:
        return self._run(
            self._inner.add(
                messages, user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id, timestamp=timestamp
            )
        )

    def search(
        self,
        query: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        k: int = 10,
        all_scopes: bool = False,
        fold: bool = True,
    ) -> list[Hit]:
        return self._run(
            self._inner.search(
                query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, all_scopes=all_scopes, fold=fold
            )
        )

    def ask(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str | Strategy = "rag",
        strategy_options: StrategyConfig | dict | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
    ) -> Answer:
        return self._run(
            self._inner.ask(
                question,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                strategy=strategy,
                strategy_options=strategy_options,
                preference=preference,
                budget=budget,
                question_date=question_date,
                build=build,
                all_scopes=all_scopes,
            )
        )

    def recall(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str | Strategy = "rag",
        strategy_options: StrategyConfig | dict | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
        max_context_tokens: int | None = None,
    ) -> Recall:
        return self._run(
            self._inner.recall(
                question,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                strategy=strategy,
                strategy_options=strategy_options,
                preference=preference,
                budget=budget,
                question_date=question_date,
                build=build,
                all_scopes=all_scopes,
                max_context_tokens=max_context_tokens,
            )
        )

    def count_tokens(self, text: str) -> int:
        return self._inner.count_tokens(text)

    def build(
        self,
        strategy: str | Strategy = "rag",
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy_options: StrategyConfig | dict | None = None,
    ) -> BuildReport:
        return self._run(
            self._inner.build(
                strategy, user_id=user_id, agent_id=agent_id, run_id=run_id, strategy_options=strategy_options
            )
        )

    def get(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> Record | None:
        return self._run(self._inner.get(record_id, user_id=user_id, agent_id=agent_id, run_id=run_id))

    def records(
        self, *, user_id=None, agent_id=None, run_id=None, session_id: str | None = None, limit: int | None = None
    ) -> list[Record]:
        return self._run(
            self._inner.records(user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id, limit=limit)
        )

    def delete(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> bool:
        return self._run(self._inner.delete(record_id, user_id=user_id, agent_id=agent_id, run_id=run_id))

    def delete_all(self, *, user_id=None, agent_id=None, run_id=None) -> int:
        return self._run(self._inner.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id))

    def usage(self) -> dict[str, dict[str, float]]:
        return self._run(self._inner.usage())

    def close(self) -> None:
        """Finish the calls in flight, stop the loop, join its thread, close the store. Idempotent."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("Memory.close() was called from its own event loop; close it from another thread")
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        asyncio.run_coroutine_threadsafe(_drain(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._inner.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

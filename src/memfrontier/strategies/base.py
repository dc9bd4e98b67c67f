"""The strategy interface: f_mem(q, memory) -> context m_q (MemoryCPT Eq. 1).

A strategy sees the query, the store (through :class:`MemoryEnv`) and the caller's preference
and budget, and returns a :class:`~memfrontier.core.types.Context`. The answerer then reads it.
Offline construction (episodes, graphs...) happens in ``build``, recorded under stage
``construction``; ``context`` runs under stage ``query``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from ..core.types import Budget, Context, Preference, Scope
from ..llm.metered import MeteredLLM
from ..store.base import MemoryStore


class Query(BaseModel):
    """One question as a strategy sees it. ``gold_evidence_ids`` (None when unknown) is read only
    by the ``oracle`` anchor; every other strategy must ignore it."""

    text: str
    scope: Scope
    question_date: str | None = None
    gold_evidence_ids: list[str] | None = None


@dataclass
class MemoryEnv:
    """What a strategy may use: the store, the memory-side model and the answer model
    (for token counting and context limits)."""

    store: MemoryStore
    llm: MeteredLLM
    answer_llm: MeteredLLM


@runtime_checkable
class Strategy(Protocol):
    name: str
    prompt_version: str

    async def build(self, env: MemoryEnv, scope: Scope) -> None:
        """Offline, query-agnostic construction for ``scope`` (idempotent). No-op for raw views."""
        ...

    async def context(self, query: Query, env: MemoryEnv, preference: Preference, budget: Budget) -> Context: ...


class ViewNotBuiltError(RuntimeError):
    """The strategy reads a view (episodes, compressed bank, graph index) that was never built for
    the scope: answering would read nothing. Build it first (``memfrontier ask --build`` or
    ``memfrontier eval``)."""


def view_built(strategy, env: MemoryEnv, scope: Scope) -> bool:
    """Whether ``strategy``'s offline view exists for ``scope`` (True for strategies over raw
    records, which have nothing to build)."""
    check = getattr(strategy, "is_built", None)
    return True if check is None else bool(check(env, scope))

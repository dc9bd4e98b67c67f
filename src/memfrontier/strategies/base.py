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
    #: names of the search recipes (:mod:`memfrontier.retrieve.recipes`) the strategy runs; ``()``
    #: for a strategy that searches nothing. Written into ``summary.json`` provenance.
    recipes: tuple[str, ...]

    async def build(self, env: MemoryEnv, scope: Scope) -> None:
        """Offline, query-agnostic construction for ``scope`` (idempotent). No-op for raw views."""
        ...

    async def context(self, query: Query, env: MemoryEnv, preference: Preference, budget: Budget) -> Context: ...

"""``oracle``: only the gold evidence records, the upper anchor of every comparison."""

from __future__ import annotations

from ..core.types import Budget, Context, Preference, Scope
from .base import MemoryEnv, Query, render_dated


class Oracle:
    """Reads the query's gold evidence records from the store, chronologically. A question with no
    gold evidence gets an empty context (and ``meta['no_gold_evidence']``), never a silent fallback."""

    name = "oracle"
    prompt_version = "oracle-v1"

    async def build(self, env: MemoryEnv, scope: Scope) -> None:
        return None

    async def context(self, query: Query, env: MemoryEnv, preference: Preference, budget: Budget) -> Context:
        found = {r.id: r for r in env.store.get(query.gold_evidence_ids)}
        ordered = [r for r in env.store.records(query.scope) if r.id in found] if found else []
        text = render_dated([(r.timestamp, r.render()) for r in ordered])
        meta = {"missing_evidence": [i for i in query.gold_evidence_ids if i not in found]}
        if not query.gold_evidence_ids:
            meta["no_gold_evidence"] = True
        return Context(text=text, evidence_ids=[r.id for r in ordered], meta=meta)

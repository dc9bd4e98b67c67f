"""``longctx``: the whole history, newest first kept, truncated to a token budget."""

from __future__ import annotations

from ..core.render import render_dated
from ..core.types import Budget, Context, Preference, Scope
from .base import MemoryEnv, Query


class LongContext:
    """Every record of the scope in chronological order; when the history exceeds
    ``max_context_tokens`` (default: the answer model's window minus a reserve), the oldest
    records are dropped first (newest-first truncation) and ``meta['dropped_records']`` says how many."""

    name = "longctx"
    prompt_version = "longctx-v1"
    recipes: tuple[str, ...] = ()  # no search recipe

    def __init__(self, max_context_tokens: int | None = None, reserve_tokens: int = 512):
        self.max_context_tokens = max_context_tokens
        self.reserve_tokens = reserve_tokens

    async def build(self, env: MemoryEnv, scope: Scope) -> None:
        return None

    async def context(self, query: Query, env: MemoryEnv, preference: Preference, budget: Budget) -> Context:
        limit = self.max_context_tokens or (env.answer_llm.context_tokens - self.reserve_tokens)
        records = env.store.records(query.scope)
        kept, used = [], 0
        for rec in reversed(records):  # newest first
            line = render_dated([(rec.timestamp, rec.render())])
            n = env.answer_llm.count_tokens(line) + 1
            if used + n > limit:
                break
            kept.append(rec)
            used += n
        kept.reverse()
        text = render_dated([(r.timestamp, r.render()) for r in kept])
        return Context(text=text, evidence_ids=[r.id for r in kept],
                       meta={"records": len(records), "dropped_records": len(records) - len(kept), "context_tokens": used})

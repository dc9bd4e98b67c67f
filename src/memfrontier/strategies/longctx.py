"""``longctx``: the whole history, newest first kept, truncated to a token budget."""

from __future__ import annotations

from pydantic import Field

from ..core.fit import fit_lines
from ..core.render import render_dated
from ..core.timeutil import instant_key
from ..core.types import Budget, Context, Preference
from .base import MemoryEnv, Query, StrategyBase
from .config import Int, StrategyConfig


class LongContextConfig(StrategyConfig):
    """Options of ``longctx`` (the full-context baseline)."""

    strategy = "longctx"

    max_context_tokens: Int | None = Field(
        None,
        ge=1,
        description="Token budget of the history (answer-model "
        "tokens); default the answer model's window minus reserve_tokens.",
    )
    reserve_tokens: Int = Field(512, ge=0, description="Tokens kept free for the question, prompt and answer.")


class LongContext(StrategyBase):
    """Every record of the scope in chronological order (by instant, whatever the UTC offset); when the history exceeds
    ``max_context_tokens`` (default: the answer model's window minus a reserve), the oldest
    records are dropped first (newest-first truncation) and ``meta['dropped_records']`` says how many.
    Options: :class:`LongContextConfig`."""

    name = "longctx"
    prompt_version = "longctx-v1"
    config_class = LongContextConfig
    recipes: tuple[str, ...] = ()  # no search recipe

    config: LongContextConfig

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        limit = self.config.max_context_tokens or (env.answer_llm.context_tokens - self.config.reserve_tokens)
        records = sorted(env.store.records(query.scope), key=lambda r: instant_key(r.timestamp))  # by instant
        newest_first = records[::-1]
        lines, used = fit_lines(
            (render_dated([(r.timestamp, r.render())], query.question_date) for r in newest_first),
            limit,
            env.answer_llm.count_tokens,
        )
        kept = newest_first[: len(lines)][::-1]
        text = render_dated([(r.timestamp, r.render()) for r in kept], query.question_date)
        return Context(
            text=text,
            evidence_ids=[r.id for r in kept],
            meta={"records": len(records), "dropped_records": len(records) - len(kept), "context_tokens": used},
        )

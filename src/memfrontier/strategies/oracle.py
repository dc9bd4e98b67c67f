"""``oracle``: only the gold evidence records, the upper anchor of every comparison."""

from __future__ import annotations

from ..core.render import render_dated
from ..core.types import Budget, Context, Preference
from .base import MemoryEnv, Query, StrategyBase
from .config import StrategyConfig


class OracleConfig(StrategyConfig):
    """``oracle`` has no options: it reads the question's gold evidence records."""

    strategy = "oracle"


class Oracle(StrategyBase):
    """Reads the query's gold evidence records from the store, chronologically. An evaluation anchor:
    a query without gold evidence ids (None) raises ValueError; a benchmark question whose gold
    evidence list is empty gets an empty context and ``meta['no_gold_evidence']``."""

    name = "oracle"
    prompt_version = "oracle-v1"
    config_class = OracleConfig
    recipes: tuple[str, ...] = ()  # no search recipe

    config: OracleConfig

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        if query.gold_evidence_ids is None:
            raise ValueError(
                "the oracle strategy reads a question's gold evidence ids and has none here; "
                "it is an evaluation anchor (memfrontier eval --strategy oracle)"
            )
        found = {r.id: r for r in env.store.get(query.gold_evidence_ids, query.scope)}
        ordered = [r for r in env.store.records(query.scope) if r.id in found] if found else []
        text = render_dated([(r.timestamp, r.render()) for r in ordered], query.question_date)
        meta = {"missing_evidence": [i for i in query.gold_evidence_ids if i not in found]}
        if not query.gold_evidence_ids:
            meta["no_gold_evidence"] = True
        return Context(text=text, evidence_ids=[r.id for r in ordered], meta=meta)

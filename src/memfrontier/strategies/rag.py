"""``rag``: top-k hybrid (dense + BM25, RRF k=60) chunks (recipe :data:`~memfrontier.retrieve.recipes.HYBRID_RRF`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..core.render import render_dated
from ..core.threads import run_cpu
from ..core.types import Budget, Context, Preference
from ..retrieve.hybrid import hybrid_search
from ..retrieve.recipes import chunk_recipe
from .base import MemoryEnv, Query, StrategyBase
from .config import Int, StrategyConfig

#: The store's retrievers, fused by RRF (k=60) when more than one is named.
Retriever = Literal["dense", "bm25"]


class RagConfig(StrategyConfig):
    """Options of ``rag`` (the retrieval baseline of every paper's comparison)."""

    strategy = "rag"

    k: Int = Field(8, ge=1, description="Chunks retrieved (top-k after RRF fusion, k_RRF = 60).")
    retrievers: tuple[Retriever, ...] = Field(
        ("dense", "bm25"), min_length=1, description="Retrievers fused by RRF: dense (MiniLM cosine), bm25 (Okapi)."
    )


class Rag(StrategyBase):
    """The top-``k`` chunks by hybrid search, in rank order, each with its session date
    (options: :class:`RagConfig`)."""

    name = "rag"
    prompt_version = "rag-v1"
    config_class = RagConfig

    config: RagConfig

    def __init__(self, config: RagConfig | None = None):
        super().__init__(config)
        self.recipe = chunk_recipe(self.config.retrievers)

    @property
    def recipes(self) -> tuple[str, ...]:
        """Names of the search recipes this strategy runs (provenance)."""
        return (self.recipe.name,)

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        # the search embeds the query and scans the store (CPU-bound): off the event loop
        hits = await run_cpu(hybrid_search, env.store, query.text, query.scope, self.recipe, k=self.config.k)
        evidence: list[str] = []
        for h in hits:
            evidence.extend(i for i in h.chunk.record_ids if i not in evidence)
        text = render_dated([(h.chunk.timestamp, h.chunk.text) for h in hits])
        return Context(text=text, evidence_ids=evidence, meta={"chunks": [h.chunk.id for h in hits]})

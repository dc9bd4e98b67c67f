"""Named search recipes: what :func:`~memfrontier.retrieve.hybrid.hybrid_search` runs and fuses.

A recipe is data (Graphiti's pattern: a declarative search config read by one search function):
which retrievers run, how deep each one looks, how their rankings are fused, how many results
come back and, for a memory bank, which item kind is searched. Strategies name the recipes they
use (``Strategy.recipes``) and the evaluation runner writes those names into ``summary.json``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RETRIEVERS = ("dense", "bm25", "chunk")


class Recipe(BaseModel):
    """One search configuration.

    Fields:
        name: the recipe's name (provenance).
        retrievers: ``"dense"`` (exact cosine over embeddings) and/or ``"bm25"`` (lexical), in order;
            a bank recipe may add ``"chunk"``: each item ranked by the best rank, under
            :data:`HYBRID_RRF` in the store, of a chunk holding one of its source records (items of
            one chunk share its rank), so a turn inside a chunk that matches the query as a whole
            rises (the store is passed to :func:`~memfrontier.retrieve.hybrid.hybrid_search`).
        fusion: ``"rrf"``: Reciprocal Rank Fusion (Cormack et al. 2009; MemoryCPT Eq. 10).
        rrf_k: the RRF constant (60 in Cormack et al. and MemoryCPT).
        candidates: how many results each retriever contributes before fusion: an int, ``"auto"``
            (``max(4k, 50)``) or ``"all"`` (every item in scope; the banks' exhaustive ranking).
        k: results returned when the caller gives none.
        kind: the bank item kind searched (``"episode"``, ``"fact"``, ``"compressed"``...); None
            for the raw store's chunks.

    Scores: with several retrievers a hit's score is its RRF score (unitless); with one retriever
    it is that retriever's own score (cosine in [-1, 1], or BM25 >= 0), the order being the same.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    retrievers: tuple[Literal["dense", "bm25", "chunk"], ...] = ("dense", "bm25")
    fusion: Literal["rrf"] = "rrf"
    rrf_k: int = Field(60, ge=0)
    candidates: int | Literal["auto", "all"] = "auto"
    k: int = Field(10, ge=1)
    kind: str | None = None

    @field_validator("retrievers")
    @classmethod
    def _some(cls, v):
        if not v or len(set(v)) != len(v):
            raise ValueError(f"retrievers must be a non-empty tuple of distinct names from {RETRIEVERS}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _chunk_ranks_bank_items(self) -> "Recipe":
        if "chunk" in self.retrievers and self.kind is None:
            raise ValueError("the 'chunk' retriever ranks bank items by their chunks: it needs a recipe with a kind")
        return self

    def depth(self, k: int) -> int | None:
        """Candidates per retriever for ``k`` results (None: all)."""
        if self.candidates == "all":
            return None
        if self.candidates == "auto":
            return max(4 * k, 50)
        return max(int(self.candidates), k)


#: Raw chunks, dense + BM25 fused by RRF (k=60): ``rag``, ``budgetmem``, ``Memory.search``.
HYBRID_RRF = Recipe(name="hybrid_rrf")
#: Raw chunks, dense only.
DENSE_ONLY = Recipe(name="dense_only", retrievers=("dense",))
#: Raw chunks, BM25 only.
BM25_ONLY = Recipe(name="bm25_only", retrievers=("bm25",))
#: Single turns (the turn view, :mod:`memfrontier.views.turns`), dense + BM25 fused by RRF (k=60).
TURNS_RRF = Recipe(name="turns_rrf", kind="turn")
#: Single turns, dense only.
TURNS_DENSE = Recipe(name="turns_dense", retrievers=("dense",), kind="turn")
#: Single turns, BM25 only.
TURNS_BM25 = Recipe(name="turns_bm25", retrievers=("bm25",), kind="turn")
#: Single turns ranked by dense, BM25 and the rank of their chunk, fused by RRF with k=5: the
#: turns of the chunks that match the query as a whole rise, and a small k lets a top rank count
#: (k=5 chosen on the LoCoMo training pool: evidence recall per context token; ``bench_retrieval.py``).
TURNS_CHUNKS_RRF = Recipe(name="turns_chunks_rrf", retrievers=("dense", "bm25", "chunk"), rrf_k=5, kind="turn")
#: The generic recipes by name; each paper's own recipes sit in its package (``strategies/<paper>/recipes.py``).
RECIPES: dict[str, Recipe] = {
    r.name: r for r in (HYBRID_RRF, DENSE_ONLY, BM25_ONLY, TURNS_RRF, TURNS_DENSE, TURNS_BM25, TURNS_CHUNKS_RRF)
}

#: The raw units a recipe searches: the store's ~256-token chunks, or single turns (the turn view).
Unit = Literal["chunk", "turn"]


def chunk_recipe(retrievers: tuple[str, ...], unit: Unit = "chunk") -> Recipe:
    """The raw-unit recipe for a retriever tuple: chunks (``("dense", "bm25")`` -> :data:`HYBRID_RRF`...)
    or, with ``unit="turn"``, single turns (:data:`TURNS_RRF`...; ``("dense", "bm25", "chunk")`` ->
    :data:`TURNS_CHUNKS_RRF`). Raises ValueError for any other tuple."""
    family = (
        (HYBRID_RRF, DENSE_ONLY, BM25_ONLY)
        if unit == "chunk"
        else (TURNS_RRF, TURNS_DENSE, TURNS_BM25, TURNS_CHUNKS_RRF)
    )
    for r in family:
        if tuple(retrievers) == r.retrievers:
            return r
    raise ValueError(
        f"no recipe for retrievers {tuple(retrievers)!r} with unit={unit!r}; choose ('dense', 'bm25'), ('dense',) or ('bm25',)"
        + (" or ('dense', 'bm25', 'chunk')" if unit == "turn" else "")
    )


__all__ = [
    "Recipe",
    "RECIPES",
    "RETRIEVERS",
    "HYBRID_RRF",
    "DENSE_ONLY",
    "BM25_ONLY",
    "TURNS_RRF",
    "TURNS_DENSE",
    "TURNS_BM25",
    "TURNS_CHUNKS_RRF",
    "Unit",
    "chunk_recipe",
]

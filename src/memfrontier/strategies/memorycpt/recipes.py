"""MemoryCPT's search recipes (run by :func:`~memfrontier.retrieve.hybrid.hybrid_search`)."""

from __future__ import annotations

from ...retrieve.recipes import Recipe

#: MemoryCPT M_q^RRF over episodic memories (Eq. 10, 17): dense + BM25 over every episode in scope.
MEMORYCPT_EPISODIC = Recipe(name="memorycpt_episodic", candidates="all", k=20, kind="episode")
#: MemoryCPT M_q^RRF over semantic facts (Eq. 10, 17).
MEMORYCPT_SEMANTIC = Recipe(name="memorycpt_semantic", candidates="all", k=50, kind="fact")
#: MemoryCPT ``no_qar`` ablation: plain dense top-k over episodes and facts (pooled by cosine).
MEMORYCPT_DENSE_EPISODIC = Recipe(
    name="memorycpt_dense_episodic", retrievers=("dense",), candidates="all", kind="episode"
)
MEMORYCPT_DENSE_SEMANTIC = Recipe(name="memorycpt_dense_semantic", retrievers=("dense",), candidates="all", kind="fact")

RECIPES: dict[str, Recipe] = {
    r.name: r for r in (MEMORYCPT_EPISODIC, MEMORYCPT_SEMANTIC, MEMORYCPT_DENSE_EPISODIC, MEMORYCPT_DENSE_SEMANTIC)
}

__all__ = [
    "MEMORYCPT_DENSE_EPISODIC",
    "MEMORYCPT_DENSE_SEMANTIC",
    "MEMORYCPT_EPISODIC",
    "MEMORYCPT_SEMANTIC",
    "RECIPES",
]

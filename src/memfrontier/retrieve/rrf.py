"""Reciprocal Rank Fusion (Cormack, Clarke & Buettcher 2009; MemoryCPT uses k=60).

score(d) = sum over retrievers r that returned d of 1 / (k + rank_r(d)), rank 1-based.
Each retriever contributes at most once per id: a repeated id inside one ranking keeps its first
(best) rank and later occurrences are ignored; ranks count distinct ids, so in ``[x, x, y]`` y has
rank 2 (useful when a retriever's hits are mapped from records to chunks).
"""

from __future__ import annotations


def rrf_fuse(
    rankings: dict[str, list[str] | dict[str, int]],
    k: int = 60,
    top_n: int | None = None,
) -> list[tuple[str, float, dict[str, int]]]:
    """Fuse ranked id lists with RRF.

    Args:
        rankings: retriever name -> ids, best first; or -> ``{id: rank}`` (1-based, ties allowed:
            documents that share a container, e.g. the turns of one ranked chunk, share its rank).
        k: the RRF constant (60 in Cormack et al. 2009 and MemoryCPT); must be >= 0.
        top_n: keep only the best ``top_n`` results (None = all).

    Returns:
        ``[(id, score, {retriever: rank})]`` sorted by score descending; ties are broken by the
        best (smallest) rank the id got in any retriever, then by id (lexicographic), so the
        output is deterministic. ``score`` is unitless.

    Raises:
        ValueError: ``k < 0`` or ``top_n < 0``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if top_n is not None and top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for name, ids in rankings.items():
        if isinstance(ids, dict):
            for doc_id, rank in ids.items():
                scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
                ranks.setdefault(doc_id, {})[name] = rank
            continue
        seen: set[str] = set()
        rank = 0
        for doc_id in ids:
            if doc_id in seen:
                continue
            seen.add(doc_id)
            rank += 1
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(doc_id, {})[name] = rank
    order = sorted(scores, key=lambda d: (-scores[d], min(ranks[d].values()), d))
    if top_n is not None:
        order = order[:top_n]
    return [(d, scores[d], ranks[d]) for d in order]

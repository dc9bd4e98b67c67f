"""One hybrid search over the raw store's chunks and the memory banks' items, run by a recipe.

The indexes (:class:`~memfrontier.store.sqlite.SQLiteStore`, :class:`~memfrontier.store.bank.MemoryBank`,
any :class:`~memfrontier.store.base.MemoryStore`) expose two primitives, each confined to a scope:
``search_dense(query, scope, n, query_vector=...)`` and ``search_bm25(query, scope, n)`` (a bank
takes ``kind=`` too), returning ``(document, score)`` best first. :func:`hybrid_search` runs the
recipe's retrievers, keeps each one's top candidates and fuses their rankings with RRF
(:func:`~memfrontier.retrieve.rrf.rrf_fuse`, keyed by document id, one contribution per id per
retriever).
"""

from __future__ import annotations

from ..core.types import Hit, Scope
from ..store.bank import BankHit, MemoryBank
from .fold import fold_near_duplicates
from .recipes import HYBRID_RRF, Recipe
from .rrf import rrf_fuse


def hybrid_search(
    index, query: str, scope: Scope, recipe: Recipe, k: int | None = None, *, store=None, fold: float | None = None
) -> list:
    """Top-``k`` documents of ``index`` in ``scope`` for ``query``, by ``recipe``.

    Args:
        index: a store (documents are chunks) or a memory bank (documents are items of
            ``recipe.kind``, which a bank recipe must name).
        query: the query text; empty or whitespace gives [].
        scope: the search scope (``None`` fields match any value).
        recipe: retrievers, candidate depth, fusion, RRF k, default ``k`` and bank kind.
        k: results wanted (default ``recipe.k``); ``k <= 0`` gives [].
        store: the store whose chunks rank a bank's items for the ``"chunk"`` retriever (the
            chunk search is :data:`~memfrontier.retrieve.recipes.HYBRID_RRF`, as deep as the others).
        fold: fold near-duplicates before the top ``k`` are taken
            (:func:`~memfrontier.retrieve.fold.fold_near_duplicates` with this threshold in [0.5,
            1], e.g. :data:`~memfrontier.retrieve.fold.FOLD_THRESHOLD`; within one scope): ``k`` distinct
            documents, each the latest of its copies, at the rank of the best one (its score and
            ranks), the copies' ids in ``folded``. None: no folding.

    Returns:
        :class:`~memfrontier.core.types.Hit` (chunks) or :class:`~memfrontier.store.bank.BankHit`
        (bank items), best first. ``score``: the RRF score (unitless) when several retrievers run,
        else the single retriever's own score (cosine, or BM25); ``ranks``: the 1-based rank per
        retriever that returned the document. Ties: the best single rank, then the id.

    Raises:
        ValueError: a bank searched with a recipe without ``kind``, or a store with one; a
            ``"chunk"`` retriever without ``store``.
    """
    k = recipe.k if k is None else int(k)
    if k <= 0 or not query.strip():
        return []
    is_bank = isinstance(index, MemoryBank)
    if is_bank != (recipe.kind is not None):
        raise ValueError(
            f"recipe {recipe.name!r} (kind={recipe.kind!r}) does not fit {type(index).__name__}: "
            "a memory bank needs a recipe that names an item kind, a store one that names none"
        )
    n = recipe.depth(k)
    kw = {"kind": recipe.kind} if is_bank else {}
    docs: dict[str, object] = {}
    rankings: dict[str, list[str]] = {}
    raw: dict[str, dict[str, float]] = {}
    for name in recipe.retrievers:
        if name == "chunk":
            if store is None:
                raise ValueError(f"recipe {recipe.name!r} ranks items by their chunks: pass the store")
            ranked = _chunk_ranks(index, store, query, scope, recipe.kind, n)
            rankings[name] = {d.id: r for d, r in ranked}
            raw[name] = {d.id: 1.0 / r for d, r in ranked}
            docs.update((d.id, d) for d, _ in ranked)
            continue
        if name == "dense":
            found = index.search_dense(query, scope, n, query_vector=index.encode_query(query), **kw)
        else:
            found = index.search_bm25(query, scope, n, **kw)
        rankings[name] = [d.id for d, _ in found]
        raw[name] = {d.id: s for d, s in found}
        docs.update((d.id, d) for d, _ in found)
    fused = rrf_fuse(rankings, k=recipe.rrf_k, top_n=None if fold is not None else k)
    single = recipe.retrievers[0] if len(recipe.retrievers) == 1 else None
    if fold is None:
        groups = [(f, f, []) for f in fused]
    else:
        body = (lambda d: docs[d].render()) if is_bank else (lambda d: docs[d].text)
        groups = fold_near_duplicates(
            fused,
            lambda f: body(f[0]),
            lambda f: docs[f[0]].timestamp,
            threshold=fold,
            limit=k,
            key=lambda f: _scope_key(docs[f[0]].scope),  # two tenants' records never fold together
        )
    out = []
    for (doc_id, *_), (best_id, score, ranks), copies in groups:  # shown: the latest; ranked: the best
        score = raw[single][best_id] if single else score
        folded = [c[0] for c in copies]
        out.append(
            BankHit(item=docs[doc_id], score=score, ranks=ranks, folded=folded)
            if is_bank
            else Hit(chunk=docs[doc_id], score=score, ranks=ranks, folded=folded)
        )
    return out


def _scope_key(scope: Scope) -> tuple:
    return (scope.user_id, scope.agent_id, scope.run_id)


def _chunk_ranks(bank: MemoryBank, store, query: str, scope: Scope, kind: str, n: int | None) -> list[tuple]:
    """``(item, rank)`` for the items of ``kind`` holding a record of the store's top-``n`` chunks
    (:data:`HYBRID_RRF`): the best 1-based rank of such a chunk."""
    by_record: dict[str, int] = {}
    for rank, h in enumerate(hybrid_search(store, query, scope, HYBRID_RRF, k=n or len(store.chunks(scope))), 1):
        for rid in h.chunk.record_ids:
            by_record.setdefault(rid, rank)
    out = []
    for it in bank.items(scope, kind):
        ranks = [by_record[i] for i in it.source_ids if i in by_record]
        if ranks:
            out.append((it, min(ranks)))
    return out


__all__ = ["hybrid_search"]

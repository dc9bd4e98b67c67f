"""The in-memory search index of the embedded store, one partition per exact scope.

A :class:`Partition` holds one scope's chunks in store order (:func:`~memfrontier.store.seam.chunk_order`),
their L2-normalised float32 vectors and, built on its first BM25 search, its BM25 postings
(:mod:`memfrontier.store.bm25`: bm25s, Okapi k1=1.5, b=0.75, Lucene IDF). :class:`ScopeIndex`
keeps the partitions by scope key and searches a scope: its own partition, or for a partial scope
(e.g. ``user_id`` only) the union of the matching partitions in store order, with the union's
BM25 statistics. A committed write changes only the partitions of the scopes it touched
(:class:`Patch`: chunks dropped, re-timed, added; the BM25 postings follow). Nothing here reads
the database: the store loads partitions and hands over patches (:mod:`memfrontier.store.sqlite`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.types import Chunk, Scope
from .bm25 import BM25Index, TermCache
from .seam import chunk_order

_MAX_MEMBER_LISTS = 4096  # cached member lists of partial scopes
_MAX_UNIONS = 64  # cached union partitions of partial scopes


@dataclass
class Patch:
    """What one committed write changed in one scope's chunks."""

    gone: set[str] = field(default_factory=set)  # chunk ids removed
    kept: dict[str, tuple[str | None, int]] = field(default_factory=dict)  # id -> (timestamp, first_seq)
    new: list[tuple[Chunk, int, np.ndarray]] = field(default_factory=list)  # (chunk, first_seq, vector)


@dataclass
class Partition:
    """The searchable chunks of one exact scope (or a union of scopes), in store order."""

    chunks: list[Chunk]
    seqs: list[int]  # first_seq of each chunk
    vectors: np.ndarray  # float32 (n_chunks, dim), row i = chunks[i]
    scope: Scope | None = None
    bm25: BM25Index | None = None  # built on the first BM25 search, then kept up to date by patches
    version: int = 0
    _pos: dict[str, int] | None = None

    def positions(self) -> dict[str, int]:
        """Chunk id -> position (built once per partition object)."""
        if self._pos is None:
            self._pos = {c.id: i for i, c in enumerate(self.chunks)}
        return self._pos

    @classmethod
    def of(cls, rows: list[tuple[Chunk, int, np.ndarray]], dim: int) -> "Partition":
        """The partition of ``(chunk, first_seq, vector)`` rows (any order) of one scope."""
        rows = sorted(rows, key=lambda r: chunk_order(r[0], r[1]))
        vecs = (
            np.vstack([r[2] for r in rows]).astype(np.float32, copy=False) if rows else np.zeros((0, dim), np.float32)
        )
        return cls([r[0] for r in rows], [r[1] for r in rows], vecs, rows[0][0].scope if rows else None)

    @classmethod
    def union(cls, parts: list["Partition"], dim: int) -> "Partition":
        """The chunks of ``parts`` merged in store order (scope None, no BM25 index yet)."""
        order = sorted(
            (
                (chunk_order(ch, seq), p, i)
                for p, part in enumerate(parts)
                for i, (ch, seq) in enumerate(zip(part.chunks, part.seqs))
            ),
            key=lambda t: t[0],
        )
        offsets = np.cumsum([0] + [len(part.chunks) for part in parts])
        stacked = np.vstack([part.vectors for part in parts]) if parts else np.zeros((0, dim), np.float32)
        rows = np.array([offsets[p] + i for _, p, i in order], dtype=np.int64)
        return cls(
            [parts[p].chunks[i] for _, p, i in order],
            [parts[p].seqs[i] for _, p, i in order],
            stacked[rows] if rows.size else np.zeros((0, dim), np.float32),
        )

    def patched(self, patch: Patch) -> "Partition":
        """A new partition with ``patch`` applied (this one is left as is for concurrent readers;
        the BM25 index object is shared, see :meth:`ScopeIndex.apply`)."""
        entries = []  # (order key, chunk, first_seq, row in the stacked matrix)
        for i, (ch, seq) in enumerate(zip(self.chunks, self.seqs)):
            if ch.id in patch.gone:
                continue
            ts, new_seq = patch.kept.get(ch.id, (ch.timestamp, seq))
            if ts != ch.timestamp:
                ch = ch.model_copy(update={"timestamp": ts})
            entries.append((chunk_order(ch, new_seq), ch, new_seq, i))
        n = len(self.chunks)
        for j, (ch, seq, _vec) in enumerate(patch.new):
            entries.append((chunk_order(ch, seq), ch, seq, n + j))
        entries.sort(key=lambda e: e[0])
        stacked = np.vstack([self.vectors] + [v[None, :] for _, _, v in patch.new]) if patch.new else self.vectors
        rows = np.array([e[3] for e in entries], dtype=np.int64)
        vecs = stacked[rows] if rows.size else stacked[:0]
        scope = self.scope if self.scope is not None else (entries[0][1].scope if entries else None)
        part = Partition(
            [e[1] for e in entries],
            [e[2] for e in entries],
            np.ascontiguousarray(vecs, dtype=np.float32),
            scope,
            bm25=self.bm25,
        )
        part.positions()  # built in the write, which walks every chunk anyway, not in the first search after it
        return part


def top(scores: np.ndarray, n: int | None, positive_only: bool) -> list[tuple[int, float]]:
    """Best ``n`` positions of ``scores`` (all when ``n`` is None; none for ``n <= 0``), as
    ``(position, score)``, score descending; ties: earlier position first. ``positive_only``
    keeps scores > 0 only."""
    idx = np.arange(scores.shape[0])
    if positive_only:
        idx = idx[scores > 0]
    if idx.size == 0 or (n is not None and n <= 0):
        return []
    sub = scores[idx]
    if n is not None and idx.size > n:
        part = np.argpartition(-sub, n - 1)[:n]
        idx, sub = idx[part], sub[part]
    order = np.lexsort((idx, -sub))  # score desc, then position asc: deterministic
    return [(int(idx[o]), float(sub[o])) for o in order]


class ScopeIndex:
    """The partitions of every scope with chunks, by scope key, and the two search primitives.

    ``dim``: the vectors' dimension. ``stats``: a counters dict whose ``"bm25_builds"`` is
    incremented for each BM25 index built (one per partition searched with BM25 after a load).
    Not thread-safe: the store calls it under its lock.
    """

    def __init__(self, dim: int, stats: dict[str, int] | None = None):
        self.dim = int(dim)
        self.stats = stats if stats is not None else {"bm25_builds": 0}
        self.stats.setdefault("bm25_builds", 0)
        self.terms = TermCache()
        self.parts: dict[str, Partition] = {}  # scope key -> partition
        self._by_user: dict[str | None, set[str]] = {}  # user_id -> keys of its partitions
        self._members: dict[str, list[str]] = {}  # search scope key -> keys of the partitions it covers
        self._unions: dict[str, tuple[tuple, Partition]] = {}  # partial-scope key -> (member versions, union)
        self._version = 0

    def reset(self, parts: dict[str, Partition]) -> None:
        """Replace every partition with ``parts`` (by scope key)."""
        self.parts, self._unions, self._members, self._by_user = {}, {}, {}, {}
        for key, part in parts.items():
            self.set(key, part)

    def clear(self) -> None:
        """Forget every partition and the cached BM25 terms."""
        self.reset({})
        self.terms = TermCache()

    def set(self, key: str, part: Partition | None) -> None:
        """Put (or with None / no chunks, remove) the partition of scope ``key``, keeping the user
        index and the cached member lists of partial scopes right."""
        if part is not None and part.chunks:
            if key not in self.parts:
                self._members.clear()
                self._by_user.setdefault(part.scope.user_id, set()).add(key)
            self._version += 1
            part.version = self._version
            self.parts[key] = part
        elif key in self.parts:
            self._members.clear()
            self._by_user.get(self.parts.pop(key).scope.user_id, set()).discard(key)

    def apply(self, patches: dict[str, Patch]) -> None:
        """Apply a committed write's changes, by scope key; a scope's BM25 index, when built,
        follows them in O(changed chunks)."""
        for key, patch in patches.items():
            part = self.parts.get(key, Partition.of([], self.dim)).patched(patch)
            if part.bm25 is not None:
                for cid in patch.gone:
                    part.bm25.remove(cid)
                for ch, _seq, _vec in patch.new:
                    part.bm25.add(ch.id, self.terms.get([ch.id], [ch.text])[0])
            self.terms.discard(patch.gone)
            self.set(key, part)

    def view(self, scope: Scope) -> Partition | None:
        """The partition of the chunks in ``scope``: the scope's own partition, or for a partial
        scope the union of the matching partitions in store order, cached until one of them
        changes. None when nothing matches."""
        key = scope.key()
        members = self._members.get(key)
        if members is None:  # scanned once per partition layout (a scope appearing or going)
            pool = self._by_user.get(scope.user_id, ()) if scope.user_id is not None else self.parts
            members = self._members[key] = sorted(k for k in pool if scope.matches(self.parts[k].scope))
            if len(self._members) > _MAX_MEMBER_LISTS:
                self._members.pop(next(iter(self._members)))
        if not members:
            return None
        if len(members) == 1:
            return self.parts[members[0]]
        stamp = tuple(sorted((k, self.parts[k].version) for k in members))
        cached = self._unions.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        union = Partition.union([self.parts[k] for k in members], self.dim)
        self._unions[key] = (stamp, union)
        if len(self._unions) > _MAX_UNIONS:  # oldest out
            self._unions.pop(next(iter(self._unions)))
        return union

    def bm25_of(self, part: Partition) -> BM25Index:
        """``part``'s BM25 index, built on first use."""
        if part.bm25 is None:
            ids = [c.id for c in part.chunks]
            part.bm25 = BM25Index.build(ids, self.terms.get(ids, [c.text for c in part.chunks]))
            self.stats["bm25_builds"] += 1
        return part.bm25

    def search_dense(self, scope: Scope, query_vector: np.ndarray, k: int | None) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks of ``scope`` by dot product with ``query_vector`` (the cosine for
        L2-normalised vectors; ``k=None``: all), best first; ties: store order."""
        part = self.view(scope)
        if part is None:
            return []
        found = top(part.vectors @ np.asarray(query_vector, dtype=np.float32), k, positive_only=False)
        return [(part.chunks[i], s) for i, s in found]

    def search_bm25(self, scope: Scope, query: str, k: int | None) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks of ``scope`` by BM25 (> 0 only; ``k=None``: all that match), with the
        statistics of the chunks in ``scope``; best first, ties: store order."""
        part = self.view(scope)
        if part is None:
            return []
        found = self.bm25_of(part).match(query)
        if found is None:
            return []
        pos = part.positions()
        scores = np.zeros(len(part.chunks), dtype=np.float64)
        scores[np.fromiter((pos[i] for i in found[0]), dtype=np.int64, count=len(found[0]))] = found[1]
        return [(part.chunks[i], s) for i, s in top(scores, k, positive_only=True)]


__all__ = ["Partition", "Patch", "ScopeIndex", "top"]

"""The store interface. The embedded SQLite store (:mod:`memfrontier.store.sqlite`) and the
PostgreSQL + pgvector store (:mod:`memfrontier.store.postgres`) implement it (the members whose
logic does not depend on the database come from their common base,
:class:`memfrontier.store.seam.StoreSeam`), and strategies only ever see this interface
(:func:`memfrontier.store.open.open_store` opens either from a location)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

from ..core.types import Chunk, Record, Scope

#: ``progress(done, total)`` of an ``add``: records (turns) embedded so far, out of the records this
#: add embeds (its new records: each is encoded once; a chunk's vector is derived from its records').
AddProgress = Callable[[int, int], None]


class AddResult(BaseModel):
    """What an ``add`` changed: ids inserted, ids already present (skipped), chunks (re)built,
    chunk vectors written (``chunks_embedded``: derived from their records' vectors, nothing
    encoded; :func:`~memfrontier.store.records.chunk_vector`) and record texts encoded
    (``records_embedded``: one per new record, a text two new records share encoded once)."""

    added: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    chunks_built: int = 0
    chunks_embedded: int = 0
    records_embedded: int = 0


@runtime_checkable
class MemoryStore(Protocol):
    """Records of record, turn-atomic chunks and their vectors, all scoped; the seam every other
    layer uses (strategies, views, the API, evaluation): a second implementation (PostgreSQL) is
    a drop-in when it provides these members.

    Every read takes a :class:`Scope`; a ``None`` field in it matches any value. Record ids are
    unique per scope. Ingest is idempotent (a record already present with the same content is
    skipped; other content raises :class:`~memfrontier.core.errors.RecordConflictError`), and delete reaches every index
    and every view derived from the deleted records. Search is two primitives confined to a scope;
    fusion and recipes are :func:`memfrontier.retrieve.hybrid.hybrid_search`'s.
    """

    #: The embedder (``model_id``, ``dim``, ``encode(texts) -> (n, dim)``, ``count_tokens``).
    embedder: Any

    def view_dir(self, name: str) -> Path:
        """The local folder holding view ``name``'s files (memory banks, graph index), created if
        missing. An entry inside it named :meth:`Scope.slug` belongs to that scope and goes when a
        record of a scope it covers is deleted; a view that keeps anything else registers (and,
        outside the store, declares) its purger (:mod:`memfrontier.core.purgers`). Deletes made
        through another view folder of the same database are applied to these files first
        (:mod:`memfrontier.store.purge`). Raises ValueError for a name outside ``[A-Za-z0-9_-]+``."""
        ...

    def add(self, records: list[Record], *, progress: AddProgress | None = None) -> AddResult:
        """Insert the records not yet stored (one transaction), each with its vector (the
        embedding of :meth:`Record.render`, encoded once, all new records of the call in one
        batched encode); chunk vectors are derived from them. ``progress(done, total)``, if given,
        is called as the records are embedded (:data:`AddProgress`), before the first batch of the
        embedder and after each; not at all when nothing needs embedding."""
        ...

    def records(self, scope: Scope, session_id: str | None = None) -> list[Record]:
        """Records in chronological order (timestamp, then insertion order)."""
        ...

    def get(self, record_ids: list[str], scope: Scope) -> list[Record]:
        """Records of ``scope`` by id, in the order asked (unknown ids left out)."""
        ...

    def chunks(self, scope: Scope) -> list[Chunk]: ...

    def record_vectors(self, scope: Scope, record_ids: list[str]) -> np.ndarray:
        """The stored vectors of records of exactly ``scope`` (its key: the records' own scope),
        float32 ``(len(record_ids), dim)`` in the order asked, each the unit embedding of the
        record's :meth:`Record.render`, as encoded when it was added. Raises KeyError naming the
        ids that have none there (unknown, another scope's, or not embedded yet)."""
        ...

    def encode_query(self, query: str) -> np.ndarray:
        """The query's embedding, float32 ``(dim,)``."""
        ...

    def search_dense(
        self, query: str, scope: Scope, k: int | None = 10, *, query_vector: np.ndarray | None = None
    ) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` by cosine (``k=None``: all), best first."""
        ...

    def search_bm25(self, query: str, scope: Scope, k: int | None = 10) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` with BM25 > 0, statistics of the scope's own chunks."""
        ...

    def scope_generation(self, scope: Scope) -> int:
        """A write counter of the records inside ``scope``: two reads return the same number only if
        no record of a scope ``scope`` matches was written or deleted between them, by any process
        or store object (a write in another scope leaves it alone). What a cache derived from the
        records (rag's turn view, the router's scope statistics) compares to skip re-reading them.
        Read it before the records it guards: a write in between then shows at the next read."""
        ...

    def delete(self, record_id: str, scope: Scope) -> bool:
        """Delete the record ``record_id`` of ``scope`` (at least one id set) and what derives from it."""
        ...

    def delete_all(self, scope: Scope) -> int: ...

    def close(self) -> None: ...

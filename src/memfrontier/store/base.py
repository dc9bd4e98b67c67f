"""The store interface. The embedded SQLite store implements it today; a PostgreSQL + pgvector
store implements the same methods later, and strategies only ever see this interface."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ..core.types import Chunk, Hit, Record, Scope


class AddResult(BaseModel):
    """What an ``add`` changed: ids inserted, ids already present (skipped), chunks (re)built."""

    added: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    chunks_built: int = 0
    chunks_embedded: int = 0


class StoreError(RuntimeError):
    """The store cannot be opened or written (corrupt files, locked beyond the timeout...)."""


class RecordConflictError(ValueError):
    """A record id already stored in the same scope (or repeated in one batch) with other content.
    Ids are unique per scope; a stored record is never overwritten nor skipped silently."""


class EmbeddingMismatchError(StoreError):
    """The store was built with another embedding model or dimension than the one now configured."""


@runtime_checkable
class MemoryStore(Protocol):
    """Records of record, turn-atomic chunks, their vectors and a BM25 index, all scoped.

    Every read takes a :class:`Scope`; a ``None`` field in it matches any value. Record ids are
    unique per scope. Ingest is idempotent (a record already present with the same content is
    skipped; other content raises :class:`RecordConflictError`), and delete reaches every index
    and every view derived from the deleted records.
    """

    def add(self, records: list[Record]) -> AddResult: ...

    def records(self, scope: Scope, session_id: str | None = None) -> list[Record]:
        """Records in chronological order (timestamp, then insertion order)."""
        ...

    def get(self, record_ids: list[str], scope: Scope) -> list[Record]:
        """Records of ``scope`` by id, in the order asked (unknown ids left out)."""
        ...

    def chunks(self, scope: Scope) -> list[Chunk]: ...

    def search(self, query: str, scope: Scope, k: int = 10, *, retrievers: tuple[str, ...] = ("dense", "bm25")) -> list[Hit]:
        """Top-k chunks; with several retrievers, fused by RRF (k=60). Hit.ranks holds each retriever's rank."""
        ...

    def delete(self, record_id: str, scope: Scope) -> bool:
        """Delete the record ``record_id`` of ``scope`` (at least one id set) and what derives from it."""
        ...

    def delete_all(self, scope: Scope) -> int: ...

    def close(self) -> None: ...

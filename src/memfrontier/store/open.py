"""One way to open a store from a location: a directory (the embedded SQLite store) or a
PostgreSQL URL (``postgres://`` / ``postgresql://``, the PostgreSQL + pgvector store)."""

from __future__ import annotations

import os
from pathlib import Path

from .base import MemoryStore
from .postgres import is_postgres_url


def open_store(
    location: str | os.PathLike, embedder, *, reembed: bool = False, view_dir: str | os.PathLike | None = None
) -> MemoryStore:
    """Open (or create) the store at ``location`` with ``embedder``.

    ``location`` is a directory path (:class:`~memfrontier.store.sqlite.SQLiteStore`) or a string
    starting with ``postgres://`` / ``postgresql://`` (:class:`~memfrontier.store.postgres.PostgresStore`,
    view files in ``view_dir``, default :func:`~memfrontier.store.postgres.default_directory`).
    ``reembed`` as both stores take it.

    Raises:
        ValueError: ``view_dir`` given with a directory store (its views live inside it).
        StoreError / EmbeddingMismatchError: as the chosen store raises them.
    """
    if is_postgres_url(location):
        from .postgres import PostgresStore

        return PostgresStore(str(location), embedder, reembed=reembed, directory=view_dir)
    if view_dir is not None:
        raise ValueError(f"view_dir is for a PostgreSQL store; the store directory {location} holds its own views")
    from .sqlite import SQLiteStore

    return SQLiteStore(Path(location), embedder, reembed=reembed)


__all__ = ["open_store"]

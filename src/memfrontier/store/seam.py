"""The store-seam members both stores (SQLite, PostgreSQL) implement the same way on top of a few
primitives of their own: :class:`StoreSeam`, a base class of
:class:`~memfrontier.store.sqlite.SQLiteStore` and :class:`~memfrontier.store.postgres.PostgresStore`.

What each store provides (its database, its SQL dialect):

* ``path``: the local folder of the view files; ``embedder``; ``_lock`` (a ``threading.RLock``);
  ``close()`` (called when opening fails);
* ``_read_tx()`` / ``_write_tx()``: context managers yielding an object with ``execute(sql, params)``,
  a read snapshot and a write transaction (one kind may serve both);
* ``_PH``: the driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg), the style of
  :meth:`StoreSeam._scope_where`'s conditions (:func:`scope_where`);
* ``_existing(c, keys)``: the stored records among ``keys`` ((scope key, record id) pairs), by key;
* ``_delete_where(where, params, whole)``: delete the records matching ``where`` (with a purge
  intent naming them and ``whole``, the scope of a ``delete_all``) and return how many;
* ``_store_name()``: the store as messages name it; ``reembed_all()``.

Columns and orders shared by both schemas are here too (:data:`RECORD_COLS`, :data:`ORDER_RECORDS`,
:data:`ORDER_CHUNKS` and its Python twin :func:`chunk_order`), and :func:`scope_where`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Self

import numpy as np

from ..core.errors import EmbeddingMismatchError
from ..core.types import Chunk, Record, Scope, missing_scope_message
from ..embed.query import encode_query
from .purge import apply_pending, purges_due
from .records import (
    Presence,
    check_conflicts,
    checked_batch,
    count_tokens_many,
    embedding_mismatch,
    lookup_ids,
    row_to_record,
    view_folder,
)

log = logging.getLogger(__name__)

#: The ``records`` columns :func:`~memfrontier.store.records.row_to_record` reads, in its order.
RECORD_COLS = (
    "seq, id, kind, scope_json, session_id, speaker, role, timestamp, text, images_json, "
    "step_index, action, observation, meta_json, n_tokens"
)
#: Records in chronological order: without a timestamp first, then ISO-8601 strings, then insertion.
ORDER_RECORDS = "ORDER BY timestamp IS NOT NULL, timestamp, seq"
#: Chunks in store order: session time, then their first record's insertion, then id.
ORDER_CHUNKS = "ORDER BY timestamp IS NOT NULL, timestamp, first_seq, id"


def chunk_order(ch: Chunk, first_seq: int) -> tuple:
    """Python twin of :data:`ORDER_CHUNKS` for a chunk whose first record has ``first_seq`` (both
    stores compare text bytewise: SQLite's BINARY collation, PostgreSQL's ``C``; as Python's code
    point order)."""
    return (ch.timestamp is not None, ch.timestamp or "", first_seq, ch.id)


def scope_where(scope: Scope, ph: str, prefix: str = "") -> tuple[str, list]:
    """``(SQL condition, params)`` selecting the rows of a search ``scope`` (``None`` fields match
    anything; ``TRUE`` when every field is ``None``), with the driver's placeholder ``ph`` (``?``
    or ``%s``) and the columns' ``prefix`` (e.g. ``"c."``)."""
    conds, params = [], []
    for col in ("user_id", "agent_id", "run_id"):
        v = getattr(scope, col)
        if v is not None:
            conds.append(f"{prefix}{col} = {ph}")
            params.append(v)
    return (" AND ".join(conds) if conds else "TRUE"), params


class StoreSeam:
    """The :class:`~memfrontier.store.base.MemoryStore` members whose logic does not depend on the
    database (see the module docstring for what a subclass provides)."""

    _PH = "?"

    def _scope_where(self, scope: Scope) -> tuple[str, list]:
        """:func:`scope_where` in this store's placeholder style."""
        return scope_where(scope, self._PH)

    # -- opening --------------------------------------------------------------------------

    def _open_steps(self, *steps: Callable[[], object]) -> None:
        """Run the opening ``steps`` in order, then finish any purge interrupted after its commit
        (:meth:`complete_purges`); on any error close the store and re-raise."""
        try:
            for step in steps:
                step()
            self.complete_purges()  # a delete interrupted after its commit is finished here
        except BaseException:
            self.close()
            raise

    def _meta(self, c) -> dict[str, str]:
        """The ``meta`` table as a dict (inside a transaction ``c``)."""
        return dict(c.execute("SELECT key, value FROM meta").fetchall())

    def _mismatch(self, meta: dict[str, str]) -> str | None:
        return embedding_mismatch(self._store_name(), meta, self.embedder)

    def _guard_embedding(self, c) -> None:
        """Inside a write transaction: raise :class:`EmbeddingMismatchError` when another process
        re-embedded the store with another model meanwhile."""
        msg = self._mismatch(self._meta(c))
        if msg is not None:
            raise EmbeddingMismatchError(msg)

    def _resolve_mismatch(self, msg: str | None, reembed: bool) -> None:
        """On open, after reading ``meta``: nothing when ``msg`` (the embedding mismatch) is None;
        else re-embed every chunk when ``reembed``, or raise :class:`EmbeddingMismatchError`."""
        if msg is None:
            return
        if not reembed:
            raise EmbeddingMismatchError(msg)
        log.warning("%s: re-embedding (reembed=True)", msg)
        self.reembed_all()

    # -- the store seam -------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The local folder of the view files (memory banks, graph index); for the SQLite store
        also the folder of ``store.db``."""
        return self.path

    def view_dir(self, name: str) -> Path:
        """The folder that holds view ``name``'s files (``<directory>/<name>``), created if missing.
        Views that keep one folder per scope name it :meth:`Scope.slug` inside this one (the
        store removes it with the scope's deleted records, :mod:`memfrontier.store.purge`). A delete
        made through another store object or another view directory of the same database reaches
        these files first (:func:`memfrontier.store.purge.purges_due`).

        Raises:
            ValueError: ``name`` is not a plain folder name (``[A-Za-z0-9_-]+``).
            StoreError: the view folder root (:attr:`directory`) was removed or replaced since this
                store first used it (files written there would be lost with it).
        """
        root = self.__dict__.setdefault("_root", Presence(self.path, "store directory"))
        root.check()
        folder = view_folder(self.path, name)
        if not root.known:
            root.remember()
        if purges_due(self.path, self._read_tx, self._PH):
            self.complete_purges()
        return folder

    def complete_purges(self) -> int:
        """Finish the pending purge intents on this store's view directory: remove what the
        deleted records left in the derived views (per-scope folders, and what the registered view
        purgers remove: bank items and traces, graphs; see :func:`memfrontier.store.purge.purge_views`), record it and drop the intents every view
        root applied (:func:`memfrontier.store.purge.apply_pending`); then :meth:`_purged`.
        Idempotent; run on open, after every delete and when a view is reached while an intent
        waits. Returns the intents carried out here.

        Raises:
            StoreError: the store is closed, its database fails, or a bank file cannot be written.
        """
        with self._lock:
            applied = apply_pending(self.path, self._write_tx, self._PH)
            if applied:
                self._purged()
        return applied

    def _purged(self) -> None:
        """Called after :meth:`complete_purges` carried out intents (nothing by default)."""

    # -- writes ---------------------------------------------------------------------------

    def _unstored(self, c, uniq: dict[tuple[str, str], Record]) -> list[tuple[tuple[str, str], Record]]:
        """The ``(key, record)`` pairs of ``uniq`` ((scope key, id) -> record) not stored yet, read
        in transaction ``c``. Raises :class:`~memfrontier.core.errors.RecordConflictError` when one
        is stored with other content."""
        present = self._existing(c, list(uniq))
        check_conflicts(uniq, present)
        return [(k, r) for k, r in uniq.items() if k not in present]

    def _to_insert(
        self, c, uniq: dict[tuple[str, str], Record], n_of: dict[tuple[str, str], int]
    ) -> list[tuple[tuple[str, str], Record, int]]:
        """Inside the write transaction of an ``add``: ``(key, record, retriever tokens)`` of each
        record of ``uniq`` not stored (:meth:`_unstored`), batch order. The tokens are ``n_of``'s
        (counted by :meth:`_checked_new`) or, for a record that was stored at that first read and
        deleted by another writer since, counted now."""
        fresh = self._unstored(c, uniq)
        late = [(k, r) for k, r in fresh if k not in n_of]
        counted = dict(zip([k for k, _ in late], count_tokens_many(self.embedder, [r.render() for _, r in late])))
        return [(k, r, n_of[k] if k in n_of else counted[k]) for k, r in fresh]

    def _checked_new(self, records) -> tuple[list[Record], dict[tuple[str, str], Record], dict[tuple[str, str], int]]:
        """The first step of an ``add``, before any write: ``(records, uniq, n_of)``, the batch
        checked (:func:`~memfrontier.store.records.checked_batch`) and the retriever tokens of
        each record not stored yet (``n_of``: (scope key, id) -> tokens, in batch order; empty
        when every record is stored).

        Raises:
            TypeError / ValueError / RecordConflictError: as :func:`~memfrontier.store.records.checked_batch`
                and :meth:`_unstored`.
        """
        records, uniq = checked_batch(records)
        with self._read_tx() as c:
            fresh = self._unstored(c, uniq)
        counts = count_tokens_many(self.embedder, [r.render() for _, r in fresh])
        return records, uniq, {k: n for (k, _), n in zip(fresh, counts)}

    def delete(self, record_id: str, scope: Scope) -> bool:
        """Delete the record ``record_id`` of ``scope`` (a search scope: ``None`` fields match any,
        so every record with that id inside it goes) and everything derived from it: its session
        is re-chunked (chunks, vectors, BM25), and bank items, traces and graph indexes built from
        it are purged. Returns False if no such record.

        Raises:
            ValueError: every field of ``scope`` is ``None`` (record ids are only unique per scope), or
                ``record_id`` holds NUL or a lone surrogate (:func:`~memfrontier.store.records.lookup_ids`).
        """
        if scope.user_id is None and scope.agent_id is None and scope.run_id is None:
            raise ValueError(missing_scope_message("delete", "record ids are unique per scope"))
        (record_id,) = lookup_ids([record_id])
        where, params = self._scope_where(scope)
        return self._delete_where(f"id = {self._PH} AND {where}", [record_id, *params]) > 0

    def delete_all(self, scope: Scope) -> int:
        """Delete every record matching ``scope`` (``None`` fields match anything) and everything
        derived from them (see :meth:`delete`); returns how many records.

        Raises:
            ValueError: every field of ``scope`` is ``None`` (that would wipe the store).
        """
        if scope.user_id is None and scope.agent_id is None and scope.run_id is None:
            raise ValueError(missing_scope_message("delete_all", "without one it would wipe the store"))
        where, params = self._scope_where(scope)
        return self._delete_where(where, params, whole=scope)

    # -- reads ----------------------------------------------------------------------------

    def records(self, scope: Scope, session_id: str | None = None) -> list[Record]:
        """Records matching ``scope`` (and ``session_id``), by timestamp then insertion order
        (records without a timestamp first; timestamps compare as ISO-8601 strings)."""
        where, params = self._scope_where(scope)
        if session_id is not None:
            where += f" AND session_id = {self._PH}"
            params.extend(lookup_ids([session_id], "session_id"))
        with self._read_tx() as c:
            rows = c.execute(f"SELECT {RECORD_COLS} FROM records WHERE {where} {ORDER_RECORDS}", params).fetchall()
        return [row_to_record(r) for r in rows]

    def encode_query(self, query: str) -> np.ndarray:
        """The query's embedding, float32 ``(dim,)``, L2-normalised by the embedder. Cached per
        embedder (:func:`~memfrontier.embed.query.encode_query`)."""
        return encode_query(self.embedder, query)

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ORDER_CHUNKS", "ORDER_RECORDS", "RECORD_COLS", "StoreSeam", "chunk_order", "scope_where"]

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
* ``_store_name()``: the store as messages name it; ``reembed_all()``;
* ``_ids_in(column, ids)``: ``(SQL condition, params)`` testing ``column`` against a list of ids in
  one parameter (``json_each`` in SQLite, ``= ANY`` in PostgreSQL);
* ``_rederive_all()``: every chunk's vector derived again from its records' (:meth:`StoreSeam._derived_vectors`),
  in one transaction that records :data:`~memfrontier.store.records.CHUNK_VECTORS` in ``meta``.

Record vectors (both stores: a ``record_vectors`` table, ``seq`` -> float32 bytes, deleted with the
record by its foreign key): each record is embedded once, when it is added, and a chunk's vector is
derived from its records' (:func:`~memfrontier.store.records.chunk_vector`); the members that read,
write and complete them are here (:meth:`StoreSeam.record_vectors`, :meth:`StoreSeam._derived_vectors`,
:meth:`StoreSeam._complete_vectors`).

Columns and orders shared by both schemas are here too (:data:`RECORD_COLS`, :data:`ORDER_RECORDS`,
:data:`ORDER_CHUNKS` and its Python twin :func:`chunk_order`), and :func:`scope_where`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Self

import numpy as np

from ..core.errors import EmbeddingMismatchError, StoreError
from ..core.types import Chunk, Record, Scope, missing_scope_message
from ..embed.query import encode_query
from .base import AddProgress
from .purge import apply_pending, purges_due
from .records import (
    CHUNK_VECTORS,
    Presence,
    blob_vector,
    check_conflicts,
    checked_batch,
    chunk_vector,
    count_tokens_many,
    embedding_mismatch,
    encode_texts,
    lookup_ids,
    row_to_record,
    token_window,
    vector_blob,
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
#: Records a migration embeds per transaction (:meth:`StoreSeam._fill_record_vectors`): each batch
#: is committed, so an interrupted migration resumes where it stopped.
FILL_BATCH = 256


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
        else re-embed every record and derive every chunk's vector again when ``reembed``
        (:meth:`reembed_all`), or raise :class:`EmbeddingMismatchError`."""
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

    # -- record vectors -------------------------------------------------------------------

    def _count_encoded(self, n: int) -> None:
        """Called with the number of texts of each encode call the store makes (nothing by default)."""

    def _lock_scopes(self, c, scope_keys) -> None:
        """Inside a write transaction: serialise with the writers of ``scope_keys`` (nothing by
        default: SQLite's write transaction is exclusive)."""

    def _vectors_for(
        self, records: list[Record], known: dict[str, np.ndarray], progress: AddProgress | None = None
    ) -> list[np.ndarray]:
        """The vectors of ``records``' rendered texts, float32 ``(dim,)`` each: from ``known``
        (text -> vector) when there, the others encoded in one batched call (reporting
        ``progress``, :func:`~memfrontier.store.records.encode_texts`) and added to ``known``."""
        texts = [r.render() for r in records]
        todo = [t for t in dict.fromkeys(texts) if t not in known]
        if todo:
            known.update(zip(todo, encode_texts(self.embedder, todo, progress)))
            self._count_encoded(len(todo))
        return [known[t] for t in texts]

    def _vector_rows(self, c, scope_key: str, ids: list[str]) -> dict[str, tuple[int, bytes | None]]:
        """``{record id: (retriever tokens, vector bytes or None)}`` of the records ``ids`` of the
        exact scope ``scope_key`` (an id not stored there is absent), read in transaction ``c``."""
        if not ids:
            return {}
        cond, params = self._ids_in("r.id", ids)
        rows = c.execute(
            "SELECT r.id, r.n_tokens, v.vector FROM records r LEFT JOIN record_vectors v ON v.seq = r.seq "
            f"WHERE r.scope_key = {self._PH} AND {cond}",
            [scope_key, *params],
        ).fetchall()
        return {rid: (int(n), blob) for rid, n, blob in rows}

    def _put_record_vectors(self, c, rows: list[tuple[str, str, np.ndarray]]) -> None:
        """Inside a write transaction: store the vectors of ``(scope key, record id, vector)`` rows
        (a record already holding one, or gone, is left alone)."""
        ph = self._PH
        c.cursor().executemany(  # a cursor's: psycopg's connection has no executemany
            f"INSERT INTO record_vectors (seq, vector) SELECT seq, {ph} FROM records "
            f"WHERE scope_key = {ph} AND id = {ph} ON CONFLICT (seq) DO NOTHING",
            [(vector_blob(v), key, rid) for key, rid, v in rows],
        )

    def _store_record_vectors(self, c, records: list[tuple[str, Record]], known: dict[str, np.ndarray]) -> None:
        """Inside the write transaction of an ``add``, right after inserting ``records`` ((scope key,
        record) pairs): write their vectors, from ``known`` (text -> vector, encoded before the
        transaction); a record inserted without one (stored at the first read, deleted since by
        another writer) is encoded here."""
        vecs = self._vectors_for([r for _, r in records], known)
        self._put_record_vectors(c, [(key, r.id, v) for (key, r), v in zip(records, vecs)])

    def _derived_vectors(self, c, scope_key: str, chunks: list, known: dict[str, np.ndarray]) -> np.ndarray:
        """Inside a write transaction: the vectors of ``chunks`` (of the exact scope ``scope_key``),
        float32 ``(len(chunks), dim)``, each :func:`~memfrontier.store.records.chunk_vector` of its
        records' stored vectors weighted by their stored token counts. A record without a vector (a
        store still being migrated, a record written by an older release) is embedded here (from
        ``known`` when its text is there) and its vector stored."""
        dim = int(self.embedder.dim)
        if not chunks:
            return np.zeros((0, dim), dtype=np.float32)
        ids = list(dict.fromkeys(rid for ch in chunks for rid in ch.record_ids))
        rows = self._vector_rows(c, scope_key, ids)
        unknown = [i for i in ids if i not in rows]
        if unknown:
            raise StoreError(f"store {self._store_name()}: chunk records {unknown[:5]!r} are not stored")
        vecs = {i: blob_vector(b, dim, f"record {i!r}") for i, (_, b) in rows.items() if b is not None}
        missing = [i for i in ids if i not in vecs]
        if missing:
            recs = list(self._existing(c, [(scope_key, i) for i in missing]).values())
            fresh = self._vectors_for(recs, known)
            self._put_record_vectors(c, [(scope_key, r.id, v) for r, v in zip(recs, fresh)])
            vecs.update((r.id, np.asarray(v, dtype=np.float32)) for r, v in zip(recs, fresh))
        window = token_window(self.embedder)
        return np.stack(
            [
                chunk_vector(np.stack([vecs[i] for i in ch.record_ids]), [rows[i][0] for i in ch.record_ids], window)
                for ch in chunks
            ]
        )

    def record_vectors(self, scope: Scope, record_ids: list[str]) -> np.ndarray:
        """The stored vectors of the records ``record_ids`` of exactly ``scope`` (matched by
        :meth:`Scope.key`, the records' own scope: record ids are unique per scope), float32
        ``(len(record_ids), dim)`` in the order asked; each is the unit embedding of the record's
        :meth:`Record.render`, encoded once when it was added (what the turn view indexes).

        Raises:
            KeyError: ids with no vector in that scope (unknown there, or not embedded yet: a
                store being migrated); the message names up to five.
            ValueError: an id holds NUL or a lone surrogate (:func:`~memfrontier.store.records.lookup_ids`).
        """
        ids = lookup_ids(list(record_ids))
        dim = int(self.embedder.dim)
        with self._read_tx() as c:
            rows = self._vector_rows(c, scope.key(), list(dict.fromkeys(ids)))
        missing = [i for i in ids if rows.get(i, (0, None))[1] is None]
        if missing:
            raise KeyError(f"no stored vector for record(s) {missing[:5]!r} in scope {scope.key()}")
        if not ids:
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack([blob_vector(rows[i][1], dim, f"record {i!r}") for i in ids])

    def _missing_vectors(self, c, limit: int) -> list[tuple[str, Record]]:
        """Up to ``limit`` ``(scope key, record)`` pairs of records without a vector, oldest first."""
        cols = ", ".join("r." + x.strip() for x in RECORD_COLS.split(","))
        rows = c.execute(
            f"SELECT r.scope_key, {cols} FROM records r WHERE NOT EXISTS "
            f"(SELECT 1 FROM record_vectors v WHERE v.seq = r.seq) ORDER BY r.seq LIMIT {self._PH}",
            [int(limit)],
        ).fetchall()
        return [(row[0], row_to_record(row[1:])) for row in rows]

    def _fill_record_vectors(self) -> int:
        """Embed every record without a vector, :data:`FILL_BATCH` at a time, each batch encoded
        outside a transaction and written in its own (so an interrupted fill resumes where it
        stopped), logging the progress. Returns the records embedded."""
        with self._read_tx() as c:
            total = int(
                c.execute(
                    "SELECT count(*) FROM records r WHERE NOT EXISTS (SELECT 1 FROM record_vectors v WHERE v.seq = r.seq)"
                ).fetchone()[0]
            )
        done, last = 0, None
        while True:
            with self._read_tx() as c:
                batch = self._missing_vectors(c, FILL_BATCH)
            if not batch:
                return done
            keys = [(k, r.id) for k, r in batch]
            if keys == last:
                raise StoreError(f"store {self._store_name()}: record vectors could not be written for {keys[:3]!r}")
            last = keys
            vecs = self._vectors_for([r for _, r in batch], {})
            with self._write_tx() as c:
                self._lock_scopes(c, {k for k, _ in batch})
                self._put_record_vectors(c, [(k, r.id, v) for (k, r), v in zip(batch, vecs)])
            done += len(batch)
            log.info("store %s: record vectors %d of %d embedded", self._store_name(), done, max(total, done))

    def _complete_vectors(self) -> None:
        """On open: when ``meta`` does not record :data:`~memfrontier.store.records.CHUNK_VECTORS`
        (a store written before record vectors, or re-embedded with another model and not
        finished), embed every record without a vector (:meth:`_fill_record_vectors`, resumable),
        then derive every chunk's vector from them (:meth:`_rederive_all`, one transaction that
        records it) and say so in the log. Nothing on a current store (one read)."""
        with self._read_tx() as c:
            if self._meta(c).get("chunk_vectors") == CHUNK_VECTORS:
                return
        name = self._store_name()
        log.warning(
            "store %s: its chunk vectors are not derived from record vectors yet; embedding each record "
            "once (in batches of %d, resumable) and deriving the chunks' vectors from them",
            name,
            FILL_BATCH,
        )
        n = self._fill_record_vectors()
        m = self._rederive_all()
        log.warning(
            "store %s migrated: %d record vectors embedded, %d chunk vectors derived from them (%s)",
            name,
            n,
            m,
            CHUNK_VECTORS,
        )

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


__all__ = ["FILL_BATCH", "ORDER_CHUNKS", "ORDER_RECORDS", "RECORD_COLS", "StoreSeam", "chunk_order", "scope_where"]

"""The embedded store: one directory holding SQLite (the store of record) and view files.

Layout of ``path/``::

    store.db        SQLite in WAL mode: meta, records, record_vectors, chunks, chunk_records, chunk_vectors, scope_gen,
                    pending_purges (delete intents whose derived-view cleanup is not finished),
                    view_roots and purges_applied (which view roots applied them, see
                    :mod:`memfrontier.store.purge`)
    store.db-wal    (SQLite's write-ahead log, while open)
    <view>/         files of views built from the records (:meth:`SQLiteStore.view_dir`: ``banks/``,
                    ``graph/<scope slug>/``)

Records are the truth; chunks and vectors are derived from them. Record ids are unique per scope
(``UNIQUE(scope_key, id)``): the same id in two scopes is two records. Every write (``add``,
``delete``, ``delete_all``, re-embedding) runs in one ``BEGIN IMMEDIATE`` transaction that also
bumps the ``generation`` counter in ``meta`` and stamps the scopes it changed in ``scope_gen``.
A delete also writes a purge intent in its transaction; the views derived outside this database
(banks, graph folders) are purged right after the commit, or on the next open after a crash
(:meth:`SQLiteStore.complete_purges`). ``secure_delete`` is on and the WAL is truncated after a
purge, so deleted text does not linger in free pages or the log. Two processes (or two store
objects) writing the same directory serialise on SQLite's write lock (``busy_timeout`` 30 s by
default); threads sharing one store object serialise on a ``threading.RLock``.

Each record is embedded once, *outside* the write lock: an ``add`` encodes the rendered text of
every new record in one batched call, then takes the write lock and writes the records with their
vectors (``record_vectors``); a record the first read did not see as new (a concurrent writer
deleted it since) is encoded inside. A chunk's vector is derived from its records' vectors
(:func:`~memfrontier.store.records.chunk_vector`: their token-weighted mean, normalised), never
encoded, so a record joining a session's open chunk costs its own encode and a mean. Chunk ids
hash (scope key, session, record ids, text), so an unchanged chunk keeps its id and its vector.

Scopes: a row's ``scope_key`` is :meth:`~memfrontier.core.types.Scope.key` (injective). Searches
run on the in-memory :class:`~memfrontier.store.scope_index.ScopeIndex` (one partition per exact
scope: chunks, vectors, BM25; exact cosine and bm25s with the searched scope's own statistics;
fusion and recipes live in :mod:`memfrontier.retrieve.hybrid`). A write patches only the
partitions of the scopes it changed; another process's write is detected through ``scope_gen``
and reloads only the scopes it changed. The schema and the migrations of version-1 and version-2
stores are :mod:`memfrontier.store.sqlite_schema`; a store whose chunk vectors are not derived
from record vectors yet is completed on open (:meth:`~memfrontier.store.seam.StoreSeam._complete_vectors`).

Errors: :class:`StoreError` when the database cannot be opened or written (corrupt file,
locked beyond the timeout, the directory or ``store.db`` removed or replaced since the open: a
write checks the file's device and inode first, so it fails instead of being acknowledged and lost), :class:`EmbeddingMismatchError` when the store was built with another
embedding model id or dimension, ``ValueError`` for invalid input (empty record, all-``None``
scope in ``delete_all``).

Its length (over 500 lines) is one backend's: every :class:`~memfrontier.store.base.MemoryStore`
member over one connection, schema and write discipline, which a split would scatter.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import StoreError
from ..core.files import private_dir, private_file
from ..core.types import Chunk, Record, Scope
from .base import AddProgress, AddResult
from .chunking import chunk_records
from .records import (
    CHUNK_VECTORS,
    RECORD_COLUMNS,
    Presence,
    add_result,
    lookup_ids,
    purge_intent,
    record_row,
    row_to_record,
    scope_key_where,
    vector_blob,
)
from .scope_index import Partition, Patch, ScopeIndex
from .seam import ORDER_CHUNKS, RECORD_COLS, StoreSeam, scope_where
from .sqlite_schema import DB_NAME, SCHEMA_VERSION, create_tables, migrate_v1, migrate_v1_files

log = logging.getLogger(__name__)

_SQL_BATCH = 500  # ids per IN (...) clause


def _batched(seq: list, n: int = _SQL_BATCH) -> Iterator[list]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _order_key(seq: int, ts: str | None) -> tuple:
    """Python twin of ``ORDER BY timestamp IS NOT NULL, timestamp, seq`` (BINARY collation)."""
    return (ts is not None, ts or "", seq)


@dataclass
class _SessionPlan:
    chunks: list[Chunk]
    first_seq: dict[str, int] = field(default_factory=dict)


class SQLiteStore(StoreSeam):
    """Embedded :class:`~memfrontier.store.base.MemoryStore`: SQLite + bm25s + numpy, one directory.

    Args:
        path: the store directory (created if missing, 0700; ``store.db`` 0600).
        embedder: an :class:`~memfrontier.embed.minilm.Embedder` (``model_id``, ``dim``,
            ``encode``, ``count_tokens``); its id and dim are recorded in the store.
        chunk_tokens: chunk budget in retriever tokens (recorded; reopening with another value
            raises ``StoreError``).
        reembed: if the store was built with another embedding model id or dim, re-embed every
            record with ``embedder`` and derive every chunk's vector again instead of raising
            ``EmbeddingMismatchError``.
        busy_timeout_s: how long a write waits for another writer's lock (seconds).

    Raises:
        StoreError: ``store.db`` is not a database / unreadable (message names the path), or
            was written by a newer schema, or ``chunk_tokens`` differs from the recorded one.
        EmbeddingMismatchError: model id or dim differ from the recorded ones and not ``reembed``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        embedder,
        *,
        chunk_tokens: int = 256,
        reembed: bool = False,
        busy_timeout_s: float = 30.0,
    ):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store path {self.path} exists and is not a directory")
        private_dir(self.path)  # 0700; store.db and its -wal / -shm 0600
        self.db_path = private_file(self.path / DB_NAME)
        self.embedder = embedder
        self.chunk_tokens = int(chunk_tokens)
        self.busy_timeout_s = float(busy_timeout_s)
        self._lock = threading.RLock()
        self._closed = False
        #: counters for tests and benchmarks: encode calls / record texts encoded, BM25 index builds
        #: (one per scope rebuilt), partition loads from SQLite (one per scope read)
        self.stats = {"encode_calls": 0, "records_encoded": 0, "bm25_builds": 0, "partition_loads": 0}
        self._index = ScopeIndex(int(embedder.dim), self.stats)  # the in-memory search state
        self._synced: int | None = None  # store generation the index reflects (None: not loaded)
        self._conn = self._connect()
        #: the database file this handle opened: a write checks it is still the one at db_path
        self._db_file = Presence(self.db_path, "store database")
        self._db_file.remember()
        self._root = Presence(self.path, "store directory")
        self._root.remember()
        self._open_steps(
            self._init_schema, lambda: self._check_embedding(reembed), self._migrate, self._complete_vectors
        )

    # -- connection / schema --------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                str(self.db_path), timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise StoreError(f"cannot open store database {self.db_path}: {e}") from e
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot switch {self.db_path} to WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")  # deleted text is zeroed in pages, not left in free space
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"cannot open store database {self.db_path}: {e}") from e
        return conn

    @contextmanager
    def _write_tx(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the thread lock; rollback on any error.
        Raises StoreError when the store's directory or database file was removed or replaced
        since the open (a commit there would be acknowledged and lost)."""
        with self._lock:
            self._check_open()
            self._root.check()
            self._db_file.check()
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise StoreError(f"cannot write store {self.db_path}: {e}") from e
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(e, sqlite3.Error):
                    raise StoreError(f"write to store {self.db_path} failed: {e}") from e
                raise

    @contextmanager
    def _read_tx(self) -> Iterator[sqlite3.Connection]:
        """A consistent read snapshot (deferred transaction) under the thread lock."""
        with self._lock:
            self._check_open()
            conn = self._conn
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise StoreError(f"read from store {self.db_path} failed: {e}") from e

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")

    def _init_schema(self) -> None:
        with self._write_tx() as c:
            create_tables(c)
            meta = self._meta(c)
            if "schema_version" not in meta:
                c.executemany(
                    "INSERT INTO meta(key, value) VALUES (?, ?)",
                    [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("generation", "0"),
                        ("chunk_tokens", str(self.chunk_tokens)),
                        ("chunk_vectors", CHUNK_VECTORS),
                    ],
                )
                return
            if int(meta["schema_version"]) > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.db_path} has schema version {meta['schema_version']}, newer than this "
                    f"memfrontier's {SCHEMA_VERSION}"
                )
            recorded = int(meta.get("chunk_tokens", self.chunk_tokens))
            if recorded != self.chunk_tokens:
                raise StoreError(
                    f"store {self.path} was built with chunk_tokens={recorded}; open it with "
                    f"chunk_tokens={recorded} (got {self.chunk_tokens})"
                )

    def _migrate(self) -> None:
        """Schema 1 -> 2 -> 3 (:mod:`memfrontier.store.sqlite_schema`); a no-op on a current store.
        Version 3 only marks the store (``record_vectors`` is created with the tables): the record
        vectors are computed by :meth:`_complete_vectors`, the next opening step."""
        with self._read_tx() as c:
            if int(self._meta(c)["schema_version"]) >= SCHEMA_VERSION:
                return
        with self._write_tx() as c:
            version = int(self._meta(c)["schema_version"])
            shared = renamed = None
            if version < 2:
                shared, renamed = migrate_v1(c, self._rechunk)
        if shared is not None:
            migrate_v1_files(self.path, shared, renamed)
            log.warning("store %s migrated to schema version 2 (injective scope keys)", self.path)
        with self._write_tx() as c:
            if int(self._meta(c)["schema_version"]) < SCHEMA_VERSION:
                c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                log.warning(
                    "store %s migrated to schema version %d (a vector per record; chunk vectors derived from them)",
                    self.path,
                    SCHEMA_VERSION,
                )

    def _rechunk(self, c: sqlite3.Connection, sessions: dict) -> None:
        """Re-chunk ``sessions`` in transaction ``c`` (records embedded, chunk vectors derived)."""
        self._apply(c, [], set(), sessions, {})

    def _store_name(self) -> str:
        return str(self.path)

    def _check_embedding(self, reembed: bool) -> None:
        with self._write_tx() as c:
            meta = self._meta(c)
            if meta.get("embedding_model_id") is None:
                c.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                    [("embedding_model_id", self.embedder.model_id), ("embedding_dim", str(int(self.embedder.dim)))],
                )
                return
            msg = self._mismatch(meta)
        self._resolve_mismatch(msg, reembed)

    # -- embedding helpers ----------------------------------------------------------------

    def _count_encoded(self, n: int) -> None:
        if n:
            self.stats["encode_calls"] += 1
            self.stats["records_encoded"] += n

    @staticmethod
    def _ids_in(column: str, ids: list[str]) -> tuple[str, list]:
        """``column`` among ``ids`` (one JSON parameter, no limit on the number of ids)."""
        return f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(list(ids), ensure_ascii=False)]

    def reembed_all(self) -> int:
        """Re-embed every record with the configured embedder, derive every chunk's vector again and
        record the embedder's id/dim: the record vectors are dropped and the model recorded in one
        transaction, then :meth:`_complete_vectors` embeds the records in committed batches (an
        interrupted re-embedding resumes on the next open with this embedder). Returns chunks
        whose vector was derived."""
        with self._write_tx() as c:
            c.execute("DELETE FROM record_vectors")
            c.execute("DELETE FROM meta WHERE key = 'chunk_vectors'")
            c.executemany(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                [("embedding_model_id", self.embedder.model_id), ("embedding_dim", str(int(self.embedder.dim)))],
            )
        self._complete_vectors()
        with self._read_tx() as c:
            return int(c.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()[0])

    def _rederive_all(self) -> int:
        """Every chunk's vector derived again from its records' (:meth:`_derived_vectors`), scope by
        scope, in one transaction that records :data:`~memfrontier.store.records.CHUNK_VECTORS`;
        0 when another opener did it first. Returns the chunk vectors written."""
        n = 0
        with self._write_tx() as c:
            if self._meta(c).get("chunk_vectors") == CHUNK_VECTORS:
                return 0
            keys = [r[0] for r in c.execute("SELECT DISTINCT scope_key FROM chunks ORDER BY scope_key")]
            for key in keys:
                chunks = self._load_chunks(c, "scope_key = ?", [key])
                vecs = self._derived_vectors(c, key, chunks, {})
                c.executemany(
                    "INSERT OR REPLACE INTO chunk_vectors(chunk_id, vector) VALUES (?, ?)",
                    [(ch.id, vector_blob(v)) for ch, v in zip(chunks, vecs)],
                )
                n += len(chunks)
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('chunk_vectors', ?)", (CHUNK_VECTORS,))
            self._bump(c, keys)
            self._index.reset({})  # every vector changed
            self._synced = None
        return n

    # -- write planning -------------------------------------------------------------------

    @staticmethod
    def _bump(conn: sqlite3.Connection, scope_keys) -> int:
        """Advance the store generation and stamp ``scope_keys`` as changed at it; returns the
        generation before the write."""
        before = int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        conn.execute("UPDATE meta SET value = ? WHERE key = 'generation'", (str(before + 1),))
        conn.executemany(
            "INSERT INTO scope_gen(scope_key, generation) VALUES (?, ?) "
            "ON CONFLICT(scope_key) DO UPDATE SET generation = excluded.generation",
            [(k, before + 1) for k in dict.fromkeys(scope_keys)],
        )
        return before

    def _existing(self, conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        """The stored records among ``keys`` ((scope key, record id) pairs), by key."""
        want = set(keys)
        found: dict[tuple[str, str], Record] = {}
        for b in _batched(sorted({i for _, i in keys})):
            q = f"SELECT scope_key, {RECORD_COLS} FROM records WHERE id IN ({','.join('?' * len(b))})"
            for row in conn.execute(q, b):
                if (row[0], row[2]) in want:
                    found[(row[0], row[2])] = row_to_record(row[1:])
        return found

    def _existing_vectors(self, conn: sqlite3.Connection, chunk_ids: list[str]) -> set[str]:
        cond, params = self._ids_in("chunk_id", chunk_ids)
        return {r[0] for r in conn.execute(f"SELECT chunk_id FROM chunk_vectors WHERE {cond}", params)}

    def _session_rows(self, conn: sqlite3.Connection, scope_key: str, session_id: str) -> list[tuple[int, Record, int]]:
        rows = conn.execute(
            f"SELECT {RECORD_COLS} FROM records WHERE scope_key = ? AND session_id = ?", (scope_key, session_id)
        ).fetchall()
        return [(r[0], row_to_record(r), int(r[-1])) for r in rows]

    def _plan_session(self, rows: list[tuple[int, Record, int]]) -> _SessionPlan:
        """Chunks of one session from its (seq, record, n_tokens) rows, chronological order."""
        rows = sorted(rows, key=lambda x: _order_key(x[0], x[1].timestamp))
        counts: dict[str, int] = {}
        seq_of: dict[str, int] = {}
        for seq, rec, n in rows:
            counts[rec.render()] = n
            seq_of[rec.id] = seq

        def count(text: str) -> int:
            n = counts.get(text)
            return n if n is not None else int(self.embedder.count_tokens(text))

        chunks = chunk_records([r for _, r, _ in rows], count, self.chunk_tokens)
        return _SessionPlan(chunks, {c.id: min(seq_of[i] for i in c.record_ids) for c in chunks})

    def _apply(
        self,
        conn: sqlite3.Connection,
        insert: list[tuple[Record, int]],
        delete_ids: set[tuple[str, str]],
        sessions: dict[tuple[str, str], None],
        known: dict[str, np.ndarray],
    ) -> tuple[int, int, dict[str, Patch], int]:
        """Inside the write transaction: write records with their vectors (from ``known``, text ->
        vector, encoded before the transaction; the others encoded here), delete ``delete_ids``
        (their vectors go by the foreign key), rebuild touched sessions' chunks and derive the
        vectors of the new ones. Returns (chunks built, chunk vectors written, per-scope patches,
        generation before the write)."""
        if insert:
            conn.executemany(
                f"INSERT INTO records({RECORD_COLUMNS}) VALUES ({', '.join(['?'] * 18)})",
                [record_row(r, r.scope.key(), n) for r, n in insert],
            )
            self._store_record_vectors(conn, [(r.scope.key(), r) for r, _ in insert], known)
        conn.executemany("DELETE FROM records WHERE scope_key = ? AND id = ?", sorted(delete_ids))

        built, written = 0, 0
        patches: dict[str, Patch] = {}
        first_seq: dict[str, int] = {}
        for key in sessions:
            patch = patches.setdefault(key[0], Patch())
            plan = self._plan_session(self._session_rows(conn, *key))
            first_seq.update(plan.first_seq)
            old = {r[0] for r in conn.execute("SELECT id FROM chunks WHERE scope_key = ? AND session_id = ?", key)}
            new_ids = {c.id for c in plan.chunks}
            gone = sorted(old - new_ids)
            patch.gone.update(gone)
            for b in _batched(gone):  # cascades to chunk_records and chunk_vectors
                conn.execute(f"DELETE FROM chunks WHERE id IN ({','.join('?' * len(b))})", b)
            for ch in plan.chunks:
                if ch.id in old:
                    conn.execute(
                        "UPDATE chunks SET timestamp = ?, first_seq = ? WHERE id = ?",
                        (ch.timestamp, plan.first_seq[ch.id], ch.id),
                    )
                    patch.kept[ch.id] = (ch.timestamp, plan.first_seq[ch.id])
                    continue
                s = ch.scope
                conn.execute(
                    "INSERT INTO chunks(id, scope_key, user_id, agent_id, run_id, scope_json, session_id, timestamp, text, "
                    "n_tokens, first_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ch.id,
                        s.key(),
                        s.user_id,
                        s.agent_id,
                        s.run_id,
                        s.model_dump_json(),
                        ch.session_id,
                        ch.timestamp,
                        ch.text,
                        ch.n_tokens,
                        plan.first_seq[ch.id],
                    ),
                )
                conn.executemany(
                    "INSERT INTO chunk_records(chunk_id, position, record_id) VALUES (?, ?, ?)",
                    [(ch.id, i, rid) for i, rid in enumerate(ch.record_ids)],
                )
                built += 1
            have = self._existing_vectors(conn, list(new_ids))
            need = [ch for ch in plan.chunks if ch.id not in have]
            for ch in need:
                if ch.id in old:  # a kept chunk without a vector: re-enter it with one
                    patch.gone.add(ch.id)
                    del patch.kept[ch.id]
            vecs = self._derived_vectors(conn, key[0], need, known)
            conn.executemany(
                "INSERT OR REPLACE INTO chunk_vectors(chunk_id, vector) VALUES (?, ?)",
                [(ch.id, vector_blob(v)) for ch, v in zip(need, vecs)],
            )
            patch.new.extend((ch, first_seq[ch.id], v) for ch, v in zip(need, vecs))
            written += len(need)
        gen_before = self._bump(conn, patches)
        return built, written, patches, gen_before

    # -- public API: writes ---------------------------------------------------------------

    def add(self, records: list[Record], *, progress: AddProgress | None = None) -> AddResult:
        """Insert records not yet stored; re-chunk and embed only what changed.

        Record ids are unique per scope: the same id in two scopes is two records. A record whose
        (scope, id) is already stored with the same content is skipped (re-running an ingest adds
        nothing); with other content it is an error, never a silent skip nor an overwrite.
        Atomic: everything of the batch is written in one transaction, or nothing. Repeated
        (scope, id) pairs inside the batch keep the first (they must have the same content).

        Each new record is embedded once (its :meth:`Record.render`, all new records of the call in
        one batched encode, before the write lock) and its vector written with it; the chunks it
        changes get vectors derived from their records' (:func:`~memfrontier.store.records.chunk_vector`).

        ``progress(done, total)``, if given, follows the embedding, which is most of an add's time:
        records (turns) embedded so far out of the new records, reported before the first batch of
        the embedder and after each one (batches of the embedder's size, longest first, the batches
        it would make itself); not called when nothing needs embedding (e.g. every record already
        stored). It runs in the calling thread, before the write transaction: it may not write to
        this store.

        Raises:
            ValueError: a record has empty/whitespace text and no images (and, for a step, no
                action/observation); the message names its id and nothing of the batch is written.
            RecordConflictError: (a ValueError) a (scope, id) is stored, or repeated in the batch,
                with other content; nothing of the batch is written.
            TypeError: an element is not a :class:`Record`.
            StoreError / EmbeddingMismatchError: see the class docstring.
        """
        records, uniq, n_of = self._checked_new(records)
        if not n_of:
            return AddResult(skipped=[r.id for r in records])
        known: dict[str, np.ndarray] = {}  # rendered text -> vector: each new record encoded once, outside the lock
        self._vectors_for([uniq[k] for k in n_of], known, progress)

        with self._write_tx() as c:
            self._guard_embedding(c)
            # a concurrent writer may have added some, or deleted some stored at the first read
            insert = [(r, n) for _, r, n in self._to_insert(c, uniq, n_of)]
            if not insert:
                return AddResult(skipped=[r.id for r in records])
            sessions = dict.fromkeys((r.scope.key(), r.session_id) for r, _ in insert)
            built, embedded, patches, gen_before = self._apply(c, insert, set(), sessions, known)
        with self._lock:  # committed: bring the in-memory partitions along
            self._patch(patches, gen_before)
        return add_result(records, uniq, {(r.scope.key(), r.id) for r, _ in insert}, built, embedded, len(known))

    _DELETE_COLS = "id, scope_key, session_id, scope_json"

    def _delete_where(self, where: str, params: list, whole: Scope | None = None) -> int:
        """Delete the records matching ``where`` and, in the same transaction, record a purge
        intent naming them (and ``whole``, the scope of a ``delete_all``); the derived views are
        then purged (:meth:`complete_purges`). A crash after the commit leaves the intent, which
        the next open completes. Returns the records deleted."""
        select_sql = f"SELECT {self._DELETE_COLS} FROM records WHERE {where}"
        with self._read_tx() as c:
            rows = c.execute(select_sql, params).fetchall()
        if not rows:
            return 0
        with self._write_tx() as c:
            self._guard_embedding(c)
            rows = c.execute(select_sql, params).fetchall()
            if not rows:
                return 0
            keys = {(r[1], r[0]) for r in rows}
            sessions = dict.fromkeys((r[1], r[2]) for r in rows)
            _, _, patches, gen_before = self._apply(c, [], keys, sessions, {})
            c.execute("INSERT INTO pending_purges (intent_json) VALUES (?)", (purge_intent(rows, whole),))
        with self._lock:  # committed: bring the in-memory partitions along
            self._patch(patches, gen_before)
        self.complete_purges()
        return len(keys)

    def _purged(self) -> None:
        """After purges (:meth:`complete_purges`): copy the WAL into the database and truncate it to
        zero bytes, so no deleted text stays on disk (best effort: a reader in another process may
        hold an older snapshot; the next checkpoint finishes the job)."""
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as e:  # pragma: no cover
            log.debug("checkpoint of %s failed: %s", self.db_path, e)

    # -- public API: reads ----------------------------------------------------------------

    def get(self, record_ids: list[str], scope: Scope) -> list[Record]:
        """Records of ``scope`` by id, in the order asked; unknown ids are left out. Ids are unique
        per scope: an id held by several exact scopes inside ``scope`` gives each of them
        (insertion order). ``Scope()`` looks in every scope (internal callers only)."""
        ids = lookup_ids(list(record_ids))  # ValueError for an id no record can hold (NUL...)
        where, params = self._scope_where(scope)
        found: dict[str, list[Record]] = {}
        with self._read_tx() as c:
            for b in _batched(sorted(set(ids))):
                q = f"SELECT {RECORD_COLS} FROM records WHERE id IN ({','.join('?' * len(b))}) AND {where} ORDER BY seq"
                for r in c.execute(q, [*b, *params]):
                    found.setdefault(r[1], []).append(row_to_record(r))
        return [rec for i in ids for rec in found.get(i, [])]

    def _load_chunks(self, conn: sqlite3.Connection, where: str, params: list) -> list[Chunk]:
        rows = conn.execute(
            f"SELECT id, scope_json, session_id, timestamp, text, n_tokens FROM chunks WHERE {where} {ORDER_CHUNKS}",
            params,
        ).fetchall()
        rec_ids: dict[str, list[str]] = {}
        if where == "TRUE":
            for cid, rid in conn.execute("SELECT chunk_id, record_id FROM chunk_records ORDER BY chunk_id, position"):
                rec_ids.setdefault(cid, []).append(rid)
        else:
            for b in _batched([r[0] for r in rows]):
                q = f"SELECT chunk_id, record_id FROM chunk_records WHERE chunk_id IN ({','.join('?' * len(b))}) ORDER BY chunk_id, position"
                for cid, rid in conn.execute(q, b):
                    rec_ids.setdefault(cid, []).append(rid)
        return [
            Chunk(
                id=cid,
                scope=Scope(**json.loads(sj)),
                session_id=sid,
                timestamp=ts,
                text=text,
                record_ids=rec_ids.get(cid, []),
                n_tokens=n,
            )
            for cid, sj, sid, ts, text, n in rows
        ]

    def chunks(self, scope: Scope) -> list[Chunk]:
        """Chunks matching ``scope``, chronological (session time, then first record's insertion)."""
        where, params = self._scope_where(scope)
        with self._read_tx() as c:
            return self._load_chunks(c, where, params)

    def count(self, scope: Scope | None = None) -> dict[str, int]:
        """Numbers of records, chunks and vectors (in ``scope``, or all)."""
        where, params = self._scope_where(scope or Scope())
        where_c, _ = scope_where(scope or Scope(), self._PH, prefix="c.")
        with self._read_tx() as c:
            n_rec = c.execute(f"SELECT COUNT(*) FROM records WHERE {where}", params).fetchone()[0]
            n_chk = c.execute(f"SELECT COUNT(*) FROM chunks WHERE {where}", params).fetchone()[0]
            n_vec = c.execute(
                f"SELECT COUNT(*) FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id WHERE {where_c}", params
            ).fetchone()[0]
        return {"records": n_rec, "chunks": n_chk, "vectors": n_vec}

    @property
    def generation(self) -> int:
        """The store's write counter (bumped by every committed write, any process)."""
        with self._lock:
            self._check_open()
            try:
                return int(self._conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            except sqlite3.Error as e:
                raise StoreError(f"read from store {self.db_path} failed: {e}") from e

    def scope_generation(self, scope: Scope) -> int:
        """The store generation at which a record of a scope inside ``scope`` last changed (0: none
        ever did), from ``scope_gen``: one indexed read when every id of ``scope`` is set, a range of
        the index (the user's scopes) when the user id is, else a scan of the per-scope stamps. A
        write to another scope leaves it unchanged. See
        :meth:`MemoryStore.scope_generation`."""
        where, params = scope_key_where(scope)
        sql = f"SELECT MAX(generation) FROM scope_gen WHERE {where}"
        with self._lock:
            self._check_open()
            try:
                row = self._conn.execute(sql, params).fetchone()
            except sqlite3.Error as e:
                raise StoreError(f"read from store {self.db_path} failed: {e}") from e
        return int(row[0]) if row and row[0] is not None else 0

    # -- search primitives ----------------------------------------------------------------
    #
    # In memory, the searchable state is a ScopeIndex (memfrontier.store.scope_index): one
    # partition per exact scope (chunks.scope_key). ``self._synced`` is the store generation it
    # reflects. A write through this object patches the partitions it touched once committed; a
    # write by another process or object is found through ``scope_gen`` (the generation at which
    # each scope last changed) and only those scopes are reloaded from SQLite.

    def _load_partitions(self, conn: sqlite3.Connection, keys: list[str] | None) -> dict[str, Partition]:
        """Partitions for ``keys`` (None: every scope) read from SQLite; a key without chunks is absent."""
        dim = int(self.embedder.dim)
        if keys is None:
            chunks = self._load_chunks(conn, "TRUE", [])
            seqs = dict(conn.execute("SELECT id, first_seq FROM chunks").fetchall())
            vec_rows = dict(conn.execute("SELECT chunk_id, vector FROM chunk_vectors").fetchall())
        else:
            chunks, seqs, vec_rows = [], {}, {}
            for key in keys:
                chunks += self._load_chunks(conn, "scope_key = ?", [key])
                seqs.update(conn.execute("SELECT id, first_seq FROM chunks WHERE scope_key = ?", (key,)).fetchall())
                vec_rows.update(
                    conn.execute(
                        "SELECT v.chunk_id, v.vector FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id "
                        "WHERE c.scope_key = ?",
                        (key,),
                    ).fetchall()
                )
        grouped: dict[str, list[tuple[Chunk, int, np.ndarray]]] = {}
        for ch in chunks:
            blob = vec_rows.get(ch.id)
            if blob is None or len(blob) != 4 * dim:
                raise StoreError(
                    f"store {self.path}: chunk {ch.id} has no vector of dim {dim}; reopen with reembed=True"
                )
            grouped.setdefault(ch.scope.key(), []).append((ch, seqs[ch.id], np.frombuffer(blob, dtype="<f4")))
        self.stats["partition_loads"] += len(grouped)
        return {key: Partition.of(rows, dim) for key, rows in grouped.items()}

    def _sync(self) -> None:
        """Bring the index to the store's current generation (caller holds the lock)."""
        with self._read_tx() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            if self._synced == gen:
                return
            if self._synced is None:
                self._index.reset(self._load_partitions(c, None))
            else:
                changed = [
                    r[0] for r in c.execute("SELECT scope_key FROM scope_gen WHERE generation > ?", (self._synced,))
                ]
                fresh = self._load_partitions(c, changed)
                for key in changed:
                    self._index.set(key, fresh.get(key))
        self._synced = gen

    def _patch(self, patches: dict[str, Patch], gen_before: int) -> None:
        """Apply a committed write's changes to the index (caller holds the lock); when it was not
        at ``gen_before`` (another writer came first) leave them to :meth:`_sync`."""
        if self._synced != gen_before:
            return
        self._index.apply(patches)
        self._synced = gen_before + 1

    def search_dense(
        self, query: str, scope: Scope, k: int | None = 10, *, query_vector: np.ndarray | None = None
    ) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` by cosine similarity (exact; ``k=None``: every chunk in scope).
        Returns ``(chunk, cosine in [-1, 1])`` best first; ties: earlier chunk (store order) first.
        An empty query without ``query_vector`` gives []."""
        if query_vector is None:
            if not query.strip():
                return []
            query_vector = self.encode_query(query)
        with self._lock:
            self._sync()
            return self._index.search_dense(scope, query_vector, k)

    def search_bm25(self, query: str, scope: Scope, k: int | None = 10) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` by BM25 score (> 0 only; ``k=None``: all that match).

        Statistics (N, df, average length) are those of the scope's own chunks; for a partial scope
        (e.g. ``user_id`` only, across agents and runs) those of the union of the matching scopes.
        A scope's index is built on its first BM25 search and then follows the writes (chunks
        added and removed, nothing re-indexed). Empty / all-stopword / unseen-word query -> [].
        """
        if not query.strip():
            return []
        with self._lock:
            self._sync()
            return self._index.search_bm25(scope, query, k)

    def drop_caches(self) -> None:
        """Forget the in-memory partitions and BM25 indexes (memory back; the next search reloads
        from SQLite what it needs). The store's content is unchanged."""
        with self._lock:
            self._index.clear()
            self._synced = None

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent). The directory stays a valid store."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._index.clear()
                self._synced = None
                try:
                    self._conn.close()
                except sqlite3.Error:  # pragma: no cover
                    pass

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, embedder={getattr(self.embedder, 'model_id', '?')!r}, chunk_tokens={self.chunk_tokens})"


__all__ = ["SQLiteStore"]

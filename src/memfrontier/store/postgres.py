"""The scale-out store: PostgreSQL + pgvector through ``psycopg`` 3.

The same :class:`~memfrontier.store.base.MemoryStore` members as
:class:`~memfrontier.store.sqlite.SQLiteStore`, the data in one PostgreSQL database (schema and
migrations: :mod:`memfrontier.store.postgres_schema`), the view files (memory banks, the embedded
graph index) in a local ``directory`` (:func:`default_directory`). Writes hold a
transaction-level advisory lock per scope they change. :meth:`PostgresStore.search_dense` is
cosine through pgvector (HNSW with a ``k``); :meth:`PostgresStore.search_bm25` is Okapi BM25
(k1=1.5, b=0.75, Lucene IDF) computed in SQL over PostgreSQL's English full-text lexemes, with the
searched scope's own statistics. Tables, tokenizer differences from the SQLite store, latency and
operations: ``docs/service-postgres.md``.

Connections come from a pool (``psycopg_pool``): a thread's transaction holds one connection (a
transaction opened inside it, on the same thread, is a savepoint on it), up to ``pool_size``
at once, more threads wait for one. A connection that drops (a restarted server, an administrator's
``pg_terminate_backend``) is replaced by the pool, and the call that found it dead runs once more
on a new one (:meth:`PostgresStore._retrying`, the one place that decides): every read, ``add``
(idempotent: a record stored with the same content is skipped, so a commit whose outcome is
unknown is never doubled) and the view purges; a delete only when none of its writes had been
sent for commit (a delete whose COMMIT was cut off raises :class:`StoreUnavailableError` saying its
outcome is unknown). The retry waits up to ``connect_timeout_s`` for a new connection.

Errors: :class:`StoreError` when the server cannot be reached or a statement fails (the message
names the database, never the password), :class:`StoreUnavailableError` (a StoreError) when a
connection dropped and the call could not be completed, or no connection came within
``connect_timeout_s`` (the call may be made again; 503 with ``Retry-After`` over REST),
:class:`EmbeddingMismatchError` when the store was built with another embedding model id or
dimension, ``ValueError`` for invalid input (as SQLiteStore).

Its length (over 500 lines) is one backend's: every :class:`~memfrontier.store.base.MemoryStore`
member over one connection pool and its advisory locks, which a split would scatter (the schema
and its migrations are apart).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..core.errors import StoreError, StoreUnavailableError
from ..core.extras import require_extra
from ..core.text import clean_text
from ..core.types import Chunk, Record, Scope
from .base import AddProgress, AddResult
from .chunking import chunk_records
from .postgres_schema import MIGRATIONS, apply_migrations, schema_version
from .records import (
    CHUNK_VECTORS,
    RECORD_COLUMNS,
    add_result,
    lookup_ids,
    purge_intent,
    record_row,
    row_to_record,
)
from .seam import ORDER_CHUNKS, ORDER_RECORDS, RECORD_COLS, StoreSeam, chunk_order

log = logging.getLogger(__name__)

URL_SCHEMES = ("postgres://", "postgresql://")
_MIGRATION_LOCK = 0x6D656D66  # advisory lock key held while the schema is checked / migrated
_TS_CONFIG = "english"
# How long the pool retries one new connection in the background (backing off 1 s, 2 s...) before
# it gives up; while callers wait, another is started at once (PostgresStore._reconnect_failed),
# so a server back after a long outage is found within about a second.
_RECONNECT_S = 2.0


def is_postgres_url(location: object) -> bool:
    """Whether ``location`` is a PostgreSQL connection URL (``postgres://`` or ``postgresql://``)."""
    return isinstance(location, str) and location.startswith(URL_SCHEMES)


def redact_url(dsn: str) -> str:
    """The URL without its password (for messages)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


_CHUNK_COLS = "id, scope_json, session_id, timestamp, text, n_tokens, record_ids"

# Okapi BM25 (k1 = 1.5, b = 0.75, Lucene IDF ln(1 + (N - df + 0.5) / (df + 0.5))) over the
# full-text lexemes, from ``postings``: the scope's postings of the query's lexemes (index-only scan
# of ``postings_lexeme``), one row per (chunk, lexeme) carrying the lexeme's df among them (a window
# count: every chunk holding a query lexeme has its posting), tf (number of positions) and the
# chunk's length (number of distinct lexemes); N and the average length are the scope's
# (``bm25_scope_stats``). The chunks are scored, the top ``k`` scores kept with their ties, and only
# those rows are joined back to ``chunks`` for their columns and ranked on (score, store order).
# Parameters: scope params, lexemes, scope params.
_BM25_SQL = """
WITH st AS (SELECT COALESCE(sum(n_chunks), 0)::float8 AS n,
                   COALESCE(sum(sum_len)::float8 / NULLIF(sum(n_chunks), 0), 1) AS avgdl
            FROM bm25_scope_stats WHERE {where}),
h AS (SELECT p.chunk_id, p.dl, p.tf::float8 AS tf, count(*) OVER (PARTITION BY p.lexeme)::float8 AS df
      FROM postings p WHERE p.lexeme = ANY(%s::text[]) AND {where}),
top AS (SELECT h.chunk_id, sum(ln(1 + (st.n - h.df + 0.5) / (h.df + 0.5)) * h.tf * 2.5
                               / (h.tf + 1.5 * (0.25 + 0.75 * h.dl / GREATEST(st.avgdl, 1)))) AS score
        FROM h CROSS JOIN st GROUP BY h.chunk_id
        ORDER BY score DESC{fetch})
SELECT c.id, c.scope_json, c.session_id, c.timestamp, c.text, c.n_tokens, c.record_ids, c.first_seq, top.score
FROM top JOIN chunks c ON c.id = top.chunk_id
ORDER BY top.score DESC, c.timestamp IS NOT NULL, c.timestamp, c.first_seq, c.id{limit}
"""


def _row_to_chunk(row) -> Chunk:
    cid, scope_json, sid, ts, text, n, rec_ids = row[:7]
    return Chunk(
        id=cid,
        scope=Scope(**json.loads(scope_json)),
        session_id=sid,
        timestamp=ts,
        text=text,
        record_ids=list(rec_ids),
        n_tokens=n,
    )


def _lock_id(scope_key: str) -> int:
    """A signed 64-bit advisory lock id for a scope key."""
    return int.from_bytes(hashlib.sha256(scope_key.encode("ascii")).digest()[:8], "big", signed=True)


class _ConnectionLost(StoreUnavailableError):
    """A transaction's connection dropped (raised by :meth:`PostgresStore._tx`; the enclosing
    :meth:`PostgresStore._retrying` may run its call once more on a new connection)."""


class _Call:
    """One call under :meth:`PostgresStore._retrying` on one thread. ``committing``: one of its write
    transactions has sent its COMMIT (from then on a dropped connection leaves its outcome unknown)."""

    __slots__ = ("committing",)

    def __init__(self) -> None:
        self.committing = False


def _reconnecting(idempotent: bool):
    """Method decorator: the method runs under :meth:`PostgresStore._retrying` (``idempotent``: see there)."""

    def wrap(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            return self._retrying(lambda: method(self, *args, **kwargs), idempotent=idempotent)

        return run

    return wrap


def default_directory(dsn: str) -> Path:
    """The local folder for a database's view files: ``$MEMFRONTIER_HOME/postgres/<slug>`` where
    the slug hashes the URL without its password (``MEMFRONTIER_HOME`` defaults to ``~/.cache/memfrontier``)."""
    home = Path(os.environ.get("MEMFRONTIER_HOME", Path.home() / ".cache" / "memfrontier"))
    return home / "postgres" / hashlib.sha256(redact_url(dsn).encode("utf-8")).hexdigest()[:16]


class PostgresStore(StoreSeam):
    """PostgreSQL + pgvector :class:`~memfrontier.store.base.MemoryStore` (see the module docstring).

    Args:
        dsn: a libpq connection URL (``postgresql://user:pass@host:5432/db``, ``?host=/socket/dir``).
        embedder: as for :class:`~memfrontier.store.sqlite.SQLiteStore` (``model_id``, ``dim``,
            ``encode``, ``count_tokens``); its id and dim are recorded in ``meta``.
        chunk_tokens: chunk budget in retriever tokens (recorded; another value raises StoreError).
        reembed: re-embed every record (and derive every chunk's vector again) when the recorded
            embedding model id or dim differ, instead of raising :class:`EmbeddingMismatchError`.
        directory: local folder for the view files (default :func:`default_directory`).
        connect_timeout_s: how long to wait for the server (seconds): at the open, and for a new
            connection when one dropped (see the module docstring).
        pool_size: the most connections this object holds open (threads beyond it wait for one).

    Raises:
        StoreError: the server cannot be reached, the schema is newer than this memfrontier's, or
            ``chunk_tokens`` differs from the recorded one.
        EmbeddingMismatchError: model id or dim differ from the recorded ones and not ``reembed``.
    """

    def __init__(
        self,
        dsn: str,
        embedder,
        *,
        chunk_tokens: int = 256,
        reembed: bool = False,
        directory: str | os.PathLike | None = None,
        connect_timeout_s: float = 10.0,
        pool_size: int = 4,
    ):
        require_extra("postgres", "psycopg", "psycopg_pool", "pgvector", feature="a postgresql:// store")
        import psycopg
        from psycopg_pool import ConnectionPool

        if int(pool_size) < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        self._psycopg = psycopg
        self.dsn = dsn
        self.name = redact_url(dsn)
        self.embedder = embedder
        self.chunk_tokens = int(chunk_tokens)
        self.path = Path(directory) if directory is not None else default_directory(dsn)
        self._lock = threading.RLock()
        self._closed = False
        self._local = threading.local()  # this thread's transaction (``conn``) and retried call (``call``)
        self._wait_s = float(connect_timeout_s)
        self._slots = threading.BoundedSemaphore(int(pool_size))  # a thread past it always gets a connection
        timeout = max(1, int(connect_timeout_s))
        self._migrate(timeout)
        self._pool = ConnectionPool(
            dsn,
            kwargs={"autocommit": True, "connect_timeout": timeout},
            min_size=1,
            max_size=int(pool_size),
            configure=self._configure,
            timeout=self._wait_s,
            reconnect_timeout=_RECONNECT_S,
            reconnect_failed=self._reconnect_failed,
            name=f"store {self.name}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=self._wait_s)
        except psycopg.Error as e:
            self._pool.close()
            raise StoreError(f"cannot connect to store database {self.name}: {e}") from e
        self._open_steps(lambda: self._check_meta(reembed), self._complete_vectors)

    # -- connection / schema --------------------------------------------------------------

    _PH = "%s"

    def _migrate(self, timeout: int) -> None:
        """On a connection of its own (the pool's connections are set up for pgvector's types, which
        the first migration creates): apply the missing :data:`~memfrontier.store.postgres_schema.MIGRATIONS`
        in order (one transaction, advisory lock), refuse a schema newer than
        :data:`~memfrontier.store.postgres_schema.SCHEMA_VERSION`, and check pgvector's types."""
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=timeout)
        except psycopg.Error as e:
            raise StoreError(f"cannot connect to store database {self.name}: {e}") from e
        with conn:
            try:
                with conn.transaction():
                    apply_migrations(
                        conn,
                        MIGRATIONS,
                        lock=_MIGRATION_LOCK,
                        what=f"store database {self.name}",
                        dim=int(self.embedder.dim),
                    )
            except psycopg.Error as e:
                raise StoreError(f"store database {self.name}: {e}") from e
            try:
                self._configure(conn)
            except psycopg.Error as e:
                raise StoreError(f"store database {self.name}: pgvector is not available: {e}") from e

    @staticmethod
    def _configure(conn) -> None:
        """A new connection: pgvector's types registered."""
        from pgvector.psycopg import register_vector

        register_vector(conn)

    def _reconnect_failed(self, pool) -> None:
        """The pool gave up a new connection after :data:`_RECONNECT_S`: while callers wait for one,
        start another attempt at once (the pool's own retries back off exponentially)."""
        if not self._closed and pool.get_stats().get("requests_waiting", 0):
            pool.check()

    def _lost(self, conn, e: Exception) -> bool:
        """Whether psycopg's ``e`` on ``conn`` ended the session (not a statement error): a
        connection-class error after which the connection is closed or broken."""
        return isinstance(e, (self._psycopg.OperationalError, self._psycopg.InterfaceError)) and (
            conn.closed or conn.broken
        )

    def _error(self, conn, e: Exception) -> StoreError:
        if self._lost(conn, e):
            return _ConnectionLost(f"store database {self.name}: the connection dropped ({e})")
        return StoreError(f"store database {self.name}: {e}")

    def _connection(self):
        """A connection from the pool, waiting up to ``connect_timeout_s`` for one when the pool has
        none ready (the server unreachable: the pool reconnects in the background)."""
        from psycopg_pool import PoolClosed, PoolTimeout

        try:
            return self._pool.getconn()
        except PoolClosed as e:
            raise StoreError(f"store {self.name} is closed") from e
        except PoolTimeout as e:
            raise StoreUnavailableError(
                f"store database {self.name} cannot be reached: no connection within {self._wait_s:g} s"
            ) from e

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator:
        """One transaction on a connection of the pool, the thread's own while it runs (one opened
        inside it on the same thread is a savepoint on that connection). psycopg errors become
        :class:`StoreError`, :class:`_ConnectionLost` when the connection dropped. A ``write``
        transaction about to commit marks the enclosing retried call as committing."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            try:
                with held.transaction():
                    yield held
            except self._psycopg.Error as e:
                raise self._error(held, e) from e
            return
        if self._closed:
            raise StoreError(f"store {self.name} is closed")
        with self._slots:
            conn = self._connection()
            self._local.conn = conn
            try:
                with conn.transaction():
                    yield conn
                    call = getattr(self._local, "call", None)
                    if write and call is not None:
                        call.committing = True
            except self._psycopg.Error as e:
                raise self._error(conn, e) from e
            finally:
                self._local.conn = None
                self._pool.putconn(conn)  # a dropped one is replaced by the pool

    def _read_tx(self):
        """A read transaction (:meth:`_tx`)."""
        return self._tx(write=False)

    def _write_tx(self):
        """A write transaction (:meth:`_tx`)."""
        return self._tx(write=True)

    def _retrying(self, fn: Callable, *, idempotent: bool):
        """``fn()``, run once more when a connection it used dropped (:class:`_ConnectionLost`):
        always when ``idempotent`` (running it again after a commit that took effect changes
        nothing), else only when none of its write transactions had sent its COMMIT (nothing of
        it took effect: PostgreSQL rolls back a transaction whose session ends). First the pool
        is drained: no connection made before the drop is handed out again (a restart ended them
        all; one in use is closed when it comes back), so the second run has a new one. The one
        place that decides; a call inside one (on the same thread) leaves the decision to it.

        Raises:
            StoreUnavailableError: the connection dropped again, or while a non-idempotent call was
                committing (its outcome unknown), or no new connection came in time.
        """
        if getattr(self._local, "call", None) is not None or getattr(self._local, "conn", None) is not None:
            return fn()
        self._local.call = call = _Call()
        try:
            try:
                return fn()
            except _ConnectionLost as e:
                if call.committing and not idempotent:
                    raise StoreUnavailableError(
                        f"{e} while the change was being committed: its outcome is unknown "
                        "(made again, a delete that took effect finds nothing to delete)"
                    ) from e
                log.warning("%s; running the call again on a new connection", e)
            if self._closed:
                raise StoreError(f"store {self.name} is closed")
            self._pool.drain()
            call.committing = False
            try:
                return fn()
            except _ConnectionLost as e:
                raise StoreUnavailableError(str(e)) from e
        finally:
            self._local.call = None

    @_reconnecting(idempotent=True)
    def schema_version(self) -> int:
        """The schema version of the database (0 when it holds no store yet)."""
        with self._read_tx() as c:
            return schema_version(c)

    def _store_name(self) -> str:
        return self.name

    def _check_meta(self, reembed: bool) -> None:
        with self._write_tx() as c:
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            meta = self._meta(c)
            if "embedding_model_id" not in meta:
                c.cursor().executemany(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                    [
                        ("embedding_model_id", self.embedder.model_id),
                        ("embedding_dim", str(int(self.embedder.dim))),
                        ("chunk_tokens", str(self.chunk_tokens)),
                        ("chunk_vectors", CHUNK_VECTORS),
                    ],
                )
                return
            recorded = int(meta.get("chunk_tokens", self.chunk_tokens))
            if recorded != self.chunk_tokens:
                raise StoreError(
                    f"store {self.name} was built with chunk_tokens={recorded}; open it with "
                    f"chunk_tokens={recorded} (got {self.chunk_tokens})"
                )
            msg = self._mismatch(meta)
        self._resolve_mismatch(msg, reembed)

    # -- embedding helpers ----------------------------------------------------------------

    @staticmethod
    def _ids_in(column: str, ids: list[str]) -> tuple[str, list]:
        """``column`` among ``ids`` (one array parameter)."""
        return f"{column} = ANY(%s)", [list(ids)]

    def _lock_scopes(self, c, scope_keys) -> None:
        """Inside a write transaction: the scopes' advisory locks (sorted, so two writers cannot deadlock)."""
        for key in sorted(set(scope_keys)):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(key),))

    @_reconnecting(idempotent=True)
    def reembed_all(self) -> int:
        """Re-embed every record with the configured embedder and derive every chunk's vector again
        (the vector column recreated with its dimension, HNSW index included), recording its id/dim:
        the record vectors are dropped and the model recorded in one transaction, then
        :meth:`_complete_vectors` embeds the records in committed batches (an interrupted
        re-embedding resumes on the next open with this embedder). Returns chunks whose vector was derived."""
        with self._write_tx() as c:
            c.execute("LOCK TABLE chunks IN EXCLUSIVE MODE")
            c.execute("DELETE FROM record_vectors")
            c.execute("DELETE FROM meta WHERE key = 'chunk_vectors'")
            c.cursor().executemany(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("embedding_model_id", self.embedder.model_id), ("embedding_dim", str(int(self.embedder.dim)))],
            )
        self._complete_vectors()
        with self._read_tx() as c:
            return int(c.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def _rederive_all(self) -> int:
        """Every chunk's vector derived again from its records' (:meth:`_derived_vectors`), in one
        transaction holding ``chunks`` against writes: the vector column recreated with the
        embedder's dimension (HNSW index included, built once after the rows are written) and
        :data:`~memfrontier.store.records.CHUNK_VECTORS` recorded; 0 when another opener did it
        first. Returns the chunk vectors written."""
        dim = int(self.embedder.dim)
        n = 0
        with self._write_tx() as c:
            c.execute("LOCK TABLE chunks IN EXCLUSIVE MODE")
            if self._meta(c).get("chunk_vectors") == CHUNK_VECTORS:
                return 0
            keys = [r[0] for r in c.execute("SELECT DISTINCT scope_key FROM chunks ORDER BY scope_key")]
            c.execute("DROP INDEX IF EXISTS chunks_embedding")
            c.execute("ALTER TABLE chunks DROP COLUMN embedding")
            c.execute(f"ALTER TABLE chunks ADD COLUMN embedding vector({dim})")
            for key in keys:
                chunks = [
                    _row_to_chunk(r)
                    for r in c.execute(f"SELECT {_CHUNK_COLS} FROM chunks WHERE scope_key = %s", (key,)).fetchall()
                ]
                vecs = self._derived_vectors(c, key, chunks, {})
                with c.cursor() as cur:
                    cur.executemany(
                        "UPDATE chunks SET embedding = %s WHERE id = %s", [(v, ch.id) for ch, v in zip(chunks, vecs)]
                    )
                n += len(chunks)
            c.execute("ALTER TABLE chunks ALTER COLUMN embedding SET NOT NULL")
            c.execute("CREATE INDEX chunks_embedding ON chunks USING hnsw (embedding vector_cosine_ops)")
            c.execute(
                "INSERT INTO meta (key, value) VALUES ('chunk_vectors', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (CHUNK_VECTORS,),
            )
        return n

    # -- writes ---------------------------------------------------------------------------

    def _guard(self, c, scope_keys) -> None:
        """Inside a write transaction: lock the scopes (:meth:`_lock_scopes`) and check the
        embedding model is still the configured one."""
        self._lock_scopes(c, scope_keys)
        self._guard_embedding(c)

    def _existing(self, c, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        """The stored records among ``keys`` ((scope key, record id) pairs), by key."""
        if not keys:
            return {}
        rows = c.execute(
            f"SELECT r.scope_key, {', '.join('r.' + x.strip() for x in RECORD_COLS.split(','))} FROM records r "
            "JOIN unnest(%s::text[], %s::text[]) AS k(scope_key, id) ON r.scope_key = k.scope_key AND r.id = k.id",
            ([k for k, _ in keys], [i for _, i in keys]),
        ).fetchall()
        return {(row[0], row[2]): row_to_record(row[1:]) for row in rows}

    def _rechunk(
        self, c, sessions: dict[tuple[str, str], None], known: dict[str, np.ndarray] | None = None
    ) -> tuple[int, int]:
        """Inside a write transaction: rebuild the chunks of ``sessions`` ((scope key, session id))
        from their current records; unchanged chunks keep their row and vector, new ones get a
        vector derived from their records' (:meth:`_derived_vectors`; ``known``: text -> vector of
        records encoded before the transaction); the postings and scope statistics follow by
        trigger (schema 7). Returns (chunks built, vectors written)."""
        known = {} if known is None else known
        new_chunks: list[tuple[Chunk, int]] = []
        vec_of: dict[str, np.ndarray] = {}
        for key in sessions:
            rows = c.execute(
                f"SELECT {RECORD_COLS} FROM records WHERE scope_key = %s AND session_id = %s {ORDER_RECORDS}", key
            ).fetchall()
            counts = {}
            seq_of = {}
            recs = []
            for row in rows:
                rec = row_to_record(row)
                counts[rec.render()] = int(row[-1])
                seq_of[rec.id] = int(row[0])
                recs.append(rec)
            plan = chunk_records(
                recs, lambda t: counts[t] if t in counts else int(self.embedder.count_tokens(t)), self.chunk_tokens
            )
            first = {ch.id: min(seq_of[i] for i in ch.record_ids) for ch in plan}
            old = {
                r[0]: (r[1], r[2])
                for r in c.execute(
                    "SELECT id, timestamp, first_seq FROM chunks WHERE scope_key = %s AND session_id = %s", key
                )
            }
            gone = sorted(set(old) - set(first))
            if gone:
                c.execute("DELETE FROM chunks WHERE id = ANY(%s)", (gone,))
            # a kept chunk's row is rewritten only when its order keys moved: an UPDATE writes a new row
            # version into every index, the HNSW one included (about 10 ms a row at 100,000 chunks)
            kept = [
                (ch.timestamp, first[ch.id], ch.id)
                for ch in plan
                if ch.id in old and old[ch.id] != (ch.timestamp, first[ch.id])
            ]
            if kept:
                with c.cursor() as cur:
                    cur.executemany("UPDATE chunks SET timestamp = %s, first_seq = %s WHERE id = %s", kept)
            fresh = [ch for ch in plan if ch.id not in old]
            new_chunks += [(ch, first[ch.id]) for ch in fresh]
            vec_of.update(zip([ch.id for ch in fresh], self._derived_vectors(c, key[0], fresh, known)))
        if new_chunks:
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO chunks (id, scope_key, user_id, agent_id, run_id, scope_json, session_id, timestamp, "
                    "text, n_tokens, first_seq, record_ids, embedding) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            ch.id,
                            ch.scope.key(),
                            ch.scope.user_id,
                            ch.scope.agent_id,
                            ch.scope.run_id,
                            ch.scope.model_dump_json(),
                            ch.session_id,
                            ch.timestamp,
                            ch.text,
                            ch.n_tokens,
                            seq,
                            list(ch.record_ids),
                            vec_of[ch.id],
                        )
                        for ch, seq in new_chunks
                    ],
                )
        return len(new_chunks), len(new_chunks)

    def add(self, records: list[Record], *, progress: AddProgress | None = None) -> AddResult:
        """Insert records not yet stored; re-chunk and embed only what changed. Same contract as
        :meth:`SQLiteStore.add <memfrontier.store.sqlite.SQLiteStore.add>`: ids unique per scope,
        a stored (scope, id) with the same content is skipped, with other content raises
        :class:`RecordConflictError`; one transaction for the whole batch (all or nothing). Each new
        record is embedded once, before the write transaction, and written with its vector; chunk
        vectors are derived from them. ``progress(done, total)`` follows the embedding as there.

        Raises:
            ValueError: a record is empty (no text, images, action or observation); nothing written.
            RecordConflictError: a (scope, id) stored or repeated in the batch with other content.
            TypeError: an element is not a :class:`Record`.
            StoreError / EmbeddingMismatchError / StoreUnavailableError: see the module docstring
                (a dropped connection runs the add once more; ``progress`` then starts again).
        """
        records = list(records)
        carried: dict = {}
        return self._retrying(lambda: self._add(records, progress, carried), idempotent=True)

    def _add(self, records: list[Record], progress: AddProgress | None, carried: dict) -> AddResult:
        """One attempt of :meth:`add`. ``carried``: what an earlier attempt of the same call was
        committing when its connection dropped (``keys``, ``built``, ``embedded``), and the record
        vectors it encoded (``known``, text -> vector, reused). When that commit took effect, its
        records are stored now (with this batch's content) and count as added by this call, with
        its chunk counts, instead of as skipped."""
        records, uniq, n_of = self._checked_new(records)
        prior = carried.pop("keys", set())
        if prior and not prior & n_of.keys():  # one transaction: all of it took effect, or none
            done, built0, embedded0 = prior, carried["built"], carried["embedded"]
        else:
            done, built0, embedded0 = set(), 0, 0

        def nothing_new() -> AddResult:
            if done:
                return add_result(records, uniq, done, built0, embedded0)
            return AddResult(skipped=[r.id for r in records])

        if not n_of:
            return nothing_new()
        known = carried.setdefault("known", {})  # rendered text -> vector: each new record encoded once
        self._vectors_for([uniq[k] for k in n_of], known, progress)

        with self._write_tx() as c:
            # every scope of the batch, not only those of n_of: a record stored at the first read may
            # have been deleted since, and is then inserted here (its scope must be locked too)
            self._guard(c, {k[0] for k in uniq})
            insert = self._to_insert(c, uniq, n_of)  # a concurrent writer may have added or deleted some
            if not insert:
                return nothing_new()
            with c.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO records ({RECORD_COLUMNS}) VALUES ({', '.join(['%s'] * 18)})",
                    [record_row(r, k[0], n) for k, r, n in insert],
                )
            self._store_record_vectors(c, [(k[0], r) for k, r, _ in insert], known)
            built, embedded = self._rechunk(c, dict.fromkeys((k[0], r.session_id) for k, r, _ in insert), known)
            inserted = {k for k, _, _ in insert}
            carried.update(keys=inserted, built=built, embedded=embedded)  # what the COMMIT below carries
        return add_result(records, uniq, inserted | done, built + built0, embedded + embedded0, len(known))

    def _delete_where(self, where: str, params: list, whole: Scope | None = None) -> int:
        """Delete the records matching ``where``, re-chunk their sessions and record a purge intent
        (one transaction; run again on a dropped connection only when it had not sent its COMMIT,
        see :meth:`_retrying`); then purge the derived views (:meth:`complete_purges`)."""
        n = self._retrying(lambda: self._delete_rows(where, params, whole), idempotent=False)
        if n:
            self.complete_purges()
        return n

    def _delete_rows(self, where: str, params: list, whole: Scope | None) -> int:
        """The database part of :meth:`_delete_where`; returns the records deleted."""
        select_sql = f"SELECT id, scope_key, session_id, scope_json FROM records WHERE {where}"
        with self._read_tx() as c:
            keys = {r[1] for r in c.execute(select_sql, params).fetchall()}
        if not keys:
            return 0
        while True:
            with self._write_tx() as c:
                self._guard(c, keys)
                rows = c.execute(select_sql + " FOR UPDATE", params).fetchall()
                if not rows:
                    return 0
                found = {r[1] for r in rows}
                if found <= keys:
                    c.execute(f"DELETE FROM records WHERE {where}", params)
                    self._rechunk(c, dict.fromkeys((r[1], r[2]) for r in rows))
                    c.execute("INSERT INTO pending_purges (intent_json) VALUES (%s)", (purge_intent(rows, whole),))
                    break
            # A scope gained matching records after the first read (e.g. delete_all(user_id=u) while
            # another scope of u was being created): its lock is not held. Taking it now, out of
            # sorted order, could deadlock with a writer holding it; this transaction wrote nothing,
            # so it ends (releasing its locks) and the delete runs again, locking the union in order.
            keys |= found
        return len(rows)

    # -- reads (and the seam's members that read or purge, run again on a dropped connection) --

    records = _reconnecting(idempotent=True)(StoreSeam.records)
    record_vectors = _reconnecting(idempotent=True)(StoreSeam.record_vectors)
    view_dir = _reconnecting(idempotent=True)(StoreSeam.view_dir)
    complete_purges = _reconnecting(idempotent=True)(StoreSeam.complete_purges)

    @_reconnecting(idempotent=True)
    def get(self, record_ids: list[str], scope: Scope) -> list[Record]:
        """Records of ``scope`` by id, in the order asked; unknown ids left out (an id held by several
        exact scopes inside ``scope`` gives each of them, insertion order)."""
        ids = lookup_ids(list(record_ids))  # ValueError for an id no record can hold (NUL...)
        where, params = self._scope_where(scope)
        found: dict[str, list[Record]] = {}
        with self._read_tx() as c:
            rows = c.execute(
                f"SELECT {RECORD_COLS} FROM records WHERE id = ANY(%s) AND {where} ORDER BY seq",
                [sorted(set(ids)), *params],
            ).fetchall()
        for r in rows:
            found.setdefault(r[1], []).append(row_to_record(r))
        return [rec for i in ids for rec in found.get(i, [])]

    @_reconnecting(idempotent=True)
    def chunks(self, scope: Scope) -> list[Chunk]:
        """Chunks matching ``scope``, chronological (session time, then first record's insertion)."""
        where, params = self._scope_where(scope)
        with self._read_tx() as c:
            rows = c.execute(f"SELECT {_CHUNK_COLS} FROM chunks WHERE {where} {ORDER_CHUNKS}", params).fetchall()
        return [_row_to_chunk(r) for r in rows]

    @_reconnecting(idempotent=True)
    def count(self, scope: Scope | None = None) -> dict[str, int]:
        """Numbers of records, chunks and vectors (in ``scope``, or all)."""
        where, params = self._scope_where(scope or Scope())
        with self._read_tx() as c:
            n_rec = c.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0]
            n_chk, n_vec = c.execute(f"SELECT count(*), count(embedding) FROM chunks WHERE {where}", params).fetchone()
        return {"records": int(n_rec), "chunks": int(n_chk), "vectors": int(n_vec)}

    # -- search primitives ----------------------------------------------------------------

    def _ranked(self, rows, score_of: Callable) -> list[tuple[Chunk, float]]:
        """Rows (chunk columns, first_seq, score) best first; ties in store order."""
        out = [(_row_to_chunk(r), int(r[7]), float(score_of(r[8]))) for r in rows]
        out.sort(key=lambda t: (-t[2], chunk_order(t[0], t[1])))
        return [(ch, s) for ch, _, s in out]

    @_reconnecting(idempotent=True)
    def search_dense(
        self, query: str, scope: Scope, k: int | None = 10, *, query_vector: np.ndarray | None = None
    ) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` by cosine similarity (``k=None``: every chunk in scope).
        Returns ``(chunk, cosine in [-1, 1])`` best first; ties in store order. An empty query
        without ``query_vector`` gives []. With ``k`` the HNSW index may answer (approximate)."""
        if query_vector is None:
            if not query.strip():
                return []
            query_vector = self.encode_query(query)
        if k is not None and k <= 0:
            return []
        qv = np.asarray(query_vector, dtype=np.float32)
        where, params = self._scope_where(scope)
        limit = "" if k is None else f" LIMIT {int(k)}"
        with self._read_tx() as c:
            if k is not None:
                c.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                c.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(40, int(k)))}")
            rows = c.execute(
                f"SELECT {_CHUNK_COLS}, first_seq, embedding <=> %s FROM chunks WHERE {where} "
                f"ORDER BY embedding <=> %s{limit}",
                [qv, *params, qv],
            ).fetchall()
        return self._ranked(rows, lambda d: 1.0 - d)

    @_reconnecting(idempotent=True)
    def search_bm25(self, query: str, scope: Scope, k: int | None = 10) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` by Okapi BM25 over the full-text lexemes (> 0 only; ``k=None``:
        all that match), statistics of the scope's own chunks (see the module docstring for how it
        differs from bm25s). Empty / all-stopword / unseen-word query -> []. NUL and lone surrogates
        in ``query`` are read as U+FFFD (:func:`~memfrontier.core.text.clean_text`), as stored text has them."""
        query = clean_text(query)  # PostgreSQL text cannot hold NUL
        if not query.strip() or (k is not None and k <= 0):
            return []
        where, params = self._scope_where(scope)
        limit = "" if k is None else f" LIMIT {int(k)}"
        with self._read_tx() as c:
            lexemes = c.execute(f"SELECT tsvector_to_array(to_tsvector('{_TS_CONFIG}', %s))", (query,)).fetchone()[0]
            if not lexemes:
                return []
            fetch = "" if k is None else f" FETCH FIRST {int(k)} ROWS WITH TIES"
            rows = c.execute(
                _BM25_SQL.format(where=where, fetch=fetch, limit=limit), [*params, sorted(set(lexemes)), *params]
            ).fetchall()
        return [(ch, s) for ch, s in self._ranked(rows, float) if s > 0]

    @_reconnecting(idempotent=True)
    def scope_generation(self, scope: Scope) -> int:
        """The sum of the write stamps of the scopes inside ``scope`` (0: none written since schema
        8), kept by triggers on ``records`` (schema 8): it changes exactly when a record of one of
        them is inserted or deleted, by any writer. One indexed read. See
        :meth:`MemoryStore.scope_generation`."""
        where, params = self._scope_where(scope)
        with self._read_tx() as c:
            return int(
                c.execute(f"SELECT COALESCE(sum(generation), 0) FROM scope_gen WHERE {where}", params).fetchone()[0]
            )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pool's connections (idempotent; one in use closes when its transaction ends)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r}, embedder={getattr(self.embedder, 'model_id', '?')!r}, chunk_tokens={self.chunk_tokens})"


__all__ = ["PostgresStore", "default_directory", "is_postgres_url", "redact_url"]

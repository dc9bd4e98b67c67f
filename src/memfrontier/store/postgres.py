"""The scale-out store: PostgreSQL + pgvector through ``psycopg`` 3.

The same :class:`~memfrontier.store.base.MemoryStore` members as
:class:`~memfrontier.store.sqlite.SQLiteStore`; the data live in one PostgreSQL database:

    schema_version  one row per applied migration (version, applied_at)
    meta            embedding model id and dim, chunk_tokens
    records         the store of record, ``UNIQUE (scope_key, id)``: record ids are unique per scope
    chunks          turn-atomic chunks of each (scope, session) with their record ids (``text[]``),
                    their vector (``vector(dim)``, HNSW index, cosine) and a generated ``tsvector``
                    (``to_tsvector('english', text)``) with its length (``tsv_len``, distinct lexemes)
    postings        BM25 postings: one row per (chunk, lexeme of its tsvector of at most 256 bytes,
                    :data:`MAX_LEXEME_BYTES`) with the chunk's scope columns, tf (the lexeme's number
                    of positions) and the chunk's length; a covering btree ``(lexeme, user_id,
                    agent_id, run_id) INCLUDE (chunk_id, tf, dl)`` and a unique one on ``(chunk_id,
                    lexeme)``. A longer token (e.g. a 2,000-letter "word") has no posting: it is
                    not BM25-searchable in this store (the SQLite store has no such limit), though
                    it counts in its chunk's length
    bm25_scope_stats  per exact scope: its number of chunks and the sum of their lengths (distinct
                    lexemes), BM25's N and average length
    Both BM25 tables are kept by the database: statement-level triggers on ``chunks`` (AFTER INSERT
    / AFTER DELETE) change them in the statement that changes the chunks, whichever client runs it.
    pending_purges  delete intents whose derived-view cleanup (bank files, graph folders) is not done
    view_roots, purges_applied  the view roots (local view folders of the processes using the
                    database) and the intents each has applied (:mod:`memfrontier.store.purge`)

View files (memory banks, the embedded graph index) are local files, as with SQLite: they live in
``directory`` (default ``$MEMFRONTIER_HOME/postgres/<database slug>``, ``MEMFRONTIER_HOME``
defaulting to ``~/.cache/memfrontier``), one folder per view (:meth:`PostgresStore.view_dir`).
Processes sharing the database may keep their view files in different directories: a delete
reaches each of them (on its next open, or when its views are next reached), and its intent is
dropped once every directory applied it (:mod:`memfrontier.store.purge`).

Writes. ``add``, ``delete`` and ``delete_all`` each run in one transaction that holds a
transaction-level advisory lock per scope it changes (``pg_advisory_xact_lock`` on a hash of the
scope key, taken in sorted order): writers of different scopes proceed in parallel, writers of one
scope serialise (the re-chunking of a session reads then rewrites its chunks). A killed client
leaves nothing: PostgreSQL rolls the open transaction back. Chunk ids hash (scope key, session,
record ids, text), so an unchanged chunk keeps its row and its vector; only new chunks are embedded.

Search primitives (fusion and recipes live in :mod:`memfrontier.retrieve.hybrid`):

- :meth:`PostgresStore.search_dense`: cosine through pgvector's ``<=>`` (cosine distance,
  similarity = 1 - distance). With a ``k`` the HNSW index may be used (approximate,
  ``hnsw.iterative_scan = strict_order`` so a scope filter still yields ``k`` rows,
  ``hnsw.ef_search = max(40, k)``); the planner scans exactly when the scope's rows are few.
- :meth:`PostgresStore.search_bm25`: Okapi BM25 (k1=1.5, b=0.75, Lucene IDF, as bm25s) computed
  in SQL over PostgreSQL's full-text lexemes: the query's lexemes (``to_tsvector('english', query)``,
  Snowball English stemmer and stopwords) are looked up in ``postings`` (an index-only scan per
  lexeme, always filtered by the scope columns); the chunks of the scope holding any of them are
  scored with N, df and the average length of the searched scope's own chunks (no other tenant's
  text enters the statistics). How it differs from the SQLite store's
  bm25s: the tokenizer (PostgreSQL's default parser and Snowball stemmer, not ours: accents are
  not folded, unspaced CJK text is one token, not bigrams), tf counts a lexeme's positions (capped
  at 256 by PostgreSQL), a chunk's length is its number of distinct lexemes, and a lexeme over
  :data:`MAX_LEXEME_BYTES` (256 bytes) has no posting, so such a token is not searchable. N and the average
  length come from ``bm25_scope_stats`` (one row per exact scope, summed over the scopes a partial scope
  covers), so a search costs O(postings of the query's lexemes in the scope), not O(chunks in
  scope); the postings are read from one btree in lexeme order (a few pages per thousand matches),
  not one ``chunks`` heap page per matching chunk as before schema 5, and only the top ``k`` rows
  (with their score ties) are joined back for their text. The recall difference is measured in
  ``benchmarks/bench_pg_recall.py`` (evidence recall of ``rag`` on the LoCoMo test split against
  the SQLite store).

  Latency in one scope of 100,000 chunks (1 user x 1,000,000 synthetic records, embedded server
  with 128 MB shared_buffers, 2 cores; ``benchmarks/bench_pg_store.py --records 1000000 --users 1
  --keep DIR --stores postgres``, three runs): hybrid search right after an add p50 15.5-19.1 ms,
  p95 166-170 ms, warm p50 10-13 ms, BM25 alone 9 ms (schema 4, reading each match's tsvector:
  77-87 ms, 437-505 ms, 37 ms, 37 ms).

Schema migrations are versioned (:data:`MIGRATIONS`): opening a database applies the missing
versions in order in one transaction under an advisory lock; a database written by a newer
memfrontier is refused with :class:`StoreError`. The ``vector`` extension is created when absent
(that needs a role allowed to create it; otherwise create it once as a superuser).

Errors: :class:`StoreError` when the server cannot be reached or a statement fails (the message
names the database, never the password), :class:`EmbeddingMismatchError` when the store was built
with another embedding model id or dimension, ``ValueError`` for invalid input (as SQLiteStore).
"""

from __future__ import annotations

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

from ..core.types import Chunk, Record, Scope
from ..core.errors import StoreError
from .base import AddProgress, AddResult
from .chunking import chunk_records
from .purge import LOG_TABLES
from .records import add_result, encode, encode_chunks, purge_intent, row_to_record
from .seam import ORDER_CHUNKS, ORDER_RECORDS, RECORD_COLS, StoreSeam, chunk_order

log = logging.getLogger(__name__)

URL_SCHEMES = ("postgres://", "postgresql://")
_MIGRATION_LOCK = 0x6D656D66  # advisory lock key held while the schema is checked / migrated
_TS_CONFIG = "english"


def is_postgres_url(location: object) -> bool:
    """Whether ``location`` is a PostgreSQL connection URL (``postgres://`` or ``postgresql://``)."""
    return isinstance(location, str) and location.startswith(URL_SCHEMES)


def redact_url(dsn: str) -> str:
    """The URL without its password (for messages)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", dsn)


# ---------------------------------------------------------------------------------------------
# Schema migrations: version -> statements (``{dim}`` is the embedding dimension)
# ---------------------------------------------------------------------------------------------

_V1 = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE records (
        seq bigserial PRIMARY KEY,
        id text COLLATE "C" NOT NULL,
        kind text NOT NULL,
        scope_key text COLLATE "C" NOT NULL,
        user_id text COLLATE "C", agent_id text COLLATE "C", run_id text COLLATE "C",
        scope_json text NOT NULL,
        session_id text COLLATE "C" NOT NULL,
        speaker text NOT NULL,
        role text NOT NULL,
        timestamp text COLLATE "C",
        text text NOT NULL,
        images_json text NOT NULL,
        step_index integer,
        action text,
        observation text,
        meta_json text NOT NULL,
        n_tokens integer NOT NULL,
        UNIQUE (scope_key, id))""",
    "CREATE INDEX records_session ON records (scope_key, session_id)",
    "CREATE INDEX records_user ON records (user_id)",
    "CREATE INDEX records_agent ON records (agent_id)",
    "CREATE INDEX records_run ON records (run_id)",
    """CREATE TABLE chunks (
        id text COLLATE "C" PRIMARY KEY,
        scope_key text COLLATE "C" NOT NULL,
        user_id text COLLATE "C", agent_id text COLLATE "C", run_id text COLLATE "C",
        scope_json text NOT NULL,
        session_id text COLLATE "C" NOT NULL,
        timestamp text COLLATE "C",
        text text NOT NULL,
        n_tokens integer NOT NULL,
        first_seq bigint NOT NULL,
        record_ids text[] NOT NULL,
        embedding vector({dim}) NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
        tsv_len integer GENERATED ALWAYS AS (length(to_tsvector('english', text))) STORED)""",
    "CREATE INDEX chunks_session ON chunks (scope_key, session_id)",
    "CREATE INDEX chunks_user ON chunks (user_id)",
    "CREATE INDEX chunks_agent ON chunks (agent_id)",
    "CREATE INDEX chunks_run ON chunks (run_id)",
    "CREATE INDEX chunks_embedding ON chunks USING hnsw (embedding vector_cosine_ops)",
    "CREATE INDEX chunks_tsv ON chunks USING gin (tsv)",
    "CREATE TABLE pending_purges (seq bigserial PRIMARY KEY, intent_json text NOT NULL)",
]

def _scope_stats_table(name: str) -> list[str]:
    """Statements creating the per-scope BM25 statistics table ``name`` (N and summed length of each
    exact scope's chunks) and filling it from the chunks present."""
    return [f"""CREATE TABLE {name} (
        scope_key text COLLATE "C" PRIMARY KEY,
        user_id text COLLATE "C", agent_id text COLLATE "C", run_id text COLLATE "C",
        n_chunks bigint NOT NULL,
        sum_len bigint NOT NULL)""",
            f"CREATE INDEX {name}_user ON {name} (user_id)",
            (f"INSERT INTO {name} SELECT scope_key, user_id, agent_id, run_id, count(*), sum(tsv_len) FROM chunks "
             "GROUP BY scope_key, user_id, agent_id, run_id")]


# v3: the BM25 statistics of each exact scope, kept by the writes (a search read them from the
# scope's chunk rows before: O(chunks in scope) per search), filled from the chunks present.
_V3 = _scope_stats_table("scope_stats")

# v4: the full-text index without GIN's pending list ("fastupdate"). With it, new entries wait in an
# unsorted list (up to gin_pending_list_limit, 4 MB) that every search scans whole, and the add
# that fills it merges it into the index. In one scope of 100,000 chunks a full list made the index
# scan of each BM25 search read 499 pages instead of 11 (4.0 ms instead of 0.6 ms); entries now go
# into the index as each chunk is written. The list left by older versions is merged here.
_V4 = [
    "ALTER INDEX chunks_tsv SET (fastupdate = off)",
    "SELECT gin_clean_pending_list('chunks_tsv'::regclass)",
]

#: Longest lexeme (bytes, ``octet_length``) given a posting. The btree entry of ``postings_lexeme``
#: (lexeme, scope columns, chunk id, tf, dl) must stay under PostgreSQL's 2704 bytes: with scope
#: keys of at most :data:`~memfrontier.store.records.MAX_KEY_BYTES` bytes the scope columns take at
#: most about that much, so 256 bytes of lexeme always fit. Longer tokens (a 300-letter "word", a
#: base64 blob) are not BM25-searchable in this store; they still count in the chunk's length.
MAX_LEXEME_BYTES = 256

# One posting per (chunk, lexeme of at most MAX_LEXEME_BYTES) of the chunk rows ``{src}``.
_POSTINGS_SELECT = ("SELECT t.lexeme, c.user_id, c.agent_id, c.run_id, c.id, cardinality(t.positions), c.tsv_len "
                    "FROM {src} c, unnest(c.tsv) AS t WHERE octet_length(t.lexeme) <= " + str(MAX_LEXEME_BYTES))

# v5: BM25 postings, one row per (chunk, lexeme of its tsvector) with the lexeme's tf (number of
# positions) and the chunk's length, kept by the writes in the chunks' transaction and filled here
# from the chunks present. A search reads, per query lexeme, the scope's postings from one btree
# (an index-only scan: lexeme, then the scope columns, carrying chunk id, tf and length) instead of
# one heap page of ``chunks`` per matching chunk (to unnest its tsvector): in one scope of 100,000
# chunks that was ~38 ms of every search and, with the HNSW index, more than 128 MB of
# shared_buffers to keep cached. No statement uses the GIN index on ``tsv`` any more: it goes (each
# chunk insert paid for it).
_V5 = [
    """CREATE TABLE postings (
        lexeme text COLLATE "C" NOT NULL,
        user_id text COLLATE "C", agent_id text COLLATE "C", run_id text COLLATE "C",
        chunk_id text COLLATE "C" NOT NULL,
        tf smallint NOT NULL,
        dl integer NOT NULL)""",
    "INSERT INTO postings " + _POSTINGS_SELECT.format(src="chunks") + " ORDER BY 1, 2, 3, 4",
    "CREATE INDEX postings_lexeme ON postings (lexeme, user_id, agent_id, run_id) INCLUDE (chunk_id, tf, dl)",
    "CREATE INDEX postings_chunk ON postings (chunk_id)",
    "DROP INDEX chunks_tsv",
    "ANALYZE postings",
]

# The trigger bodies' statements on the postings: those of the statement's new chunks, and the
# removal of those of its old ones.
_POSTINGS_ADD = ("INSERT INTO postings (lexeme, user_id, agent_id, run_id, chunk_id, tf, dl) "
                 + _POSTINGS_SELECT.format(src="new_chunks"))
_POSTINGS_DROP = "DELETE FROM postings WHERE chunk_id = ANY(ARRAY(SELECT id FROM old_chunks))"


def _chunk_triggers(name: str, on_insert: list[str], on_delete: list[str]) -> list[str]:
    """Statements (re)creating the plpgsql functions ``{name}_insert()`` / ``{name}_delete()``, which
    run the statements ``on_insert`` / ``on_delete``, and the statement-level triggers
    ``chunks_{name}_insert`` (AFTER INSERT, the statement's rows as ``new_chunks``) and
    ``chunks_{name}_delete`` (AFTER DELETE, ``old_chunks``) on ``chunks`` that call them."""
    out = []
    for event, rows, body in (("insert", "NEW TABLE AS new_chunks", on_insert),
                              ("delete", "OLD TABLE AS old_chunks", on_delete)):
        statements = "".join(stmt + ";\n" for stmt in body)
        out += [f"CREATE OR REPLACE FUNCTION {name}_{event}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
                f"BEGIN\n{statements}RETURN NULL;\nEND $$",
                f"DROP TRIGGER IF EXISTS chunks_{name}_{event} ON chunks",
                (f"CREATE TRIGGER chunks_{name}_{event} AFTER {event.upper()} ON chunks REFERENCING {rows} "
                 f"FOR EACH STATEMENT EXECUTE FUNCTION {name}_{event}()")]
    return out


# v6: the postings are kept by the database itself: statement-level triggers on ``chunks`` (AFTER
# INSERT / AFTER DELETE, with the statement's new / old rows as a transition table) insert the
# postings of the chunks a statement inserts and delete those of the chunks it deletes, so every
# writer (one running older code included, or a hand-written statement) keeps them exact. Before,
# only the store's own re-chunk wrote them: a writer unaware of them left chunks without postings,
# or postings of deleted chunks (their lexemes surviving the erasure of the text; stale rows inflate
# df). Lexemes over MAX_LEXEME_BYTES get no posting (see there). The migration resyncs the table
# with the chunks (postings of vanished chunks or of too long lexemes go, chunks without postings
# get theirs) and makes (chunk_id, lexeme) unique, so a process still running schema 5's code, which
# inserts postings itself after the trigger did, fails its add instead of doubling them. Creating
# the triggers locks ``chunks`` against writes until the migration commits, so the resync is exact.
# (A chunk's text and scope are never updated in place, its id hashes them: no UPDATE trigger.)
_V6 = [
    *_chunk_triggers("postings", [_POSTINGS_ADD], [_POSTINGS_DROP]),
    (f"DELETE FROM postings p WHERE octet_length(p.lexeme) > {MAX_LEXEME_BYTES} "
     "OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)"),
    ("DELETE FROM postings p USING (SELECT ctid, row_number() OVER (PARTITION BY chunk_id, lexeme) AS n "
     "FROM postings) d WHERE p.ctid = d.ctid AND d.n > 1"),
    ("INSERT INTO postings (lexeme, user_id, agent_id, run_id, chunk_id, tf, dl) "
     + _POSTINGS_SELECT.format(src="chunks") + " AND NOT EXISTS (SELECT 1 FROM postings p WHERE p.chunk_id = c.id)"),
    "CREATE UNIQUE INDEX postings_chunk_lexeme ON postings (chunk_id, lexeme)",
    "DROP INDEX IF EXISTS postings_chunk",
    "ANALYZE postings",
]

# v7: the scope statistics are kept by the same triggers as the postings (before, by the store's own
# re-chunk in Python, so a writer unaware of them, e.g. a hand-written statement, let N and the
# average length drift). One function per event keeps both BM25 tables: the postings of the
# statement's chunks and, per scope, their count and summed length (added on insert; subtracted on
# delete, a scope left without chunks losing its row). ``scope_stats`` is replaced by
# ``bm25_scope_stats``, filled from the chunks present (a resync), so a process still running schema
# 6's code, which adds its own counts after the trigger did, fails its add (no table
# ``scope_stats``) instead of doubling them. Creating the triggers first locks ``chunks`` against writes until the migration commits.
_V7 = [
    "DROP TRIGGER IF EXISTS chunks_postings_insert ON chunks",
    "DROP TRIGGER IF EXISTS chunks_postings_delete ON chunks",
    "DROP FUNCTION IF EXISTS postings_insert()",
    "DROP FUNCTION IF EXISTS postings_delete()",
    *_chunk_triggers("bm25", [
        _POSTINGS_ADD,
        "INSERT INTO bm25_scope_stats AS s (scope_key, user_id, agent_id, run_id, n_chunks, sum_len) "
        "SELECT scope_key, user_id, agent_id, run_id, count(*), sum(tsv_len) FROM new_chunks "
        "GROUP BY scope_key, user_id, agent_id, run_id ORDER BY scope_key "
        "ON CONFLICT (scope_key) DO UPDATE "
        "SET n_chunks = s.n_chunks + excluded.n_chunks, sum_len = s.sum_len + excluded.sum_len",
    ], [
        _POSTINGS_DROP,
        "UPDATE bm25_scope_stats s SET n_chunks = s.n_chunks - d.n, sum_len = s.sum_len - d.len "
        "FROM (SELECT scope_key, count(*) AS n, sum(tsv_len) AS len FROM old_chunks GROUP BY scope_key) d "
        "WHERE s.scope_key = d.scope_key",
        "DELETE FROM bm25_scope_stats WHERE n_chunks <= 0 AND scope_key = ANY(ARRAY(SELECT scope_key FROM old_chunks))",
    ]),
    "DROP TABLE IF EXISTS scope_stats",
    *_scope_stats_table("bm25_scope_stats"),
]

#: Every schema version and the statements that bring the previous version to it.
MIGRATIONS: dict[int, list[str]] = {1: _V1, 2: LOG_TABLES, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7}
# 2: the view roots' purge log; 3: BM25 statistics; 4: the full-text index without a pending list;
# 5: BM25 postings (the full-text index dropped); 6: the postings kept by triggers on ``chunks``
# (no posting for a lexeme over MAX_LEXEME_BYTES), resynced with the chunks, unique per (chunk, lexeme);
# 7: the scope statistics kept by the same triggers (renamed bm25_scope_stats, resynced)
SCHEMA_VERSION = max(MIGRATIONS)

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
    return Chunk(id=cid, scope=Scope(**json.loads(scope_json)), session_id=sid, timestamp=ts, text=text,
                 record_ids=list(rec_ids), n_tokens=n)


def _lock_id(scope_key: str) -> int:
    """A signed 64-bit advisory lock id for a scope key."""
    return int.from_bytes(hashlib.sha256(scope_key.encode("ascii")).digest()[:8], "big", signed=True)




def schema_version(c) -> int:
    """The version recorded in the ``schema_version`` table that ``c``'s ``search_path`` reaches
    (0 when there is none yet)."""
    if c.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
        return 0
    return int(c.execute("SELECT COALESCE(max(version), 0) FROM schema_version").fetchone()[0])


def apply_migrations(c, migrations: dict[int, list[str]], *, lock: int, what: str, **fmt) -> int:
    """Inside a transaction on ``c``: bring the table set to ``max(migrations)``.

    Takes the transaction-level advisory lock ``lock`` (so concurrent openers migrate once), reads
    the ``schema_version`` table (created when absent, in the first schema of ``search_path``),
    runs each missing version's statements in order (``str.format(**fmt)`` applied) and records
    each version. Returns the version found before migrating.

    Raises:
        StoreError: the recorded version is newer than ``max(migrations)`` (``what`` names the
            database in the message).
    """
    target = max(migrations)
    c.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
    current = schema_version(c)
    if current > target:
        raise StoreError(f"{what} has schema version {current}, newer than this memfrontier's {target}; "
                         f"upgrade memfrontier to open it")
    if current == 0:
        c.execute("CREATE TABLE schema_version (version integer PRIMARY KEY, "
                  "applied_at timestamptz NOT NULL DEFAULT now())")
    for version in range(current + 1, target + 1):
        for stmt in migrations[version]:
            c.execute(stmt.format(**fmt) if fmt else stmt)
        c.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        log.info("%s migrated to schema version %d", what, version)
    return current


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
        reembed: re-embed every chunk when the recorded embedding model id or dim differ, instead
            of raising :class:`EmbeddingMismatchError`.
        directory: local folder for the view files (default :func:`default_directory`).
        connect_timeout_s: how long to wait for the server (seconds).

    Raises:
        StoreError: the server cannot be reached, the schema is newer than this memfrontier's, or
            ``chunk_tokens`` differs from the recorded one.
        EmbeddingMismatchError: model id or dim differ from the recorded ones and not ``reembed``.
    """

    def __init__(self, dsn: str, embedder, *, chunk_tokens: int = 256, reembed: bool = False,
                 directory: str | os.PathLike | None = None, connect_timeout_s: float = 10.0):
        import psycopg

        self._psycopg = psycopg
        self.dsn = dsn
        self.name = redact_url(dsn)
        self.embedder = embedder
        self.chunk_tokens = int(chunk_tokens)
        self.path = Path(directory) if directory is not None else default_directory(dsn)
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(connect_timeout_s)))
        except psycopg.Error as e:
            raise StoreError(f"cannot connect to store database {self.name}: {e}") from e
        self._open_steps(self._migrate, self._register_vector, lambda: self._check_meta(reembed))

    # -- connection / schema --------------------------------------------------------------

    _PH = "%s"

    @contextmanager
    def _tx(self) -> Iterator:
        """One transaction on the connection under the thread lock; psycopg errors become StoreError."""
        with self._lock:
            if self._closed:
                raise StoreError(f"store {self.name} is closed")
            try:
                with self._conn.transaction():
                    yield self._conn
            except self._psycopg.Error as e:
                raise StoreError(f"store database {self.name}: {e}") from e

    _read_tx = _write_tx = _tx  # one kind of transaction serves reads and writes

    def _register_vector(self) -> None:
        from pgvector.psycopg import register_vector

        try:
            register_vector(self._conn)
        except self._psycopg.Error as e:
            raise StoreError(f"store database {self.name}: pgvector is not available: {e}") from e

    def schema_version(self) -> int:
        """The schema version of the database (0 when it holds no store yet)."""
        with self._tx() as c:
            return schema_version(c)

    def _migrate(self) -> None:
        """Apply the missing :data:`MIGRATIONS` in order (one transaction, advisory lock); refuse a
        schema newer than :data:`SCHEMA_VERSION`."""
        with self._tx() as c:
            apply_migrations(c, MIGRATIONS, lock=_MIGRATION_LOCK, what=f"store database {self.name}",
                             dim=int(self.embedder.dim))

    def _store_name(self) -> str:
        return self.name

    def _check_meta(self, reembed: bool) -> None:
        with self._tx() as c:
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            meta = self._meta(c)
            if "embedding_model_id" not in meta:
                c.cursor().executemany("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", [
                    ("embedding_model_id", self.embedder.model_id), ("embedding_dim", str(int(self.embedder.dim))),
                    ("chunk_tokens", str(self.chunk_tokens))])
                return
            recorded = int(meta.get("chunk_tokens", self.chunk_tokens))
            if recorded != self.chunk_tokens:
                raise StoreError(f"store {self.name} was built with chunk_tokens={recorded}; open it with "
                                 f"chunk_tokens={recorded} (got {self.chunk_tokens})")
            msg = self._mismatch(meta)
        self._resolve_mismatch(msg, reembed)

    # -- embedding helpers ----------------------------------------------------------------

    def _encode(self, texts: list[str]) -> np.ndarray:
        return encode(self.embedder, texts)

    def reembed_all(self) -> int:
        """Re-embed every chunk with the configured embedder (the vector column is recreated with its
        dimension, HNSW index included) and record its id/dim. Returns chunks embedded."""
        dim = int(self.embedder.dim)
        with self._tx() as c:
            c.execute("LOCK TABLE chunks IN EXCLUSIVE MODE")
            rows = c.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()
            vecs = self._encode([t for _, t in rows])
            c.execute("DROP INDEX IF EXISTS chunks_embedding")
            c.execute("ALTER TABLE chunks DROP COLUMN embedding")
            c.execute(f"ALTER TABLE chunks ADD COLUMN embedding vector({dim})")
            with c.cursor() as cur:
                cur.executemany("UPDATE chunks SET embedding = %s WHERE id = %s", [(v, i) for (i, _), v in zip(rows, vecs)])
            c.execute("ALTER TABLE chunks ALTER COLUMN embedding SET NOT NULL")
            c.execute("CREATE INDEX chunks_embedding ON chunks USING hnsw (embedding vector_cosine_ops)")
            c.cursor().executemany("INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                          [("embedding_model_id", self.embedder.model_id), ("embedding_dim", str(dim))])
        return len(rows)

    # -- writes ---------------------------------------------------------------------------

    def _guard(self, c, scope_keys) -> None:
        """Inside a write transaction: lock the scopes (sorted, so two writers cannot deadlock) and
        check the embedding model is still the configured one."""
        for key in sorted(set(scope_keys)):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(key),))
        self._guard_embedding(c)

    def _existing(self, c, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        """The stored records among ``keys`` ((scope key, record id) pairs), by key."""
        if not keys:
            return {}
        rows = c.execute(
            f"SELECT r.scope_key, {', '.join('r.' + x.strip() for x in RECORD_COLS.split(','))} FROM records r "
            "JOIN unnest(%s::text[], %s::text[]) AS k(scope_key, id) ON r.scope_key = k.scope_key AND r.id = k.id",
            ([k for k, _ in keys], [i for _, i in keys])).fetchall()
        return {(row[0], row[2]): row_to_record(row[1:]) for row in rows}


    def _rechunk(self, c, sessions: dict[tuple[str, str], None], progress: AddProgress | None = None) -> tuple[int, int]:
        """Inside a write transaction: rebuild the chunks of ``sessions`` ((scope key, session id))
        from their current records; unchanged chunks keep their row and vector, new ones are
        embedded (reporting ``progress``, see :func:`~memfrontier.store.records.encode_chunks`);
        the postings and scope statistics follow by trigger (schema 7). Returns (chunks built, vectors
        written)."""
        new_chunks: list[tuple[Chunk, int]] = []
        for key in sessions:
            rows = c.execute(f"SELECT {RECORD_COLS} FROM records WHERE scope_key = %s AND session_id = %s "
                             f"{ORDER_RECORDS}", key).fetchall()
            counts = {}
            seq_of = {}
            recs = []
            for row in rows:
                rec = row_to_record(row)
                counts[rec.render()] = int(row[-1])
                seq_of[rec.id] = int(row[0])
                recs.append(rec)
            plan = chunk_records(recs, lambda t: counts[t] if t in counts else int(self.embedder.count_tokens(t)),
                                 self.chunk_tokens)
            first = {ch.id: min(seq_of[i] for i in ch.record_ids) for ch in plan}
            old = {r[0]: (r[1], r[2]) for r in c.execute(
                "SELECT id, timestamp, first_seq FROM chunks WHERE scope_key = %s AND session_id = %s", key)}
            gone = sorted(set(old) - set(first))
            if gone:
                c.execute("DELETE FROM chunks WHERE id = ANY(%s)", (gone,))
            # a kept chunk's row is rewritten only when its order keys moved: an UPDATE writes a new row
            # version into every index, the HNSW one included (about 10 ms a row at 100,000 chunks)
            kept = [(ch.timestamp, first[ch.id], ch.id) for ch in plan
                    if ch.id in old and old[ch.id] != (ch.timestamp, first[ch.id])]
            if kept:
                with c.cursor() as cur:
                    cur.executemany("UPDATE chunks SET timestamp = %s, first_seq = %s WHERE id = %s", kept)
            new_chunks += [(ch, first[ch.id]) for ch in plan if ch.id not in old]
        vecs = encode_chunks(self.embedder, [ch for ch, _ in new_chunks], progress)
        if new_chunks:
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO chunks (id, scope_key, user_id, agent_id, run_id, scope_json, session_id, timestamp, "
                    "text, n_tokens, first_seq, record_ids, embedding) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [(ch.id, ch.scope.key(), ch.scope.user_id, ch.scope.agent_id, ch.scope.run_id,
                      ch.scope.model_dump_json(), ch.session_id, ch.timestamp, ch.text, ch.n_tokens, seq,
                      list(ch.record_ids), v) for (ch, seq), v in zip(new_chunks, vecs)])
        return len(new_chunks), len(new_chunks)

    def add(self, records: list[Record], *, progress: AddProgress | None = None) -> AddResult:
        """Insert records not yet stored; re-chunk and embed only what changed. Same contract as
        :meth:`SQLiteStore.add <memfrontier.store.sqlite.SQLiteStore.add>`: ids unique per scope,
        a stored (scope, id) with the same content is skipped, with other content raises
        :class:`RecordConflictError`; one transaction for the whole batch (all or nothing).
        ``progress(done, total)`` follows the embedding as there (here it runs inside the write
        transaction: it may not write to this store).

        Raises:
            ValueError: a record is empty (no text, images, action or observation); nothing written.
            RecordConflictError: a (scope, id) stored or repeated in the batch with other content.
            TypeError: an element is not a :class:`Record`.
            StoreError / EmbeddingMismatchError: see the class docstring.
        """
        records, uniq, n_of = self._checked_new(records)
        if not n_of:
            return AddResult(skipped=[r.id for r in records])

        with self._tx() as c:
            # every scope of the batch, not only those of n_of: a record stored at the first read may
            # have been deleted since, and is then inserted here (its scope must be locked too)
            self._guard(c, {k[0] for k in uniq})
            insert = self._to_insert(c, uniq, n_of)  # a concurrent writer may have added or deleted some
            if not insert:
                return AddResult(skipped=[r.id for r in records])
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO records (id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, speaker, "
                    "role, timestamp, text, images_json, step_index, action, observation, meta_json, n_tokens) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [(r.id, r.kind, k[0], r.scope.user_id, r.scope.agent_id, r.scope.run_id, r.scope.model_dump_json(),
                      r.session_id, r.speaker, r.role, r.timestamp, r.text,
                      json.dumps([im.model_dump() for im in r.images], ensure_ascii=False), r.step_index, r.action,
                      r.observation, json.dumps(r.meta, ensure_ascii=False), n)
                     for k, r, n in insert])
            built, embedded = self._rechunk(c, dict.fromkeys((k[0], r.session_id) for k, r, _ in insert), progress)
        return add_result(records, uniq, {k for k, _, _ in insert}, built, embedded)

    def _delete_where(self, where: str, params: list, whole: Scope | None = None) -> int:
        """Delete the records matching ``where``, re-chunk their sessions and record a purge intent
        (one transaction); then purge the derived views (:meth:`complete_purges`)."""
        select_sql = f"SELECT id, scope_key, session_id, scope_json FROM records WHERE {where}"
        with self._tx() as c:
            keys = {r[1] for r in c.execute(select_sql, params).fetchall()}
        if not keys:
            return 0
        while True:
            with self._tx() as c:
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
        self.complete_purges()
        return len(rows)

    # -- reads ----------------------------------------------------------------------------

    def get(self, record_ids: list[str], scope: Scope) -> list[Record]:
        """Records of ``scope`` by id, in the order asked; unknown ids left out (an id held by several
        exact scopes inside ``scope`` gives each of them, insertion order)."""
        ids = list(record_ids)
        where, params = self._scope_where(scope)
        found: dict[str, list[Record]] = {}
        with self._tx() as c:
            rows = c.execute(f"SELECT {RECORD_COLS} FROM records WHERE id = ANY(%s) AND {where} ORDER BY seq",
                             [sorted(set(ids)), *params]).fetchall()
        for r in rows:
            found.setdefault(r[1], []).append(row_to_record(r))
        return [rec for i in ids for rec in found.get(i, [])]

    def chunks(self, scope: Scope) -> list[Chunk]:
        """Chunks matching ``scope``, chronological (session time, then first record's insertion)."""
        where, params = self._scope_where(scope)
        with self._tx() as c:
            rows = c.execute(f"SELECT {_CHUNK_COLS} FROM chunks WHERE {where} {ORDER_CHUNKS}", params).fetchall()
        return [_row_to_chunk(r) for r in rows]

    def count(self, scope: Scope | None = None) -> dict[str, int]:
        """Numbers of records, chunks and vectors (in ``scope``, or all)."""
        where, params = self._scope_where(scope or Scope())
        with self._tx() as c:
            n_rec = c.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0]
            n_chk, n_vec = c.execute(f"SELECT count(*), count(embedding) FROM chunks WHERE {where}", params).fetchone()
        return {"records": int(n_rec), "chunks": int(n_chk), "vectors": int(n_vec)}

    # -- search primitives ----------------------------------------------------------------

    def _ranked(self, rows, score_of: Callable) -> list[tuple[Chunk, float]]:
        """Rows (chunk columns, first_seq, score) best first; ties in store order."""
        out = [(_row_to_chunk(r), int(r[7]), float(score_of(r[8]))) for r in rows]
        out.sort(key=lambda t: (-t[2], chunk_order(t[0], t[1])))
        return [(ch, s) for ch, _, s in out]

    def search_dense(self, query: str, scope: Scope, k: int | None = 10, *,
                     query_vector: np.ndarray | None = None) -> list[tuple[Chunk, float]]:
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
        with self._tx() as c:
            if k is not None:
                c.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                c.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(40, int(k)))}")
            rows = c.execute(f"SELECT {_CHUNK_COLS}, first_seq, embedding <=> %s FROM chunks WHERE {where} "
                             f"ORDER BY embedding <=> %s{limit}", [qv, *params, qv]).fetchall()
        return self._ranked(rows, lambda d: 1.0 - d)

    def search_bm25(self, query: str, scope: Scope, k: int | None = 10) -> list[tuple[Chunk, float]]:
        """Top-``k`` chunks in ``scope`` by Okapi BM25 over the full-text lexemes (> 0 only; ``k=None``:
        all that match), statistics of the scope's own chunks (see the module docstring for how it
        differs from bm25s). Empty / all-stopword / unseen-word query -> []."""
        if not query.strip() or (k is not None and k <= 0):
            return []
        where, params = self._scope_where(scope)
        limit = "" if k is None else f" LIMIT {int(k)}"
        with self._tx() as c:
            lexemes = c.execute(f"SELECT tsvector_to_array(to_tsvector('{_TS_CONFIG}', %s))", (query,)).fetchone()[0]
            if not lexemes:
                return []
            fetch = "" if k is None else f" FETCH FIRST {int(k)} ROWS WITH TIES"
            rows = c.execute(_BM25_SQL.format(where=where, fetch=fetch, limit=limit),
                             [*params, sorted(set(lexemes)), *params]).fetchall()
        return [(ch, s) for ch, s in self._ranked(rows, float) if s > 0]

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r}, embedder={getattr(self.embedder, 'model_id', '?')!r}, chunk_tokens={self.chunk_tokens})"


__all__ = ["MIGRATIONS", "PostgresStore", "SCHEMA_VERSION", "default_directory", "is_postgres_url"]

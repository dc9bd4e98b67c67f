"""The PostgreSQL store's schema: its versioned migrations (:data:`MIGRATIONS`, version ->
statements, ``{dim}`` the embedding dimension) and how a database is brought to the current
version (:func:`apply_migrations`, also used for the service's key tables).

Opening a database applies the missing versions in order in one transaction under an advisory
lock; a database written by a newer memfrontier is refused with
:class:`~memfrontier.core.errors.StoreError`. The tables are described in
``docs/service-postgres.md``.
"""

from __future__ import annotations

import logging

from ..core.errors import StoreError
from .purge import LOG_TABLES

log = logging.getLogger(__name__)

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
    return [
        f"""CREATE TABLE {name} (
        scope_key text COLLATE "C" PRIMARY KEY,
        user_id text COLLATE "C", agent_id text COLLATE "C", run_id text COLLATE "C",
        n_chunks bigint NOT NULL,
        sum_len bigint NOT NULL)""",
        f"CREATE INDEX {name}_user ON {name} (user_id)",
        (
            f"INSERT INTO {name} SELECT scope_key, user_id, agent_id, run_id, count(*), sum(tsv_len) FROM chunks "
            "GROUP BY scope_key, user_id, agent_id, run_id"
        ),
    ]


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
_POSTINGS_SELECT = (
    "SELECT t.lexeme, c.user_id, c.agent_id, c.run_id, c.id, cardinality(t.positions), c.tsv_len "
    "FROM {src} c, unnest(c.tsv) AS t WHERE octet_length(t.lexeme) <= " + str(MAX_LEXEME_BYTES)
)

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
_POSTINGS_ADD = "INSERT INTO postings (lexeme, user_id, agent_id, run_id, chunk_id, tf, dl) " + _POSTINGS_SELECT.format(
    src="new_chunks"
)
_POSTINGS_DROP = "DELETE FROM postings WHERE chunk_id = ANY(ARRAY(SELECT id FROM old_chunks))"


def _triggers(table: str, name: str, on_insert: list[str], on_delete: list[str]) -> list[str]:
    """Statements (re)creating the plpgsql functions ``{name}_insert()`` / ``{name}_delete()``, which
    run the statements ``on_insert`` / ``on_delete``, and the statement-level triggers
    ``{table}_{name}_insert`` (AFTER INSERT, the statement's rows as ``new_{table}``) and
    ``{table}_{name}_delete`` (AFTER DELETE, ``old_{table}``) on ``table`` that call them."""
    out = []
    for event, rows, body in (
        ("insert", f"NEW TABLE AS new_{table}", on_insert),
        ("delete", f"OLD TABLE AS old_{table}", on_delete),
    ):
        statements = "".join(stmt + ";\n" for stmt in body)
        out += [
            f"CREATE OR REPLACE FUNCTION {name}_{event}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"BEGIN\n{statements}RETURN NULL;\nEND $$",
            f"DROP TRIGGER IF EXISTS {table}_{name}_{event} ON {table}",
            (
                f"CREATE TRIGGER {table}_{name}_{event} AFTER {event.upper()} ON {table} REFERENCING {rows} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {name}_{event}()"
            ),
        ]
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
    *_triggers("chunks", "postings", [_POSTINGS_ADD], [_POSTINGS_DROP]),
    (
        f"DELETE FROM postings p WHERE octet_length(p.lexeme) > {MAX_LEXEME_BYTES} "
        "OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)"
    ),
    (
        "DELETE FROM postings p USING (SELECT ctid, row_number() OVER (PARTITION BY chunk_id, lexeme) AS n "
        "FROM postings) d WHERE p.ctid = d.ctid AND d.n > 1"
    ),
    (
        "INSERT INTO postings (lexeme, user_id, agent_id, run_id, chunk_id, tf, dl) "
        + _POSTINGS_SELECT.format(src="chunks")
        + " AND NOT EXISTS (SELECT 1 FROM postings p WHERE p.chunk_id = c.id)"
    ),
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
    *_triggers(
        "chunks",
        "bm25",
        [
            _POSTINGS_ADD,
            "INSERT INTO bm25_scope_stats AS s (scope_key, user_id, agent_id, run_id, n_chunks, sum_len) "
            "SELECT scope_key, user_id, agent_id, run_id, count(*), sum(tsv_len) FROM new_chunks "
            "GROUP BY scope_key, user_id, agent_id, run_id ORDER BY scope_key "
            "ON CONFLICT (scope_key) DO UPDATE "
            "SET n_chunks = s.n_chunks + excluded.n_chunks, sum_len = s.sum_len + excluded.sum_len",
        ],
        [
            _POSTINGS_DROP,
            "UPDATE bm25_scope_stats s SET n_chunks = s.n_chunks - d.n, sum_len = s.sum_len - d.len "
            "FROM (SELECT scope_key, count(*) AS n, sum(tsv_len) AS len FROM old_chunks GROUP BY scope_key) d "
            "WHERE s.scope_key = d.scope_key",
            "DELETE FROM bm25_scope_stats WHERE n_chunks <= 0 AND scope_key = ANY(ARRAY(SELECT scope_key FROM old_chunks))",
        ],
    ),
    "DROP TABLE IF EXISTS scope_stats",
    *_scope_stats_table("bm25_scope_stats"),
]


def _stamp(rows: str) -> str:
    """The trigger statement stamping each scope of the transition table ``rows`` with the next
    value of ``scope_gen_seq``, or its old stamp + 1 when that is larger (a writer that took its
    value first may commit last), so a stamp only grows; scopes in key order (two statements lock
    their rows alike)."""
    return (
        "INSERT INTO scope_gen AS g (scope_key, user_id, agent_id, run_id, generation) "
        f"SELECT scope_key, user_id, agent_id, run_id, nextval('scope_gen_seq') FROM (SELECT DISTINCT "
        f"scope_key, user_id, agent_id, run_id FROM {rows} ORDER BY scope_key) k "
        "ON CONFLICT (scope_key) DO UPDATE SET generation = GREATEST(g.generation + 1, excluded.generation)"
    )


# v8: a per-scope write counter (``MemoryStore.scope_generation``): every statement that inserts or
# deletes records stamps each of its scopes in ``scope_gen`` with the next value of a sequence
# (statement-level triggers on ``records``, so every writer stamps). A stamp only grows (see
# ``_stamp``), so the sum of the stamps of the scopes a search scope covers changes exactly when a
# record of one of them did: a view kept in line with the records
# (rag's turn view) compares it instead of reading the records at every query. Filled for the
# scopes present. (Records are never updated in place: no UPDATE trigger.)
_V8 = [
    "CREATE SEQUENCE scope_gen_seq",
    """CREATE TABLE scope_gen (
        scope_key text COLLATE "C" PRIMARY KEY,
        user_id text COLLATE "C", agent_id text COLLATE "C", run_id text COLLATE "C",
        generation bigint NOT NULL)""",
    "CREATE INDEX scope_gen_user ON scope_gen (user_id)",
    *_triggers("records", "scope_gen", [_stamp("new_records")], [_stamp("old_records")]),
    _stamp("records"),
]

# v9: a vector per record, the embedding of its rendered text (``Record.render()``), written with
# the record and deleted with it (foreign key, cascade); float32 little-endian bytes, as the SQLite
# store keeps them (never searched in SQL: the chunks' vectors are derived from them, and the turn
# view takes them as its items' vectors). The migration only creates the table, which keeps an older
# release (which would add records without vectors) out; the store then embeds the records of a
# database that has none in committed batches (resumable) and derives every chunk's vector from
# them (``StoreSeam._complete_vectors``; ``meta`` key ``chunk_vectors`` says when it is done).
_V9 = [
    """CREATE TABLE record_vectors (
        seq bigint PRIMARY KEY REFERENCES records (seq) ON DELETE CASCADE,
        vector bytea NOT NULL)""",
]

#: Every schema version and the statements that bring the previous version to it.
MIGRATIONS: dict[int, list[str]] = {
    1: _V1,
    2: LOG_TABLES,
    3: _V3,
    4: _V4,
    5: _V5,
    6: _V6,
    7: _V7,
    8: _V8,
    9: _V9,
}
# 2: the view roots' purge log; 3: BM25 statistics; 4: the full-text index without a pending list;
# 5: BM25 postings (the full-text index dropped); 6: the postings kept by triggers on ``chunks``
# (no posting for a lexeme over MAX_LEXEME_BYTES), resynced with the chunks, unique per (chunk, lexeme);
# 7: the scope statistics kept by the same triggers (renamed bm25_scope_stats, resynced);
# 8: the per-scope write counter, kept by triggers on ``records``; 9: record vectors (chunk vectors
# derived from them)
SCHEMA_VERSION = max(MIGRATIONS)


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
        raise StoreError(
            f"{what} has schema version {current}, newer than this memfrontier's {target}; "
            f"upgrade memfrontier to open it"
        )
    if current == 0:
        c.execute(
            "CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    for version in range(current + 1, target + 1):
        for stmt in migrations[version]:
            c.execute(stmt.format(**fmt) if fmt else stmt)
        c.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        log.info("%s migrated to schema version %d", what, version)
    return current


__all__ = ["MAX_LEXEME_BYTES", "MIGRATIONS", "SCHEMA_VERSION", "apply_migrations", "schema_version"]

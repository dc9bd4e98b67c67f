"""The embedded store's SQLite schema (version 3) and the migrations from versions 1 and 2.

Tables of ``store.db``: ``meta`` (schema version, store generation, chunk budget, embedding model
id and dim, how the chunk vectors were made: ``chunk_vectors``), ``records``, ``record_vectors``
(each record's vector: the embedding of its rendered text, deleted with the record), ``chunks``,
``chunk_records``, ``chunk_vectors`` (derived from the record vectors), ``scope_gen`` (the
generation at which each scope last changed), ``pending_purges`` (delete intents whose
derived-view cleanup is not finished) and the view roots' purge log (``view_roots``,
``purges_applied``; :mod:`memfrontier.store.purge`).

Version 2 replaced version 1's scope key (ids joined with ``|``, which let two scopes share rows
and chunks). :func:`migrate_v1` rewrites a version-1 database in one transaction (keys recomputed
from each record's ids, ``""`` read as absent as version 1 did; record ids unique per scope; every
session re-chunked by the store, vectors reused for unchanged chunk texts);
:func:`migrate_v1_files` then renames the graph folders to the new per-scope names (a folder two
scopes shared is removed: it is rebuilt on the next build) and removes the obsolete ``bm25/``.

Version 3 added ``record_vectors``: a record is embedded once, when it is added, and a chunk's
vector is derived from its records' (:func:`memfrontier.store.records.chunk_vector`). A version-2
store is marked version 3 (so an older release, which would add records without vectors, refuses
it) and then completed by the store (:meth:`memfrontier.store.seam.StoreSeam._complete_vectors`:
records embedded in committed batches, resumable; then every chunk vector derived again).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ..core.timeutil import canonical_timestamp
from ..core.types import Scope, record_id
from .purge import LOG_TABLES

#: 2: injective scope keys, record ids unique per scope (UNIQUE(scope_key, id)), scope_gen,
#: pending_purges (view_roots and purges_applied are additive, created when missing: an older
#: reader ignores them safely). 3: record_vectors, chunk vectors derived from them.
SCHEMA_VERSION = 3
DB_NAME = "store.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    user_id TEXT, agent_id TEXT, run_id TEXT,
    scope_json TEXT NOT NULL,
    session_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    role TEXT NOT NULL,
    timestamp TEXT,
    text TEXT NOT NULL,
    images_json TEXT NOT NULL,
    step_index INTEGER,
    action TEXT,
    observation TEXT,
    meta_json TEXT NOT NULL,
    n_tokens INTEGER NOT NULL,
    UNIQUE (scope_key, id)
);
CREATE INDEX IF NOT EXISTS records_id ON records(id);
CREATE INDEX IF NOT EXISTS records_session ON records(scope_key, session_id);
CREATE INDEX IF NOT EXISTS records_user ON records(user_id);
CREATE INDEX IF NOT EXISTS records_agent ON records(agent_id);
CREATE INDEX IF NOT EXISTS records_run ON records(run_id);
CREATE TABLE IF NOT EXISTS record_vectors (
    seq INTEGER PRIMARY KEY REFERENCES records(seq) ON DELETE CASCADE,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id TEXT PRIMARY KEY,
    scope_key TEXT NOT NULL,
    user_id TEXT, agent_id TEXT, run_id TEXT,
    scope_json TEXT NOT NULL,
    session_id TEXT NOT NULL,
    timestamp TEXT,
    text TEXT NOT NULL,
    n_tokens INTEGER NOT NULL,
    first_seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_session ON chunks(scope_key, session_id);
CREATE TABLE IF NOT EXISTS chunk_records (
    chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    record_id TEXT NOT NULL,
    PRIMARY KEY (chunk_id, position)
);
CREATE INDEX IF NOT EXISTS chunk_records_record ON chunk_records(record_id);
CREATE TABLE IF NOT EXISTS chunk_vectors (
    chunk_id TEXT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS pending_purges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_json TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS scope_gen (scope_key TEXT PRIMARY KEY, generation INTEGER NOT NULL);
""" + "".join(f"{stmt};\n" for stmt in LOG_TABLES)  # the view roots' purge log (memfrontier.store.purge)


def create_tables(c) -> None:
    """Create the missing tables and indexes in transaction ``c`` (statement by statement: an
    ``executescript`` would commit the caller's transaction)."""
    for stmt in SCHEMA.split(";"):
        if stmt.strip():
            c.execute(stmt)


def records_unique_per_scope(c) -> None:
    """Part of schema 1 -> 2: record ids become unique per scope (``UNIQUE(scope_key, id)``
    instead of a global ``UNIQUE(id)``). Schema 1 ids were globally unique, so every row is kept
    as is; :func:`migrate_v1` recomputes the scope keys afterwards. ``record_vectors`` (created by
    :func:`create_tables`; empty unless the store held vectors before it was taken back to version 1)
    is made again after the new ``records``, its rows kept (``seq`` is kept): its foreign key would
    follow the renamed table."""
    c.execute("CREATE TEMP TABLE record_vectors_kept AS SELECT seq, vector FROM record_vectors")
    c.execute("DROP TABLE record_vectors")
    c.execute("ALTER TABLE records RENAME TO records_v1")
    for name in ("records_session", "records_user", "records_agent", "records_run", "records_id"):
        c.execute(f"DROP INDEX IF EXISTS {name}")
    for stmt in SCHEMA.split(";"):
        if "records" in stmt and "chunk_records" not in stmt:
            c.execute(stmt)
    cols = (
        "seq, id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, speaker, role, "
        "timestamp, text, images_json, step_index, action, observation, meta_json, n_tokens"
    )
    c.execute(f"INSERT INTO records({cols}) SELECT {cols} FROM records_v1")
    c.execute("DROP TABLE records_v1")
    c.execute("INSERT INTO record_vectors (seq, vector) SELECT seq, vector FROM record_vectors_kept")
    c.execute("DROP TABLE record_vectors_kept")


#: ``rechunk(c, sessions)``: re-chunk every ``(scope key, session id)`` of ``sessions`` in
#: transaction ``c`` (the store's write planning: records embedded, chunk vectors derived).
Rechunk = Callable[[object, dict], None]


#: What :func:`~memfrontier.core.types.record_id` gives: ``r-`` and 20 hex digits.
_CONTENT_ID_RE = re.compile(r"r-[0-9a-f]{20}")


def _v1_content_id(key: str, session_id: str, position: int, speaker: str, text: str, timestamp: str | None) -> str:
    """:func:`~memfrontier.core.types.record_id` as version 1 computed it: on the raw scope key
    string ``key`` (version 1's ``|``-joined ids) and the timestamp as it was stored."""
    h = hashlib.sha256("\x1f".join([key, session_id, str(position), speaker, timestamp or "", text]).encode("utf-8"))
    return "r-" + h.hexdigest()[:20]


def _v1_position(
    key: str, session_id: str, speaker: str, text: str, ts: str | None, rid: str, guesses: list[int], upto: int
) -> int | None:
    """The position in its ``add`` call at which a version-1 content id ``rid`` was derived (tried:
    ``guesses`` first, then ``0..upto``), or None when ``rid`` is not such an id (a caller's id)."""
    for p in [*guesses, *range(upto + 1)]:
        if p >= 0 and _v1_content_id(key, session_id, p, speaker, text, ts) == rid:
            return p
    return None


def _v1_timestamp(raw: str | None, meta_json: str) -> tuple[str | None, str]:
    """A version-1 timestamp in the canonical form, and the record's meta JSON. Version 1 stored
    the caller's spelling; one that is no complete date becomes None, the original kept in the
    meta under ``timestamp_v1`` (a new store refuses such a value); an empty one (version 1 took
    ``""`` for no timestamp) becomes None."""
    if raw is None or not raw.strip():
        return None, meta_json
    try:
        return canonical_timestamp(raw), meta_json
    except ValueError:
        meta = json.loads(meta_json)
        meta["timestamp_v1"] = raw
        return None, json.dumps(meta, ensure_ascii=False)


def migrate_v1(c, rechunk: Rechunk) -> tuple[dict[str, dict[str, Scope]], dict[str, str]]:
    """Rewrite a version-1 database to version 2 in transaction ``c``. Returns, for each version-1
    scope key, the version-2 scopes that had it (by key), and the record ids that changed (old id
    -> new id; version-1 ids were globally unique), for :func:`migrate_v1_files`.

    A record id that :func:`~memfrontier.core.types.record_id` derived from the content (found by
    recomputing it with the version-1 key and stored timestamp) is derived again from the new key
    and the canonical timestamp, as an ``add`` of the same message computes it now; other ids are
    kept. Timestamps are rewritten in the canonical form (:func:`_v1_timestamp`). Every session is
    re-chunked (its records embedded, chunk vectors derived) and the version set to 2 (the store
    then takes it to :data:`SCHEMA_VERSION`)."""
    records_unique_per_scope(c)
    shared: dict[str, dict[str, Scope]] = {}
    rows = c.execute(
        "SELECT seq, id, user_id, agent_id, run_id, scope_key, session_id, speaker, text, timestamp, "
        "meta_json FROM records ORDER BY seq"
    ).fetchall()
    updates, renamed = [], {}
    taken = set()
    seen: dict[tuple[str, str], tuple[int, int | None, int | None]] = {}  # session -> (count, last k, last p)
    for seq, rid, u, a, r, old, sid, speaker, text, ts, meta_json in rows:
        sc = Scope(user_id=u or None, agent_id=a or None, run_id=r or None)
        key = sc.key()
        shared.setdefault(old, {})[key] = sc
        new_ts, meta_json = _v1_timestamp(ts, meta_json)
        k, last_k, last_p = seen.get((old, sid), (0, None, None))
        new_id = rid
        if _CONTENT_ID_RE.fullmatch(rid):
            guesses = [last_p + (k - last_k)] if last_p is not None else []
            p = _v1_position(old, sid, speaker, text, ts, rid, guesses, k)
            if p is not None:
                last_k, last_p = k, p
                new_id = record_id(sc, sid, p, speaker, text, new_ts)
        seen[(old, sid)] = (k + 1, last_k, last_p)
        if (key, new_id) in taken:  # two version-1 records now the same: keep the later one's id
            new_id = rid
        taken.add((key, new_id))
        if new_id != rid:
            renamed[rid] = new_id
        updates.append((new_id, key, sc.user_id, sc.agent_id, sc.run_id, sc.model_dump_json(), new_ts, meta_json, seq))
    c.executemany(
        "UPDATE records SET id = ?, scope_key = ?, user_id = ?, agent_id = ?, run_id = ?, scope_json = ?, "
        "timestamp = ?, meta_json = ? WHERE seq = ?",
        updates,
    )
    c.execute("DELETE FROM chunks")  # cascades to chunk_records and chunk_vectors
    sessions = dict.fromkeys(tuple(r) for r in c.execute("SELECT DISTINCT scope_key, session_id FROM records"))
    rechunk(c, sessions)
    c.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    return shared, renamed


def migrate_v1_files(path: Path, shared: dict[str, dict[str, Scope]], renamed: dict[str, str] | None = None) -> None:
    """After :func:`migrate_v1` committed: in the store directory ``path``, remove ``bm25/``, move
    each version-1 graph folder (``graph/<sha256(old key)[:16]>``) to its scope's
    :meth:`Scope.slug` (removed when two scopes shared the old key, or when records of the scope got
    new ids: it is rebuilt on the next build), and rewrite the ``source_ids`` of every bank item
    (``banks/*.db``) with ``renamed`` (old record id -> new)."""
    renamed = renamed or {}
    shutil.rmtree(path / "bm25", ignore_errors=True)
    graph = path / "graph"
    for old, scopes in shared.items():
        folder = graph / hashlib.sha256(old.encode("utf-8")).hexdigest()[:16]
        if not folder.is_dir():
            continue
        if len(scopes) == 1 and not renamed:
            os.replace(folder, graph / next(iter(scopes.values())).slug())
        else:
            shutil.rmtree(folder, ignore_errors=True)
    if renamed:
        for bank in sorted((path / "banks").glob("*.db")):
            _rename_sources(bank, renamed)


def _rename_sources(bank: Path, renamed: dict[str, str]) -> None:
    """Rewrite the ``source_ids`` of the items of the bank file ``bank`` (one transaction)."""
    conn = sqlite3.connect(str(bank), isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'items'").fetchone():
            rows = conn.execute("SELECT id, source_ids FROM items").fetchall()
            conn.executemany(
                "UPDATE items SET source_ids = ? WHERE id = ?",
                [
                    (json.dumps([renamed.get(i, i) for i in json.loads(src)]), iid)
                    for iid, src in rows
                    if any(i in renamed for i in json.loads(src))
                ],
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


__all__ = [
    "DB_NAME",
    "SCHEMA",
    "SCHEMA_VERSION",
    "create_tables",
    "migrate_v1",
    "migrate_v1_files",
    "records_unique_per_scope",
]

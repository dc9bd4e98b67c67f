"""The embedded store's SQLite schema (version 2) and the migration from version 1.

Tables of ``store.db``: ``meta`` (schema version, store generation, chunk budget, embedding model
id and dim), ``records``, ``chunks``, ``chunk_records``, ``chunk_vectors``, ``scope_gen`` (the
generation at which each scope last changed), ``pending_purges`` (delete intents whose
derived-view cleanup is not finished) and the view roots' purge log (``view_roots``,
``purges_applied``; :mod:`memfrontier.store.purge`).

Version 2 replaced version 1's scope key (ids joined with ``|``, which let two scopes share rows
and chunks). :func:`migrate_v1` rewrites a version-1 database in one transaction (keys recomputed
from each record's ids, ``""`` read as absent as version 1 did; record ids unique per scope; every
session re-chunked by the store, vectors reused for unchanged chunk texts);
:func:`migrate_v1_files` then renames the graph folders to the new per-scope names (a folder two
scopes shared is removed: it is rebuilt on the next build) and removes the obsolete ``bm25/``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..core.types import Scope
from .purge import LOG_TABLES

#: 2: injective scope keys, record ids unique per scope (UNIQUE(scope_key, id)), scope_gen,
#: pending_purges (view_roots and purges_applied are additive, created when missing: an older
#: reader ignores them safely).
SCHEMA_VERSION = 2
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
    as is; :func:`migrate_v1` recomputes the scope keys afterwards."""
    c.execute("ALTER TABLE records RENAME TO records_v1")
    for name in ("records_session", "records_user", "records_agent", "records_run", "records_id"):
        c.execute(f"DROP INDEX IF EXISTS {name}")
    for stmt in SCHEMA.split(";"):
        if "records" in stmt and "chunk_records" not in stmt:
            c.execute(stmt)
    cols = ("seq, id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, speaker, role, "
            "timestamp, text, images_json, step_index, action, observation, meta_json, n_tokens")
    c.execute(f"INSERT INTO records({cols}) SELECT {cols} FROM records_v1")
    c.execute("DROP TABLE records_v1")


#: ``rechunk(c, sessions, vectors_by_text)``: re-chunk every ``(scope key, session id)`` of
#: ``sessions`` in transaction ``c``, reusing the float32 vector of a chunk text found in
#: ``vectors_by_text`` (the store's write planning).
Rechunk = Callable[[object, dict, dict[str, np.ndarray]], None]


def migrate_v1(c, rechunk: Rechunk) -> dict[str, dict[str, Scope]]:
    """Rewrite a version-1 database to version 2 in transaction ``c``; returns, for each
    version-1 scope key, the version-2 scopes that had it (by key), for :func:`migrate_v1_files`."""
    records_unique_per_scope(c)
    shared: dict[str, dict[str, Scope]] = {}
    updates = []
    for seq, u, a, r, old in c.execute("SELECT seq, user_id, agent_id, run_id, scope_key FROM records").fetchall():
        sc = Scope(user_id=u or None, agent_id=a or None, run_id=r or None)
        shared.setdefault(old, {})[sc.key()] = sc
        updates.append((sc.key(), sc.user_id, sc.agent_id, sc.run_id, sc.model_dump_json(), seq))
    c.executemany("UPDATE records SET scope_key = ?, user_id = ?, agent_id = ?, run_id = ?, scope_json = ? "
                  "WHERE seq = ?", updates)
    by_text = {t: np.frombuffer(v, dtype="<f4") for t, v in
               c.execute("SELECT c.text, v.vector FROM chunks c JOIN chunk_vectors v ON v.chunk_id = c.id")}
    c.execute("DELETE FROM chunks")  # cascades to chunk_records and chunk_vectors
    sessions = dict.fromkeys(tuple(r) for r in c.execute("SELECT DISTINCT scope_key, session_id FROM records"))
    rechunk(c, sessions, by_text)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    return shared


def migrate_v1_files(path: Path, shared: dict[str, dict[str, Scope]]) -> None:
    """After :func:`migrate_v1` committed: in the store directory ``path``, remove ``bm25/`` and
    move each version-1 graph folder (``graph/<sha256(old key)[:16]>``) to its scope's
    :meth:`Scope.slug` (removed when two scopes shared the old key)."""
    shutil.rmtree(path / "bm25", ignore_errors=True)
    graph = path / "graph"
    for old, scopes in shared.items():
        folder = graph / hashlib.sha256(old.encode("utf-8")).hexdigest()[:16]
        if not folder.is_dir():
            continue
        if len(scopes) == 1:
            os.replace(folder, graph / next(iter(scopes.values())).slug())
        else:
            shutil.rmtree(folder, ignore_errors=True)


__all__ = ["DB_NAME", "SCHEMA", "SCHEMA_VERSION", "create_tables", "migrate_v1", "migrate_v1_files",
           "records_unique_per_scope"]

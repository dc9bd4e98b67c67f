"""A bank of derived memories (episodes, semantic facts, notes...) next to the raw store.

Raw records stay the store of record (:mod:`memfrontier.store.sqlite`); a *view* built from them
by a model (MemoryCPT's episodic and semantic memories, for instance) lives in a bank: one SQLite
file ``<store dir>/banks/<name>.db`` per view builder, so views built by different models never
mix. Every item keeps the ids of the records it came from (``source_ids``).

- Writes (:meth:`MemoryBank.apply`) run in one transaction: items upserted by id (ids are
  content-derived by the builders, so re-running a build adds nothing) and items deleted (a merge
  replaces its inputs) together, plus optional "unit done" marks that make construction resumable.
- Search per ``kind``: exact cosine over MiniLM vectors, BM25 (bm25s, the store's tokenizer), and
  their RRF fusion (k=60; MemoryCPT Eq. 10). Statistics are computed over the items of the scope
  and kind searched.
- Traces: every construction call's prompt, rationale and JSON output, for SFT export.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from ..core.types import Scope
from ..retrieve.rrf import rrf_fuse
from .base import StoreError
from .sqlite import RETRIEVERS, RRF_K, BM25Index

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    scope_key TEXT NOT NULL,
    scope_json TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT,
    source_ids TEXT NOT NULL,
    meta_json TEXT NOT NULL,
    vector BLOB NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_scope_kind ON items(scope_key, kind);
CREATE TABLE IF NOT EXISTS done (scope_key TEXT NOT NULL, unit TEXT NOT NULL, at REAL NOT NULL,
    usage_json TEXT NOT NULL, PRIMARY KEY (scope_key, unit));
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    scope_key TEXT NOT NULL,
    role TEXT NOT NULL,
    model_id TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    messages_json TEXT NOT NULL,
    rationale TEXT NOT NULL,
    output_json TEXT NOT NULL,
    accepted INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class BankItem(BaseModel):
    """One derived memory. ``kind``: "episode", "fact", ...; ``source_ids``: the raw record ids it
    came from; ``timestamp``: ISO-8601 time of what it describes."""

    id: str
    kind: str
    scope: Scope
    title: str = ""
    text: str
    timestamp: str | None = None
    source_ids: list[str] = Field(default_factory=list)
    meta: dict = Field(default_factory=dict)

    def render(self) -> str:
        """Text that is embedded, BM25-indexed and shown to a reader: ``title: text``."""
        return f"{self.title}: {self.text}" if self.title else self.text


class BankHit(BaseModel):
    item: BankItem
    score: float
    ranks: dict[str, int] = Field(default_factory=dict)


class Trace(BaseModel):
    """One construction call: its messages, the model's rationale and its JSON output."""

    role: str
    model_id: str
    prompt_version: str
    messages: list[dict]
    rationale: str = ""
    output: dict | list | None = None
    accepted: bool = True


def _scope_matches(item_scope: Scope, scope: Scope) -> bool:
    return all(v is None or getattr(item_scope, f) == v for f, v in
               (("user_id", scope.user_id), ("agent_id", scope.agent_id), ("run_id", scope.run_id)))


def purge_bank(path: str | Path, deleted: list[tuple[Scope, list[str]]], whole: Scope | None,
               reset_keys: set[str]) -> int:
    """Remove from the bank file ``path`` what deleted records left behind, in one transaction
    (``secure_delete`` on, WAL truncated after): every item built from a deleted record (an item
    of scope G is built from record ``i`` of scope R when G covers R and ``i`` is in its
    ``source_ids``), every item inside ``whole`` (the scope of a ``delete_all``, imported items
    included), and the done marks and traces of the scope keys ``reset_keys`` (traces hold the
    records' text; with the marks gone the next build redoes those scopes). Returns items removed.
    Works on the file alone (no embedder), so it runs before any bank is opened.
    """
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=30)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"items", "done", "traces"} <= tables:  # not a bank (or an empty file): nothing to purge
            return 0
        conn.execute("BEGIN IMMEDIATE")
        try:
            if whole is not None:  # items inside a deleted scope may be of any scope key
                rows = conn.execute("SELECT id, scope_json, source_ids FROM items").fetchall()
            else:  # an item built from a deleted record has the key of a scope covering it
                covering = sorted(reset_keys)
                rows = conn.execute(f"SELECT id, scope_json, source_ids FROM items WHERE scope_key IN "
                                    f"({','.join('?' * len(covering))})", covering).fetchall() if covering else []
            gone = []
            for iid, scope_json, sources in rows:
                g = Scope.model_validate_json(scope_json)
                src = set(json.loads(sources))
                if (whole is not None and _scope_matches(g, whole)) or any(
                        _scope_matches(r, g) and src.intersection(ids) for r, ids in deleted):
                    gone.append((iid,))
            conn.executemany("DELETE FROM items WHERE id = ?", gone)
            keys = [(k,) for k in sorted(reset_keys)]
            conn.executemany("DELETE FROM done WHERE scope_key = ?", keys)
            conn.executemany("DELETE FROM traces WHERE scope_key = ?", keys)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return len(gone)
    except sqlite3.Error as e:
        raise StoreError(f"cannot purge memory bank {path}: {e}") from e
    finally:
        conn.close()


class MemoryBank:
    """Derived memories of one view builder, stored in ``path`` (a SQLite file).

    Args:
        path: the bank file; its directory is created.
        embedder: the store's :class:`~memfrontier.embed.minilm.Embedder` (vectors are L2-normalised).

    Raises:
        StoreError: the file cannot be opened or is not a bank; the embedder differs from the one
            the bank was built with.
    """

    def __init__(self, path: str | Path, embedder):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self._lock = threading.RLock()
        self._cache: dict[tuple[str, str], tuple[int, list[BankItem], np.ndarray, BM25Index | None]] = {}
        self._generation = 0
        self._data_version: int | None = None
        try:
            self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA secure_delete = ON")
            with self._tx() as c:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                row = c.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
                ident = f"{embedder.model_id}|{embedder.dim}"
                if row is None:
                    c.execute("INSERT INTO meta VALUES ('embedder', ?)", (ident,))
                elif row[0] != ident:
                    raise StoreError(f"bank {self.path} was built with embedder {row[0]!r}, not {ident!r}")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open memory bank {self.path}: {e}") from e

    @classmethod
    def for_store(cls, store, name: str) -> "MemoryBank":
        """The bank ``name`` inside a directory-based store (``store.path / "banks" / name.db``)."""
        root = getattr(store, "path", None)
        if root is None:
            raise StoreError(f"{type(store).__name__} has no directory for memory banks")
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        return cls(Path(root) / "banks" / f"{safe}.db", store.embedder)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    # -- writes ---------------------------------------------------------------------------

    def apply(self, upsert: list[BankItem] = (), delete_ids: list[str] = (), *,
              done: list[tuple[Scope, str, dict]] = (), traces: list[tuple[Scope, Trace]] = ()) -> None:
        """Upsert items, delete items, mark units done and keep traces, all in one transaction.

        ``done``: ``(scope, unit, usage)`` marks; ``usage`` (e.g. a StageUsage dump: calls, tokens,
        USD) is what building the unit cost, so the cost of a view survives across runs.

        Vectors are computed before the transaction; an item whose id exists is replaced.
        Raises ValueError for an item with empty text.
        """
        upsert = list(upsert)
        for it in upsert:
            if not it.text.strip():
                raise ValueError(f"bank item {it.id!r} has empty text")
        vecs = np.asarray(self.embedder.encode([it.render() for it in upsert]), dtype=np.float32) if upsert else None
        now = time.time()
        with self._tx() as c:
            seq = c.execute("SELECT COALESCE(MAX(seq), 0) FROM items").fetchone()[0]
            for i in delete_ids:
                c.execute("DELETE FROM items WHERE id = ?", (i,))
            for n, it in enumerate(upsert):
                c.execute(
                    "INSERT OR REPLACE INTO items VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (it.id, it.kind, it.scope.key(), it.scope.model_dump_json(), it.title, it.text, it.timestamp,
                     json.dumps(it.source_ids), json.dumps(it.meta, ensure_ascii=False), vecs[n].tobytes(), seq + n + 1),
                )
            for scope, unit, usage in done:
                c.execute("INSERT OR REPLACE INTO done VALUES (?,?,?,?)", (scope.key(), unit, now, json.dumps(usage)))
            for scope, t in traces:
                c.execute(
                    "INSERT INTO traces (scope_key, role, model_id, prompt_version, messages_json, rationale, output_json, accepted) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    (scope.key(), t.role, t.model_id, t.prompt_version, json.dumps(t.messages, ensure_ascii=False),
                     t.rationale, json.dumps(t.output, ensure_ascii=False), int(t.accepted)),
                )
            self._generation += 1

    def is_done(self, scope: Scope, unit: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM done WHERE scope_key = ? AND unit = ?", (scope.key(), unit)).fetchone() is not None

    def done_usage(self, scope: Scope) -> list[dict]:
        """The usage recorded with each done unit of exactly ``scope``, in completion order."""
        with self._lock:
            rows = self._conn.execute("SELECT usage_json FROM done WHERE scope_key = ? ORDER BY at", (scope.key(),)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def delete_all(self, scope: Scope) -> int:
        """Remove every item, mark and trace of exactly ``scope``; returns the items removed."""
        with self._tx() as c:
            n = c.execute("DELETE FROM items WHERE scope_key = ?", (scope.key(),)).rowcount
            c.execute("DELETE FROM done WHERE scope_key = ?", (scope.key(),))
            c.execute("DELETE FROM traces WHERE scope_key = ?", (scope.key(),))
            self._generation += 1
        return n

    # -- reads ----------------------------------------------------------------------------

    def _load(self, scope: Scope, kind: str) -> tuple[list[BankItem], np.ndarray, BM25Index | None]:
        key = (scope.key(), kind)
        with self._lock:
            # another connection (a delete's purge, another process) changed the file: drop the cache
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._data_version = version
                self._generation += 1
            hit = self._cache.get(key)
            if hit is not None and hit[0] == self._generation:
                return hit[1], hit[2], hit[3]
            rows = self._conn.execute(
                "SELECT id, kind, scope_json, title, text, timestamp, source_ids, meta_json, vector FROM items "
                "WHERE kind = ? ORDER BY timestamp IS NOT NULL, timestamp, seq", (kind,)).fetchall()
            items, vecs = [], []
            for r in rows:
                it = BankItem(id=r[0], kind=r[1], scope=Scope.model_validate_json(r[2]), title=r[3], text=r[4],
                              timestamp=r[5], source_ids=json.loads(r[6]), meta=json.loads(r[7]))
                if _scope_matches(it.scope, scope):
                    items.append(it)
                    vecs.append(np.frombuffer(r[8], dtype=np.float32))
            matrix = np.vstack(vecs) if vecs else np.zeros((0, int(self.embedder.dim)), dtype=np.float32)
            bm25 = BM25Index.build([it.id for it in items], [it.render() for it in items], self._generation) if items else None
            self._cache[key] = (self._generation, items, matrix, bm25)
            return items, matrix, bm25

    def items(self, scope: Scope, kind: str) -> list[BankItem]:
        """Items of ``kind`` in ``scope`` (None fields match any), chronological."""
        return list(self._load(scope, kind)[0])

    def count(self, scope: Scope, kind: str) -> int:
        return len(self._load(scope, kind)[0])

    def similar(self, vector: np.ndarray, scope: Scope, kind: str, k: int, *, min_cosine: float = -1.0,
                exclude: set[str] | None = None) -> list[tuple[BankItem, float]]:
        """Top-``k`` items by cosine with ``vector`` (shape (dim,), L2-normalised), cosine >= ``min_cosine``."""
        items, matrix, _ = self._load(scope, kind)
        if not items or k <= 0:
            return []
        sims = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.lexsort((np.arange(len(items)), -sims))
        out = []
        for i in order:
            if sims[i] < min_cosine:
                break
            if exclude and items[i].id in exclude:
                continue
            out.append((items[i], float(sims[i])))
            if len(out) == k:
                break
        return out

    def search(self, query: str, scope: Scope, kind: str, k: int, *,
               retrievers: tuple[str, ...] = RETRIEVERS) -> list[BankHit]:
        """Top-``k`` items of ``kind`` for ``query``: one retriever's ranking, or RRF (k=60) over
        dense + BM25 rankings of every in-scope item (MemoryCPT Eq. 10). ``score`` is the cosine
        for dense alone, the BM25 score for bm25 alone, else the RRF score.

        Raises ValueError for an unknown retriever.
        """
        bad = [r for r in retrievers if r not in RETRIEVERS]
        if bad or not retrievers:
            raise ValueError(f"unknown retrievers {bad or retrievers!r}; choose from {RETRIEVERS}")
        items, matrix, bm25 = self._load(scope, kind)
        if not items or k <= 0 or not query.strip():
            return []
        by_id = {it.id: it for it in items}
        rankings: dict[str, list[str]] = {}
        raw: dict[str, dict[str, float]] = {}
        if "dense" in retrievers:
            qv = np.asarray(self.embedder.encode([query]), dtype=np.float32)[0]
            sims = matrix @ qv
            order = np.lexsort((np.arange(len(items)), -sims))
            rankings["dense"] = [items[i].id for i in order]
            raw["dense"] = {items[i].id: float(sims[i]) for i in order}
        if "bm25" in retrievers:
            scores = bm25.scores(query) if bm25 is not None else None
            if scores is None:
                rankings["bm25"] = []
            else:
                order = [i for i in np.lexsort((np.arange(len(items)), -scores)) if scores[i] > 0]
                rankings["bm25"] = [items[i].id for i in order]
                raw["bm25"] = {items[i].id: float(scores[i]) for i in order}
        fused = rrf_fuse(rankings, k=RRF_K, top_n=k)
        single = retrievers[0] if len(retrievers) == 1 else None
        return [BankHit(item=by_id[i], score=raw[single][i] if single else s, ranks=r) for i, s, r in fused]

    def traces(self, scope: Scope | None = None, role: str | None = None) -> list[Trace]:
        """Construction traces in call order, optionally for one scope key and/or role."""
        sql, params = "SELECT role, model_id, prompt_version, messages_json, rationale, output_json, accepted FROM traces", []
        cond = []
        if scope is not None:
            cond.append("scope_key = ?")
            params.append(scope.key())
        if role is not None:
            cond.append("role = ?")
            params.append(role)
        if cond:
            sql += " WHERE " + " AND ".join(cond)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY seq", params).fetchall()
        return [Trace(role=r[0], model_id=r[1], prompt_version=r[2], messages=json.loads(r[3]), rationale=r[4],
                      output=json.loads(r[5]), accepted=bool(r[6])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

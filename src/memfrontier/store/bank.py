"""A bank of derived memories (episodes, semantic facts, notes...) next to the raw store.

Raw records stay the store of record (:mod:`memfrontier.store.sqlite`); a *view* built from them
by a model (MemoryCPT's episodic and semantic memories, for instance) lives in a bank: one SQLite
file ``<store dir>/banks/<name>.db`` per view builder, so views built by different models never
mix. Every item keeps the ids of the records it came from (``source_ids``).

- Writes (:meth:`MemoryBank.apply`) run in one transaction: items upserted by id (ids are
  content-derived by the builders, so re-running a build adds nothing) and items deleted (a merge
  replaces its inputs) together, plus optional "unit done" marks that make construction resumable.
- Search primitives per ``kind`` (:meth:`MemoryBank.search_dense`, :meth:`MemoryBank.search_bm25`):
  exact cosine over the embedder's vectors and BM25 (:mod:`memfrontier.store.bm25`) with the
  statistics of the items of the scope and kind searched; fused by
  :func:`memfrontier.retrieve.hybrid.hybrid_search` (RRF k=60; MemoryCPT Eq. 10). The in-memory
  index of a (scope, kind) is rebuilt only after a write changed an item inside that scope.
- Traces: every construction call's prompt, rationale and JSON output, for SFT export.
- Deletes: :func:`purge_banks`, registered as the ``banks`` view purger
  (:mod:`memfrontier.store.purge`), removes what deleted records left in every bank file.

Rows are keyed by :meth:`~memfrontier.core.types.Scope.key` (injective). A bank written with the
old ``|``-joined keys is migrated when opened: item keys recomputed from each item's scope; done
marks and traces whose old key parses unambiguously (no ``|`` inside an id) are re-keyed, the
others dropped (those units are rebuilt).

Its length (over 500 lines) is one bank file's: schema, writes, both search primitives and the
purge of one SQLite file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from ..core.errors import StoreError
from ..core.files import private_dir, private_file
from ..core.purgers import Purge, register_view_purger
from ..core.types import Scope
from ..embed.query import encode_query
from .bm25 import BM25Index, TermCache
from .records import Presence, scope_key_where

SCOPE_KEY_VERSION = "2"  # meta 'scope_keys': rows keyed by Scope.key()
#: The (scope, kind) entries a bank keeps loaded (items, embeddings, BM25 index), least recently
#: read dropped first: a service reads many tenants' scopes through one bank.
CACHED_SCOPES = 256

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
    """A bank search result: the item, its score (see :func:`~memfrontier.retrieve.hybrid.hybrid_search`)
    and its 1-based rank per retriever."""

    item: BankItem
    score: float
    ranks: dict[str, int] = Field(default_factory=dict)
    #: ids of the near-duplicate items folded into this one, which is their latest
    #: (:mod:`memfrontier.retrieve.fold`); empty when none was folded or the search did not fold
    folded: list[str] = Field(default_factory=list)


class Trace(BaseModel):
    """One construction call: its messages, the model's rationale and its JSON output."""

    role: str
    model_id: str
    prompt_version: str
    messages: list[dict]
    rationale: str = ""
    output: dict | list | None = None
    accepted: bool = True


def purge_bank(
    path: str | Path, deleted: list[tuple[Scope, list[str]]], whole: Scope | None, reset_keys: set[str]
) -> int:
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
                rows = (
                    conn.execute(
                        f"SELECT id, scope_json, source_ids FROM items WHERE scope_key IN "
                        f"({','.join('?' * len(covering))})",
                        covering,
                    ).fetchall()
                    if covering
                    else []
                )
            gone = []
            for iid, scope_json, sources in rows:
                g = Scope.model_validate_json(scope_json)
                src = set(json.loads(sources))
                if (whole is not None and whole.matches(g)) or any(
                    g.matches(r) and src.intersection(ids) for r, ids in deleted
                ):
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


#: The view folder of the memory banks (``store.view_dir(BANK_VIEW) / <name>.db``).
BANK_VIEW = "banks"


def purge_banks(folder: Path, purge: Purge) -> int:
    """The banks' view purger: :func:`purge_bank` on every bank file (``*.db``) in ``folder``,
    resetting the scopes in ``purge.covering``; returns the items removed (0 without the folder)."""
    if not folder.is_dir():
        return 0
    deleted = [(scope, list(ids)) for scope, ids in purge.deleted]
    return sum(purge_bank(f, deleted, purge.whole, set(purge.covering)) for f in sorted(folder.glob("*.db")))


register_view_purger(BANK_VIEW, purge_banks)


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
        private_file(private_dir(self.path.parent) / self.path.name)  # 0700 folder, 0600 file
        self.embedder = embedder
        self._lock = threading.RLock()
        # (scope key, kind) -> (scope, items, matrix, BM25 index or None until a BM25 search)
        self._cache: OrderedDict[tuple[str, str], list] = OrderedDict()  # LRU, at most CACHED_SCOPES
        self._terms = TermCache()
        self._data_version: int | None = None  # PRAGMA data_version: another connection wrote
        try:
            self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA secure_delete = ON")
            self._file = Presence(self.path, "memory bank")
            self._file.remember()
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
                self._migrate_keys(c)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open memory bank {self.path}: {e}") from e

    @staticmethod
    def _migrate_keys(c: sqlite3.Connection) -> None:
        """Re-key rows written with the old ``|``-joined scope keys (see the module docstring)."""
        row = c.execute("SELECT value FROM meta WHERE key = 'scope_keys'").fetchone()
        if row is not None:
            return
        items = c.execute("SELECT id, scope_json FROM items").fetchall()
        fixed = []
        for iid, sj in items:
            sc = Scope(**{f: v or None for f, v in json.loads(sj).items()})
            fixed.append((sc.key(), sc.model_dump_json(), iid))
        c.executemany("UPDATE items SET scope_key = ?, scope_json = ? WHERE id = ?", fixed)
        for table in ("done", "traces"):
            for (old,) in c.execute(f"SELECT DISTINCT scope_key FROM {table}").fetchall():
                parts = old.split("|")
                if len(parts) == 3:
                    new = Scope(user_id=parts[0] or None, agent_id=parts[1] or None, run_id=parts[2] or None).key()
                    c.execute(f"UPDATE {table} SET scope_key = ? WHERE scope_key = ?", (new, old))
                else:
                    c.execute(f"DELETE FROM {table} WHERE scope_key = ?", (old,))
        c.execute("INSERT INTO meta VALUES ('scope_keys', ?)", (SCOPE_KEY_VERSION,))

    @classmethod
    def for_store(cls, store, name: str) -> "MemoryBank":
        """The bank ``name`` among ``store``'s views: ``store.view_dir(BANK_VIEW) / <name>.db``
        (characters outside ``[A-Za-z0-9._-]`` in ``name`` become ``_``)."""
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        return cls(store.view_dir(BANK_VIEW) / f"{safe}.db", store.embedder)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; StoreError when the bank file was removed or replaced since
        the open (its store directory deleted, say): the write would be lost with it."""
        with self._lock:
            self._file.check()
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    # -- writes ---------------------------------------------------------------------------

    def apply(
        self,
        upsert: list[BankItem] = (),
        delete_ids: list[str] = (),
        *,
        done: list[tuple[Scope, str, dict]] = (),
        traces: list[tuple[Scope, Trace]] = (),
        vectors: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Upsert items, delete items, mark units done and keep traces, all in one transaction.

        ``done``: ``(scope, unit, usage)`` marks; ``usage`` (e.g. a StageUsage dump: calls, tokens,
        USD) is what building the unit cost, so the cost of a view survives across runs.

        Vectors are computed before the transaction (the items' :meth:`BankItem.render`, one
        encode call); an item whose id exists is replaced. ``vectors`` (item id -> float32
        ``(dim,)``, unit length) gives the vectors of items already embedded with this bank's
        embedder, e.g. the store's record vectors for the turn view, whose item text is the
        record's rendered text: those items are not encoded again.

        Raises:
            ValueError: an item has empty text, or a given vector is not of shape ``(dim,)``.
        """
        upsert = list(upsert)
        given = vectors or {}
        dim = int(self.embedder.dim)
        for it in upsert:
            if not it.text.strip():
                raise ValueError(f"bank item {it.id!r} has empty text")
            if it.id in given and np.shape(given[it.id]) != (dim,):
                raise ValueError(
                    f"bank item {it.id!r}: given vector of shape {np.shape(given[it.id])}, expected ({dim},)"
                )
        by_id = {it.id: np.asarray(given[it.id], dtype=np.float32) for it in upsert if it.id in given}
        todo = [it for it in upsert if it.id not in given]
        if todo:
            by_id.update(zip([it.id for it in todo], np.asarray(self.embedder.encode([it.render() for it in todo]))))
        vecs = [by_id[it.id] for it in upsert]
        now = time.time()
        with self._tx() as c:
            seq = c.execute("SELECT COALESCE(MAX(seq), 0) FROM items").fetchone()[0]
            touched = [(it.scope, it.kind) for it in upsert]
            for i in delete_ids:
                row = c.execute("SELECT scope_json, kind FROM items WHERE id = ?", (i,)).fetchone()
                if row is not None:
                    touched.append((Scope.model_validate_json(row[0]), row[1]))
                c.execute("DELETE FROM items WHERE id = ?", (i,))
            for n, it in enumerate(upsert):
                c.execute(
                    "INSERT OR REPLACE INTO items VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        it.id,
                        it.kind,
                        it.scope.key(),
                        it.scope.model_dump_json(),
                        it.title,
                        it.text,
                        it.timestamp,
                        json.dumps(it.source_ids),
                        json.dumps(it.meta, ensure_ascii=False),
                        np.ascontiguousarray(vecs[n], dtype=np.float32).tobytes(),
                        seq + n + 1,
                    ),
                )
            for scope, unit, usage in done:
                c.execute("INSERT OR REPLACE INTO done VALUES (?,?,?,?)", (scope.key(), unit, now, json.dumps(usage)))
            for scope, t in traces:
                c.execute(
                    "INSERT INTO traces (scope_key, role, model_id, prompt_version, messages_json, rationale, output_json, accepted) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    (
                        scope.key(),
                        t.role,
                        t.model_id,
                        t.prompt_version,
                        json.dumps(t.messages, ensure_ascii=False),
                        t.rationale,
                        json.dumps(t.output, ensure_ascii=False),
                        int(t.accepted),
                    ),
                )
            self._invalidate(touched)

    def _invalidate(self, touched: list[tuple[Scope, str]]) -> None:
        """Drop the cached (scope, kind) indexes that contain one of the ``touched`` item scopes."""
        for key in [
            k for k, v in self._cache.items() if any(kind == k[1] and v[0].matches(sc) for sc, kind in touched)
        ]:
            del self._cache[key]

    def is_done(self, scope: Scope, unit: str) -> bool:
        with self._lock:
            return (
                self._conn.execute(
                    "SELECT 1 FROM done WHERE scope_key = ? AND unit = ?", (scope.key(), unit)
                ).fetchone()
                is not None
            )

    def done_usage(self, scope: Scope) -> list[dict]:
        """The usage recorded with each done unit of exactly ``scope``, in completion order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT usage_json FROM done WHERE scope_key = ? ORDER BY at", (scope.key(),)
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def delete_all(self, scope: Scope) -> int:
        """Remove every item, mark and trace of exactly ``scope``; returns the items removed."""
        with self._tx() as c:
            n = c.execute("DELETE FROM items WHERE scope_key = ?", (scope.key(),)).rowcount
            c.execute("DELETE FROM done WHERE scope_key = ?", (scope.key(),))
            c.execute("DELETE FROM traces WHERE scope_key = ?", (scope.key(),))
            for key in [k for k, v in self._cache.items() if v[0].matches(scope) or scope.matches(v[0])]:
                del self._cache[key]
        return n

    # -- reads ----------------------------------------------------------------------------

    def _load(self, scope: Scope, kind: str) -> list:
        """``[scope, items, matrix, bm25 or None]`` for the items of ``kind`` in ``scope`` (cached)."""
        key = (scope.key(), kind)
        with self._lock:
            # another connection (a delete's purge, another process) changed the file: drop the cache
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._data_version = version
                self._cache.clear()
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            where, params = scope_key_where(scope)  # the scope's rows only; matches() below checks each
            rows = self._conn.execute(
                "SELECT id, kind, scope_json, title, text, timestamp, source_ids, meta_json, vector FROM items "
                f"WHERE kind = ? AND {where} ORDER BY timestamp IS NOT NULL, timestamp, seq",
                (kind, *params),
            ).fetchall()
            items, vecs = [], []
            for r in rows:
                it = BankItem(
                    id=r[0],
                    kind=r[1],
                    scope=Scope.model_validate_json(r[2]),
                    title=r[3],
                    text=r[4],
                    timestamp=r[5],
                    source_ids=json.loads(r[6]),
                    meta=json.loads(r[7]),
                )
                if scope.matches(it.scope):
                    items.append(it)
                    vecs.append(np.frombuffer(r[8], dtype=np.float32))
            matrix = np.vstack(vecs) if vecs else np.zeros((0, int(self.embedder.dim)), dtype=np.float32)
            self._cache[key] = entry = [scope, items, matrix, None]
            while len(self._cache) > CACHED_SCOPES:  # a service's many tenants: the least recent goes
                self._cache.popitem(last=False)
            return entry

    def items(self, scope: Scope, kind: str) -> list[BankItem]:
        """Items of ``kind`` in ``scope`` (None fields match any), chronological."""
        return list(self._load(scope, kind)[1])

    def vectors(self, scope: Scope, kind: str) -> tuple[list[BankItem], np.ndarray]:
        """The items of ``kind`` in ``scope`` (chronological, as :meth:`items`) and their embeddings,
        float32 ``(len(items), dim)``, row ``i`` for item ``i`` (unit length: cosine = dot product).
        The matrix is the bank's cached one: do not modify it."""
        _, items, matrix, _ = self._load(scope, kind)
        return list(items), matrix

    def count(self, scope: Scope, kind: str) -> int:
        return len(self._load(scope, kind)[1])

    def similar(
        self,
        vector: np.ndarray,
        scope: Scope,
        kind: str,
        k: int,
        *,
        min_cosine: float = -1.0,
        exclude: set[str] | None = None,
    ) -> list[tuple[BankItem, float]]:
        """Top-``k`` items by cosine with ``vector`` (shape (dim,), L2-normalised), cosine >= ``min_cosine``."""
        _, items, matrix, _ = self._load(scope, kind)
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

    def encode_query(self, query: str) -> np.ndarray:
        """The query's embedding, float32 ``(dim,)``. Cached per embedder (:func:`~memfrontier.embed.query.encode_query`)."""
        return encode_query(self.embedder, query)

    @staticmethod
    def _ranked(
        items: list[BankItem], scores: np.ndarray, k: int | None, positive_only: bool
    ) -> list[tuple[BankItem, float]]:
        order = np.lexsort((np.arange(len(items)), -scores))  # score desc, earlier item first
        if positive_only:
            order = [i for i in order if scores[i] > 0]
        if k is not None:
            order = order[: max(k, 0)]
        return [(items[i], float(scores[i])) for i in order]

    def search_dense(
        self, query: str, scope: Scope, k: int | None = None, *, kind: str, query_vector: np.ndarray | None = None
    ) -> list[tuple[BankItem, float]]:
        """Items of ``kind`` in ``scope`` by cosine with the query, best first (``k=None``: all).
        Returns ``(item, cosine)``; an empty query without ``query_vector`` gives []."""
        if query_vector is None:
            if not query.strip():
                return []
            query_vector = self.encode_query(query)
        _, items, matrix, _ = self._load(scope, kind)
        if not items:
            return []
        return self._ranked(items, matrix @ np.asarray(query_vector, dtype=np.float32), k, positive_only=False)

    def search_bm25(self, query: str, scope: Scope, k: int | None = None, *, kind: str) -> list[tuple[BankItem, float]]:
        """Items of ``kind`` in ``scope`` with a BM25 score > 0, best first (``k=None``: all). N, df and
        average length are those of the items of ``kind`` in ``scope``."""
        if not query.strip():
            return []
        with self._lock:
            entry = self._load(scope, kind)
            items = entry[1]
            if not items:
                return []
            if entry[3] is None:
                ids = [it.id for it in items]
                entry[3] = BM25Index.build(ids, self._terms.get(ids, [it.render() for it in items]))
            found = entry[3].match(query)
        if found is None:
            return []
        pos = {it.id: i for i, it in enumerate(items)}
        scores = np.zeros(len(items), dtype=np.float64)
        scores[[pos[i] for i in found[0]]] = found[1]
        return self._ranked(items, scores, k, positive_only=True)

    def traces(self, scope: Scope | None = None, role: str | None = None) -> list[Trace]:
        """Construction traces in call order, optionally for one scope key and/or role."""
        sql, params = (
            "SELECT role, model_id, prompt_version, messages_json, rationale, output_json, accepted FROM traces",
            [],
        )
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
        return [
            Trace(
                role=r[0],
                model_id=r[1],
                prompt_version=r[2],
                messages=json.loads(r[3]),
                rationale=r[4],
                output=json.loads(r[5]),
                accepted=bool(r[6]),
            )
            for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

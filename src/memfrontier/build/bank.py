"""MemPilot's compressed memory bank M: query-agnostic items with their own dense index.

The bank lives in one SQLite file, by default inside the store's directory
(``<store>/mempilot_bank/bank.db``): one row per item with its scope, text, source record ids,
image ids, session time, source (``compress:<compressor name>`` or ``import:<file name>``) and its
L2-normalised embedding. Search is exact cosine over the in-scope items (numpy), independent of
the raw view's index in the store (MemPilot App. A.4: separate dense indexes for the two views).

Items come from :meth:`CompressedBank.build_from_store` (one item per raw chunk, compressed with a
:class:`~memfrontier.build.compress.Compressor`; idempotent, rebuilt only for changed chunks) or
from :meth:`CompressedBank.import_jsonl` (another memory system's output, MemPilot Sec. 4.6
"memory-bank compatibility"). The two kinds are kept apart; a search reads one of them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from ..core.types import Scope
from .compress import Compressor, compressed_views

BANK_DIR = "mempilot_bank"
KINDS = {"compressed": "compress", "imported": "import"}  # item kind -> source prefix
DB_NAME = "bank.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY, scope_key TEXT NOT NULL, user_id TEXT, agent_id TEXT, run_id TEXT,
    scope_json TEXT NOT NULL, chunk_id TEXT, source TEXT NOT NULL, timestamp TEXT, text TEXT NOT NULL,
    record_ids TEXT NOT NULL, image_ids TEXT NOT NULL, vector BLOB NOT NULL, seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_scope ON items(scope_key);
"""


class BankItem(BaseModel):
    """One memory of the compressed bank (text only; ``image_ids`` are the ids it mentions)."""

    id: str
    scope: Scope
    text: str
    record_ids: list[str] = Field(default_factory=list)
    image_ids: list[str] = Field(default_factory=list)
    timestamp: str | None = None
    source: str
    chunk_id: str | None = None


class BankError(RuntimeError):
    """The bank file cannot be used (another embedding model, unreadable file)."""


def _scope_sql(scope: Scope) -> tuple[str, list]:
    conds, params = [], []
    for col in ("user_id", "agent_id", "run_id"):
        v = getattr(scope, col)
        if v is not None:
            conds.append(f"{col} = ?")
            params.append(v)
    return (" AND ".join(conds) if conds else "1"), params


class CompressedBank:
    """The bank of one store (see the module docstring).

    Args:
        directory: where ``bank.db`` lives (created if missing).
        embedder: ``encode(list[str]) -> (n, dim)`` normalised float32, with ``model_id`` and ``dim``;
            recorded in the file; reopening with another model raises :class:`BankError`.
    """

    def __init__(self, directory: str | Path, embedder):
        self.path = Path(directory)
        self.path.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self._lock = threading.RLock()
        self._cache: dict[str, tuple[int, list[BankItem], np.ndarray]] = {}
        try:
            self._conn = sqlite3.connect(str(self.path / DB_NAME), isolation_level=None, check_same_thread=False,
                                         timeout=30)
            self._conn.execute("PRAGMA journal_mode = WAL")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self._conn.execute(stmt)
        except sqlite3.Error as e:
            raise BankError(f"cannot open bank {self.path / DB_NAME}: {e}") from e
        meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        want = {"embedding_model_id": str(embedder.model_id), "embedding_dim": str(int(embedder.dim))}
        if "embedding_model_id" not in meta:
            self._conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                   [*want.items(), ("generation", "0")])
        elif any(meta.get(k) != v for k, v in want.items()):
            raise BankError(f"bank {self.path} was built with embedding model {meta.get('embedding_model_id')!r} "
                            f"(dim {meta.get('embedding_dim')}), not {want['embedding_model_id']!r}; delete it to rebuild")

    @classmethod
    def for_store(cls, store) -> "CompressedBank":
        """The bank inside ``store``'s directory (``<store.path>/mempilot_bank``). Raises ValueError for
        a store without a directory (pass an explicit bank directory instead)."""
        root = getattr(store, "path", None)
        if root is None:
            raise ValueError("this store has no directory; give the MemPilot bank a directory of its own")
        return cls(Path(root) / BANK_DIR, store.embedder)

    # -- writing ---------------------------------------------------------------------------
    def _generation(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def _write(self, scope_key_deletes: list[tuple[str, list]], rows: list[tuple]) -> None:
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                for where, params in scope_key_deletes:
                    c.execute(f"DELETE FROM items WHERE {where}", params)
                c.executemany("INSERT OR REPLACE INTO items(id, scope_key, user_id, agent_id, run_id, scope_json, chunk_id, "
                              "source, timestamp, text, record_ids, image_ids, vector, seq) VALUES "
                              "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
                c.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            self._cache.clear()

    def _rows(self, items: list[BankItem], start_seq: int) -> list[tuple]:
        vecs = np.asarray(self.embedder.encode([it.text for it in items]), dtype=np.float32) if items else []
        return [(it.id, it.scope.key(), it.scope.user_id, it.scope.agent_id, it.scope.run_id, it.scope.model_dump_json(),
                 it.chunk_id, it.source, it.timestamp, it.text, json.dumps(it.record_ids), json.dumps(it.image_ids),
                 np.asarray(v, dtype="<f4").tobytes(), start_seq + i) for i, (it, v) in enumerate(zip(items, vecs))]

    def build_from_store(self, store, scope: Scope, compressor: Compressor) -> dict[str, int]:
        """Compress every raw chunk of ``scope`` into one item (MemPilot App. A.4). Items of chunks that
        no longer exist are removed; existing items (same chunk, same compressor) are kept.
        Returns ``{"added", "removed", "kept"}``."""
        chunks = store.chunks(scope)
        source = f"compress:{compressor.name}"
        want = {("b-" + hashlib.sha256(f"{ch.id}\x1f{source}".encode()).hexdigest()[:24]): ch for ch in chunks}
        where, params = _scope_sql(scope)
        with self._lock:
            have = {r[0] for r in self._conn.execute(f"SELECT id FROM items WHERE {where} AND source LIKE 'compress:%'", params)}
        stale = sorted(have - set(want))
        todo = [(i, ch) for i, ch in want.items() if i not in have]
        items: list[BankItem] = []
        if todo:
            recs = {r.id: r for r in store.get([rid for _, ch in todo for rid in ch.record_ids])}
            groups = [[recs[rid] for rid in ch.record_ids if rid in recs] for _, ch in todo]
            texts = compressed_views(groups, compressor)
            for (iid, ch), recs_of, text in zip(todo, groups, texts):
                if ch.timestamp:  # the session date is metadata, kept verbatim like image ids
                    text = f"date: {ch.timestamp[:10]}\n{text}"
                items.append(BankItem(id=iid, scope=ch.scope, text=text, record_ids=list(ch.record_ids),
                                      image_ids=[im.id for r in recs_of for im in r.images], timestamp=ch.timestamp,
                                      source=source, chunk_id=ch.id))
        if not items and not stale:
            return {"added": 0, "removed": 0, "kept": len(have)}
        seq = self._next_seq()
        deletes = [(f"id IN ({','.join('?' * len(stale))})", stale)] if stale else []
        self._write(deletes, self._rows(items, seq))
        return {"added": len(items), "removed": len(stale), "kept": len(have) - len(stale)}

    def _next_seq(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM items").fetchone()[0])

    def import_jsonl(self, path: str | Path, scope: Scope | None = None, *, only_scope: bool = False) -> int:
        """Replace the imported items of each scope found in ``path`` with the file's; returns how many.
        Imported items are searched with ``kind="imported"``; the compressed items stay as they are.

        Each line is a JSON object with a non-empty string ``text`` and optionally ``id``,
        ``user_id`` / ``agent_id`` / ``run_id`` (else ``scope``'s), ``record_ids``, ``image_ids``,
        ``timestamp``. With ``only_scope``, lines of other scopes are skipped (lines without ids
        belong to ``scope``). The whole file is checked first: a bad line raises ValueError naming
        ``file:line`` and nothing is written. FileNotFoundError when the file is missing.
        """
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"no bank file {p}")
        base = scope or Scope()
        items: list[BankItem] = []
        for n, line in enumerate(p.read_text("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{n}: not JSON ({e})") from e
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not obj["text"].strip():
                raise ValueError(f"{p}:{n}: each line must be a JSON object with a non-empty string 'text'")
            sc = Scope(**{k: (str(obj[k]) if obj.get(k) is not None else getattr(base, k))
                          for k in ("user_id", "agent_id", "run_id")})
            if sc == Scope():
                raise ValueError(f"{p}:{n}: no scope: give user_id/agent_id/run_id in the line or a default scope")
            if only_scope and sc != base:
                continue
            for k in ("record_ids", "image_ids"):
                if k in obj and not (isinstance(obj[k], list) and all(isinstance(x, str) for x in obj[k])):
                    raise ValueError(f"{p}:{n}: {k} must be a list of strings")
            iid = str(obj.get("id") or "i-" + hashlib.sha256(f"{sc.key()}\x1f{n}\x1f{obj['text']}".encode()).hexdigest()[:24])
            items.append(BankItem(id=iid, scope=sc, text=obj["text"].strip(), record_ids=obj.get("record_ids", []),
                                  image_ids=obj.get("image_ids", []), timestamp=obj.get("timestamp"),
                                  source=f"import:{p.name}"))
        scopes = {it.scope.key(): it.scope for it in items}
        deletes = [(f"{w} AND source LIKE 'import:%'", prm) for w, prm in map(_scope_sql, scopes.values())]
        self._write(deletes, self._rows(items, self._next_seq()))
        return len(items)

    # -- reading ---------------------------------------------------------------------------
    def _load(self, scope: Scope, kind: str) -> tuple[list[BankItem], np.ndarray]:
        if kind not in KINDS:
            raise ValueError(f"unknown bank kind {kind!r}; choose {' or '.join(KINDS)}")
        key = f"{kind}|{scope.key()}"
        with self._lock:
            gen = self._generation()
            hit = self._cache.get(key)
            if hit is not None and hit[0] == gen:
                return hit[1], hit[2]
            where, params = _scope_sql(scope)
            rows = self._conn.execute(
                f"SELECT id, scope_json, text, record_ids, image_ids, timestamp, source, chunk_id, vector FROM items "
                f"WHERE {where} AND source LIKE ? ORDER BY seq", [*params, KINDS[kind] + ":%"]).fetchall()
            items = [BankItem(id=i, scope=Scope(**json.loads(sj)), text=t, record_ids=json.loads(ri),
                              image_ids=json.loads(ii), timestamp=ts, source=src, chunk_id=cid)
                     for i, sj, t, ri, ii, ts, src, cid, _ in rows]
            mat = (np.stack([np.frombuffer(r[-1], dtype="<f4") for r in rows]) if rows
                   else np.zeros((0, int(self.embedder.dim)), dtype=np.float32))
            self._cache[key] = (gen, items, mat)
            return items, mat

    def items(self, scope: Scope, kind: str = "compressed") -> list[BankItem]:
        """Items of ``scope`` of one ``kind`` (``compressed`` | ``imported``) in insertion order."""
        return list(self._load(scope, kind)[0])

    def count(self, scope: Scope, kind: str = "compressed") -> int:
        return len(self._load(scope, kind)[0])

    def search(self, query: str, scope: Scope, k: int, kind: str = "compressed") -> list[tuple[BankItem, float]]:
        """Top-``k`` items of ``scope`` and ``kind`` by cosine similarity to ``query`` (ties: earlier
        item first). An empty query, ``k <= 0`` or an empty bank gives []."""
        if k <= 0 or not query.strip():
            return []
        items, mat = self._load(scope, kind)
        if not items:
            return []
        q = np.asarray(self.embedder.encode([query]), dtype=np.float32)[0]
        sims = mat @ q
        order = np.lexsort((np.arange(len(sims)), -sims))[:k]
        return [(items[i], float(sims[i])) for i in order]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


__all__ = ["BANK_DIR", "BankError", "BankItem", "CompressedBank"]

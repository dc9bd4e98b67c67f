"""The embedded store: one directory holding SQLite (the store of record) and index files.

Layout of ``path/``::

    store.db        SQLite in WAL mode: meta, records, chunks, chunk_records, chunk_vectors,
                    pending_purges (delete intents whose derived-view cleanup is not finished)
    store.db-wal    (SQLite's write-ahead log, while open)
    bm25/g<N>/      the bm25s index of every chunk at store generation N (+ ids.json, tokenizer vocab)

Records are the truth; chunks, vectors and the BM25 index are derived from them. Record ids are
unique per scope (``UNIQUE(scope_key, id)``): the same id in two scopes is two records. Every write
(``add``, ``delete``, ``delete_all``, re-embedding) runs in one ``BEGIN IMMEDIATE`` transaction
that also bumps the ``generation`` counter in ``meta``; readers compare generations to know
when their in-memory matrix / BM25 index is stale. A delete also writes a purge intent in its
transaction; the views derived outside this database (banks, graph folders, BM25 files) are
purged right after the commit, or on the next open after a crash (:meth:`SQLiteStore.complete_purges`).
``secure_delete`` is on and the WAL is truncated after a purge, so deleted text does not linger
in free pages or the log. Two processes (or two store objects) writing
the same directory serialise on SQLite's write lock (``busy_timeout`` 30 s by default); threads
sharing one store object serialise on a ``threading.RLock``.

Embedding is done *optimistically outside* the write lock: a write first plans the new chunks
from a read of the current state and embeds the chunk ids that have no vector, then takes the
write lock, re-plans from the now-current state and embeds only what the first pass missed (a
concurrent writer changed the same session). Chunk ids hash (scope, session, record ids, text),
so an unchanged chunk keeps its id and its vector is reused.

Retrieval:
- dense: exact cosine (dot product of L2-normalised float32 vectors) over a numpy matrix of all
  chunk vectors, filtered by scope;
- bm25: ``bm25s`` Okapi BM25 with k1=1.5, b=0.75 and Lucene's non-negative IDF
  (``method="lucene"``: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), Okapi's tf saturation), so
  terms in more than half the chunks of a small store still score >= 0. Tokenised with bm25s's
  ``Tokenizer`` (lower-case, English stopwords "en") and our own splitter, see
  :func:`bm25_split`: NFKC, accent folding to ASCII where that is lossless for the script, CJK
  runs as character unigrams + bigrams (bm25s's default ``\\w\\w+`` pattern makes a whole
  unspaced CJK sentence one token and drops single characters), emoji as tokens, Porter stems
  for ASCII words. Statistics (IDF, average length) are global over the store; scope filtering
  is applied to the scores.
- hybrid: each retriever's top ``max(4k, 50)`` in-scope candidates fused by RRF, k=60
  (Cormack et al. 2009; MemoryCPT uses k=60).

Errors: :class:`StoreError` when the database cannot be opened or written (corrupt file,
locked beyond the timeout), :class:`EmbeddingMismatchError` when the store was built with another
embedding model id or dimension, ``ValueError`` for invalid input (empty record, all-``None``
scope in ``delete_all``, unknown retriever).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sqlite3
import threading
import unicodedata
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core.types import Chunk, Hit, ImageRef, Record, Scope
from ..retrieve.rrf import rrf_fuse
from .base import AddResult, EmbeddingMismatchError, RecordConflictError, StoreError
from .chunking import chunk_records

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: record ids unique per scope (UNIQUE(scope_key, id)), pending_purges
DB_NAME = "store.db"
BM25_DIR = "bm25"
BM25_K1 = 1.5
BM25_B = 0.75
BM25_METHOD = "lucene"
BM25_TOKENIZER_VERSION = "mf-bm25-1"  # bump when bm25_split / stemming / stopwords change
RRF_K = 60
RETRIEVERS = ("dense", "bm25")
_SQL_BATCH = 500  # ids per IN (...) clause

# ---------------------------------------------------------------------------------------------
# BM25 tokenisation
# ---------------------------------------------------------------------------------------------

# Han (incl. extensions and compatibility), kana, bopomofo, CJK radicals, iteration marks.
_CJK = (
    "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3040-\u30ff\u3100-\u312f\u31a0-\u31bf\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
)
# Pictographs, dingbats, misc symbols, arrows-ish blocks used as emoji.
_EMOJI = "\U0001f000-\U0001faff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\u3030\u303d\u3297\u3299"
_EMOJI_MODIFIERS = frozenset(chr(c) for c in range(0x1F3FB, 0x1F400))  # skin tones
_SPLIT_RE = re.compile(f"([{_CJK}]+)|([{_EMOJI}])|([^\\W{_CJK}]+)")


@lru_cache(maxsize=200_000)
def _fold(word: str) -> str:
    """Strip accents when the result is plain ASCII (café -> cafe, việt -> viet); else keep."""
    if word.isascii():
        return word
    stripped = "".join(ch for ch in unicodedata.normalize("NFKD", word) if not unicodedata.combining(ch))
    stripped = unicodedata.normalize("NFC", stripped)
    return stripped if stripped.isascii() else word


def bm25_split(text: str) -> list[str]:
    """Split (already lower-cased) text into BM25 terms.

    - NFKC normalisation and ``casefold`` (full-width forms, ligatures, ß -> ss);
    - words (letters/digits, any script but CJK) of >= 2 characters, or all-digit words of any
      length; accents folded when the folded word is ASCII;
    - CJK runs (no spaces between words) -> every character and every adjacent pair;
    - each emoji code point (skin-tone modifiers dropped) -> its own term.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[str] = []
    for cjk, emoji, word in _SPLIT_RE.findall(text):
        if word:
            if len(word) >= 2 or word.isdigit():
                out.append(_fold(word))
        elif cjk:
            out.extend(cjk)
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        elif emoji and emoji not in _EMOJI_MODIFIERS:
            out.append(emoji)
    return out


_PORTER = None


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    """Porter stem (nltk) for ASCII alphabetic words; other terms unchanged."""
    global _PORTER
    if not (word.isascii() and word.isalpha()):
        return word
    if _PORTER is None:
        from nltk.stem.porter import PorterStemmer

        _PORTER = PorterStemmer()
    return _PORTER.stem(word)


def _new_bm25_tokenizer():
    from bm25s.tokenization import Tokenizer

    return Tokenizer(lower=True, splitter=bm25_split, stopwords="en", stemmer=_stem)


class BM25Index:
    """A bm25s index over chunk texts, positionally aligned with ``ids``.

    ``scores(query)`` -> float32 array (len(ids),) of BM25 scores (>= 0), or ``None`` when the
    query has no indexed term (empty, only stopwords, or only unseen words).
    """

    def __init__(self, ids: list[str], model, tokenizer, generation: int):
        self.ids = ids
        self.model = model
        self.tokenizer = tokenizer
        self.generation = generation
        self._lock = threading.Lock()  # bm25s' Tokenizer caches words while tokenising queries

    @classmethod
    def build(cls, ids: list[str], texts: list[str], generation: int) -> "BM25Index":
        import bm25s

        tok = _new_bm25_tokenizer()
        if texts:
            corpus = tok.tokenize(list(texts), update_vocab=True, return_as="tuple", show_progress=False)
            model = bm25s.BM25(k1=BM25_K1, b=BM25_B, method=BM25_METHOD)
            model.index(corpus, show_progress=False)
        else:
            model = None
        return cls(list(ids), model, tok, generation)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self.model is not None:
            self.model.save(str(directory), show_progress=False)
            self.tokenizer.save_vocab(str(directory))
        (directory / "ids.json").write_text(
            json.dumps({"version": BM25_TOKENIZER_VERSION, "generation": self.generation, "ids": self.ids})
        )

    @classmethod
    def load(cls, directory: Path, expect_ids: list[str], generation: int) -> "BM25Index | None":
        """Load from ``directory``; ``None`` if missing, of another tokenizer version, or not for ``expect_ids``."""
        import bm25s

        try:
            meta = json.loads((directory / "ids.json").read_text())
            if meta.get("version") != BM25_TOKENIZER_VERSION or meta.get("ids") != expect_ids:
                return None
            tok = _new_bm25_tokenizer()
            model = None
            if expect_ids:
                model = bm25s.BM25.load(str(directory), show_progress=False)
                tok.load_vocab(str(directory))
            return cls(list(expect_ids), model, tok, generation)
        except (OSError, ValueError, KeyError):
            return None

    def scores(self, query: str) -> np.ndarray | None:
        if self.model is None or not query.strip():
            return None
        with self._lock:
            q_ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False, allow_empty=False)[0]
        if not q_ids:
            return None
        return np.asarray(self.model.get_scores_from_ids(q_ids), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# SQL
# ---------------------------------------------------------------------------------------------

_SCHEMA = """
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
"""

_RECORD_COLS = (
    "seq, id, kind, scope_json, session_id, speaker, role, timestamp, text, images_json, "
    "step_index, action, observation, meta_json, n_tokens"
)
_ORDER_RECORDS = "ORDER BY timestamp IS NOT NULL, timestamp, seq"
_ORDER_CHUNKS = "ORDER BY timestamp IS NOT NULL, timestamp, first_seq, id"


def _row_to_record(row) -> Record:
    (_seq, rid, kind, scope_json, session_id, speaker, role, ts, text, images_json, step_index, action, observation, meta_json, _n) = row
    return Record(
        id=rid,
        kind=kind,
        scope=Scope(**json.loads(scope_json)),
        session_id=session_id,
        speaker=speaker,
        role=role,
        timestamp=ts,
        text=text,
        images=[ImageRef(**im) for im in json.loads(images_json)],
        step_index=step_index,
        action=action,
        observation=observation,
        meta=json.loads(meta_json),
    )


def _scope_where(scope: Scope, prefix: str = "") -> tuple[str, list]:
    """SQL condition for a search scope (``None`` fields match anything); ``prefix`` e.g. ``"c."``."""
    conds, params = [], []
    for col in ("user_id", "agent_id", "run_id"):
        v = getattr(scope, col)
        if v is not None:
            conds.append(f"{prefix}{col} = ?")
            params.append(v)
    return (" AND ".join(conds) if conds else "1"), params


def _batched(seq: list, n: int = _SQL_BATCH) -> Iterator[list]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _order_key(seq: int, ts: str | None) -> tuple:
    """Python twin of ``ORDER BY timestamp IS NOT NULL, timestamp, seq`` (BINARY collation)."""
    return (ts is not None, ts or "", seq)


def _is_empty(r: Record) -> bool:
    return not r.text.strip() and not r.images and not (r.action or r.observation)


# ---------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    """Everything search needs, read in one SQLite read transaction at ``generation``."""

    generation: int
    ids: list[str]
    chunks: list[Chunk]
    by_id: dict[str, Chunk]
    user_ids: np.ndarray
    agent_ids: np.ndarray
    run_ids: np.ndarray
    vectors: np.ndarray  # float32 (n_chunks, dim)


@dataclass
class _SessionPlan:
    chunks: list[Chunk]
    first_seq: dict[str, int] = field(default_factory=dict)


class SQLiteStore:
    """Embedded :class:`~memfrontier.store.base.MemoryStore`: SQLite + bm25s + numpy, one directory.

    Args:
        path: the store directory (created if missing).
        embedder: an :class:`~memfrontier.embed.minilm.Embedder` (``model_id``, ``dim``,
            ``encode``, ``count_tokens``); its id and dim are recorded in the store.
        chunk_tokens: chunk budget in retriever tokens (recorded; reopening with another value
            raises ``StoreError``).
        reembed: if the store was built with another embedding model id or dim, re-embed every
            chunk with ``embedder`` instead of raising ``EmbeddingMismatchError``.
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
        self.path.mkdir(parents=True, exist_ok=True)
        self.db_path = self.path / DB_NAME
        self.embedder = embedder
        self.chunk_tokens = int(chunk_tokens)
        self.busy_timeout_s = float(busy_timeout_s)
        self._lock = threading.RLock()
        self._snap: _Snapshot | None = None
        self._bm25: BM25Index | None = None
        self._closed = False
        #: counters for tests and benchmarks: encode calls/texts, BM25 builds/loads, snapshot loads
        self.stats = {"encode_calls": 0, "chunks_encoded": 0, "bm25_builds": 0, "bm25_loads": 0, "snapshot_loads": 0}
        self._conn = self._connect()
        try:
            self._init_schema()
            self._check_embedding(reembed)
            self.complete_purges()  # a delete interrupted after its commit is finished here
        except BaseException:
            self._conn.close()
            raise

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
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the thread lock; rollback on any error."""
        with self._lock:
            self._check_open()
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
            for stmt in _SCHEMA.split(";"):  # not executescript(): it would COMMIT our transaction
                if stmt.strip():
                    c.execute(stmt)
            meta = self._meta(c)
            if "schema_version" not in meta:
                c.executemany(
                    "INSERT INTO meta(key, value) VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("generation", "0"), ("chunk_tokens", str(self.chunk_tokens))],
                )
                return
            if int(meta["schema_version"]) > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.db_path} has schema version {meta['schema_version']}, newer than this "
                    f"memfrontier's {SCHEMA_VERSION}"
                )
            if int(meta["schema_version"]) < 2:
                self._migrate_to_2(c)
            recorded = int(meta.get("chunk_tokens", self.chunk_tokens))
            if recorded != self.chunk_tokens:
                raise StoreError(
                    f"store {self.path} was built with chunk_tokens={recorded}; open it with "
                    f"chunk_tokens={recorded} (got {self.chunk_tokens})"
                )

    @staticmethod
    def _migrate_to_2(conn: sqlite3.Connection) -> None:
        """Schema 1 -> 2, inside the opening transaction: record ids become unique per scope
        (``UNIQUE(scope_key, id)`` instead of a global ``UNIQUE(id)``) and scope keys are recomputed
        from each row's stored scope. Schema 1 ids were globally unique, so every row is kept as is."""
        conn.execute("ALTER TABLE records RENAME TO records_v1")
        for name in ("records_session", "records_user", "records_agent", "records_run", "records_id"):
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        for stmt in _SCHEMA.split(";"):
            if "records" in stmt and "chunk_records" not in stmt:
                conn.execute(stmt)
        cols = ("seq, id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, speaker, role, "
                "timestamp, text, images_json, step_index, action, observation, meta_json, n_tokens")
        conn.execute(f"INSERT INTO records({cols}) SELECT {cols} FROM records_v1")
        conn.execute("DROP TABLE records_v1")
        for table, key in (("records", "seq"), ("chunks", "id")):
            rows = conn.execute(f"SELECT {key}, scope_json FROM {table}").fetchall()
            conn.executemany(f"UPDATE {table} SET scope_key = ? WHERE {key} = ?",
                             [(Scope(**json.loads(sj)).key(), k) for k, sj in rows])
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    def _meta(self, conn: sqlite3.Connection) -> dict[str, str]:
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())

    def _mismatch(self, meta: dict[str, str]) -> str | None:
        mid, dim = meta.get("embedding_model_id"), meta.get("embedding_dim")
        if mid is None:
            return None
        if mid != self.embedder.model_id or int(dim) != int(self.embedder.dim):
            return (
                f"store {self.path} was built with embedding model {mid!r} (dim {dim}), but the configured "
                f"embedder is {self.embedder.model_id!r} (dim {self.embedder.dim}); open it with the same "
                f"model, or with reembed=True to re-embed every chunk"
            )
        return None

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
        if msg is None:
            return
        if not reembed:
            raise EmbeddingMismatchError(msg)
        log.warning("%s: re-embedding (reembed=True)", msg)
        self.reembed_all()

    # -- embedding helpers ----------------------------------------------------------------

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, int(self.embedder.dim)), dtype=np.float32)
        vecs = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        if vecs.shape != (len(texts), int(self.embedder.dim)):
            raise StoreError(f"embedder {self.embedder.model_id!r} returned shape {vecs.shape}, expected {(len(texts), self.embedder.dim)}")
        self.stats["encode_calls"] += 1
        self.stats["chunks_encoded"] += len(texts)
        return vecs

    def _count_tokens_many(self, texts: list[str]) -> list[int]:
        batch = getattr(self.embedder, "count_tokens_batch", None)
        if batch is not None and texts:
            return [int(n) for n in batch(texts)]
        return [int(self.embedder.count_tokens(t)) for t in texts]

    def reembed_all(self) -> int:
        """Re-embed every chunk with the configured embedder and record its id/dim. Returns chunks embedded."""
        with self._read_tx() as c:
            pre = c.execute("SELECT id, text FROM chunks").fetchall()
        cache = dict(zip([i for i, _ in pre], self._encode([t for _, t in pre]))) if pre else {}
        with self._write_tx() as c:
            rows = c.execute("SELECT id, text FROM chunks").fetchall()
            missing = [(i, t) for i, t in rows if i not in cache]
            if missing:
                cache.update(zip([i for i, _ in missing], self._encode([t for _, t in missing])))
            c.execute("DELETE FROM chunk_vectors")
            c.executemany(
                "INSERT INTO chunk_vectors(chunk_id, vector) VALUES (?, ?)",
                [(i, cache[i].astype("<f4").tobytes()) for i, _ in rows],
            )
            c.executemany(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                [("embedding_model_id", self.embedder.model_id), ("embedding_dim", str(int(self.embedder.dim)))],
            )
            self._bump(c)
        return len(rows)

    # -- write planning -------------------------------------------------------------------

    @staticmethod
    def _bump(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    def _existing(self, conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        """The stored records among ``keys`` ((scope key, record id) pairs), by key."""
        want = set(keys)
        found: dict[tuple[str, str], Record] = {}
        for b in _batched(sorted({i for _, i in keys})):
            q = f"SELECT scope_key, {_RECORD_COLS} FROM records WHERE id IN ({','.join('?' * len(b))})"
            for row in conn.execute(q, b):
                if (row[0], row[2]) in want:
                    found[(row[0], row[2])] = _row_to_record(row[1:])
        return found

    @staticmethod
    def _check_conflicts(uniq: dict[tuple[str, str], Record], present: dict[tuple[str, str], Record]) -> None:
        clash = [r.id for k, r in uniq.items() if k in present and present[k] != r]
        if clash:
            raise RecordConflictError(
                f"record id(s) {clash[:5]!r}{' ...' if len(clash) > 5 else ''} already exist in this scope with other "
                f"content; a record is never overwritten silently: delete it first or give the new one another id "
                f"(nothing of this batch was written)"
            )

    def _existing_vectors(self, conn: sqlite3.Connection, chunk_ids: list[str]) -> set[str]:
        found: set[str] = set()
        for b in _batched(chunk_ids):
            q = f"SELECT chunk_id FROM chunk_vectors WHERE chunk_id IN ({','.join('?' * len(b))})"
            found.update(r[0] for r in conn.execute(q, b))
        return found

    def _session_rows(self, conn: sqlite3.Connection, scope_key: str, session_id: str) -> list[tuple[int, Record, int]]:
        rows = conn.execute(
            f"SELECT {_RECORD_COLS} FROM records WHERE scope_key = ? AND session_id = ?", (scope_key, session_id)
        ).fetchall()
        return [(r[0], _row_to_record(r), int(r[-1])) for r in rows]

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

    def _plan(
        self,
        conn: sqlite3.Connection,
        new: list[tuple[Record, int]],
        delete_ids: set[tuple[str, str]],
        sessions: dict[tuple[str, str], None],
    ) -> dict[tuple[str, str], _SessionPlan]:
        """New chunk lists for the touched ``sessions``; ``new`` records are included as if inserted
        (they get sequence numbers after every existing record), ``delete_ids`` ((scope key, record
        id) pairs) excluded."""
        big = 1 << 60
        by_session: dict[tuple[str, str], list[tuple[int, Record, int]]] = {}
        for i, (rec, n) in enumerate(new):
            by_session.setdefault((rec.scope.key(), rec.session_id), []).append((big + i, rec, n))
        out = {}
        for key in sessions:
            rows = [r for r in self._session_rows(conn, *key) if (key[0], r[1].id) not in delete_ids]
            out[key] = self._plan_session(rows + by_session.get(key, []))
        return out

    def _pre_embed(self, new: list[tuple[Record, int]], delete_ids: set[tuple[str, str]], sessions: dict) -> dict[str, np.ndarray]:
        """Optimistic first pass, outside the write lock: embed planned chunks that lack a vector."""
        with self._read_tx() as c:
            plans = self._plan(c, new, delete_ids, sessions)
            want = {ch.id: ch.text for p in plans.values() for ch in p.chunks}
            have = self._existing_vectors(c, list(want))
        todo = [(i, t) for i, t in want.items() if i not in have]
        if not todo:
            return {}
        vecs = self._encode([t for _, t in todo])
        return {i: v for (i, _), v in zip(todo, vecs)}

    def _apply(
        self,
        conn: sqlite3.Connection,
        insert: list[tuple[Record, int]],
        delete_ids: set[tuple[str, str]],
        sessions: dict[tuple[str, str], None],
        cache: dict[str, np.ndarray],
    ) -> tuple[int, int]:
        """Inside the write transaction: write records, rebuild touched sessions' chunks, vectors.
        Returns (chunks built, vectors written)."""
        if insert:
            conn.executemany(
                "INSERT INTO records(id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, speaker, role, "
                "timestamp, text, images_json, step_index, action, observation, meta_json, n_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.id, r.kind, r.scope.key(), r.scope.user_id, r.scope.agent_id, r.scope.run_id,
                        r.scope.model_dump_json(), r.session_id, r.speaker, r.role, r.timestamp, r.text,
                        json.dumps([im.model_dump() for im in r.images], ensure_ascii=False), r.step_index,
                        r.action, r.observation, json.dumps(r.meta, ensure_ascii=False), n,
                    )
                    for r, n in insert
                ],
            )
        conn.executemany("DELETE FROM records WHERE scope_key = ? AND id = ?", sorted(delete_ids))

        built, need = 0, []
        for key in sessions:
            plan = self._plan_session(self._session_rows(conn, *key))
            old = {r[0] for r in conn.execute("SELECT id FROM chunks WHERE scope_key = ? AND session_id = ?", key)}
            new_ids = {c.id for c in plan.chunks}
            gone = sorted(old - new_ids)
            for b in _batched(gone):  # cascades to chunk_records and chunk_vectors
                conn.execute(f"DELETE FROM chunks WHERE id IN ({','.join('?' * len(b))})", b)
            for ch in plan.chunks:
                if ch.id in old:
                    conn.execute(
                        "UPDATE chunks SET timestamp = ?, first_seq = ? WHERE id = ?", (ch.timestamp, plan.first_seq[ch.id], ch.id)
                    )
                    continue
                s = ch.scope
                conn.execute(
                    "INSERT INTO chunks(id, scope_key, user_id, agent_id, run_id, scope_json, session_id, timestamp, text, "
                    "n_tokens, first_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (ch.id, s.key(), s.user_id, s.agent_id, s.run_id, s.model_dump_json(), ch.session_id, ch.timestamp,
                     ch.text, ch.n_tokens, plan.first_seq[ch.id]),
                )
                conn.executemany(
                    "INSERT INTO chunk_records(chunk_id, position, record_id) VALUES (?, ?, ?)",
                    [(ch.id, i, rid) for i, rid in enumerate(ch.record_ids)],
                )
                built += 1
            have = self._existing_vectors(conn, list(new_ids))
            need.extend(ch for ch in plan.chunks if ch.id not in have)

        missing = [ch for ch in need if ch.id not in cache]
        if missing:  # a concurrent writer changed these sessions since the optimistic pass
            cache = {**cache, **dict(zip([c.id for c in missing], self._encode([c.text for c in missing])))}
        conn.executemany(
            "INSERT OR REPLACE INTO chunk_vectors(chunk_id, vector) VALUES (?, ?)",
            [(ch.id, np.asarray(cache[ch.id], dtype="<f4").tobytes()) for ch in need],
        )
        self._bump(conn)
        return built, len(need)

    def _guard_embedding(self, conn: sqlite3.Connection) -> None:
        msg = self._mismatch(self._meta(conn))
        if msg is not None:  # another process re-embedded the store with another model meanwhile
            raise EmbeddingMismatchError(msg)

    # -- public API: writes ---------------------------------------------------------------

    def add(self, records: list[Record]) -> AddResult:
        """Insert records not yet stored; re-chunk and embed only what changed.

        Record ids are unique per scope: the same id in two scopes is two records. A record whose
        (scope, id) is already stored with the same content is skipped (re-running an ingest adds
        nothing); with other content it is an error, never a silent skip nor an overwrite.
        Atomic: everything of the batch is written in one transaction, or nothing. Repeated
        (scope, id) pairs inside the batch keep the first (they must have the same content).

        Raises:
            ValueError: a record has empty/whitespace text and no images (and, for a step, no
                action/observation); the message names its id and nothing of the batch is written.
            RecordConflictError: (a ValueError) a (scope, id) is stored, or repeated in the batch,
                with other content; nothing of the batch is written.
            TypeError: an element is not a :class:`Record`.
            StoreError / EmbeddingMismatchError: see the class docstring.
        """
        records = list(records)
        for r in records:
            if not isinstance(r, Record):
                raise TypeError(f"add() takes Record objects, got {type(r).__name__}")
            if _is_empty(r):
                raise ValueError(f"record {r.id!r} has empty text and no images; nothing of this batch was written")
        uniq: dict[tuple[str, str], Record] = {}
        for r in records:
            uniq.setdefault((r.scope.key(), r.id), r)
        self._check_conflicts(uniq, {(r.scope.key(), r.id): r for r in records})
        dup_in_batch = len(records) - len(uniq)

        with self._read_tx() as c:
            present = self._existing(c, list(uniq))
        self._check_conflicts(uniq, present)
        fresh = [(k, r) for k, r in uniq.items() if k not in present]
        if not fresh:
            return AddResult(skipped=[r.id for r in records])
        counts = self._count_tokens_many([r.render() for _, r in fresh])
        n_of = {k: n for (k, _), n in zip(fresh, counts)}
        new = [(r, n_of[k]) for k, r in fresh]
        sessions = dict.fromkeys((r.scope.key(), r.session_id) for _, r in fresh)
        cache = self._pre_embed(new, set(), sessions)

        with self._write_tx() as c:
            self._guard_embedding(c)
            present = self._existing(c, list(uniq))  # a concurrent writer may have added some
            self._check_conflicts(uniq, present)
            insert = [(r, n_of[k]) for k, r in uniq.items() if k not in present]
            if not insert:
                return AddResult(skipped=[r.id for r in records])
            sessions = dict.fromkeys((r.scope.key(), r.session_id) for r, _ in insert)
            built, embedded = self._apply(c, insert, set(), sessions, cache)
        added_keys = {(r.scope.key(), r.id) for r, _ in insert}
        added = [r.id for r, _ in insert]
        skipped = [r.id for k, r in uniq.items() if k not in added_keys]
        if dup_in_batch:  # repeated (scope, id) pairs inside the batch count as skipped too
            seen: set[tuple[str, str]] = set()
            for r in records:
                k = (r.scope.key(), r.id)
                if k in seen:
                    skipped.append(r.id)
                seen.add(k)
        return AddResult(added=added, skipped=skipped, chunks_built=built, chunks_embedded=embedded)

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
        keys = {(r[1], r[0]) for r in rows}
        sessions = dict.fromkeys((r[1], r[2]) for r in rows)
        cache = self._pre_embed([], keys, sessions)
        with self._write_tx() as c:
            self._guard_embedding(c)
            rows = c.execute(select_sql, params).fetchall()
            if not rows:
                return 0
            keys = {(r[1], r[0]) for r in rows}
            sessions = dict.fromkeys((r[1], r[2]) for r in rows)
            self._apply(c, [], keys, sessions, cache)
            by_scope: dict[str, list[str]] = {}
            for rid, _key, _sid, scope_json in rows:
                by_scope.setdefault(scope_json, []).append(rid)
            intent = {"scope": whole.model_dump() if whole is not None else None,
                      "records": [[json.loads(sj), sorted(ids)] for sj, ids in sorted(by_scope.items())]}
            c.execute("INSERT INTO pending_purges(intent_json) VALUES (?)", (json.dumps(intent, ensure_ascii=False),))
        self.complete_purges()
        return len(keys)

    def complete_purges(self) -> int:
        """Finish every pending purge intent: remove what the deleted records left in the derived
        views of this directory (bank items and traces, graph folders, stale BM25 index files,
        see :func:`memfrontier.store.purge.purge_views`), then drop the intent and truncate the
        WAL so no deleted text stays on disk. Idempotent; run on open and after every delete.
        Returns the intents completed."""
        from .purge import purge_views

        with self._lock:
            self._check_open()
            try:
                pending = self._conn.execute("SELECT seq, intent_json FROM pending_purges ORDER BY seq").fetchall()
            except sqlite3.Error as e:
                raise StoreError(f"read from store {self.db_path} failed: {e}") from e
            if not pending:
                return 0
            self._snap, self._bm25 = None, None
            for seq, intent_json in pending:
                purge_views(self.path, json.loads(intent_json))
                self._drop_stale_bm25()
                with self._write_tx() as c:
                    c.execute("DELETE FROM pending_purges WHERE seq = ?", (seq,))
            self._checkpoint()
        return len(pending)

    def _drop_stale_bm25(self) -> None:
        """Remove BM25 index generations older than the store's (they hold deleted chunks' terms);
        the current one is rebuilt from the records on the next search."""
        root = self.path / BM25_DIR
        if not root.is_dir():
            return
        gen = self.generation
        for p in root.iterdir():
            m = re.fullmatch(r"g(\d+)", p.name)
            if m and int(m.group(1)) < gen:
                shutil.rmtree(p, ignore_errors=True)

    def _checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it to zero bytes (best effort: a reader in
        another process may hold an older snapshot; the next checkpoint finishes the job)."""
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as e:  # pragma: no cover
            log.debug("checkpoint of %s failed: %s", self.db_path, e)

    def delete(self, record_id: str, scope: Scope) -> bool:
        """Delete the record ``record_id`` of ``scope`` (a search scope: ``None`` fields match any,
        so every record with that id inside it goes) and everything derived from it: its session
        is re-chunked (chunks, vectors, BM25), and bank items, traces and graph indexes built from
        it are purged. Returns False if no such record.

        Raises:
            ValueError: every field of ``scope`` is ``None`` (record ids are only unique per scope).
        """
        if scope.user_id is None and scope.agent_id is None and scope.run_id is None:
            raise ValueError("delete needs the record's scope: at least one of user_id, agent_id, run_id")
        where, params = _scope_where(scope)
        return self._delete_where(f"id = ? AND {where}", [record_id, *params]) > 0

    def delete_all(self, scope: Scope) -> int:
        """Delete every record matching ``scope`` (``None`` fields match anything) and everything
        derived from them (see :meth:`delete`); returns how many records.

        Raises:
            ValueError: every field of ``scope`` is ``None`` (that would wipe the store).
        """
        if scope.user_id is None and scope.agent_id is None and scope.run_id is None:
            raise ValueError("delete_all needs a scope with at least one of user_id, agent_id, run_id set")
        where, params = _scope_where(scope)
        return self._delete_where(where, params, whole=scope)

    # -- public API: reads ----------------------------------------------------------------

    def records(self, scope: Scope, session_id: str | None = None) -> list[Record]:
        """Records matching ``scope`` (and ``session_id``), by timestamp then insertion order
        (records without a timestamp first; timestamps compare as ISO-8601 strings)."""
        where, params = _scope_where(scope)
        if session_id is not None:
            where += " AND session_id = ?"
            params.append(session_id)
        with self._read_tx() as c:
            rows = c.execute(f"SELECT {_RECORD_COLS} FROM records WHERE {where} {_ORDER_RECORDS}", params).fetchall()
        return [_row_to_record(r) for r in rows]

    def get(self, record_ids: list[str], scope: Scope) -> list[Record]:
        """Records of ``scope`` by id, in the order asked; unknown ids are left out. Ids are unique
        per scope: an id held by several exact scopes inside ``scope`` gives each of them
        (insertion order). ``Scope()`` looks in every scope (internal callers only)."""
        ids = list(record_ids)
        where, params = _scope_where(scope)
        found: dict[str, list[Record]] = {}
        with self._read_tx() as c:
            for b in _batched(sorted(set(ids))):
                q = f"SELECT {_RECORD_COLS} FROM records WHERE id IN ({','.join('?' * len(b))}) AND {where} ORDER BY seq"
                for r in c.execute(q, [*b, *params]):
                    found.setdefault(r[1], []).append(_row_to_record(r))
        return [rec for i in ids for rec in found.get(i, [])]

    def _load_chunks(self, conn: sqlite3.Connection, where: str, params: list) -> list[Chunk]:
        rows = conn.execute(
            f"SELECT id, scope_json, session_id, timestamp, text, n_tokens FROM chunks WHERE {where} {_ORDER_CHUNKS}", params
        ).fetchall()
        rec_ids: dict[str, list[str]] = {}
        if where == "1":
            for cid, rid in conn.execute("SELECT chunk_id, record_id FROM chunk_records ORDER BY chunk_id, position"):
                rec_ids.setdefault(cid, []).append(rid)
        else:
            for b in _batched([r[0] for r in rows]):
                q = f"SELECT chunk_id, record_id FROM chunk_records WHERE chunk_id IN ({','.join('?' * len(b))}) ORDER BY chunk_id, position"
                for cid, rid in conn.execute(q, b):
                    rec_ids.setdefault(cid, []).append(rid)
        return [
            Chunk(id=cid, scope=Scope(**json.loads(sj)), session_id=sid, timestamp=ts, text=text,
                  record_ids=rec_ids.get(cid, []), n_tokens=n)
            for cid, sj, sid, ts, text, n in rows
        ]

    def chunks(self, scope: Scope) -> list[Chunk]:
        """Chunks matching ``scope``, chronological (session time, then first record's insertion)."""
        where, params = _scope_where(scope)
        with self._read_tx() as c:
            return self._load_chunks(c, where, params)

    def count(self, scope: Scope | None = None) -> dict[str, int]:
        """Numbers of records, chunks and vectors (in ``scope``, or all)."""
        where, params = _scope_where(scope or Scope())
        where_c, _ = _scope_where(scope or Scope(), prefix="c.")
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

    # -- search ---------------------------------------------------------------------------

    def _snapshot(self) -> _Snapshot:
        """The in-memory search state, reloaded when the store generation moved (caller holds the lock)."""
        gen = self.generation
        if self._snap is not None and self._snap.generation == gen:
            return self._snap
        dim = int(self.embedder.dim)
        with self._read_tx() as c:
            gen = int(c.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            chunks = self._load_chunks(c, "1", [])
            vec_rows = dict(c.execute("SELECT chunk_id, vector FROM chunk_vectors").fetchall())
        mat = np.zeros((len(chunks), dim), dtype=np.float32)
        for i, ch in enumerate(chunks):
            blob = vec_rows.get(ch.id)
            if blob is None or len(blob) != 4 * dim:
                raise StoreError(f"store {self.path}: chunk {ch.id} has no vector of dim {dim}; reopen with reembed=True")
            mat[i] = np.frombuffer(blob, dtype="<f4")
        self._snap = _Snapshot(
            generation=gen,
            ids=[ch.id for ch in chunks],
            chunks=chunks,
            by_id={ch.id: ch for ch in chunks},
            user_ids=np.array([ch.scope.user_id for ch in chunks], dtype=object),
            agent_ids=np.array([ch.scope.agent_id for ch in chunks], dtype=object),
            run_ids=np.array([ch.scope.run_id for ch in chunks], dtype=object),
            vectors=mat,
        )
        self.stats["snapshot_loads"] += 1
        return self._snap

    def _bm25_index(self, snap: _Snapshot) -> BM25Index:
        """The BM25 index for ``snap``: in memory, else ``bm25/g<gen>`` on disk, else built and saved."""
        if self._bm25 is not None and self._bm25.generation == snap.generation and self._bm25.ids == snap.ids:
            return self._bm25
        root = self.path / BM25_DIR
        target = root / f"g{snap.generation}"
        idx = BM25Index.load(target, snap.ids, snap.generation) if target.exists() else None
        if idx is not None:
            self.stats["bm25_loads"] += 1
        else:
            idx = BM25Index.build(snap.ids, [ch.text for ch in snap.chunks], snap.generation)
            self.stats["bm25_builds"] += 1
            self._persist_bm25(idx, root, target)
        self._bm25 = idx
        return idx

    def _persist_bm25(self, idx: BM25Index, root: Path, target: Path) -> None:
        tmp = root / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            idx.save(tmp)
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)  # stale (other ids, e.g. a recreated db)
            os.rename(tmp, target)
        except OSError as e:  # another process saved the same generation first, or disk trouble
            log.debug("bm25 index not persisted to %s: %s", target, e)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        for p in root.iterdir():  # drop older generations (never newer ones: another process may own them)
            m = re.fullmatch(r"g(\d+)", p.name)
            if m and int(m.group(1)) < idx.generation:
                shutil.rmtree(p, ignore_errors=True)

    @staticmethod
    def _mask(snap: _Snapshot, scope: Scope) -> np.ndarray:
        mask = np.ones(len(snap.ids), dtype=bool)
        for arr, v in ((snap.user_ids, scope.user_id), (snap.agent_ids, scope.agent_id), (snap.run_ids, scope.run_id)):
            if v is not None:
                mask &= arr == v
        return mask

    @staticmethod
    def _top(scores: np.ndarray, mask: np.ndarray, n: int, positive_only: bool) -> list[tuple[int, float]]:
        idx = np.flatnonzero(mask)
        if positive_only and idx.size:
            idx = idx[scores[idx] > 0]
        if idx.size == 0 or n <= 0:
            return []
        sub = scores[idx]
        if idx.size > n:
            part = np.argpartition(-sub, n - 1)[:n]
            idx, sub = idx[part], sub[part]
        order = np.lexsort((idx, -sub))  # score desc, then position asc: deterministic
        return [(int(idx[o]), float(sub[o])) for o in order]

    def search_dense(self, query: str, scope: Scope, k: int = 10, *, query_vector: np.ndarray | None = None) -> list[tuple[Chunk, float]]:
        """Top-k in-scope chunks by cosine similarity (exact). Returns (chunk, cosine in [-1, 1])."""
        if query_vector is None:
            if not query.strip():
                return []
            query_vector = self._encode_query(query)
        with self._lock:
            snap = self._snapshot()
            sims = snap.vectors @ np.asarray(query_vector, dtype=np.float32)
            top = self._top(sims, self._mask(snap, scope), k, positive_only=False)
        return [(snap.chunks[i], s) for i, s in top]

    def search_bm25(self, query: str, scope: Scope, k: int = 10) -> list[tuple[Chunk, float]]:
        """Top-k in-scope chunks by BM25 score (> 0 only). Empty / all-stopword / unseen-word query -> []."""
        if not query.strip():
            return []
        with self._lock:
            snap = self._snapshot()
            scores = self._bm25_index(snap).scores(query)
            if scores is None:
                return []
            top = self._top(scores, self._mask(snap, scope), k, positive_only=True)
        return [(snap.chunks[i], s) for i, s in top]

    def _encode_query(self, query: str) -> np.ndarray:
        return np.asarray(self.embedder.encode([query]), dtype=np.float32)[0]

    def search(
        self,
        query: str,
        scope: Scope,
        k: int = 10,
        *,
        retrievers: tuple[str, ...] = ("dense", "bm25"),
        candidates: int | None = None,
    ) -> list[Hit]:
        """Top-k chunks in ``scope`` fused by RRF (k=60) over ``retrievers``.

        Each retriever contributes its top ``candidates`` (default ``max(4k, 50)``) in-scope
        chunks; ``Hit.score`` is the RRF score (unitless), ``Hit.ranks`` the 1-based rank per
        retriever that returned the chunk. An empty/whitespace query returns [].

        Raises:
            ValueError: an unknown retriever name, or no retriever.
        """
        retrievers = tuple(retrievers)
        bad = [r for r in retrievers if r not in RETRIEVERS]
        if bad or not retrievers:
            raise ValueError(f"unknown retrievers {bad or retrievers!r}; choose from {RETRIEVERS}")
        if k <= 0 or not query.strip():
            return []
        n = int(candidates) if candidates is not None else max(4 * k, 50)
        qvec = self._encode_query(query) if "dense" in retrievers else None  # outside the lock
        rankings: dict[str, list[str]] = {}
        with self._lock:
            snap = self._snapshot()
            mask = self._mask(snap, scope)
            if qvec is not None:
                rankings["dense"] = [snap.ids[i] for i, _ in self._top(snap.vectors @ qvec, mask, n, positive_only=False)]
            if "bm25" in retrievers:
                scores = self._bm25_index(snap).scores(query)
                rankings["bm25"] = [] if scores is None else [snap.ids[i] for i, _ in self._top(scores, mask, n, positive_only=True)]
        fused = rrf_fuse(rankings, k=RRF_K, top_n=k)
        return [Hit(chunk=snap.by_id[cid], score=score, ranks=ranks) for cid, score, ranks in fused]

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent). The directory stays a valid store."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._snap = None
                self._bm25 = None
                try:
                    self._conn.close()
                except sqlite3.Error:  # pragma: no cover
                    pass

    def __enter__(self) -> "SQLiteStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, embedder={getattr(self.embedder, 'model_id', '?')!r}, chunk_tokens={self.chunk_tokens})"


__all__ = ["SQLiteStore", "BM25Index", "bm25_split"]

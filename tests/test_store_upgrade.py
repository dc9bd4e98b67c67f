"""A store written by the earlier release (schema 1) behaves, once migrated, exactly like a new one.
A store written before record vectors (SQLite schema 2, PostgreSQL schema 8: chunk vectors encoded
from the chunks' texts) gets its records embedded, resumably, and its chunk vectors derived.

The schema-1 database is built by hand as that release wrote it: its DDL (one global
``UNIQUE(id)``, no purge tables), scope keys as the three ids joined with ``|``, content ids hashed
on that key, and timestamps in the caller's spelling. The PostgreSQL store has no such history: its
first schema already had the injective keys and canonical timestamps (see
``test_postgres_records_are_unique_per_scope_in_the_schema`` in ``test_isolation.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from contextlib import closing

import numpy as np
import pytest

from memfrontier.api import Memory
from memfrontier.core.types import Record, Scope, record_id
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.store.bank import BankItem, MemoryBank
from memfrontier.store.records import CHUNK_VECTORS, chunk_vector, vector_blob
from memfrontier.store.seam import StoreSeam
from memfrontier.store.sqlite import SQLiteStore

V1_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
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
    n_tokens INTEGER NOT NULL
);
CREATE INDEX records_session ON records(scope_key, session_id);
CREATE INDEX records_user ON records(user_id);
CREATE INDEX records_agent ON records(agent_id);
CREATE INDEX records_run ON records(run_id);
CREATE TABLE chunks (
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
CREATE INDEX chunks_session ON chunks(scope_key, session_id);
CREATE TABLE chunk_records (
    chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    record_id TEXT NOT NULL,
    PRIMARY KEY (chunk_id, position)
);
CREATE INDEX chunk_records_record ON chunk_records(record_id);
CREATE TABLE chunk_vectors (
    chunk_id TEXT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    vector BLOB NOT NULL
);
"""

# Two add calls of the earlier release (session, messages); the timestamps in the caller's
# spelling. As text, "2023-05-08 23:30:00-05:00" sorts before "2023-05-09T01:00:00Z", but it is
# 04:30 UTC on 9 May, after it.
HISTORY = [
    (
        "s1",
        [
            {"role": "user", "content": "I adopted a beagle named Rufus.", "timestamp": "2023-05-08 23:30:00-05:00"},
            {"role": "assistant", "content": "Congratulations on Rufus!", "timestamp": "2023-05-08 23:30:00-05:00"},
        ],
    ),
    (
        "s2",
        [
            {"role": "user", "content": "Rufus chewed my left shoe.", "timestamp": "2023-05-09T01:00:00Z"},
            {"role": "user", "content": "I moved to Lisbon.", "timestamp": "2023-5-10"},
            {"id": "msg-7", "role": "user", "content": "My sister is Ana."},
        ],
    ),
]


def v1_record_id(old_key: str, session_id: str, position: int, speaker: str, text: str, ts) -> str:
    """The earlier release's record_id: the same formula on its ``|``-joined scope key."""
    h = hashlib.sha256("\x1f".join([old_key, session_id, str(position), speaker, ts or "", text]).encode("utf-8"))
    return "r-" + h.hexdigest()[:20]


def write_v1_store(path, embedder, user_id: str = "alice") -> list[str]:
    """A schema-1 store at ``path`` holding :data:`HISTORY` for ``user_id``; returns the record ids."""
    path.mkdir()
    db = sqlite3.connect(path / "store.db")
    db.executescript(V1_DDL)
    db.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [
            ("schema_version", "1"),
            ("generation", "2"),
            ("chunk_tokens", "256"),
            ("embedding_model_id", embedder.model_id),
            ("embedding_dim", str(embedder.dim)),
        ],
    )
    old_key = f"{user_id}||"
    scope_json = json.dumps({"user_id": user_id, "agent_id": None, "run_id": None})
    ids = []
    for sid, messages in HISTORY:
        for i, m in enumerate(messages):
            rid = m.get("id") or v1_record_id(old_key, sid, i, m["role"], m["content"], m.get("timestamp"))
            ids.append(rid)
            db.execute(
                "INSERT INTO records (id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, "
                "speaker, role, timestamp, text, images_json, meta_json, n_tokens) "
                "VALUES (?, 'turn', ?, ?, '', '', ?, ?, ?, ?, ?, ?, '[]', '{}', 8)",
                (rid, old_key, user_id, scope_json, sid, m["role"], m["role"], m.get("timestamp"), m["content"]),
            )
    db.commit()
    db.close()
    return ids


@pytest.fixture(scope="module")
def embedder():
    return MiniLMEmbedder(num_threads=1)


def test_a_migrated_store_takes_the_same_history_again_as_a_no_op(tmp_path, embedder):
    path = tmp_path / "mem"
    old_ids = write_v1_store(path, embedder)
    with closing(MemoryBank(path / "banks" / "facts.db", embedder)) as bank:  # a view built from the old records
        bank.apply(
            [
                BankItem(
                    id="f1",
                    kind="fact",
                    scope=Scope(user_id="alice"),
                    text="Alice has a beagle.",
                    source_ids=old_ids[:2] + ["msg-7"],
                )
            ]
        )

    with Memory.open(path, embedder=embedder) as mem:
        for sid, messages in HISTORY:
            res = mem.add(messages, user_id="alice", session_id=sid)
            assert (res.added, len(res.skipped)) == ([], len(messages))
        store = mem.aio.store
        assert store.count() == {"records": 5, "chunks": store.count()["chunks"], "vectors": store.count()["chunks"]}
        new_ids = [r.id for r in store.records(Scope(user_id="alice"))]

    alice = Scope(user_id="alice")
    expected = [
        record_id(alice, "s1", 0, "user", "I adopted a beagle named Rufus.", "2023-05-09T04:30:00+00:00"),
        record_id(alice, "s1", 1, "assistant", "Congratulations on Rufus!", "2023-05-09T04:30:00+00:00"),
        record_id(alice, "s2", 0, "user", "Rufus chewed my left shoe.", "2023-05-09T01:00:00+00:00"),
        record_id(alice, "s2", 1, "user", "I moved to Lisbon.", "2023-05-10T00:00:00+00:00"),
        "msg-7",
    ]
    assert sorted(new_ids) == sorted(expected)
    assert not set(old_ids[:4]) & set(new_ids)  # every content id was derived again

    db = sqlite3.connect(path / "store.db")
    rows = db.execute("SELECT timestamp, text FROM records WHERE timestamp IS NOT NULL ORDER BY timestamp").fetchall()
    chunk_ts = [t for (t,) in db.execute("SELECT timestamp FROM chunks WHERE timestamp IS NOT NULL ORDER BY timestamp")]
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "3"
    db.close()
    assert rows == [
        ("2023-05-09T01:00:00+00:00", "Rufus chewed my left shoe."),
        ("2023-05-09T04:30:00+00:00", "I adopted a beagle named Rufus."),
        ("2023-05-09T04:30:00+00:00", "Congratulations on Rufus!"),
        ("2023-05-10T00:00:00+00:00", "I moved to Lisbon."),
    ]
    assert chunk_ts == sorted(chunk_ts) and set(chunk_ts) <= {t for t, _ in rows}

    with closing(MemoryBank(path / "banks" / "facts.db", embedder)) as bank:  # the view follows the new ids
        [item] = bank.items(alice, "fact")
        assert item.source_ids == expected[:2] + ["msg-7"]


def test_an_unreadable_v1_timestamp_is_kept_in_meta_not_in_the_column(tmp_path, embedder):
    path = tmp_path / "mem"
    write_v1_store(path, embedder)
    db = sqlite3.connect(path / "store.db")
    db.execute("UPDATE records SET timestamp = 'sometime in May' WHERE id = 'msg-7'")
    db.commit()
    db.close()
    with Memory.open(path, embedder=embedder) as mem:
        [rec] = mem.aio.store.get(["msg-7"], Scope(user_id="alice"))
    assert rec.timestamp is None and rec.meta == {"timestamp_v1": "sometime in May"}


# -- before record vectors: SQLite schema 2, PostgreSQL schema 8 --------------------------------

ANA = Scope(user_id="ana")
TURNS = [
    Record(id=f"t{i}", scope=ANA, session_id=f"s{i // 4}", speaker="Ana", text=text)
    for i, text in enumerate(
        [
            "I adopted a beagle named Rufus.",
            "Rufus chewed my left shoe this morning.",
            "We walked along the river to the old mill.",
            "My sister Ana Lucia moved to Lisbon.",
            "I started cello lessons on Tuesdays.",
            "The cello teacher is from Porto.",
            "Practice is hard but I love the sound.",
        ]
    )
]


class Counting:
    """The real MiniLM, counting the texts it encodes."""

    def __init__(self, inner):
        self.inner, self.model_id, self.dim, self.texts = inner, inner.model_id, inner.dim, 0
        self.max_seq_length = inner.max_seq_length

    def encode(self, texts):
        self.texts += len(texts)
        return self.inner.encode(texts)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


def derived(store, embedder, scope):
    """{chunk id: chunk_vector of its records' encodings} computed here from the records' texts."""
    recs = {r.id: r for r in store.records(scope)}
    out = {}
    for ch in store.chunks(scope):
        texts = [recs[i].render() for i in ch.record_ids]
        out[ch.id] = chunk_vector(embedder.encode(texts), [embedder.count_tokens(t) for t in texts], 254)
    return out


def assert_chunks_derived(store, embedder, scope):
    for cid, want in derived(store, embedder, scope).items():
        top, cos = store.search_dense("", scope, 1, query_vector=want)[0]
        assert top.id == cid and cos == pytest.approx(1.0, abs=1e-5)


def write_v2_store(path, embedder) -> None:
    """A store as schema 2 left it: no record vectors, each chunk's vector its text's encoding."""
    with SQLiteStore(path, embedder) as s:
        s.add(TURNS)
    db = sqlite3.connect(path / "store.db")
    texts = db.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()
    vecs = embedder.encode([t for _, t in texts])
    db.executemany(
        "UPDATE chunk_vectors SET vector = ? WHERE chunk_id = ?",
        [(vector_blob(v), i) for (i, _), v in zip(texts, vecs)],
    )
    db.execute("DROP TABLE record_vectors")
    db.execute("DELETE FROM meta WHERE key = 'chunk_vectors'")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()


def test_a_schema_2_store_gets_record_vectors_resumably_and_derived_chunk_vectors(
    tmp_path, embedder, monkeypatch, caplog
):
    path = tmp_path / "v2"
    write_v2_store(path, embedder)
    with closing(sqlite3.connect(path / "store.db")) as db:
        chunk_ids = [i for (i,) in db.execute("SELECT id FROM chunks")]
    assert len(chunk_ids) == 2

    # an open interrupted after the first batch of records (batches of 3 here) keeps that batch
    monkeypatch.setattr("memfrontier.store.seam.FILL_BATCH", 3)
    put, writes = StoreSeam._put_record_vectors, []

    def second_write_fails(self, c, rows):
        writes.append(len(rows))
        if len(writes) == 2:
            raise KeyboardInterrupt  # the process stopped mid-migration
        put(self, c, rows)

    monkeypatch.setattr(StoreSeam, "_put_record_vectors", second_write_fails)
    first = Counting(embedder)
    with pytest.raises(KeyboardInterrupt):
        SQLiteStore(path, first)
    assert writes == [3, 3] and first.texts == 6
    with closing(sqlite3.connect(path / "store.db")) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "3"
        assert db.execute("SELECT count(*) FROM record_vectors").fetchone()[0] == 3
        assert db.execute("SELECT value FROM meta WHERE key = 'chunk_vectors'").fetchone() is None
    monkeypatch.setattr(StoreSeam, "_put_record_vectors", put)

    # the next open embeds only the four records left, derives both chunks' vectors and says so
    again = Counting(embedder)
    with caplog.at_level(logging.WARNING, logger="memfrontier.store.seam"):
        s = SQLiteStore(path, again)
    assert again.texts == 4
    assert "4 record vectors embedded, 2 chunk vectors derived from them (record-mean-v1)" in caplog.text
    with closing(sqlite3.connect(path / "store.db")) as db:
        assert db.execute("SELECT count(*) FROM record_vectors").fetchone()[0] == 7
        assert db.execute("SELECT value FROM meta WHERE key = 'chunk_vectors'").fetchone()[0] == CHUNK_VECTORS
    np.testing.assert_allclose(
        s.record_vectors(ANA, [r.id for r in TURNS]), embedder.encode([r.render() for r in TURNS]), atol=1e-5
    )
    assert_chunks_derived(s, embedder, ANA)
    assert s.count(ANA) == {"records": 7, "chunks": 2, "vectors": 2}
    s.close()
    quiet = Counting(embedder)
    SQLiteStore(path, quiet).close()  # a completed store opens without encoding
    assert quiet.texts == 0


def test_a_schema_8_postgres_store_gets_record_vectors_and_derived_chunk_vectors(
    pg_database, tmp_path, embedder, caplog
):
    import psycopg

    from memfrontier.store.postgres import PostgresStore
    from memfrontier.store.postgres_schema import SCHEMA_VERSION

    dsn = pg_database("v8")
    with PostgresStore(dsn, embedder, directory=tmp_path / "v8") as s:
        s.add(TURNS)
    with psycopg.connect(dsn, autocommit=True) as conn:  # back to schema 8: chunk texts' encodings, no record vectors
        from pgvector.psycopg import register_vector

        register_vector(conn)
        rows = conn.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()
        for (cid, _), v in zip(rows, embedder.encode([t for _, t in rows])):
            conn.execute("UPDATE chunks SET embedding = %s WHERE id = %s", (v, cid))
        conn.execute("DROP TABLE record_vectors")
        conn.execute("DELETE FROM meta WHERE key = 'chunk_vectors'")
        conn.execute("DELETE FROM schema_version WHERE version > 8")
    emb = Counting(embedder)
    with caplog.at_level(logging.WARNING, logger="memfrontier.store.seam"):
        s = PostgresStore(dsn, emb, directory=tmp_path / "v8")
    assert s.schema_version() == SCHEMA_VERSION == 9 and emb.texts == 7
    assert "7 record vectors embedded, 2 chunk vectors derived from them (record-mean-v1)" in caplog.text
    assert_chunks_derived(s, embedder, ANA)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'chunk_vectors'").fetchone()[0] == CHUNK_VECTORS
        idx = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'chunks'").fetchall())
        assert "USING hnsw (embedding vector_cosine_ops)" in idx["chunks_embedding"]
    assert s.delete("t0", ANA) is True  # a record's vector goes with it (foreign key)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM record_vectors").fetchone()[0] == 6
    s.close()

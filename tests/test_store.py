"""The store contract, run against both stores (SQLite in a temp directory; PostgreSQL + pgvector
on a real embedded server, see ``pg_server`` in conftest.py) with the real MiniLM embedder.
Tests that take ``store`` / ``open_store`` run once per backend; the others check one store's own
mechanics (SQLite's in-memory partitions and bm25s tokenisation, PostgreSQL's schema versions)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from memfrontier.core.errors import EmbeddingMismatchError, StoreError
from memfrontier.core.types import Chunk, ImageRef, Record, Scope
from memfrontier.embed.minilm import MINILM_MODEL_ID, MiniLMEmbedder
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import chunk_recipe
from memfrontier.retrieve.rrf import rrf_fuse
from memfrontier.store.base import MemoryStore
from memfrontier.store.bm25 import bm25_split
from memfrontier.store.postgres import PostgresStore
from memfrontier.store.records import chunk_vector, encode
from memfrontier.store.sqlite import SQLiteStore

A = Scope(user_id="alice")
B = Scope(user_id="bob")
ROOT = Path(__file__).resolve().parents[1]


class CountingEmbedder:
    """Wraps the real MiniLM; counts encode calls/texts. model_id/dim may be overridden to
    simulate a store built by another model (the vectors stay real MiniLM vectors)."""

    def __init__(self, inner: MiniLMEmbedder, model_id: str | None = None, dim: int | None = None):
        self.inner = inner
        self.model_id = model_id or inner.model_id
        self.dim = dim or inner.dim
        self.calls = 0
        self.texts = 0
        self.batches: list[list[str]] = []

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        self.batches.append(list(texts))
        return self.inner.encode(texts)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


@pytest.fixture
def emb(minilm):
    return CountingEmbedder(minilm)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    return request.param


@pytest.fixture
def open_store(backend, tmp_path, request):
    """``open_store(name, embedder, **kw)``: (re)open the store called ``name`` of this test on the
    backend (a directory under tmp_path, or a fresh database of the embedded PostgreSQL server)."""
    opened = []

    def make(name, embedder, **kw):
        if backend == "sqlite":
            s = SQLiteStore(tmp_path / name, embedder, **kw)
        else:
            s = PostgresStore(request.getfixturevalue("pg_database")(name), embedder, directory=tmp_path / name, **kw)
        opened.append(s)
        return s

    def opener(name):
        """Python source that opens the same store in another process (embedder ``MiniLMEmbedder()``)."""
        if backend == "sqlite":
            return f"SQLiteStore({str(tmp_path / name)!r}, MiniLMEmbedder())"
        dsn = request.getfixturevalue("pg_database")(name)
        return f"PostgresStore({dsn!r}, MiniLMEmbedder(), directory={str(tmp_path / name)!r})"

    make.opener = opener
    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(open_store, emb):
    return open_store("mem", emb)


def search(store, query, scope, k=10, retrievers=("dense", "bm25")):
    return hybrid_search(store, query, scope, chunk_recipe(retrievers), k)


def turn(i, text, *, scope=A, session="s1", speaker="Ann", ts="2023-05-08T13:56:00", **kw):
    return Record(
        id=f"{scope.user_id}:{session}:{i}",
        scope=scope,
        session_id=session,
        speaker=speaker,
        timestamp=ts,
        text=text,
        **kw,
    )


ALICE = [
    turn(1, "I adopted a golden retriever puppy named Biscuit last week."),
    turn(2, "We went hiking at Mount Rainier and saw marmots."),
    turn(3, "My sister is getting married in Lisbon next spring.", session="s2", ts="2023-06-01T10:00:00"),
    turn(4, "I started learning the cello; practice is hard.", session="s2", ts="2023-06-01T10:00:00"),
]
BOB = [
    turn(1, "I adopted a black kitten named Pepper.", scope=B, speaker="Bob"),
    turn(2, "Bob went hiking in the Alps with his brother.", scope=B, speaker="Bob"),
]


def chunk_of(store, record_id):
    return [c for c in store.chunks(Scope()) if record_id in c.record_ids]


def test_protocol_and_layout(store, tmp_path, backend):
    assert isinstance(store, MemoryStore)
    res = store.add(ALICE + BOB)
    assert sorted(res.added) == sorted(r.id for r in ALICE + BOB)
    assert res.skipped == [] and res.chunks_built == 3 and res.chunks_embedded == 3
    assert (tmp_path / "mem" / "store.db").is_file() == (backend == "sqlite")
    hits = search(store, "puppy", A, k=5)
    assert hits and hits[0].chunk.record_ids == ["alice:s1:1", "alice:s1:2"]
    assert store.view_dir("banks") == tmp_path / "mem" / "banks" and (tmp_path / "mem" / "banks").is_dir()
    assert store.directory == tmp_path / "mem"
    with pytest.raises(ValueError, match="view name"):
        store.view_dir("../escape")
    assert store.count() == {"records": 6, "chunks": 3, "vectors": 3}


def test_hybrid_scores_are_rrf_of_the_two_rankings(store):
    store.add(ALICE + BOB)
    q = "hiking marmots"
    hits = search(store, q, Scope(), k=3)
    dense = [c.id for c, _ in store.search_dense(q, Scope(), k=50)]
    bm25 = [c.id for c, _ in store.search_bm25(q, Scope(), k=50)]
    expected = rrf_fuse({"dense": dense, "bm25": bm25}, k=60, top_n=3)
    assert [(h.chunk.id, h.score, h.ranks) for h in hits] == [(d, pytest.approx(s), r) for d, s, r in expected]
    top = hits[0]
    assert top.ranks == {"dense": 1, "bm25": 1}
    assert top.score == pytest.approx(2 / 61)
    only_bm25 = search(store, q, Scope(), k=3, retrievers=("bm25",))
    assert all(set(h.ranks) == {"bm25"} for h in only_bm25)
    with pytest.raises(ValueError):
        search(store, q, Scope(), retrievers=("sparse",))


def test_idempotent_ingest_does_not_reembed(store, emb):
    first = store.add(ALICE)
    calls, texts = emb.calls, emb.texts
    # each record encoded once (one batched call); the two chunks' vectors derived from them
    assert calls == 1 and texts == first.records_embedded == 4 and first.chunks_embedded == 2
    again = store.add(ALICE)
    assert again.added == [] and sorted(again.skipped) == sorted(r.id for r in ALICE)
    assert again.chunks_built == 0 and again.chunks_embedded == 0 and again.records_embedded == 0
    assert (emb.calls, emb.texts) == (calls, texts)
    # duplicates inside one batch: first wins, the rest counted as skipped
    dup = store.add([BOB[0], BOB[0]])
    assert dup.added == [BOB[0].id] and dup.skipped == [BOB[0].id]
    assert store.count()["records"] == 5


def test_encode_in_batches_longest_first_keeps_the_order(minilm):
    """With a batch callback, texts go to the embedder in its own batches (longest first, as
    sentence-transformers orders them); vectors come back in the caller's order."""
    emb = CountingEmbedder(minilm)
    emb.batch_size = 2
    texts = ["a cat", "the long river flows past the old mill", "green tea"]
    seen = []
    vecs = encode(emb, texts, on_batch=seen.append)
    assert emb.batches == [[texts[1], texts[2]], [texts[0]]] and seen == [[1, 2], [0]]
    np.testing.assert_allclose(vecs, minilm.encode(texts), atol=1e-5)
    assert encode(emb, []).shape == (0, minilm.dim) and emb.calls == 2


def test_add_reports_embedding_progress_in_records(open_store, minilm):
    """progress(done, total) counts the records (turns) being embedded: 0 first, then after each
    embedder batch; nothing when nothing is embedded. (Before record vectors it counted the records
    of the chunks being encoded, a re-chunked session's stored ones included: now only new records
    are encoded, the chunks' vectors derived.)"""
    emb = CountingEmbedder(minilm)
    emb.batch_size = 1  # one record per batch: six records, three chunks of two records each
    store = open_store("p", emb)
    seen = []
    res = store.add(ALICE + BOB, progress=lambda done, total: seen.append((done, total)))
    assert res.chunks_embedded == 3 and res.records_embedded == 6 and emb.calls == 6
    assert seen == [(i, 6) for i in range(7)]
    seen.clear()
    assert store.add(ALICE + BOB, progress=lambda *a: seen.append(a)).added == [] and seen == []
    res = store.add(
        [turn(5, "The cello teacher moved to Porto.", session="s2", ts="2023-06-01T10:00:00")],
        progress=lambda *a: seen.append(a),
    )
    # session s2 re-chunked (its one chunk now holds three records): only the new record is encoded
    assert seen == [(0, 1), (1, 1)] and res.chunks_embedded == 1 and emb.calls == 7
    assert store.count() == {"records": 7, "chunks": 3, "vectors": 3}


def test_incremental_add_reuses_vectors_of_unchanged_chunks(store, emb):
    long_session = [
        turn(i, f"Turn {i}: we talked about the garden, tomatoes, basil and the weather in Seattle today.")
        for i in range(40)
    ]
    store.add(long_session)
    before = {c.id for c in store.chunks(A)}
    assert len(before) >= 3
    texts0 = emb.texts
    res = store.add([turn(100, "Oh, and I bought a telescope.")])
    after = {c.id for c in store.chunks(A)}
    # the new record alone is encoded; the chunk it joins gets a vector derived from its records'
    assert res.chunks_built == 1 and res.chunks_embedded == 1 and emb.texts == texts0 + 1
    assert len(before - after) == 1 and len(after - before) == 1  # only the last chunk changed
    assert store.count() == {"records": 41, "chunks": len(after), "vectors": len(after)}


def test_a_record_joining_the_open_chunk_costs_one_encode_and_a_mean(store, emb, minilm):
    """The turns of a session added one by one (an agent's chat): each add encodes its one record,
    never the open chunk they all join (before record vectors, that chunk's whole text was encoded
    again on every add); the chunk's vector is the token-weighted mean of the records' stored
    vectors, as one add of the whole session derives it."""
    turns = [turn(i, f"Turn {i}: the garden needs water, said the neighbour about the roses.") for i in range(8)]
    for t in turns:
        res = store.add([t])
        assert (res.records_embedded, res.chunks_built, res.chunks_embedded) == (1, 1, 1)
    assert emb.calls == 8 and emb.texts == 8
    [ch] = store.chunks(A)
    vecs = store.record_vectors(A, ch.record_ids)
    assert vecs.shape == (8, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(vecs, minilm.encode([t.render() for t in turns]), atol=1e-5)
    want = chunk_vector(vecs, [minilm.count_tokens(t.render()) for t in turns], 254)
    top, cos = store.search_dense("", A, 1, query_vector=want)[0]
    assert top.id == ch.id and cos == pytest.approx(1.0, abs=1e-6)


def n_record_vectors(store) -> int:
    with store._read_tx() as c:
        return int(c.execute("SELECT count(*) FROM record_vectors").fetchone()[0])


def test_record_vectors_are_read_in_their_own_scope_and_go_with_deletes(store, minilm):
    mine = Record(id="x", scope=A, session_id="s1", speaker="Ann", text="I keep bees on the roof.")
    theirs = Record(id="x", scope=B, session_id="s1", speaker="Bob", text="I race pigeons on weekends.")
    store.add(ALICE + BOB + [mine, theirs])
    assert n_record_vectors(store) == 8
    # the same id in two scopes: each scope reads its own record's vector
    np.testing.assert_allclose(store.record_vectors(A, ["x"])[0], minilm.encode([mine.render()])[0], atol=1e-5)
    np.testing.assert_allclose(store.record_vectors(B, ["x"])[0], minilm.encode([theirs.render()])[0], atol=1e-5)
    assert store.record_vectors(A, []).shape == (0, 384)
    with pytest.raises(KeyError, match="alice:s1:1"):
        store.record_vectors(B, ["alice:s1:1"])  # another scope's record
    with pytest.raises(KeyError):
        store.record_vectors(Scope(user_id="alice", agent_id="a1"), ["x"])  # an exact scope: not alice's own
    assert store.delete("x", A) is True
    with pytest.raises(KeyError):
        store.record_vectors(A, ["x"])
    assert store.record_vectors(B, ["x"]).shape == (1, 384) and n_record_vectors(store) == 7
    assert store.delete_all(B) == 3 and n_record_vectors(store) == 4
    with pytest.raises(KeyError):
        store.record_vectors(B, ["x"])


def test_reopen_keeps_everything_and_does_not_reembed(open_store, minilm):
    s1 = open_store("m", CountingEmbedder(minilm))
    s1.add(ALICE + BOB)
    before = (s1.chunks(Scope()), s1.records(Scope()), s1.search_bm25("cello", A, 3))
    s1.close()
    e2 = CountingEmbedder(minilm)
    s2 = open_store("m", e2)
    assert (s2.chunks(Scope()), s2.records(Scope()), s2.search_bm25("cello", A, 3)) == before
    assert s2.add(ALICE).added == [] and e2.calls == 0
    dense = search(s2, "Biscuit the golden retriever", A, k=1)
    assert e2.calls == 1 and e2.texts == 1  # only the query was embedded
    assert "alice:s1:1" in dense[0].chunk.record_ids


def test_sqlite_reopen_loads_partitions_lazily(tmp_path, minilm):
    e1 = CountingEmbedder(minilm)
    s1 = SQLiteStore(tmp_path / "m", e1)
    s1.add(ALICE + BOB)
    assert [c.id for c, _ in s1.search_bm25("cello", A, 3)] == [chunk_of(s1, "alice:s2:4")[0].id]
    assert s1.stats["bm25_builds"] == 1
    s1.close()

    e2 = CountingEmbedder(minilm)
    s2 = SQLiteStore(tmp_path / "m", e2)
    assert e2.calls == 0
    hits = s2.search_bm25("cello", A, 3)
    assert [c.record_ids for c, _ in hits] == [["alice:s2:3", "alice:s2:4"]]
    assert s2.stats["bm25_builds"] == 1 and s2.stats["partition_loads"] == 2  # alice's and bob's scopes
    s2.add(ALICE)
    assert e2.calls == 0  # still nothing to embed
    dense = search(s2, "Biscuit the golden retriever", A, k=1)
    assert e2.calls == 1 and e2.texts == 1  # only the query was embedded
    assert "alice:s1:1" in dense[0].chunk.record_ids
    s2.close()


def test_scope_isolation_for_both_retrievers(store):
    store.add(ALICE + BOB)
    for q in ["adopted a pet named", "hiking", "kitten Pepper", "Alps brother"]:
        for retr in [("dense",), ("bm25",), ("dense", "bm25")]:
            hits = search(store, q, A, k=10, retrievers=retr)
            assert all(h.chunk.scope.user_id == "alice" for h in hits), (q, retr)
            hits = search(store, q, B, k=10, retrievers=retr)
            assert all(h.chunk.scope.user_id == "bob" for h in hits), (q, retr)
    # a word only Bob said is found for Bob and never for Alice
    assert store.search_bm25("Pepper", A, 10) == []
    assert [c.scope.user_id for c, _ in store.search_bm25("Pepper", B, 10)] == ["bob"]
    assert {h.chunk.scope.user_id for h in search(store, "hiking", Scope(), k=10)} == {"alice", "bob"}
    assert all(c.scope.user_id == "alice" for c, _ in store.search_dense("kitten", A, 10))
    assert search(store, "hiking", Scope(user_id="nobody"), k=5) == []
    assert {r.id for r in store.records(B)} == {r.id for r in BOB}


def test_delete_reaches_every_index(store):
    store.add(ALICE + BOB)
    victim = turn(9, "The secret password is zanzibarquokka, remember it.", session="s1")
    store.add([victim])
    q = "zanzibarquokka"
    assert [c.record_ids for c, _ in store.search_bm25(q, A, 5)][0] == ["alice:s1:1", "alice:s1:2", victim.id]
    assert victim.id in store.search_dense("secret password zanzibarquokka", A, 1)[0][0].record_ids
    n_before = store.count()

    assert store.delete(victim.id, B) is False  # ids are per scope: bob cannot reach alice's record
    assert store.delete(victim.id, A) is True
    assert store.delete(victim.id, A) is False
    assert store.get([victim.id], Scope()) == []
    assert chunk_of(store, victim.id) == []
    assert all("zanzibarquokka" not in c.text for c in store.chunks(Scope()))
    assert store.search_bm25(q, Scope(), 5) == []
    top = store.search_dense("secret password zanzibarquokka", Scope(), 1)[0][0]
    assert victim.id not in top.record_ids and "zanzibarquokka" not in top.text
    assert all(victim.id not in h.chunk.record_ids for h in search(store, q, Scope(), k=10))
    assert store.count() == {
        "records": n_before["records"] - 1,
        "chunks": n_before["chunks"],
        "vectors": n_before["chunks"],
    }
    # the rest of the session is still there, re-chunked
    assert [c.record_ids for c in store.chunks(A) if c.session_id == "s1"] == [["alice:s1:1", "alice:s1:2"]]


def test_delete_all(store):
    store.add(ALICE + BOB)
    with pytest.raises(ValueError):
        store.delete_all(Scope())
    assert store.delete_all(A) == 4
    assert store.records(A) == [] and store.chunks(A) == []
    assert search(store, "puppy Biscuit", A, k=5) == []
    assert store.search_bm25("Biscuit", Scope(), 5) == []
    assert {r.id for r in store.records(Scope())} == {r.id for r in BOB}
    assert store.count() == {"records": 2, "chunks": 1, "vectors": 1}
    assert store.delete_all(A) == 0


@pytest.fixture
def sqlite_store(tmp_path, emb):
    s = SQLiteStore(tmp_path / "mem", emb)
    yield s
    s.close()


def test_non_ascii_found_by_bm25(sqlite_store):
    store = sqlite_store
    recs = [
        turn(1, "Nous avons bu un café crème à la crêperie de Montréal.", session="fr"),
        turn(2, "我喜欢吃寿司，特别是三文鱼。", session="zh"),
        turn(3, "東京タワーに行きました", session="ja"),
        turn(4, "Dinner was 🍕🍕 and then 🎉 with friends", session="emoji"),
        turn(5, "Die Straße in München war gesperrt.", session="de"),
        turn(6, "오늘 서울에서 친구를 만났어요", session="ko"),
    ]
    store.add(recs)

    def top(q):
        hits = store.search_bm25(q, A, 3)
        return hits[0][0].session_id if hits else None

    assert top("cafe creperie") == "fr"  # accent-insensitive
    assert top("Montréal") == "fr"
    assert top("寿司") == "zh"  # a word inside an unspaced CJK sentence
    assert top("三文鱼") == "zh"
    assert top("東京") == "ja"
    assert top("🍕") == "emoji"
    assert top("🎉") == "emoji"
    assert top("strasse munchen") == "de"
    assert top("서울에서") == "ko"
    # hybrid search finds them too
    assert search(store, "寿司", A, k=1)[0].chunk.session_id == "zh"
    assert search(store, "🍕", A, k=1, retrievers=("bm25",))[0].chunk.session_id == "emoji"


def test_bm25_split():
    assert bm25_split("我喜欢寿司") == ["我", "喜", "欢", "寿", "司", "我喜", "喜欢", "欢寿", "寿司"]
    assert bm25_split("café naïve Straße 7 x 👍🏽") == ["cafe", "naive", "strasse", "7", "👍"]


def test_empty_and_stopword_queries(store):
    store.add(ALICE)
    assert store.search_bm25("", A, 5) == []
    assert store.search_bm25("   ", A, 5) == []
    assert store.search_bm25("the and of is", A, 5) == []
    assert store.search_bm25("xylophoneunseenword", A, 5) == []
    assert search(store, "", A, 5) == []
    assert search(store, "the and of", A, 5, retrievers=("bm25",)) == []
    assert len(search(store, "the and of", A, 5)) == 2  # dense still answers


def test_empty_store_search(store):
    assert search(store, "anything", A, 5) == []
    assert store.search_bm25("anything", Scope(), 5) == []


def test_empty_record_rejected_atomically(store):
    good = turn(1, "hello there")
    bad = turn(2, "   \n ")
    with pytest.raises(ValueError, match="alice:s1:2"):
        store.add([good, bad])
    assert store.count() == {"records": 0, "chunks": 0, "vectors": 0}
    # an image-only record is fine
    img = turn(3, "", images=[ImageRef(id="img1", caption="a dog on a beach")])
    assert store.add([img]).added == [img.id]
    assert store.search_bm25("beach", A, 1)[0][0].record_ids == [img.id]


def test_records_chronological_get_and_chunks(store):
    late = turn(1, "later session", session="s9", ts="2023-07-01T09:00:00")
    early = turn(2, "earlier session", session="s8", ts="2023-05-01T09:00:00")
    mid_a = turn(3, "middle a", session="s7", ts="2023-06-01T09:00:00")
    mid_b = turn(4, "middle b", session="s7", ts="2023-06-01T09:00:00")
    store.add([late, mid_a])
    store.add([early, mid_b])
    assert [r.id for r in store.records(A)] == [early.id, mid_a.id, mid_b.id, late.id]
    assert [r.id for r in store.records(A, session_id="s7")] == [mid_a.id, mid_b.id]
    assert [r.id for r in store.get([late.id, "nope", early.id], A)] == [late.id, early.id]
    assert store.get([early.id], A)[0] == early  # round trip of every field
    assert store.get([early.id], B) == []
    chunks = store.chunks(A)
    assert [c.session_id for c in chunks] == ["s8", "s7", "s9"]
    assert [c.timestamp for c in chunks] == [
        "2023-05-01T09:00:00+00:00",
        "2023-06-01T09:00:00+00:00",
        "2023-07-01T09:00:00+00:00",
    ]
    assert chunks[1].record_ids == [mid_a.id, mid_b.id]


def test_embedding_mismatch(open_store, minilm):
    s = open_store("m", minilm)
    s.add(ALICE)
    s.close()
    other = CountingEmbedder(minilm, model_id="acme/other-embedder")
    with pytest.raises(EmbeddingMismatchError, match="sentence-transformers/all-MiniLM-L6-v2.*acme/other-embedder"):
        open_store("m", other)
    with pytest.raises(EmbeddingMismatchError, match="dim 128"):
        open_store("m", CountingEmbedder(minilm, dim=128))
    assert other.calls == 0
    s2 = open_store("m", other, reembed=True)
    assert other.texts == 4  # every record re-embedded (the two chunks' vectors derived from them)
    assert s2.search_dense("cello", A, 1)[0][0].session_id == "s2"
    s2.close()
    # now the store belongs to the new id; the original one mismatches
    with pytest.raises(EmbeddingMismatchError):
        open_store("m", minilm)
    assert MiniLMEmbedder.model_id == MINILM_MODEL_ID


def test_chunk_tokens_recorded(open_store, minilm):
    open_store("m", minilm, chunk_tokens=128).close()
    with pytest.raises(StoreError, match="chunk_tokens=128"):
        open_store("m", minilm)


def test_corrupt_db_raises_store_error_with_path(tmp_path, minilm):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "store.db").write_bytes(os.urandom(4096))
    with pytest.raises(StoreError) as ei:
        SQLiteStore(d, minilm)
    assert str(d / "store.db") in str(ei.value)


def test_two_threads_add_concurrently(store):
    shared = [turn(1000 + i, f"shared fact number {i} about astronomy", session="shared") for i in range(10)]
    t1 = [turn(i, f"thread one says item {i} about gardening", session=f"t1-{i % 3}") for i in range(30)] + shared
    t2 = [turn(100 + i, f"thread two says item {i} about cooking", session=f"t2-{i % 3}") for i in range(30)] + shared
    errors = []

    def work(recs):
        try:
            for b in range(0, len(recs), 8):
                store.add(recs[b : b + 8])
        except Exception as e:  # pragma: no cover - surfaced below
            errors.append(e)

    ths = [threading.Thread(target=work, args=(t,)) for t in (t1, t2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert errors == []
    want = {r.id for r in t1 + t2}
    got = [r.id for r in store.records(Scope())]
    assert len(got) == len(want) == 70 and set(got) == want
    in_chunks = [rid for c in store.chunks(Scope()) for rid in c.record_ids]
    assert sorted(in_chunks) == sorted(want)  # each record in exactly one chunk
    counts = store.count()
    assert counts["vectors"] == counts["chunks"]


CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {src!r})
    from memfrontier.core.types import Record, Scope
    from memfrontier.embed.minilm import MiniLMEmbedder
    from memfrontier.store.postgres import PostgresStore
    from memfrontier.store.sqlite import SQLiteStore
    s = {opener}
    s.embedder.encode(["warm up"])
    print("READY", flush=True)
    sys.stdin.readline()
    recs = [Record(id=f"child:{{i}}", scope=Scope(user_id="child"), session_id=f"c{{i % 4}}", text=f"child process fact {{i}} about volcanoes")
            for i in range(40)]
    recs += [Record(id=f"both:{{i}}", scope=Scope(user_id="both"), session_id="b", text=f"written by both {{i}}") for i in range(10)]
    for b in range(0, len(recs), 5):
        s.add(recs[b:b + 5])
    s.close()
    print("DONE", flush=True)
    """
)


def test_second_process_writes_same_store(open_store, minilm):
    parent = open_store("shared", minilm)
    parent.add(ALICE)
    script = CHILD.format(src=str(ROOT / "src"), opener=open_store.opener("shared"))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        mine = [
            Record(
                id=f"parent:{i}",
                scope=Scope(user_id="parent"),
                session_id=f"p{i % 4}",
                text=f"parent fact {i} about glaciers",
            )
            for i in range(40)
        ]
        mine += [
            Record(id=f"both:{i}", scope=Scope(user_id="both"), session_id="b", text=f"written by both {i}")
            for i in range(10)
        ]
        for b in range(0, len(mine), 5):
            parent.add(mine[b : b + 5])
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "DONE" in out
    finally:
        if proc.poll() is None:
            proc.kill()
    recs = parent.records(Scope())
    ids = [r.id for r in recs]
    assert len(ids) == len(set(ids)) == 4 + 40 + 40 + 10
    in_chunks = [rid for c in parent.chunks(Scope()) for rid in c.record_ids]
    assert sorted(in_chunks) == sorted(ids)
    assert parent.count()["vectors"] == parent.count()["chunks"]
    # the parent's in-memory indexes pick up the child's writes
    assert parent.search_bm25("volcanoes", Scope(user_id="child"), 1)[0][0].scope.user_id == "child"
    assert search(parent, "volcanoes", Scope(user_id="parent"), k=3)[0].chunk.scope.user_id == "parent"
    parent.close()


CRASH_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {src!r})
    from memfrontier.core.types import Record, Scope
    from memfrontier.embed.minilm import MiniLMEmbedder
    from memfrontier.store.postgres import PostgresStore
    from memfrontier.store.sqlite import SQLiteStore
    s = {opener}
    s.embedder.encode(["warm up"])
    for b in range(10000):
        s.add([Record(id=f"k:{{b}}:{{i}}", scope=Scope(user_id="crash"), session_id=f"s{{b % 3}}",
                      text=f"batch {{b}} item {{i}} about comets and the Kuiper belt") for i in range(5)])
        print(f"OK {{b}}", flush=True)
    """
)


def test_kill_9_during_ingest_keeps_whole_batches(open_store, minilm):
    first = open_store("crash", minilm)
    first.add(ALICE)
    first.close()
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD.format(src=str(ROOT / "src"), opener=open_store.opener("crash"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked = -1
    try:
        for line in proc.stdout:  # a few batches committed, then killed while it writes the next one
            acked = int(line.split()[1])
            if acked >= 4:
                break
        proc.kill()  # SIGKILL: no handler, no rollback by the client
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert acked >= 4, proc.stderr.read()
    s = open_store("crash", minilm)
    crash = Scope(user_id="crash")
    batches: dict[str, int] = {}
    for r in s.records(crash):
        batches[r.id.split(":")[1]] = batches.get(r.id.split(":")[1], 0) + 1
    assert set(batches.values()) == {5}  # every batch whole or absent
    assert {str(b) for b in range(acked + 1)} <= set(batches)  # every acknowledged batch present
    ids = sorted(r.id for r in s.records(Scope()))
    assert sorted(rid for c in s.chunks(Scope()) for rid in c.record_ids) == ids
    assert s.count() == {"records": len(ids), "chunks": len(s.chunks(Scope())), "vectors": len(s.chunks(Scope()))}
    late = Record(id="after", scope=crash, session_id="s9", text="written after the crash about comets")
    assert s.add([late]).added == ["after"]  # writable again
    assert late.id in search(s, "written after the crash", crash, k=1)[0].chunk.record_ids


def test_vectors_are_unit_float32(store, minilm):
    store.add(ALICE)
    recs = {r.id: r for r in ALICE}
    for ch in store.chunks(A):
        # the stored vector is the token-weighted mean of the chunk's records' unit embeddings,
        # normalised (records.chunk_vector; it replaced the embedding of the chunk's text, which the
        # lab note measured at equal LoCoMo recall): cosine 1 with that vector computed here
        texts = [recs[i].render() for i in ch.record_ids]
        want = chunk_vector(minilm.encode(texts), [minilm.count_tokens(t) for t in texts], 254)
        assert np.linalg.norm(want) == pytest.approx(1.0, abs=1e-6)
        top, cos = store.search_dense("", A, 1, query_vector=want)[0]
        assert top.id == ch.id and cos == pytest.approx(1.0, abs=1e-5)
        # and close to, not equal to, the embedding of the chunk's text
        _, cos_text = store.search_dense("", A, 1, query_vector=minilm.encode([ch.text])[0])[0]
        assert 0.8 < cos_text < 0.999
    enc = minilm.encode(["a", "b"])
    assert enc.shape == (2, 384) and enc.dtype == np.float32
    assert minilm.encode([]).shape == (0, 384)


def test_write_path_embeds_inside_the_transaction_when_the_optimistic_pass_missed(sqlite_store, emb, monkeypatch):
    store = sqlite_store
    # simulate a concurrent writer that changed the records between the two passes: the encoding
    # before the write lock (the first _vectors_for call of the add) gives nothing, so the
    # transaction must embed the records it inserts by itself
    real, calls = store._vectors_for, []

    def first_pass_misses(records, known, progress=None):
        calls.append(len(records))
        return [] if len(calls) == 1 else real(records, known, progress)

    monkeypatch.setattr(store, "_vectors_for", first_pass_misses)
    res = store.add(ALICE)
    assert res.chunks_embedded == 2 and emb.texts == 4 and calls[:2] == [4, 4]
    assert store.delete("alice:s2:4", A) is True  # re-chunked s2 -> one new chunk, its vector derived
    assert emb.texts == 4  # nothing encoded: the vector comes from the remaining record's
    assert store.count() == {"records": 3, "chunks": 2, "vectors": 2}
    assert store.search_bm25("cello", A, 5) == []
    assert store.search_bm25("Lisbon", A, 1)[0][0].record_ids == ["alice:s2:3"]


# -- PostgreSQL's own mechanics ---------------------------------------------------------------


def test_postgres_schema_is_versioned_and_a_newer_one_refused(pg_database, tmp_path, minilm):
    import psycopg

    from memfrontier.store.postgres_schema import MIGRATIONS, SCHEMA_VERSION

    dsn = pg_database("v")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "v")
    assert s.schema_version() == SCHEMA_VERSION == max(MIGRATIONS)
    s.add(ALICE)
    s.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY version")] == sorted(MIGRATIONS)
        idx = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'chunks'").fetchall())
        assert "USING hnsw (embedding vector_cosine_ops)" in idx["chunks_embedding"]
        assert "chunks_tsv" not in idx  # schema 5: BM25 reads the postings, nothing used the GIN index
        idx = dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'postings'").fetchall())
        assert idx["postings_lexeme"].endswith("(lexeme, user_id, agent_id, run_id) INCLUDE (chunk_id, tf, dl)")
        assert idx["postings_chunk_lexeme"].startswith("CREATE UNIQUE INDEX")
        assert idx["postings_chunk_lexeme"].endswith("(chunk_id, lexeme)") and "postings_chunk" not in idx
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(
        StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this memfrontier's {SCHEMA_VERSION}"
    ):
        PostgresStore(dsn, minilm, directory=tmp_path / "v")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM schema_version WHERE version = %s", (SCHEMA_VERSION + 1,))
    s = PostgresStore(dsn, minilm, directory=tmp_path / "v")  # reopening a current schema changes nothing
    assert s.count() == {"records": 4, "chunks": 2, "vectors": 2}
    s.close()


def test_postgres_unreachable_is_a_store_error_without_password(tmp_path, minilm):
    with pytest.raises(StoreError, match=r"cannot connect to store database postgresql://u:\*\*\*@") as ei:
        PostgresStore(
            f"postgresql://u:hunter2@/db?host={tmp_path}", minilm, directory=tmp_path / "x", connect_timeout_s=1
        )
    assert "hunter2" not in str(ei.value)


def test_postgres_lexical_side_is_bm25_over_full_text_lexemes(pg_database, tmp_path, minilm):
    import math

    s = PostgresStore(pg_database(), minilm, directory=tmp_path / "fts")
    s.add(
        [
            turn(1, "We hiked to the glaciers near Chamonix.", session="a"),
            turn(2, "The café served crêpes.", session="b"),
            turn(3, "Hiking hiking hiking every weekend, hiking is my life.", session="c"),
            turn(4, "Hiking again.", scope=B, session="d"),
        ]
    )
    # English stemming: "hiking" and "hiked" share the lexeme "hike"; every query lexeme OR-ed
    assert sorted(c.session_id for c, _ in s.search_bm25("hike glaciers", A, 5)) == ["a", "c"]
    # Okapi BM25 by hand, alice's statistics only (bob's chunk changes neither N nor df):
    # N = 3 chunks, df(hike) = 2, lengths = distinct lexemes of each chunk's rendered text
    # ('Ann said, "..."': a = ann said hike glacier near chamonix = 6, b = ann said café serv crêpe = 5,
    # c = ann said hike everi weekend life = 6), avgdl = 17 / 3; tf(hike) = 1 in a, 4 in c
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))

    def bm25(tf, dl):
        return idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * dl / (17 / 3)))

    ranked = s.search_bm25("hiking", A, 5)
    assert [(c.session_id, sc) for c, sc in ranked] == [
        ("c", pytest.approx(bm25(4, 6))),
        ("a", pytest.approx(bm25(1, 6))),
    ]
    # documented difference from bm25s: accents are not folded by PostgreSQL's default parser
    assert s.search_bm25("cafe", A, 5) == [] and [c.session_id for c, _ in s.search_bm25("café", A, 5)] == ["b"]
    s.close()


# Each exact scope's chunks and summed lengths (BM25's N and average length): what ``bm25_scope_stats``
# must hold.
_STATS_TRUTH = (
    "SELECT scope_key, user_id, agent_id, run_id, count(*), sum(tsv_len) FROM chunks GROUP BY 1, 2, 3, 4 ORDER BY 1"
)
_STATS = "SELECT scope_key, user_id, agent_id, run_id, n_chunks, sum_len FROM bm25_scope_stats ORDER BY 1"


def _stats(conn) -> dict[str, tuple[int, int]]:
    rows = conn.execute(_STATS).fetchall()
    assert rows == conn.execute(_STATS_TRUTH).fetchall()
    return {r[0]: (r[4], r[5]) for r in rows}


def _back_to_schema_8(conn) -> None:
    """Undo schema 9 by hand: no record vectors, and the chunk vectors not marked derived from them
    (as a schema-8 store's, the embeddings of the chunks' texts)."""
    conn.execute("DROP TABLE record_vectors")
    conn.execute("DELETE FROM meta WHERE key = 'chunk_vectors'")
    conn.execute("DELETE FROM schema_version WHERE version > 8")


def _back_to_schema_7(conn) -> None:
    """Undo schemas 9 and 8 by hand: no per-scope write counter (triggers, table, sequence)."""
    _back_to_schema_8(conn)
    for event in ("insert", "delete"):
        conn.execute(f"DROP TRIGGER records_scope_gen_{event} ON records")
        conn.execute(f"DROP FUNCTION scope_gen_{event}()")
    conn.execute("DROP TABLE scope_gen")
    conn.execute("DROP SEQUENCE scope_gen_seq")
    conn.execute("DELETE FROM schema_version WHERE version > 7")


def test_postgres_schema_7_store_gets_the_write_counter(pg_database, tmp_path, minilm):
    """Opening a schema-7 database stamps the scopes present; from then on each write moves the
    counter of the scopes it touched only."""
    import psycopg

    dsn = pg_database("v7")
    with PostgresStore(dsn, minilm, directory=tmp_path / "v7") as s:
        s.add(ALICE + BOB)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _back_to_schema_7(conn)
    with PostgresStore(dsn, minilm, directory=tmp_path / "v7") as s:
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert {r[0] for r in conn.execute("SELECT scope_key FROM scope_gen")} == {A.key(), B.key()}
        a, b = s.scope_generation(A), s.scope_generation(B)
        assert a > 0 and b > 0 and a != b and s.scope_generation(Scope()) == a + b
        s.add([turn(9, "Bob's news: a new bike.", scope=B)])
        assert s.scope_generation(A) == a and s.scope_generation(B) > b


def _back_to_schema_6(conn) -> None:
    """Undo schemas 8 and 7 by hand: the BM25 triggers go, ``bm25_scope_stats`` is ``scope_stats`` again."""
    _back_to_schema_7(conn)
    conn.execute("DROP TRIGGER chunks_bm25_insert ON chunks")
    conn.execute("DROP TRIGGER chunks_bm25_delete ON chunks")
    conn.execute("ALTER TABLE bm25_scope_stats RENAME TO scope_stats")
    conn.execute("DELETE FROM schema_version WHERE version > 6")


def test_postgres_scope_stats_follow_every_write_and_a_schema_1_store_gets_them(pg_database, tmp_path, minilm):
    """``bm25_scope_stats`` (each exact scope's chunks and summed lengths: BM25's N and average length)
    equals the chunks' own aggregate after adds, a re-chunk, a delete and a delete_all; a deleted
    scope keeps no row; a schema-1 database gets the table filled from its chunks on open."""
    import psycopg

    from memfrontier.store.postgres_schema import SCHEMA_VERSION

    dsn = pg_database("stats")
    ax = Scope(user_id="alice", agent_id="x")
    stats = _stats
    s = PostgresStore(dsn, minilm, directory=tmp_path / "stats")
    s.add(ALICE + BOB + [turn(1, "Hiking with the agent on Sundays.", scope=ax, session="x1")])
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = stats(conn)
        assert {k: n for k, (n, _) in first.items()} == {A.key(): 2, ax.key(): 1, B.key(): 1}
        s.add([turn(9, "Hiking again, to the glacier this time.")])  # alice's s1 re-chunked: N kept, length grows
        after_add = stats(conn)
        assert after_add[A.key()][0] == 2 and after_add[A.key()][1] > first[A.key()][1]
        assert s.delete("alice:s2:3", A) is True
        stats(conn)
        assert s.delete_all(B) == 2
        assert B.key() not in stats(conn)
    alice = Scope(user_id="alice")  # a partial scope: the statistics of both of alice's scopes summed
    before = [(c.id, sc) for c, sc in s.search_bm25("hiking sister glacier", alice, 10)]
    assert len(before) == 2
    s.close()
    with psycopg.connect(dsn, autocommit=True) as conn:  # back to before schema 3: no scope statistics yet
        _back_to_schema_6(conn)
        conn.execute("DROP TABLE scope_stats")
        conn.execute("DROP TABLE postings")  # nor schema 5's postings; schema 1's GIN index back
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin (tsv)")
        conn.execute("DELETE FROM schema_version WHERE version > 1")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "stats")
    assert s.schema_version() == SCHEMA_VERSION
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('chunks_tsv')").fetchone()[0] is None
        assert set(stats(conn)) == {A.key(), ax.key()}
        assert [(c.id, pytest.approx(sc)) for c, sc in s.search_bm25("hiking sister glacier", alice, 10)] == before
        assert s.delete_all(alice) == 5
        assert stats(conn) == {}
    s.close()


# The postings of the chunks present, from their tsvectors: what the ``postings`` table must hold.
_POSTINGS_TRUTH = (
    "SELECT t.lexeme, c.user_id, c.agent_id, c.run_id, c.id, cardinality(t.positions), c.tsv_len "
    "FROM chunks c, unnest(c.tsv) AS t WHERE octet_length(t.lexeme) <= 256 ORDER BY 1, 2, 3, 4, 5"
)
_POSTINGS = "SELECT lexeme, user_id, agent_id, run_id, chunk_id, tf, dl FROM postings ORDER BY 1, 2, 3, 4, 5"


def _postings(conn) -> list[tuple]:
    rows = conn.execute(_POSTINGS).fetchall()
    assert rows == conn.execute(_POSTINGS_TRUTH).fetchall()
    return rows


def test_postgres_bm25_reads_postings_that_follow_every_write(pg_database, tmp_path, minilm):
    """BM25 from the ``postings`` table equals Okapi BM25 computed by hand (an exact scope and a
    partial one: the statistics of the scopes it covers, no other user's), and the postings stay
    exactly the chunks' lexemes through a re-chunk, a delete and a delete_all (no stale row)."""
    import math

    import psycopg

    x, y, v = Scope(user_id="u", agent_id="x"), Scope(user_id="u", agent_id="y"), Scope(user_id="v")
    s = PostgresStore(pg_database("postings"), minilm, directory=tmp_path / "postings")
    s.add(
        [
            turn(1, "Kayaks kayak kayaking.", scope=x, session="a"),  # ann said kayak(tf 3): dl 3
            turn(2, "Lisbon trams.", scope=x, session="b"),  # ann said lisbon tram: dl 4
            turn(3, "Kayak trip to Lisbon.", scope=y, session="c"),  # ann said kayak trip lisbon: dl 5
            turn(4, "Kayak kayak.", scope=v, session="d"),
        ]
    )  # ann said kayak: dl 3, another user

    def bm25(n, df, tf, dl, avgdl):
        return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * dl / avgdl))

    # user u (partial scope, x and y): N = 3, avgdl = (3 + 4 + 5) / 3 = 4, df(kayak) = 2
    assert [(c.session_id, sc) for c, sc in s.search_bm25("kayaking", Scope(user_id="u"), 5)] == [
        ("a", pytest.approx(bm25(3, 2, 3, 3, 4), rel=1e-12)),
        ("c", pytest.approx(bm25(3, 2, 1, 5, 4), rel=1e-12)),
    ]
    # exact scope x: N = 2, avgdl = 3.5, df(kayak) = df(lisbon) = 1; k = 1 keeps the best only
    assert [(c.session_id, sc) for c, sc in s.search_bm25("kayak in Lisbon", x, 5)] == [
        ("a", pytest.approx(bm25(2, 1, 3, 3, 3.5), rel=1e-12)),
        ("b", pytest.approx(bm25(2, 1, 1, 4, 3.5), rel=1e-12)),
    ]
    assert [c.session_id for c, _ in s.search_bm25("kayak in Lisbon", x, 1)] == ["a"]
    assert s.search_bm25("the of to", x, 5) == []  # stopwords only: no lexeme

    with psycopg.connect(s.dsn, autocommit=True) as conn:
        assert len(_postings(conn)) == 3 + 4 + 5 + 3
        old_a = [c.id for c in s.chunks(x) if c.session_id == "a"]
        s.add([turn(5, "More kayaks.", scope=x, session="a")])  # session a re-chunked: kayak tf 4, dl 3
        assert conn.execute("SELECT count(*) FROM postings WHERE chunk_id = ANY(%s)", (old_a,)).fetchone()[0] == 0
        assert len(_postings(conn)) == 15
        assert conn.execute("SELECT tf, dl FROM postings WHERE lexeme = 'kayak' AND agent_id = 'x'").fetchall() == [
            (4, 3)
        ]
        assert s.delete("u:b:2", x) is True  # chunk b gone with its 4 postings
        assert len(_postings(conn)) == 11
        assert s.delete_all(Scope(user_id="u")) == 3
        assert {r[1] for r in _postings(conn)} == {"v"} and len(_postings(conn)) == 3
    assert [c.session_id for c, _ in s.search_bm25("kayak", v, 5)] == ["d"]
    s.close()


# The BM25 statement of schema 4 (GIN index on tsv, each candidate's tsvector unnested), kept as the
# reference the postings must reproduce. Parameters: scope params, lexemes, tsquery text, scope params.
_BM25_V4 = """
WITH st AS (SELECT COALESCE(sum(n_chunks), 0)::float8 AS n,
                   COALESCE(sum(sum_len)::float8 / NULLIF(sum(n_chunks), 0), 1) AS avgdl
            FROM scope_stats WHERE {where}),
m AS (SELECT c.id, c.tsv_len, c.timestamp, c.first_seq, ts_filter(setweight(c.tsv, 'A', %s), '{{a}}') AS hits
      FROM chunks c, websearch_to_tsquery('simple', %s) AS q WHERE c.tsv @@ q AND {where}),
h AS (SELECT m.id, m.tsv_len AS dl, m.timestamp, m.first_seq, cardinality(t.positions)::float8 AS tf,
             count(*) OVER (PARTITION BY t.lexeme)::float8 AS df
      FROM m, unnest(m.hits) AS t),
top AS (SELECT h.id, sum(ln(1 + (st.n - h.df + 0.5) / (h.df + 0.5)) * h.tf * 2.5
                         / (h.tf + 1.5 * (0.25 + 0.75 * h.dl / GREATEST(st.avgdl, 1)))) AS score
        FROM h CROSS JOIN st GROUP BY h.id, h.timestamp, h.first_seq
        ORDER BY score DESC, h.timestamp IS NOT NULL, h.timestamp, h.first_seq, h.id)
SELECT top.id, top.score FROM top
"""


def test_postgres_schema_4_store_gets_postings_and_the_same_bm25(pg_database, tmp_path, minilm):
    """A store with data at schema 4 (no postings, GIN index on tsv) is migrated to 5 on open: the
    postings are built from its chunks, the GIN index dropped, and every BM25 search ranks and scores
    as schema 4's statement did on the same rows (exact and partial scopes)."""
    import psycopg

    from memfrontier.store.postgres_schema import SCHEMA_VERSION
    from memfrontier.store.seam import scope_where

    ax = Scope(user_id="alice", agent_id="x")
    dsn = pg_database("v4")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "v4")
    s.add(
        ALICE
        + BOB
        + [
            turn(1, "Hiking with the agent on Sundays, hiking to the glacier.", scope=ax, session="x1"),
            turn(5, "Biscuit loves hiking; the puppy hikes every Sunday.", session="s3", ts=None),
        ]
    )
    s.close()
    queries = ["hiking", "puppy named Biscuit", "sister Lisbon glacier hiking", "Sunday hikes"]
    scopes = [A, B, ax, Scope(user_id="alice"), Scope(agent_id="x"), Scope()]
    with psycopg.connect(dsn, autocommit=True) as conn:  # back to schema 4
        _back_to_schema_6(conn)
        conn.execute("DROP TABLE postings")
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin (tsv) WITH (fastupdate = off)")
        conn.execute("DELETE FROM schema_version WHERE version > 4")
        reference = {}
        for q in queries:
            lexemes = conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", (q,)).fetchone()[0]
            terms = " or ".join('"' + lx + '"' for lx in lexemes)
            for i, sc in enumerate(scopes):
                where, params = scope_where(sc, "%s")
                reference[q, i] = conn.execute(
                    _BM25_V4.format(where=where), [*params, lexemes, terms, *params]
                ).fetchall()
    assert sum(len(r) for r in reference.values()) > 20
    s = PostgresStore(dsn, minilm, directory=tmp_path / "v4")
    assert s.schema_version() == SCHEMA_VERSION == 9
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert len(_postings(conn)) == conn.execute("SELECT sum(tsv_len) FROM chunks").fetchone()[0] > 0
        assert conn.execute("SELECT to_regclass('chunks_tsv')").fetchone()[0] is None
    for (q, i), rows in reference.items():
        sc = scopes[i]
        got = [(c.id, score) for c, score in s.search_bm25(q, sc, None)]
        assert got == [(cid, pytest.approx(score, rel=1e-12)) for cid, score in rows], (q, sc)
        assert [c.id for c, _ in s.search_bm25(q, sc, 2)] == [cid for cid, _ in rows[:2]]
    s.close()


_COPY_CHUNK = (
    "INSERT INTO chunks (id, scope_key, user_id, agent_id, run_id, scope_json, session_id, timestamp, text, "
    "n_tokens, first_seq, record_ids, embedding) SELECT %s, scope_key, user_id, agent_id, run_id, scope_json, "
    "session_id, timestamp, %s, n_tokens, first_seq, record_ids, embedding FROM chunks WHERE id = %s"
)


def test_postgres_bm25_tables_follow_chunk_rows_written_by_any_client(pg_database, tmp_path, minilm):
    """The postings and scope statistics are kept by triggers on ``chunks``: rows inserted and
    deleted by raw SQL (as a writer unaware of them would) keep both exact, one statement of several
    rows and several scopes included, a scope left without chunks losing its statistics row; a
    schema 5 database whose postings and statistics drifted that way (stale rows of a deleted chunk,
    a chunk without postings, a doubled posting, counts off) is resynced by the migrations to 6
    and 7."""
    import psycopg

    dsn = pg_database("trig")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "trig")
    s.add(ALICE + BOB)
    with psycopg.connect(dsn, autocommit=True) as conn:
        base = len(_postings(conn))
        a1 = chunk_of(s, ALICE[0].id)[0].id
        before = _stats(conn)
        conn.execute(_COPY_CHUNK, ("raw-1", "Zeppelins over Reykjavik.", a1))  # zeppelin reykjavik: 2 postings
        assert len(_postings(conn)) == base + 2
        assert _stats(conn)[A.key()] == (before[A.key()][0] + 1, before[A.key()][1] + 2)
        assert conn.execute("SELECT chunk_id FROM postings WHERE lexeme = 'reykjavik'").fetchall() == [("raw-1",)]
        with conn.transaction():  # two rows in one statement
            conn.execute(_COPY_CHUNK, ("none", "Nothing.", "no-such-chunk"))  # a statement of no rows is harmless
            conn.execute(
                _COPY_CHUNK.replace("SELECT %s,", "SELECT id || '-copy',").replace(
                    "WHERE id = %s", "WHERE id = ANY(%s)"
                ),
                ("Glaciers and zeppelins.", [a1, "raw-1"]),
            )
        assert conn.execute("SELECT count(*) FROM postings WHERE lexeme = 'glacier'").fetchone()[0] == 2
        _postings(conn)
        assert _stats(conn)[A.key()][0] == before[A.key()][0] + 3
        b1 = chunk_of(s, BOB[0].id)[0].id
        conn.execute(
            _COPY_CHUNK.replace("SELECT %s,", "SELECT id || '-two',").replace("WHERE id = %s", "WHERE id = ANY(%s)"),
            ("Kites.", [a1, b1]),
        )  # one statement, two scopes
        assert {k: n for k, (n, _) in _stats(conn).items()} == {
            A.key(): before[A.key()][0] + 4,
            B.key(): before[B.key()][0] + 1,
        }
        conn.execute("DELETE FROM chunks WHERE id LIKE %s", ("%-two",))
        conn.execute("DELETE FROM chunks WHERE id LIKE %s OR id = %s", ("%-copy", "raw-1"))  # erasure reaches postings
        assert (
            conn.execute(
                "SELECT count(*) FROM postings WHERE lexeme IN ('reykjavik', 'glacier', 'zeppelin')"
            ).fetchone()[0]
            == 0
        )
        assert len(_postings(conn)) == base
        assert _stats(conn) == before
        conn.execute("DELETE FROM chunks WHERE id = %s", (a1,))
        assert len(_postings(conn)) < base
        assert _stats(conn)[A.key()][0] == before[A.key()][0] - 1
        conn.execute(
            "INSERT INTO chunks (id, scope_key, user_id, scope_json, session_id, timestamp, text, n_tokens, "
            "first_seq, record_ids, embedding) SELECT 'carol-1', 'carol', 'carol', '{\"user_id\": \"carol\"}', "
            "session_id, timestamp, 'Kites.', n_tokens, first_seq, record_ids, embedding FROM chunks WHERE id = %s",
            (b1,),
        )  # a scope of its own
        assert _stats(conn)["carol"] == (1, 1)
        conn.execute("DELETE FROM chunks WHERE id = 'carol-1'")  # its last chunk: its row goes
        assert "carol" not in _stats(conn)
    a3 = [c.id for c in s.chunks(A) if c.session_id == "s2"][0]
    s.close()

    with psycopg.connect(dsn, autocommit=True) as conn:  # back to schema 5, then drift
        assert _stats(conn)[B.key()][0] == 1
        _back_to_schema_6(conn)
        conn.execute("DROP INDEX postings_chunk_lexeme")
        conn.execute("CREATE INDEX postings_chunk ON postings (chunk_id)")
        conn.execute("DELETE FROM schema_version WHERE version > 5")
        conn.execute(_COPY_CHUNK, ("raw-2", "Zeppelins over Reykjavik.", b1))  # no postings written
        conn.execute("INSERT INTO postings SELECT * FROM postings WHERE chunk_id = %s LIMIT 1", (b1,))  # doubled
        conn.execute("DELETE FROM chunks WHERE id = %s", (a3,))  # its postings stay
        assert conn.execute("SELECT count(*) FROM postings WHERE chunk_id = %s", (a3,)).fetchone()[0] > 0
        conn.execute("UPDATE scope_stats SET sum_len = sum_len + 7")  # and the statistics are off
    s = PostgresStore(dsn, minilm, directory=tmp_path / "trig")
    with psycopg.connect(dsn, autocommit=True) as conn:
        _postings(conn)  # exact again
        assert _stats(conn)[B.key()][0] == 2
        assert conn.execute("SELECT chunk_id FROM postings WHERE lexeme = 'reykjavik'").fetchall() == [("raw-2",)]
    s.close()


def test_postgres_long_word_and_long_scope_ids_just_under_the_limits(pg_database, tmp_path, minilm):
    """A 2,000-letter word in a record whose scope key and id are just under 1,024 bytes is stored
    (schema 5 failed: its posting exceeded the btree entry limit); the word gets no posting (not
    BM25-searchable), the record's other words do, and the chunk's length still counts it."""
    import psycopg

    rng = np.random.default_rng(7)
    letters = list("abcdefghijklmnopqrstuvwxyz")

    def word(n):  # random letters: PostgreSQL cannot compress them inside the index entry
        return "".join(rng.choice(letters, n))

    sc = Scope(user_id=word(330), agent_id=word(330), run_id=word(330))
    assert len(sc.key()) == 1000
    long_word = word(2000)
    rec = Record(id=word(1024), scope=sc, session_id=word(1024), speaker="Ann", text=f"Biscuit chewed {long_word}.")
    s = PostgresStore(pg_database("long"), minilm, directory=tmp_path / "long")
    assert s.add([rec]).added == [rec.id]
    assert [c.record_ids for c, _ in s.search_bm25("Biscuit chewed", sc, 5)] == [[rec.id]]
    assert s.search_bm25(long_word, sc, 5) == []
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        assert sorted(r[0] for r in _postings(conn)) == ["ann", "biscuit", "chew", "said"]
        assert conn.execute("SELECT tsv_len FROM chunks").fetchone()[0] == 5  # the long lexeme counts in dl
    s.close()


def test_add_refuses_a_too_long_scope_key_id_or_session_id(store):
    """Both stores refuse, before writing anything, a record whose scope key, id or session id is over
    1,024 bytes (UTF-8; the key escapes non-ASCII), naming the field and the limit."""
    ok = turn(1, "I adopted a puppy named Biscuit.")
    long_user = Scope(user_id="u" * 1100)
    emoji_user = Scope(user_id="\U0001f436" * 90)  # 90 characters, 12 bytes each in the key (\ud83d\udc36 each)
    cases = [
        (
            Record(id="r1", scope=long_user, session_id="s1", text="Hi there."),
            "scope key .* 1114 bytes, over the limit of 1024",
        ),
        (
            Record(id="r1", scope=emoji_user, session_id="s1", text="Hi there."),
            "scope key .* 1094 bytes, over the limit of 1024",
        ),
        (
            Record(id="\u00e9" * 513, scope=A, session_id="s1", text="Hi there."),
            "its id is 1026 bytes .* limit of 1024",
        ),
        (Record(id="r1", scope=A, session_id="s" * 1025, text="Hi there."), "its session_id is 1025 bytes"),
    ]
    for bad, msg in cases:
        with pytest.raises(ValueError, match=msg):
            store.add([ok, bad])
    assert store.count() == {"records": 0, "chunks": 0, "vectors": 0}


def test_add_inserts_a_record_deleted_between_its_two_phases(store, backend, emb, monkeypatch):
    """A record stored at the add's first read and deleted by another writer before its write is
    inserted after all: its tokens counted then (no KeyError), and on PostgreSQL its scope locked."""
    store.add([BOB[0]])
    first_read = store._checked_new

    def read_then_deleted(records):
        out = first_read(records)
        assert store.delete(BOB[0].id, B)
        return out

    monkeypatch.setattr(store, "_checked_new", read_then_deleted)
    locked = []
    if backend == "postgres":
        guard = store._guard
        monkeypatch.setattr(store, "_guard", lambda c, keys: (locked.append(set(keys)), guard(c, keys))[1])
    res = store.add([BOB[0], ALICE[0]])
    assert res.added == [BOB[0].id, ALICE[0].id] and res.skipped == []
    assert [r.id for r in store.records(B)] == [BOB[0].id]
    assert [c.n_tokens for c in store.chunks(B)] == [emb.count_tokens(BOB[0].render())]
    assert search(store, "kitten Pepper", B)[0].chunk.record_ids == [BOB[0].id]
    if backend == "postgres":
        assert locked[-1] == {A.key(), B.key()}


def test_postgres_delete_all_locks_a_scope_created_after_its_first_read(pg_database, tmp_path, minilm, monkeypatch):
    """delete_all(user_id=u) while another writer creates a second scope of u between the delete's
    first read and its transaction: the delete runs again holding both scopes' locks and deletes both."""
    x, y = Scope(user_id="u", agent_id="x"), Scope(user_id="u", agent_id="y")
    dsn = pg_database("del")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "del")
    other = PostgresStore(dsn, minilm, directory=tmp_path / "del")
    s.add([turn(1, "Kayak trip to Lisbon.", scope=x)])
    locked = []
    guard = s._guard

    def racing_guard(c, keys):
        if not locked:
            other.add([turn(2, "Lisbon trams at night.", scope=y)])
        locked.append(set(keys))
        guard(c, keys)

    monkeypatch.setattr(s, "_guard", racing_guard)
    assert s.delete_all(Scope(user_id="u")) == 2
    assert locked == [{x.key()}, {x.key(), y.key()}]
    assert s.count() == {"records": 0, "chunks": 0, "vectors": 0}
    other.close()
    s.close()


def test_memory_open_takes_a_postgres_url(pg_database, tmp_path, monkeypatch):
    from memfrontier.api import Memory
    from memfrontier.store.postgres import default_directory

    monkeypatch.setenv("MEMFRONTIER_HOME", str(tmp_path / "home"))
    url = pg_database("api")
    assert url.startswith("postgresql://")
    with Memory.open(url) as m:
        assert isinstance(m.aio.store, PostgresStore)
        assert m.add(["I moved to Lisbon in May and started learning fado."], user_id="ana").added
        assert m.add(["Bob lives in Porto."], user_id="bob").added
        assert [h.chunk.scope.user_id for h in m.search("Lisbon fado", user_id="ana", k=3)] == ["ana"]
        assert m.aio.store.view_dir("banks") == default_directory(url) / "banks"
        assert default_directory(url).parent == tmp_path / "home" / "postgres"
        assert m.delete_all(user_id="ana") == 1
        assert m.search("Lisbon", user_id="ana", k=3) == []


def test_cli_store_option_takes_a_postgres_url(pg_database, tmp_path, monkeypatch):
    """``--store postgresql://...`` reaches the PostgreSQL store (a path would collapse the ``//``)."""
    import json

    from typer.testing import CliRunner

    from memfrontier.cli import app, store_location
    from memfrontier.eval.runner import EvalConfig

    monkeypatch.setenv("MEMFRONTIER_HOME", str(tmp_path / "home"))
    url = pg_database("cli")
    assert store_location(url) == url and store_location("runs/x") == Path("runs/x")
    assert EvalConfig(store=url).store == url and EvalConfig(store="runs/x").store == Path("runs/x")
    f = tmp_path / "m.jsonl"
    f.write_text(
        json.dumps(
            {
                "role": "user",
                "content": "I keep the kayak at Lake Tahoe.",
                "session_id": "s1",
                "timestamp": "2023-05-08T13:56:00",
            }
        )
        + "\n"
    )
    run = CliRunner().invoke
    res = run(app, ["ingest", "--store", url, "--file", str(f), "--user-id", "ana"])
    assert res.exit_code == 0 and "+1 record," in res.output, res.output
    res = run(app, ["search", "kayak", "--store", url, "--user-id", "ana", "--k", "1"])
    assert res.exit_code == 0 and "Lake Tahoe" in res.output, res.output
    assert not (Path.cwd() / "postgresql:").exists()


# -- the embedded PostgreSQL server of a data directory ----------------------------------------


def _pidfile(pgdata: Path, pid: int) -> None:
    """A ``postmaster.pid`` in PostgreSQL's layout (pid, data dir, start, port, socket dir, host, shmem, status)."""
    (pgdata / "postmaster.pid").write_text(f"{pid}\n{pgdata}\n1700000000\n5432\n{pgdata}\n\n  1 2\nready   \n")


def test_clear_stale_lock_keeps_a_running_servers_lock_and_removes_a_dead_ones(pg_server, tmp_path):
    import signal

    from memfrontier.store.embedded_pg import clear_stale_lock

    running = Path(pg_server.pgdata)
    assert clear_stale_lock(running) is False and (running / "postmaster.pid").is_file()
    # after a kill -9 (or a container restart) the recorded pid is another, live process, or none
    gone = subprocess.Popen(["sleep", "30"])
    gone.send_signal(signal.SIGKILL)
    gone.wait()
    for pid in (os.getpid(), gone.pid):
        _pidfile(tmp_path, pid)
        (tmp_path / ".s.PGSQL.5432.lock").write_text(f"{pid}\n")
        assert clear_stale_lock(tmp_path) is True
        assert not (tmp_path / "postmaster.pid").exists() and not (tmp_path / ".s.PGSQL.5432.lock").exists()
    assert clear_stale_lock(tmp_path) is False  # no lock at all


@pytest.mark.slow
def test_embedded_server_is_shared_stopped_by_its_last_user_and_restarts_after_kill_9():
    import shutil
    import signal
    import tempfile
    import time

    import psycopg

    from memfrontier.store.embedded_pg import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="memfrontier-epg-"))  # not tmp_path: the server's user must reach it
    try:
        a, b = EmbeddedPostgres(root / "pg"), EmbeddedPostgres(root / "pg")
        url = a.start()
        assert url.startswith("postgresql://postgres:@/memfrontier?host=") and b.start() == url  # b joins a's server
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (7)")
        assert a.stop() is False and a.running  # b still uses it
        assert b.stop() is True and not b.running and b.stop() is False
        # kill -9 of the postmaster, and its pid taken by an unrelated process (as after a container restart)
        a.start()
        os.kill(int((root / "pg" / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)
        time.sleep(0.5)
        squatter = subprocess.Popen(["sleep", "60"])
        lines = (root / "pg" / "postmaster.pid").read_text().splitlines()
        (root / "pg" / "postmaster.pid").write_text("\n".join([str(squatter.pid), *lines[1:]]) + "\n")
        a._users.close()  # the process that started it died too: its use ends with it
        a._users = None
        c = EmbeddedPostgres(root / "pg")
        with psycopg.connect(c.start(), autocommit=True) as conn:  # crash recovery keeps what was committed
            assert conn.execute("SELECT x FROM t").fetchall() == [(7,)]
            # a client that only got the URL (a worker whose parent was killed) keeps it running
            assert c.stop(wait_s=0.3) is False and c.running
        squatter.kill()
        squatter.wait()
        assert c.start() == url and c.stop() is True and not (root / "pg" / "postmaster.pid").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the in-memory per-scope index, without SQLite -------------------------------------------------


def _chunk(cid: str, scope: Scope, text: str) -> Chunk:
    return Chunk(id=cid, scope=scope, session_id="s1", timestamp=None, text=text, record_ids=[cid], n_tokens=2)


def test_scope_index_searches_a_scope_and_the_union_of_a_partial_one():
    """Hand-computed: dense scores are dot products of the given unit vectors; BM25 (Lucene IDF,
    k1=1.5, b=0.75) of a term once in 1 of 3 documents, every document 2 terms long (dl = avgdl,
    so the tf part is tf / (tf + k1) = 1 / 2.5 = 0.4): ln(1 + 2.5 / 1.5) * 0.4 = ln(8/3) * 0.4;
    after a patch, a term in 2 of 2 documents: ln(1 + 0.5 / 2.5) * 0.4 = ln(1.2) * 0.4."""
    from memfrontier.store.scope_index import Partition, Patch, ScopeIndex, top

    r1, r2 = Scope(user_id="u1", run_id="r1"), Scope(user_id="u1", run_id="r2")
    c1, c2 = _chunk("c1", r1, "apple banana"), _chunk("c2", r1, "banana cherry")
    c3, c4 = _chunk("c3", r2, "apple apple"), _chunk("c4", r1, "cherry pie")
    v = {"c1": [1.0, 0.0], "c2": [0.0, 1.0], "c3": [0.6, 0.8], "c4": [0.8, 0.6]}
    rows = lambda *cs: [(c, int(c.id[1]), np.array(v[c.id], dtype=np.float32)) for c in cs]  # noqa: E731
    stats = {"bm25_builds": 0}
    index = ScopeIndex(2, stats)
    index.reset({r1.key(): Partition.of(rows(c2, c1), 2), r2.key(): Partition.of(rows(c3), 2)})
    u1 = Scope(user_id="u1")

    dense = index.search_dense(u1, np.array([1.0, 0.0], dtype=np.float32), None)
    assert [(c.id, round(s, 6)) for c, s in dense] == [("c1", 1.0), ("c3", 0.6), ("c2", 0.0)]
    assert [c.id for c, _ in index.search_dense(u1, np.array([1.0, 0.0]), 2)] == ["c1", "c3"]
    assert [(c.id, round(s, 6)) for c, s in index.search_dense(r2, np.array([1.0, 0.0]), 10)] == [("c3", 0.6)]
    assert index.search_dense(Scope(user_id="u2"), np.array([1.0, 0.0]), 10) == []

    hits = index.search_bm25(u1, "cherry", 10)
    assert [c.id for c, _ in hits] == ["c2"] and hits[0][1] == pytest.approx(math.log(8 / 3) * 0.4)
    assert index.search_bm25(r2, "cherry", 10) == []  # r2's own statistics and chunks only
    assert stats["bm25_builds"] == 2  # the union of u1 and r2's partition

    index.apply({r1.key(): Patch(gone={"c1"}, new=rows(c4))})
    hits = index.search_bm25(r1, "cherry", 10)
    assert [c.id for c, _ in hits] == ["c2", "c4"]  # a tie: store order (first_seq 2, then 4)
    assert [s for _, s in hits] == pytest.approx([math.log(1.2) * 0.4] * 2)
    assert [c.id for c, _ in index.search_dense(u1, np.array([1.0, 0.0]), None)] == ["c4", "c3", "c2"]
    assert top(np.array([0.5, 2.0, 0.5, -1.0]), None, positive_only=True) == [(1, 2.0), (0, 0.5), (2, 0.5)]
    assert top(np.array([0.5, 2.0]), 0, positive_only=False) == []


def test_a_write_through_a_handle_whose_directory_vanished_fails(store, open_store, emb, backend, tmp_path):
    """``rm -rf`` of an open store's directory: a write that would be acknowledged and lost fails
    with StoreError (SQLite: every write; PostgreSQL, whose records live in the database: the view
    files, banks included); a directory replaced by another store is refused the same way."""
    import shutil

    from memfrontier.store.bank import BankItem, MemoryBank

    assert store.add(ALICE[:1]).added == [ALICE[0].id]
    bank = MemoryBank.for_store(store, "facts")
    fact = BankItem(id="f1", kind="fact", scope=A, text="Alice has a puppy.", source_ids=[ALICE[0].id])
    bank.apply([fact])
    shutil.rmtree(tmp_path / "mem")
    with pytest.raises(StoreError, match="memory bank .*facts.db is gone"):
        bank.apply([fact.model_copy(update={"id": "f2"})])
    with pytest.raises(StoreError, match="store directory .*mem is gone"):
        store.view_dir("banks")
    assert not (tmp_path / "mem").exists()  # not recreated by the refused calls
    if backend == "sqlite":
        with pytest.raises(StoreError, match="store directory .*mem is gone.*nothing was written"):
            store.add(ALICE[1:2])
        with pytest.raises(StoreError, match="is gone"):
            store.delete(ALICE[0].id, A)
        assert not (tmp_path / "mem").exists()
        fresh = open_store("mem", emb)  # another store now at the same path
        assert fresh.count()["records"] == 0
        with pytest.raises(StoreError, match="was replaced since it was opened"):
            store.add(ALICE[1:2])
        assert fresh.count()["records"] == 0
    else:  # the records are in the database: durable where they are said to be
        assert store.add(ALICE[1:2]).added == [ALICE[1].id]
    bank.close()


def test_memory_add_after_the_store_directory_was_removed_fails(tmp_path, minilm):
    import shutil

    from memfrontier.api import Memory

    with Memory.open(tmp_path / "mem", embedder=minilm) as mem:
        mem.add(["I adopted a beagle."], user_id="alice")
        shutil.rmtree(tmp_path / "mem")
        with pytest.raises(StoreError, match="is gone"):
            mem.add(["My sister lives in Quito."], user_id="alice")


def test_store_files_are_private_under_umask_022(tmp_path, minilm):
    """Store directory and view folders 0700; store.db, its -wal / -shm and bank files 0600."""
    from memfrontier.store.bank import MemoryBank

    old = os.umask(0o022)
    try:
        s = SQLiteStore(tmp_path / "mem", minilm)
        s.add(ALICE[:1])
        bank = MemoryBank.for_store(s, "facts")
        graph = s.view_dir("graph")
        modes = {
            p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777)
            for p in [tmp_path / "mem", *(tmp_path / "mem").rglob("*")]
        }
        bank.close()
        s.close()
    finally:
        os.umask(old)
    assert graph.is_dir()
    assert {k: v for k, v in modes.items() if (tmp_path / k).is_dir()} == {
        "mem": "0o700",
        "mem/banks": "0o700",
        "mem/graph": "0o700",
    }
    files = {k: v for k, v in modes.items() if not (tmp_path / k).is_dir()}
    assert {"mem/store.db", "mem/store.db-wal", "mem/store.db-shm", "mem/banks/facts.db"} <= set(files)
    assert set(files.values()) == {"0o600"}, files


def test_scope_generation_moves_only_with_the_scopes_it_covers(open_store, emb):
    """The per-scope write counter: a write or delete in a scope moves the counter of every search
    scope that covers it (whichever store object of the database wrote), a write elsewhere or a
    re-run of the same ingest does not; exact scopes, partial ones and non-ASCII ids alike."""
    ana_a, ana_b, zoe = Scope(user_id="ana", agent_id="a1"), Scope(user_id="ana", agent_id="b|2"), Scope(user_id="zoë")
    exact = Scope(user_id="ana", agent_id="a1", run_id="r1")
    scopes = {
        "ana_a": ana_a,
        "ana_b": ana_b,
        "ana": Scope(user_id="ana"),
        "zoe": zoe,
        "all": Scope(),
        "exact": exact,
        "zo": Scope(user_id="zo"),
        "ana2": Scope(user_id="ana2"),
        "agent_a1": Scope(agent_id="a1"),
        "run2": Scope(user_id="ana", agent_id="a1", run_id="r2"),
    }
    s = open_store("gen", emb)
    seen = {k: s.scope_generation(v) for k, v in scopes.items()}

    def moved() -> set[str]:
        now = {k: s.scope_generation(v) for k, v in scopes.items()}
        out = {k for k in now if now[k] != seen[k]}
        seen.update(now)
        return out

    s.add([Record(id="1", scope=ana_a, text="I live in Porto.")])
    assert moved() == {"ana_a", "ana", "all", "agent_a1"}
    s.add([Record(id="1", scope=zoe, text="I live in Quito.")])
    assert moved() == {"zoe", "all"}
    assert s.add([Record(id="1", scope=ana_a, text="I live in Porto.")]).added == []  # the same ingest again
    assert moved() == set()
    s.add([Record(id="2", scope=ana_b, text="I moved to Braga.")])
    assert moved() == {"ana_b", "ana", "all"}
    s.add([Record(id="1", scope=Scope(user_id="ana2", agent_id="a1"), text="A second Ana.")])
    assert moved() == {"ana2", "all", "agent_a1"}
    open_store("gen", emb).add([Record(id="3", scope=exact, text="Run r1 starts today.")])  # another writer
    assert moved() == {"exact", "ana_a", "ana", "all", "agent_a1"}
    assert s.delete("1", zoe)
    assert moved() == {"zoe", "all"}
    assert s.delete_all(Scope(user_id="ana")) == 3  # not ana2's
    assert moved() == {"ana_a", "ana_b", "ana", "exact", "all", "agent_a1"}

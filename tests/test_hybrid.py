"""One hybrid search by named recipes, per-scope BM25 statistics and in-memory partitions that
follow writes (real SQLite, bm25s and MiniLM)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import numpy as np
import pytest

from memfrontier.core.types import Record, Scope
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import (
    BM25_ONLY,
    DENSE_ONLY,
    HYBRID_RRF,
    RECIPES,
    Recipe,
    chunk_recipe,
)
from memfrontier.store.bank import MemoryBank
from memfrontier.store.bm25 import BM25Index, bm25_terms
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryEnv, Query, get_strategy
from memfrontier.strategies.memorycpt.recipes import MEMORYCPT_SEMANTIC
from memfrontier.strategies.memorycpt.recipes import RECIPES as MEMORYCPT_RECIPES
from memfrontier.strategies.mempilot.recipes import RECIPES as MEMPILOT_RECIPES

A, B = Scope(user_id="alice"), Scope(user_id="bob")


@pytest.fixture
def store(tmp_path, minilm):
    s = SQLiteStore(tmp_path / "m", minilm)
    yield s
    s.close()


def rec(i, text, scope=A, session="s1"):
    return Record(id=f"{scope.user_id}-{scope.agent_id}-{i}", scope=scope, session_id=session, text=text)


def test_bm25_index_matches_the_hand_computed_lucene_score():
    idx = BM25Index.build(["d0", "d1"], [["cello", "piano"], ["piano"]])
    # N=2, df(cello)=1: idf = ln(1 + 1.5/1.5) = ln 2; dl=2, avgdl=1.5: tf part = 1 / (1 + 1.5 (0.25 + 0.75 * 2/1.5))
    want = math.log(2) / (1 + 1.5 * (0.25 + 0.75 * 2 / 1.5))
    ids, scores = idx.match("cello")
    assert ids == ["d0"] and scores.tolist() == pytest.approx([want], rel=1e-12)
    assert idx.match("the of") is None and idx.match("violin") is None
    idx.add("d2", ["cello", "cello"])  # N=3, df=2, avgdl=5/3: the statistics move with the documents
    ids, scores = idx.match("cello")
    idf, avg = math.log(1 + 1.5 / 2.5), 5 / 3
    assert ids == ["d0", "d2"] and scores.tolist() == pytest.approx(
        [idf / (1 + 1.5 * (0.25 + 0.75 * 2 / avg)), idf * 2 / (2 + 1.5 * (0.25 + 0.75 * 2 / avg))], rel=1e-12
    )
    idx.remove("d2")
    assert idx.match("cello")[1].tolist() == pytest.approx([want], rel=1e-12) and len(idx) == 2


def test_bm25_index_after_writes_equals_bm25s_reindexed():
    """Adds and removes give the scores bm25s (method="lucene") computes over the current documents."""
    import random

    import bm25s

    rng = random.Random(3)
    words = [f"w{i}" for i in range(60)]
    docs = {f"d{i}": [rng.choice(words[: rng.randint(5, 60)]) for _ in range(rng.randint(1, 30))] for i in range(300)}
    idx = BM25Index.build(list(docs)[:200], [docs[d] for d in list(docs)[:200]])
    assert idx.match("w1") is not None  # searched once: the writes below grow its length array, not rebuild it
    for d in list(docs)[200:]:
        idx.add(d, docs[d])
    for d in list(docs)[::3]:
        idx.remove(d)
        del docs[d]
        if d == "d150":
            assert idx.match("w2") is not None  # a search between the writes
    ref = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    ref.index(list(docs.values()), show_progress=False)
    for q in ("w1", "w3 w7 w7", "w40 w59", "w0 w1 w2 w3 w4 w5"):
        want = np.asarray(ref.get_scores([t for t in q.split() if t in ref.vocab_dict]), dtype=np.float64)
        ids, got = idx.match(q)
        pos = {d: i for i, d in enumerate(docs)}
        full = np.zeros(len(docs))
        full[[pos[i] for i in ids]] = got
        assert full == pytest.approx(want, rel=1e-5, abs=1e-6), q
    assert bm25_terms("The cellos were playing") == ["cello", "were", "play"]  # bm25s' English stopwords


def test_bm25_statistics_are_the_scopes_own(store):
    store.add([rec(1, "I practise the cello every morning."), rec(2, "We cooked pasta with basil.", session="s2")])
    alone = store.search_bm25("cello", A, 5)
    # many cello texts in another tenant's scope change nothing in alice's scores
    store.add([rec(i, f"Bob's cello lesson number {i} about the cello", scope=B, session=f"b{i}") for i in range(30)])
    after = store.search_bm25("cello", A, 5)
    assert [(c.id, s) for c, s in after] == [(c.id, pytest.approx(s, rel=1e-6)) for c, s in alone]
    # and the score is the scope's own Lucene BM25: N = 2 chunks in alice's scope
    [(chunk, score)] = alone
    docs = [bm25_terms(c.text) for c in store.chunks(A)]
    assert len(docs) == 2
    assert score == pytest.approx(
        float(BM25Index.build(list(range(len(docs))), docs).match("cello")[1].max()), rel=1e-9
    )


def test_partial_scope_searches_the_union_of_matching_scopes(store):
    a1, a2 = Scope(user_id="u", agent_id="a1"), Scope(user_id="u", agent_id="a2")
    store.add(
        [
            rec(1, "The lighthouse keeper paints boats.", scope=a1),
            rec(2, "The lighthouse is closed in winter.", scope=a2),
            rec(3, "A lighthouse postcard.", scope=Scope(user_id="v", agent_id="a1")),
        ]
    )
    got = {c.scope for c, _ in store.search_bm25("lighthouse", Scope(user_id="u"), 10)}
    assert got == {a1, a2}
    assert {c.scope for c, _ in store.search_bm25("lighthouse", Scope(agent_id="a1"), 10)} == {
        a1,
        Scope(user_id="v", agent_id="a1"),
    }
    assert [c.scope for c, _ in store.search_dense("lighthouse", a2, 10)] == [a2]
    # the union's statistics: N = 2 chunks
    docs = [bm25_terms(c.text) for c in store.chunks(Scope(user_id="u"))]
    top = store.search_bm25("keeper", Scope(user_id="u"), 1)[0][1]
    assert top == pytest.approx(float(BM25Index.build(list(range(len(docs))), docs).match("keeper")[1].max()), rel=1e-9)


def test_writes_patch_the_partitions_like_a_fresh_load(store, tmp_path, minilm):
    """Adds and deletes through one object keep its in-memory partitions equal to a fresh load."""
    queries = ["garden tomatoes", "cello practice", "trip to Lisbon", "the dog Biscuit"]
    texts = [
        "We planted tomatoes in the garden.",
        "Cello practice went well today.",
        "Planning a trip to Lisbon.",
        "Biscuit the dog chased a ball.",
        "Tomatoes need sun and water.",
    ]
    for q in queries:  # load the partitions before the writes
        hybrid_search(store, q, A, HYBRID_RRF, 3)
    for i, t in enumerate(texts):
        store.add([rec(i, t, session=f"s{i % 2}"), rec(i, t, scope=B, session="b")])
        for q in queries:
            hybrid_search(store, q, A, HYBRID_RRF, 3)
    store.delete(f"alice-None-{1}", A)
    store.delete_all(B)
    loads = store.stats["partition_loads"]
    mine = {
        q: [(h.chunk.id, h.chunk.timestamp, h.ranks) for h in hybrid_search(store, q, A, HYBRID_RRF, 5)]
        for q in queries
    }
    assert store.stats["partition_loads"] == loads  # patched in memory, not reloaded
    fresh = SQLiteStore(tmp_path / "m", minilm)
    theirs = {
        q: [(h.chunk.id, h.chunk.timestamp, h.ranks) for h in hybrid_search(fresh, q, A, HYBRID_RRF, 5)]
        for q in queries
    }
    assert mine == theirs and all(mine.values())
    assert hybrid_search(store, "tomatoes", B, HYBRID_RRF, 5) == []
    # a write by another object is seen, and only its scope is reloaded
    fresh.add([rec(99, "A brand new note about kayaks.", scope=Scope(user_id="carol"))])
    before = store.stats["partition_loads"]
    assert [h.chunk.scope.user_id for h in hybrid_search(store, "kayaks", Scope(user_id="carol"), BM25_ONLY, 3)] == [
        "carol"
    ]
    assert store.stats["partition_loads"] == before + 1
    fresh.close()


def test_bm25_of_a_scope_follows_writes_without_rebuilding(store, tmp_path, minilm):
    store.add([rec(1, "The cello is in the case."), rec(1, "The piano is in the hall.", scope=B)])
    store.search_bm25("cello", A, 3)
    store.search_bm25("piano", B, 3)
    builds = store.stats["bm25_builds"]
    assert builds == 2  # one index per scope
    store.add([rec(2, "Another piano note.", scope=B), rec(3, "The piano was tuned.", scope=B, session="s2")])
    store.delete(f"bob-None-{3}", B)
    mine = [(c.id, s) for c, s in store.search_bm25("piano hall", B, 5)]
    assert store.stats["bm25_builds"] == builds  # patched, not rebuilt
    fresh = SQLiteStore(tmp_path / "m", minilm)
    assert mine == [(c.id, pytest.approx(s, rel=1e-12)) for c, s in fresh.search_bm25("piano hall", B, 5)]
    fresh.close()


def test_recipes_score_and_validate(store, tmp_path, minilm):
    store.add([rec(1, "I adopted a puppy named Biscuit."), rec(2, "We hiked to a glacier lake.", session="s2")])
    fused = hybrid_search(store, "puppy Biscuit", A, HYBRID_RRF, 2)
    assert fused[0].ranks == {"dense": 1, "bm25": 1} and fused[0].score == pytest.approx(2 / 61)
    dense = hybrid_search(store, "puppy Biscuit", A, DENSE_ONLY, 2)
    assert dense[0].score == pytest.approx(store.search_dense("puppy Biscuit", A, 1)[0][1])  # the cosine
    assert hybrid_search(store, "puppy", A, HYBRID_RRF, 0) == [] and hybrid_search(store, " ", A, HYBRID_RRF) == []
    assert HYBRID_RRF.depth(10) == 50 and HYBRID_RRF.depth(20) == 80 and MEMORYCPT_SEMANTIC.depth(5) is None
    bank = MemoryBank(tmp_path / "b.db", minilm)
    with pytest.raises(ValueError, match="names an item kind"):
        hybrid_search(bank, "puppy", A, HYBRID_RRF)
    with pytest.raises(ValueError, match="does not fit SQLiteStore"):
        hybrid_search(store, "puppy", A, MEMORYCPT_SEMANTIC)
    bank.close()
    with pytest.raises(ValueError, match="retrievers"):
        Recipe(name="bad", retrievers=())
    with pytest.raises(ValueError, match="no recipe"):
        chunk_recipe(("sparse",))
    assert chunk_recipe(("bm25",)) is BM25_ONLY and set(RECIPES) >= {"hybrid_rrf", "dense_only", "bm25_only"}


@pytest.mark.parametrize(
    "name, kw, want",
    [
        ("rag", {}, ("hybrid_rrf",)),
        ("rag", {"retrievers": ("dense",)}, ("dense_only",)),
        ("budgetmem", {}, ("hybrid_rrf",)),
        ("memorycpt", {}, ("memorycpt_episodic", "memorycpt_semantic")),
        ("memorycpt", {"ablation": "no_qar"}, ("memorycpt_dense_episodic", "memorycpt_dense_semantic")),
        ("mempilot", {}, ("mempilot_bank", "mempilot_raw")),
        ("automem", {}, ()),
        ("longctx", {}, ()),
        ("oracle", {}, ()),
    ],
)
def test_every_strategy_names_its_recipes(name, kw, want):
    strat = get_strategy(name, **kw)
    assert tuple(strat.recipes) == want
    assert all(r in {**RECIPES, **MEMORYCPT_RECIPES, **MEMPILOT_RECIPES} for r in strat.recipes)


class SlowStore(SQLiteStore):
    """A real store whose dense search first sleeps 0.3 s (a search that takes long), noting the
    thread it ran on."""

    threads: list[int]

    def search_dense(self, *args, **kwargs):
        self.threads.append(threading.get_ident())
        time.sleep(0.3)
        return super().search_dense(*args, **kwargs)


def test_rag_searches_off_the_event_loop(tmp_path, minilm):
    # A coroutine that ticks every 10 ms keeps ticking while rag's search runs: the search is on a
    # worker thread. Run on the loop, the 0.3 s sleep would stop the ticker (at most 1 tick).
    store = SlowStore(tmp_path / "m", minilm)
    store.threads = []
    store.add([rec(1, "Alice plays the cello every Sunday."), rec(2, "Bob drinks green tea.", session="s2")])
    env = MemoryEnv(store=store, llm=None, answer_llm=None)

    async def go():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)  # the ticker starts
        before = ticks
        ctx = await get_strategy("rag", k=1).context(Query(text="Who plays the cello?", scope=A), env, None, None)
        during = ticks - before
        task.cancel()
        return ctx, during, threading.get_ident()

    try:
        ctx, during, loop_thread = asyncio.run(go())
    finally:
        store.close()
    assert ctx.evidence_ids == [rec(1, "").id]  # the real search's answer
    assert len(store.threads) == 1 and store.threads[0] != loop_thread
    assert during >= 5, f"the event loop ticked {during} times during a 0.3 s search"

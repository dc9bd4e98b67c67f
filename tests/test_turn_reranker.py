"""rag's learned turn reranker: features computed by hand, the network's score by hand, the file's
validation, scope confinement, the shipped file, and the trainer's fit (real SQLite, bm25s, MiniLM)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math

import numpy as np
import pytest
from pydantic import ValidationError
from test_rag_turns import A, recs

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.types import Budget, Record, Scope
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import TURNS_CHUNKS_RRF
from memfrontier.retrieve.rerank import (
    DEFAULT_RERANKER,
    QUESTION_WORDS,
    SCALAR_FEATURES,
    RerankerFile,
    RerankerFileError,
    TurnReranker,
    question_onehot,
    read_reranker_file,
    turn_features,
    write_reranker_file,
)
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryEnv, Query, get_strategy
from memfrontier.strategies.config import StrategyConfigError
from memfrontier.views.turns import KIND, build_turns, open_turn_bank

N = len(SCALAR_FEATURES)
COL = {name: i for i, name in enumerate(SCALAR_FEATURES)}
Q = "What does the kitten Pixel eat?"


@pytest.fixture
def store(tmp_path, minilm):
    s = SQLiteStore(tmp_path / "m", minilm)
    s.add(recs())
    build_turns(open_turn_bank(s), s, A)
    yield s
    s.close()


def features(store, question=Q, scope=A):
    bank = open_turn_bank(store)
    hits = hybrid_search(bank, question, scope, TURNS_CHUNKS_RRF, k=7, store=store)
    bm25 = {it.id: s for it, s in bank.search_bm25(question, scope, None, kind=KIND)}
    qv = bank.encode_query(question)
    return bank, hits, qv, bm25, turn_features(bank, scope, KIND, question, hits, qv, bm25, store.embedder.count_tokens)


def test_features_match_their_definitions(store, minilm):
    bank, hits, qv, bm25, (x, prod) = features(store)
    items, matrix = bank.vectors(A, KIND)
    assert x.shape == (7, N) and prod.shape == (7, minilm.dim)
    cos = {it.id: float(matrix[i] @ qv) for i, it in enumerate(items)}
    by_cos = sorted(cos, key=lambda i: -cos[i])
    pos = {(it.meta["session_id"], it.meta["position"]): it.id for it in items}
    best_bm25 = max(bm25.values())
    for r, (h, row, p) in enumerate(zip(hits, x, prod), 1):
        i = h.item.id
        assert row[COL["fused_inv"]] == pytest.approx(1 / (5 + r))
        assert row[COL["fused_log_rank"]] == pytest.approx(math.log(r))
        assert row[COL["cos"]] == pytest.approx(cos[i], abs=1e-6)
        assert p.sum() == pytest.approx(cos[i], abs=1e-5)  # the product's sum is the cosine
        assert row[COL["dense_log_rank"]] == pytest.approx(math.log(by_cos.index(i) + 1))
        assert row[COL["bm25_norm"]] == pytest.approx(bm25.get(i, 0.0) / best_bm25, abs=1e-6)
        assert row[COL["has_bm25"]] == float(i in bm25)
        assert row[COL["chunk_log_rank"]] == pytest.approx(math.log(h.ranks.get("chunk", 999)))
        s, at = h.item.meta["session_id"], h.item.meta["position"]
        near = [pos[(s, at + d)] for d in (-1, 1) if (s, at + d) in pos]
        assert row[COL["neighbour_cos"]] == pytest.approx(max(cos[n] for n in near), abs=1e-6)
        session = [cos[it.id] for it in items if it.meta["session_id"] == s]
        assert row[COL["session_cos"]] == pytest.approx(max(session), abs=1e-6)
        assert row[COL["cos_below_session"]] == pytest.approx(cos[i] - max(session), abs=1e-6)
        assert row[COL["log_tokens"]] == pytest.approx(math.log(minilm.count_tokens(h.item.render())))
        assert row[COL["image"]] == 0.0
        assert row[[COL[f"q_{w}"] for w in QUESTION_WORDS]].tolist() == question_onehot(Q)
    assert question_onehot(Q) == [float(w == "what") for w in QUESTION_WORDS]
    assert question_onehot("  When? did") == [float(w == "when") for w in QUESTION_WORDS]
    assert sum(question_onehot("Tell me about Pixel")) == 0.0 and sum(question_onehot("")) == 0.0


def test_an_image_turn_is_flagged(tmp_path, minilm):
    from memfrontier.core.types import ImageRef

    s = SQLiteStore(tmp_path / "i", minilm)
    s.add(
        [
            Record(
                id="x:1",
                scope=A,
                session_id="x",
                speaker="Ana",
                text="look",
                images=[ImageRef(id="im1", caption="a red bike")],
            )
        ]
    )
    build_turns(open_turn_bank(s), s, A)
    _, hits, _, _, (x, _) = features(s, "red bike")
    assert x[0, COL["image"]] == 1.0
    s.close()


def test_features_are_confined_to_the_scope(store, minilm):
    """Another user's turns (here: closer to the question) change no feature of alice's hits."""
    before = features(store)[-1]
    b = Scope(user_id="bob")
    store.add([Record(id="b:1", scope=b, session_id="b", speaker="Bob", text="Pixel the kitten eats tuna and fish.")])
    build_turns(open_turn_bank(store), store, b)
    after = features(store)[-1]
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    _, hits, *_ = features(store, scope=b)
    assert [h.item.source_ids for h in hits] == [["b:1"]]


def small_file(hidden=1, dim=3, **over) -> RerankerFile:
    fields = dict(
        embedding_model="m",
        scalars=list(SCALAR_FEATURES),
        mean=[0.0] * N,
        std=[1.0] * N,
        low=[-1e6] * N,
        high=[1e6] * N,
        w_v=[[1.0] * dim] * hidden,
        w_s=[[0.0] * N] * hidden,
        b_h=[0.0] * hidden,
        w_o=[1.0] * hidden,
        w_l=[0.0] * N,
        b_o=0.0,
    )
    return RerankerFile(**{**fields, **over})


def test_the_score_is_the_two_layer_network_by_hand():
    w_s = [[0.0] * N]
    w_s[0][COL["cos"]] = 2.0
    w_l = [0.0] * N
    w_l[COL["bm25_norm"]] = -1.0
    mean, std = [0.0] * N, [1.0] * N
    mean[COL["cos"]], std[COL["cos"]] = 0.5, 0.25
    rf = small_file(w_v=[[1.0, -1.0, 0.5]], w_s=w_s, b_h=[-0.1], w_o=[3.0], w_l=w_l, b_o=0.2, mean=mean, std=std)
    x = np.zeros((2, N), np.float32)
    x[:, COL["cos"]] = [0.75, 0.25]
    x[:, COL["bm25_norm"]] = [0.5, 1.0]
    prod = np.array([[0.2, 0.1, 0.2], [0.0, 0.3, 0.0]], np.float32)
    # row 0: z_cos = (0.75-0.5)/0.25 = 1; h = relu(0.2-0.1+0.1 + 2*1 - 0.1) = 2.1; 3*2.1 - 0.5 + 0.2 = 6.0
    # row 1: z_cos = -1; h = relu(-0.3 - 2 - 0.1) = 0; 0 - 1.0 + 0.2 = -0.8
    assert TurnReranker(rf).score(x, prod).tolist() == pytest.approx([6.0, -0.8], abs=1e-6)
    with pytest.raises(ValueError, match="do not fit"):
        TurnReranker(rf).score(x[:, :3], prod)


def test_it_declines_candidates_outside_its_training_range(store):
    low, high = [-1e6] * N, [1e6] * N
    low[COL["session_cos"]], high[COL["session_cos"]] = 0.2, 0.9
    m = TurnReranker(small_file(low=low, high=high))
    x = np.zeros((8, N), np.float32)
    x[:, COL["session_cos"]] = [0.5, 0.2, 0.9, 0.1, 0.5, 0.5, 0.5, 0.5]  # the bounds are inside; 0.1 is not
    assert m.outside(x).tolist() == [False, False, False, True, False, False, False, False]
    assert not m.declines(x)  # 1 of 8 outside: 0.125 <= DECLINE_SHARE
    x[:2, COL["session_cos"]] = 0.95  # 3 of 8 outside: 0.375 > 0.25
    assert m.declines(x)
    assert not m.declines(x[:0])
    with pytest.raises(ValidationError, match="low must not exceed high"):
        small_file(low=[1.0] * N, high=[0.0] * N)

    # on a bank: the same hits, in the fused order, and the decline counted
    bank, hits, *_ = features(store)
    everything_outside = TurnReranker(
        small_file(dim=bank.embedder.dim, low=[5.0] * N, high=[6.0] * N, embedding_model=bank.embedder.model_id)
    )
    ledger = Ledger()
    with use_ledger(ledger):
        got = everything_outside.rerank(bank, A, KIND, Q, hits, bank.embedder.count_tokens)
    assert [h.item.id for h in got] == [h.item.id for h in hits]
    assert ledger.events.get("rerank.declined") == 1


def test_rerank_orders_by_score_and_keeps_the_fused_order_on_ties(store):
    bank, hits, *_ = features(store)
    dim = bank.embedder.dim
    w_s = [[0.0] * N]
    w_s[0][COL["fused_log_rank"]] = 1.0  # score = log(rank): the fused order reversed
    m = TurnReranker(small_file(dim=dim, w_v=[[0.0] * dim], w_s=w_s, embedding_model=bank.embedder.model_id))
    out = m.rerank(bank, A, KIND, Q, hits, store.embedder.count_tokens)
    assert [h.item.id for h in out] == [h.item.id for h in reversed(hits)]
    assert out[0].score == pytest.approx(math.log(7), abs=1e-5)
    flat = TurnReranker(small_file(dim=dim, w_v=[[0.0] * dim], embedding_model=bank.embedder.model_id))
    assert [h.item.id for h in flat.rerank(bank, A, KIND, Q, hits, store.embedder.count_tokens)] == [
        h.item.id for h in hits
    ]
    assert flat.rerank(bank, A, KIND, Q, [], store.embedder.count_tokens) == []
    with pytest.raises(RerankerFileError, match="trained on m embeddings"):
        TurnReranker(small_file(dim=dim)).rerank(bank, A, KIND, Q, hits, store.embedder.count_tokens)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": "other"}, "format"),
        ({"version": 1}, "v1"),  # before the training range was kept: retrain
        ({"scalars": list(SCALAR_FEATURES)[:-1]}, "scalar features"),
        ({"mean": [0.0] * (N - 1)}, "mean has"),
        ({"w_o": [1.0, 2.0]}, "w_o has"),
        ({"std": [0.0] * N}, "std must be positive"),
        ({"w_v": [[1.0, 2.0, 3.0], [1.0]], "b_h": [0.0, 0.0], "w_o": [1.0, 1.0], "w_s": [[0.0] * N] * 2}, "ragged"),
    ],
)
def test_a_bad_reranker_file_is_refused_naming_the_problem(tmp_path, change, message):
    p = tmp_path / "r.json"
    doc = {**small_file().model_dump(mode="json"), **change}
    p.write_text(json.dumps(doc))
    with pytest.raises(RerankerFileError, match=message):
        read_reranker_file(p)
    p.write_text("{not json")
    with pytest.raises(RerankerFileError, match="not a usable"):
        read_reranker_file(p)
    with pytest.raises(RerankerFileError, match="train one with"):
        read_reranker_file(tmp_path / "missing.json")
    write_reranker_file(small_file(), p)
    assert read_reranker_file(p) == small_file()


def test_the_shipped_reranker_was_trained_on_the_training_pool_and_validated(minilm):
    m = TurnReranker.load()
    assert m.sha256 and len(m.sha256) == 64
    f = m.file
    assert f.embedding_model == minilm.model_id and len(f.w_v[0]) == minilm.dim
    p = f.provenance
    assert p["split"] == "train" and "commit" in p and p["seed"] == 0
    loc, lme = p["data"]["locomo"], p["data"]["longmemeval"]
    assert loc["file"] == "locomo/locomo10.json" and not p["dirty"]
    assert len(loc["sha256"]) == 64 and "conv-49" not in loc["conversations"] and "conv-50" not in loc["conversations"]
    assert len(loc["conversations"]) == 8
    assert len(lme["conversations"]) == p["training"]["longmemeval"] == 160 and lme["questions"] == 156
    assert f.validation["locomo"]["method"] == "leave one conversation out" and f.validation["locomo"]["folds"] == 8
    assert f.validation["longmemeval"]["folds"] == 5
    s_file = p["data"]["longmemeval_s"]  # S histories (distractor sessions), none also drawn from the oracle file
    assert len(s_file["conversations"]) == p["training"]["longmemeval_s"] == 40
    assert not set(s_file["conversations"]) & set(lme["conversations"])
    assert f.validation["longmemeval_s"]["folds"] == 5
    assert all(lo <= hi for lo, hi in zip(f.low, f.high))
    for name, v in f.validation.items():
        rec = v["recall"]
        assert rec["reranked@20"] > rec["fused@20"], name
        # on LongMemEval_S's 38 held-out questions the first 10 hold as much evidence as fused (0.862)
        assert rec["reranked@10"] > rec["fused@10"] or (
            name == "longmemeval_s" and rec["reranked@10"] >= rec["fused@10"]
        )
    assert DEFAULT_RERANKER.stat().st_size < 400_000


@pytest.mark.data
def test_the_longmemeval_training_pool_leaves_out_every_report_sample(tmp_path):
    """The bench's seed-0 samples and the frontier's 30-question slice are never trained on."""
    from memfrontier.eval.datasets import DATASET_FILES, data_root
    from memfrontier.eval.datasets.longmemeval import load_longmemeval, longmemeval_sample
    from memfrontier.eval.runner import select_questions
    from memfrontier.train.turn_reranker import longmemeval_training_pool

    convs = load_longmemeval(data_root() / DATASET_FILES["longmemeval"])
    pool = {c.id for c in longmemeval_training_pool(convs)}
    reported = {c.id for n in (40, 100) for c in longmemeval_sample(convs, n)}
    reported |= {q.conversation_id for q in select_questions(convs, 30, 42)}
    assert not pool & reported and len(pool) + len(reported) == len(convs) == 500
    assert len(pool) == 375 and len(reported) == 125


def test_rag_reranks_turns_and_says_so(store):
    env = MemoryEnv(store=store, llm=None, answer_llm=None)
    opts = {"unit": "turn", "retrievers": ["dense", "bm25", "chunk"], "k": 7}
    plain, rr = get_strategy("rag", opts), get_strategy("rag", {**opts, "rerank": True, "max_tokens": 30})
    asyncio.run(rr.build(env, A))
    c = asyncio.run(rr.context(Query(text=Q, scope=A), env, None, Budget()))
    bank = open_turn_bank(store)
    hits = hybrid_search(bank, Q, A, rr.recipe, k=7, store=store)
    first = TurnReranker.load().rerank(bank, A, KIND, Q, hits, store.embedder.count_tokens)[0]
    assert first.item.source_ids[0] in c.evidence_ids  # the budget's first pick is the reranker's best
    assert rr.recipes == ("turns_chunks_rrf", f"turn_reranker:{TurnReranker.load().sha256[:12]}")
    assert plain.recipes == ("turns_chunks_rrf",)
    with pytest.raises(StrategyConfigError, match="rerank"):
        get_strategy("rag", {"rerank": True})
    with pytest.raises(StrategyConfigError, match="set max_tokens too"):  # without a budget it would change nothing
        get_strategy("rag", {**opts, "rerank": True})


def test_fit_learns_a_planted_rule_and_is_deterministic():
    """Labels are 1 where cos > 0.5: the fitted reranker ranks those first."""
    from memfrontier.train.configs import TurnRerankerConfig
    from memfrontier.train.turn_reranker import Question, fit, folds, recall_at

    rng = np.random.default_rng(0)
    qs = []
    for j in range(60):
        x = rng.normal(size=(20, N)).astype(np.float32)
        x[:, COL["cos"]] = rng.uniform(0, 1, 20)
        prod = rng.normal(scale=0.05, size=(20, 3)).astype(np.float32)
        y = (x[:, COL["cos"]] > 0.5).astype(np.float32)
        src = [[f"{j}:{i}"] for i in range(20)]
        qs.append(Question("lme:q" if j % 2 else f"c{j % 4}", x, prod, y, src, [s[0] for s, t in zip(src, y) if t]))
    cfg = TurnRerankerConfig(epochs=30, hidden=4)
    w = fit(qs, cfg)
    assert w == fit(qs, cfg)
    m = TurnReranker(RerankerFile(embedding_model="m", scalars=list(SCALAR_FEATURES), **w))
    got, chance = [], []
    for q in qs[:10]:
        s = m.score(q.scalars, q.products)
        n = int(q.labels.sum())
        got.append(recall_at(q, sorted(range(20), key=lambda i: -s[i]), n))
        chance.append(n / 20)  # a random order's expected recall@n
    assert np.mean(got) > 0.8 and np.mean(chance) < 0.6
    q = qs[0]
    assert recall_at(q, list(range(20)), 20) == 1.0 and recall_at(q, [], 5) == 0.0
    parts = folds(qs)  # LoCoMo: one fold per conversation; LongMemEval: 5 folds of its questions
    assert parts["locomo"] == [list(range(c, 60, 4)) for c in (0, 2)]
    assert (
        sorted(i for f in parts["longmemeval"] for i in f) == list(range(1, 60, 2)) and len(parts["longmemeval"]) == 5
    )
    s_questions = [
        dataclasses.replace(qs[j], conversation=f"lmes:q{j}") for j in range(7)
    ]  # the S file's: folds of their own
    parts = folds(qs + s_questions)
    assert (
        sorted(i for f in parts["longmemeval_s"] for i in f) == list(range(60, 67)) and len(parts["longmemeval_s"]) == 5
    )
    assert sorted(i for f in parts["longmemeval"] for i in f) == list(range(1, 60, 2))

"""Reciprocal Rank Fusion: hand-computed scores (Cormack et al. 2009, k=60 as in MemoryCPT)."""

import pytest

from memfrontier.retrieve.rrf import rrf_fuse


def test_hand_computed_scores_and_ranks():
    out = rrf_fuse({"a": ["x", "y", "z"], "b": ["y", "x"]}, k=60)
    got = {d: (s, r) for d, s, r in out}
    assert got["x"][0] == pytest.approx(1 / 61 + 1 / 62)
    assert got["y"][0] == pytest.approx(1 / 62 + 1 / 61)
    assert got["z"][0] == pytest.approx(1 / 63)
    assert got["x"][1] == {"a": 1, "b": 2}
    assert got["y"][1] == {"a": 2, "b": 1}
    assert got["z"][1] == {"a": 3}
    # x and y tie exactly (same best rank 1) -> id order; z last
    assert [d for d, _, _ in out] == ["x", "y", "z"]


def test_duplicates_within_a_ranking_count_once():
    out = rrf_fuse({"a": ["x", "x", "y", "x"], "b": ["x"]}, k=60)
    got = {d: s for d, s, _ in out}
    assert got["x"] == pytest.approx(1 / 61 + 1 / 61)  # once from a, once from b
    assert got["y"] == pytest.approx(1 / 62)  # ranks count distinct ids
    assert dict((d, r) for d, _, r in out)["y"] == {"a": 2}


def test_tie_broken_by_best_rank_before_id():
    # k=0 gives exact binary fractions: zz = 1/2 + 1/4, aa = 1/4 + 1/4 + 1/4, both 0.75
    rankings = {
        "r1": ["f1", "zz", "g1", "aa"],
        "r2": ["f2", "g2", "h2", "zz"],
        "r3": ["f3", "g3", "h3", "aa"],
        "r4": ["f4", "g4", "h4", "aa"],
    }
    out = rrf_fuse(rankings, k=0)
    scores = {d: s for d, s, _ in out}
    assert scores["zz"] == scores["aa"] == 0.75
    order = [d for d, _, _ in out]
    assert order.index("zz") < order.index("aa")  # best rank 2 beats best rank 4, despite the id
    assert order[:4] == ["f1", "f2", "f3", "f4"]  # 1.0 each, tie on rank 1 -> by id


def test_top_n_k_and_empty():
    out = rrf_fuse({"a": ["p", "q", "r"]}, k=10, top_n=2)
    assert [(d, round(s, 12)) for d, s, _ in out] == [("p", round(1 / 11, 12)), ("q", round(1 / 12, 12))]
    assert rrf_fuse({}) == []
    assert rrf_fuse({"a": [], "b": []}) == []
    assert rrf_fuse({"a": ["p"]}, top_n=0) == []
    with pytest.raises(ValueError):
        rrf_fuse({"a": ["p"]}, k=-1)


def test_deterministic_regardless_of_dict_order():
    r1 = rrf_fuse({"a": ["x", "y"], "b": ["y", "x", "w"]})
    r2 = rrf_fuse({"b": ["y", "x", "w"], "a": ["x", "y"]})
    assert [(d, s) for d, s, _ in r1] == [(d, s) for d, s, _ in r2]

"""Turn-atomic chunking: hand-checkable packing with a word counter, then the real MiniLM tokenizer."""

import pytest

from memfrontier.core.types import Record, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.store.chunking import chunk_records

A = Scope(user_id="alice")
B = Scope(user_id="bob")


def words(text: str) -> int:
    return len(text.split())


def rec(i, text, *, scope=A, session="s1", ts="2023-05-08T13:56:00", speaker=""):
    return Record(id=f"r{i}", scope=scope, session_id=session, timestamp=ts, text=text, speaker=speaker)


def test_greedy_packing_by_hand():
    recs = [rec(1, "a b c"), rec(2, "d e f"), rec(3, "g h i"), rec(4, "j"), rec(5, "k l m n o p q")]
    chunks = chunk_records(recs, words, max_tokens=6)
    assert [c.record_ids for c in chunks] == [["r1", "r2"], ["r3", "r4"], ["r5"]]
    assert [c.n_tokens for c in chunks] == [6, 4, 7]  # r5 (7 words) is oversized: alone
    assert chunks[0].text == "a b c\nd e f"
    assert all(c.id.startswith("c-") and len(c.id) == 26 for c in chunks)


def test_oversized_record_is_its_own_chunk_between_others():
    recs = [rec(1, "a b"), rec(2, " ".join(["w"] * 20)), rec(3, "c d")]
    chunks = chunk_records(recs, words, max_tokens=5)
    assert [c.record_ids for c in chunks] == [["r1"], ["r2"], ["r3"]]
    assert chunks[1].n_tokens == 20


def test_sessions_and_scopes_never_mix_and_keep_first_appearance_order():
    recs = [
        rec(1, "one", session="s1"),
        rec(2, "two", session="s2", ts="2023-06-01T10:00:00"),
        rec(3, "three", session="s1"),
        rec(4, "four", scope=B, session="s1"),
    ]
    chunks = chunk_records(recs, words, max_tokens=100)
    assert [(c.scope.user_id, c.session_id, c.record_ids) for c in chunks] == [
        ("alice", "s1", ["r1", "r3"]),
        ("alice", "s2", ["r2"]),
        ("bob", "s1", ["r4"]),
    ]
    # same session id, different scope -> different chunk ids
    assert len({c.id for c in chunks}) == 3


def test_chunk_time_is_session_time():
    recs = [rec(1, "a", ts=None), rec(2, "b", ts="2023-05-08T13:56:00"), rec(3, "c", ts="2023-05-08T14:10:00")]
    chunks = chunk_records(recs + [rec(4, "d e f g h", ts="2023-05-08T15:00:00")], words, max_tokens=3)
    assert len(chunks) == 2
    assert {c.timestamp for c in chunks} == {"2023-05-08T13:56:00+00:00"}  # first (non-None) record time of the session


def test_a_session_written_over_several_days_is_cut_where_the_day_changes():
    """Messages added to one session on different days (the default session of ad-hoc adds) keep
    their own day: a chunk holds one day's dated records, dated by that day's first time; an undated
    record joins the chunk it follows. day_times by hand."""
    from memfrontier.core.timeutil import day_times

    jan, jan2, nov = "2023-01-05T09:00:00+00:00", "2023-01-05T18:30:00+00:00", "2024-11-20T09:00:00+00:00"
    assert day_times([jan2, None, nov, jan]) == [jan, jan, nov, jan]  # the day's first; undated: the session's
    assert day_times([None, None]) == [None, None]
    recs = [rec(1, "a", ts=jan2), rec(2, "b", ts=None), rec(3, "c", ts=nov), rec(4, "d", ts=nov), rec(5, "e", ts=jan)]
    chunks = chunk_records(recs, words, max_tokens=100)
    assert [(c.record_ids, c.timestamp) for c in chunks] == [
        (["r1", "r2"], jan),
        (["r3", "r4"], nov),
        (["r5"], jan),
    ]
    one_day = [rec(i, "x", ts=t) for i, t in enumerate((jan2, jan, None))]  # one day: one chunk, as before
    assert [(c.record_ids, c.timestamp) for c in chunk_records(one_day, words, max_tokens=100)] == [
        (["r0", "r1", "r2"], jan)
    ]


def test_deterministic_ids():
    recs = [rec(i, f"turn number {i} about hiking") for i in range(10)]
    c1 = chunk_records(recs, words, max_tokens=12)
    c2 = chunk_records([r.model_copy() for r in recs], words, max_tokens=12)
    assert [c.id for c in c1] == [c.id for c in c2]
    c3 = chunk_records([r.model_copy(update={"session_id": "s2"}) for r in recs], words, max_tokens=12)
    assert not ({c.id for c in c1} & {c.id for c in c3})


def test_invalid_budget():
    with pytest.raises(ValueError):
        chunk_records([rec(1, "a")], words, max_tokens=0)


@pytest.fixture(scope="module")
def embedder():
    return MiniLMEmbedder()


def test_real_tokenizer_budget_respected_and_no_record_split(embedder):
    texts = [
        "I went to the LGBTQ support group yesterday and it was so powerful.",
        "That's amazing! What did you learn there?",
        "Mostly that I'm not alone; people shared stories about transitioning.",
        "Café au lait with 寿司 and a 🍕 emoji, naïve coöperation.",
    ] * 12
    recs = [rec(i, t, speaker="Caroline" if i % 2 else "Melanie") for i, t in enumerate(texts)]
    long_rec = rec(999, " ".join(["pottery"] * 400), speaker="Melanie")
    recs.insert(20, long_rec)
    chunks = chunk_records(recs, embedder.count_tokens, max_tokens=256)

    # every record in exactly one chunk, order preserved
    flat = [rid for c in chunks for rid in c.record_ids]
    assert flat == [r.id for r in recs]
    by_id = {r.id: r for r in recs}
    for c in chunks:
        assert c.text == "\n".join(by_id[i].render() for i in c.record_ids)
        assert c.n_tokens == embedder.count_tokens(c.text)  # WordPiece: additive over "\n"
        if len(c.record_ids) > 1:
            assert c.n_tokens <= 256
    oversized = [c for c in chunks if "r999" in c.record_ids]
    assert len(oversized) == 1 and oversized[0].record_ids == ["r999"] and oversized[0].n_tokens > 256
    # greedy: the first record of the next chunk would not have fitted
    for cur, nxt in zip(chunks, chunks[1:]):
        if cur.record_ids == ["r999"] or nxt.record_ids == ["r999"]:
            continue
        first_next = embedder.count_tokens(by_id[nxt.record_ids[0]].render())
        assert cur.n_tokens + first_next > 256
    assert len(chunks) >= 3


# -- a chunk's vector, derived from its records' vectors (store.records.chunk_vector) -------------


def test_chunk_vector_is_the_token_weighted_mean_normalised_by_hand():
    import numpy as np

    from memfrontier.store.records import chunk_vector

    e1, e2, e3 = np.eye(3, dtype=np.float32)
    # weights 3 and 1: (3, 1, 0) / sqrt(10)
    v = chunk_vector(np.stack([e1, e2]), [3, 1], 254)
    assert v.dtype == np.float32 and v.shape == (3,)
    assert v.tolist() == pytest.approx([3 / 10**0.5, 1 / 10**0.5, 0.0], abs=1e-7)
    # weights 1, 2, 2: (1, 2, 2) / 3
    assert chunk_vector(np.stack([e1, e2, e3]), [1, 2, 2], 254).tolist() == pytest.approx(
        [1 / 3, 2 / 3, 2 / 3], abs=1e-7
    )
    # a record is weighed by what the encoder read: 300 pieces count as the window's 254
    assert chunk_vector(np.stack([e1, e2]), [300, 254], 254).tolist() == pytest.approx(
        [0.5**0.5, 0.5**0.5, 0], abs=1e-7
    )
    assert chunk_vector(np.stack([e1, e2]), [300, 127], 254).tolist() == pytest.approx(
        [2 / 5**0.5, 1 / 5**0.5, 0], abs=1e-7
    )
    # a record counted at 0 tokens still weighs 1
    assert chunk_vector(np.stack([e1, e2]), [0, 1], 254).tolist() == pytest.approx([0.5**0.5, 0.5**0.5, 0], abs=1e-7)
    # one record (e.g. one that alone exceeds the window, its own chunk): its own vector, unchanged
    one = np.array([[0.6, 0.8, 0.0]], dtype=np.float32)
    assert (chunk_vector(one, [900], 254) == one[0]).all()
    # opposite vectors: a zero mean is returned as is (cosine 0 with any query)
    assert chunk_vector(np.stack([e1, -e1]), [5, 5], 254).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="k >= 1"):
        chunk_vector(np.zeros((0, 3), dtype=np.float32), [], 254)
    with pytest.raises(ValueError, match="token counts"):
        chunk_vector(np.stack([e1, e2]), [1], 254)


def test_the_token_window_is_what_minilm_reads_less_its_two_special_tokens(embedder):
    from memfrontier.store.records import token_window

    assert embedder.max_seq_length == 256 and token_window(embedder) == 254
    assert token_window(object()) == 254  # an embedder that does not say: MiniLM's

"""``rag`` over single turns: the turn view, neighbour expansion, the token budget and the
session-grouped rendering (real SQLite, bm25s and MiniLM)."""

from __future__ import annotations

import asyncio

import pytest

from memfrontier.core.types import Budget, Record, Scope
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import TURNS_BM25, TURNS_CHUNKS_RRF, TURNS_RRF, Recipe
from memfrontier.retrieve.rrf import rrf_fuse
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryEnv, Query, get_strategy
from memfrontier.strategies.config import StrategyConfigError
from memfrontier.views.turns import KIND, build_turns, open_turn_bank

A = Scope(user_id="alice")
S1 = [
    ("Ana", "Good morning, how was your weekend?"),
    ("Ben", "Great, I adopted a grey kitten named Pixel."),
    ("Ana", "Lovely! What does Pixel like to eat?"),
    ("Ben", "Mostly tuna, and she sleeps on my keyboard."),
    ("Ana", "I am training for the Lisbon marathon in October."),
]
S2 = [
    ("Ben", "My sister bought a red bicycle yesterday."),
    ("Ana", "Does she ride it to work?"),
]


def recs() -> list[Record]:
    out = []
    for sid, ts, turns in (("s1", "2023-05-08T13:56:00+00:00", S1), ("s2", "2023-06-02T09:00:00+00:00", S2)):
        for i, (who, text) in enumerate(turns, start=1):
            out.append(Record(id=f"{sid}:{i}", scope=A, session_id=sid, speaker=who, timestamp=ts, text=text))
    return out


@pytest.fixture
def env(tmp_path, minilm):
    store = SQLiteStore(tmp_path / "m", minilm)
    store.add(recs())
    yield MemoryEnv(store=store, llm=None, answer_llm=None)
    store.close()


def ctx(env, question: str, **options):
    strat = get_strategy("rag", {"unit": "turn", "retrievers": ["bm25"], **options})
    asyncio.run(strat.build(env, A))
    return asyncio.run(strat.context(Query(text=question, scope=A), env, None, Budget()))


def test_turn_view_has_one_item_per_record_and_rebuilds_nothing(env):
    bank = open_turn_bank(env.store)
    assert build_turns(bank, env.store, A) == {"added": 7, "removed": 0, "kept": 0, "encoded": 0}
    assert build_turns(bank, env.store, A) == {"added": 0, "removed": 0, "kept": 7, "encoded": 0}
    items = bank.items(A, KIND)
    assert [it.source_ids for it in items] == [[r.id] for r in recs()]
    assert items[1].text == 'Ben said, "Great, I adopted a grey kitten named Pixel."'
    assert [it.meta["position"] for it in items] == [0, 1, 2, 3, 4, 0, 1]
    env.store.delete("s2:2", A)  # the delete reaches the turn view (the banks' purger)
    assert [it.source_ids for it in bank.items(A, KIND)][-1] == ["s2:1"]
    assert build_turns(bank, env.store, A) == {"added": 0, "removed": 0, "kept": 6, "encoded": 0}


class CountingEmbedder:
    """The real MiniLM, counting the texts it encodes."""

    def __init__(self, inner):
        self.inner, self.model_id, self.dim, self.texts = inner, inner.model_id, inner.dim, 0

    def encode(self, texts):
        self.texts += len(texts)
        return self.inner.encode(texts)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


def test_the_turn_view_takes_each_turns_vector_from_the_store(tmp_path, minilm):
    """A turn item's text is its record's render() (the text the store embedded when the record was
    added), so the view takes the store's record vector instead of encoding the turn again; a store
    without record vectors leaves the encoding to the bank."""
    emb = CountingEmbedder(minilm)
    store = SQLiteStore(tmp_path / "m", emb)
    store.add(recs())
    assert emb.texts == 7  # each record once
    bank = open_turn_bank(store)
    assert build_turns(bank, store, A) == {"added": 7, "removed": 0, "kept": 0, "encoded": 0}
    assert emb.texts == 7  # the turn view encoded nothing
    items, matrix = bank.vectors(A, KIND)
    assert [it.text for it in items] == [r.render() for r in recs()]
    stored = store.record_vectors(A, [it.source_ids[0] for it in items])
    assert (matrix == stored).all()
    assert abs(matrix - minilm.encode([it.text for it in items])).max() < 1e-5  # what the bank would have encoded
    # a new turn: the store encodes it once when it is added, the view reuses that vector
    store.add([Record(id="s2:3", scope=A, session_id="s2", speaker="Ben", text="Yes, every day.")])
    assert emb.texts == 8
    assert build_turns(bank, store, A)["encoded"] == 0 and emb.texts == 8

    class NoRecordVectors:  # a store that keeps no record vectors (the protocol's older members only)
        def records(self, scope):
            return store.records(scope)

    other = tmp_path / "other"
    other.mkdir()
    from memfrontier.store.bank import MemoryBank

    plain = MemoryBank(other / "turns.db", emb)
    assert build_turns(plain, NoRecordVectors(), A) == {"added": 8, "removed": 0, "kept": 0, "encoded": 8}
    assert emb.texts == 16
    plain.close()
    store.close()


def test_one_turn_hit_reads_that_turn_under_its_session_date(env):
    c = ctx(env, "marathon", k=1)
    assert c.evidence_ids == ["s1:5"]
    assert c.text == '(8 May 2023)\nAna said, "I am training for the Lisbon marathon in October."'


def test_a_session_written_over_two_days_reads_each_turn_under_its_own_day(tmp_path, minilm):
    """Two messages of one session added a year apart: the turn context shows each under its own
    date line, and so does chunk rag (one chunk per day)."""
    store = SQLiteStore(tmp_path / "days", minilm)
    store.add(
        [
            Record(id="m1", scope=A, speaker="Ana", timestamp="2023-01-05T09:00:00", text="I adopted a cat named Tom."),
            Record(id="m2", scope=A, speaker="Ana", timestamp="2024-11-20T09:00:00", text="Tom the cat ran away."),
        ]
    )
    env = MemoryEnv(store=store, llm=None, answer_llm=None)
    c = ctx(env, "When did Ana's cat run away?", k=2)
    assert c.text == (
        '(5 January 2023)\nAna said, "I adopted a cat named Tom."\n(20 November 2024)\nAna said, "Tom the cat ran away."'
    )
    chunks = asyncio.run(get_strategy("rag").context(Query(text="cat", scope=A), env, None, Budget())).text
    assert sorted(chunks.splitlines()) == [
        '(20 November 2024) Ana said, "Tom the cat ran away."',
        '(5 January 2023) Ana said, "I adopted a cat named Tom."',
    ]
    store.close()


def test_a_turn_longer_than_the_whole_budget_is_counted_not_dropped_silently(env):
    """Such a turn can never be shown: the context goes on with the next hits and the ledger says
    why the best one is missing (event rag.turn_over_budget)."""
    from memfrontier.core.ledger import Ledger, use_ledger

    env.store.add([Record(id="big", scope=A, session_id="s9", speaker="Ana", text="marathon " * 400)])
    ledger = Ledger()
    with use_ledger(ledger):
        c = ctx(env, "marathon", k=3, max_tokens=120)
    assert "big" not in c.evidence_ids and c.evidence_ids == ["s1:5"]
    assert ledger.events == {"rag.turn_over_budget": 1}


def test_a_long_turn_is_shown_as_its_excerpt_and_leaves_room_for_others(env, minilm):
    """With excerpt_tokens, the long answer's sentence about the question is shown (not the whole
    answer, not nothing) and the budget still holds the next hit."""
    filler = " ".join(f"Tip {i}: stretch before you run and rest after." for i in range(60))
    long = f"{filler} Your marathon pace should be 5:40 per km. {filler}"
    env.store.add([Record(id="big", scope=A, session_id="s9", speaker="assistant", text=long)])
    assert minilm.count_tokens(long) > 400
    c = ctx(env, "marathon pace", k=3, max_tokens=160)
    assert "big" not in c.evidence_ids  # whole, it never fits
    c = ctx(env, "marathon pace", k=3, max_tokens=160, excerpt_tokens=64)
    assert "big" in c.evidence_ids
    line = next(x for x in c.text.splitlines() if x.startswith("assistant said"))
    assert "Your marathon pace should be 5:40 per km." in line and "…" in line
    assert minilm.count_tokens(line) <= 64 + 8  # the excerpt within its limit, plus the speaker's words
    assert "s1:5" in c.evidence_ids  # "I am training for the Lisbon marathon" still fits beside it
    with pytest.raises(StrategyConfigError, match="unit=turn only"):
        get_strategy("rag", {"excerpt_tokens": 64})


def test_neighbours_add_the_turns_around_each_hit_in_session_order(env):
    c = ctx(env, "tuna", k=1, neighbours=1)
    assert c.evidence_ids == ["s1:3", "s1:4", "s1:5"]
    # a hit at the end of a session has one neighbour; two sessions read in time order, one date line each
    c = ctx(env, "bicycle tuna", k=2, neighbours=1)
    assert c.evidence_ids == ["s1:3", "s1:4", "s1:5", "s2:1", "s2:2"]
    assert c.text.splitlines()[0] == "(8 May 2023)" and c.text.splitlines()[4] == "(2 June 2023)"
    assert len(c.text.splitlines()) == 7


def test_the_token_budget_takes_hits_in_rank_order_while_they_fit(env, minilm):
    n = minilm.count_tokens
    date = n("(8 May 2023)")
    kitten = n('Ben said, "Great, I adopted a grey kitten named Pixel."')
    c = ctx(env, "kitten", k=5, max_tokens=date + kitten)
    assert c.evidence_ids == ["s1:2"]
    c = ctx(env, "kitten", k=5, max_tokens=date + kitten - 1)
    assert c.evidence_ids == [] and c.text == ""
    # one budget for a hit and its neighbours: a group that does not fit is skipped, the next hit tried
    s1_group = date + sum(n(f'{who} said, "{text}"') for who, text in S1[2:5])
    s2_group = n("(2 June 2023)") + sum(n(f'{who} said, "{text}"') for who, text in S2)
    assert s2_group < s1_group
    c = ctx(env, "tuna bicycle", k=2, neighbours=1, max_tokens=s1_group - 1)
    assert c.evidence_ids == ["s2:1", "s2:2"]
    c = ctx(env, "tuna bicycle", k=2, neighbours=1, max_tokens=s1_group + s2_group)
    assert c.evidence_ids == ["s1:3", "s1:4", "s1:5", "s2:1", "s2:2"]


def test_turn_recipes_and_options_are_validated():
    assert get_strategy("rag", {"unit": "turn"}).recipe is TURNS_RRF
    assert get_strategy("rag", {"unit": "turn", "retrievers": ["bm25"]}).recipes == (TURNS_BM25.name,)
    with pytest.raises((StrategyConfigError, ValueError), match="unit=turn only"):
        get_strategy("rag", {"neighbours": 1})
    with pytest.raises((StrategyConfigError, ValueError)):
        get_strategy("rag", {"unit": "turn", "max_tokens": 0})


def test_chunk_rag_is_unchanged(env):
    strat = get_strategy("rag", {"k": 1})
    assert strat.is_built(env, A)
    c = asyncio.run(strat.context(Query(text="marathon", scope=A), env, None, Budget()))
    assert c.evidence_ids == [r.id for r in recs() if r.session_id == "s1"]
    assert c.text.startswith('(8 May 2023) Ana said, "Good morning')


def test_rrf_takes_tied_ranks_from_a_mapping():
    fused = rrf_fuse({"bm25": ["x", "y"], "chunk": {"x": 1, "y": 1, "z": 2}}, k=0)
    assert fused == [("x", 2.0, {"bm25": 1, "chunk": 1}), ("y", 1.5, {"bm25": 2, "chunk": 1}), ("z", 0.5, {"chunk": 2})]


def test_the_chunk_retriever_ranks_each_turn_by_its_chunk(env):
    bank = get_strategy("rag", {"unit": "turn"}).turn_bank(env)
    build_turns(bank, env.store, A)
    # each session is one chunk here: the five turns of session s1 share its rank, s2's come next
    only_chunks = Recipe(name="chunk_only", retrievers=("chunk",), kind="turn")
    hits = hybrid_search(bank, "marathon", A, only_chunks, k=10, store=env.store)
    assert [h.ranks["chunk"] for h in hits] == [1] * 5 + [2] * 2
    assert {h.item.source_ids[0] for h in hits[:5]} == {f"s1:{i}" for i in range(1, 6)}
    with pytest.raises(ValueError, match="pass the store"):
        hybrid_search(bank, "marathon", A, only_chunks, k=10)
    # fused with dense and BM25 at RRF k=5: the tuna turn leads, its score the sum over its three ranks
    top = hybrid_search(bank, "tuna", A, TURNS_CHUNKS_RRF, k=3, store=env.store)[0]
    assert top.item.source_ids == ["s1:4"] and top.ranks["bm25"] == 1 and top.ranks["chunk"] == 1
    assert top.score == pytest.approx(sum(1 / (5 + r) for r in top.ranks.values()))
    c = ctx(env, "tuna", k=1, retrievers=["dense", "bm25", "chunk"])
    assert c.evidence_ids == ["s1:4"]
    with pytest.raises((StrategyConfigError, ValueError)):
        get_strategy("rag", {"retrievers": ["dense", "bm25", "chunk"]})  # chunk ranks turns, not chunks
    with pytest.raises(ValueError, match="needs a recipe with a kind"):
        Recipe(name="bad", retrievers=("dense", "chunk"))


def test_a_turn_renders_said_or_colon():
    r = recs()[1]
    assert r.render() == r.render("said") == 'Ben said, "Great, I adopted a grey kitten named Pixel."'
    assert r.render("colon") == "Ben: Great, I adopted a grey kitten named Pixel."
    assert Record(id="x", text=" no speaker ").render("colon") == "no speaker"
    pic = Record(id="p", speaker="Ana", text="Look!", images=[{"id": "i1", "caption": "a grey kitten"}])
    assert pic.render() == 'Ana said, "Look! [shared image: a grey kitten]"'
    assert pic.render("colon") == "Ana: Look! [image: a grey kitten]"


def test_colon_turns_read_and_count_as_colon_lines(env, minilm):
    c = ctx(env, "marathon", k=1, turn_style="colon")
    assert c.text == "(8 May 2023)\nAna: I am training for the Lisbon marathon in October."
    # the budget counts the colon text: the said line is longer, the colon one fits exactly
    n = minilm.count_tokens
    fits = n("(8 May 2023)") + n("Ben: Great, I adopted a grey kitten named Pixel.")
    assert fits < n("(8 May 2023)") + n('Ben said, "Great, I adopted a grey kitten named Pixel."')
    assert ctx(env, "kitten", k=5, max_tokens=fits, turn_style="colon").evidence_ids == ["s1:2"]
    assert ctx(env, "kitten", k=5, max_tokens=fits).evidence_ids == []
    assert ctx(env, "kitten", k=5, max_tokens=fits - 1, turn_style="colon").evidence_ids == []


def test_neighbour_hits_gives_neighbours_to_the_first_hits_only(env):
    bank = open_turn_bank(env.store)
    build_turns(bank, env.store, A)
    first, second = (h.item.source_ids[0] for h in hybrid_search(bank, "bicycle tuna", A, TURNS_BM25, k=2))
    assert {first, second} == {"s1:4", "s2:1"}
    around = {"s1:4": ["s1:3", "s1:4", "s1:5"], "s2:1": ["s2:1", "s2:2"]}
    c = ctx(env, "bicycle tuna", k=2, neighbours=1, neighbour_hits=1)
    assert sorted(c.evidence_ids) == sorted(around[first] + [second])
    c = ctx(env, "bicycle tuna", k=2, neighbours=1, neighbour_hits=2)
    assert sorted(c.evidence_ids) == sorted(around[first] + around[second])
    for bad in ({"neighbour_hits": 1}, {"turn_style": "colon"}):
        with pytest.raises((StrategyConfigError, ValueError), match="unit=turn only"):
            get_strategy("rag", bad)


def test_the_turn_view_is_confined_to_its_scope(env):
    """Another user's turns (some more relevant) never reach alice's context, by any retriever, with
    neighbours, the chunk retriever or the reranker; deleting all of bob's records leaves alice's turns."""
    bob = Scope(user_id="bob")
    env.store.add(
        [
            Record(id=f"b:{i}", scope=bob, session_id="b", speaker="Bob", timestamp="2023-05-09T10:00:00+00:00", text=t)
            for i, t in enumerate(["Pixel the kitten eats tuna every day.", "My marathon is in Lisbon too."], 1)
        ]
    )
    opts = {"unit": "turn", "retrievers": ["dense", "bm25", "chunk"], "k": 64}
    for extra in ({}, {"neighbours": 2}, {"rerank": True, "turn_style": "colon", "max_tokens": 4000}):
        strat = get_strategy("rag", {**opts, **extra})
        for scope in (A, bob):
            asyncio.run(strat.build(env, scope))
        a = asyncio.run(strat.context(Query(text="Pixel kitten tuna marathon", scope=A), env, None, Budget()))
        b = asyncio.run(strat.context(Query(text="Pixel kitten tuna marathon", scope=bob), env, None, Budget()))
        assert a.evidence_ids and all(not i.startswith("b:") for i in a.evidence_ids), extra
        assert sorted(b.evidence_ids) == ["b:1", "b:2"], extra
    bank = open_turn_bank(env.store)
    assert env.store.delete_all(bob) >= 2
    assert bank.items(bob, KIND) == [] and len(bank.items(A, KIND)) == 7


def test_queries_keep_the_turn_view_in_line_with_the_store(env, tmp_path, minilm, monkeypatch):
    """A record added after the build (by this store object or another one on the same folder) is
    in the next turn context without a rebuild; a deleted one is gone; an unchanged store is not
    re-read, nor is one written only in another scope (the store's per-scope write counter). Every
    strategy reading the store shares its one turn view: another configuration neither copies nor
    re-reads it."""
    import memfrontier.views.turns as turns_module

    calls = []
    real = turns_module.build_turns
    monkeypatch.setattr(turns_module, "build_turns", lambda *a: calls.append(1) or real(*a))
    strat = get_strategy("rag", {"unit": "turn", "retrievers": ["bm25"], "k": 1})
    asyncio.run(strat.build(env, A))

    def ask(q, s=strat):
        return asyncio.run(s.context(Query(text=q, scope=A), env, None, Budget())).evidence_ids

    assert ask("marathon") == ["s1:5"]
    assert ask("marathon") == ["s1:5"]
    assert len(calls) == 1  # the build; the queries read nothing
    other_config = get_strategy("rag-turns-rr")
    assert other_config.turn_bank(env) is strat.turn_bank(env) and other_config.is_built(env, A)
    assert "s1:5" in ask("marathon", other_config) and len(calls) == 1
    env.store.add([Record(id="b1", scope=Scope(user_id="bob"), speaker="Bob", text="I run marathons too.")])
    assert ask("marathon") == ["s1:5"] and len(calls) == 1  # another scope's write: nothing to re-read
    env.store.add([Record(id="s3:1", scope=A, session_id="s3", speaker="Ana", text="I bought a canoe in Porto.")])
    assert ask("canoe Porto") == ["s3:1"]
    other = SQLiteStore(tmp_path / "m", minilm)  # another writer of the same store
    try:
        other.add([Record(id="s3:2", scope=A, session_id="s3", speaker="Ben", text="Kayaks tip over on the Douro.")])
    finally:
        other.close()
    assert ask("kayaks Douro") == ["s3:2"]
    env.store.delete("s3:2", A)
    assert ask("kayaks Douro") != ["s3:2"]
    assert "s3:2" not in [i for it in open_turn_bank(env.store).items(A, KIND) for i in it.source_ids]


def test_on_postgres_a_record_added_after_the_build_is_in_the_next_turn_context(
    pg_database, tmp_path, minilm, monkeypatch
):
    """On PostgreSQL too (its write counter is kept by triggers): an added record is in the next
    turn context, a deleted one gone, and an unchanged scope is not re-read."""
    import memfrontier.views.turns as turns_module
    from memfrontier.store.postgres import PostgresStore

    calls = []
    real = turns_module.build_turns
    monkeypatch.setattr(turns_module, "build_turns", lambda *a: calls.append(1) or real(*a))
    with PostgresStore(pg_database(), minilm, directory=tmp_path / "views") as store:
        store.add(recs())
        env = MemoryEnv(store=store, llm=None, answer_llm=None)
        strat = get_strategy("rag", {"unit": "turn", "retrievers": ["bm25"], "k": 1})
        asyncio.run(strat.build(env, A))

        def ask(q):
            return asyncio.run(strat.context(Query(text=q, scope=A), env, None, Budget())).evidence_ids

        assert ask("marathon") == ["s1:5"]
        store.add([Record(id="b1", scope=Scope(user_id="bob"), speaker="Bob", text="I run marathons too.")])
        assert ask("marathon") == ["s1:5"] and len(calls) == 1  # the build; bob's write: nothing to re-read
        store.add([Record(id="s3:1", scope=A, session_id="s3", speaker="Ana", text="I bought a canoe in Porto.")])
        assert ask("canoe Porto") == ["s3:1"]
        store.delete("s3:1", A)
        assert ask("canoe Porto") != ["s3:1"]

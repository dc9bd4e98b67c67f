"""AutoMEM tools on real components: a real SQLite store (MiniLM + BM25), a real Ladybug graph.
rg / read / index_query, their caps and error observations, scope isolation through every tool,
and the agent-trajectory loader whose step order and counts must survive into rg and the graph."""

import asyncio
import time
from pathlib import Path

import pytest

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Record, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.eval.datasets import DatasetError
from memfrontier.eval.datasets.trajectories import load_trajectories
from memfrontier.llm.embedded import EmbeddedLLM
from memfrontier.llm.metered import MeteredLLM
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies.automem.actions import Action
from memfrontier.strategies.automem.corpus import ScopedCorpus
from memfrontier.strategies.automem.graph import open_graph, state_dir
from memfrontier.strategies.automem.graph_builder import GraphIndexer, graph_from_notes
from memfrontier.strategies.automem.graph_notes import Note
from memfrontier.strategies.automem.tools import (
    Toolbox,
    ToolLimits,
    index_query,
    read,
    rg,
)

DATA = Path(__file__).parent / "data" / "trajectories"
ALICE, BOB, EVE = Scope(user_id="alice"), Scope(user_id="bob"), Scope(user_id="eve")
RUN = "webshop-0001"


def _r(user, sid, i, speaker, text, ts):
    return Record(
        id=f"{user}:{sid}:{i}",
        scope=Scope(user_id=user),
        session_id=f"{user}:{sid}",
        speaker=speaker,
        timestamp=ts,
        text=text,
    )


def chat_records() -> list[Record]:
    d1, d2, d3 = "2023-05-08T10:00:00", "2023-06-10T18:30:00", "2023-07-01T09:00:00"
    return [
        _r("alice", "a1", 0, "Alice", "I adopted a beagle named Biscuit last week.", d1),
        _r("alice", "a1", 1, "Carol", "Biscuit is adorable! How old is he?", d1),
        _r("alice", "a1", 2, "Alice", "He is two years old and loves the beach.", d1),
        _r("alice", "a2", 0, "Alice", "Biscuit and I went hiking at Mount Tam on Saturday.", d2),
        _r("alice", "a2", 1, "Carol", "Mount Tam is great for hiking. Did Biscuit like it?", d2),
        _r("alice", "a2", 2, "Alice", "He did, but he was tired after the hike.", d2),
        _r("bob", "b1", 0, "Bob", "My locker code is 4711, keep it secret.", d3),
        _r("bob", "b1", 1, "Dan", "Got it, Bob. I will not tell Biscuit.", d3),
        _r("eve", "e1", 0, "Eve", "a" * 40 + "!", d3),
    ]


def trajectory():
    (conv,) = load_trajectories(DATA / "webshop.jsonl", DATA / "webshop_questions.jsonl")
    return conv


ALICE_NOTES = [
    Note("Alice adopted a beagle named Biscuit.", ["Alice"], "pets", "2023-05-08T10:00:00", "alice:a1", ["alice:a1:0"]),
    Note(
        "Biscuit is two years old and loves the beach.",
        ["Alice"],
        "pets",
        "2023-05-08T10:00:00",
        "alice:a1",
        ["alice:a1:1", "alice:a1:2"],
    ),
    Note(
        "Alice and Biscuit hiked Mount Tam.",
        ["Alice", "Carol"],
        "hiking",
        "2023-06-10T18:30:00",
        "alice:a2",
        ["alice:a2:0", "alice:a2:1"],
    ),
]
BOB_NOTES = [Note("Bob's locker code is 4711.", ["Bob"], "secrets", "2023-07-01T09:00:00", "bob:b1", ["bob:b1:0"])]


def build_store(path: Path, embedder) -> SQLiteStore:
    """The store every tool test reads: alice, bob and eve chats, the web-shopping trajectory, and
    graphs for alice and bob (hand-written notes) and the trajectory (built from its steps)."""
    store = SQLiteStore(path, embedder)
    store.add(chat_records() + trajectory().records)
    for scope, notes in ((ALICE, ALICE_NOTES), (BOB, BOB_NOTES)):
        g = open_graph("ladybug", store.view_dir("graph"), scope)
        g.replace(graph_from_notes(notes, scope.key()))
        g.close()
    # steps need no model call: the indexer writes one note per step (the embedded model is not loaded)
    llm = MeteredLLM(EmbeddedLLM(), PriceBook.load())
    g = open_graph("ladybug", store.view_dir("graph"), Scope(user_id=RUN))
    asyncio.run(
        GraphIndexer(llm).build(
            store.records(Scope(user_id=RUN)),
            g,
            Scope(user_id=RUN).key(),
            state_dir(store.view_dir("graph"), Scope(user_id=RUN)),
        )
    )
    g.close()
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = build_store(tmp_path_factory.mktemp("automem") / "store", MiniLMEmbedder())
    yield s
    s.close()


@pytest.fixture(scope="module")
def graphs(store):
    opened = {
        k: open_graph("ladybug", store.view_dir("graph"), Scope(user_id=k), read_only=True)
        for k in ("alice", "bob", RUN)
    }
    yield opened
    for g in opened.values():
        g.close()


def corpus(store, scope):
    return ScopedCorpus(store, scope)


# --- rg ----------------------------------------------------------------------------------------


def test_rg_counts_and_ranks_matches(store):
    obs = rg(corpus(store, ALICE), ["Biscuit"])
    assert obs.ok and obs.text.splitlines()[0] == "rg ['Biscuit']: 4 records match"
    assert obs.record_ids == ["alice:a1:0", "alice:a1:1", "alice:a2:0", "alice:a2:1"]
    assert 'alice:a1:0 (8 May 2023) Alice said, "I adopted a beagle named Biscuit last week."' in obs.text
    two = rg(corpus(store, ALICE), ["Biscuit", "hik(e|ing)"])
    # N = 6 records; df(Biscuit) = 4, df(hik) = 3: idf = ln(1 + 6/4) = 0.916, ln(1 + 6/3) = 1.099.
    # a2:0, a2:1 match both (2.015), a2:2 only "hike" (1.099), a1:0, a1:1 only "Biscuit" (0.916)
    assert two.record_ids == ["alice:a2:0", "alice:a2:1", "alice:a2:2", "alice:a1:0", "alice:a1:1"]
    assert two.text.splitlines()[3].startswith('alice:a2:2 (10 June 2023) Alice said, "He did, but he was tired after')
    assert rg(corpus(store, ALICE), ["biscuit"], ignore_case=False).text.endswith(": 0 records match")
    dated = rg(corpus(store, ALICE), ["10 June 2023"])
    assert dated.record_ids == ["alice:a2:0", "alice:a2:1", "alice:a2:2"]


def test_rg_caps_hits_and_characters(store):
    obs = rg(corpus(store, ALICE), ["Biscuit"], limits=ToolLimits(rg_max_hits=2))
    assert obs.truncated and len(obs.record_ids) == 2
    assert obs.text.splitlines()[0] == "rg ['Biscuit']: 4 records match (showing the 2 best: rarest patterns first)"
    short = rg(corpus(store, ALICE), ["Biscuit"], limits=ToolLimits(rg_max_chars=200, rg_context_chars=60))
    assert short.truncated and len(short.text) < 300 and "cut at 200 characters" in short.text


def test_rg_bad_input_is_an_error_observation(store):
    c = corpus(store, ALICE)
    bad = rg(c, ["(unclosed"])
    assert (bad.ok, bad.error) == (False, "bad_pattern") and "invalid regular expression" in bad.text
    assert rg(c, []).error == "bad_args"
    assert rg(c, ["a"] * 7).error == "bad_args"
    assert rg(c, ["x" * 201]).error == "bad_args"


def test_rg_catastrophic_pattern_times_out(store):
    t0 = time.perf_counter()
    obs = rg(corpus(store, EVE), ["(a|aa)+$"], limits=ToolLimits(rg_timeout_s=0.3))
    assert (obs.ok, obs.error) == (False, "timeout") and time.perf_counter() - t0 < 3


# --- read --------------------------------------------------------------------------------------


def test_read_returns_full_records_and_resolves_suffixes(store):
    obs = read(corpus(store, ALICE), ["alice:a1:2", "a2:0"])
    assert obs.ok and obs.record_ids == ["alice:a1:2", "alice:a2:0"]
    assert obs.text.splitlines() == [
        'alice:a1:2 (8 May 2023) Alice said, "He is two years old and loves the beach."',
        'alice:a2:0 (10 June 2023) Alice said, "Biscuit and I went hiking at Mount Tam on Saturday."',
    ]
    cut = read(corpus(store, ALICE), ["alice:a1:0"], limits=ToolLimits(read_record_chars=50))
    assert cut.truncated and cut.text.endswith(" ...")


def test_read_out_of_scope_looks_like_missing(store):
    c = corpus(store, ALICE)
    other, missing = read(c, ["bob:b1:0"]), read(c, ["nope:1"])
    assert (other.ok, other.error, missing.error) == (False, "not_found", "not_found")
    assert other.text == "error: no record with id 'bob:b1:0' in this memory"
    assert "4711" not in other.text
    assert other.events == ["out_of_scope"] and missing.events == ["not_found"]
    mixed = read(c, ["alice:a1:0", "bob:b1:0"])
    assert mixed.ok and mixed.record_ids == ["alice:a1:0"] and "(no record with id 'bob:b1:0'" in mixed.text
    assert read(c, []).error == "bad_args" and read(c, ["x"] * 11).error == "bad_args"


# --- index_query --------------------------------------------------------------------------------


def test_index_query_reads_the_graph(store, graphs):
    c = corpus(store, ALICE)
    obs = index_query(
        graphs["alice"], "MATCH (m:Memory)-[:OF_TOPIC]->(t:Topic {name: 'pets'}) RETURN m.text ORDER BY m.pos", c
    )
    assert obs.ok and obs.text.splitlines() == [
        "2 rows; columns: m.text",
        "Alice adopted a beagle named Biscuit.",
        "Biscuit is two years old and loves the beach.",
    ]
    nodes = index_query(graphs["alice"], "MATCH (m:Memory)-[:SAID_BY]->(:Speaker {name: 'Carol'}) RETURN m", c)
    assert nodes.record_ids == ["alice:a2:0", "alice:a2:1"]  # evidence from the note's record_ids
    assert nodes.text.splitlines()[1].startswith('Memory{id: "m2", text: "Alice and Biscuit hiked Mount Tam."')
    capped = index_query(graphs["alice"], "MATCH (m:Memory) RETURN m.pos", c, ToolLimits(index_max_rows=2))
    assert capped.truncated and capped.text.splitlines()[0] == "2+ rows; columns: m.pos"


def test_index_query_errors_are_observations(store, graphs):
    c = corpus(store, ALICE)
    w = index_query(graphs["alice"], "MATCH (m:Memory) DETACH DELETE m", c)
    assert (w.ok, w.error) == (False, "rejected") and "read-only" in w.text
    p = index_query(graphs["alice"], "MATCH (m:Memory RETURN m", c)
    assert p.error == "error" and "Parser exception" in p.text
    t = index_query(
        graphs["alice"],
        "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y WITH x, y WHERE (x * y) % 7 = 3 RETURN count(*)",
        c,
        ToolLimits(index_timeout_s=0.05),
    )
    assert t.error == "timeout"
    assert index_query(None, "MATCH (m) RETURN m", c).error == "no_index"
    assert graphs["alice"].counts()["Memory"] == 3  # nothing was written


def test_scope_isolation_through_every_tool(store, graphs):
    a = corpus(store, ALICE)
    assert [r.id for r in a.records] == [f"alice:a{s}:{i}" for s in (1, 2) for i in range(3)]
    assert rg(a, ["4711|locker"]).text.endswith(": 0 records match")
    assert rg(corpus(store, BOB), ["Biscuit"]).record_ids == ["bob:b1:1"]
    assert read(a, ["bob:b1:0", "b1:0"]).error == "not_found"
    found = index_query(graphs["alice"], "MATCH (m:Memory) WHERE m.text CONTAINS '4711' RETURN m.text", a)
    assert found.text.startswith("0 rows")
    # dump resolves ids through the same corpus: another scope's record never reaches the model
    llm = MeteredLLM(EmbeddedLLM(), PriceBook.load())  # not loaded: the ids fail before any call
    ledger = Ledger()
    with use_ledger(ledger):
        d = asyncio.run(Toolbox(a, dump_llm=llm).execute(Action("dump", ids=["bob:b1:0"]), "What is the code?"))
    assert (d.ok, d.error, d.text) == (False, "not_found", "error: no record with id 'bob:b1:0' in this memory")
    assert ledger.calls == [] and ledger.events == {"automem.dump.out_of_scope": 1}
    # even a note of another scope citing alice's ids could not leak: bob's graph is another file
    assert index_query(graphs["bob"], "MATCH (m:Memory) RETURN m.text", corpus(store, BOB)).text.endswith("4711.")


def test_toolbox_counts_events_in_the_ledger(store, graphs):
    box = Toolbox(corpus(store, ALICE), graph=graphs["alice"])
    ledger = Ledger()
    with use_ledger(ledger):
        for a in (
            Action("rg", patterns=["("]),
            Action("read", ids=["bob:b1:0"]),
            Action("index_query", cypher="CREATE (m:Memory {id: 'x'})"),
            Action("dump", ids=[]),
            Action("fly"),
            Action("rg", patterns=["Biscuit"]),
        ):
            asyncio.run(box.execute(a, "q"))
    assert ledger.events == {
        "automem.rg.bad_pattern": 1,
        "automem.read.out_of_scope": 1,
        "automem.index_query.rejected": 1,
        "automem.dump.unavailable": 1,
        "automem.planner.unknown_tool": 1,
    }
    assert ledger.calls == []  # no tool but dump calls a model


def test_catalog_describes_the_scope(store):
    cat = corpus(store, ALICE).catalog().splitlines()
    assert cat == [
        "Memory catalog: 6 records (turn) in 2 sessions, 8 May 2023 to 10 June 2023.",
        "Speakers: Alice, Carol.",
        "Record ids look like alice:a1:0.",
        "alice:a1 (8 May 2023): 3 records alice:a1:0 .. alice:a1:2",
        "alice:a2 (10 June 2023): 3 records alice:a2:0 .. alice:a2:2",
    ]
    assert corpus(store, Scope(user_id="nobody")).catalog() == "Memory catalog: empty (no records in this scope)."


# --- trajectories -------------------------------------------------------------------------------


def test_trajectory_loader_keeps_steps_and_questions():
    conv = trajectory()
    assert conv.id == RUN and len(conv.records) == 14 and conv.meta["total_reward"] == 1.0
    assert conv.meta["task"].startswith("i need a pair of red running shoes")
    r = conv.records[4]
    assert (r.id, r.kind, r.step_index, r.action) == (f"{RUN}:step4", "step", 4, "click[< Prev]")
    assert r.scope == Scope(user_id=RUN, run_id=RUN) and r.meta["state"] == {"page": "results"}
    assert [q.answer for q in conv.questions] == [
        "3",
        "3",
        "3",
        "2",
        "clicked < Prev to go back",
        "11",
        "PaceMaker Road Runner",
    ]
    assert conv.questions[0].evidence_ids == [f"{RUN}:step1", f"{RUN}:step3", f"{RUN}:step9"]


def test_trajectory_steps_survive_the_store(store):
    recs = store.records(Scope(user_id=RUN))
    assert [r.step_index for r in recs] == list(range(14))
    assert recs[6].action == "click[Reviews]" and recs[6].observation.startswith("Reviews for Velocity Knit")


def test_trajectory_questions_answerable_through_rg(store):
    c = corpus(store, Scope(user_id=RUN))
    scrolls = rg(c, [r"action: scroll"])
    assert scrolls.text.splitlines()[0].endswith(": 3 records match")  # q1: 3
    assert scrolls.record_ids == [f"{RUN}:step{i}" for i in (1, 3, 9)]
    backs = rg(c, [r"action: click\[< Prev\]"])
    assert backs.record_ids == [f"{RUN}:step{i}" for i in (4, 7, 8)]  # q2: 3
    # the button also appears on every item page: counting needs the action, which survived
    assert rg(c, [r"< Prev"]).record_ids == [f"{RUN}:step{i}" for i in (2, 4, 5, 7, 8, 10)]
    products = rg(c, [r"action: click\[B0"])
    assert products.record_ids == [f"{RUN}:step{i}" for i in (2, 5, 10)]  # q3: 3; q4: first at step 2
    assert rg(c, [r"action: click\[10\]"]).text.splitlines()[1].startswith(f"{RUN}:step11 ")  # q6: 11


def test_trajectory_questions_answerable_through_index_query(store, graphs):
    g, c = graphs[RUN], corpus(store, Scope(user_id=RUN))

    def rows(q):
        obs = index_query(g, q, c)
        assert obs.ok, obs.text
        return g.query(q).rows

    assert rows("MATCH (m:Memory)-[:OF_TOPIC]->(t:Topic {name: 'scroll'}) RETURN count(m)") == [[3]]
    assert rows("MATCH (m:Memory) WHERE m.action = 'click[< Prev]' RETURN m.step ORDER BY m.step") == [[4], [7], [8]]
    assert rows("MATCH (m:Memory) WHERE m.action STARTS WITH 'click[B0' RETURN count(DISTINCT m.action)") == [[3]]
    assert rows("MATCH (m:Memory) WHERE m.action STARTS WITH 'click[B0' RETURN m.step ORDER BY m.step LIMIT 1") == [[2]]
    assert rows(
        "MATCH (a:Memory)-[:FOLLOWS]->(b:Memory) WHERE a.action = 'click[Reviews]' RETURN b.step, b.action"
    ) == [[7, "click[< Prev]"]]
    assert rows("MATCH (m:Memory) WHERE m.action = 'click[10]' RETURN m.step") == [[11]]
    assert rows("MATCH (m:Memory)-[:SAID_BY]->(s:Speaker) RETURN s.name, count(m)") == [["agent", 14]]
    bought = index_query(g, "MATCH (m:Memory) WHERE m.action = 'click[Buy Now]' RETURN m.step, m.text", c)
    assert "PaceMaker Road Runner" in bought.text and bought.ok  # q7


def test_trajectory_loader_rejects_bad_lines(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"run_id": "r", "step": 0, "action": "a"}\n{"run_id": "r", "step": 0, "action": "b"}\n')
    with pytest.raises(DatasetError, match=r"t.jsonl:2: step 0 of run 'r' appears twice"):
        load_trajectories(f)
    f.write_text('{"run_id": "r", "step": 0}\n')
    with pytest.raises(DatasetError, match=r"t.jsonl:1: 'action' must be a non-empty str"):
        load_trajectories(f)
    f.write_text('{"run_id": "r", "step": -1, "action": "a"}\n')
    with pytest.raises(DatasetError, match="integer >= 0"):
        load_trajectories(f)
    f.write_text("not json\n")
    with pytest.raises(DatasetError, match="not JSON"):
        load_trajectories(f)
    with pytest.raises(DatasetError, match="not found"):
        load_trajectories(tmp_path / "missing.jsonl")

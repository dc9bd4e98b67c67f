"""The AutoMEM graph index: the read-only Cypher guard, name dedup, notes, windows, the builder
and the real Ladybug backend (write, read-only transaction, time limit, per-scope files)."""

import asyncio
import json
import os

import pytest
from fakes import ScriptedClient

from memfrontier.core.fallbacks import fallback_report
from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Record, Scope
from memfrontier.llm.metered import MeteredLLM
from memfrontier.strategies.automem.graph import GraphQueryError, ladybug_store, open_graph, state_dir
from memfrontier.strategies.automem.graph.dedup import dedup_names, name_similarity, normalize_name
from memfrontier.strategies.automem.graph.guard import CypherRejected, check_read_only, strip_literals
from memfrontier.strategies.automem.graph_builder import GraphIndexer, graph_from_notes
from memfrontier.strategies.automem.graph_notes import (
    Note,
    Window,
    grounded,
    make_windows,
    notes_from_reply,
    read_reply,
    step_note,
)

U = Scope(user_id="u")

# --- guard -------------------------------------------------------------------------------------

READS = [
    "MATCH (m:Memory) RETURN m.text LIMIT 5",
    "MATCH (m:Memory) WHERE m.text CONTAINS 'set up the tent' RETURN m.id;",
    "OPTIONAL MATCH (m:Memory)-[:SAID_BY]->(s:Speaker) RETURN s.name, count(m)",
    "// create nothing\nMATCH (m:Memory) /* DELETE */ RETURN count(*)",
    "UNWIND [1, 2] AS x RETURN x",
    "CALL show_tables() RETURN *",
    "MATCH (m:Memory) WITH m ORDER BY m.pos RETURN m.step",
    'MATCH (t:Topic {name: "merge"}) RETURN t',
]
WRITES = [
    ("CREATE (m:Memory {id: 'x'})", "CREATE"),
    ("MATCH (m:Memory) SET m.text = 'x' RETURN m", "SET"),
    ("MATCH (m:Memory) DETACH DELETE m", "DETACH"),
    ("MATCH (m:Memory) DELETE m", "DELETE"),
    ("MERGE (s:Speaker {id: 'y'}) RETURN s", "MERGE"),
    ("MATCH (m:Memory) REMOVE m.text RETURN m", "REMOVE"),
    ("DROP TABLE Memory", "DROP"),
    ("LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row", "LOAD"),
    ("COPY Memory FROM 'x.csv'", "COPY"),
    ("match (m:Memory) set m.x = 1 return m", "SET"),
    ("MATCH (m) FOREACH (x IN [1] | CREATE (:Topic)) RETURN m", "FOREACH"),
    ("CALL apoc.create.node(['X'], {}) YIELD node RETURN node", "apoc.create.node"),
    ("CALL db.createLabel('X')", "db.createlabel"),
    ("MATCH (m:Memory) RETURN m; MATCH (n) DETACH DELETE n", "several statements"),
    ("MATCH (m:Memory)", "RETURN"),
    ("BEGIN TRANSACTION", "BEGIN"),
    ("", "empty"),
    ("UNWIND range(1, 2000000000) AS x RETURN sum(x)", "range()"),
    ("MATCH (m:Memory) WHERE m.text = 'unterminated RETURN m", "unterminated"),
]


@pytest.mark.parametrize("q", READS)
def test_guard_accepts_read_queries(q):
    assert check_read_only(q) == q.strip().rstrip(";").rstrip()


@pytest.mark.parametrize("q,word", WRITES)
def test_guard_rejects_writes_before_the_database(q, word):
    with pytest.raises(CypherRejected) as e:
        check_read_only(q)
    assert word.lower() in str(e.value).lower()


def test_strip_literals_keeps_positions():
    q = "MATCH (m) WHERE m.t = 'a;b' RETURN m // c"
    s = strip_literals(q)
    assert len(s) == len(q) and ";" not in s and s.startswith("MATCH (m) WHERE m.t = '   ' RETURN m")


# --- dedup -------------------------------------------------------------------------------------


def test_normalize_and_similarity_values():
    assert normalize_name("  Évan  O'Neil! ") == "evan oneil"
    assert normalize_name("!!!") == ""
    # difflib ratio = 2 * matches / (len a + len b)
    assert name_similarity("Caroline", "Carolin") == pytest.approx(2 * 7 / 15)
    assert name_similarity("hiking", "hike") == pytest.approx(2 * 3 / 10)
    assert name_similarity("Evan", "EVAN.") == 1.0


def test_dedup_exact_then_similarity_most_frequent_wins():
    names = ["Evan", "evan", "Evan.", "Sam", "Carolin", "Caroline", "Caroline", "hiking", "hike"]
    m = dedup_names(names)
    assert m["evan"] == m["Evan."] == m["Evan"] == "Evan"  # normalised exact, first seen
    assert m["Carolin"] == "Caroline"  # ratio 0.933 >= 0.85; "Caroline" is more frequent
    assert m["Sam"] == "Sam"
    assert m["hike"] == "hike" and m["hiking"] == "hiking"  # ratio 0.6: stays apart


def test_dedup_uses_embeddings_when_given():
    import numpy as np

    vec = {"hiking": [1.0, 0.0], "hike": [0.96, 0.28], "painting": [0.0, 1.0]}
    m = dedup_names(["hiking", "hiking", "hike", "painting"], embed=lambda xs: np.array([vec[x] for x in xs]))
    assert m["hike"] == "hiking"  # cosine 0.96 >= 0.88
    assert m["painting"] == "painting"


# --- windows and notes -------------------------------------------------------------------------


def _turn(i, session, speaker, text, ts="2023-05-08T10:00:00"):
    return Record(
        id=f"c:{session}:{i}", scope=Scope(user_id="u"), session_id=session, speaker=speaker, timestamp=ts, text=text
    )


def _step(i, action, obs):
    return Record(
        id=f"run:step{i}",
        kind="step",
        scope=Scope(user_id="run"),
        session_id="run:episode",
        speaker="agent",
        text="",
        step_index=i,
        action=action,
        observation=obs,
    )


def test_make_windows_cuts_on_session_size_and_steps():
    recs = [_turn(i, "s1", "Ann", f"t{i}") for i in range(5)] + [_turn(0, "s2", "Bob", "x")]
    recs += [_step(0, "click[a]", "o"), _step(1, "scroll[down]", "o"), _turn(9, "s2", "Bob", "y")]
    ws = make_windows(recs, window_turns=2)
    assert [len(w.records) for w in ws] == [2, 2, 1, 1, 1, 1, 1]
    assert [w.is_step for w in ws] == [False, False, False, False, True, True, False]
    assert ws[0].speakers == ["Ann"]
    with pytest.raises(ValueError):
        make_windows(recs, 0)
    # one session written over two days: a window is one day's (it is dated by its first record)
    days = [_turn(i, "s1", "Ann", f"t{i}", ts=t) for i, t in enumerate(["2023-01-05T09:00:00+00:00", None,
            "2023-01-05T20:00:00+00:00", "2024-11-20T09:00:00+00:00", "2024-11-20T10:00:00+00:00"])]  # fmt: skip
    assert [[r.id for r in w.records] for w in make_windows(days, window_turns=20)] == [
        ["c:s1:0", "c:s1:1", "c:s1:2"],
        ["c:s1:3", "c:s1:4"],
    ]


def test_step_note_keeps_step_and_action():
    n = step_note(_step(3, "scroll[down]", "more results"))
    assert (n.step, n.action, n.topic, n.source, n.record_ids) == (3, "scroll[down]", "scroll", "step", ["run:step3"])


def test_notes_from_reply_validates_grounds_and_matches_speakers():
    w = Window(
        [
            _turn(0, "s1", "Evan", "I drove my new Prius to Canada last week."),
            _turn(1, "s1", "Sam", "Wow, how was the trip to Canada?"),
        ],
        speakers=["Evan", "Sam"],
    )
    reply = json.dumps(
        {
            "notes": [
                {"text": "Evan drove his new Prius to Canada.", "speakers": ["evan"], "topic": "Travel"},
                {"text": "The American Revolution began in 1775.", "speakers": ["George"], "topic": "history"},
                {"text": "Sam asked about the Canada trip.", "speakers": ["Thomas"], "topic": "travel"},
            ]
        }
    )
    ledger = Ledger()
    with use_ledger(ledger):
        notes = notes_from_reply(reply, w)
    assert [n.text for n in notes] == ["Evan drove his new Prius to Canada.", "Sam asked about the Canada trip."]
    assert notes[0].speakers == ["Evan"] and notes[0].topic == "travel"
    assert notes[1].speakers == ["Sam"]  # "Thomas" is no speaker here: the best word overlap decides
    assert notes[0].record_ids == ["c:s1:0", "c:s1:1"] and notes[0].time == "2023-05-08T10:00:00+00:00"
    assert ledger.events == {"indexer.ungrounded_note": 1, "indexer.unknown_speaker": 1}
    assert grounded("Evan drove to Canada", w) and not grounded("Text", w) and not grounded("Evan said", w)
    assert not grounded("Thomas Jefferson founded Canada", w)  # 1 of 4 content words in the window


def test_copies_turns_catches_dialogue_quotes_and_cut_copies_but_not_retellings():
    from memfrontier.views.copies import copies_turns, names_absent_people

    turn = (
        "Hey Evan, good to see you! What is new since we last met? I have been working on the car all "
        "week and it is finally done, so I can drive it to the lake this weekend with the kids."
    )
    assert copies_turns("Sam said, 'Hey Evan, good to see you! What is new since we last met? I have been", [turn])
    assert copies_turns("Sam: Hey Evan, good to see you", [turn])
    assert copies_turns('Sam replied, "Hey Evan, good to see you!"', [turn])
    assert copies_turns("Sam told Evan: \u201cWhat is new since we last met?\u201d", [turn])
    assert not copies_turns("Sam replied that the car is finally done.", [turn])
    assert copies_turns(turn.upper(), [turn])  # case and punctuation never hide a copy
    assert not copies_turns("Sam said it is finally done and he would drive it to the lake.", [turn])
    assert not copies_turns("Sam finished repairing his car and plans a lake trip with the kids.", [turn])
    assert names_absent_people("Tomasz met Sam.", ("Priyanka", "Tomasz"), [turn])
    assert not names_absent_people("Tomasz met Sam.", ("Priyanka", "Tomasz"), [turn, "Tomasz, hi!"])


def test_notes_that_copy_a_turn_or_name_the_examples_people_are_dropped():
    """The 1.5B indexer returned turns as notes ("Sam said, 'Hey Evan...'": 106 of 120 notes of
    LoCoMo conv-49 with prompt v2): a copy is no note, nor is a note naming a person of the
    prompt's worked example whom the window does not name; a window left with neither falls back."""
    from memfrontier.strategies.automem.graph_notes import EXAMPLE_NAMES, INDEXER_INSTRUCTION

    a, b = EXAMPLE_NAMES
    assert a in INDEXER_INSTRUCTION and b in INDEXER_INSTRUCTION
    w = Window(
        [
            _turn(0, "s1", "Sam", "Hey Evan, good to see you! What's new since we last met?"),
            _turn(1, "s1", "Evan", "I took my family on a road trip to Jasper last weekend."),
        ],
        speakers=["Sam", "Evan"],
    )
    reply = json.dumps(
        {
            "notes": [
                {
                    "text": "Sam said, 'Hey Evan, good to see you! What's new since we last met?'",
                    "speakers": ["Sam"],
                    "topic": "greeting",
                },
                {
                    "text": f"Evan took his family and {b} on a road trip to Jasper.",
                    "speakers": ["Evan"],
                    "topic": "travel",
                },
                {
                    "text": "Evan took his family on a road trip to Jasper the weekend before.",
                    "speakers": ["Evan"],
                    "topic": "travel",
                },
            ]
        }
    )
    ledger = Ledger()
    with use_ledger(ledger):
        notes = notes_from_reply(reply, w)
        assert [n.text for n in notes] == ["Evan took his family on a road trip to Jasper the weekend before."]
        copies_only = json.dumps(
            {
                "notes": [
                    {
                        "text": "Evan: I took my family on a road trip to Jasper last weekend.",
                        "speakers": ["Evan"],
                        "topic": "travel",
                    }
                ]
            }
        )
        assert notes_from_reply(copies_only, w) is None  # the window falls back to its turns
    assert ledger.events == {"indexer.copied_note": 2, "indexer.example_echo": 1}
    # the fallback's reason: what most refused notes met (the window's fallback record names it)
    with use_ledger(Ledger()):
        assert read_reply(copies_only, w) == (None, "copied_turns")
        assert read_reply(reply, w)[1] is None
        assert read_reply('{"notes": []}', w) == (None, "invalid")
        assert read_reply("garbage", w) == (None, "unparsable")
        assert read_reply('{"notes": [{"topic": "x"}]}', w) == (None, "invalid")
        vague = {"text": "They talked about many things and plans together.", "speakers": ["Evan"], "topic": "x"}
        copy = json.loads(copies_only)["notes"][0]
        assert read_reply(json.dumps({"notes": [vague, vague, copy]}), w) == (None, "ungrounded")


def test_the_indexer_prompts_examples_pass_its_own_checks():
    """Each worked example of the indexer's instruction (two named people; a user and an AI
    assistant) is a window whose notes the indexer's own rules keep: grounded, no copy, no echo."""
    import re

    from memfrontier.strategies.automem.graph_notes import INDEXER_INSTRUCTION

    examples = INDEXER_INSTRUCTION.split("Excerpt:\n")[1:]
    assert len(examples) == 2
    for i, ex in enumerate(examples):
        turns = re.findall(r'^\[\d\] (\w+) said, "(.*)"$', ex, re.M)
        reply = ex.split("JSON: ", 1)[1].split("\n")[0]
        w = Window(
            [_turn(j, "s1", who, text) for j, (who, text) in enumerate(turns)],
            speakers=list(dict.fromkeys(who for who, _ in turns)),
        )
        ledger = Ledger()
        with use_ledger(ledger):
            notes = notes_from_reply(reply, w)
        assert len(turns) == 2 and ledger.events == {}
        assert [n.speakers for n in notes] == [[turns[0][0]], [turns[1][0]]]
    assert turns[0][0] == "user" and notes[0].text.startswith("The user")


def test_a_note_cut_at_the_schema_limit_loses_its_partial_word_and_is_seen_as_a_copy():
    """Under the schema's grammar the 1.5B indexer's quote of a long turn ends at 160 characters
    mid-word, often on a stray token ("... It must be awesome,但"): the partial word is dropped, so
    the quote is caught as a copy of the turn instead of slipping past the copy check."""
    from memfrontier.strategies.automem.graph_notes import NOTE_MAX_CHARS, NoteOut

    turn = (
        "Hey Calvin, how's the tour with Frank Ocean? I was pondering our chat the other day about "
        "fame and its impact on relationships. It must be awesome, but also exhausting, right?"
    )
    cut = (
        "Dave said, 'Hey Calvin, how's the tour with Frank Ocean? I was pondering our chat the other day "
        "about fame and its impact on relationships. It must be awesome,但"
    )
    assert len(cut) == NOTE_MAX_CHARS
    assert NoteOut(text=cut).text == cut[: cut.rindex(" ")]  # "... It must be"
    assert NoteOut(text="x" * 200).text == "x" * NOTE_MAX_CHARS  # one overlong word: cut, not emptied
    assert NoteOut(text="Dave asked Calvin about the tour.").text == "Dave asked Calvin about the tour."
    w = Window([_turn(0, "s1", "Dave", turn)], speakers=["Dave"])
    ledger = Ledger()
    with use_ledger(ledger):
        reply = json.dumps({"notes": [{"text": cut, "speakers": ["Dave"], "topic": "tour"}]})
        assert notes_from_reply(reply, w) is None
    assert ledger.events == {"indexer.copied_note": 1}


@pytest.mark.parametrize(
    "reply,event",
    [
        ("not json at all", "parse_error.indexer"),
        ('{"notes": []}', "invalid_output.indexer"),
        ('{"notes": [{"text": "Thomas Jefferson", "speakers": [], "topic": ""}]}', "indexer.ungrounded_note"),
    ],
)
def test_bad_indexer_replies_are_counted(reply, event):
    w = Window([_turn(0, "s1", "Evan", "I drove my new Prius.")], speakers=["Evan"])
    ledger = Ledger()
    with use_ledger(ledger):
        assert notes_from_reply(reply, w) is None
    assert ledger.events[event] == 1


# --- graph data --------------------------------------------------------------------------------


def _notes():
    return [
        Note("Evan bought a Prius.", ["Evan"], "cars", "2023-05-08T10:00:00", "s1", ["c:1"]),
        Note("Sam went hiking.", ["Sam", "evan"], "Hiking", "2023-05-08T10:00:00", "s1", ["c:2"]),
        Note("Evan. sold the Prius.", ["Evan."], "car", "2023-06-01T10:00:00", "s2", ["c:3", "c:4"]),
        Note("agent said step 0", ["agent"], "click", "", "r", ["r:0"], step=0, action="click[x]", source="step"),
    ]


def test_graph_from_notes_counts_dedup_and_order():
    g = graph_from_notes(_notes(), U.key())
    # speakers: Evan / evan / Evan. normalise to "evan" -> one node; topics: "car" joins "cars"
    # (difflib ratio 2*3/7 = 0.857 >= 0.85), "Hiking" is stored lower-case
    assert name_similarity("cars", "car") == pytest.approx(6 / 7)
    assert g.counts() == {"Memory": 4, "Speaker": 3, "Topic": 3, "SAID_BY": 5, "OF_TOPIC": 4, "FOLLOWS": 3}
    assert [s["name"] for s in g.speakers] == ["Evan", "Sam", "agent"]
    assert [t["name"] for t in g.topics] == ["cars", "hiking", "click"]
    assert g.of_topic == [("m0", "t:cars"), ("m1", "t:hiking"), ("m2", "t:cars"), ("m3", "t:click")]
    assert g.follows == [("m0", "m1"), ("m1", "m2"), ("m2", "m3")]
    assert [m["step"] for m in g.memories] == [-1, -1, -1, 0] and g.memories[2]["record_ids"] == ["c:3", "c:4"]


# --- Ladybug -----------------------------------------------------------------------------------


@pytest.fixture()
def graph(tmp_path):
    g = open_graph("ladybug", tmp_path, U)
    g.replace(graph_from_notes(_notes(), U.key()))
    yield g
    g.close()


def test_ladybug_round_trip_and_counts(graph, tmp_path):
    assert graph.counts() == {"Memory": 4, "Speaker": 3, "Topic": 3, "SAID_BY": 5, "OF_TOPIC": 4, "FOLLOWS": 3}
    rows = graph.query("MATCH (m:Memory)-[:SAID_BY]->(s:Speaker {name: 'Evan'}) RETURN m.text ORDER BY m.pos").rows
    assert rows == [["Evan bought a Prius."], ["Sam went hiking."], ["Evan. sold the Prius."]]
    r = graph.query("MATCH (a:Memory)-[:FOLLOWS]->(b:Memory) WHERE a.pos = 2 RETURN b.step, b.action, b.record_ids")
    assert r.rows == [[0, "click[x]", ["r:0"]]] and r.columns == ["b.step", "b.action", "b.record_ids"]
    assert (state_dir(tmp_path, U) / "graph.lbug").exists()


def test_many_scopes_graphs_are_open_at_once(tmp_path):
    """A LongMemEval run holds one graph per question's scope open: with Ladybug's default 8 TiB
    reservation per database the 16th failed to open ("Mmap ... failed")."""
    graphs = [open_graph("ladybug", tmp_path, Scope(user_id=f"u{i}")) for i in range(24)]
    try:
        for g in graphs:
            g.replace(graph_from_notes(_notes(), U.key()))
        assert [g.query("MATCH (m:Memory) RETURN count(m)").rows for g in graphs] == [[[4]]] * 24
    finally:
        for g in graphs:
            g.close()


def test_ladybug_caps_rows(graph):
    r = graph.query("MATCH (m:Memory) RETURN m.id", max_rows=2)
    assert len(r.rows) == 2 and r.truncated


def test_ladybug_errors_and_timeout(graph):
    with pytest.raises(GraphQueryError) as e:
        graph.query("MATCH (m:Memory RETURN m")
    assert e.value.kind == "error" and "Parser exception" in str(e.value)
    with pytest.raises(GraphQueryError) as e:
        graph.query("MATCH (m:Nope) RETURN m")
    assert e.value.kind == "error"
    with pytest.raises(GraphQueryError) as e:
        graph.query(
            "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y WITH x, y WHERE (x * y) % 7 = 3 RETURN count(*)",
            timeout_s=0.05,
        )
    assert e.value.kind == "timeout"
    assert graph.query("MATCH (m:Memory) RETURN count(m)").rows == [[4]]  # still usable


def test_ladybug_refuses_writes_even_past_the_guard(graph, monkeypatch):
    with pytest.raises(CypherRejected):
        graph.query("MATCH (m:Memory) SET m.text = 'x' RETURN m")
    monkeypatch.setattr(ladybug_store, "check_read_only", lambda q: q)  # second lock: read-only transaction
    with pytest.raises(GraphQueryError) as e:
        graph.query("CREATE (m:Memory {id: 'evil'}) RETURN m")
    assert "read-only" in str(e.value)
    monkeypatch.undo()
    assert graph.query("MATCH (m:Memory) RETURN count(m)").rows == [[4]]


def test_scopes_have_separate_graph_files(tmp_path):
    a, b = (
        open_graph("ladybug", tmp_path, Scope(user_id="alice")),
        open_graph("ladybug", tmp_path, Scope(user_id="bob")),
    )
    a.replace(graph_from_notes(_notes()[:1], Scope(user_id="alice").key()))
    b.replace(graph_from_notes(_notes()[1:2], Scope(user_id="bob").key()))
    assert a.query("MATCH (m:Memory) RETURN m.text").rows == [["Evan bought a Prius."]]
    assert b.query("MATCH (m:Memory) RETURN m.text").rows == [["Sam went hiking."]]
    ro = open_graph("ladybug", tmp_path, Scope(user_id="alice"), read_only=True)
    a.close()
    assert ro.query("MATCH (m:Memory) RETURN count(m)").rows == [[1]]
    ro.close()
    b.close()


def test_open_graph_rejects_unknown_backend(tmp_path):
    with pytest.raises(ValueError):
        open_graph("sqlite", tmp_path, U)


# --- builder (scripted model: control flow of cache / idempotence only) -------------------------


def test_a_build_stopped_by_its_progress_leaves_no_window_calling_the_model(tmp_path):
    """A progress callback may raise to stop the build (the runner does for a build bound to be
    refused): the exception leaves ``build`` and no other window goes on calling the model while the
    caller's event loop runs on (asyncio.gather alone would leave them running)."""
    recs = [_turn(i, "s1", "Evan" if i % 2 else "Sam", f"Evan bought a red Prius number {i}") for i in range(40)]
    good = json.dumps({"notes": [{"text": "Evan bought a red Prius", "speakers": ["Evan"], "topic": "cars"}]})
    client = ScriptedClient([(0.01, good)] * 20)  # 20 windows of 2 turns, each call 10 ms
    llm = MeteredLLM(client, PriceBook.load(), allow_unpriced=True)
    g = open_graph("ladybug", tmp_path, U)

    class Stop(Exception):
        pass

    def progress(done, total, unit):
        if done == 1:
            raise Stop

    async def main():
        with pytest.raises(Stop):
            await GraphIndexer(llm, window_turns=2, concurrency=2).build(
                recs, g, U.key(), state_dir(tmp_path, U), progress=progress
            )
        calls = client.n_calls
        await asyncio.sleep(0.2)  # the loop runs on: a window left running would call the model now
        return calls, client.n_calls

    with use_ledger(Ledger(), "construction"):
        calls, later = asyncio.run(main())
    assert calls <= 4 and later == calls  # the windows already under way when window 0 stopped it; none after
    g.close()


def test_indexer_builds_caches_and_skips(tmp_path):
    recs = [_turn(i, "s1", "Evan" if i % 2 else "Sam", f"Evan bought a red Prius number {i}") for i in range(4)]
    recs += [_step(0, "click[B07]", "item page")]
    good = json.dumps({"notes": [{"text": "Evan bought a red Prius", "speakers": ["Evan"], "topic": "cars"}]})
    client = ScriptedClient([good, "garbage"])
    llm = MeteredLLM(client, PriceBook.load(), allow_unpriced=True)
    g = open_graph("ladybug", tmp_path, U)
    ledger = Ledger()
    steps = []
    with use_ledger(ledger, "construction"):
        rep = asyncio.run(
            GraphIndexer(llm, window_turns=2).build(
                recs, g, U.key(), state_dir(tmp_path, U), progress=lambda *a: steps.append(a)
            )
        )
    assert (rep.windows, rep.calls, rep.cached_windows, rep.skipped) == (3, 2, 0, False)
    assert steps == [
        (0, 3, "windows"),
        (1, 3, "windows"),
        (2, 3, "windows"),
        (3, 3, "windows"),
    ]  # the step's window too
    # window 1: one model note; window 2: garbage -> one fallback note per record; the step: one note
    assert rep.counts["Memory"] == 1 + 2 + 1 and rep.counts["FOLLOWS"] == 3
    assert ledger.events["parse_error.indexer"] == 1
    assert [(f.role, f.reason) for f in ledger.fallbacks] == [("indexer", "unparsable")]
    assert [c.role for c in ledger.calls] == ["indexer", "indexer"] and {c.stage for c in ledger.calls} == {
        "construction"
    }
    src = g.query("MATCH (m:Memory) RETURN m.source ORDER BY m.pos").rows
    assert src == [["model"], ["fallback"], ["fallback"], ["step"]]
    # same records again: nothing to do, no call
    again = asyncio.run(GraphIndexer(llm, window_turns=2).build(recs, g, U.key(), state_dir(tmp_path, U)))
    assert again.skipped and client.n_calls == 2
    # one more record: the two old windows come from the notes cache, one new call
    client.replies.append(good)
    more = recs + [_turn(7, "s9", "Evan", "Evan sold the red Prius")]
    ledger3 = Ledger()
    with use_ledger(ledger3, "construction"):
        rep3 = asyncio.run(GraphIndexer(llm, window_turns=2).build(more, g, U.key(), state_dir(tmp_path, U)))
    assert (rep3.calls, rep3.cached_windows) == (1, 3)
    assert g.counts()["Memory"] == 5
    # each window's cost is stored with its notes: the two runs' construction usage, summed
    stored = GraphIndexer(llm, window_turns=2).stored_usage(more, state_dir(tmp_path, U))
    built = [ledger.usage().construction, ledger3.usage().construction]
    assert stored["calls"] == 3 and stored["windows_without_usage"] == stored["windows_without_events"] == 0
    # ... with its calls by role and events: the garbage window's fallback stays counted in later runs
    assert stored["calls_by_role"] == {"indexer": 3}
    assert stored["events"] == {"parse_error.indexer": 1}
    assert [(f["role"], f["reason"]) for f in stored["fallbacks"]] == [("indexer", "unparsable")]
    assert stored["input_tokens"] == sum(u.input_tokens for u in built) > 0
    assert stored["output_tokens"] == sum(u.output_tokens for u in built)
    # a cache written before fallbacks were records counted them as events: still one fallback
    path = state_dir(tmp_path, U) / "notes.json"
    cache = json.loads(path.read_text())
    for v in cache.values():
        v["usage"].pop("fallbacks")
    garbage = next(v for v in cache.values() if v["usage"]["events"])
    garbage["usage"]["events"]["indexer.fallback"] = 1
    path.write_text(json.dumps(cache))
    legacy = GraphIndexer(llm, window_turns=2).stored_usage(more, state_dir(tmp_path, U))
    assert [(f["role"], f["step"]) for f in legacy["fallbacks"]] == [("indexer", 0)]
    assert fallback_report([], construction=[legacy])["by_role"]["indexer"]["fallbacks"] == 1
    # a cache written before costs were recorded (bare lists of notes): its windows are counted as
    # unknown, never guessed, and their notes are still served
    path = state_dir(tmp_path, U) / "notes.json"
    path.write_text(json.dumps({k: v["notes"] for k, v in json.loads(path.read_text()).items()}))
    assert GraphIndexer(llm, window_turns=2).stored_usage(more, state_dir(tmp_path, U)) == {
        "windows_without_usage": 3,
        "windows_without_events": 3,
        "fallbacks": [],
    }
    (state_dir(tmp_path, U) / "meta.json").unlink()
    rep4 = asyncio.run(GraphIndexer(llm, window_turns=2).build(more, g, U.key(), state_dir(tmp_path, U)))
    assert (rep4.calls, rep4.cached_windows) == (0, 4) and client.n_calls == 3
    g.close()


# --- Neo4j (only with a configured server) ---------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("MEMFRONTIER_NEO4J_URL"), reason="set MEMFRONTIER_NEO4J_URL to test Neo4j")
def test_neo4j_backend_same_queries_and_namespaces():
    a, b = (
        open_graph("neo4j", None, Scope(user_id="mf-test-alice")),
        open_graph("neo4j", None, Scope(user_id="mf-test-bob")),
    )
    try:
        a.replace(graph_from_notes(_notes(), Scope(user_id="mf-test-alice").key()))
        b.replace(graph_from_notes(_notes()[:1], Scope(user_id="mf-test-bob").key()))
        assert a.counts() == {"Memory": 4, "Speaker": 3, "Topic": 3, "SAID_BY": 5, "OF_TOPIC": 4, "FOLLOWS": 3}
        rows = a.query("MATCH (m:Memory)-[:SAID_BY]->(s:Speaker {name: 'Evan'}) RETURN m ORDER BY m.pos").rows
        assert [r[0]["text"] for r in rows] == ["Evan bought a Prius.", "Sam went hiking.", "Evan. sold the Prius."]
        assert b.query("MATCH (m:Memory {ns: $ns}) RETURN count(m)").rows == [[1]]
        with pytest.raises(CypherRejected):
            a.query("MATCH (m:Memory) DETACH DELETE m")
    finally:
        from memfrontier.strategies.automem.graph.backend import GraphData

        a.replace(GraphData())
        b.replace(GraphData())
        a.close()
        b.close()

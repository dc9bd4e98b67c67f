"""Commands on one memory store: ``ingest``, ``ask`` and ``search``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Optional

import typer

from ..core.types import missing_scope_message
from ..core.words import plural
from .app import (
    OPT_ALLOW_UNPRICED,
    OPT_BASE_URL,
    OPT_LLM,
    OPT_PRICE_BOOK,
    OPT_STRATEGY,
    _fail,
    app,
    console,
    err,
    known_errors,
    print_json,
)
from .fields import block, with_blocks
from .options import (
    STRATEGY_BLOCK,
    _existing_store,
    strategy_options,
)
from .pricing import usd_label
from .progress import IngestRow, _question_bar


def as_flags(message: str) -> str:
    """A facade message in the command line's terms (``user_id`` -> ``--user-id``...)."""
    return (
        message.replace("all_scopes=True", "--all-scopes")
        .replace("user_id/agent_id/run_id", "--user-id/--agent-id/--run-id")
        .replace("user_id, agent_id or run_id", "--user-id, --agent-id or --run-id")
    )


#: The model of the commands that call none (ingest, search): the packaged Gemma 3 270M, whose file is
#: never loaded, so they work before the default model (memfrontier.llm.DEFAULT_LLM) is installed.
NO_MODEL = "local"


@app.command()
def ingest(
    store: str = typer.Option(..., help="Store directory (created if missing) or postgresql:// URL."),
    dataset: Optional[str] = typer.Option(
        None, help="Ingest a benchmark: locomo | longmemeval | longmemeval_s | hotpotqa | mem_gallery."
    ),
    conversation: Optional[list[str]] = typer.Option(None, help="Only these conversation ids (repeatable)."),
    file: Optional[Path] = typer.Option(
        None, help="A JSONL of messages ({role, content, speaker?, timestamp?, session_id?})."
    ),
    user_id: Optional[str] = typer.Option(None, help="Scope for --file: the user the messages belong to."),
    agent_id: Optional[str] = typer.Option(None, help="Scope for --file: the agent (with or without --user-id)."),
    run_id: Optional[str] = typer.Option(None, help="Scope for --file: the run (with or without the others)."),
    session_id: str = typer.Option("default", help="Session for --file lines without one."),
    data_root: Optional[Path] = typer.Option(
        None, envvar="MEMFRONTIER_DATA", help="The benchmark data folder (default ../shared/data)."
    ),
    data_file: Optional[Path] = typer.Option(
        None,
        help="With --dataset: read this file (in the dataset's format, e.g. the official LongMemEval S or M file) instead of the data root's default file.",
    ),
):
    """Add records to a store. Idempotent: ingesting the same data again adds nothing.

    A progress bar on stderr follows each conversation's turns as they are embedded (--dataset)
    or the sessions of --file."""
    from ..api import Memory, scope_for_add

    if (dataset is None) == (file is None):
        _fail("give exactly one of --dataset or --file")
    if data_file is not None and dataset is None:
        _fail("--data-file goes with --dataset")
    if file is not None and (user_id, agent_id, run_id) == (None, None, None):
        _fail(as_flags(missing_scope_message("--file", "whose memory the messages are")))
    if file is not None and not session_id.strip():
        _fail(f"--session-id is {'empty' if not session_id else 'blank'}: give the session of lines without one")
    if dataset is not None and (user_id, agent_id, run_id) != (None, None, None):
        _fail("--user-id/--agent-id/--run-id go with --file (a --dataset's conversations are scoped by their ids)")
    if file is not None:
        with known_errors():  # an id that cannot be one is named before the store is opened
            scope_for_add(user_id, agent_id, run_id)
    by_session = _read_messages(file, session_id) if file is not None else {}  # checked whole before a store is opened
    if file is not None and not by_session:
        _fail(f"{file} holds no messages; nothing was written")
    with known_errors(), Memory.open(store, llm=NO_MODEL) as mem:
        if dataset:
            from ..eval.datasets import load_dataset

            convs = load_dataset(dataset, "all", data_root=data_root, data_file=data_file)
            if conversation:
                convs = [c for c in convs if c.id in set(conversation)]
                if not convs:
                    _fail(f"no conversation named {conversation} in {dataset}")
            with _question_bar() as bar:  # a row per conversation while its turns are embedded
                task = bar.add_task("conversations", total=len(convs))
                row = IngestRow(bar)
                for c in convs:
                    n = len({r.session_id for r in c.records})
                    res = mem.aio.store.add(c.records, progress=lambda done, total: row.show(c.id, n, done, total))
                    row.close()
                    bar.advance(task)
                    console.print(f"{c.id}: +{plural(len(res.added), 'record')}, {len(res.skipped)} already present")
        else:
            with _question_bar() as bar:
                task = bar.add_task("sessions", total=len(by_session))
                for sid, msgs in by_session.items():
                    res = mem.add(msgs, user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=sid)
                    bar.advance(task)
                    console.print(
                        f"session {sid}: +{plural(len(res.added), 'record')}, {len(res.skipped)} already present"
                    )


def _read_messages(file: Path, default_session: str) -> dict[str, list[dict]]:
    """Messages of a JSONL file grouped by session; any bad line fails with file:line, nothing written."""
    from ..core.jsonio import jsonl_lines
    from ..core.messages import messages_to_records
    from ..core.types import Scope

    if file.is_dir():
        _fail(f"{file} is a folder; give a JSONL file of messages (one JSON object per line)")
    if not file.is_file():
        _fail(f"no such file: {file}")
    try:
        text = file.read_text("utf-8-sig")  # a byte-order mark (some editors write one) is not content
    except UnicodeDecodeError as e:
        _fail(f"{file}: not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8; nothing was written")
    by_session: dict[str, list[dict]] = {}
    for n, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            m = json.loads(line)
        except json.JSONDecodeError as e:
            _fail(f"{file}:{n}: not JSON ({e}); nothing was written")
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            _fail(f"{file}:{n}: each line must be a JSON object with a string 'content'; nothing was written")
        if not m["content"].strip():
            _fail(f"{file}:{n}: 'content' is empty or whitespace; nothing was written")
        sid = m.pop("session_id", None)  # absent: None or no key
        sid = default_session if sid is None else sid if isinstance(sid, str) else str(sid)
        try:  # the same checks as Memory.add (field types, timestamp, session id...), so no session is written first
            messages_to_records([m], scope=Scope(), session_id=sid, timestamp=None)
        except ValueError as e:  # "message 0.timestamp ..." names the one message checked: the line says which
            _fail(f"{file}:{n}: {str(e).removeprefix('message 0.')}; nothing was written")
        by_session.setdefault(sid, []).append(m)
    return by_session


def _check_scope(what: str, user_id, agent_id, run_id, all_scopes: bool, store: str | Path) -> None:
    """Fail (before any model is loaded) when ``store`` is not a store, or unless one scope id or
    --all-scopes is given."""
    from ..api import scope_for_read

    _existing_store(store)

    try:
        scope_for_read(what, user_id, agent_id, run_id, all_scopes)
    except ValueError as e:
        _fail(as_flags(str(e)))


@app.command(cls=with_blocks(strategy_args=STRATEGY_BLOCK))
def ask(
    ctx: typer.Context,
    question: str = typer.Argument(..., help="The question, answered from the scope's memory."),
    store: str = typer.Option(..., help="Store directory or postgresql:// URL."),
    user_id: Optional[str] = typer.Option(
        None, help="Scope: the user whose memory answers (one scope id is required)."
    ),
    agent_id: Optional[str] = typer.Option(None, help="Scope: agent id."),
    run_id: Optional[str] = typer.Option(None, help="Scope: run id."),
    all_scopes: bool = typer.Option(False, "--all-scopes", help="Answer from every tenant's records (no scope id)."),
    strategy: str = OPT_STRATEGY,
    router: Optional[Path] = typer.Option(
        None,
        help="auto: a router file from `train strategy-router`; budgetmem: a "
        "tier-router checkpoint (same as --set router=FILE).",
    ),
    build: bool = typer.Option(
        False,
        "--build",
        help="Build the strategy's memory view (rag with unit=turn, memorycpt, mempilot, automem; auto: those of its "
        "configurations) "
        "for this scope first when it is missing, and report what building cost. Without it, "
        "asking a strategy whose view was never built is refused.",
    ),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    preference: Optional[str] = typer.Option(
        None, help="perf | balanced | cost (default: the strategy config's, else perf)"
    ),
    question_date: Optional[str] = typer.Option(
        None,
        help="When the question is asked (e.g. 2024-10-01T12:00); default now. The answer prompt and the "
        "context's dates read it ('22 days ago').",
    ),
    max_usd: Optional[float] = typer.Option(None, help="Hard cap on this question's USD."),
    max_tokens: Optional[int] = typer.Option(
        None,
        help="Hard cap on this question's tokens, input + output of every call it makes (a turn "
        "configuration's context size is its option: --set max_tokens=N).",
    ),
    max_proxy_s: Optional[float] = typer.Option(
        None, help="Hard cap on this question's latency proxy, seconds (MemPilot Eq. 15-19)."
    ),
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = typer.Option(None, help="Price the calls as this price-book model."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole Answer as JSON."),
):
    """Answer one question from a store and print the answer with its cost."""
    from ..api import AsyncMemory, build_progress
    from ..core.types import Budget

    if router is not None and strategy not in ("auto", "budgetmem"):
        _fail("--router applies to --strategy auto or budgetmem only")
    strategy_args = block(ctx, "strategy_args")
    _check_scope("ask", user_id, agent_id, run_id, all_scopes, store)
    options = strategy_options(strategy, strategy_args, router=None if router is None else str(router))

    async def answer(mem):
        task = None

        def step(done: int, total: int, unit: str) -> None:  # a build's steps, when --build builds
            nonlocal task
            if task is None:
                task = bar.add_task(f"building the {strategy} view", total=total)
            bar.update(task, description=f"building the {strategy} view: {unit}", completed=done, total=total)

        try:
            with build_progress(step):
                ans = await mem.ask(
                    question,
                    user_id=user_id,
                    agent_id=agent_id,
                    run_id=run_id,
                    all_scopes=all_scopes,
                    strategy=strategy,
                    strategy_options=options,
                    preference=preference,
                    budget=Budget(max_usd=max_usd, max_tokens=max_tokens, max_proxy_s=max_proxy_s),
                    question_date=question_date,
                    build=build,
                )
        finally:
            if task is not None:
                bar.remove_task(task)
        return ans, (ans.build.usage if ans.build is not None else None)

    with known_errors():
        mem = AsyncMemory.open(
            _existing_store(store),
            llm=llm,
            base_url=base_url,
            price_book=price_book,
            allow_unpriced=allow_unpriced,
            price_as=price_as,
        )
        usd = usd_label((mem.env.answer_llm.model_id, mem.env.llm.model_id), priced_as=price_as, price_book=price_book)
        try:
            with _question_bar() as bar:
                ans, built = asyncio.run(answer(mem))
        finally:
            mem.close()
    if built is not None:
        err.print(
            f"built the {strategy} view: {plural(built.calls, 'call')} · {built.input_tokens} in / "
            f"{plural(built.output_tokens, 'out token')} · ${built.usd:.8f} {usd} for construction · "
            f"latency proxy {built.proxy_s:.2f}s"
        )
    if as_json:
        print_json(ans.model_dump_json())
        return
    from rich.markup import escape

    q = ans.usage.query
    console.print(f"[bold]{escape(ans.text) or '(empty answer)'}[/bold]")  # an answer's brackets are text
    if routed := ans.meta.get("auto"):
        p = routed["predictions"][routed["configuration"]]
        console.print(
            f"routed to {routed['configuration']} ({routed['rule']}; predicted F1 {p['f1']:.3f}, "
            f"${p['usd']:.8f} {usd}, {p['proxy_s']:.2f}s; routing {routed['route_ms']:.1f} ms)"
        )
    console.print(
        f"{plural(q.calls, 'call')} · {q.input_tokens} in / {plural(q.output_tokens, 'out token')} · "
        f"${q.usd:.8f} {usd} · latency proxy {q.proxy_s:.2f}s · wall {ans.wall_s:.2f}s · "
        f"evidence {plural(len(ans.evidence_ids), 'record')} · asked as of {ans.question_date}"
    )
    if ans.usage.events:
        console.print(f"events: {ans.usage.events}")


@app.command()
def search(
    query: str = typer.Argument(..., help="What to look for in the scope's memory."),
    store: str = typer.Option(..., help="Store directory or postgresql:// URL."),
    user_id: Optional[str] = typer.Option(
        None, help="Scope: the user whose memory is searched (one scope id is required)."
    ),
    agent_id: Optional[str] = typer.Option(None, help="Scope: agent id."),
    run_id: Optional[str] = typer.Option(None, help="Scope: run id."),
    all_scopes: bool = typer.Option(False, "--all-scopes", help="Search every tenant's records (no scope id)."),
    k: int = typer.Option(5, "--k", "-k", min=1, help="How many hits to print."),
    max_chars: int = typer.Option(
        0,
        min=0,
        metavar="N",
        help="Cut each hit's text at a word boundary near N characters, saying so (0: the whole text).",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print the hits as JSON: id, score, ranks, text, session, timestamp, record ids, folded (the ids of "
        "the chunks that repeat it, folded into this one, their latest).",
    ),
):
    """Hybrid (dense + BM25, RRF) search of one scope; prints the top chunks, whole, wrapped to the terminal."""
    from rich.markup import escape

    from ..api import Memory

    _check_scope("search", user_id, agent_id, run_id, all_scopes, store)
    with known_errors():
        with Memory.open(_existing_store(store), llm=NO_MODEL) as mem:
            hits = mem.search(query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, all_scopes=all_scopes)
    if as_json:
        print_json(
            data=[
                {
                    "id": h.chunk.id,
                    "score": h.score,
                    "ranks": h.ranks,
                    "text": h.chunk.text,
                    "session_id": h.chunk.session_id,
                    "timestamp": h.chunk.timestamp,
                    "record_ids": h.chunk.record_ids,
                    "folded": h.folded,
                }
                for h in hits
            ]
        )
        return
    if not hits:
        console.print(f"no results{f' for user {user_id!r}' if user_id else ''}")
    for i, h in enumerate(hits, 1):
        ranks = ", ".join(f"{name} #{r}" for name, r in h.ranks.items())
        console.print(
            f"[bold]{i}. RRF {h.score:.4f}[/bold] ({ranks}) [dim]session {escape(h.chunk.session_id)}, "
            f"{h.chunk.timestamp or 'undated'}, {plural(len(h.chunk.record_ids), 'record')}"
            f"{f'; the latest of {len(h.folded) + 1} copies' if h.folded else ''}[/dim]"
        )
        console.print(cut_text(h.chunk.text, max_chars), markup=False, highlight=False)
        console.print()


@app.command()
def delete(
    record_id: Optional[str] = typer.Argument(None, help="The record to delete (leave out with --all)."),
    store: str = typer.Option(..., help="Store directory or postgresql:// URL."),
    user_id: Optional[str] = typer.Option(None, help="Scope: the user whose record it is (one scope id is required)."),
    agent_id: Optional[str] = typer.Option(None, help="Scope: agent id."),
    run_id: Optional[str] = typer.Option(None, help="Scope: run id."),
    every: bool = typer.Option(False, "--all", help="Delete every record of the scope instead of one."),
):
    """Delete a record, or every record of a scope (--all), and everything derived from it in every
    view (chunks, vectors, BM25, bank items, graph index), as Memory.delete / delete_all do.

    Exit code 0 when something was deleted, 1 when the scope holds no such record."""
    from ..api import Memory

    if every == (record_id is not None):
        _fail("give one of RECORD_ID (one record) or --all (every record of the scope)")
    if (user_id, agent_id, run_id) == (None, None, None):
        _fail("delete needs the record's scope: give --user-id, --agent-id or --run-id")
    scope = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    with known_errors():
        with Memory.open(_existing_store(store), llm=NO_MODEL) as mem:
            n = mem.delete_all(**scope) if every else int(mem.delete(record_id, **scope))
    if not n:
        _fail("no records in this scope" if every else f"no record {record_id!r} in this scope", code=1)
    console.print(f"deleted {plural(n, 'record')} and what was derived from {'them' if n > 1 else 'it'}")


def cut_text(text: str, max_chars: int) -> str:
    """``text`` whole when ``max_chars`` is 0 or it fits; else cut at the last space at or before
    ``max_chars`` (at ``max_chars`` when there is none) and followed by a line saying how much was
    cut."""
    if not max_chars or len(text) <= max_chars:
        return text
    cut = text.rfind(" ", 0, max_chars + 1)
    head = text[: cut if cut > 0 else max_chars].rstrip()
    return f"{head} …\n[cut at {len(head)} of {len(text)} characters; --max-chars 0 prints the whole text]"

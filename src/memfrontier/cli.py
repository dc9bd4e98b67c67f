"""The ``memfrontier`` command line: eval, score, ingest, ask, search."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

app = typer.Typer(help="memfrontier: long-term memory for LLM agents with measured quality, cost and latency.",
                  no_args_is_help=True, add_completion=False)
# Logs and CI are not terminals: render tables wide there rather than cutting numbers.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

LLM_HELP = "'local' (embedded Gemma 3 270M, no network) or 'openai:MODEL' for any OpenAI-compatible server."


def _fail(msg: str, code: int = 2):
    err.print(f"[red]error:[/red] {msg}")
    raise typer.Exit(code)


def _known_errors():
    from .answerer import BudgetExceededError
    from .core.pricebook import UnpricedModelError
    from .eval.datasets import DatasetError
    from .eval.runner import RunMismatchError
    from .llm.base import LLMError
    from .store.base import StoreError

    return (BudgetExceededError, UnpricedModelError, DatasetError, RunMismatchError, LLMError, StoreError, FileNotFoundError, ValueError)


@app.command("eval")
def eval_cmd(
    dataset: str = typer.Option("locomo", help="locomo | longmemeval | hotpotqa"),
    split: str = typer.Option("test", help="locomo: test (conv-49, conv-50, cat 1-4) | train | all; others: all"),
    strategy: str = typer.Option("rag", help="longctx | rag | oracle"),
    limit: Optional[int] = typer.Option(None, min=1, help="Answer a category-balanced slice of this many questions (seeded). Default: all."),
    llm: str = typer.Option("local", help=LLM_HELP),
    base_url: Optional[str] = typer.Option(None, help="Base URL of the OpenAI-compatible server (with --llm openai:MODEL)."),
    judge: bool = typer.Option(False, "--judge/--no-judge", help="Also grade answers with the LLM judge."),
    judge_llm: Optional[str] = typer.Option(None, help="Judge model (default: the answer model). " + LLM_HELP),
    k: Optional[int] = typer.Option(None, min=1, help="rag: chunks to retrieve (default 8)."),
    out: Path = typer.Option(Path("runs/latest"), help="Output directory: predictions.jsonl, summary.json, store/."),
    store: Optional[Path] = typer.Option(None, help="Store directory to reuse across runs (default OUT/store)."),
    data_root: Optional[Path] = typer.Option(None, envvar="MEMFRONTIER_DATA", help="Benchmark data root (default ../shared/data)."),
    seed: int = typer.Option(42, help="Seed for the question slice."),
    concurrency: int = typer.Option(1, min=1, help="Questions in flight at once (the embedded model runs one at a time)."),
    price_book: Optional[Path] = typer.Option(None, help="A price-book YAML (default: the packaged one)."),
    allow_unpriced: bool = typer.Option(False, help="Record calls to models missing from the price book as unpriced instead of failing."),
    price_as: Optional[str] = typer.Option(None, help="Price every call as this price-book model (e.g. qwen3-14b) to read a local run in hosted dollars."),
):
    """Run the evaluation protocol and print the per-category table. Interrupted runs resume from OUT."""
    from .eval.report import summary_table
    from .eval.runner import EvalConfig, run_eval

    opts = {"k": k} if k is not None and strategy == "rag" else {}
    cfg = EvalConfig(dataset=dataset, split=split, strategy=strategy, strategy_options=opts, limit=limit, llm=llm,
                     base_url=base_url, judge=judge, judge_llm=judge_llm, out=out, store=store, data_root=data_root,
                     seed=seed, concurrency=concurrency, price_book=price_book, allow_unpriced=allow_unpriced,
                     price_as=price_as)
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False) as bar:
        task = bar.add_task("loading", total=None)
        f1s: list[float] = []

        def on_progress(event, **info):
            if event == "start":
                bar.update(task, total=info["total"], completed=info["done"], description="ingesting")
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{info['added']} records)")
            elif event == "question":
                f1s.append(info["row"]["f1"])
                bar.update(task, advance=1, description=f"answering · mean F1 {sum(f1s) / len(f1s):.3f}")

        try:
            summary = asyncio.run(run_eval(cfg, on_progress=on_progress))
        except _known_errors() as e:
            bar.stop()
            _fail(str(e))
    console.print(summary_table(summary))
    console.print(f"wrote {out / 'predictions.jsonl'} and {out / 'summary.json'}")


@app.command()
def score(
    file: Path = typer.Argument(..., help="JSONL with 'prediction', 'answer' (absent for category 5) and 'category' per line."),
    dataset: str = typer.Option("locomo", help="Scoring protocol: locomo (official per-category F1, category 5 as abstention); longmemeval or hotpotqa (plain token F1)."),
    out: Path = typer.Option(Path("runs/scored"), help="Output directory: scored.jsonl and summary.json."),
):
    """Score predictions made by any memory system with our metrics (same protocol, comparable numbers)."""
    if dataset not in ("locomo", "longmemeval", "hotpotqa"):
        _fail(f"unknown --dataset {dataset!r}; choose locomo, longmemeval or hotpotqa")
    from .eval.report import summary_table
    from .eval.scoring import score_file

    try:
        summary = score_file(file, dataset=dataset, out=out)
    except _known_errors() as e:
        _fail(str(e))
    console.print(summary_table(summary, title=f"scored {file.name} ({dataset})"))
    console.print(f"wrote {out / 'scored.jsonl'} and {out / 'summary.json'}")


@app.command()
def ingest(
    store: Path = typer.Option(..., help="Store directory (created if missing)."),
    dataset: Optional[str] = typer.Option(None, help="Ingest a benchmark: locomo | longmemeval | hotpotqa."),
    conversation: Optional[list[str]] = typer.Option(None, help="Only these conversation ids (repeatable)."),
    file: Optional[Path] = typer.Option(None, help="A JSONL of messages ({role, content, speaker?, timestamp?, session_id?})."),
    user_id: Optional[str] = typer.Option(None, help="Scope for --file."),
    session_id: str = typer.Option("default", help="Session for --file lines without one."),
    data_root: Optional[Path] = typer.Option(None, envvar="MEMFRONTIER_DATA"),
):
    """Add records to a store. Idempotent: ingesting the same data again adds nothing."""
    from .api import Memory

    if (dataset is None) == (file is None):
        _fail("give exactly one of --dataset or --file")
    try:
        with Memory.open(store) as mem:
            if dataset:
                from .eval.datasets import load_dataset

                convs = load_dataset(dataset, "all", data_root=data_root)
                if conversation:
                    convs = [c for c in convs if c.id in set(conversation)]
                    if not convs:
                        _fail(f"no conversation named {conversation} in {dataset}")
                for c in convs:
                    res = mem.aio.store.add(c.records)
                    console.print(f"{c.id}: +{len(res.added)} records, {len(res.skipped)} already present")
            else:
                by_session = _read_messages(file, session_id)  # the whole file is checked before any write
                for sid, msgs in by_session.items():
                    res = mem.add(msgs, user_id=user_id, session_id=sid)
                    console.print(f"session {sid}: +{len(res.added)} records, {len(res.skipped)} already present")
    except _known_errors() as e:
        _fail(str(e))


def _read_messages(file: Path, default_session: str) -> dict[str, list[dict]]:
    """Messages of a JSONL file grouped by session; any bad line fails with file:line, nothing written."""
    if not file.is_file():
        _fail(f"no such file: {file}")
    by_session: dict[str, list[dict]] = {}
    for n, line in enumerate(file.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            m = json.loads(line)
        except json.JSONDecodeError as e:
            _fail(f"{file}:{n}: not JSON ({e})")
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            _fail(f"{file}:{n}: each line must be a JSON object with a string 'content'")
        if not m["content"].strip():
            _fail(f"{file}:{n}: 'content' is empty or whitespace; nothing was written")
        by_session.setdefault(str(m.pop("session_id", default_session)), []).append(m)
    return by_session


def _existing_store(store: Path) -> Path:
    if not (store / "store.db").is_file():
        _fail(f"no memory store at {store}; create one with `memfrontier ingest --store {store} ...`")
    return store


@app.command()
def ask(
    question: str = typer.Argument(...),
    store: Path = typer.Option(..., help="Store directory."),
    user_id: Optional[str] = typer.Option(None),
    strategy: str = typer.Option("rag", help="longctx | rag | oracle"),
    llm: str = typer.Option("local", help=LLM_HELP),
    base_url: Optional[str] = typer.Option(None),
    preference: str = typer.Option("perf", help="perf | balanced | cost"),
    max_usd: Optional[float] = typer.Option(None, help="Hard cap on this question's USD."),
    max_tokens: Optional[int] = typer.Option(None, help="Hard cap on the answer call's prompt+output tokens."),
    price_book: Optional[Path] = typer.Option(None, help="A price-book YAML (default: the packaged one)."),
    allow_unpriced: bool = typer.Option(False, help="Record calls to models missing from the price book as unpriced instead of failing."),
    price_as: Optional[str] = typer.Option(None, help="Price the calls as this price-book model."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole Answer as JSON."),
):
    """Answer one question from a store and print the answer with its cost."""
    from .api import Memory
    from .core.types import Budget

    try:
        with Memory.open(_existing_store(store), llm=llm, base_url=base_url, price_book=price_book,
                         allow_unpriced=allow_unpriced, price_as=price_as) as mem:
            ans = mem.ask(question, user_id=user_id, strategy=strategy, preference=preference,
                          budget=Budget(max_usd=max_usd, max_tokens=max_tokens))
    except _known_errors() as e:
        _fail(str(e))
    if as_json:
        console.print_json(ans.model_dump_json())
        return
    q = ans.usage.query
    console.print(f"[bold]{ans.text or '(empty answer)'}[/bold]")
    console.print(f"{q.calls} calls · {q.input_tokens} in / {q.output_tokens} out tokens · "
                  f"${q.usd:.8f} (USD) · latency proxy {q.proxy_s:.2f}s · wall {ans.wall_s:.2f}s · "
                  f"evidence {len(ans.evidence_ids)} records")
    if ans.usage.events:
        console.print(f"events: {ans.usage.events}")


@app.command()
def search(
    query: str = typer.Argument(...),
    store: Path = typer.Option(..., help="Store directory."),
    user_id: Optional[str] = typer.Option(None),
    k: int = typer.Option(5, min=1),
):
    """Hybrid (dense + BM25, RRF) search; prints the top chunks."""
    from .api import Memory

    try:
        with Memory.open(_existing_store(store)) as mem:
            hits = mem.search(query, user_id=user_id, k=k)
    except _known_errors() as e:
        _fail(str(e))
    if not hits:
        console.print(f"no results{f' for user {user_id!r}' if user_id else ''}")
    for i, h in enumerate(hits, 1):
        ranks = ", ".join(f"{name} #{r}" for name, r in h.ranks.items())
        console.print(f"[bold]{i}. RRF {h.score:.4f}[/bold] ({ranks}) [dim]session {h.chunk.session_id}, {h.chunk.timestamp}[/dim]\n"
                      f"{h.chunk.text[:400]}\n")


def main():  # pragma: no cover
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Commands that evaluate: ``config`` (a strategy's options), ``eval``, ``frontier`` and ``score``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

from ..core.words import plural
from ..strategies import STRATEGIES
from .app import (
    OPT_SCORER,
    OPT_STRATEGY,
    RESUME_HINT,
    STRATEGY_HELP,
    _fail,
    _strategy_name,
    app,
    console,
    err,
    known_errors,
    print_json,
)
from .fields import block, given, with_blocks
from .options import (
    STRATEGY_BLOCK,
    run_block,
    run_options,
    strategy_options,
)
from .pricing import run_proxy_caption
from .progress import IngestRow, _question_bar
from .tables import frontier_table, route_table, tier_table, with_caption


@app.command("config")
def config_cmd(
    strategy: Optional[str] = typer.Argument(
        None,
        parser=_strategy_name,
        metavar="[STRATEGY]",
        help=f"{STRATEGY_HELP} (default: every strategy, then the named configurations).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the fields as JSON."),
):
    """The options of a strategy's config: key, type, default and meaning (for --set / --strategy-config).
    For a named configuration, the defaults are its own values (--set still overrides them)."""
    from rich.table import Table

    from ..strategies import NAMED_CONFIGURATIONS, strategy_class

    def fields(n: str) -> list[dict]:
        own = NAMED_CONFIGURATIONS[n][1] if n in NAMED_CONFIGURATIONS else {}
        return [
            {**row, "default": own[row["name"]], "required": False} if row["name"] in own else row
            for row in strategy_class(n).config_class.describe()
        ]

    names = [strategy] if strategy else [*STRATEGIES, *NAMED_CONFIGURATIONS]
    if as_json:
        print_json(data={n: fields(n) for n in names}, default=str)
        return
    for n in names:
        cls = strategy_class(n).config_class
        of = f"{NAMED_CONFIGURATIONS[n][0]}, " if n in NAMED_CONFIGURATIONS else ""
        t = Table(title=f"{n} ({of}{cls.__name__})", title_justify="left")
        for col in ("key", "type", "default", "meaning"):
            t.add_column(col, overflow="fold")
        for row in fields(n):
            t.add_row(row["name"], row["type"], "required" if row["required"] else repr(row["default"]), row["doc"])
        if not cls.model_fields:
            t.add_row("-", "-", "-", "no options")
        console.print(t)


@app.command(
    "eval",
    cls=with_blocks(
        run=run_block(Path("runs/latest"), "Output directory: predictions.jsonl, summary.json, store/."),
        strategy_args=STRATEGY_BLOCK,
    ),
)
def eval_cmd(ctx: typer.Context, strategy: str = OPT_STRATEGY):
    """Run the evaluation protocol and print the per-category table. Interrupted runs resume from OUT.

    Strategy options come from the strategy's config: --set KEY=VALUE (repeatable) and/or
    --strategy-config FILE; `memfrontier config STRATEGY` lists the keys, types and defaults.
    """
    from ..eval.fallbacks import FallbackError
    from ..eval.reports import meta_report
    from ..eval.reports.summary import construction_table, fallback_table, summary_table
    from ..eval.runner import run_eval
    from ..strategies import strategy_class

    run, strategy_args = run_options(ctx), block(ctx, "strategy_args")
    with known_errors():
        cfg = run.eval_config(strategy, strategy_options(strategy, strategy_args))
    out = run.out
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)
        f1s: list[float] = []
        ingest_row = IngestRow(bar)

        def on_progress(event, **info):
            ingest_row.on_event(event, info)
            if event == "start":
                bar.update(task, total=info["total"], completed=info["done"], description="ingesting")
                if cfg.limit is not None and info["total"] < cfg.limit:
                    err.print(
                        f"note: the split holds {plural(info['total'], 'question')}, fewer than --limit {cfg.limit}: "
                        "all of them are answered"
                    )
                if info.get("empty_turns_skipped"):
                    err.print(
                        f"note: skipped {info['empty_turns_skipped']} empty turn(s) of the data file (no text, "
                        "image, action or observation; listed in summary.json)"
                    )
                if info["done"]:
                    err.print(f"resuming {out}: {info['done']} of {plural(info['total'], 'question')} already answered")
            elif event == "build":
                bar.update(task, description=f"building memories of {info['conversation']} (offline, once per store)")
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{plural(info['added'], 'record')})")
            elif event == "question":
                f1s.append(info["row"]["f1"])
                bar.update(task, advance=1, description=f"answering · mean F1 {sum(f1s) / len(f1s):.3f}")

        refused = None
        with known_errors(bar, interrupted=RESUME_HINT):
            try:
                summary = asyncio.run(run_eval(cfg, on_progress=on_progress))
            except FallbackError as e:  # the run is written; it is shown, then refused
                if e.summary is None:  # stopped while building: there is nothing to show
                    raise
                summary, refused = e.summary, str(e)
    proxy = run_proxy_caption([summary])
    console.print(with_caption(summary_table(summary), proxy))
    console.print(fallback_table(summary))
    if any(c.get("calls") for c in summary.get("construction", {}).values()):
        console.print(with_caption(construction_table(summary), proxy))
    choices = summary.get("choices", {})
    if choices.get("tiers_used"):  # what ran; what was planned only where it differs
        console.print(tier_table(choices["tiers_used"], "tier that ran per module (after fallbacks)"))
        if choices.get("tiers") and choices["tiers"] != choices["tiers_used"]:
            console.print(tier_table(choices["tiers"], "tier planned per module"))
    elif choices.get("tiers"):
        console.print(tier_table(choices["tiers"]))
    if (table := meta_report(strategy_class(strategy).meta_model, out / "predictions.jsonl")) is not None:
        console.print(table)
    if choices.get("route"):
        console.print(route_table(choices["route"]["configuration"]))
    if undated := summary.get("undated_sessions"):
        err.print(
            f"note: {plural(len(undated), 'session')} {'has' if len(undated) == 1 else 'have'} no date the data file's date field could be read as "
            f"(first: {undated[0]}): their turns are stored undated, so temporal questions about them "
            "cannot be dated",
            markup=False,
            highlight=False,
        )
    console.print(f"wrote {out / 'predictions.jsonl'} and {out / 'summary.json'}")
    if refused is not None:
        _fail(f"too many model calls failed or fell back: {refused}", code=3)


@app.command(
    "frontier",
    cls=with_blocks(
        run=run_block(
            Path("runs/frontier"),
            "Output directory: configs/LABEL/ (one eval run each), store/ (shared), frontier.{md,csv,json}, plots.",
        )
    ),
)
def frontier_cmd(
    ctx: typer.Context,
    spec: Optional[Path] = typer.Option(
        None,
        help="YAML file: `name:` and `configurations:`, a list of {label, strategy, options, requires} (see `src/memfrontier/frontier/default.yaml`); default: that shipped spec, every strategy family.",
    ),
    only: Optional[str] = typer.Option(None, help="Comma-separated labels of the spec to run (default: all)."),
    reference: Optional[str] = typer.Option(
        None, help="The configuration every other one is compared with (paired bootstrap); default rag."
    ),
    report_only: bool = typer.Option(
        False, "--report-only", help="Run nothing; rebuild the report from what has finished."
    ),
    export: Optional[Path] = typer.Option(
        None,
        "--export",
        metavar="DIR",
        help="Also write DIR (a folder outside OUT): each configuration's run.json, predictions without the questions', gold answers' or retrieved text and, once finished, summary.json, and a report over every configuration DIR holds (publishable; --report-only --out DIR rebuilds it). DIR/configs/LABEL copied into another --out counts there as finished, or, exported before it finished, resumes there: with --report-only, this carries a long frontier to another machine.",
    ),
):
    """Run every configuration of a spec on the same questions (one ledger each, construction built once in a shared store) and write the quality-cost-latency frontier with 95% bootstrap intervals.

    Resumable: finished configurations are kept, an interrupted one resumes from its predictions.
    The report covers the configurations run and every other one already finished in OUT with the
    same options. Without --only and --limit this is every configuration on every question of the
    split (days on a laptop CPU): start with --limit 40 --only LABELS. Exit code 0 when every
    selected configuration finished, 1 when some did not run or failed, 3 when one was refused
    (model calls failed or fell back above --fallback-threshold).
    """
    from ..frontier.report import summary_lines
    from ..frontier.run import run_frontier
    from ..frontier.spec import load_spec

    run = run_options(ctx)
    flags_given = given(ctx, "run")  # a report of recorded runs notes only the options set here
    with known_errors():
        fspec = load_spec(spec)
        labels = [x.strip() for x in only.split(",") if x.strip()] if only is not None else None
        fspec.select(labels)  # unknown labels fail before anything runs
        base = run.eval_config("rag")
        if export is not None:
            from ..frontier.export import check_export_dest

            check_export_dest(run.out, export)
    if report_only and not (run.out / "configs").is_dir():
        _fail(f"no frontier runs in {run.out} (no configs/ folder); give the --out of a frontier run")
    with _question_bar() as bar:
        task = bar.add_task("frontier", total=None)

        current = {"label": ""}
        said: set[str] = set()  # the configurations whose outcome was printed while running

        def on_config(label: str, status: str) -> None:
            if status not in ("start", "done"):
                said.add(label)
            if status == "start":
                current.update(label=label, f1s=[])
                ingest_row.prefix = f"{label}: "
                bar.update(task, description=f"{label}: starting", total=None, completed=0)
            elif status == "kept":
                err.print(f"{label}: finished earlier with these options, kept")
            elif status != "done":
                err.print(f"{label}: {status}")

        ingest_row = IngestRow(bar)

        def on_progress(event, **info):
            ingest_row.on_event(event, info)
            if event == "start":
                bar.update(task, total=info["total"], completed=info["done"])
                if info["done"]:
                    err.print(
                        f"{current['label']}: resuming, {info['done']} of {plural(info['total'], 'question')} already answered"
                    )
            elif event == "question":
                f1s = current.setdefault("f1s", [])
                f1s.append(info["row"]["f1"])
                desc = f"{current['label']}: answering · mean F1 {sum(f1s) / len(f1s):.3f}"
                bar.update(task, advance=1, description=desc)

        with known_errors(bar, interrupted=RESUME_HINT):
            report = asyncio.run(
                run_frontier(
                    fspec,
                    base,
                    run.out,
                    labels=labels,
                    reference=reference,
                    on_config=on_config,
                    on_progress=on_progress,
                    report_only=report_only,
                    given=flags_given,
                )
            )
    rows = {x["label"]: x for x in report["rows"]}
    for x in report["rows"]:  # refused when the report read its summary (e.g. --report-only)
        if x["status"].startswith("refused") and x["label"] not in said:
            err.print(f"{x['label']}: {x['status']}", markup=False)
    if export is not None:
        _export(fspec, base, run.out, export, report, reference, flags_given)
    if not report["files"] and report_only and export is not None:
        return  # an export of started configurations, carried elsewhere: done, nothing to report yet
    if not report["files"]:
        _fail(
            f"no configuration has finished in {run.out} with these options; no report written "
            "(an earlier one there is unchanged)",
            code=1,
        )
    console.print(
        with_caption(frontier_table(report), run_proxy_caption(x for x in report["rows"] if x["status"] == "ok"))
    )
    for line in summary_lines(report):
        console.print(line, markup=False)
    ok = sum(1 for x in report["rows"] if x["status"] == "ok")
    files = report["files"]
    plots = [p.name for k, p in files.items() if k.startswith("plot")]
    console.print(
        f"{ok}/{plural(len(report['rows']), 'configuration')} on {plural(len(report['question_ids']), 'question')}; "
        f"wrote {files['md']} (the tables), {files['json'].name} and {files['csv'].name} (every field)"
        + (f", {' and '.join(plots)}" if plots else "")
        + (f", {files['html'].name} (the interactive page)" if "html" in files else "")
    )
    if report_only:
        return
    missing = [label for label in report["selected"] if rows[label]["status"] != "ok"]
    if missing:
        refused = [label for label in missing if rows[label]["status"].startswith("refused")]
        _fail(
            f"{len(missing)} of {plural(len(report['selected']), 'configuration')} did not finish: {', '.join(missing)}",
            code=3 if refused else 1,
        )


def _export(fspec, base, out: Path, export: Path, report: dict, reference: str | None, flags_given: set[str]) -> None:
    """``frontier --export``: the configurations of ``report`` with answers (finished, refused or
    started) into ``export``, then the report of what ``export`` holds."""
    from ..frontier.export import export_results
    from ..frontier.run import run_frontier

    with known_errors():
        exported = export_results(out, export, [x["label"] for x in report["rows"]])
        published = asyncio.run(
            run_frontier(fspec, base, export, reference=reference, report_only=True, given=flags_given)
        )
    held = sum(1 for x in published["rows"] if x["status"] == "ok")
    started, kept = exported["started"], exported["kept"]
    console.print(
        f"exported {plural(len(exported['finished']), 'finished configuration')}"
        + (
            f" and {len(started)} started ({', '.join(started)}: copied into another --out, each resumes there)"
            if started
            else ""
        )
        + f" to {export}; "
        + (
            f"its report covers the {plural(held, 'finished configuration')} it holds ({published['files']['md']})"
            if published["files"]
            else "it holds no finished configuration yet, so no report was written there"
        )
    )
    if kept:
        console.print(f"not exported: {', '.join(kept)} (started here, finished in {export}: the finished run is kept)")


@app.command()
def score(
    file: Path = typer.Argument(
        ...,
        help="JSONL with 'prediction', 'answer' (absent for category 5) and 'category' per line; `eval`'s own predictions.jsonl (gold answer in 'gold') scores as it is.",
    ),
    dataset: str = typer.Option(
        "locomo",
        help="Scoring protocol: locomo (official per-category F1, category 5 as abstention); longmemeval or hotpotqa (plain token F1).",
    ),
    out: Path = typer.Option(Path("runs/scored"), help="Output directory: scored.jsonl and summary.json."),
    scorer: str = OPT_SCORER,
):
    """Score predictions made by any memory system with our metrics (same protocol, comparable numbers)."""
    if dataset not in ("locomo", "longmemeval", "hotpotqa"):
        _fail(f"unknown --dataset {dataset!r}; choose locomo, longmemeval or hotpotqa")
    from ..eval.reports.summary import summary_table
    from ..eval.scoring import score_file

    with known_errors():
        summary = score_file(file, dataset=dataset, out=out, scorer=scorer)
    console.print(summary_table(summary, title=f"scored {file.name} ({dataset})"))
    console.print(f"wrote {out / 'scored.jsonl'} and {out / 'summary.json'}")

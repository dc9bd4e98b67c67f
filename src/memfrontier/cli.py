"""The ``memfrontier`` command line: eval, score, ingest, ask, search, train, sweep."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .core.version import __version__
from .strategies import STRATEGIES

# Help texts are Markdown: paragraphs reflow to the terminal's width, `code` is highlighted
# (placeholders are written in capitals, as <x> would be read as an HTML tag).
HELP_MARKUP = "markdown"
app = typer.Typer(rich_markup_mode=HELP_MARKUP, help="memfrontier: long-term memory for LLM agents with measured quality, cost and latency.",
                  no_args_is_help=True, add_completion=False)
# Logs and CI are not terminals: render tables wide there rather than cutting numbers.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

LLM_HELP = ("'local' (embedded Gemma 3 270M, no network), 'local:qwen2.5-1.5b' / 'local:qwen2.5-0.5b' (embedded "
            "bench models, `make bench-model`) or 'openai:MODEL' for any OpenAI-compatible server.")

train_app = typer.Typer(rich_markup_mode=HELP_MARKUP, help="Train learned components: the BudgetMem tier router, MemoryCPT's LoRA-A (qad) and LoRA-B (qar), the MemPilot orchestrator.", no_args_is_help=True)
sweep_app = typer.Typer(rich_markup_mode=HELP_MARKUP, help="Sweeps of a strategy's settings, ending in tables and frontier plots.", no_args_is_help=True)
app.add_typer(train_app, name="train")
app.add_typer(sweep_app, name="sweep")


def _print_version(value: bool) -> None:
    if value:
        console.print(f"memfrontier {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print memfrontier's version and exit.")) -> None:
    """memfrontier: long-term memory for LLM agents with measured quality, cost and latency."""


# Options shared by several commands (one definition, one help text).
OPT_LLM = typer.Option("local", help=LLM_HELP)
OPT_BASE_URL = typer.Option(None, help="Base URL of the OpenAI-compatible server (with --llm openai:MODEL).")
OPT_JUDGE_LLM = typer.Option(None, help="Judge model (default: the answer model). " + LLM_HELP)
OPT_DATA_ROOT = typer.Option(None, envvar="MEMFRONTIER_DATA", help="Benchmark data root (default ../shared/data).")
OPT_SEED = typer.Option(42, help="Seed for the question slice.")
OPT_CONCURRENCY = typer.Option(1, min=1, metavar="N", help="Questions in flight at once (the embedded model runs one at a time).")
OPT_PRICE_BOOK = typer.Option(None, help="A price-book YAML (default: the packaged one).")
OPT_ALLOW_UNPRICED = typer.Option(False, "--allow-unpriced", help="Record calls to models missing from the price book as unpriced instead of failing.")
OPT_PRICE_AS = typer.Option(None, help="Price every call as this price-book model (e.g. qwen3-14b) to read a local run in hosted dollars.")
OPT_DATASET = typer.Option("locomo", help="locomo | longmemeval | hotpotqa | mem_gallery")
OPT_SPLIT = typer.Option(None, help="locomo: test (conv-49, conv-50, cat 1-4) | train | all; mem_gallery: test | train | val (70/10/20 by conversation, seed 13, no answer-refusal) | all; others: all. Default: test where the dataset has one, else all.")
STRATEGY_HELP = " | ".join(STRATEGIES)


def _strategy_name(value: str) -> str:
    if value not in STRATEGIES:
        raise typer.BadParameter(f"unknown strategy {value!r}; choose one of: {', '.join(STRATEGIES)}")
    return value


OPT_STRATEGY = typer.Option("rag", parser=_strategy_name, metavar="STRATEGY",
                            help=f"{STRATEGY_HELP}. Options of each: `memfrontier config STRATEGY`.")
OPT_SET = typer.Option(None, "--set", metavar="KEY=VALUE",
                       help="A strategy-config option (repeatable; value read as YAML, nested keys with dots: "
                            "--set k=3 --set budget.max_usd=0.001). `memfrontier config STRATEGY` lists the keys.")
OPT_STRATEGY_CONFIG = typer.Option(None, "--strategy-config", metavar="FILE",
                                   help="A YAML or JSON file of strategy-config options (--set overrides it).")


def _fail(msg: str, code: int = 2):
    from rich.markup import escape

    err.print(f"[red]error:[/red] {escape(msg)}")  # a message's own brackets are text, not markup
    raise typer.Exit(code)


def _known_errors():
    from .answerer import BudgetExceededError
    from .core.errors import EmptyScopeError
    from .core.pricebook import UnpricedModelError
    from .eval.datasets import DatasetError
    from .eval.fallbacks import FallbackError
    from .eval.ray_pool import RayUnavailableError
    from .eval.runner import RunMismatchError
    from .llm.base import LLMError
    from .store.base import StoreError
    from .strategies import ViewNotBuiltError

    return (BudgetExceededError, UnpricedModelError, DatasetError, FallbackError, RunMismatchError, LLMError,
            StoreError, ViewNotBuiltError, EmptyScopeError, RayUnavailableError, FileNotFoundError, ValueError)


#: What an interrupted resumable command (eval, frontier, sweeps) says before exiting 130.
RESUME_HINT = ("interrupted; what was built and the questions answered so far are kept: "
               "run the same command again to resume")


@contextmanager
def known_errors(bar=None, extra: tuple[type[BaseException], ...] = (), interrupted: str = "interrupted"):
    """The one error handler of every command: a known error (budget, unpriced model, store, data,
    model, unbuilt view, bad value) becomes ``error: <message>`` on stderr and exit code 2 (3 for
    a run refused for its fallbacks); Ctrl-C prints ``interrupted`` and exits 130. The progress
    ``bar`` (if any) is stopped first. Anything else is a bug and keeps its traceback."""
    from pydantic import ValidationError

    from .core.errors import explain_validation

    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        if bar is not None:
            bar.stop()
        err.print(interrupted)
        raise typer.Exit(130) from None
    except (*_known_errors(), *extra) as e:
        if bar is not None:
            bar.stop()
        text = explain_validation("the options", e) if isinstance(e, ValidationError) else str(e)
        _fail(text, code=3 if type(e).__name__ == "FallbackError" else 2)


# --- the run block shared by eval and the sweeps ------------------------------------------------
@dataclass(frozen=True)
class Param:
    """One command-line parameter added to several commands (name, type, typer option)."""

    name: str
    annotation: Any
    option: Any


def run_params(out: Path, out_help: str) -> list[Param]:
    """The run options of ``eval`` and every ``sweep`` (one definition). Adding a run option is one
    row here and the field of the same name on :class:`~memfrontier.eval.runner.EvalConfig`."""
    return [
        Param("dataset", str, OPT_DATASET),
        Param("split", Optional[str], OPT_SPLIT),
        Param("limit", Optional[int], typer.Option(None, min=1, metavar="N", help="Answer a category-balanced slice of this many questions (seeded) per run. Default: all.")),
        Param("llm", str, OPT_LLM),
        Param("base_url", Optional[str], OPT_BASE_URL),
        Param("judge", bool, typer.Option(False, "--judge", help="Also grade answers with the LLM judge.")),
        Param("judge_llm", Optional[str], OPT_JUDGE_LLM),
        Param("out", Path, typer.Option(out, help=out_help)),
        Param("store", Optional[str], typer.Option(None, help="Store directory or postgresql:// URL, reused across runs (default OUT/store).")),
        Param("data_root", Optional[Path], OPT_DATA_ROOT),
        Param("data_file", Optional[Path], typer.Option(None, help="Read this file (in the --dataset's format, e.g. the official LongMemEval S or M file) instead of the data root's default file.")),
        Param("seed", int, OPT_SEED),
        Param("concurrency", int, OPT_CONCURRENCY),
        Param("ray", Optional[str], typer.Option(None, "--ray", metavar="ADDRESS", help="Run conversations and questions as Ray tasks (optional extra memfrontier\\[ray]): 'local' starts Ray on this machine, 'auto' joins the running cluster, or a cluster address (ray://head:10001). --concurrency is then the number of Ray workers. Same results as without.")),
        Param("price_book", Optional[Path], OPT_PRICE_BOOK),
        Param("allow_unpriced", bool, OPT_ALLOW_UNPRICED),
        Param("price_as", Optional[str], OPT_PRICE_AS),
        Param("allow_fallbacks", bool, typer.Option(False, "--allow-fallbacks", help="Keep a run in which more than --fallback-threshold of some role's model calls failed or fell back (default: exit 3 naming the role), and build on a memory whose construction is bound to exceed it (default: stopped early, what was built kept).")),
        Param("fallback_threshold", float, typer.Option(0.05, min=0.0, max=1.0, metavar="SHARE", help="Largest share of a role's calls that may fail or fall back (0-1).")),
    ]


class RunOptions(dict):
    """The run block's values (dataset, split, limit, models, judge, out, store, data root, seed,
    concurrency, pricing) as given on the command line."""

    @property
    def out(self) -> Path:
        return self["out"]

    @property
    def dataset(self) -> str:
        return self["dataset"]

    def eval_config(self, strategy: str, strategy_options: dict | None = None):
        from .eval.runner import EvalConfig

        return EvalConfig(strategy=strategy, strategy_options=strategy_options or {}, **self)


def with_params(params: list[Param], into: str, collect=dict):
    """Append ``params`` to a command's parameters; the command receives their values gathered
    by ``collect`` (a dict by default) as the keyword argument ``into``."""

    def deco(fn):
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != into]
        added = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.option, annotation=p.annotation)
                 for p in params]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            values = {p.name: kwargs.pop(p.name) for p in params}
            return fn(*args, **kwargs, **{into: collect(values)})

        wrapper.__signature__ = sig.replace(parameters=own + added)
        del wrapper.__wrapped__  # typer must read the signature above, not the wrapped one
        return wrapper

    return deco


def with_run_options(out: Path, out_help: str):
    """Give a command the shared run block as ``run: RunOptions``."""
    return with_params(run_params(out, out_help), "run", RunOptions)


# --- strategy options: the strategy's config from --strategy-config, --set and deprecated flags ----
@dataclass(frozen=True)
class Alias:
    """A deprecated per-strategy flag of ``eval``, kept for one release; it sets config ``key``."""

    flag: str
    key: str
    strategies: tuple[str, ...]
    annotation: Any
    help: str
    min: float | None = None
    #: strategies for which the flag is a current option, not a deprecated one
    current: tuple[str, ...] = ()


ALIASES: tuple[Alias, ...] = (
    Alias("--k", "k", ("rag", "budgetmem"), Optional[int], "rag / budgetmem: chunks to retrieve (default 8 / 5).", 1),
    Alias("--router", "router", ("budgetmem", "auto"), Optional[Path],
          "auto: a router file from `train strategy-router`; budgetmem: a trained tier-router checkpoint.",
          current=("auto",)),
    Alias("--lambda", "lam", ("budgetmem",), Optional[float], "budgetmem: the router's cost weight lambda (recorded).", 0),
    Alias("--tiering", "tiering", ("budgetmem",), Optional[str], "budgetmem: implementation | reasoning | capacity."),
    Alias("--tiers", "tiers", ("budgetmem",), Optional[str], "budgetmem without --router: one fixed tier low | mid | high."),
    Alias("--module-topk", "module_topk", ("budgetmem",), Optional[int], "budgetmem: chunks the filter module keeps.", 1),
    Alias("--episodic-k", "episodic_k", ("memorycpt",), Optional[int], "memorycpt: episodes RRF keeps.", 0),
    Alias("--semantic-k", "semantic_k", ("memorycpt",), Optional[int], "memorycpt: facts RRF keeps.", 0),
    Alias("--ablation", "ablation", ("memorycpt",), Optional[str], "memorycpt: none | no-qad | no-qar | no-fs."),
    Alias("--construction-llm", "construction_llm", ("memorycpt",), Optional[str], "memorycpt: the QAD model."),
    Alias("--summarizer-llm", "summarizer_llm", ("memorycpt",), Optional[str], "memorycpt: the Fine Summary model."),
    Alias("--summarizer-adapter", "summarizer_adapter", ("memorycpt",), Optional[Path], "memorycpt: a LoRA-B adapter directory."),
    Alias("--single-pass", "single_pass", ("automem",), bool, "automem: the single-pass variant."),
    Alias("--preference", "preference", ("mempilot", "auto"), Optional[str],
          "mempilot / auto: perf | balanced | cost, or weights 'Q,C,L'.", current=("auto",)),
    Alias("--pool", "pool", ("mempilot",), Optional[str], "mempilot: local | table3 | bench (embedded 270M/0.5B/1.5B routes; make bench-model) | a pool YAML."),
    Alias("--answer-mode", "answer_mode", ("mempilot",), Optional[str], "mempilot: decoupled | policy."),
    Alias("--adapter", "adapter", ("mempilot",), Optional[Path], "mempilot: a LoRA adapter from `train orchestrator`."),
    Alias("--bank-file", "bank_file", ("mempilot",), Optional[Path], "mempilot: a JSONL imported as the memory bank."),
    Alias("--max-usd", "budget.max_usd", ("mempilot",), Optional[float], "mempilot: hard USD cap per question.", 0),
    Alias("--max-proxy-s", "budget.max_proxy_s", ("mempilot",), Optional[float], "mempilot: hard latency-proxy cap (s) per question.", 0),
)
DEPRECATED_PANEL = "Deprecated strategy flags (one release; use --set KEY=VALUE)"


def _alias_param(a: Alias) -> Param:
    decl = a.flag  # a bool alias is a plain flag: False is "not given"
    name = a.flag[2:].replace("-", "_") if a.flag != "--lambda" else "lam"
    old = [s for s in a.strategies if s not in a.current]
    deprecated = (f" Deprecated for {' / '.join(old)}: use --set {a.key}=VALUE." if a.current
                  else f" Deprecated: use --set {a.key}=VALUE.")
    opt = typer.Option(False if a.annotation is bool else None, decl, min=a.min,
                       rich_help_panel=None if a.current else DEPRECATED_PANEL, help=a.help + deprecated)
    return Param(name, a.annotation, opt)


STRATEGY_PARAMS = [Param("set_options", Optional[list[str]], OPT_SET),
                   Param("strategy_config_file", Optional[Path], OPT_STRATEGY_CONFIG)]
ALIAS_PARAMS = {a.flag: _alias_param(a) for a in ALIASES}


def with_strategy_options(aliases: bool = False):
    """Give a command ``--set`` / ``--strategy-config`` (and, for ``eval``, the deprecated flags)
    as ``strategy_args: dict``; :func:`strategy_options` turns them into validated options."""
    return with_params(STRATEGY_PARAMS + (list(ALIAS_PARAMS.values()) if aliases else []), "strategy_args")


def _put(options: dict, path: tuple[str, ...], value) -> None:
    for part in path[:-1]:
        nested = options.get(part)
        options[part] = nested = dict(nested) if isinstance(nested, dict) else {}
        options = nested
    options[path[-1]] = value


def strategy_options(strategy: str, strategy_args: dict, **fixed) -> dict:
    """The validated options of ``strategy``'s config, from (in increasing precedence) the
    ``--strategy-config`` file, ``fixed`` options of the command, the deprecated flags and
    ``--set``. Exits 2 with a message naming the key (or flag) and the allowed values; a flag of
    another strategy is refused. Returns the given options only (defaults stay implicit), as
    JSON values, ready for :class:`~memfrontier.eval.runner.EvalConfig`."""
    from .strategies import StrategyConfigError, strategy_class

    cls = strategy_class(strategy).config_class
    opts: dict = {}
    # an option is named by its flag in errors (a missing --router says --router)
    labels: dict[str, str] = {a.key.split(".")[0]: a.flag for a in ALIASES if strategy in a.strategies}
    with known_errors():
        file = strategy_args.get("strategy_config_file")
        if file is not None:
            opts = _read_strategy_config_file(file, strategy)
        for key, value in fixed.items():
            if value is not None:
                _put(opts, tuple(key.split(".")), value)
        given = [(a, strategy_args[p.name]) for a in ALIASES if (p := ALIAS_PARAMS[a.flag]).name in strategy_args
                 and strategy_args[p.name] not in (None, False)]
        if wrong := [a.flag for a, _ in given if strategy not in a.strategies]:
            targets = {s for a, _ in given if a.flag in wrong for s in a.strategies}
            verb = "applies" if len(wrong) == 1 else "apply"
            _fail(f"{', '.join(wrong)} {verb} to --strategy {' or '.join(sorted(targets))} only")
        for a, value in given:
            if a.key == "preference":
                value = _parse_preference(value)
            _put(opts, tuple(a.key.split(".")), str(value) if isinstance(value, Path) else value)
            labels[a.key.split(".")[0]] = a.flag
        for text in strategy_args.get("set_options") or ():
            path, value = cls.parse_assignment(text)
            _put(opts, path, value)
            labels.pop(path[0], None)
        try:
            cfg = cls.from_options(opts, labels=labels)
        except StrategyConfigError as e:
            _fail(str(e))
    if getattr(cfg, "router", None) is not None:
        _check_router(cfg.router, strategy)
    return cfg.model_dump(mode="json", include=set(opts))


def _read_strategy_config_file(path: Path, strategy: str) -> dict:
    """A YAML/JSON mapping of config options; an optional ``strategy`` key must name ``strategy``."""
    import yaml

    if not Path(path).is_file():
        raise FileNotFoundError(f"--strategy-config {path}: no such file")
    try:
        data = yaml.safe_load(Path(path).read_text("utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"--strategy-config {path}: not YAML/JSON ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"--strategy-config {path}: expected a mapping of options, got {type(data).__name__}")
    named = data.pop("strategy", strategy)
    if named != strategy:
        raise ValueError(f"--strategy-config {path} is for strategy {named!r}, not {strategy!r}")
    return data


def _check_router(path: Path, strategy: str = "budgetmem") -> None:
    """Fail (exit 2) before any work when ``path`` is not a readable router of ``strategy``: a
    strategy-router file for ``auto``, a tier-router checkpoint for ``budgetmem``."""
    from .strategies.auto.router import Router, RouterFileError
    from .strategies.budgetmem.router import RouterCheckpointError, TierRouter

    try:
        if strategy == "auto":
            Router.load(path)
        else:
            TierRouter.load(path)  # the CLI always embeds with MiniLM (384-d)
    except (FileNotFoundError, RouterCheckpointError, RouterFileError) as e:
        _fail(str(e))


def _parse_preference(text: str):
    """A preset name (perf | balanced | cost) or explicit weights 'Q,C,L' (e.g. '1,0.25,0.5')."""
    if "," not in text:
        return text
    vals = _float_list("--preference", text)
    if len(vals) != 3:
        _fail(f"--preference weights must be three numbers Q,C,L; got {text!r}")
    return {"quality": vals[0], "cost": vals[1], "latency": vals[2]}


def _float_list(flag: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        _fail(f"{flag} must be comma-separated numbers, got {text!r}")
    if not values or any(v < 0 for v in values):
        _fail(f"{flag} needs at least one value, all >= 0; got {text!r}")
    return values


def _question_bar():
    """The progress bar of every long command, on stderr; drawn only on a terminal, so logs and
    scripts that read stderr get the commands' own lines and nothing else."""
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=False,
                    disable=not err.is_terminal)


class IngestRow:
    """A conversation's ingest as its own row of a progress ``bar``: turns embedded out of the
    turns to embed (:func:`memfrontier.eval.runner.construct`'s ``embed`` events, or a store
    ``add``'s ``progress(done, total)``), so a conversation of hundreds of sessions shows it is
    moving; then the steps of its offline construction (``construct`` events: sessions, windows),
    with the model calls made and how many failed or fell back, so an hours-long build shows both
    that it moves and whether it degrades. The row goes once the conversation is done (``ingest``
    event, or :meth:`close`). A conversation whose construction made model calls in this run also
    leaves a line (printed on a log too) with the view's calls and failures (over every run that
    built it, when the view records them)."""

    def __init__(self, bar: Progress, prefix: str = ""):
        self.bar, self.prefix, self.task = bar, prefix, None
        self.building: str | None = None  # the conversation whose construction the row follows
        self.skipped = 0  # its units done before this run's first model call (built by an earlier run)

    def _say(self, text: str) -> None:
        self.bar.console.print(f"{self.prefix}{text}", markup=False, highlight=False)

    def _set(self, desc: str, done: int, total: int) -> None:
        if self.task is None:
            self.task = self.bar.add_task(desc, total=total, completed=done)
        else:
            self.bar.update(self.task, description=desc, total=total, completed=done)

    def show(self, conversation: str, sessions: int, done: int, total: int) -> None:
        self._set(f"{self.prefix}ingesting {conversation} ({sessions} sessions): turns embedded", done, total)

    def close(self) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None

    def on_event(self, event: str, info: dict) -> None:
        """Follow a run's progress events (others are ignored)."""
        if event == "embed":
            self.show(info["conversation"], info["sessions"], info["done"], info["total"])
        elif event == "build":
            self.close()
        elif event == "construct":
            if self.building != info["conversation"]:
                self.building, self.skipped = info["conversation"], 0
            if not info["calls"]:  # units done without a call so far: built by an earlier run
                self.skipped = info["done"]
            elif self.skipped is not None:  # this run's first call: say where a resumed build went on
                if self.skipped:
                    self._say(f"resuming the build of {info['conversation']}'s memory view: {self.skipped} of "
                              f"{info['total']} {info['unit']} built by an earlier run")
                self.skipped = None
            failed = f", {info['failed']} failed or fell back" if info["failed"] else ""
            self._set(f"{self.prefix}building {info['conversation']}: {info['unit']} "
                      f"({info['calls']} model calls this run{failed})", info["done"], info["total"])
        elif event == "ingest":
            self.close()
            self.building = None
            if info.get("built_calls"):
                self._say(f"built {info['conversation']}'s memory view: {info['built_calls']} model calls this run; "
                          f"{info['calls']} in all, {info['failed']} failed or fell back")


@app.command("config")
def config_cmd(
    strategy: Optional[str] = typer.Argument(None, parser=_strategy_name, metavar="[STRATEGY]",
                                             help=f"{STRATEGY_HELP} (default: every strategy)."),
    as_json: bool = typer.Option(False, "--json", help="Print the fields as JSON."),
):
    """The options of a strategy's config: key, type, default and meaning (for --set / --strategy-config)."""
    from rich.table import Table

    from .strategies import strategy_class

    names = [strategy] if strategy else list(STRATEGIES)
    if as_json:
        console.print_json(data={n: strategy_class(n).config_class.describe() for n in names}, default=str)
        return
    for n in names:
        cls = strategy_class(n).config_class
        t = Table(title=f"{n} ({cls.__name__})", title_justify="left")
        for col in ("key", "type", "default", "meaning"):
            t.add_column(col, overflow="fold")
        for row in cls.describe():
            t.add_row(row["name"], row["type"], repr(row["default"]), row["doc"])
        if not cls.model_fields:
            t.add_row("-", "-", "-", "no options")
        console.print(t)


@app.command("eval")
@with_strategy_options(aliases=True)
@with_run_options(Path("runs/latest"), "Output directory: predictions.jsonl, summary.json, store/.")
def eval_cmd(strategy: str = OPT_STRATEGY, *, run: RunOptions, strategy_args: dict):
    """Run the evaluation protocol and print the per-category table. Interrupted runs resume from OUT.

    Strategy options come from the strategy's config: --set KEY=VALUE (repeatable) and/or
    --strategy-config FILE; `memfrontier config STRATEGY` lists the keys, types and defaults.
    """
    from .eval.fallbacks import FallbackError
    from .eval.reports.summary import construction_table, fallback_table, summary_table
    from .eval.runner import run_eval

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
                    err.print(f"note: the split holds {info['total']} question(s), fewer than --limit {cfg.limit}: "
                              "all of them are answered")
                if info["done"]:
                    err.print(f"resuming {out}: {info['done']} of {info['total']} questions already answered")
            elif event == "build":
                bar.update(task, description=f"building memories of {info['conversation']} (offline, once per store)")
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{info['added']} records)")
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
    console.print(summary_table(summary))
    console.print(fallback_table(summary))
    if any(c.get("calls") for c in summary.get("construction", {}).values()):
        console.print(construction_table(summary))
    choices = summary.get("choices", {})
    if choices.get("tiers_used"):  # what ran; what was planned only where it differs
        console.print(tier_table(choices["tiers_used"], "tier that ran per module (after fallbacks)"))
        if choices.get("tiers") and choices["tiers"] != choices["tiers_used"]:
            console.print(tier_table(choices["tiers"], "tier planned per module"))
    elif choices.get("tiers"):
        console.print(tier_table(choices["tiers"]))
    if strategy == "mempilot":
        from .eval.reports.mempilot import read_rows, run_stats, stats_table

        console.print(stats_table(run_stats(read_rows(out / "predictions.jsonl"))))
    if strategy == "automem":
        from .eval.reports.automem import automem_table

        console.print(automem_table(out / "predictions.jsonl"))
    if choices.get("route"):
        console.print(route_table(choices["route"]["configuration"]))
    if undated := summary.get("undated_sessions"):
        err.print(f"note: {len(undated)} session(s) have no date the data file's date field could be read as "
                  f"(first: {undated[0]}): their turns are stored undated, so temporal questions about them "
                  "cannot be dated", markup=False, highlight=False)
    console.print(f"wrote {out / 'predictions.jsonl'} and {out / 'summary.json'}")
    if refused is not None:
        _fail(f"too many model calls failed or fell back: {refused}", code=3)


@app.command("frontier")
@with_run_options(Path("runs/frontier"), "Output directory: configs/LABEL/ (one eval run each), store/ (shared), frontier.{md,csv,json}, plots.")
def frontier_cmd(
    spec: Optional[Path] = typer.Option(None, help="YAML file: `name:` and `configurations:`, a list of {label, strategy, options, requires} (see `src/memfrontier/frontier/default.yaml`); default: that shipped spec, every strategy family."),
    only: Optional[str] = typer.Option(None, help="Comma-separated labels of the spec to run (default: all)."),
    reference: Optional[str] = typer.Option(None, help="The configuration every other one is compared with (paired bootstrap); default rag."),
    report_only: bool = typer.Option(False, "--report-only", help="Run nothing; rebuild the report from what has finished."),
    export: Optional[Path] = typer.Option(None, "--export", metavar="DIR", help="Also write DIR (a folder outside OUT): each finished configuration's run.json, summary.json and predictions without the questions', gold answers' or retrieved text, and a report over every configuration DIR holds (publishable; --report-only --out DIR rebuilds it; DIR/configs/LABEL copied into another --out counts there as finished)."),
    *, run: RunOptions,
):
    """Run every configuration of a spec on the same questions (one ledger each, construction built once in a shared store) and write the quality-cost-latency frontier with 95% bootstrap intervals.

    Resumable: finished configurations are kept, an interrupted one resumes from its predictions.
    The report covers the configurations run and every other one already finished in OUT with the
    same options. Without --only and --limit this is every configuration on every question of the
    split (days on a laptop CPU): start with --limit 40 --only LABELS. Exit code 0 when every
    selected configuration finished, 1 when some did not run or failed, 3 when one was refused
    (model calls failed or fell back above --fallback-threshold).
    """
    from .frontier.report import summary_lines
    from .frontier.run import run_frontier
    from .frontier.spec import load_spec

    with known_errors():
        fspec = load_spec(spec)
        labels = [x.strip() for x in only.split(",") if x.strip()] if only is not None else None
        fspec.select(labels)  # unknown labels fail before anything runs
        base = run.eval_config("rag")
        if export is not None:
            from .frontier.export import check_export_dest

            check_export_dest(run.out, export)
    if report_only and not (run.out / "configs").is_dir():
        _fail(f"no frontier runs in {run.out} (no configs/ folder); give the --out of a frontier run")
    with _question_bar() as bar:
        task = bar.add_task("frontier", total=None)

        current = {"label": ""}

        def on_config(label: str, status: str) -> None:
            if status == "start":
                current["label"] = label
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
                    err.print(f"{current['label']}: resuming, {info['done']} of {info['total']} questions already answered")
            elif event == "question":
                bar.update(task, advance=1)

        with known_errors(bar, interrupted=RESUME_HINT):
            report = asyncio.run(run_frontier(fspec, base, run.out, labels=labels, reference=reference,
                                              on_config=on_config, on_progress=on_progress, report_only=report_only))
    rows = {x["label"]: x for x in report["rows"]}
    if not report["files"]:
        _fail(f"no configuration has finished in {run.out} with these options; no report written "
              "(an earlier one there is unchanged)", code=1)
    console.print(frontier_table(report))
    for line in summary_lines(report):
        console.print(line, markup=False)
    ok = sum(1 for x in report["rows"] if x["status"] == "ok")
    files = report["files"]
    plots = [p.name for k, p in files.items() if k.startswith("plot")]
    console.print(f"{ok}/{len(report['rows'])} configurations on {len(report['question_ids'])} questions; "
                  f"wrote {files['md']} (the tables), {files['json'].name} and {files['csv'].name} (every field)"
                  + (f", {' and '.join(plots)}" if plots else ""))
    if export is not None:
        from .frontier.export import export_results

        finished = [x["label"] for x in report["rows"] if x["status"] == "ok" or x["status"].startswith("refused")]
        with known_errors():
            exported = export_results(run.out, export, finished)
            published = asyncio.run(run_frontier(fspec, base, export, reference=reference, report_only=True))
        held = sum(1 for x in published["rows"] if x["status"] == "ok")
        console.print(f"exported {len(exported)} configurations to {export}; its report covers the {held} "
                      f"finished configurations it holds ({published['files'].get('md', 'none written')})")
    if report_only:
        return
    missing = [label for label in report["selected"] if rows[label]["status"] != "ok"]
    if missing:
        refused = [label for label in missing if rows[label]["status"].startswith("refused")]
        _fail(f"{len(missing)} of {len(report['selected'])} configurations did not finish: {', '.join(missing)}",
              code=3 if refused else 1)


def frontier_table(report: dict):
    """The finished configurations of a frontier report, the columns that fit a terminal
    (configuration names are never cut); unfinished ones were named as they were met, and
    ``frontier.md`` has every column."""
    from rich.table import Table

    from .frontier.report import delta_cell, interval, pareto_cell

    t = Table(title=f"frontier ({len(report['question_ids'])} questions)", title_justify="left")
    for name, just in (("configuration", "left"), ("n", "right"), ("F1 [95% CI]", "left"),
                       (f"ΔF1 vs {report['reference']} [95% CI]", "left"), ("C(n) USD×1e4/q", "right"),
                       ("QPC at C(n)", "right"), ("proxy s/q", "right"), ("Pareto cost/latency", "center")):
        t.add_column(name, justify=just, no_wrap=name == "configuration", overflow="fold")
    for x in report["rows"]:
        if x["status"] != "ok":
            continue
        unpriced = x.get("unpriced_calls")
        t.add_row(x["label"], str(x["n"]), interval(x["f1"], x["f1_low"], x["f1_high"]),
                  delta_cell(x, report["reference"]),
                  "unpriced" if unpriced else f"{x['usd_x1e4_amortized']:.4f}",
                  "unpriced" if unpriced else f"{x['qpc']:.3f}", f"{x['proxy_s']:.2f}", pareto_cell(x))
    return t


def route_table(shares: dict[str, float]):
    """The share of questions the ``auto`` router sent to each configuration."""
    from rich.table import Table

    t = Table(title="configuration chosen by the router (auto)")
    t.add_column("configuration")
    t.add_column("share of questions", justify="right")
    for label, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        t.add_row(label, f"{share:.2f}")
    return t


def tier_table(ratios: dict, title: str = "tier selection ratio per module"):
    from rich.table import Table

    from .strategies.budgetmem.config import TIERS

    t = Table(title=title)
    cols = [*TIERS, *sorted({c for r in ratios.values() for c in r} - set(TIERS))]  # e.g. "rules"
    t.add_column("module")
    for tier in cols:
        t.add_column(tier, justify="right")
    for module, r in ratios.items():
        t.add_row(module, *(f"{r.get(tier, 0.0):.2f}" for tier in cols))
    return t


@train_app.command("qad")
def train_qad_cmd(
    data: Path = typer.Option(Path("runs/sft"), help="Folder of per-role ShareGPT JSONL from `export sft` (or one .jsonl file)."),
    out: Path = typer.Option(Path("runs/qad"), help="Output: adapter/, merged/ (serve with --construction-llm hf:OUT/merged), train_log.jsonl."),
    base: Optional[str] = typer.Option(None, help="Base checkpoint directory (default: the packaged Gemma 3 270M, loaded from its GGUF)."),
    rank: int = typer.Option(16, min=1, help="LoRA rank (MemoryCPT: 16)."),
    lora_alpha: float = typer.Option(32, help="LoRA alpha (MemoryCPT: 32)."),
    dropout: float = typer.Option(0.05, min=0, max=1, help="LoRA dropout (MemoryCPT: 0.05)."),
    lr: float = typer.Option(1e-4, help="Learning rate (MemoryCPT: 1e-4)."),
    cutoff_tokens: int = typer.Option(8192, min=16, help="Longer samples are dropped and counted (MemoryCPT: 8192)."),
    epochs: float = typer.Option(1.0, help="Epochs over the training split."),
    max_steps: Optional[int] = typer.Option(None, min=1, help="Stop after this many optimizer steps (smoke runs)."),
    val_fraction: float = typer.Option(0.1, min=0, max=0.9, help="Held-out share; the best validation-loss checkpoint is kept."),
    seed: int = OPT_SEED,
):
    """LoRA-A: distil the construction roles (SFT on teacher traces, MemoryCPT QAD), then merge it."""
    from .train.lora_sft import SFTDataError, train_lora_sft

    files = sorted(data.glob("*.jsonl")) if data.is_dir() else [data]
    if not files or not all(f.is_file() for f in files):
        _fail(f"no SFT data at {data}; write it with `memfrontier export sft --store STORE --out {data}`")
    err.print(f"training LoRA-A on {len(files)} file(s): {', '.join(f.name for f in files)}")
    with known_errors(extra=(SFTDataError,)):
        res = train_lora_sft(files, out, base=base, rank=rank, alpha=lora_alpha, dropout=dropout, lr=lr,
                             cutoff_tokens=cutoff_tokens, epochs=epochs, max_steps=max_steps,
                             val_fraction=val_fraction, seed=seed,
                             on_progress=lambda event, **info: err.print(f"[dim]{event}[/dim] {info}"))
    console.print(f"{res.steps} steps on {res.n_train} samples ({res.n_val} validation, {res.n_too_long} too long) "
                  f"in {res.seconds:.0f}s; best validation loss {res.best_val_loss}")
    console.print(f"adapter: {res.adapter_dir}  merged: {res.merged_dir}  log: {res.train_log}")


@train_app.command("qar")
def train_qar_cmd(
    alpha: float = typer.Option(0.8, min=0, max=1, help="Reward weight of F1 against cost (MemoryCPT Eq. 16; paper: 0.8)."),
    out: Optional[Path] = typer.Option(None, help="Output (default runs/qar/alpha_A): adapter/, train_log.jsonl, reward_curve.png, qar_summary.json."),
    store: Path = typer.Option(Path("runs/qar/store"), help="Store for the training conversations' memories (reused across runs)."),
    dataset: str = OPT_DATASET,
    split: str = typer.Option("train", help="locomo: train (the eight non-test conversations) | all"),
    sessions: int = typer.Option(2, min=0, help="Sessions built per conversation (0 = all; construction with the embedded model takes ~30 s per session)."),
    questions: int = typer.Option(16, min=1, help="Training states (questions answerable from the built sessions)."),
    base: Optional[str] = typer.Option(None, help="Policy base checkpoint (default the packaged base; e.g. runs/qad/merged for base_A)."),
    construction_llm: Optional[str] = typer.Option(None, help="The QAD model that builds the memories (e.g. 'hf:runs/qad/merged'); default --llm."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    max_steps: int = typer.Option(4, min=1, help="GRPO steps (one question x --num-generations summaries each)."),
    num_generations: int = typer.Option(4, min=2, help="Summaries sampled per question (the GRPO group)."),
    beta: float = typer.Option(0.04, min=0, help="KL weight against the frozen base (Eq. 13)."),
    lr: float = typer.Option(1e-5, help="Learning rate."),
    max_summary_tokens: int = typer.Option(64, min=4, help="Longest sampled summary."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = OPT_SEED,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
):
    """LoRA-B: GRPO-train the query-aware summarizer with the cost-aware reward (MemoryCPT QAR)."""
    from .api import AsyncMemory
    from .eval.datasets import load_dataset
    from .eval.sweeps.memorycpt import alpha_dir_name
    from .train.qar import train_qar

    out = out or Path("runs/qar") / alpha_dir_name(alpha)
    with known_errors():
        convs = load_dataset(dataset, split, data_root=data_root)
        mem = AsyncMemory.open(store, llm=llm, base_url=base_url, price_book=price_book)

    def on_progress(event, **info):
        err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    with known_errors():
        try:
            summary = train_qar(mem, convs=convs, out=out, dataset=dataset, sessions=sessions, max_questions=questions,
                                alpha=alpha, base=base, construction_llm=construction_llm, max_steps=max_steps,
                                num_generations=num_generations, beta=beta, lr=lr,
                                max_completion_tokens=max_summary_tokens, seed=seed, on_progress=on_progress)
        finally:
            mem.close()
    res = summary["result"]
    for s in summary["steps"]:
        console.print(f"step {s['step']}: reward {s['reward_mean']:.3f}  F1 {s['f1_mean']:.3f}  "
                      f"summary tokens {s['summary_tokens_mean']:.1f}")
    console.print(f"{res['steps']} steps on {summary['pool_size']} states; LoRA change ||Δφ||₂ = {res['lora_delta_l2']:.4g}")
    console.print(f"adapter: {res['adapter_dir']} (use: eval --strategy memorycpt --summarizer-adapter {res['adapter_dir']})")


@train_app.command("orchestrator")
def train_orchestrator_cmd(
    preference: str = typer.Option("balanced", help="perf | balanced | cost, or weights 'Q,C,L' (MemPilot Eq. 10)."),
    dataset: str = OPT_DATASET,
    split: str = typer.Option("train", help="locomo: train | all; mem_gallery: train (70/10/20, seed 13) | val | all."),
    conversation: Optional[list[str]] = typer.Option(None, help="Train on these conversations (repeatable; default the split's first)."),
    sessions: int = typer.Option(2, min=0, help="Sessions ingested per conversation (0 = all); questions need their evidence inside."),
    steps: int = typer.Option(1, min=1, help="Optimizer steps (one batch of questions x --group-size rollouts each)."),
    questions_per_step: int = typer.Option(1, min=1, help="Queries per step."),
    group_size: int = typer.Option(4, min=2, help="Rollouts per query, G (Table 5: 4)."),
    max_rounds: int = typer.Option(3, min=1, help="Policy turns per rollout (Table 5: 6; smaller at CPU smoke scale)."),
    temperature: float = typer.Option(1.0, min=0.01, help="Rollout temperature (Table 5: 1.0)."),
    lr: float = typer.Option(1e-6, min=0, help="AdamW learning rate (Table 5: 1e-6)."),
    beta: float = typer.Option(0.001, min=0, help="KL-loss coefficient (Table 5: 0.001)."),
    clip: float = typer.Option(0.2, min=0.0001, help="GRPO clipping epsilon (Table 5: 0.2)."),
    eta: float = typer.Option(0.5, min=0, help="Marginal-utility weight (Eq. 13; Table 5: 0.5)."),
    out: Optional[Path] = typer.Option(None, help="Output (default runs/mempilot/orchestrator/PREFERENCE): adapter/, train_log.jsonl, train_summary.json."),
    store: Optional[Path] = typer.Option(None, help="Store for the training conversations (default OUT/store)."),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    seed: int = typer.Option(13, help="Seed of the question order, sampling and LoRA init."),
):
    """GRPO for the MemPilot policy (decoupled advantages, marginal utility); saves a LoRA adapter."""
    from pydantic import ValidationError

    from .train.mempilot_trainer import OrchestratorTrainConfig, train_orchestrator

    pref = _parse_preference(preference)
    name = pref if isinstance(pref, str) else "w_" + "_".join(f"{v:g}" for v in pref.values())
    out = out or Path("runs/mempilot/orchestrator") / name
    try:
        from .strategies.mempilot import as_preference

        as_preference(pref)
        cfg = OrchestratorTrainConfig(dataset=dataset, split=split, preference=pref, conversations=conversation or None,
                                      sessions=sessions or None, steps=steps, questions_per_step=questions_per_step,
                                      group_size=group_size, max_rounds=max_rounds, temperature=temperature, lr=lr,
                                      beta=beta, clip=clip, eta=eta, out=out, store=store, data_root=data_root, seed=seed)
    except (ValidationError, ValueError) as e:
        _fail(str(e))

    def on_progress(event, **info):
        if event == "step":
            r = info["row"]
            console.print(f"step {r['step']}: {r['rollouts']} rollouts · valid {r['valid_share']:.2f} · Q {r['quality_mean']:.3f} · "
                          f"r_task {r['task_reward_mean']:.3f} · USD {r['usd_mean']:.2e} · proxy {r['proxy_s_mean']:.2f}s · "
                          f"loss {r['loss']:.4f} · KL {r['kl']:.2e} · ||Δφ|| {r['lora_delta_l2']:.3g} · {r['seconds']:.0f}s")
        else:
            err.print(f"[dim]{event}[/dim] " + " ".join(f"{k}={v}" for k, v in info.items()))

    with known_errors():
        summary = asyncio.run(train_orchestrator(cfg, on_progress=on_progress))
    console.print(f"adapter: {summary['adapter_dir']} (use: eval --strategy mempilot --adapter {summary['adapter_dir']}); "
                  f"LoRA change ||Δφ||₂ = {summary['lora_delta_l2']:.4g}; {summary['seconds']:.0f}s")


@train_app.command("router")
def train_router_cmd(
    tiering: str = typer.Option("implementation", help="How tiers are realised: implementation (Low rules, Mid MiniLM, High the LLM) | reasoning | capacity."),
    lam: float = typer.Option(0.3, "--lambda", min=0, help="Cost weight lambda of the reward r = r_task + lambda * alpha * r_cost (BudgetMem Eq. 7)."),
    reward: str = typer.Option("f1", help="Task reward r_task: f1 (LoCoMo F1) | judge (LLM judge, 0/1)."),
    align: bool = typer.Option(True, "--align/--no-align", help="Reward-scale alignment alpha = std(r_task)/std(r_cost) (Eq. 10); --no-align sets alpha = 1."),
    updates: int = typer.Option(20, min=1, help="PPO updates (one batch of questions each)."),
    batch_questions: int = typer.Option(32, min=1, help="Questions (episodes) per update."),
    epochs: int = typer.Option(4, min=1, help="PPO epochs over each batch."),
    lr: float = typer.Option(3e-4, min=0, help="Adam learning rate."),
    train_questions: Optional[int] = typer.Option(None, min=1, help="Training questions drawn (stratified by category, seeded) from the pool left after validation. Default: all."),
    val_questions: int = typer.Option(32, min=1, help="Validation questions held out from the training pool (stratified); they pick router_best.pt."),
    conversation: Optional[list[str]] = typer.Option(None, help="Only these training-pool conversations (repeatable; default all eight)."),
    k: int = typer.Option(5, min=1, help="Chunks retrieved per question."),
    module_topk: int = typer.Option(5, min=1, help="Chunks the filter module keeps."),
    max_relations: int = typer.Option(10, min=1, help="Relations per extraction module at most."),
    seed: int = typer.Option(42, help="Seed of the split, the batch order, the router init and tier sampling."),
    out: Optional[Path] = typer.Option(None, help="Output directory (default runs/budgetmem/routers/lambda_L): router_best.pt, router_last.pt, train_log.jsonl, reward_curve.png, train_summary.json."),
    store: Optional[Path] = typer.Option(None, help="Store directory for the training conversations, reused across runs (default: OUT/../store)."),
    cache: Optional[Path] = typer.Option(None, help="Module/answer cache file, reused across runs and lambdas (default: OUT/../module_cache.json)."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    judge_llm: Optional[str] = typer.Option(None, help="With --reward judge: the judge model (default: the answer model). " + LLM_HELP),
    data_root: Optional[Path] = OPT_DATA_ROOT,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
):
    """Train the BudgetMem tier router with PPO on the LoCoMo training pool; logs the reward curve."""
    from pydantic import ValidationError

    from .train.budgetmem_trainer import TrainConfig, router_dir_name, train_router

    if reward not in ("f1", "judge"):
        _fail(f"unknown --reward {reward!r}; choose f1 or judge")
    from .strategies.budgetmem.config import TIERINGS

    if tiering not in TIERINGS:
        _fail(f"unknown --tiering {tiering!r}; choose {', '.join(TIERINGS)}")
    out = out or Path("runs/budgetmem/routers") / router_dir_name(lam)
    try:
        cfg = TrainConfig(tiering=tiering, lam=lam, reward=reward, align=align, updates=updates,
                          batch_questions=batch_questions, epochs=epochs, lr=lr, train_questions=train_questions,
                          val_questions=val_questions, conversations=conversation or None, k=k, module_topk=module_topk,
                          max_relations=max_relations, seed=seed, out=out, store=store, cache=cache, llm=llm,
                          base_url=base_url, judge_llm=judge_llm, data_root=data_root, price_book=price_book,
                          allow_unpriced=allow_unpriced)
    except ValidationError as e:
        _fail(str(e))
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)

        def on_progress(event, **info):
            if event == "start":
                bar.update(task, total=info["updates"] * info["questions_per_update"], completed=0,
                           description=f"ingesting ({info['train']} train / {info['val']} val questions)")
            elif event == "ingest":
                bar.update(task, description=f"ingested {info['conversation']} (+{info['added']} records)")
            elif event == "question":
                bar.advance(task)
            elif event == "update":
                r = info["row"]
                bar.update(task, description=f"update {r['update']}/{cfg.updates} · reward {r['mean_reward']:.3f} · "
                                             f"val {r['val_reward']:.3f}")

        with known_errors(bar):
            summary = asyncio.run(train_router(cfg, on_progress=on_progress))
    console.print(_train_table(cfg.out / "train_log.jsonl"))
    console.print(tier_table(summary["final"]["val_tier_ratios"], title="validation tier selection ratio (last update, greedy)"))
    console.print(f"best update {summary['best_update']} (val reward {summary['best_val_reward']:.4f}); "
                  f"module cache {summary['module_cache']['hits']} hits / {summary['module_cache']['misses']} misses; "
                  f"{summary['llm_calls']} model calls, {summary['llm_errors']} failed, "
                  f"{summary['fallbacks']} module outputs fell back to a lower tier")
    console.print(f"wrote {cfg.out / 'router_best.pt'}, {cfg.out / 'router_last.pt'}, {cfg.out / 'train_log.jsonl'}, "
                  f"{cfg.out / 'reward_curve.png'}")


@train_app.command("strategy-router")
def train_strategy_router_cmd(
    frontier_dir: Path = typer.Option(..., "--from", help="A frontier output folder (configs/LABEL/predictions.jsonl) run on the training pool (--split train); never the test split."),
    out: Path = typer.Option(Path("runs/auto/router.json"), help="The router file to write; the validation report goes next to it (NAME.validation.json / .md)."),
    val_share: float = typer.Option(0.2, min=0.0, max=1.0, help="Share of the questions held out for validation (category-balanced)."),
    seed: int = typer.Option(42, help="Seed of the validation split and the cross-validation folds."),
    only: Optional[str] = typer.Option(None, help="Comma-separated configuration labels to route among (default: every finished configuration except the oracle anchor and refused runs)."),
    store: Optional[str] = typer.Option(None, help="The store the frontier ran on (default: the one its runs recorded)."),
):
    """Train the `auto` strategy's router (per configuration: F1, USD, latency and tokens from the question's
    features) on a frontier's per-question records; writes a versioned router file and its validation report."""
    from rich.markdown import Markdown

    from .train.strategy_router import train_strategy_router

    labels = [x.strip() for x in only.split(",") if x.strip()] if only else None
    with known_errors():
        res = train_strategy_router(frontier_dir, out, val_share=val_share, seed=seed, labels=labels,
                                    store=store_location(store))
    console.print(Markdown(res["validation_md"].read_text("utf-8")))
    console.print(f"wrote {res['router']}, {res['validation_json']}, {res['validation_md']} "
                  f"(use: eval --strategy auto --router {res['router']} --preference balanced)")


def _train_table(log_path: Path):
    from rich.table import Table

    cols = [("update", "update", 0), ("reward", "mean_reward", 4), ("±", "std_reward", 4), ("r_task", "r_task", 4),
            ("r_cost", "r_cost", 4), ("alpha", "alpha", 3), ("val reward", "val_reward", 4), ("val F1", "val_f1", 4),
            ("val USD×1e4/q", "val_extraction_usd_per_question", 4), ("q/s", "train_questions_per_s", 2)]
    t = Table(title=f"router training ({log_path})")
    for name, _key, _d in cols:
        t.add_column(name, justify="right")
    for line in log_path.read_text("utf-8").splitlines():
        r = json.loads(line)
        cells = []
        for _name, key, d in cols:
            v = r.get(key)
            if key == "val_extraction_usd_per_question" and v is not None:
                v *= 1e4
            cells.append("-" if v is None else (str(v) if d == 0 else f"{v:.{d}f}"))
        t.add_row(*cells)
    return t


def _run_sweep_with_progress(base, runs) -> list[dict]:
    """Run a sweep's points (:func:`memfrontier.eval.sweeps.base.run_sweep`) under one progress bar;
    every point's options are validated by the strategy's config before the first run starts."""
    from .eval.sweeps.base import run_sweep
    from .strategies import strategy_config

    with known_errors():
        for r in runs:
            strategy_config(base.strategy, r.options)
    with _question_bar() as bar:
        task = bar.add_task("loading", total=None)
        ingest_row = IngestRow(bar)

        def on_progress(event, **info):
            ingest_row.prefix = f"{info.get('run', '')}: "
            ingest_row.on_event(event, info)
            if event == "run":
                bar.update(task, description=f"{info['run']}: starting", total=None, completed=0)
            elif event == "build":
                bar.update(task, description=f"{info['run']}: building memories of {info['conversation']}")
            elif event == "start":
                bar.update(task, total=info["total"], completed=info["done"], description=f"{info['run']}: ingesting")
            elif event == "question":
                bar.update(task, advance=1, description=f"{info['run']}: answering")

        with known_errors(bar, interrupted=RESUME_HINT):
            return asyncio.run(run_sweep(base, runs, on_progress=on_progress))


def _print_sweep(title: str, rows: list[dict], cols: tuple[str, ...], written: dict) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c in ("run", "kind", "label") else "right")
    for row in rows:
        t.add_row(*("-" if row[c] is None else (f"{row[c]:.4f}" if isinstance(row[c], float) else str(row[c])) for c in cols))
    console.print(t)
    console.print("wrote " + ", ".join(str(p) for p in written.values()))


@sweep_app.command("budgetmem")
@with_strategy_options()
@with_run_options(Path("runs/budgetmem/sweep"), "Sweep directory: one sub-folder per run, sweep.csv, sweep.md, pareto.png, tier_ratios.png, k_sweep.png.")
def sweep_budgetmem(
    lambdas: str = typer.Option("0,0.1,0.3,0.5,0.9", help="Comma-separated lambdas; each uses ROUTER_DIR/lambda_L/router_best.pt (skipped, and reported, when missing)."),
    ks: str = typer.Option("1,3,5,8,10", help="Comma-separated retrieval sizes K for the K sweep (empty: no K sweep)."),
    router_dir: Path = typer.Option(Path("runs/budgetmem/routers"), help="Folder of routers trained by `train router` (one lambda_L/ per lambda)."),
    k_router: Optional[Path] = typer.Option(None, help="K sweep with this router checkpoint instead of all-Mid fixed tiers."),
    k: int = typer.Option(5, min=1, help="K of the lambda runs and the fixed-tier baselines."),
    module_topk: Optional[int] = typer.Option(None, min=1, help="Chunks the filter module keeps (default 5; same as --set module_topk=N)."),
    tiering: Optional[str] = typer.Option(None, help="implementation (default) | reasoning | capacity; must match the routers' training (same as --set tiering=...)."),
    *, run: RunOptions, strategy_args: dict,
):
    """BudgetMem sweep: routers over lambda, fixed-tier baselines (all low/mid/high) and K; resumable.
    --set / --strategy-config options apply to every run."""
    from .eval.sweeps.budgetmem import (
        plan_budgetmem_sweep,
        table_row,
        write_sweep_report,
    )

    lams = _float_list("--lambdas", lambdas)
    kvals = [int(v) for v in _float_list("--ks", ks)] if ks.strip() else []
    if any(v < 1 for v in kvals):
        _fail(f"--ks must be positive integers, got {ks!r}")
    options = strategy_options("budgetmem", strategy_args, module_topk=module_topk, tiering=tiering)
    if k_router is not None:
        _check_router(k_router)
    runs, missing = plan_budgetmem_sweep(lams, kvals, router_dir=router_dir, k=k, k_router=k_router, options=options)
    for p in missing:
        err.print(f"[yellow]skipped:[/yellow] no router checkpoint {p} (train one with `memfrontier train router --lambda ...`)")
    for r in runs:
        if "router" in r.options:
            _check_router(Path(r.options["router"]))
    results = _run_sweep_with_progress(run.eval_config("budgetmem"), runs)
    written = write_sweep_report(results, run.out, missing)
    _print_sweep(f"BudgetMem sweep ({len(results)} runs)", [table_row(r) for r in results],
                 ("run", "n", "f1", "judge", "usd_x1e4", "qpc"), written)


export_app = typer.Typer(rich_markup_mode=HELP_MARKUP, help="Export training data (teacher traces as SFT data).", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("sft")
def export_sft_cmd(
    store: Path = typer.Option(..., help="A store directory whose MemoryCPT memories were built (e.g. runs/demo/store)."),
    out: Path = typer.Option(Path("runs/sft"), help="Output directory: one ShareGPT JSONL per construction role."),
    bank: Optional[str] = typer.Option(None, help="Only this bank (file name under STORE/banks without .db); default every memorycpt-* bank."),
    include_rejected: bool = typer.Option(False, "--include-rejected", help="Also export outputs the validator rejected (not recommended as SFT targets)."),
):
    """Teacher traces of MemoryCPT construction -> per-role ShareGPT JSONL for `train qad` (LoRA-A)."""
    from .embed.minilm import MiniLMEmbedder
    from .train.sft_export import export_sft

    root = _existing_store(store) / "banks"
    files = [root / f"{bank}.db"] if bank else sorted(root.glob("memorycpt-*.db"))
    if not files or not all(f.is_file() for f in files):
        _fail(f"no MemoryCPT memory bank under {root}; build one with `memfrontier eval --strategy memorycpt --store {store}`")
    counts = export_sft(files, out, MiniLMEmbedder(), include_rejected=include_rejected)
    if not counts:
        _fail(f"the banks in {root} hold no traces{'' if include_rejected else ' of accepted operations'}")
    for role, n in sorted(counts.items()):
        console.print(f"{role}: {n} samples -> {out / (role + '.jsonl')}")


@sweep_app.command("mempilot")
@with_strategy_options()
@with_run_options(Path("runs/mempilot/sweep"), "Sweep folder: one sub-folder per preference, sweep.md/csv, model_share.csv, pareto_cost.png, pareto_latency.png.")
def sweep_mempilot(
    preferences: str = typer.Option("perf,balanced,cost", help="Presets and/or weights 'Q:C:L' (e.g. 'perf,balanced,cost,1:2:1'), comma-separated."),
    adapters: Optional[Path] = typer.Option(None, help="Folder with PREFERENCE/adapter from `train orchestrator` (missing: the untrained policy)."),
    pool: Optional[str] = typer.Option(None, help="Model pool: local (default; every route served by the embedded model, a stand-in) | table3 | bench (embedded 270M/0.5B/1.5B routes, each priced as itself; make bench-model) | a YAML (same as --set pool=...)."),
    *, run: RunOptions, strategy_args: dict,
):
    """MemPilot preference sweep: cost-quality and latency-quality frontiers and model-selection shares; resumable.
    --set / --strategy-config options apply to every run."""
    from .eval.sweeps.mempilot import (
        plan_mempilot_sweep,
        table_row,
        write_mempilot_report,
    )
    from .strategies import strategy_config

    prefs = []
    for item in (x.strip() for x in preferences.split(",") if x.strip()):
        parsed = _parse_preference(item.replace(":", ",")) if ":" in item else item
        with known_errors():
            strategy_config("mempilot", preference=parsed)
        prefs.append(parsed)
    if not prefs:
        _fail("--preferences is empty")
    runs = plan_mempilot_sweep(prefs, adapters=adapters, options=strategy_options("mempilot", strategy_args, pool=pool))
    results = _run_sweep_with_progress(run.eval_config("mempilot"), runs)
    written = write_mempilot_report(results, run.out, run.dataset)
    _print_sweep(f"MemPilot preference sweep ({len(results)} runs, {run.dataset})", [table_row(r) for r in results],
                 ("label", "policy", "n", "f1", "usd_x1e4", "proxy_s", "delegate_calls", "image_accesses",
                  "retrieve_calls", "curate_calls"), written)


@sweep_app.command("memorycpt")
@with_strategy_options()
@with_run_options(Path("runs/sweep-memorycpt"), "Sweep folder: one sub-folder per run, sweep.md/csv, pareto.png.")
def sweep_memorycpt(
    what: str = typer.Option("depth,ablation,alpha", help="Which sweeps: any of depth, ablation, alpha (comma-separated)."),
    alphas: str = typer.Option("0.2,0.4,0.6,0.8,1.0", help="alpha values whose LoRA-B adapters to compare."),
    adapters: Path = typer.Option(Path("runs/qar"), help="Folder with alpha_A/adapter from `train qar --alpha A --out runs/qar/alpha_A`."),
    construction_llm: Optional[str] = typer.Option(None, help="The QAD model for every run (e.g. 'hf:runs/qad/merged'); default --llm (same as --set construction_llm=...)."),
    *, run: RunOptions, strategy_args: dict,
):
    """MemoryCPT sweeps: LoRA-B reward weight alpha, RRF depth, and the QAD/QAR/FS ablations; resumable.
    --set / --strategy-config options apply to every run."""
    from .eval.sweeps.memorycpt import (
        ABLATIONS,
        DEPTHS,
        table_row,
        write_memorycpt_report,
    )
    from .eval.sweeps.memorycpt import plan_memorycpt_sweep as plan

    chosen = {w.strip() for w in what.split(",") if w.strip()}
    if not chosen or chosen - {"depth", "ablation", "alpha"}:
        _fail(f"--what takes depth, ablation and/or alpha; got {what!r}")
    options = strategy_options("memorycpt", strategy_args, construction_llm=construction_llm)
    runs, missing = plan(_float_list("--alphas", alphas) if "alpha" in chosen else [],
                         DEPTHS if "depth" in chosen else [], ABLATIONS if "ablation" in chosen else [],
                         adapters=adapters, options=options)
    for p in missing:
        err.print(f"[yellow]skipped:[/yellow] no LoRA-B adapter {p}")
    if not runs:
        _fail("nothing to run")
    results = _run_sweep_with_progress(run.eval_config("memorycpt"), runs)
    written = write_memorycpt_report(results, run.out, missing)
    _print_sweep(f"MemoryCPT sweep ({len(results)} runs)", [table_row(r) for r in results],
                 ("kind", "label", "n", "f1", "usd_x1e4", "amortized_314_x1e4", "qpc"), written)


@app.command()
def score(
    file: Path = typer.Argument(..., help="JSONL with 'prediction', 'answer' (absent for category 5) and 'category' per line."),
    dataset: str = typer.Option("locomo", help="Scoring protocol: locomo (official per-category F1, category 5 as abstention); longmemeval or hotpotqa (plain token F1)."),
    out: Path = typer.Option(Path("runs/scored"), help="Output directory: scored.jsonl and summary.json."),
):
    """Score predictions made by any memory system with our metrics (same protocol, comparable numbers)."""
    if dataset not in ("locomo", "longmemeval", "hotpotqa"):
        _fail(f"unknown --dataset {dataset!r}; choose locomo, longmemeval or hotpotqa")
    from .eval.reports.summary import summary_table
    from .eval.scoring import score_file

    with known_errors():
        summary = score_file(file, dataset=dataset, out=out)
    console.print(summary_table(summary, title=f"scored {file.name} ({dataset})"))
    console.print(f"wrote {out / 'scored.jsonl'} and {out / 'summary.json'}")


@app.command()
def ingest(
    store: str = typer.Option(..., help="Store directory (created if missing) or postgresql:// URL."),
    dataset: Optional[str] = typer.Option(None, help="Ingest a benchmark: locomo | longmemeval | hotpotqa | mem_gallery."),
    conversation: Optional[list[str]] = typer.Option(None, help="Only these conversation ids (repeatable)."),
    file: Optional[Path] = typer.Option(None, help="A JSONL of messages ({role, content, speaker?, timestamp?, session_id?})."),
    user_id: Optional[str] = typer.Option(None, help="Scope for --file: the user the messages belong to."),
    agent_id: Optional[str] = typer.Option(None, help="Scope for --file: the agent (with or without --user-id)."),
    run_id: Optional[str] = typer.Option(None, help="Scope for --file: the run (with or without the others)."),
    session_id: str = typer.Option("default", help="Session for --file lines without one."),
    data_root: Optional[Path] = typer.Option(None, envvar="MEMFRONTIER_DATA", help="The benchmark data folder (default ../shared/data)."),
    data_file: Optional[Path] = typer.Option(None, help="With --dataset: read this file (in the dataset's format, e.g. the official LongMemEval S or M file) instead of the data root's default file."),
):
    """Add records to a store. Idempotent: ingesting the same data again adds nothing.

    A progress bar on stderr follows each conversation's turns as they are embedded (--dataset)
    or the sessions of --file."""
    from .api import Memory

    if (dataset is None) == (file is None):
        _fail("give exactly one of --dataset or --file")
    if data_file is not None and dataset is None:
        _fail("--data-file goes with --dataset")
    if file is not None and (user_id, agent_id, run_id) == (None, None, None):
        _fail("--file needs a scope: give --user-id, --agent-id or --run-id (whose memory the messages are)")
    if dataset is not None and (user_id, agent_id, run_id) != (None, None, None):
        _fail("--user-id/--agent-id/--run-id go with --file (a --dataset's conversations are scoped by their ids)")
    by_session = _read_messages(file, session_id) if file is not None else {}  # checked whole before a store is opened
    if file is not None and not by_session:
        _fail(f"{file} holds no messages; nothing was written")
    with known_errors(), Memory.open(store) as mem:
        if dataset:
            from .eval.datasets import load_dataset

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
                    console.print(f"{c.id}: +{len(res.added)} records, {len(res.skipped)} already present")
        else:
            with _question_bar() as bar:
                task = bar.add_task("sessions", total=len(by_session))
                for sid, msgs in by_session.items():
                    res = mem.add(msgs, user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=sid)
                    bar.advance(task)
                    console.print(f"session {sid}: +{len(res.added)} records, {len(res.skipped)} already present")


def _read_messages(file: Path, default_session: str) -> dict[str, list[dict]]:
    """Messages of a JSONL file grouped by session; any bad line fails with file:line, nothing written."""
    from .core.messages import messages_to_records
    from .core.types import Scope

    if not file.is_file():
        _fail(f"no such file: {file}")
    try:
        text = file.read_text("utf-8-sig")  # a byte-order mark (some editors write one) is not content
    except UnicodeDecodeError as e:
        _fail(f"{file}: not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8; nothing was written")
    by_session: dict[str, list[dict]] = {}
    for n, line in enumerate(text.splitlines(), 1):
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
        try:  # the same checks as Memory.add (field types, timestamp...), here so no session is written first
            messages_to_records([m], scope=Scope(), session_id="-", timestamp=None)
        except ValueError as e:  # "message 0.timestamp ..." names the one message checked: the line says which
            _fail(f"{file}:{n}: {str(e).removeprefix('message 0.')}; nothing was written")
        by_session.setdefault(str(m.pop("session_id", default_session)), []).append(m)
    return by_session


def _check_scope(what: str, user_id, agent_id, run_id, all_scopes: bool, store: str | Path) -> None:
    """Fail (before any model is loaded) when ``store`` is not a store, or unless one scope id or
    --all-scopes is given."""
    from .api import scope_for_read

    _existing_store(store)

    try:
        scope_for_read(what, user_id, agent_id, run_id, all_scopes)
    except ValueError as e:
        _fail(str(e).replace("all_scopes=True", "--all-scopes")
              .replace("user_id/agent_id/run_id", "--user-id/--agent-id/--run-id")
              .replace("user_id, agent_id or run_id", "--user-id, --agent-id or --run-id"))


def store_location(value: str | None) -> str | Path | None:
    """A ``--store`` value: a PostgreSQL URL (``postgres://`` / ``postgresql://``) stays a string,
    anything else is a store directory."""
    from .store.postgres import is_postgres_url

    if value is None or is_postgres_url(value):
        return value
    return Path(value)


def _existing_store(store: str | Path) -> str | Path:
    """``store`` when it is a PostgreSQL URL or a directory holding a SQLite store; else exit 2."""
    store = store_location(str(store))
    if isinstance(store, str):
        return store
    if not (store / "store.db").is_file():
        _fail(f"no memory store at {store}; create one with `memfrontier ingest --store {store} ...`")
    return store


@app.command()
@with_strategy_options()
def ask(
    question: str = typer.Argument(...),
    store: str = typer.Option(..., help="Store directory or postgresql:// URL."),
    user_id: Optional[str] = typer.Option(None, help="Scope: the user whose memory answers (one scope id is required)."),
    agent_id: Optional[str] = typer.Option(None, help="Scope: agent id."),
    run_id: Optional[str] = typer.Option(None, help="Scope: run id."),
    all_scopes: bool = typer.Option(False, "--all-scopes", help="Answer from every tenant's records (no scope id)."),
    strategy: str = OPT_STRATEGY,
    router: Optional[Path] = typer.Option(None, help="auto: a router file from `train strategy-router`; budgetmem: a "
                                          "tier-router checkpoint (same as --set router=FILE)."),
    build: bool = typer.Option(False, "--build", help="Build the strategy's memory view (memorycpt, mempilot, automem; auto: those of its configurations) "
                               "for this scope first when it is missing, and report what building cost. Without it, "
                               "asking a strategy whose view was never built is refused."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = typer.Option(None),
    preference: str = typer.Option("perf", help="perf | balanced | cost"),
    max_usd: Optional[float] = typer.Option(None, help="Hard cap on this question's USD."),
    max_tokens: Optional[int] = typer.Option(None, help="Hard cap on the answer call's prompt+output tokens."),
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = typer.Option(None, help="Price the calls as this price-book model."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole Answer as JSON."),
    *, strategy_args: dict,
):
    """Answer one question from a store and print the answer with its cost."""
    from .api import AsyncMemory
    from .core.types import Budget
    from .strategies import get_strategy

    if router is not None and strategy not in ("auto", "budgetmem"):
        _fail("--router applies to --strategy auto or budgetmem only")
    _check_scope("ask", user_id, agent_id, run_id, all_scopes, store)
    options = strategy_options(strategy, strategy_args, router=None if router is None else str(router))

    async def answer(mem):
        ans = await mem.ask(question, user_id=user_id, agent_id=agent_id, run_id=run_id, all_scopes=all_scopes,
                            strategy=get_strategy(strategy, options), preference=preference,
                            budget=Budget(max_usd=max_usd, max_tokens=max_tokens), build=build)
        built = ans.build.usage if ans.build is not None else None
        return ans, built

    with known_errors():
        mem = AsyncMemory.open(_existing_store(store), llm=llm, base_url=base_url, price_book=price_book,
                               allow_unpriced=allow_unpriced, price_as=price_as)
        try:
            with _question_bar() as bar:
                ans, built = asyncio.run(answer(mem))
        finally:
            mem.close()
    if built is not None:
        err.print(f"built the {strategy} view: {built.calls} calls · {built.input_tokens} in / {built.output_tokens} out "
                  f"tokens · ${built.usd:.8f} (USD, construction) · latency proxy {built.proxy_s:.2f}s")
    if as_json:
        console.print_json(ans.model_dump_json())
        return
    q = ans.usage.query
    console.print(f"[bold]{ans.text or '(empty answer)'}[/bold]")
    if routed := ans.meta.get("auto"):
        p = routed["predictions"][routed["configuration"]]
        console.print(f"routed to {routed['configuration']} ({routed['rule']}; predicted F1 {p['f1']:.3f}, "
                      f"${p['usd']:.8f}, {p['proxy_s']:.2f}s; routing {routed['route_ms']:.1f} ms)")
    console.print(f"{q.calls} calls · {q.input_tokens} in / {q.output_tokens} out tokens · "
                  f"${q.usd:.8f} (USD) · latency proxy {q.proxy_s:.2f}s · wall {ans.wall_s:.2f}s · "
                  f"evidence {len(ans.evidence_ids)} records")
    if ans.usage.events:
        console.print(f"events: {ans.usage.events}")


@app.command()
def search(
    query: str = typer.Argument(...),
    store: str = typer.Option(..., help="Store directory or postgresql:// URL."),
    user_id: Optional[str] = typer.Option(None, help="Scope: the user whose memory is searched (one scope id is required)."),
    agent_id: Optional[str] = typer.Option(None, help="Scope: agent id."),
    run_id: Optional[str] = typer.Option(None, help="Scope: run id."),
    all_scopes: bool = typer.Option(False, "--all-scopes", help="Search every tenant's records (no scope id)."),
    k: int = typer.Option(5, min=1),
):
    """Hybrid (dense + BM25, RRF) search of one scope; prints the top chunks."""
    from .api import Memory

    _check_scope("search", user_id, agent_id, run_id, all_scopes, store)
    with known_errors():
        with Memory.open(_existing_store(store)) as mem:
            hits = mem.search(query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, all_scopes=all_scopes)
    if not hits:
        console.print(f"no results{f' for user {user_id!r}' if user_id else ''}")
    for i, h in enumerate(hits, 1):
        ranks = ", ".join(f"{name} #{r}" for name, r in h.ranks.items())
        console.print(f"[bold]{i}. RRF {h.score:.4f}[/bold] ({ranks}) [dim]session {h.chunk.session_id}, {h.chunk.timestamp}[/dim]\n"
                      f"{h.chunk.text[:400]}\n")


@app.command("serve-model")
def serve_model_cmd(
    name: str = typer.Argument(..., help="A local model: gemma-3-270m | qwen2.5-1.5b | qwen2.5-0.5b (see `python -m memfrontier.llm.local_models list`)."),
    port: int = typer.Option(8011, min=1, max=65535, help="Port on 127.0.0.1."),
    n_ctx: Optional[int] = typer.Option(None, min=256, help="Context window in tokens (default: the model's, 8192)."),
):
    """Serve a local model OpenAI-compatibly on 127.0.0.1 (llama_cpp.server), for
    `--llm openai:MODEL_ID --base-url http://127.0.0.1:PORT/v1`."""
    from .llm.embedded import serve
    from .llm.local_models import resolve_local, serve_argv

    try:
        model = resolve_local(name)
        argv = serve_argv(model, port, n_ctx=n_ctx)
    except _known_errors() as e:
        _fail(str(e))
    err.print(f"serving {model.name} as {model.model_id!r} on http://127.0.0.1:{port}/v1 -- use "
              f"--llm openai:{model.model_id} --base-url http://127.0.0.1:{port}/v1")
    serve(argv)


@app.command("mcp")
def mcp_cmd(
    store: str = typer.Option(..., help="Store directory or postgresql:// URL to serve."),
    transport: str = typer.Option("stdio", help="stdio | http (streamable HTTP, loopback only)."),
    host: str = typer.Option("127.0.0.1", help="HTTP: a loopback address to bind."),
    port: int = typer.Option(8765, min=1, max=65535, help="HTTP: port."),
    user_id: Optional[str] = typer.Option(None, help="Pin every call to this user (calls naming another are refused)."),
    agent_id: Optional[str] = typer.Option(None, help="Pin every call to this agent."),
    run_id: Optional[str] = typer.Option(None, help="Pin every call to this run."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """Serve the memory over MCP: tools search, rg, read, index_query, ask (each scoped)."""
    from .core.types import Scope
    from .server.mcp import is_loopback, serve

    if transport not in ("stdio", "http"):
        _fail(f"unknown --transport {transport!r}; choose stdio or http")
    if transport == "http" and not is_loopback(host):
        _fail(f"--host {host!r} is not a loopback address")
    serve(_existing_store(store), transport=transport, host=host, port=port,
          pinned=Scope(user_id=user_id, agent_id=agent_id, run_id=run_id), llm=llm, base_url=base_url,
          price_book=price_book, allow_unpriced=allow_unpriced, price_as=price_as)


@app.command("serve")
def serve_cmd(
    data_dir: Path = typer.Option(Path("memfrontier-data"), help="Service data directory: by default the embedded PostgreSQL server's data (DATA_DIR/pg: store, keys, usage) and the view files (DATA_DIR/views); with --store DIR, the key file DATA_DIR/keys.db."),
    store: Optional[str] = typer.Option(None, help="Serve another store than the embedded PostgreSQL one: a postgresql:// URL (keys and usage in the same database) or a SQLite store directory (keys and usage in DATA_DIR/keys.db)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port."),
    workers: int = typer.Option(1, min=1, help="uvicorn worker processes sharing the store and the keys."),
    max_body_bytes: int = typer.Option(1 << 20, min=1024, help="Largest request body (413 above it)."),
    max_in_flight: int = typer.Option(8, min=1, max=1024, help="Requests of one tenant running at once, across all workers (429 above it)."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
    router: Optional[Path] = typer.Option(None, help="The router file of strategy `auto` (from `train strategy-router`); without it the service refuses strategy auto."),
):
    """Serve the memory over HTTP (REST, OpenAPI at /docs): add, search, ask, get/delete, usage; one tenant per API key
    (create keys with `memfrontier keys create TENANT`, same --data-dir/--store). By default it starts an embedded
    PostgreSQL server on DATA_DIR/pg (joined if already running) and stops it on exit (ctrl-c, SIGTERM)."""
    from contextlib import ExitStack

    from .server.data import service_data
    from .server.rest import ServeSettings, exit_on_signals, serve

    if router is not None:
        _check_router(router, "auto")

    with ExitStack() as stack:
        stack.enter_context(exit_on_signals())
        with known_errors():
            data = stack.enter_context(service_data(data_dir, store))
        settings = ServeSettings(store=data.store, keys=data.keys, view_dir=data.view_dir, llm=llm,
                                 base_url=base_url, price_book=None if price_book is None else str(price_book),
                                 allow_unpriced=allow_unpriced, price_as=price_as, max_body_bytes=max_body_bytes,
                                 max_in_flight=max_in_flight, router=None if router is None else str(router))
        err.print(f"serving on http://{host}:{port} (OpenAPI: /docs); {data.description}")
        serve(settings, host=host, port=port, workers=workers)


keys_app = typer.Typer(rich_markup_mode=HELP_MARKUP, help="API keys of `memfrontier serve`: each key maps to one tenant. Give the same --data-dir "
                            "and --store as to serve; with the embedded default, a running server is joined, else "
                            "started for the command and stopped after it.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
OPT_DATA_DIR = typer.Option(Path("memfrontier-data"), help="The service data directory (as given to `memfrontier serve`).")
OPT_KEYS_STORE = typer.Option(None, "--store", help="As given to `memfrontier serve --store`: a postgresql:// URL (keys in that database) or a SQLite store directory (keys in DATA_DIR/keys.db).")


@contextmanager
def _key_store(data_dir: Path, store: Optional[str]):
    """The key store the service of ``--data-dir`` / ``--store`` uses (see memfrontier.server.data)."""
    from .server.data import service_data
    from .server.keys import open_key_store

    with known_errors(), service_data(data_dir, store) as data:
        ks = open_key_store(data.keys)
        try:
            yield ks
        finally:
            ks.close()


@keys_app.command("create")
def keys_create_cmd(tenant: str = typer.Argument(..., help="Tenant name: lower-case letters, digits, '_' and '-'."),
                    data_dir: Path = OPT_DATA_DIR, store: Optional[str] = OPT_KEYS_STORE):
    """Create a key for TENANT and print it once (only its hash is stored)."""
    with _key_store(data_dir, store) as ks:
        key_id, key = ks.create(tenant)
    err.print(f"key {key_id} for tenant {tenant!r} (shown once):")
    print(key)


@keys_app.command("revoke")
def keys_revoke_cmd(key_id: str = typer.Argument(..., help="The key's id (see `memfrontier keys list`)."),
                    data_dir: Path = OPT_DATA_DIR, store: Optional[str] = OPT_KEYS_STORE):
    """Revoke a key: every worker refuses it from its next request."""
    with _key_store(data_dir, store) as ks:
        revoked = ks.revoke(key_id)
    if not revoked:
        _fail(f"no active key {key_id!r}")
    err.print(f"revoked {key_id}")


@keys_app.command("list")
def keys_list_cmd(tenant: Optional[str] = typer.Option(None, help="Only this tenant's keys."), data_dir: Path = OPT_DATA_DIR,
                  store: Optional[str] = OPT_KEYS_STORE):
    """List keys (id, tenant, created, revoked); secrets are never shown."""
    with _key_store(data_dir, store) as ks:
        keys = ks.list(tenant)
    for k in keys:
        print(json.dumps(k.model_dump()))


def main():  # pragma: no cover
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

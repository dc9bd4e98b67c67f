"""The option blocks several commands share: the run block of ``eval``, ``frontier`` and the sweeps, and a
strategy's config options (``--set KEY=VALUE``, ``--strategy-config FILE``), validated by the strategy's
config; and the ``--store`` location."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .app import (
    OPT_ALLOW_UNPRICED,
    OPT_BASE_URL,
    OPT_CONCURRENCY,
    OPT_DATA_ROOT,
    OPT_DATASET,
    OPT_JUDGE_LLM,
    OPT_LLM,
    OPT_PRICE_AS,
    OPT_PRICE_BOOK,
    OPT_SCORER,
    OPT_SEED,
    OPT_SET,
    OPT_SPLIT,
    OPT_STRATEGY_CONFIG,
    _fail,
    known_errors,
)
from .fields import block, params_of, put, read_mapping


# --- the run block shared by eval and the sweeps ------------------------------------------------
def run_block(out: Path, out_help: str) -> list:
    """The run options of ``eval``, ``frontier`` and every ``sweep`` (one definition), with this
    ``--out`` default and help. Adding a run option is one parameter here and the field of the same
    name on :class:`~memfrontier.eval.runner.EvalConfig`."""

    def run(
        dataset: str = OPT_DATASET,
        split: Optional[str] = OPT_SPLIT,
        limit: Optional[int] = typer.Option(
            None,
            min=1,
            metavar="N",
            help="Answer a category-balanced slice of this many questions (seeded) per run. Default: all.",
        ),
        llm: str = OPT_LLM,
        base_url: Optional[str] = OPT_BASE_URL,
        judge: bool = typer.Option(False, "--judge", help="Also grade answers with the LLM judge."),
        judge_llm: Optional[str] = OPT_JUDGE_LLM,
        out: Path = typer.Option(out, help=out_help),
        store: Optional[str] = typer.Option(
            None, help="Store directory or postgresql:// URL, reused across runs (default OUT/store)."
        ),
        data_root: Optional[Path] = OPT_DATA_ROOT,
        data_file: Optional[Path] = typer.Option(
            None,
            help="Read this file (in the --dataset's format, e.g. the official LongMemEval S or M file) instead of the data root's default file.",
        ),
        seed: int = OPT_SEED,
        scorer: str = OPT_SCORER,
        concurrency: int = OPT_CONCURRENCY,
        ray: Optional[str] = typer.Option(
            None,
            "--ray",
            metavar="ADDRESS",
            help="Run on Ray (extra memfrontier\\[ray]): 'local', 'auto' (join the cluster) or ray://HEAD:PORT; --concurrency workers.",
        ),
        price_book: Optional[Path] = OPT_PRICE_BOOK,
        allow_unpriced: bool = OPT_ALLOW_UNPRICED,
        price_as: Optional[str] = OPT_PRICE_AS,
        allow_fallbacks: bool = typer.Option(
            False,
            "--allow-fallbacks",
            help="Keep a run (and a build) whose model calls failed or fell back above --fallback-threshold (default: exit 3).",
        ),
        fallback_threshold: float = typer.Option(
            0.05,
            min=0.0,
            max=1.0,
            metavar="SHARE",
            help="Largest share of a role's calls that may fail or fall back (0-1).",
        ),
    ):
        pass

    params = params_of(run)
    for param in params:
        param.rich_help_panel = next(panel for panel, names in RUN_PANELS.items() if param.name in names)
    return params


#: The help panels of the run block: what is asked, of which models, at what price, how strict.
RUN_PANELS = {
    "Run: questions and output": (
        "dataset",
        "split",
        "limit",
        "seed",
        "scorer",
        "out",
        "store",
        "data_root",
        "data_file",
    ),
    "Run: models": ("llm", "base_url", "judge", "judge_llm", "concurrency", "ray"),
    "Run: pricing": ("price_book", "allow_unpriced", "price_as"),
    "Run: fallbacks": ("allow_fallbacks", "fallback_threshold"),
}


#: Run-block values that are paths (typer hands them over as given).
_PATHS = ("out", "data_root", "data_file", "price_book")


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
        from ..eval.runner import EvalConfig

        return EvalConfig(strategy=strategy, strategy_options=strategy_options or {}, **self)


def run_options(ctx: typer.Context) -> RunOptions:
    """The run block's values of the running command (declared with ``with_blocks(run=run_block(...))``)."""
    values = block(ctx, "run")
    return RunOptions({k: Path(v) if k in _PATHS and v is not None else v for k, v in values.items()})


# --- strategy options: the strategy's config from --strategy-config and --set -------------------
#: ``--set`` / ``--strategy-config``: the strategy-options block of eval, ask and the sweeps.
def _strategy_args(
    set_options: Optional[list[str]] = OPT_SET, strategy_config_file: Optional[Path] = OPT_STRATEGY_CONFIG
):
    pass


STRATEGY_BLOCK = params_of(_strategy_args)
for _param in STRATEGY_BLOCK:
    _param.rich_help_panel = "Strategy options"


def strategy_options(strategy: str, strategy_args: dict, **fixed) -> dict:
    """The validated options of ``strategy``'s config, from (in increasing precedence) the
    ``--strategy-config`` file, ``fixed`` options of the command and ``--set``. Exits 2 with a
    message naming the key and the allowed values. Returns the given options only (defaults stay
    implicit), as JSON values, ready for :class:`~memfrontier.eval.runner.EvalConfig`. For a named
    configuration they are validated over its own options (``--set max_tokens=300`` on
    ``rag-turns-rr`` is a turn budget) and returned with them."""
    from ..strategies import StrategyConfigError, resolve_named, strategy_class

    cls = strategy_class(strategy).config_class
    opts: dict = {}
    with known_errors():
        file = strategy_args.get("strategy_config_file")
        if file is not None:
            opts = _read_strategy_config_file(file, strategy)
        for key, value in fixed.items():
            if value is not None:
                put(opts, tuple(key.split(".")), str(value) if isinstance(value, Path) else value)
        for text in strategy_args.get("set_options") or ():
            path, value = cls.parse_assignment(text)
            put(opts, path, value)
        opts = resolve_named(strategy, opts)[1]
        try:
            cfg = cls.from_options(opts)
        except StrategyConfigError as e:
            _fail(str(e))
    if getattr(cfg, "router", None) is not None:
        _check_router(cfg.router, strategy)
    return cfg.model_dump(mode="json", include=set(opts))


def _read_strategy_config_file(path: Path, strategy: str) -> dict:
    """A YAML/JSON mapping of config options; an optional ``strategy`` key must name ``strategy``."""
    data = read_mapping(path, "--strategy-config")
    named = data.pop("strategy", strategy)
    if named != strategy:
        raise ValueError(f"--strategy-config {path} is for strategy {named!r}, not {strategy!r}")
    return data


def _check_router(path: Path, strategy: str = "budgetmem") -> None:
    """Fail (exit 2) before any work when ``path`` is not a readable router of ``strategy``: a
    strategy-router file for ``auto``, a tier-router checkpoint for ``budgetmem``."""
    from ..strategies.auto.router import Router, RouterFileError
    from ..strategies.budgetmem.router import RouterCheckpointError, TierRouter

    try:
        if strategy == "auto":
            Router.load(path)
        else:
            TierRouter.load(path)  # the CLI always embeds with MiniLM (384-d)
    except (FileNotFoundError, RouterCheckpointError, RouterFileError) as e:
        _fail(str(e))


def _float_list(flag: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        _fail(f"{flag} must be comma-separated numbers, got {text!r}")
    if not values or any(v < 0 for v in values):
        _fail(f"{flag} needs at least one value, all >= 0; got {text!r}")
    return values


def store_location(value: str | None) -> str | Path | None:
    """A ``--store`` value: a PostgreSQL URL (``postgres://`` / ``postgresql://``) stays a string,
    anything else is a store directory."""
    from ..store.postgres import is_postgres_url

    if value is None or is_postgres_url(value):
        return value
    return Path(value)


def _existing_store(store: str | Path) -> str | Path:
    """``store`` when it is a PostgreSQL URL or a directory holding a SQLite store; else exit 2."""
    store = store_location(str(store))
    if isinstance(store, str):
        return store
    if store.exists() and not store.is_dir():
        _fail(f"{store} is a file, not a memory store (a store is a folder: `memfrontier ingest --store DIR ...`)")
    if not (store / "store.db").is_file():
        _fail(f"no memory store at {store}; create one with `memfrontier ingest --store {store} ...`")
    return store

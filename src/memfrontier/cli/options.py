"""The option blocks several commands share: the run block of ``eval``, ``frontier`` and the sweeps, and a
strategy's config options (``--set KEY=VALUE``, ``--strategy-config FILE``), validated by the strategy's
config; and the ``--store`` location."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

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
    OPT_SEED,
    OPT_SET,
    OPT_SPLIT,
    OPT_STRATEGY_CONFIG,
    _fail,
    known_errors,
)


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
        from ..eval.runner import EvalConfig

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
    from ..strategies import StrategyConfigError, strategy_class

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
    from ..strategies.auto.router import Router, RouterFileError
    from ..strategies.budgetmem.router import RouterCheckpointError, TierRouter

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
    if not (store / "store.db").is_file():
        _fail(f"no memory store at {store}; create one with `memfrontier ingest --store {store} ...`")
    return store

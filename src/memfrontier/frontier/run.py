"""Run a frontier: every configuration of a spec through the evaluation protocol on the same
questions, one output folder (and ledger) per configuration, one shared store so that ingest and
each view's offline construction happen once; then the report.

Resumable at two levels: a finished configuration (``summary.json`` present and its ``run.json``
identity unchanged) is not rerun, and an interrupted one resumes from its ``predictions.jsonl``
(:func:`memfrontier.eval.runner.run_eval`). Layout of ``out``::

    store/                 the shared store (raw chunks, banks, graph index), unless --store names one
    configs/<label>/       one eval run per configuration (predictions.jsonl, summary.json, run.json)
    frontier.{json,csv,md,html} frontier_cost.png frontier_latency.png
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from pathlib import Path

from ..eval.config import IDENTITY_DEFAULTS
from ..eval.datasets import DatasetError
from ..eval.fallbacks import FallbackError
from ..eval.metrics import DEFAULT_SCORER
from ..eval.runner import EvalConfig, RunMismatchError, check_run, run_eval
from ..llm import LLMError
from ..strategies import strategy_config
from .report import build_report, write_report
from .spec import FrontierConfig, FrontierSpec


def config_dir(out: Path, label: str) -> Path:
    return Path(out) / "configs" / label


def _is_finished(cfg: EvalConfig) -> bool:
    run_file = cfg.out / "run.json"
    if not (cfg.out / "summary.json").is_file() or not run_file.is_file():
        return False
    return json.loads(run_file.read_text("utf-8")) == cfg.identity()


def _progress(out: Path) -> str:
    """How far a configuration without a summary got: "not run yet", or "started: K questions
    answered" (an interrupted or running configuration; it resumes from there)."""
    preds = out / "predictions.jsonl"
    if not out.is_dir():
        return "not run yet"
    answered = 0
    if preds.is_file():
        with preds.open("rb") as f:
            answered = sum(1 for line in f if line.strip())
    return f"started: {answered} question{'s' if answered != 1 else ''} answered"


#: The configuration every other one is compared with when no reference is given.
DEFAULT_REFERENCE = "rag"


def _eval_config(base: EvalConfig, out: Path, fc: FrontierConfig) -> EvalConfig:
    return base.model_copy(
        update={
            "strategy": fc.strategy,
            "strategy_options": dict(fc.options),
            "out": config_dir(out, fc.label),
            "store": base.store or out / "store",
        }
    )


def check_configurations(spec: FrontierSpec, labels: list[str] | None, reference: str | None = None) -> None:
    """Fail before anything runs: an unknown or repeated label, a ``reference`` given that is not
    in the spec (the default, ``rag``, may be absent: there are then no paired differences), or a
    selected configuration whose strategy or options are invalid (configurations with an unmet
    requirement are skipped here: they are reported as not run). Raises ValueError naming every
    problem."""
    problems = []
    if reference is not None and reference not in {c.label for c in spec.configurations}:
        problems.append(f"--reference {reference!r} is not a configuration of the spec")
    for fc in spec.select(labels):
        if fc.unmet():
            continue
        try:
            strategy_config(fc.strategy, fc.options)
        except ValueError as e:
            problems.append(f"{fc.label}: {e}")
    if problems:
        raise ValueError("the frontier spec cannot run as given (nothing was run): " + "; ".join(problems))


def _check_outputs(configs: list[FrontierConfig], base: EvalConfig, out: Path) -> None:
    """Raise RunMismatchError naming every configuration of ``configs`` whose folder in ``out`` holds
    a run with other options (another --limit, model, price book...): resuming would mix two runs,
    and the same options differ for all of them, so nothing runs."""
    other = []
    for fc in configs:
        cfg = _eval_config(base, out, fc)
        run_file = cfg.out / "run.json"
        if run_file.is_file():
            prev, now = json.loads(run_file.read_text("utf-8")), cfg.identity()
            if prev != now:
                diff = ", ".join(f"{k}: {prev.get(k)!r} -> {v!r}" for k, v in now.items() if prev.get(k) != v)
                other.append(f"{fc.label} ({diff})")
    if other:
        raise RunMismatchError(
            f"{out} holds runs with other options (nothing was run): {'; '.join(other)}; "
            "choose another --out or delete those configurations' folders"
        )


async def run_frontier(
    spec: FrontierSpec,
    base: EvalConfig,
    out: Path,
    *,
    labels: list[str] | None = None,
    reference: str | None = None,
    on_config: Callable[[str, str], None] | None = None,
    on_progress=None,
    report_only: bool = False,
    given: Collection[str] | None = None,
) -> dict:
    """Run (or resume) the configurations named in ``labels`` (all when None), in that order, with the run
    options of ``base`` (dataset, split, limit, models, price book, seed...) and write the report into
    ``out``: over those configurations and every other configuration of the spec already finished in
    ``out`` with the same run options (so running one more configuration keeps the others in the
    report). ``report_only`` runs nothing and reports the selected configurations as found. A
    configuration finished in ``out`` is reported even when a file or model it requires is missing
    now (e.g. a run folder read on another machine, or from another working directory).

    ``reference``: the configuration of the paired differences (default :data:`DEFAULT_REFERENCE`).
    Before anything runs, :func:`check_configurations` validates the selection (ValueError).
    ``on_config(label, status)`` is called with ``start``/``done``/``kept`` (finished by an earlier
    run)/``failed: ...``/``refused: ...`` or why a configuration did not run. A configuration that fails
    (a required file missing or model not installed - see :meth:`FrontierConfig.unmet` -, model error,
    budget...) is reported as not run with its error and, for a model, the command that installs it; the
    others still run.

    Returns the report (see :func:`build_report`) with ``title``, ``files``: the paths written, none
    when no configuration has finished (an earlier report in ``out`` is then left as it was), and
    ``selected``: the labels asked for.
    """
    out = Path(out)
    notify = on_config or (lambda *_: None)
    check_configurations(spec, labels, reference)
    if not report_only:
        to_run = [fc for fc in spec.select(labels) if not fc.unmet() and not _is_finished(_eval_config(base, out, fc))]
        if to_run:  # the data and models every configuration shares: one error, not one per configuration
            check_run(base)
            _check_outputs(to_run, base, out)
    entries: dict[str, dict] = {}
    for fc in spec.select(labels):  # in the order asked for
        cfg = _eval_config(base, out, fc)
        entry = entries[fc.label] = {"label": fc.label, "strategy": fc.strategy, "dir": cfg.out}
        unmet = fc.unmet()
        if (cfg.out / "summary.json").is_file() and (report_only or _is_finished(cfg)):
            notify(fc.label, "done" if report_only else "kept")  # its result stands, whatever is missing now
        elif unmet:
            entry.update(dir=None, status=f"not run: {unmet}")
            notify(fc.label, entry["status"])
        elif report_only:
            entry.update(dir=None, status=_progress(cfg.out))
            notify(fc.label, entry["status"])
        else:
            notify(fc.label, "start")
            try:
                await run_eval(cfg, on_progress=on_progress)
                notify(fc.label, "done")
            except FallbackError as e:  # written; the report refuses it (see build_report)
                if e.summary is None:  # stopped while building its memory: nothing to report but why
                    entry.update(dir=None, status=f"refused: {e}")
                notify(fc.label, f"refused: {e}")
            except (DatasetError, LLMError, RunMismatchError) as e:  # their messages say what failed
                entry.update(dir=None, status=f"failed: {e}")
                notify(fc.label, entry["status"])
            except Exception as e:  # reported per configuration; the frontier goes on
                entry.update(dir=None, status=f"failed: {type(e).__name__}: {e}")
                notify(fc.label, entry["status"])
    if not report_only:  # the others already finished here with the same options stay in the report
        for fc in spec.configurations:
            cfg = _eval_config(base, out, fc)
            if fc.label not in entries and _is_finished(cfg):
                entries[fc.label] = {"label": fc.label, "strategy": fc.strategy, "dir": cfg.out}
    runs = [entries[fc.label] for fc in spec.configurations if fc.label in entries]  # the spec's order
    report = build_report(
        runs, reference=reference or DEFAULT_REFERENCE, seed=base.seed, allow_fallbacks=base.allow_fallbacks
    )
    report["spec"] = spec.model_dump(mode="json")
    options = base.model_dump(mode="json", exclude={"strategy", "strategy_options", "out", "store"})
    if report_only:  # the report is of the runs found: their recorded options, not this command's flags
        shown = options if given is None else {k: v for k, v in options.items() if k in given}
        options, note = _recorded_options([config_dir(out, r["label"]) for r in runs], options, shown)
        if note:
            report["notes"].append(note)
    report["run_options"] = options
    report["selected"] = [fc.label for fc in spec.select(labels)]
    report["title"] = (
        f"frontier ({spec.name} spec): {options.get('dataset')} {options.get('split')}, "
        f"limit {options.get('limit')}, {options.get('llm')}"
        + (f", scorer {options['scorer']}" if options.get("scorer", DEFAULT_SCORER) != DEFAULT_SCORER else "")
    )
    report["files"] = {}
    if any(x["status"] == "ok" for x in report["rows"]):
        report["files"] = write_report(
            report,
            out,
            title=report["title"],
            run_dirs={r["label"]: r["dir"] for r in runs if r.get("dir") is not None},
        )
    return report


# what a configuration's run.json (EvalConfig.identity) holds of its own, not of the frontier's run
_CONFIG_KEYS = {"strategy", "strategy_options", "strategy_option_sha256"}


def _recorded_options(dirs: list[Path], flags: dict, given: dict) -> tuple[dict, str | None]:
    """The run options the configurations in ``dirs`` recorded (their ``run.json``, i.e.
    :meth:`EvalConfig.identity` less the configuration's own fields; ``flags`` where none is
    recorded), and a note when they differ among themselves or from ``given`` (the options the
    caller set)."""
    recorded = [
        {**IDENTITY_DEFAULTS, **json.loads((d / "run.json").read_text("utf-8"))}
        for d in dirs
        if (d / "run.json").is_file()
    ]
    if not recorded:
        return flags, None
    keys = sorted(set().union(*recorded) - _CONFIG_KEYS)
    seen = {k: sorted({json.dumps(r.get(k)) for r in recorded}) for k in keys}
    mixed = {k: v for k, v in seen.items() if len(v) > 1}
    if mixed:
        return flags, "the configurations were run with different options: " + "; ".join(
            f"{k} {', '.join(v)}" for k, v in mixed.items()
        )
    options = {**flags, **{k: recorded[0].get(k) for k in keys}}
    differ = [f"{k} {given[k]!r} given, {options[k]!r} recorded" for k in keys if k in given and given[k] != options[k]]
    return options, ("report of the runs as recorded (" + "; ".join(differ) + ")") if differ else None


__all__ = ["FrontierConfig", "check_configurations", "config_dir", "run_frontier"]

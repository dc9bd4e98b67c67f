"""What every sweep shares: a sweep point (:class:`SweepRun`), running the points as resumable
:func:`~memfrontier.eval.runner.run_eval` runs in one folder with one store (:func:`run_sweep`) and the
table writers (CSV and Markdown); a run's overall metrics are
:func:`~memfrontier.eval.metrics.overall_metrics`. Each paper's sweep is its own
file next to this one: :mod:`.budgetmem`, :mod:`.memorycpt`, :mod:`.mempilot`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..runner import EvalConfig, run_eval


@dataclass(frozen=True)
class SweepRun:
    """One point of the sweep: ``kind`` is ``lambda``, ``fixed`` or ``k``; ``options`` go to BudgetMem."""

    name: str
    kind: str
    label: str
    options: dict = field(hash=False)
    lam: float | None = None
    k: int | None = None
    order: float | None = None  # position on a trade-off curve (e.g. MemoryCPT's alpha or depth)


async def run_sweep(base: EvalConfig, runs: Sequence[SweepRun], *, on_progress: Callable | None = None) -> list[dict]:
    """Run every point with ``base``'s strategy (its ``out`` is the sweep folder; the store
    defaults to ``out/store``, shared). Returns one result per run: name, kind, label, lam, k,
    options, out, summary. ``on_progress(event, run=name, **info)`` relays :func:`run_eval`'s events."""
    progress = on_progress or (lambda *a, **k: None)
    out = Path(base.out)
    store = base.store or out / "store"
    done: dict[str, tuple[Path, dict]] = {}  # options -> (folder, summary): identical runs are run once
    results = []
    for run in runs:
        key = json.dumps(run.options, sort_keys=True)
        if key not in done:
            cfg = base.model_copy(update={"strategy_options": run.options, "out": out / run.name, "store": store})
            progress("run", run=run.name, label=run.label)
            summary = await run_eval(cfg, on_progress=lambda ev, **info: progress(ev, run=run.name, **info))
            done[key] = (cfg.out, summary)
        folder, summary = done[key]
        results.append(
            {
                "name": run.name,
                "kind": run.kind,
                "label": run.label,
                "lam": run.lam,
                "k": run.k,
                "order": run.order,
                "options": run.options,
                "out": str(folder),
                "summary": summary,
            }
        )
    return results


def write_rows_csv(rows: Sequence[dict], path: Path) -> Path:
    """Write flat dict rows (the first row's keys are the header) as CSV; returns ``path``."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return Path(path)


def start_report(out: Path, rows: Sequence[dict]) -> tuple[Path, dict[str, Path]]:
    """Create the sweep folder ``out`` and write ``sweep.csv`` from ``rows`` (when there are any);
    returns ``(out, written)`` with ``written = {"csv": path}`` or ``{}``, for the report to add to."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return out, ({"csv": write_rows_csv(rows, out / "sweep.csv")} if rows else {})


def fmt_cell(v, digits: int = 4) -> str:
    """A table cell: ``-`` for None, floats to ``digits`` decimals, anything else as ``str``."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown_table(rows: Sequence[dict], cols: Sequence[str]) -> list[str]:
    """The lines of a Markdown table of ``rows`` (dicts) over the columns ``cols``."""
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + [
        "| " + " | ".join(fmt_cell(r[c]) for c in cols) + " |" for r in rows
    ]


__all__ = ["SweepRun", "fmt_cell", "markdown_table", "run_sweep", "start_report", "write_rows_csv"]

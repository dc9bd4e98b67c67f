"""The MemPilot preference sweep (``memfrontier sweep mempilot``, MemPilot Sec. 4.4-4.5, Fig. 5).

One :func:`~memfrontier.eval.runner.run_eval` per preference lambda = (lambda_Q, lambda_C, lambda_L)
(the presets ``perf``, ``balanced``, ``cost`` and any explicit weights), each in its own folder,
all sharing one store (the compressed bank is built once). The paper trains one policy per
preference: a point uses ``<adapters>/<name>/adapter`` when it exists (from ``train orchestrator
--preference <name> --out <adapters>/<name>``), otherwise the untrained policy, which only sees
the preference as one line of its prompt (recorded in the ``policy`` column).

The report: ``sweep.csv`` / ``sweep.md`` (quality, USD and latency proxy per question, delegate
calls, image accesses, Retrieve/Curate counts, format-valid share), ``model_share.csv`` and the
model-selection-share table in ``sweep.md`` (each route's share of the delegate calls per
preference), ``pareto_cost.png`` (quality vs USD) and ``pareto_latency.png`` (quality vs latency
proxy), with the non-dominated points joined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ...core.cost import COST_SCALE
from ...core.types import PRESETS, Preference
from .. import plots
from ..reports.mempilot import read_rows, run_stats
from .base import SweepRun, fmt_cell, markdown_table, write_rows_csv


def _pref_name(p: str | Mapping) -> str:
    if isinstance(p, str):
        return p
    return "w_" + "_".join(f"{float(p[k]):g}" for k in ("quality", "cost", "latency"))


def plan_mempilot_sweep(
    preferences: Sequence[str | Mapping] = PRESETS, *, adapters: Path | None = None, options: dict | None = None
) -> list[SweepRun]:
    """One run per preference (a preset name or a weights dict). ``options`` (e.g. ``pool``) go to
    every run; ``adapters/<name>/adapter`` is used when present. Order on the curve: lambda_C + lambda_L."""
    runs = []
    for p in preferences:
        name = _pref_name(p)
        pref = Preference.preset(p) if isinstance(p, str) else Preference(**p)
        opts = {**(options or {}), "preference": p}
        adapter = Path(adapters) / name / "adapter" if adapters is not None else None
        if adapter is not None and (adapter / "adapter_config.json").is_file():
            opts["adapter"] = str(adapter)
        runs.append(SweepRun(f"pref_{name}", "preference", name, opts, order=pref.cost + pref.latency))
    return runs


def table_row(result: dict) -> dict:
    """One flat row of the sweep table (see the module docstring)."""
    st = run_stats(read_rows(Path(result["out"]) / "predictions.jsonl"))
    opts = result.get("options", {})
    p = opts.get("preference")
    pref = Preference.preset(p) if isinstance(p, str) else Preference(**p)
    usd = st["usd_per_question"]
    return {
        "run": result["name"],
        "label": result["label"],
        "lambda_q": pref.quality,
        "lambda_c": pref.cost,
        "lambda_l": pref.latency,
        "policy": "trained" if "adapter" in opts else "untrained",
        "n": st["n"],
        "f1": st["f1"],
        "judge": st["judge"],
        "policy_answer_f1": st["policy_answer_f1"],
        "usd_per_question": usd,
        "usd_x1e4": None if usd is None else usd * COST_SCALE,
        "proxy_s": st["proxy_s_per_question"],
        "delegate_calls": st["delegate_calls_per_question"],
        "image_accesses": st["image_accesses_per_question"],
        "retrieve_calls": st["retrieve_calls_per_question"],
        "curate_calls": st["curate_calls_per_question"],
        "rounds": st["rounds_per_question"],
        "format_valid": st["format_valid_share"],
        "route_share": st["route_share"],
        "route_models": st["route_models"],
    }


def pareto_front(points: Sequence[Mapping], x: str, y: str) -> list[Mapping]:
    """The points no other point dominates (lower or equal ``x`` and higher or equal ``y``, one strictly),
    sorted by ``x``."""
    pts = [p for p in points if p.get(x) is not None and p.get(y) is not None]
    front = [p for p in pts if not any((q[x] <= p[x] and q[y] >= p[y]) and (q[x] < p[x] or q[y] > p[y]) for q in pts)]
    return sorted(front, key=lambda p: (p[x], p[y]))


def plot_frontier(points: Sequence[Mapping], path: Path, *, x: str, xlabel: str, title: str) -> Path:
    """Quality (F1; judge too when graded) against ``x``; every run annotated, the Pareto front joined."""
    metrics = [m for m in ("f1", "judge") if any(p.get(m) is not None for p in points)] or ["f1"]
    fig, axes = plots._figure(len(metrics))
    for ax, metric in zip(axes, metrics):
        pts = [p for p in points if p.get(metric) is not None and p.get(x) is not None]
        ax.scatter([p[x] for p in pts], [p[metric] for p in pts], zorder=3, label="preference runs")
        front = pareto_front(pts, x, metric)
        if len(front) > 1:
            ax.plot([p[x] for p in front], [p[metric] for p in front], linestyle="--", label="Pareto front")
        seen: dict[tuple, int] = {}
        for p in pts:  # runs at the same point get stacked labels
            k = seen[(p[x], p[metric])] = seen.get((p[x], p[metric]), -1) + 1
            ax.annotate(p["label"], (p[x], p[metric]), textcoords="offset points", xytext=(4, 4 + 10 * k), fontsize=8)
        ax.margins(0.15)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("LLM-judge accuracy" if metric == "judge" else "F1")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return plots._save(fig, path)


def write_mempilot_report(results: Sequence[dict], out: Path, dataset: str = "") -> dict[str, Path]:
    """Write ``sweep.csv``, ``model_share.csv``, ``sweep.md``, ``pareto_cost.png`` and ``pareto_latency.png``
    (the CSVs and plots only when there is at least one run)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [table_row(r) for r in results]
    written: dict[str, Path] = {}
    flat = [{k: v for k, v in r.items() if k not in ("route_share", "route_models")} for r in rows]
    routes = sorted({rt for r in rows for rt in r["route_share"]})
    models = {rt: m for r in rows for rt, m in r["route_models"].items()}
    if rows:
        written["csv"] = write_rows_csv(flat, out / "sweep.csv")
        written["model_share"] = write_rows_csv(
            [{"preference": r["label"], **{rt: f"{r['route_share'].get(rt, 0.0):.4f}" for rt in routes}} for r in rows],
            out / "model_share.csv",
        )

    cols = (
        "label",
        "policy",
        "n",
        "f1",
        "judge",
        "usd_x1e4",
        "proxy_s",
        "delegate_calls",
        "image_accesses",
        "retrieve_calls",
        "curate_calls",
        "format_valid",
    )
    md = [
        f"# MemPilot preference sweep{f' ({dataset})' if dataset else ''}",
        "",
        f"Per question: cost in {plots.COST_LABEL} (policy with KV-prefix reuse, delegates, answerer); latency "
        "proxy in seconds (Eq. 19 plus the answerer); counts are calls per question.",
        "",
        *markdown_table(rows, cols),
    ]
    md += ["", "## Model-selection share (share of delegate calls per route)", ""]
    if routes:
        md += [
            "| preference | " + " | ".join(f"{rt} ({models.get(rt, '?')})" for rt in routes) + " |",
            "|" + "---|" * (1 + len(routes)),
        ]
        md += [
            f"| {r['label']} | " + " | ".join(fmt_cell(r["route_share"].get(rt, 0.0), 2) for rt in routes) + " |"
            for r in rows
        ]
    else:
        md.append("No delegate call was made in any run.")
    (out / "sweep.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    written["md"] = out / "sweep.md"

    if rows:
        written["pareto_cost"] = plot_frontier(
            rows, out / "pareto_cost.png", x="usd_x1e4", xlabel=plots.COST_LABEL, title="MemPilot: quality vs cost"
        )
        written["pareto_latency"] = plot_frontier(
            rows,
            out / "pareto_latency.png",
            x="proxy_s",
            xlabel="latency proxy, seconds per question",
            title="MemPilot: quality vs latency",
        )
    return written


__all__ = ["PRESETS", "pareto_front", "plan_mempilot_sweep", "plot_frontier", "table_row", "write_mempilot_report"]

"""The BudgetMem sweep (``memfrontier sweep budgetmem``, BudgetMem Sec. 5): the router trained at
each lambda, the fixed-tier baselines (all Low / Mid / High) and the retrieval-size sweep over K.

Every point is one :func:`~memfrontier.eval.runner.run_eval` run in its own folder under the sweep
folder (resumable; runs with identical options share one folder), all sharing one store. Then
:func:`write_sweep_report` writes ``sweep.csv``, ``sweep.md``, ``pareto.png``, ``tier_ratios.png``
and ``k_sweep.png``. Tier ratios and costs are reported as measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...core.cost import COST_SCALE
from ...strategies.budgetmem.config import MODULES, TIERS
from ...strategies.budgetmem.router import router_dir_name
from .. import plots
from ..metrics import overall_metrics
from .base import SweepRun, fmt_cell, markdown_table, start_report

LAMBDAS: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.9)
KS: tuple[int, ...] = (1, 3, 5, 8, 10)
FIXED_TIERS: tuple[str, ...] = TIERS  # the all-Low / all-Mid / all-High baselines


def plan_budgetmem_sweep(
    lambdas: Sequence[float] = LAMBDAS,
    ks: Sequence[int] = KS,
    *,
    router_dir: Path,
    k: int = 5,
    k_router: Path | None = None,
    options: dict | None = None,
) -> tuple[list[SweepRun], list[Path]]:
    """The runs, and the router checkpoints that are missing (their lambda is skipped).

    Lambda runs read ``router_dir/lambda_<L>/router_best.pt``; the K sweep uses all-Mid tiers, or
    ``k_router``. ``options`` (e.g. ``module_topk``, ``tiering``) go to every run."""
    base = {**(options or {}), "k": k}
    runs, missing = [], []
    for lam in lambdas:
        ckpt = Path(router_dir) / router_dir_name(lam) / "router_best.pt"
        if ckpt.is_file():
            runs.append(
                SweepRun(router_dir_name(lam), "lambda", f"λ={lam:g}", {**base, "router": str(ckpt)}, lam=lam, k=k)
            )
        else:
            missing.append(ckpt)
    runs += [SweepRun(f"fixed_{t}", "fixed", f"all {t}", {**base, "tiers": t}, k=k) for t in FIXED_TIERS]
    tiering = {"router": str(k_router)} if k_router is not None else {"tiers": "mid"}
    runs += [SweepRun(f"k_{kk}", "k", f"K={kk}", {**base, **tiering, "k": kk}, k=kk) for kk in ks]
    return runs, missing


def table_row(result: dict) -> dict:
    """One flat row of the sweep table (overall metrics and per-module tier ratios)."""
    g = overall_metrics(result["summary"].get("metrics", {}))
    usd = g.get("usd_per_question")
    opts = result.get("options", {})
    ratios = result["summary"].get("choices", {}).get("tiers", {})
    row = {
        "run": result["name"],
        "kind": result["kind"],
        "label": result["label"],
        "lambda": result.get("lam"),
        "k": result.get("k"),
        "tiers": "router" if "router" in opts else opts.get("tiers"),
        "n": g.get("n_questions"),
        "f1": g.get("f1"),
        "judge": g.get("judge_accuracy"),
        "usd_per_question": usd,
        "usd_x1e4": None if usd is None else usd * COST_SCALE,
        "qpc": g.get("qpc"),
        "proxy_s": g.get("proxy_s_mean"),
        "wall_s": g.get("wall_s_mean"),
    }
    for m in MODULES:
        for t in TIERS:
            row[f"tier_{m}_{t}"] = ratios.get(m, {}).get(t, 0.0) if ratios else None
    return row


def write_sweep_report(results: Sequence[dict], out: Path, missing: Sequence[Path] = ()) -> dict[str, Path]:
    """Write ``sweep.csv``, ``sweep.md`` and the PNGs (``pareto.png``; ``tier_ratios.png`` when a
    lambda run exists; ``k_sweep.png`` when a K run exists) into ``out``; returns the paths."""
    rows = [table_row(r) for r in results]
    out, written = start_report(out, rows)

    cols = ("run", "label", "n", "f1", "judge", "usd_x1e4", "qpc", "proxy_s")
    md = [
        "# BudgetMem sweep",
        "",
        f"Cost: {plots.COST_LABEL}. Tier ratios: share of questions whose router chose the tier (as measured).",
        "",
        *markdown_table(rows, cols),
    ]
    lam_results = [r for r in results if r["kind"] == "lambda"]
    if lam_results:
        md += [
            "",
            "## Tier selection ratio per module (router, greedy)",
            "",
            "| lambda | module | " + " | ".join(TIERS) + " |",
            "|" + "---|" * (2 + len(TIERS)),
        ]
        for r in lam_results:
            ratios = r["summary"].get("choices", {}).get("tiers", {})
            md += [
                f"| {r['lam']:g} | {m} | "
                + " | ".join(fmt_cell(ratios.get(m, {}).get(t, 0.0), 2) for t in TIERS)
                + " |"
                for m in MODULES
            ]
    if missing:
        md += ["", "## Skipped (router checkpoint missing)", ""] + [f"- `{p}`" for p in missing]
    (out / "sweep.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    written["md"] = out / "sweep.md"

    def point(row):
        return {
            "label": row["label"],
            "kind": row["kind"],
            "lam": row["lambda"],
            "k": row["k"],
            "usd_x1e4": row["usd_x1e4"],
            "f1": row["f1"],
            "judge": row["judge"],
        }

    front = [point(r) for r in rows if r["kind"] in ("lambda", "fixed") and r["usd_x1e4"] is not None]
    if front:
        written["pareto"] = plots.plot_pareto(front, out / "pareto.png")
    if lam_results:
        written["tier_ratios"] = plots.plot_tier_ratios(
            {r["label"]: r["summary"].get("choices", {}).get("tiers", {}) for r in lam_results},
            out / "tier_ratios.png",
            MODULES,
            TIERS,
        )
    ks = [point(r) for r in rows if r["kind"] == "k" and r["usd_x1e4"] is not None]
    if ks:
        written["k_sweep"] = plots.plot_k_sweep(ks, out / "k_sweep.png")
    return written

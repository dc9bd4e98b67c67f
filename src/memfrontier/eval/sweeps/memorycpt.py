"""The MemoryCPT sweeps (``memfrontier sweep memorycpt``, MemoryCPT Sec. 5 and Table 3):

- ``alpha``: one trained LoRA-B summarizer per reward weight alpha in {0.2, 0.4, 0.6, 0.8, 1.0}
  (read from ``<adapters>/alpha_<a>/adapter``; a missing adapter skips its point);
- ``depth``: the RRF depth episodic/semantic in {2/5, 4/10, 8/20, 20/50, 32/80};
- ``ablation``: full, no-QAD, no-QAR, no-FS at the default depth.

Every point is one :func:`~memfrontier.eval.runner.run_eval` in its own folder, all sharing one
store (so the episodic/semantic memory is built once per construction model). The report is
``sweep.csv``, ``sweep.md`` (with the amortized cost C(n)) and ``pareto.png``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...core.cost import COST_SCALE
from ...strategies.memorycpt.config import ABLATIONS
from .. import plots
from ..metrics import overall_metrics
from .base import SweepRun, markdown_table, start_report

ALPHAS: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0)
DEPTHS: tuple[tuple[int, int], ...] = ((2, 5), (4, 10), (8, 20), (20, 50), (32, 80))
SERIES = {"alpha": "LoRA-B (alpha)", "depth": "RRF depth", "ablation": "ablations"}


def alpha_dir_name(alpha: float) -> str:
    return f"alpha_{alpha:g}"


def plan_memorycpt_sweep(
    alphas: Sequence[float] = ALPHAS,
    depths: Sequence[tuple[int, int]] = DEPTHS,
    ablations: Sequence[str] = ABLATIONS,
    *,
    adapters: Path | None = None,
    options: dict | None = None,
) -> tuple[list[SweepRun], list[Path]]:
    """The runs, and the LoRA-B adapters that are missing (their alpha is skipped).

    ``options`` (e.g. ``construction_llm``) go to every run; alpha runs add
    ``summarizer_adapter``; depth runs set ``episodic_k`` / ``semantic_k``."""
    base = dict(options or {})
    runs, missing = [], []
    for a in alphas:
        adapter = Path(adapters or "runs/qar") / alpha_dir_name(a) / "adapter"
        if (adapter / "adapter_config.json").is_file():
            runs.append(
                SweepRun(alpha_dir_name(a), "alpha", f"α={a:g}", {**base, "summarizer_adapter": str(adapter)}, order=a)
            )
        else:
            missing.append(adapter)
    for e, s in depths:
        runs.append(
            SweepRun(f"depth_{e}_{s}", "depth", f"{e}/{s}", {**base, "episodic_k": e, "semantic_k": s}, order=e + s)
        )
    for ab in ablations:
        runs.append(
            SweepRun(
                f"ablation_{ab}", "ablation", "full" if ab == "none" else ab.replace("_", "-"), {**base, "ablation": ab}
            )
        )
    return runs, missing


def table_row(result: dict) -> dict:
    """One flat row: overall quality, online cost, QPC and the amortized cost at n = 314."""
    g = overall_metrics(result["summary"].get("metrics", {}))
    usd = g.get("usd_per_question")
    amortized = (result["summary"].get("amortized_usd_per_question") or {}).get("314")
    return {
        "run": result["name"],
        "kind": result["kind"],
        "label": result["label"],
        "order": result.get("order"),
        "n": g.get("n_questions"),
        "f1": g.get("f1"),
        "judge": g.get("judge_accuracy"),
        "usd_x1e4": None if usd is None else usd * COST_SCALE,
        "amortized_314_x1e4": None if amortized is None else amortized * COST_SCALE,
        "qpc": g.get("qpc"),
        "proxy_s": g.get("proxy_s_mean"),
    }


def write_memorycpt_report(results: Sequence[dict], out: Path, missing: Sequence[Path] = ()) -> dict[str, Path]:
    """Write ``sweep.csv``, ``sweep.md`` and ``pareto.png`` into ``out``; returns their paths."""
    rows = [table_row(r) for r in results]
    out, written = start_report(out, rows)
    cols = ("kind", "label", "n", "f1", "judge", "usd_x1e4", "amortized_314_x1e4", "qpc", "proxy_s")
    md = [
        "# MemoryCPT sweep",
        "",
        f"Online cost: {plots.COST_LABEL}; amortized: C(314) = C_construction / 314 + C_online (MemoryCPT Eq. 20).",
        "",
        *markdown_table(rows, cols),
    ]
    if missing:
        md += ["", "## Skipped (LoRA-B adapter missing; train with `memfrontier train qar --alpha A`)", ""]
        md += [f"- `{p}`" for p in missing]
    (out / "sweep.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    written["md"] = out / "sweep.md"
    points = [
        {
            "label": r["label"],
            "series": SERIES[r["kind"]],
            "order": r["order"],
            "usd_x1e4": r["usd_x1e4"],
            "f1": r["f1"],
            "judge": r["judge"],
        }
        for r in rows
        if r["usd_x1e4"] is not None
    ]
    if points:
        written["pareto"] = plots.plot_quality_cost(points, out / "pareto.png", "MemoryCPT: quality vs cost")
    return written

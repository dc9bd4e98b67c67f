"""PNG plots (matplotlib, Agg; no pyplot state): the router's reward curve and the BudgetMem sweep
(Pareto front, tier-selection heat-maps, retrieval-size sweep). Cost axes are USD per question
x 1e4 (:data:`memfrontier.core.cost.COST_SCALE`), as in the papers' tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from ..core.cost import COST_SCALE

COST_LABEL = f"USD per question x {COST_SCALE:.0e}".replace("+0", "")


def _figure(ncols: int = 1, width: float = 5.5, height: float = 4.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def plot_reward_curve(
    log: Sequence[Mapping], path: Path, title: str = "router training", xlabel: str = "PPO update"
) -> Path:
    """Training batch mean reward (+/- std), r_task and validation reward per update."""
    fig, (ax,) = _figure()
    u = [r["update"] for r in log]
    mean = [r["mean_reward"] for r in log]
    std = [r.get("std_reward") or 0.0 for r in log]
    ax.plot(u, mean, marker="o", label="train reward (batch mean)")
    ax.fill_between(u, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
    ax.plot(u, [r.get("r_task") for r in log], marker=".", linestyle="--", label="train r_task")
    ax.plot(u, [r.get("val_reward") for r in log], marker="s", label="validation reward (greedy)")
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_quality_cost(points: Sequence[Mapping], path: Path, title: str) -> Path:
    """Quality against cost, one panel per metric present (``f1``, ``judge``), one series per
    ``series`` value: points with an ``order`` are joined in that order (a trade-off curve), points
    without one are drawn as squares (baselines, ablations). Each point is annotated with ``label``.

    ``points``: dicts with ``label``, ``series``, ``order`` (number or None), ``usd_x1e4``, ``f1``
    and optionally ``judge``.
    """
    metrics = [m for m in ("f1", "judge") if any(p.get(m) is not None for p in points)] or ["f1"]
    fig, axes = _figure(len(metrics))
    names = list(dict.fromkeys(p["series"] for p in points))
    for ax, metric in zip(axes, metrics):
        for name in names:
            pts = [p for p in points if p["series"] == name and p.get(metric) is not None]
            curve = sorted((p for p in pts if p.get("order") is not None), key=lambda p: p["order"])
            if curve:
                ax.plot([p["usd_x1e4"] for p in curve], [p[metric] for p in curve], marker="o", label=name)
            loose = [p for p in pts if p.get("order") is None]
            if loose:
                ax.scatter([p["usd_x1e4"] for p in loose], [p[metric] for p in loose], marker="s", zorder=3, label=name)
            for p in pts:
                ax.annotate(
                    p["label"], (p["usd_x1e4"], p[metric]), textcoords="offset points", xytext=(4, 4), fontsize=8
                )
        ax.margins(0.12)  # room for the labels
        ax.set_xlabel(COST_LABEL)
        ax.set_ylabel("LLM-judge accuracy" if metric == "judge" else "F1")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_pareto(points: Sequence[Mapping], path: Path, title: str = "BudgetMem: quality vs cost") -> Path:
    """BudgetMem's frontier: ``lambda`` points joined in lambda order, ``fixed`` tiers as squares
    (see :func:`plot_quality_cost`; points carry ``kind``, ``lam``, ``label``, ``usd_x1e4``, ``f1``)."""
    series = {"lambda": "router (lambda)", "fixed": "fixed tiers"}
    return plot_quality_cost(
        [
            {**p, "series": series.get(p["kind"], p["kind"]), "order": p["lam"] if p["kind"] == "lambda" else None}
            for p in points
        ],
        path,
        title,
    )


def plot_tier_ratios(
    ratios: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path, modules: Sequence[str], tiers: Sequence[str]
) -> Path:
    """One heat-map per run label (e.g. ``lambda=0.3``): modules (rows) x tiers (columns), the
    share of questions whose router chose that tier for that module."""
    labels = list(ratios) or ["(no runs)"]
    fig, axes = _figure(len(labels), width=3.2, height=3.4)
    image = None
    for ax, label in zip(axes, labels):
        grid = [[ratios.get(label, {}).get(m, {}).get(t, 0.0) for t in tiers] for m in modules]
        image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8, color="white" if v < 0.6 else "black")
        ax.set_xticks(range(len(tiers)), list(tiers))
        ax.set_yticks(range(len(modules)), list(modules))
        ax.set_title(label, fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.8, label="tier selection ratio")
    return _save(fig, path)


def plot_k_sweep(points: Sequence[Mapping], path: Path, title: str = "BudgetMem: retrieval size K") -> Path:
    """F1 (and judge accuracy when present) and cost against K; ``points``: dicts with ``k``,
    ``f1``, ``usd_x1e4`` and optionally ``judge``."""
    pts = sorted(points, key=lambda p: p["k"])
    fig, (ax,) = _figure()
    ks = [p["k"] for p in pts]
    ax.plot(ks, [p["f1"] for p in pts], marker="o", label="F1")
    if any(p.get("judge") is not None for p in pts):
        ax.plot(ks, [p.get("judge") for p in pts], marker="^", label="judge accuracy")
    ax.set_xlabel("K (chunks retrieved)")
    ax.set_ylabel("quality")
    ax.set_xticks(ks)
    ax.grid(alpha=0.3)
    cost = ax.twinx()
    cost.plot(ks, [p["usd_x1e4"] for p in pts], marker="s", linestyle="--", color="tab:red", label="cost")
    cost.set_ylabel(COST_LABEL)
    lines = ax.get_legend_handles_labels()
    more = cost.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8)
    ax.set_title(title)
    return _save(fig, path)

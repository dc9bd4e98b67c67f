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


def plot_reward_curve(log: Sequence[Mapping], path: Path, title: str = "router training") -> Path:
    """Training batch mean reward (+/- std), r_task and validation reward per update."""
    fig, (ax,) = _figure()
    u = [r["update"] for r in log]
    mean = [r["mean_reward"] for r in log]
    std = [r.get("std_reward") or 0.0 for r in log]
    ax.plot(u, mean, marker="o", label="train reward (batch mean)")
    ax.fill_between(u, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
    ax.plot(u, [r.get("r_task") for r in log], marker=".", linestyle="--", label="train r_task")
    ax.plot(u, [r.get("val_reward") for r in log], marker="s", label="validation reward (greedy)")
    ax.set_xlabel("PPO update")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_pareto(points: Sequence[Mapping], path: Path, title: str = "BudgetMem: quality vs cost") -> Path:
    """Quality against cost, one panel per metric present (``f1``, ``judge``).

    ``points``: dicts with ``label``, ``kind`` (``lambda`` points are joined in lambda order,
    ``fixed`` baselines drawn as squares), ``usd_x1e4``, ``f1`` and optionally ``judge``.
    """
    metrics = [m for m in ("f1", "judge") if any(p.get(m) is not None for p in points)] or ["f1"]
    fig, axes = _figure(len(metrics))
    for ax, metric in zip(axes, metrics):
        lam = sorted((p for p in points if p["kind"] == "lambda" and p.get(metric) is not None), key=lambda p: p["lam"])
        if lam:
            ax.plot([p["usd_x1e4"] for p in lam], [p[metric] for p in lam], marker="o", label="router (lambda)")
        fixed = [p for p in points if p["kind"] == "fixed" and p.get(metric) is not None]
        if fixed:
            ax.scatter([p["usd_x1e4"] for p in fixed], [p[metric] for p in fixed], marker="s", color="tab:red",
                       zorder=3, label="fixed tiers")
        for p in lam + fixed:
            ax.annotate(p["label"], (p["usd_x1e4"], p[metric]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.margins(0.12)  # room for the labels
        ax.set_xlabel(COST_LABEL)
        ax.set_ylabel("LLM-judge accuracy" if metric == "judge" else "F1")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_tier_ratios(ratios: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path,
                     modules: Sequence[str], tiers: Sequence[str]) -> Path:
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

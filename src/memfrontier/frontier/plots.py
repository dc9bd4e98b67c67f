"""Frontier plots: F1 against amortized USD×1e4 per question (log x) and against proxy seconds per
question, one colour per strategy family, Pareto points filled circles joined by a line, the others
hollow squares, the gold-evidence anchor (oracle) a star outside the Pareto set (the legend says
which shape is which), 95% F1 intervals as bars. Configurations at the same point share one label
("auto-balanced = auto-cost"); labels are moved apart with adjustText so that none covers another (a
thin line joins a moved label to its point), in a fixed number of steps: the same rows draw the
same file."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from adjustText import adjust_text

from ..eval.plots import COST_LABEL, _figure, _save

#: adjustText's steps moving the labels apart: a fixed number, so a plot drawn again from the same
#: rows is the same file on any machine.
LABEL_STEPS = 300
#: Where (axes fraction) a point's label starts going to its left instead of its right.
RIGHT_THIRD = 0.67
#: Gap (axes fraction) between a point and the start of its label.
LABEL_GAP = 0.012


def point_labels(rows: Sequence[dict], x_key: str) -> list[tuple[float, float, str]]:
    """One ``(x, f1, label)`` per distinct point of ``rows`` (rows without ``x_key`` skipped), the
    labels of configurations at the same point joined with " = " in row order."""
    points: dict[tuple[float, float], list[str]] = {}
    for r in rows:
        if r[x_key] is not None:
            points.setdefault((r[x_key], r["f1"]), []).append(r["label"])
    return [(x, y, " = ".join(labels)) for (x, y), labels in points.items()]


def _panel(ax, rows: Sequence[dict], x_key: str, pareto_key: str, xlabel: str, title: str, log_x: bool) -> None:
    families = list(dict.fromkeys(r["strategy"] for r in rows))
    colours = {f: f"C{i % 10}" for i, f in enumerate(families)}
    for r in rows:
        x = r[x_key]
        if x is None:
            continue
        on, anchor = bool(r.get(pareto_key)), bool(r.get("anchor"))
        ax.errorbar(
            [x],
            [r["f1"]],
            yerr=[[r["f1"] - r["f1_low"]], [r["f1_high"] - r["f1"]]],
            fmt="none",
            ecolor=colours[r["strategy"]],
            alpha=0.4,
            capsize=2,
        )
        ax.scatter(
            [x],
            [r["f1"]],
            color=colours[r["strategy"]],
            marker="*" if anchor else "o" if on else "s",
            s=90 if anchor else None,
            facecolors=colours[r["strategy"]] if on or anchor else "none",
            zorder=3,
        )
    front = sorted((r for r in rows if r.get(pareto_key) and r[x_key] is not None), key=lambda r: r[x_key])
    if len(front) > 1:
        ax.plot(
            [r[x_key] for r in front],
            [r["f1"] for r in front],
            color="black",
            linewidth=0.8,
            alpha=0.6,
            label="Pareto front",
        )
    for f in families:  # a colour is a strategy family (rag at k=4, 8, 16 are one colour), not a configuration
        ax.scatter([], [], color=colours[f], label=f"{f} (family)")
    for marker, filled, what in (
        ("o", True, "on the Pareto front"),
        ("s", False, "off the front"),
        ("*", True, "anchor (gold evidence)"),
    ):
        if any(
            (r.get("anchor") if marker == "*" else bool(r.get(pareto_key)) == filled and not r.get("anchor"))
            for r in rows
            if r[x_key] is not None
        ):
            ax.scatter([], [], color="grey", marker=marker, facecolors="grey" if filled else "none", label=what)
    if log_x and all(r[x_key] and r[x_key] > 0 for r in rows if r[x_key] is not None):
        ax.set_xscale("log")
    labels = point_labels(rows, x_key)
    ax.margins(x=0.15, y=0.08)  # room for the labels of the outermost points inside the axes
    if labels:
        xs, ys = [x for x, _, _ in labels], [y for _, y, _ in labels]
        ax.autoscale_view()
        to_axes = ax.transData + ax.transAxes.inverted()
        texts = []
        for x, y, label in labels:  # a point in the right third is labelled on its left: inside the axes
            ax_x, ax_y = to_axes.transform((x, y))
            side = -1 if ax_x > RIGHT_THIRD else 1
            tx, ty = to_axes.inverted().transform((ax_x + side * LABEL_GAP, ax_y))  # clear of the marker
            texts.append(ax.text(tx, ty, label, fontsize=7, ha="left" if side > 0 else "right", va="center"))
        adjust_text(  # a fixed number of steps: its default (1 s of steps) moves labels by the machine's speed
            texts,
            x=xs,
            y=ys,
            ax=ax,
            iter_lim=LABEL_STEPS,
            time_lim=None,
            arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5},
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("F1 (95% CI)")
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_frontier(rows: Sequence[dict], out: Path, title: str = "frontier") -> dict[str, Path]:
    """Write ``frontier_cost.png`` and ``frontier_latency.png`` into ``out``; returns their paths."""
    paths = {}
    fig, (ax,) = _figure(1, width=7.0, height=5.0)
    _panel(
        ax,
        rows,
        "usd_x1e4_amortized",
        "pareto_cost",
        f"{COST_LABEL}, amortized:\nC(n) = construction / n questions answered + online",
        f"{title}: quality vs cost",
        True,
    )
    paths["plot_cost"] = _save(fig, out / "frontier_cost.png")
    fig, (ax,) = _figure(1, width=7.0, height=5.0)
    _panel(
        ax, rows, "proxy_s", "pareto_latency", "latency proxy, s per question", f"{title}: quality vs latency", False
    )
    paths["plot_latency"] = _save(fig, out / "frontier_latency.png")
    return paths

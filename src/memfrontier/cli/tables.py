"""Rich tables the commands print: the frontier, the ``auto`` route shares, BudgetMem tier ratios and the
tier-router training log."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.jsonio import jsonl_lines
from ..core.words import plural
from ..eval.reports.layout import fit_columns


def frontier_table(report: dict):
    """The finished configurations of a frontier report, the columns that fit a terminal
    (configuration names are never cut); unfinished ones were named as they were met, and
    ``frontier.md`` has every column."""
    from rich.table import Table

    from ..frontier.report import delta_cell, interval, pareto_cell

    t = Table(title=f"frontier ({plural(len(report['question_ids']), 'question')})", title_justify="left")
    ok = [x for x in report["rows"] if x["status"] == "ok"]
    show_n = any(x["n"] != len(report["question_ids"]) for x in ok)  # the title says n when every row has it
    for name, just in (
        ("configuration", "left"),
        *((("n", "right"),) if show_n else ()),
        ("F1 [95% CI]", "left"),
        (f"ΔF1 vs {report['reference']} [95% CI]", "left"),
        ("USD ×1e4/q C(n)", "right"),
        ("QPC C(n)", "right"),
        ("proxy s/q", "right"),
        ("Pareto $ / s", "center"),
    ):
        t.add_column(name, justify=just, no_wrap=name == "configuration", overflow="fold")
    for x in ok:
        unpriced = x.get("unpriced_calls")
        t.add_row(
            x["label"],
            *((str(x["n"]),) if show_n else ()),
            interval(x["f1"], x["f1_low"], x["f1_high"]),
            delta_cell(x, report["reference"]),
            "unpriced" if unpriced else f"{x['usd_x1e4_amortized']:.4f}",
            "unpriced" if unpriced else f"{x['qpc']:.3f}",
            f"{x['proxy_s']:.2f}",
            pareto_cell(x),
        )
    t.caption = "USD ×1e4/q C(n): amortized cost per question (construction / n + online); QPC: quality per cost"
    return fit_columns(t)


def with_caption(table, text: str | None):
    """``table`` with ``text`` added to its caption (a line of its own); None adds nothing."""
    if text:
        table.caption = f"{table.caption}\n{text}" if table.caption else text
    return table


def route_table(shares: dict[str, float]):
    """The share of questions the ``auto`` router sent to each configuration."""
    from rich.table import Table

    t = Table(title="configuration chosen by the router (auto)")
    t.add_column("configuration")
    t.add_column("share of questions", justify="right")
    for label, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        t.add_row(label, f"{share:.2f}")
    return fit_columns(t)


def tier_table(ratios: dict, title: str = "tier selection ratio per module"):
    from rich.table import Table

    from ..strategies.budgetmem.config import TIERS

    t = Table(title=title)
    cols = [*TIERS, *sorted({c for r in ratios.values() for c in r} - set(TIERS))]  # e.g. "rules"
    t.add_column("module")
    for tier in cols:
        t.add_column(tier, justify="right")
    for module, r in ratios.items():
        t.add_row(module, *(f"{r.get(tier, 0.0):.2f}" for tier in cols))
    return fit_columns(t)


def _train_table(log_path: Path):
    from rich.table import Table

    cols = [
        ("update", "update", 0),
        ("reward", "mean_reward", 4),
        ("±", "std_reward", 4),
        ("r_task", "r_task", 4),
        ("r_cost", "r_cost", 4),
        ("alpha", "alpha", 3),
        ("val reward", "val_reward", 4),
        ("val F1", "val_f1", 4),
        ("val USD ×1e4/q", "val_extraction_usd_per_question", 4),
        ("q/s", "train_questions_per_s", 2),
    ]
    t = Table(title=f"router training ({log_path})")
    for name, _key, _d in cols:
        t.add_column(name, justify="right")
    for line in jsonl_lines(log_path.read_text("utf-8")):
        r = json.loads(line)
        cells = []
        for _name, key, d in cols:
            v = r.get(key)
            if key == "val_extraction_usd_per_question" and v is not None:
                v *= 1e4
            cells.append("-" if v is None else (str(v) if d == 0 else f"{v:.{d}f}"))
        t.add_row(*cells)
    return fit_columns(t)

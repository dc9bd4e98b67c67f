"""Render a run summary as a per-category table (rich) for the terminal."""

from __future__ import annotations

import math

from rich.table import Table

from ...core.cost import COST_SCALE
from ...core.words import plural
from ..datasets.locomo import CATEGORY_NAMES as LOCOMO_CATEGORY_NAMES
from ..fallbacks import unrecorded_units, why
from .layout import fit_columns


def _fmt(v, digits=3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "inf"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _scaled(usd):
    return None if usd is None else usd * COST_SCALE


def summary_table(summary: dict, title: str | None = None) -> Table:
    """One row per category (LoCoMo ids printed with their names) and the overall row last."""
    cfg = summary.get("config", {})
    dataset = cfg.get("dataset", "")
    t = Table(
        title=title
        or f"{dataset} {cfg.get('split', '')} · strategy={cfg.get('strategy', '')} · {plural(summary.get('questions', 0), 'question')}"
    )
    judged = any(g.get("judge_accuracy") is not None for g in summary["metrics"].values())
    cols = (
        "category",
        "n",
        "F1",
        "EM",
        *(("judge",) if judged else ()),
        "recall",
        "USD ×1e4/q",
        "proxy s/q",
        "wall s/q",
        "QPC",
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "category" else "right")
    for name, g in summary["metrics"].items():
        label = (
            f"{name} {LOCOMO_CATEGORY_NAMES[name]}" if dataset == "locomo" and name in LOCOMO_CATEGORY_NAMES else name
        )
        unpriced = bool(g.get("unpriced_questions"))  # cost unknown: say so, never "inf"
        t.add_row(
            label,
            str(g.get("n_questions", 0)),
            _fmt(g.get("f1")),
            _fmt(g.get("em")),
            *((_fmt(g.get("judge_accuracy")),) if judged else ()),
            _fmt(g.get("evidence_recall")),
            "unpriced" if unpriced else _fmt(_scaled(g.get("usd_per_question")), 4),
            _fmt(g.get("proxy_s_mean"), 2),
            _fmt(g.get("wall_s_mean"), 2),
            "unpriced" if unpriced else _fmt(g.get("qpc"), 2),
            style="bold" if name.startswith("all") else None,
        )
    t.caption = "recall: evidence recall; QPC: online quality per cost" + (
        "" if judged else "; no judge column: run with --judge"
    )
    return fit_columns(t)


def construction_table(summary: dict) -> Table:
    """Offline construction per conversation (calls, tokens, USD) and the amortized cost per
    question C(n) = C_construction / n + C_online for the run's n values (MemoryCPT Eq. 20, App. C)."""
    t = Table(title="offline construction per conversation (USD×1e4 for the whole build) and amortized cost C(n)")
    for col in ("conversation", "calls", "in tok", "out tok", "USD ×1e4", "proxy s", "rejected ops"):
        t.add_column(col, justify="left" if col == "conversation" else "right")
    for conv, c in summary.get("construction", {}).items():
        rejected = sum(v for k, v in c.get("events", {}).items() if ".op_rejected." in f".{k}")
        t.add_row(
            conv,
            str(int(c.get("calls", 0))),
            str(int(c.get("input_tokens", 0))),
            str(int(c.get("output_tokens", 0))),
            _fmt(_scaled(c.get("usd")), 4),
            _fmt(c.get("proxy_s"), 1),
            str(rejected),
        )
    amortized = summary.get("amortized_usd_per_question") or {}
    if amortized:
        n_run = summary.get("questions")
        built = len(summary.get("construction") or {})
        t.caption = (
            f"C(n), USD×1e4 per question = the construction of the {plural(built, 'conversation')} above / n "
            f"+ online, n questions asked of them in all: "
            + " · ".join(
                f"n={n}{' (this run)' if n == str(n_run) else ''}: {_fmt(_scaled(v), 4)}" for n, v in amortized.items()
            )
            + (
                f"; QPC at n={n_run}: {_fmt(summary['qpc_amortized'], 3)}"
                if summary.get("qpc_amortized") is not None
                else ""
            )
        )
    return fit_columns(t)


def fallback_table(summary: dict) -> Table:
    """Error and fallback shares of every role that had a failed or replaced call (from
    ``summary["fallbacks"]``, :func:`memfrontier.eval.fallbacks.fallback_report`); a one-line
    table saying so when none had."""
    rep = summary.get("fallbacks") or {}
    limit = rep.get("threshold", 0.0)
    bad = {r: v for r, v in (rep.get("by_role") or {}).items() if v["errors"] or v["fallbacks"]}
    t = Table(title=f"model-call errors and fallbacks per role (threshold {limit:.0%} of a role's calls)")
    for col in ("role", "calls", "errors", "error share", "fallbacks", "fallback share", "first error or refusal"):
        t.add_column(col, justify="left" if col in ("role", "first error or refusal") else "right")
    if not bad:
        t.add_row("(none)", "", "", "", "", "", "every model call of the run succeeded and was used")
    if blind := unrecorded_units((summary.get("construction") or {}).values()):
        t.caption = (
            " and ".join(f"{n} {units}" for units, n in blind.items())
            + " were built before their fallbacks were recorded: not counted here"
        )
    for role, v in bad.items():
        over = role in rep.get("exceeded", ())
        t.add_row(
            role,
            str(v["calls"]),
            str(v["errors"]),
            f"{v['error_share']:.0%}",
            str(v["fallbacks"]),
            f"{v['fallback_share']:.0%}",
            (why(v) or "-")[:120],
            style="bold red" if over else None,
        )
    return fit_columns(t)

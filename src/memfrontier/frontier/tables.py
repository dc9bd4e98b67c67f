"""The frontier report's text: the table of configurations (its header and cells, shared by
``frontier.md`` and ``frontier.html``), F1 by category, the lines under the table (a router's place
against the fixed frontier, runs kept despite fallbacks, notes) and the Markdown of ``frontier.md``.
Rows are those of :func:`~memfrontier.frontier.report.build_report`."""

from __future__ import annotations

from ..eval.datasets.locomo import CATEGORY_NAMES as LOCOMO_CATEGORY_NAMES
from ..eval.sweeps.base import fmt_cell


def _versus_frontier_line(x: dict) -> str:
    """One sentence on a router row against the fixed frontier (:func:`versus_fixed_frontier`)."""
    if x.get("unpriced_calls"):
        return f"{x['label']}: unpriced model calls, so no place against the fixed frontier's cost"
    if not x.get("frontier_ref"):
        return f"{x['label']}: no priced fixed configuration to compare with"
    where = (
        "the fixed frontier at its cost is"
        if x["frontier_ref_within"]
        else "it costs less than every fixed configuration; the cheapest is"
    )
    measured = (
        "the interval excludes 0"
        if (x["d_f1_frontier_low"] > 0 or x["d_f1_frontier_high"] < 0)
        else "the interval includes 0"
    )
    verdict = "above the fixed frontier" if x["above_frontier"] else "not above the fixed frontier"
    line = (
        f"{x['label']} ({x['usd_x1e4_amortized']:.4f} USD×1e4/q): {where} {x['frontier_ref']}; "
        f"ΔF1 {interval(x['d_f1_frontier'], x['d_f1_frontier_low'], x['d_f1_frontier_high'])}, "
        f"{verdict} ({measured})"
    )
    if x.get("mix"):
        mix = " + ".join(f"{w:.2f} {label}" for label, w in x["mix"])
        line += (
            f"; against a random mix of fixed configurations at the same cost ({mix}, F1 {x['mix_f1']:.3f}): "
            f"ΔF1 {interval(x['d_f1_mix'], x['d_f1_mix_low'], x['d_f1_mix_high'])}"
        )
    if x.get("qpc_at_least_best") is not None:
        line += f"; QPC {x['qpc']:.3f} vs the best fixed {x['best_fixed_qpc']:.3f} ({x['best_fixed_qpc_label']}): " + (
            "not worse" if x["qpc_at_least_best"] else "worse"
        )
    return line


def interval(v, lo, hi, digits: int = 3, n: int | None = None) -> str:
    """``"0.370 [0.262, 0.480]"``; ``"0.048 (n=1)"`` when ``n`` < 2 (one value has no interval); ``"-"``
    when the value is missing."""
    if v is None:
        return "-"
    if n is not None and n < 2:
        return f"{v:.{digits}f} (n={n})"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def delta_cell(x: dict, reference: str) -> str:
    """The ΔF1 cell of row ``x``: its paired interval against ``reference``, or ``"reference"`` on the
    reference's own row (its difference with itself is 0 by construction, not a measurement)."""
    if x["label"] == reference:
        return "reference"
    return interval(x.get("d_f1"), x.get("d_f1_low"), x.get("d_f1_high"))


def pareto_cell(x: dict, anchor: str = "anchor") -> str:
    """A row's place on the cost and latency fronts, "● / ○" (on / off), or ``anchor`` for the oracle."""
    if x.get("anchor"):
        return anchor
    return f"{'●' if x.get('pareto_cost') else '○'} / {'●' if x.get('pareto_latency') else '○'}"


def table_header(reference: str) -> list[str]:
    """The 15 column names of the frontier table (``frontier.md`` and ``frontier.html``)."""
    return [
        "configuration",
        "n",
        "F1 [95% CI]",
        f"ΔF1 vs {reference} [95% CI]",
        "USD×1e4/q online",
        "C(n)×1e4/q",
        "QPC",
        "QPC online",
        "proxy s/q",
        "wall s/q",
        "calls/q",
        "evidence recall",
        "judge accuracy",
        "Pareto (cost / latency)",
        "regret vs per-question oracle (utility / F1)",
    ]


def table_cells(x: dict, reference: str) -> list[str]:
    """The cells of report row ``x`` under :func:`table_header`: 15 strings for a finished
    configuration; for one that did not finish, its label and why (``["rag", "not run: ..."]``, or
    ``"refused: ..."`` for a run above the fallback threshold)."""
    if x["status"] != "ok":
        why = x["status"] if x["status"].startswith(("not run", "started", "refused")) else f"not run: {x['status']}"
        return [x["label"], why]
    unpriced = x.get("unpriced_calls")
    return [
        x["label"],
        str(x["n"]),
        interval(x["f1"], x["f1_low"], x["f1_high"]),
        delta_cell(x, reference),
        "unpriced" if unpriced else fmt_cell(x["usd_x1e4_online"], 4),
        "unpriced" if unpriced else fmt_cell(x["usd_x1e4_amortized"], 4),
        "unpriced" if unpriced else fmt_cell(x["qpc"], 3),
        "unpriced" if unpriced else fmt_cell(x["qpc_online"], 3),
        fmt_cell(x["proxy_s"], 2),
        fmt_cell(x["wall_s"], 1),
        fmt_cell(x["calls"], 2),
        fmt_cell(x["evidence_recall"]),
        "-" if x.get("judge_accuracy") is None else fmt_cell(x["judge_accuracy"], 3),
        pareto_cell(x, anchor="anchor (gold evidence)"),
        _regret_cell(x),
    ]


def table_note(report: dict) -> str:
    """The paragraph under the frontier table: the question set, C(n), QPC, intervals, Pareto sets."""
    return (
        f"Questions: {len(report['question_ids'])}, the same for every configuration (n: those scored; "
        "LoCoMo category 5 is scored apart, as abstention). "
        "C(n) spreads each configuration's construction cost over the questions answered from its stores "
        "(MemoryCPT Eq. 3); QPC = F1 / (C(n)×1e4) (Eq. 5-6); QPC online ignores construction. "
        "Intervals: 95% percentile bootstrap over questions (paired for Δ). "
        "Pareto sets are over deployable configurations: an anchor (oracle) reads the gold evidence "
        "and is shown as the upper bound only."
    )


def render_markdown(report: dict, title: str = "frontier") -> str:
    """The report as a Markdown table (one line per configuration) plus notes."""
    lines = [f"# {title}", "", "| " + " | ".join(table_header(report["reference"])) + " |", "|" + "---|" * 15]
    for x in report["rows"]:
        cells = table_cells(x, report["reference"])
        if x["status"] != "ok":
            lines.append(f"| {cells[0]} | - | {cells[1]} |" + " |" * 12)
            continue
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", table_note(report)]
    return "\n".join(lines + summary_lines(report) + category_lines(report)) + "\n"


def category_table(report: dict) -> tuple[list[str], list[list[str]]] | None:
    """F1 per question category (LoCoMo's named) with its 95% interval: ``(header, rows)``, one row
    per finished configuration (its label, then one cell per category); None when no row has
    categories."""
    ok = [x for x in report["rows"] if x["status"] == "ok" and x.get("per_category")]
    if not ok:
        return None
    cats = sorted({c for x in ok for c in x["per_category"]}, key=lambda c: (not c.isdigit(), c.zfill(8)))
    names = LOCOMO_CATEGORY_NAMES if report.get("run_options", {}).get("dataset") == "locomo" else {}
    n = {c: next(x["per_category"][c]["n"] for x in ok if c in x["per_category"]) for c in cats}
    header = ["configuration"] + [f"{c} {names[c]} (n={n[c]})" if c in names else f"{c} (n={n[c]})" for c in cats]
    rows = [
        [x["label"]]
        + [
            interval(*(x["per_category"][c][k] for k in ("f1", "f1_low", "f1_high")), n=x["per_category"][c]["n"])
            if c in x["per_category"]
            else "-"
            for c in cats
        ]
        for x in ok
    ]
    return header, rows


def category_lines(report: dict) -> list[str]:
    """:func:`category_table` as a Markdown table under a heading; nothing when no row has categories."""
    table = category_table(report)
    if table is None:
        return []
    header, rows = table
    lines = ["", "## F1 by category", "", "| " + " | ".join(header) + " |", "|---|" + "---|" * (len(header) - 1)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def summary_lines(report: dict) -> list[str]:
    """The lines under the table (Markdown; items start with "- "): what a router's regret means and
    how each ``auto`` point compares with the fixed frontier, the runs kept despite fallbacks, and
    the report's notes."""
    lines: list[str] = []
    if any(x.get("strategy") == "auto" and x.get("status") == "ok" for x in report["rows"]):
        lines.append(
            "Regret of a router (auto): per question, the realised utility (its preference, λ_Q·F1/s_F1 − "
            "λ_C·USD/s_USD − λ_L·s/s_L, scales from its training records) and F1 of the best of its fixed "
            "configurations in hindsight minus its own, averaged."
        )
        lines += [
            f"- {_versus_frontier_line(x)}"
            for x in report["rows"]
            if x.get("strategy") == "auto" and x.get("status") == "ok"
        ]
    fallbacks = [x for x in report["rows"] if x.get("fallbacks")]
    if fallbacks:
        lines.append(
            "Kept with model calls failing or falling back above the threshold (--allow-fallbacks): "
            + "; ".join(f"{x['label']} ({x['fallbacks']})" for x in fallbacks)
        )
    return lines + [f"- {n}" for n in report["notes"]]


def _regret_cell(x: dict) -> str:
    if x.get("strategy") != "auto":
        return "-"
    if x.get("regret_utility") is None:
        return f"not computed: {x.get('regret_status', 'no rows')}"
    return f"{x['regret_utility']:.3f} / {x['regret_f1']:.3f} (oracle F1 {x['oracle_f1']:.3f})"

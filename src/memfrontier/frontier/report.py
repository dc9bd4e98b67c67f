"""The frontier report: one row per configuration from its ``eval`` output (``summary.json`` +
``predictions.jsonl``), on the questions every configuration answered, with intervals and the
Pareto set; written as ``frontier.csv``, ``frontier.json``, ``frontier.md``, two plots and a page
(``frontier.html``, :mod:`memfrontier.frontier.page`).

Columns (units in the names): ``f1`` overall and per category with its 95% bootstrap interval,
``evidence_recall``, ``judge_accuracy`` (when judged), ``usd_x1e4_online`` (query-time USD per question
x 1e4), ``construction_usd`` (offline build, all conversations), ``usd_x1e4_amortized`` (C(n) x 1e4 with
n = questions answered from those stores; MemoryCPT Eq. 3), ``qpc`` (F1 / C(n) x 1e4, MemoryCPT Eq. 5-6,
App. C) beside ``qpc_online`` (online cost only, labelled), ``proxy_s``, ``wall_s``, ``calls``,
``input_tokens``/``output_tokens`` (per question, query stage), and the paired differences in F1 and USD
against the reference configuration (``rag`` by default) with their intervals; for a router run
(``auto``) its regret against the per-question oracle choice among its configurations
(:func:`router_regret`) and its place against the fixed configurations' frontier
(:func:`versus_fixed_frontier`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.cost import COST_SCALE
from ..core.jsonio import read_jsonl_objects, write_json_atomic
from ..eval.fallbacks import unrecorded_units
from ..eval.metrics import LOCOMO_EXCLUDED
from .page import write_page
from .stats import (
    amortized_qpc,
    bootstrap_ci,
    frontier_at,
    mixture_at,
    paired_diff_ci,
    pareto_front,
)
from .tables import (  # noqa: F401  (the table cells are also read from here)
    category_lines,
    delta_cell,
    interval,
    pareto_cell,
    render_markdown,
    summary_lines,
)

#: Strategies that read gold information (the upper anchor): reported, never in the Pareto set.
ANCHOR_STRATEGIES = frozenset({"oracle"})
CSV_FIELDS = (
    "label",
    "strategy",
    "status",
    "n",
    "f1",
    "f1_low",
    "f1_high",
    "evidence_recall",
    "judge_accuracy",
    "usd_x1e4_online",
    "construction_usd",
    "usd_x1e4_amortized",
    "qpc",
    "qpc_online",
    "proxy_s",
    "wall_s",
    "calls",
    "input_tokens",
    "output_tokens",
    "d_f1",
    "d_f1_low",
    "d_f1_high",
    "d_usd_x1e4",
    "d_usd_x1e4_low",
    "d_usd_x1e4_high",
    "pareto_cost",
    "pareto_latency",
    "anchor",
    "fallbacks",
    "regret_utility",
    "regret_f1",
    "oracle_f1",
    "frontier_ref",
    "d_f1_frontier",
    "d_f1_frontier_low",
    "d_f1_frontier_high",
    "above_frontier",
    "mix_f1",
    "d_f1_mix",
    "d_f1_mix_low",
    "d_f1_mix_high",
    "best_fixed_qpc_label",
    "best_fixed_qpc",
)


def _scored(rows: list[dict], dataset: str) -> list[dict]:
    if dataset == "locomo":
        return [r for r in rows if str(r.get("category")) not in LOCOMO_EXCLUDED]
    return rows


def _mean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else None


def load_run(run_dir: Path) -> tuple[dict, list[dict]]:
    """(summary, prediction rows) of one ``eval`` output folder; raises FileNotFoundError without a summary."""
    summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
    rows = [obj for _, obj in read_jsonl_objects(run_dir / "predictions.jsonl")]
    return summary, rows


def load_predictions(report: dict, run_dirs: Mapping[str, Path]) -> dict[str, list[dict]]:
    """The prediction rows of each finished configuration of ``report`` (label -> rows, read by
    :func:`load_run` from ``run_dirs[label]``, for the page's per-question view); a configuration
    whose folder is not given or cannot be read is left out."""
    out = {}
    for x in report["rows"]:
        d = run_dirs.get(x["label"])
        if x.get("status") != "ok" or d is None:
            continue
        try:
            out[x["label"]] = load_run(Path(d))[1]
        except (OSError, ValueError):
            continue
    return out


def config_row(
    label: str, strategy: str, summary: dict, rows: list[dict], ids: Sequence[str], *, seed: int = 0
) -> dict:
    """The frontier row of one configuration over the question ``ids`` (the shared set)."""
    dataset = summary.get("config", {}).get("dataset", "")
    by_id = {r["id"]: r for r in rows}
    use = _scored([by_id[i] for i in ids if i in by_id], dataset)
    n = len(use)
    f1, lo, hi = bootstrap_ci([r["f1"] for r in use], seed=seed) if use else (None, None, None)
    online = _mean([r.get("usd") for r in use])
    construction = sum(float(c.get("usd") or 0.0) for c in summary.get("construction", {}).values())
    total_q = summary.get("questions") or n
    q_usage = [r.get("usage", {}).get("by_stage", {}).get("query", {}) for r in use]
    row = {
        "label": label,
        "strategy": strategy,
        "status": "ok",
        "n": n,
        "f1": f1,
        "f1_low": lo,
        "f1_high": hi,
        "evidence_recall": _mean([r.get("evidence_recall") for r in use]),
        "judge_accuracy": _mean([1.0 if r["judge"] else 0.0 for r in use if r.get("judge") is not None]),
        "usd_x1e4_online": None if online is None else online * COST_SCALE,
        "construction_usd": construction,
        "usd_x1e4_amortized": None if online is None else (construction / max(total_q, 1) + online) * COST_SCALE,
        "qpc": amortized_qpc(f1, online, construction, total_q) if f1 is not None and online is not None else None,
        "qpc_online": amortized_qpc(f1, online, 0.0, 1) if f1 is not None and online is not None else None,
        "proxy_s": _mean([r.get("proxy_s") for r in use]),
        "wall_s": _mean([r.get("wall_s") for r in use]),
        "calls": _mean([u.get("calls", 0) for u in q_usage]),
        "input_tokens": _mean([u.get("input_tokens", 0) for u in q_usage]),
        "output_tokens": _mean([u.get("output_tokens", 0) for u in q_usage]),
        "per_category": {},
        "fallbacks": ", ".join(summary.get("fallbacks", {}).get("exceeded", [])),
        "unpriced_calls": sum(u.get("unpriced_calls", 0) for u in q_usage)
        + sum(int(c.get("unpriced_calls") or 0) for c in summary.get("construction", {}).values()),
        "provenance": summary.get("provenance", {}),
    }
    cats = sorted({str(r.get("category")) for r in use})
    for c in cats:
        vals = [r["f1"] for r in use if str(r.get("category")) == c]
        m, clo, chi = bootstrap_ci(vals, seed=seed)
        row["per_category"][c] = {"n": len(vals), "f1": m, "f1_low": clo, "f1_high": chi}
    if row["unpriced_calls"]:
        row["qpc"] = row["qpc_online"] = None  # an unpriced run has no QPC: printed "unpriced"
    return row


def refused_reason(fallbacks: dict) -> str:
    """Why a run's row is refused, from its summary's ``fallbacks``
    (:func:`~memfrontier.core.fallbacks.fallback_report`): each role above the threshold with its
    failed and fell-back calls, e.g. ``indexer: 34 of 73 calls fell back (47%); threshold 5%``."""
    parts = []
    for role in fallbacks["exceeded"]:
        v = fallbacks.get("by_role", {}).get(role)
        if not v:  # a summary without the shares names the role only
            parts.append(role)
            continue
        said = [f"{v['errors']} failed ({v['error_share']:.0%})"] if v.get("errors") else []
        said += [f"{v['fallbacks']} fell back ({v['fallback_share']:.0%})"] if v.get("fallbacks") else []
        top = f", top reason {v['top_rejection']}" if v.get("top_rejection") else ""
        parts.append(f"{role}: of {v['calls']} calls {' and '.join(said) or 'none failed'}{top}")
    threshold = fallbacks.get("threshold")
    return (
        "model calls failed or fell back above the threshold in "
        + "; ".join(parts)
        + (f" (threshold {threshold:.0%}; --allow-fallbacks keeps the row)" if threshold is not None else "")
    )


def build_report(runs: Sequence[dict], *, reference: str = "rag", seed: int = 0, allow_fallbacks: bool = False) -> dict:
    """The frontier over ``runs``: dicts with ``label``, ``strategy`` and either ``dir`` (an eval
    output folder) or ``status`` (why it did not run). Every configuration is scored on the questions
    that all finished configurations answered. A run whose error/fallback share of some role is above
    its threshold (``summary.json`` ``fallbacks.exceeded``) is not the configuration its label names:
    it is left off the frontier as "refused" unless ``allow_fallbacks``, and then its row names the
    roles. Returns ``{"rows", "question_ids", "reference", "notes"}``.
    """
    loaded = {}
    rows_out: list[dict] = []
    status: dict[str, str] = {}
    for r in runs:
        if r.get("dir") is None:
            continue
        try:
            run = load_run(Path(r["dir"]))
        except FileNotFoundError:
            status[r["label"]] = "no summary.json (run not finished)"
            continue
        fallbacks = run[0].get("fallbacks", {})
        if fallbacks.get("exceeded") and not allow_fallbacks:
            status[r["label"]] = f"refused: {refused_reason(fallbacks)}"
            continue
        loaded[r["label"]] = run
    finished = [r for r in runs if r["label"] in loaded]
    id_sets = [{x["id"] for x in loaded[r["label"]][1]} for r in finished]
    shared = sorted(set.intersection(*id_sets)) if id_sets else []
    notes = []
    if id_sets and any(len(s) != len(shared) for s in id_sets):
        notes.append(f"scored on the {len(shared)} questions every finished configuration answered")
    for r in runs:
        if r["label"] in loaded:
            summary, prows = loaded[r["label"]]
            rows_out.append(config_row(r["label"], r["strategy"], summary, prows, shared, seed=seed))
        else:
            why = status.get(r["label"]) or r.get("status") or "not run"
            rows_out.append({"label": r["label"], "strategy": r["strategy"], "status": why, "n": 0})
    ok = [x for x in rows_out if x["status"] == "ok" and x["f1"] is not None]
    shared_ids = set(shared)
    # each finished configuration's scored rows on the shared questions, and their F1 by question id
    scored = {
        x["label"]: _scored(
            [p for p in loaded[x["label"]][1] if p["id"] in shared_ids],
            loaded[x["label"]][0]["config"].get("dataset", ""),
        )
        for x in ok
    }
    f1_of = {label: {p["id"]: p["f1"] for p in rows} for label, rows in scored.items()}
    usd_of = {label: {p["id"]: (p.get("usd") or 0.0) * COST_SCALE for p in rows} for label, rows in scored.items()}
    ref = next((x for x in ok if x["label"] == reference), None)
    if ref is not None:
        for x in ok:
            d_f1 = paired_diff_ci(f1_of[x["label"]], f1_of[reference], seed=seed)
            d_usd = paired_diff_ci(usd_of[x["label"]], usd_of[reference], seed=seed)
            x.update(
                d_f1=d_f1["mean"],
                d_f1_low=d_f1["low"],
                d_f1_high=d_f1["high"],
                d_usd_x1e4=d_usd["mean"],
                d_usd_x1e4_low=d_usd["low"],
                d_usd_x1e4_high=d_usd["high"],
            )
    else:
        notes.append(f"reference configuration {reference!r} did not finish: no paired differences")
    # an anchor reads the gold evidence: it bounds the frontier from above but is no configuration a
    # user can deploy, so it is shown and never counted in (nor allowed to push others off) the Pareto set
    deployable = [x for x in ok if x["strategy"] not in ANCHOR_STRATEGIES]
    for x in ok:
        x["anchor"] = x["strategy"] in ANCHOR_STRATEGIES
        x["pareto_cost"] = x["pareto_latency"] = None if x["anchor"] else False
    # an unpriced run's USD counts its unpriced calls as free: it has no place on the cost front
    priced = [x for x in deployable if not x.get("unpriced_calls")]
    for x, pc in zip(priced, pareto_front([(x["usd_x1e4_amortized"], x["f1"]) for x in priced])):
        x["pareto_cost"] = pc
    for x in deployable:
        if x.get("unpriced_calls"):
            x["pareto_cost"] = None
    for x, pl in zip(deployable, pareto_front([(x["proxy_s"] or 0.0, x["f1"]) for x in deployable])):
        x["pareto_latency"] = pl
    fixed_rows = [x for x in deployable if x["strategy"] != "auto"]
    for x in ok:
        if x["strategy"] == "auto":
            fixed = {label: rows for label, (_, rows) in loaded.items() if label != x["label"]}
            x.update(router_regret(scored[x["label"]], fixed))
            x.update(versus_fixed_frontier(x, fixed_rows, f1_of, seed=seed))
    for label, (summary, _) in loaded.items():
        unknown = sum(int(c.get("windows_without_usage") or 0) for c in summary.get("construction", {}).values())
        if unknown:
            notes.append(
                f"{label}: construction cost incomplete, {unknown} index windows were built before their "
                "cost was recorded (its C(n) and QPC understate the cost)"
            )
        for units, blind in unrecorded_units(summary.get("construction", {}).values()).items():
            notes.append(
                f"{label}: {blind} {units} were built before their fallbacks were recorded; its "
                "fallback shares cover the others only"
            )
    answerers = {x["provenance"].get("answer_model") for x in ok}
    if len(answerers) > 1:
        notes.append(f"configurations used different answer models: {sorted(map(str, answerers))}")
    return {"rows": rows_out, "question_ids": shared, "reference": reference, "notes": notes}


def router_regret(auto_rows: list[dict], fixed: dict[str, list[dict]]) -> dict:
    """Regret of an ``auto`` run against the per-question oracle choice among the configurations
    its router chose from (the best of them on each question in hindsight), on ``auto_rows`` (its
    scored prediction rows). ``fixed``: label -> prediction rows of the frontier's other runs.

    Per question q, with the preference and scales the router decided under (its ``auto`` meta):
    U_c(q) = lambda_Q F1 / s_F1 - lambda_C USD / s_USD - lambda_L proxy_s / s_L
    (:func:`~memfrontier.strategies.auto.decision.utility`), realised. Returns ``regret_utility``
    (mean of max_c U_c(q) - U_auto(q)), ``regret_f1`` (mean of max_c F1_c(q) - F1_auto(q)),
    ``oracle_f1`` (mean of max_c F1_c(q)), ``oracle_choice_f1`` (mean F1 of the utility-best
    configuration), ``regret_n`` and ``regret_configurations``; or only ``regret_status`` saying why
    none was computed (configurations without rows on those questions, no routed rows).
    """
    from ..core.types import Preference
    from ..strategies.auto.decision import Scales, utility

    routed = [r for r in auto_rows if isinstance(r.get("strategy_meta"), dict) and "auto" in r["strategy_meta"]]
    if not routed:
        return {"regret_status": "no routed rows"}
    meta = routed[0]["strategy_meta"]["auto"]
    labels = sorted(set(meta["predictions"]) | set(meta.get("unbuilt", [])))
    by_label = {label: {p["id"]: p for p in fixed.get(label, [])} for label in labels}
    missing = [label for label in labels if not all(r["id"] in by_label[label] for r in routed)]
    if missing:
        return {"regret_status": f"no rows of {', '.join(missing)} on these questions"}
    reg_u, reg_f1, best_f1, choice_f1 = [], [], [], []
    for r in routed:
        m = r["strategy_meta"]["auto"]
        pref, scales = Preference(**m["preference"]), Scales(**m["scales"])
        rows = [by_label[label][r["id"]] for label in labels]
        u = [utility(p["f1"], p.get("usd") or 0.0, p.get("proxy_s") or 0.0, pref, scales) for p in rows]
        best = min(range(len(rows)), key=lambda j: (-u[j], rows[j].get("usd") or 0.0, rows[j].get("proxy_s") or 0.0))
        reg_u.append(u[best] - utility(r["f1"], r.get("usd") or 0.0, r.get("proxy_s") or 0.0, pref, scales))
        best_f1.append(max(p["f1"] for p in rows))
        reg_f1.append(best_f1[-1] - r["f1"])
        choice_f1.append(rows[best]["f1"])
    return {
        "regret_utility": _mean(reg_u),
        "regret_f1": _mean(reg_f1),
        "oracle_f1": _mean(best_f1),
        "oracle_choice_f1": _mean(choice_f1),
        "regret_n": len(routed),
        "regret_configurations": labels,
    }


def versus_fixed_frontier(
    auto: dict, fixed_rows: Sequence[dict], f1_of: dict[str, dict[str, float]], *, seed: int = 0
) -> dict:
    """Where a router row ``auto`` stands against the frontier of the fixed configurations
    (``fixed_rows``: finished, deployable, not routers; ``f1_of``: label -> question id -> F1). Rows
    with unpriced model calls (their USD counts those calls as free) take no part.

    The comparison point is the fixed frontier's value at the router's amortized cost
    (:func:`~memfrontier.frontier.stats.frontier_at` over C(n)×1e4 per question): the best F1 among
    the fixed configurations costing no more; when all cost more, the cheapest. Returns
    ``frontier_ref`` (its label), ``frontier_ref_within`` (whether it costs <= the router),
    ``d_f1_frontier`` with ``_low``/``_high`` (paired ΔF1, router minus it, 95% bootstrap),
    ``above_frontier`` (higher mean F1 at equal or lower cost: the point estimate; the interval says
    whether it is a measured statement), ``best_fixed_qpc_label``/``best_fixed_qpc`` (the highest
    QPC of the fixed configurations) and ``qpc_at_least_best`` (the router's QPC >= it; None when
    either is unpriced). The stricter baseline needs no router at all: a random mix of two fixed
    configurations at the same expected cost (:func:`~memfrontier.frontier.stats.mixture_at`, the
    upper concave hull): ``mix`` (``[[label, weight], ...]``, empty when the router costs less than
    every fixed configuration), ``mix_f1`` and ``d_f1_mix`` with ``_low``/``_high`` (paired against
    the mix's expected F1 per question). Empty when no fixed configuration finished or the router is
    unpriced (any of its calls, construction included).
    """
    points = {
        x["label"]: (x["usd_x1e4_amortized"], x["f1"])
        for x in fixed_rows
        if x.get("usd_x1e4_amortized") is not None and x.get("f1") is not None and not x.get("unpriced_calls")
    }
    if not points or auto.get("usd_x1e4_amortized") is None or auto.get("unpriced_calls"):
        return {}
    ref, within = frontier_at(auto["usd_x1e4_amortized"], points)
    d = paired_diff_ci(f1_of[auto["label"]], f1_of[ref], seed=seed)
    qpcs = {label: x["qpc"] for x in fixed_rows if (label := x["label"]) in points and x.get("qpc") is not None}
    best = max(qpcs, key=lambda label: (qpcs[label], label)) if qpcs else None
    mix = mixture_at(auto["usd_x1e4_amortized"], points)
    mixed = {}
    if mix:
        ids = set.intersection(*(set(f1_of[label]) for label, _ in mix))
        mix_rows = {i: sum(w * f1_of[label][i] for label, w in mix) for i in ids}
        dm = paired_diff_ci(f1_of[auto["label"]], mix_rows, seed=seed)
        mixed = {
            "mix_f1": sum(w * points[label][1] for label, w in mix),
            "d_f1_mix": dm["mean"],
            "d_f1_mix_low": dm["low"],
            "d_f1_mix_high": dm["high"],
        }
    return {
        "frontier_ref": ref,
        "frontier_ref_within": within,
        "d_f1_frontier": d["mean"],
        "mix": [[label, w] for label, w in mix],
        **mixed,
        "d_f1_frontier_low": d["low"],
        "d_f1_frontier_high": d["high"],
        "above_frontier": (auto["f1"] > points[ref][1]) if within else (auto["f1"] >= points[ref][1]),
        "best_fixed_qpc_label": best,
        "best_fixed_qpc": qpcs.get(best),
        "qpc_at_least_best": None if best is None or auto.get("qpc") is None else auto["qpc"] >= qpcs[best],
    }


def write_report(
    report: dict, out: Path, title: str = "frontier", run_dirs: Mapping[str, Path] | None = None
) -> dict[str, Path]:
    """Write ``frontier.{json,csv,md}``, the two plots and ``frontier.html`` (the page, with each
    finished configuration's answers read from ``run_dirs[label]``, default ``out/configs/<label>``)
    into ``out``; returns their paths (keys ``json``, ``csv``, ``md``, ``plot_cost``,
    ``plot_latency``, ``html``)."""
    from .plots import plot_frontier

    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "frontier.json", "csv": out / "frontier.csv", "md": out / "frontier.md"}
    write_json_atomic(paths["json"], report)
    with paths["csv"].open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for x in report["rows"]:
            w.writerow({k: x.get(k) for k in CSV_FIELDS})
    paths["md"].write_text(render_markdown(report, title), "utf-8")
    ok = [x for x in report["rows"] if x["status"] == "ok" and x.get("f1") is not None]
    if ok:
        paths.update(plot_frontier(ok, out, title))
    if run_dirs is None:
        run_dirs = {x["label"]: out / "configs" / x["label"] for x in report["rows"]}
    paths["html"] = write_page(report, load_predictions(report, run_dirs), out, title)
    return paths

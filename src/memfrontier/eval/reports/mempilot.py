"""MemPilot run statistics from ``predictions.jsonl`` (MemPilot Sec. 4.5 / App. A.4 Eq. 22 quantities).

Per question, averaged: quality (F1; judge accuracy when graded), USD and latency proxy of the
whole question (policy with KV-prefix reuse, delegates, and the decoupled answerer), delegate
calls (N_ext: attempted routed external calls), image accesses (images actually sent) and
requests, Retrieve and Curate counts, policy rounds, the share of format-valid trajectories
(Eq. 20); and the model-selection share: each route's share of all delegate calls. Costs are per
question (the paper's Eq. 22 divides cost by the number of conversations; we report the per-question
mean like every other strategy here).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ...core.jsonio import jsonl_lines
from ...strategies.mempilot.meta import MemPilotMeta
from ..metrics import token_f1

STAT_KEYS = ("delegate_calls", "image_accesses", "image_requests", "retrieve_calls", "curate_calls", "rounds")


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a predictions.jsonl (torn lines skipped). FileNotFoundError when missing."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no predictions file {p}")
    rows = []
    for line in jsonl_lines(p.read_text("utf-8")):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def run_stats(rows: list[dict]) -> dict:
    """Averages over the rows that carry MemPilot meta (:class:`MemPilotMeta`; see the module docstring)."""
    pairs = [(r, m) for r in rows if (m := MemPilotMeta.of_row(r)) is not None]
    rows, metas = [r for r, _ in pairs], [m for _, m in pairs]
    n = len(rows)
    routes = Counter(rt for m in metas for rt in m.routes)
    total = sum(routes.values())
    judged = [r["judge"] for r in rows if isinstance(r.get("judge"), (int, float))]
    out = {
        "n": n,
        "f1": _mean([r["f1"] for r in rows]),
        "judge": _mean([float(j) for j in judged]),
        "policy_answer_f1": _mean([token_f1(m.policy_answer or "", r.get("gold") or "") for r, m in zip(rows, metas)]),
        "usd_per_question": _mean([r["usd"] for r in rows]),
        "proxy_s_per_question": _mean([r["proxy_s"] for r in rows]),
        "format_valid_share": _mean([1.0 if m.format_valid else 0.0 for m in metas]),
        **{f"{k}_per_question": _mean([float(getattr(m, k)) for m in metas]) for k in STAT_KEYS},
        "route_share": {rt: c / total for rt, c in routes.most_common()},
        "route_models": {rt: model for m in metas for rt, model in m.route_models.items()},
    }
    return out


def stats_table(stats: dict, title: str = "MemPilot per question"):
    """A rich table of :func:`run_stats` (plus the model-selection share)."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in stats.items():
        if k in ("route_share", "route_models"):
            continue
        t.add_row(k, "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)))
    for rt, share in stats["route_share"].items():
        t.add_row(f"share {rt} ({stats['route_models'].get(rt, '?')})", f"{share:.2f}")
    return t


__all__ = ["STAT_KEYS", "read_rows", "run_stats", "stats_table"]

"""Cost and latency arithmetic from the papers, as pure functions.

- call cost: :meth:`memfrontier.core.pricebook.ModelPrice.usd` (MemoryCPT Eq. 4)
- trajectory latency proxy: :func:`trajectory_proxy_s` (MemPilot Eq. 18-19)
- amortized cost: :func:`amortized_cost_usd`, :func:`amortization_table` (MemoryCPT Eq. 3 / Eq. 20)
- quality per cost: :func:`qpc` (MemoryCPT Eq. 6)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

COST_SCALE = 1e4  # MemoryCPT reports cost as USD per question x 1e4


def trajectory_proxy_s(calls: Iterable[tuple[str, float]]) -> float:
    """Latency proxy of a trajectory in seconds; MemPilot Eq. 18-19.

    ``calls`` is an iterable of ``(parallel_stage_id, proxy_s)``. Calls that share a stage id ran
    in parallel and count as their maximum; stages run one after another and add up.
    """
    per_stage: dict[str, float] = {}
    for stage, seconds in calls:
        per_stage[stage] = max(per_stage.get(stage, 0.0), seconds)
    return sum(per_stage.values())


def amortized_cost_usd(construction_usd: float, n_queries: float, online_usd: float) -> float:
    """C(n) = C_construction / n + C_online, USD per query; MemoryCPT Eq. 3 / Eq. 20.

    ``n_queries`` may be ``math.inf`` (the online lower bound). Raises ValueError for n <= 0.
    """
    if not n_queries > 0:
        raise ValueError(f"n_queries must be positive, got {n_queries}")
    if math.isinf(n_queries):
        return online_usd
    return construction_usd / n_queries + online_usd


def amortization_table(construction_usd: float, online_usd: float, ns: Iterable[float]) -> dict[str, float]:
    """``{str(n): C(n)}`` (``"inf"`` for ``math.inf``), USD per query, for each n in ``ns`` in
    ascending order; MemoryCPT Eq. 20 / Table 10. ``construction_usd`` is the whole store's build
    (every conversation its questions are asked about), n the questions asked of it in all.
    Raises ValueError for an n <= 0."""
    return {
        ("inf" if math.isinf(n) else str(int(n))): amortized_cost_usd(construction_usd, n, online_usd)
        for n in sorted(set(ns))
    }


def qpc(f1: float, usd_per_question: float) -> float:
    """Quality per cost = F1 / (USD per question x 1e4); MemoryCPT Eq. 6.

    Returns ``inf`` for a zero cost with positive F1 and ``nan`` for 0/0, so that a free system
    is visible rather than silently scored.
    """
    cost = usd_per_question * COST_SCALE
    if cost == 0:
        return math.inf if f1 > 0 else math.nan
    return f1 / cost

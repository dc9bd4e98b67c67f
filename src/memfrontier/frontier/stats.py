"""Statistics of a frontier: percentile bootstrap intervals, paired differences, the Pareto set and
the amortized quality per cost.

- bootstrap interval of a mean ........................ :func:`bootstrap_ci` (Efron & Tibshirani 1993, percentile)
- paired difference of two configurations ............. :func:`paired_diff_ci` (resampling question ids jointly)
- Pareto set (max quality, min cost) .................. :func:`pareto_front`
- the frontier's value at a cost ...................... :func:`frontier_at`
- the best random mix of configurations at a cost ..... :func:`mixture_at` (upper concave hull)
- amortized QPC ....................................... :func:`amortized_qpc` (MemoryCPT Eq. 3, 5-6, App. C)

Every interval is seeded, so a report is reproducible; ``n_boot`` resamples (default 2,000).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..core.cost import COST_SCALE, amortized_cost_usd

N_BOOT = 2000
ALPHA = 0.05  # 95% intervals


def bootstrap_ci(
    values: Sequence[float], *, n_boot: int = N_BOOT, alpha: float = ALPHA, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` and its ``1 - alpha`` percentile bootstrap interval.

    Raises ValueError on an empty sequence. A single value gives a zero-width interval.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    means = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(lo), float(hi)


def paired_diff_ci(
    a: Mapping[str, float], b: Mapping[str, float], *, n_boot: int = N_BOOT, alpha: float = ALPHA, seed: int = 0
) -> dict:
    """Mean of ``a[q] - b[q]`` over the question ids both hold, with its bootstrap interval.

    ``a``/``b``: question id -> value (F1, USD...). Returns ``{"n", "mean", "low", "high"}``;
    ``n == 0`` (no shared question) gives None for the figures. The interval excludes 0 exactly when
    "A differs from B" is a measured statement at that level.
    """
    ids = sorted(set(a) & set(b))
    if not ids:
        return {"n": 0, "mean": None, "low": None, "high": None}
    mean, lo, hi = bootstrap_ci([a[i] - b[i] for i in ids], n_boot=n_boot, alpha=alpha, seed=seed)
    return {"n": len(ids), "mean": mean, "low": lo, "high": hi}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For ``(cost, quality)`` points, whether each is on the Pareto front: no other point has
    cost <= and quality >= with one of them strict. Ties (identical points) are all on the front."""
    flags = []
    for i, (c, q) in enumerate(points):
        dominated = any((c2 <= c and q2 >= q) and (c2 < c or q2 > q) for j, (c2, q2) in enumerate(points) if j != i)
        flags.append(not dominated)
    return flags


def frontier_at(cost: float, points: Mapping[str, tuple[float, float]]) -> tuple[str | None, bool]:
    """The point of a frontier that a configuration of ``cost`` must beat: among ``points``
    (label -> ``(cost, quality)``), the best quality at a cost <= ``cost`` (the frontier's step value
    there; ties: the cheaper, then the label). Returns ``(label, True)``; when every point costs more
    than ``cost``, the cheapest point and ``False`` (``cost`` is below the whole frontier); ``(None,
    False)`` for no points."""
    if not points:
        return None, False
    within = [(-q, c, label) for label, (c, q) in points.items() if c <= cost]
    if within:
        return min(within)[2], True
    return min((c, -q, label) for label, (c, q) in points.items())[2], False


def mixture_at(cost: float, points: Mapping[str, tuple[float, float]]) -> list[tuple[str, float]]:
    """The best random mix of configurations at an expected ``cost``: answering each question with
    configuration A with probability w, else B, costs and scores w·A + (1 − w)·B in expectation, so
    the achievable frontier is the upper concave hull of ``points`` (label -> ``(cost, quality)``),
    flat after its best-quality point. Returns ``[(label, weight), ...]`` (one or two entries, weights
    summing to 1) of the hull at ``cost``; ``[]`` when ``cost`` is below every point.
    """
    pts = sorted((c, -q, label) for label, (c, q) in points.items())
    hull: list[tuple[float, float, str]] = []  # (cost, quality, label), quality rising with cost
    for c, nq, label in pts:
        q = -nq
        if hull and q <= hull[-1][1]:
            continue  # costs at least as much for no more quality: never on the rising hull
        while len(hull) >= 2:
            (c1, q1, _), (c2, q2, _) = hull[-2], hull[-1]
            if (q2 - q1) * (c - c1) <= (q - q1) * (c2 - c1):  # hull[-1] on or below the chord: not a vertex
                hull.pop()
            else:
                break
        hull.append((c, q, label))
    if not hull or cost < hull[0][0]:
        return []
    if cost >= hull[-1][0]:
        return [(hull[-1][2], 1.0)]
    for (c1, _, a), (c2, _, b) in zip(hull, hull[1:]):
        if c1 <= cost <= c2:
            w = (c2 - cost) / (c2 - c1)
            return [(a, w), (b, 1.0 - w)] if 0.0 < w < 1.0 else [(a if w >= 1.0 else b, 1.0)]
    raise AssertionError("unreachable: cost lies within the hull's range")


def amortized_qpc(f1: float, online_usd_per_question: float, construction_usd: float, n_questions: int) -> float | None:
    """QPC with the construction cost spread over the questions answered from the store:
    F1 / (C(n) x 1e4), C(n) = C_construction / n + C_online (MemoryCPT Eq. 3, 5-6, App. C).

    Returns None when the cost is zero or unknown (a free or unpriced run has no QPC, never ``inf``).
    """
    if n_questions <= 0 or online_usd_per_question is None or math.isnan(online_usd_per_question):
        return None
    c_n = amortized_cost_usd(construction_usd, n_questions, online_usd_per_question)
    if c_n <= 0:
        return None
    return f1 / (c_n * COST_SCALE)

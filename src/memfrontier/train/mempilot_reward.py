"""MemPilot's rewards, as pure functions (arXiv 2610.06830). The cost, latency and format-gate
functions they read live with the strategy, in :mod:`memfrontier.strategies.mempilot.accounting`.

- gated task reward ................................................. :func:`task_reward` (Eq. 20)
- objective-wise advantage decoupling ............................... :func:`decoupled_advantages` (Eq. 9-10)
- prefix-based marginal-utility credit .............................. :func:`marginal_credit` (Eq. 12-13, Alg. 1)

Units: USD, seconds, tokens. Standard deviations are the unbiased sample std (ddof=1), as in the
reference GRPO implementation (verl); a group with fewer than two comparable samples gets
advantage 0 for that objective (nothing to compare against).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.types import Preference

EPS_NORM = 1e-6  # epsilon_norm of Eq. 9-10
ETA = 0.5  # marginal-utility weight eta (Table 5)


# ----------------------------------------------------------------------------- Eq. 20


def task_reward(quality: float, valid: bool) -> float:
    """r_task = Q(tau) if the gate passes, else -1 (Eq. 20). ``quality`` in [0, 1]."""
    return float(quality) if valid else -1.0


# ----------------------------------------------------------------------------- Eq. 9-10


@dataclass(frozen=True)
class Rewards:
    """One trajectory's objectives: answer quality Q in [0, 1], cost (USD), latency (s), gate g."""

    quality: float
    cost_usd: float
    latency_s: float
    valid: bool = True


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
    return m, math.sqrt(var)


def group_normalize(values: Sequence[float], mask: Sequence[bool] | None = None, eps: float = EPS_NORM) -> list[float]:
    """A_i = (r_i - mu) / (sigma + eps) over the entries with ``mask`` True (Eq. 9); masked-out
    entries get 0 and do not enter mu / sigma. Fewer than two active entries: all 0."""
    mask = [True] * len(values) if mask is None else list(mask)
    if len(mask) != len(values):
        raise ValueError("values and mask differ in length")
    active = [v for v, m in zip(values, mask) if m]
    if len(active) < 2:
        return [0.0] * len(values)
    mu, sigma = _mean_std(active)
    return [(v - mu) / (sigma + eps) if m else 0.0 for v, m in zip(values, mask)]


def decoupled_advantages(
    groups: Sequence[Sequence[Rewards]], preference: Preference, eps: float = EPS_NORM
) -> list[list[float]]:
    """Objective-wise decoupled advantages A_i^lambda (MemPilot Eq. 9-10).

    Per group (the G rollouts of one query): r^Q = :func:`task_reward` (gated, Eq. 20), r^C = -cost,
    r^L = -latency, each group-normalised on its own (Eq. 9); resource rewards of format-invalid
    trajectories are masked (advantage 0, excluded from the statistics; App. A.1). The combined
    lambda_Q A^Q + lambda_C A^C + lambda_L A^L is then normalised over the whole batch (Eq. 10).
    Returns advantages in the shape of ``groups``.
    """
    combined: list[list[float]] = []
    for g in groups:
        valid = [r.valid for r in g]
        a_q = group_normalize([task_reward(r.quality, r.valid) for r in g], eps=eps)
        a_c = group_normalize([-r.cost_usd for r in g], valid, eps)
        a_l = group_normalize([-r.latency_s for r in g], valid, eps)
        combined.append(
            [
                preference.quality * q + preference.cost * c + preference.latency * lat
                for q, c, lat in zip(a_q, a_c, a_l)
            ]
        )
    flat = [a for g in combined for a in g]
    if len(flat) < 2:
        return [[0.0] * len(g) for g in combined]
    mu, sigma = _mean_std(flat)
    return [[(a - mu) / (sigma + eps) for a in g] for g in combined]


# ----------------------------------------------------------------------------- Eq. 12-13


def marginal_credit(
    n_tokens: int,
    advantage: float,
    stage_spans: Sequence[tuple[int, int]],
    probe_scores: Sequence[float | None],
    *,
    eta: float = ETA,
    valid: bool = True,
) -> list[float]:
    """Stage-refined token advantages A~_{i,k} (MemPilot Eq. 12-13, App. A.3 Algorithm 1).

    ``stage_spans[t-1] = (start, end)``: the policy-token positions [start, end) of the decision that
    launched stage t (its reasoning and tool calls); ``probe_scores[t]`` = u_t, the quality of a greedy
    answer-only probe from the prefix after stage t (u_0: before the first stage), or None when that
    probe failed. Every token starts at ``advantage``; tokens of stage t get + eta (u_t - u_{t-1}).
    Unchanged when there is no stage, the trajectory is format-invalid or any probe failed.
    Raises ValueError when ``len(probe_scores) != len(stage_spans) + 1`` or a span is out of range.
    """
    out = [float(advantage)] * n_tokens
    if len(probe_scores) != len(stage_spans) + 1:
        raise ValueError(f"{len(stage_spans)} stages need {len(stage_spans) + 1} probe scores, got {len(probe_scores)}")
    for s, e in stage_spans:
        if not 0 <= s <= e <= n_tokens:
            raise ValueError(f"stage span ({s}, {e}) outside 0..{n_tokens}")
    if not stage_spans or not valid or any(u is None for u in probe_scores):
        return out
    for t, (s, e) in enumerate(stage_spans, start=1):
        delta = probe_scores[t] - probe_scores[t - 1]
        for k in range(s, e):
            out[k] += eta * delta
    return out


__all__ = ["EPS_NORM", "ETA", "Rewards", "decoupled_advantages", "group_normalize", "marginal_credit", "task_reward"]

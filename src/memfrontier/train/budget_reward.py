"""BudgetMem cost-aware reward (BudgetMem Eq. 7-10).

One question is one episode; its reward is

    r = r_task + lambda * alpha * r_cost                                   (Eq. 7)

- ``r_task`` in [0, 1]: the judge score or token F1 of the answer (the caller picks, by flag).
- ``c_raw`` (USD per question): the sum of the routed modules' call costs (Eq. 8); the answer
  and judge calls are not part of it.
- ``r_cost`` in [0, 1] (unitless, 1 = cheapest): :class:`CostNormalizer` (Eq. 9),
  ``1 - clip((sqrt(c_raw) - Q5) / (Q95 - Q5), 0, 1)`` with Q5 / Q95 the 5th / 95th percentiles
  of ``sqrt`` of a sliding window of recent raw costs.
- ``alpha`` (unitless): :class:`ScaleAligner` (Eq. 10), ``std(r_task) / (std(r_cost) + eps)``
  over recent training rewards; ``alpha = 1`` when reward-scale alignment is switched off.

Order per update batch (as in the paper's released code): the batch's raw costs enter the cost
window *before* its costs are normalised, and the batch's (r_task, r_cost) pairs enter the
alignment window *before* alpha is computed. :class:`BudgetRewardShaper` does exactly this.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Q_LOW_PCT = 5.0  # Eq. 9, Q5
Q_HIGH_PCT = 95.0  # Eq. 9, Q95


def _check_finite(name: str, values: Sequence[float]) -> list[float]:
    out = [float(v) for v in values]
    for v in out:
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
    return out


class CostNormalizer:
    """Sliding-window robust normalisation of raw cost into ``r_cost`` (BudgetMem Eq. 9).

    The window holds the last ``window`` raw costs in USD (non-negative). Quantiles are
    ``numpy.percentile(sqrt(window), [5, 95])`` with numpy's default ``"linear"`` method:
    for n sorted values ``v_0..v_{n-1}``, the p-th percentile sits at position ``h = p/100*(n-1)``
    and equals ``v_floor(h) + (h - floor(h)) * (v_floor(h)+1 - v_floor(h))``.

    Degenerate windows: when ``Q95 - Q5 <= eps`` (every cost alike, or a single value in the
    window) the spread carries no scale, and ``normalize`` returns the limit of Eq. 9 as the spread
    goes to 0: ``r_cost = 1`` if ``sqrt(c) <= Q5`` (no dearer than usual) else ``0``.
    An empty window (``normalize`` before any ``update``) raises ``ValueError``.
    """

    def __init__(self, window: int = 2000, eps: float = 1e-8) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = int(window)
        self.eps = float(eps)
        self._costs_usd: deque[float] = deque(maxlen=self.window)
        self._q: tuple[float, float] | None = None

    def __len__(self) -> int:
        return len(self._costs_usd)

    def update(self, raw_costs_usd: Sequence[float]) -> None:
        """Append a batch of raw costs (USD per question, >= 0); the oldest fall out of the window."""
        costs = _check_finite("raw cost", raw_costs_usd)
        if any(c < 0 for c in costs):
            raise ValueError(f"raw costs must be >= 0 USD, got {min(costs)}")
        self._costs_usd.extend(costs)
        self._q = None

    @property
    def quantiles(self) -> tuple[float, float]:
        """(Q5, Q95) of sqrt(raw cost USD) over the window, in sqrt(USD)."""
        if not self._costs_usd:
            raise ValueError("CostNormalizer window is empty: call update() with raw costs first")
        if self._q is None:
            roots = np.sqrt(np.fromiter(self._costs_usd, dtype=np.float64))
            q5, q95 = np.percentile(roots, [Q_LOW_PCT, Q_HIGH_PCT])
            self._q = (float(q5), float(q95))
        return self._q

    def normalize(self, raw_cost_usd: float) -> float:
        """``r_cost = 1 - clip((sqrt(c) - Q5) / (Q95 - Q5), 0, 1)`` in [0, 1] (Eq. 9)."""
        (c,) = _check_finite("raw cost", [raw_cost_usd])
        if c < 0:
            raise ValueError(f"raw cost must be >= 0 USD, got {c}")
        q5, q95 = self.quantiles
        root = math.sqrt(c)
        spread = q95 - q5
        if spread <= self.eps:
            return 1.0 if root <= q5 else 0.0
        c_tilde = (root - q5) / spread
        return 1.0 - min(max(c_tilde, 0.0), 1.0)


class ScaleAligner:
    """Reward-scale alignment factor ``alpha = std(r_task) / (std(r_cost) + eps)`` (Eq. 10).

    ``std`` is the population standard deviation (numpy default, ddof=0) over the last ``window``
    (r_task, r_cost) pairs. ``alpha = 1`` (no alignment) when ``enabled`` is False (the paper's
    ablation), with fewer than 2 pairs, or when either std is below ``min_std``: a constant term
    carries no learning signal, and the ratio would be 0 (switching the cost term off) or
    astronomically large (a huge constant offset in the reward).
    """

    def __init__(self, window: int = 2000, eps: float = 1e-8, enabled: bool = True, min_std: float = 1e-6) -> None:
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        self.window = int(window)
        self.eps = float(eps)
        self.enabled = bool(enabled)
        self.min_std = float(min_std)
        self._task: deque[float] = deque(maxlen=self.window)
        self._cost: deque[float] = deque(maxlen=self.window)

    def __len__(self) -> int:
        return len(self._task)

    def update(self, r_task: Sequence[float], r_cost: Sequence[float]) -> None:
        """Append a batch of per-question task rewards and cost rewards (equal lengths)."""
        task = _check_finite("r_task", r_task)
        cost = _check_finite("r_cost", r_cost)
        if len(task) != len(cost):
            raise ValueError(f"r_task and r_cost differ in length: {len(task)} != {len(cost)}")
        self._task.extend(task)
        self._cost.extend(cost)

    @property
    def alpha(self) -> float:
        """Current alpha (unitless)."""
        if not self.enabled or len(self._task) < 2:
            return 1.0
        std_task = float(np.std(np.fromiter(self._task, dtype=np.float64)))
        std_cost = float(np.std(np.fromiter(self._cost, dtype=np.float64)))
        if std_task < self.min_std or std_cost < self.min_std:
            return 1.0
        return std_task / (std_cost + self.eps)


def budget_reward(r_task: float, r_cost: float, lam: float, alpha: float) -> float:
    """``r = r_task + lam * alpha * r_cost`` (BudgetMem Eq. 7); lam >= 0 is the cost weight."""
    r = float(r_task) + float(lam) * float(alpha) * float(r_cost)
    if not math.isfinite(r):
        raise ValueError(f"reward is not finite: r_task={r_task}, r_cost={r_cost}, lam={lam}, alpha={alpha}")
    return r


@dataclass(frozen=True)
class ShapedBatch:
    """Per-question rewards of one update batch, with the pieces that made them."""

    rewards: list[float]
    r_task: list[float]
    r_cost: list[float]
    alpha: float
    lam: float


class BudgetRewardShaper:
    """Eq. 7-10 for a batch of questions, keeping the sliding windows across batches.

    ``shape(r_task, raw_costs_usd)``: costs enter the cost window, are normalised (Eq. 9), the
    (r_task, r_cost) pairs enter the alignment window, alpha is computed (Eq. 10, or 1 when
    ``align`` is False) and each reward is ``r_task + lam * alpha * r_cost`` (Eq. 7).
    """

    def __init__(self, lam: float, window: int = 2000, align: bool = True, eps: float = 1e-8) -> None:
        if lam < 0:
            raise ValueError(f"lambda (cost weight) must be >= 0, got {lam}")
        self.lam = float(lam)
        self.costs = CostNormalizer(window=window, eps=eps)
        self.aligner = ScaleAligner(window=window, eps=eps, enabled=align)

    def shape(self, r_task: Sequence[float], raw_costs_usd: Sequence[float]) -> ShapedBatch:
        task = _check_finite("r_task", r_task)
        if len(task) != len(raw_costs_usd):
            raise ValueError(f"r_task and raw costs differ in length: {len(task)} != {len(raw_costs_usd)}")
        self.costs.update(raw_costs_usd)
        r_cost = [self.costs.normalize(c) for c in raw_costs_usd]
        self.aligner.update(task, r_cost)
        alpha = self.aligner.alpha
        rewards = [budget_reward(t, c, self.lam, alpha) for t, c in zip(task, r_cost)]
        return ShapedBatch(rewards=rewards, r_task=task, r_cost=r_cost, alpha=alpha, lam=self.lam)

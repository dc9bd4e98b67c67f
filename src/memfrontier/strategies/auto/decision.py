"""The router's decision: which configuration answers a question, from predictions alone (no
model call).

For each configuration c the router predicts F1, USD, latency-proxy seconds and tokens per
question (:class:`Prediction`, with upper bounds for the three resources). The decision is

    c* = argmax_c  lambda_Q * F1_c / s_F1  -  lambda_C * USD_c / s_USD  -  lambda_L * proxy_s_c / s_L

over the configurations whose *upper* bounds fit the hard budget (:class:`~memfrontier.core.types.Budget`:
``max_usd``, ``max_tokens``, ``max_proxy_s``). lambda = (lambda_Q, lambda_C, lambda_L) is the preference
(:class:`~memfrontier.core.types.Preference`, presets ``perf`` / ``balanced`` / ``cost`` as in MemPilot,
Sec. 4.4). Normalisation: MemPilot standardises each objective before weighting it (Eq. 9-10); here
each objective is divided by its standard deviation ``s`` over the training frontier's records
(:class:`Scales`, stored in the router file). The mean of Eq. 9 is the same for every configuration
and drops out of the argmax; standardising over one question's candidates instead (Eq. 9 per group)
would ignore how large the gaps are (two candidates always get z = +-0.71).

Budget rules, in order:

1. configurations whose upper bounds fit every cap: the argmax above (rule ``argmax``);
2. none does: the cheapest configuration whose point predictions fit (lowest predicted USD, then
   proxy seconds, then tokens; rule ``cheapest_fitting``);
3. none does: :class:`~memfrontier.core.ledger.BudgetExceededError` naming the cheapest prediction
   and the caps.

Ties in utility go to the cheaper configuration (USD, then seconds), then to the router's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from ...core.ledger import BudgetExceededError
from ...core.types import Budget, Preference

Rule = Literal["argmax", "cheapest_fitting"]


@dataclass(frozen=True)
class Scales:
    """Per-objective scales s (standard deviations over the training records): F1 (0-1), USD per
    question, latency-proxy seconds per question. Each must be > 0 (ValueError)."""

    f1: float
    usd: float
    proxy_s: float

    def __post_init__(self) -> None:
        for name, v in asdict(self).items():
            if not v > 0:
                raise ValueError(f"scale {name} must be > 0, got {v}")


@dataclass(frozen=True)
class Prediction:
    """One configuration's predictions for one question: F1 in [0, 1], USD, latency-proxy seconds
    and tokens (input + output, query stage) per question, and upper bounds of the last three."""

    label: str
    f1: float
    usd: float
    proxy_s: float
    tokens: float
    usd_high: float
    proxy_s_high: float
    tokens_high: float


def utility(f1: float, usd: float, proxy_s: float, preference: Preference, scales: Scales) -> float:
    """lambda_Q F1 / s_F1 - lambda_C USD / s_USD - lambda_L proxy_s / s_L (dimensionless)."""
    return (
        preference.quality * f1 / scales.f1
        - preference.cost * usd / scales.usd
        - preference.latency * proxy_s / scales.proxy_s
    )


def within(budget: Budget, usd: float, proxy_s: float, tokens: float) -> bool:
    """Whether the three figures respect every cap of ``budget`` (None = no cap)."""
    return (
        (budget.max_usd is None or usd <= budget.max_usd)
        and (budget.max_proxy_s is None or proxy_s <= budget.max_proxy_s)
        and (budget.max_tokens is None or tokens <= budget.max_tokens)
    )


@dataclass(frozen=True)
class Decision:
    """The chosen configuration, the rule that chose it, and per configuration its utility and
    whether its upper bounds fit the budget."""

    label: str
    rule: Rule
    utilities: dict[str, float]
    fits: dict[str, bool]


def decide(
    predictions: Sequence[Prediction], preference: Preference, budget: Budget | None, scales: Scales
) -> Decision:
    """The configuration to run (see the module's rules).

    Raises:
        ValueError: no prediction given, or two with the same label.
        BudgetExceededError: no configuration's point predictions fit ``budget``.
    """
    if not predictions:
        raise ValueError("the router has no configuration to choose from")
    labels = [p.label for p in predictions]
    if len(set(labels)) != len(labels):
        raise ValueError(f"duplicate configuration labels: {labels}")
    budget = budget or Budget()
    util = {p.label: utility(p.f1, p.usd, p.proxy_s, preference, scales) for p in predictions}
    fits = {p.label: within(budget, p.usd_high, p.proxy_s_high, p.tokens_high) for p in predictions}
    order = {label: i for i, label in enumerate(labels)}
    candidates = [p for p in predictions if fits[p.label]]
    if candidates:
        best = min(candidates, key=lambda p: (-util[p.label], p.usd, p.proxy_s, order[p.label]))
        return Decision(best.label, "argmax", util, fits)
    point = [p for p in predictions if within(budget, p.usd, p.proxy_s, p.tokens)]
    if point:
        cheapest = min(point, key=lambda p: (p.usd, p.proxy_s, p.tokens, order[p.label]))
        return Decision(cheapest.label, "cheapest_fitting", util, fits)
    c = min(predictions, key=lambda p: (p.usd, p.proxy_s, p.tokens, order[p.label]))
    caps = ", ".join(f"{k}={v}" for k, v in budget.model_dump().items() if v is not None)
    raise BudgetExceededError(
        f"no configuration of the router is predicted to fit the budget ({caps}); the cheapest, {c.label}, is "
        f"predicted at {c.usd:.3g} USD, {c.proxy_s:.3g} s (latency proxy), {c.tokens:.0f} tokens per question"
    )


__all__ = ["Decision", "Prediction", "Rule", "Scales", "decide", "utility", "within"]

"""The ledger: every model call, with tokens, USD, latency proxy and wall time.

One :class:`Ledger` per question (or per construction job). Model clients never write it
directly: :class:`memfrontier.llm.metered.MeteredLLM` records each call into the ledger that is
current in the calling context (:func:`use_ledger`). Calls made inside ``with ledger.parallel():``
share one parallel stage and count as their maximum in the latency proxy (MemPilot Eq. 18).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from .cost import trajectory_proxy_s

Stage = Literal["construction", "query"]

_current: contextvars.ContextVar["Ledger | None"] = contextvars.ContextVar("memfrontier_ledger", default=None)
_stage: contextvars.ContextVar[Stage] = contextvars.ContextVar("memfrontier_stage", default="query")
_parallel: contextvars.ContextVar[str | None] = contextvars.ContextVar("memfrontier_parallel", default=None)
_ids = itertools.count(1)


class Call(BaseModel):
    """One model invocation. ``input_tokens`` includes ``cached_tokens``; ``output_tokens`` includes
    ``reasoning_tokens``. ``usd`` is None only when the model is unpriced (``unpriced=True``)."""

    stage: Stage
    role: str
    model_id: str
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    images: int = 0
    usd: float | None = 0.0
    usd_exact: bool = False  # True when the API returned the cost itself
    unpriced: bool = False
    proxy_s: float = 0.0
    wall_s: float = 0.0
    parallel_stage: str = ""
    error: str | None = None


class StageUsage(BaseModel):
    """Totals of one stage. Units in the names; ``proxy_s`` follows MemPilot Eq. 18-19."""

    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    usd: float = 0.0
    unpriced_calls: int = 0
    proxy_s: float = 0.0
    wall_s: float = 0.0


class Usage(BaseModel):
    """Usage of one answer by stage (``construction`` / ``query``) plus counted events (parse failures...)."""

    by_stage: dict[str, StageUsage] = Field(default_factory=dict)
    by_role: dict[str, StageUsage] = Field(default_factory=dict)
    events: dict[str, int] = Field(default_factory=dict)

    @property
    def query(self) -> StageUsage:
        return self.by_stage.get("query", StageUsage())

    @property
    def construction(self) -> StageUsage:
        return self.by_stage.get("construction", StageUsage())


def stage_totals(calls: list[Call]) -> StageUsage:
    return StageUsage(
        calls=len(calls),
        input_tokens=sum(c.input_tokens for c in calls),
        cached_tokens=sum(c.cached_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls),
        reasoning_tokens=sum(c.reasoning_tokens for c in calls),
        usd=sum(c.usd or 0.0 for c in calls),
        unpriced_calls=sum(1 for c in calls if c.unpriced),
        proxy_s=trajectory_proxy_s((c.parallel_stage, c.proxy_s) for c in calls),
        wall_s=sum(c.wall_s for c in calls),
    )


class Ledger:
    """An append-only list of :class:`Call` plus a counter of notable events."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.events: Counter[str] = Counter()

    # --- context -------------------------------------------------------------------------
    @contextlib.contextmanager
    def parallel(self):
        """Calls issued inside share one parallel stage (counted as their max, MemPilot Eq. 18)."""
        token = _parallel.set(f"p{next(_ids)}")
        try:
            yield
        finally:
            _parallel.reset(token)

    # --- writing -------------------------------------------------------------------------
    def record(self, call: Call) -> Call:
        if not call.parallel_stage:
            call.parallel_stage = _parallel.get() or f"s{next(_ids)}"
        self.calls.append(call)
        return call

    def count(self, event: str, n: int = 1) -> None:
        """Count a visible event (e.g. ``parse_error.answerer``, ``fallback.truncated_context``)."""
        self.events[event] += n

    # --- reading -------------------------------------------------------------------------
    def usage(self) -> Usage:
        stages: dict[str, list[Call]] = {}
        roles: dict[str, list[Call]] = {}
        for c in self.calls:
            stages.setdefault(c.stage, []).append(c)
            roles.setdefault(c.role, []).append(c)
        return Usage(
            by_stage={k: stage_totals(v) for k, v in stages.items()},
            by_role={k: stage_totals(v) for k, v in roles.items()},
            events=dict(self.events),
        )

    def usd(self, stage: Stage | None = None) -> float:
        return sum(c.usd or 0.0 for c in self.calls if stage is None or c.stage == stage)

    def proxy_s(self, stage: Stage | None = None) -> float:
        return trajectory_proxy_s((c.parallel_stage, c.proxy_s) for c in self.calls if stage is None or c.stage == stage)

    def extend(self, other: "Ledger") -> None:
        self.calls.extend(other.calls)
        self.events.update(other.events)


def current_ledger() -> Ledger | None:
    return _current.get()


def current_stage() -> Stage:
    return _stage.get()


@contextlib.contextmanager
def use_ledger(ledger: Ledger, stage: Stage = "query"):
    """Make ``ledger`` the current ledger (and ``stage`` the current stage) for this context."""
    t1, t2 = _current.set(ledger), _stage.set(stage)
    try:
        yield ledger
    finally:
        _stage.reset(t2)
        _current.reset(t1)

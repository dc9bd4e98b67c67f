"""The ledger: every model call, with tokens, USD, latency proxy and wall time.

One :class:`Ledger` per question (or per construction job). Model clients never write it
directly: :class:`memfrontier.llm.metered.MeteredLLM` records each call into the ledger that is
current in the calling context (:func:`use_ledger`); local compute (rules, routers, small
encoders) is recorded with :meth:`Ledger.record_local`, notable events with
:func:`count_event`, and each output of a role that was not used and replaced by something cheaper
with :func:`record_fallback` (a typed :class:`FallbackRecord`, read by the fallback gate,
:mod:`memfrontier.core.fallbacks`). Calls made inside ``with ledger.parallel():`` share one parallel stage and
count as their maximum in the latency proxy (MemPilot Eq. 18). ``with ledger.span(name) as s:``
gives a view ``s`` of the calls recorded inside the block (in this task and the tasks it starts),
so a module's or a trajectory's cost is read from the one account, never recomputed.

Hard budgets (:class:`~memfrontier.core.types.Budget`) are checked before a call is made:
:meth:`Ledger.would_exceed` compares the query-stage spend plus the calls in flight
(:meth:`Ledger.reserve`) plus a call's worst case against each cap.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import time
from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from .cost import trajectory_proxy_s
from .types import Budget

Stage = Literal["construction", "query"]

_current: contextvars.ContextVar["Ledger | None"] = contextvars.ContextVar("memfrontier_ledger", default=None)
_stage: contextvars.ContextVar[Stage] = contextvars.ContextVar("memfrontier_stage", default="query")
_parallel: contextvars.ContextVar[str | None] = contextvars.ContextVar("memfrontier_parallel", default=None)
_spans: contextvars.ContextVar[tuple["LedgerSpan", ...]] = contextvars.ContextVar("memfrontier_spans", default=())
_ids = itertools.count(1)


class BudgetExceededError(RuntimeError):
    """A call (or the smallest useful prompt) would break the caller's hard :class:`Budget`; every
    refusal is counted as a ``budget.call_refused.<role>`` event. ``usage``: the question's
    :class:`Usage` up to the refusal (what was spent before it, and the refusal's event), set by
    the facade (:meth:`memfrontier.api.AsyncMemory.answer`); None where the error is raised."""

    def __init__(self, message: str, usage: "Usage | None" = None):
        super().__init__(message)
        self.usage = usage


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
    priced_as: str | None = None  # the price-book id the call was priced as (None: unpriced or local)
    proxy_s: float = 0.0
    wall_s: float = 0.0
    parallel_stage: str = ""
    error: str | None = None
    flags: list[str] = Field(default_factory=list)  # e.g. ``provider_cost_rejected``, ``cached_tokens_clamped``
    #: when the call ended (UNIX seconds), set by :meth:`Ledger.record` when it is recorded; it began
    #: ``wall_s`` earlier (what a trace of the question shows: :mod:`memfrontier.integrations.otel`)
    ended_unix_s: float | None = None
    #: local work recorded as a call (:meth:`Ledger.record_local`: rules, a router), not a model call
    local: bool = False


class FallbackRecord(BaseModel):
    """One step of a fallback chain: ``role``'s output (a model call's, e.g. ``budgetmem.filter.high``,
    ``segmenter``, ``indexer``) was not used and the work fell to the next step of its chain.
    ``module``: the module or construction step whose execution fell back (``filter``, ``segmenter``);
    ``tier``: the tier that fell back (BudgetMem's ``low``/``mid``/``high``; None where there are no
    tiers); ``reason``: why its output was refused (e.g. ``empty``, ``wrong_count``,
    ``instruction_echo``, ``unparsable``, ``llm_error``; None when unknown); ``step``: 0 for the
    role the execution started at, 1 for the next one it fell to, and so on. One module execution
    counts as one fallback however many steps it recorded (the gate counts step 0)."""

    role: str
    module: str
    tier: str | None = None
    reason: str | None = None
    step: int = Field(default=0, ge=0)


class StageUsage(BaseModel):
    """Totals of one stage. Units in the names; ``proxy_s`` follows MemPilot Eq. 18-19."""

    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    usd: float = 0.0
    unpriced_calls: int = 0
    flagged_calls: int = 0
    priced_as: list[str] = Field(default_factory=list)  # distinct price-book ids, sorted
    proxy_s: float = 0.0
    wall_s: float = 0.0


#: The counters of :class:`StageUsage` that add up over calls and requests (usage totals by stage:
#: :meth:`memfrontier.api.AsyncMemory.usage`, the service's per-tenant totals).
USAGE_FIELDS = (
    "calls",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "reasoning_tokens",
    "usd",
    "unpriced_calls",
    "proxy_s",
    "wall_s",
)


class Usage(BaseModel):
    """Usage of one answer by stage (``construction`` / ``query``), counted events (parse
    failures...) and the fallback records of its calls (:class:`FallbackRecord`, in order)."""

    by_stage: dict[str, StageUsage] = Field(default_factory=dict)
    by_role: dict[str, StageUsage] = Field(default_factory=dict)
    events: dict[str, int] = Field(default_factory=dict)
    fallbacks: list[FallbackRecord] = Field(default_factory=list)

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
        flagged_calls=sum(1 for c in calls if c.flags),
        priced_as=sorted({c.priced_as for c in calls if c.priced_as}),
        proxy_s=trajectory_proxy_s((c.parallel_stage, c.proxy_s) for c in calls),
        wall_s=sum(c.wall_s for c in calls),
    )


def _spent(calls: list[Call]) -> tuple[float, int, float]:
    """(USD, input + output tokens, latency proxy seconds) of ``calls``."""
    return (
        sum(c.usd or 0.0 for c in calls),
        sum(c.input_tokens + c.output_tokens for c in calls),
        trajectory_proxy_s((c.parallel_stage, c.proxy_s) for c in calls),
    )


class LedgerSpan:
    """A read-only view of the calls a ledger recorded, and the events it counted, inside one
    ``with ledger.span(name):`` block (in the task that opened it and the tasks and threads started
    inside it; concurrent siblings outside the block are not included). Totals as
    :func:`stage_totals`."""

    def __init__(self, ledger: "Ledger", name: str):
        self.ledger = ledger
        self.name = name
        self.calls: list[Call] = []
        self.events: Counter[str] = Counter()
        self.fallbacks: list[FallbackRecord] = []

    def usage(self) -> StageUsage:
        return stage_totals(self.calls)

    def record_json(self) -> dict:
        """What a view stores with a unit it built (a MemoryCPT session, an AutoMEM window), so a
        build resumed over several runs still reports every unit: :meth:`usage`'s fields plus
        ``calls_by_role``, ``events`` and ``fallbacks`` (record dicts) (JSON-ready; summed over
        units with :func:`sum_usage_records`)."""
        return {
            **self.usage().model_dump(),
            "calls_by_role": dict(Counter(c.role for c in self.calls)),
            "events": dict(self.events),
            "fallbacks": [f.model_dump() for f in self.fallbacks],
        }

    def usd(self) -> float:
        """USD of the span's calls (unpriced calls count 0 and are flagged in :meth:`usage`)."""
        return sum(c.usd or 0.0 for c in self.calls)

    def proxy_s(self) -> float:
        """Latency proxy of the span's calls, seconds (MemPilot Eq. 18-19)."""
        return trajectory_proxy_s((c.parallel_stage, c.proxy_s) for c in self.calls)


class Ledger:
    """An append-only list of :class:`Call`, a counter of notable events and the
    :class:`FallbackRecord` s of the calls' outputs that were replaced."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.events: Counter[str] = Counter()
        self.fallbacks: list[FallbackRecord] = []
        self._reserved: list[tuple[float, int, float]] = []  # worst cases of the calls in flight

    # --- context -------------------------------------------------------------------------
    @contextlib.contextmanager
    def parallel(self):
        """Calls issued inside share one parallel stage (counted as their max, MemPilot Eq. 18)."""
        token = _parallel.set(f"p{next(_ids)}")
        try:
            yield
        finally:
            _parallel.reset(token)

    @contextlib.contextmanager
    def span(self, name: str):
        """``with ledger.span("budgetmem.filter") as s:`` -> :class:`LedgerSpan` ``s`` of the calls
        recorded inside the block (spans nest; each call lands in every open span of this ledger)."""
        view = LedgerSpan(self, name)
        token = _spans.set((*_spans.get(), view))
        try:
            yield view
        finally:
            _spans.reset(token)

    # --- writing -------------------------------------------------------------------------
    def record(self, call: Call) -> Call:
        if call.ended_unix_s is None:
            call.ended_unix_s = time.time()
        if not call.parallel_stage:
            call.parallel_stage = _parallel.get() or f"s{next(_ids)}"
        self.calls.append(call)
        for view in _spans.get():
            if view.ledger is self:
                view.calls.append(call)
        return call

    def record_local(self, role: str, wall_s: float, model_id: str = "local") -> Call:
        """Record non-LLM work (rules, a router, a small local encoder) as a call: $0, latency
        proxy 0, the measured ``wall_s`` seconds, in the current stage."""
        return self.record(
            Call(
                stage=current_stage(),
                role=role,
                model_id=model_id,
                usd=0.0,
                proxy_s=0.0,
                wall_s=max(float(wall_s), 1e-9),
                local=True,
            )
        )

    def count(self, event: str, n: int = 1) -> None:
        """Count a visible event (e.g. ``parse_error.answerer``, ``fallback.truncated_context``), in
        this ledger and in each of its open spans."""
        self.events[event] += n
        for view in _spans.get():
            if view.ledger is self:
                view.events[event] += n

    def fallback(
        self, *, role: str, module: str, tier: str | None = None, reason: str | None = None, step: int = 0
    ) -> FallbackRecord:
        """Record that ``role``'s output was replaced at ``step`` of its module's fallback chain
        (:class:`FallbackRecord`), in this ledger and in each of its open spans."""
        rec = FallbackRecord(role=role, module=module, tier=tier, reason=reason, step=step)
        self.fallbacks.append(rec)
        for view in _spans.get():
            if view.ledger is self:
                view.fallbacks.append(rec)
        return rec

    # --- hard budgets ----------------------------------------------------------------------
    def _committed(self, stage: Stage) -> tuple[float, int, float]:
        """(USD, tokens, proxy seconds) of ``stage``'s calls plus the worst cases of those in flight."""
        u, n, s = _spent([c for c in self.calls if c.stage == stage])
        for r_usd, r_n, r_s in self._reserved:
            u, n, s = u + r_usd, n + r_n, s + r_s
        return u, n, s

    def remaining(self, budget: Budget, stage: Stage = "query") -> Budget:
        """What is left of each cap of ``budget`` once ``stage``'s spend and the calls in flight are
        taken off (0 once a cap is reached; a cap that is None stays None)."""
        if budget.max_usd is None and budget.max_tokens is None and budget.max_proxy_s is None:
            return budget
        u, n, s = self._committed(stage)
        return Budget(
            max_usd=None if budget.max_usd is None else max(budget.max_usd - u, 0.0),
            max_tokens=None if budget.max_tokens is None else max(budget.max_tokens - n, 0),
            max_proxy_s=None if budget.max_proxy_s is None else max(budget.max_proxy_s - s, 0.0),
        )

    def exhausted(self, budget: Budget, stage: Stage = "query") -> bool:
        """Whether some cap of ``budget`` is used up by ``stage``'s spend and the calls in flight:
        no further paid call can fit it."""
        left = self.remaining(budget, stage)
        return any(cap is not None and cap <= 0 for cap in (left.max_usd, left.max_tokens, left.max_proxy_s))

    def would_exceed(
        self, budget: Budget, *, usd: float | None = 0.0, tokens: int = 0, proxy_s: float = 0.0, stage: Stage = "query"
    ) -> str | None:
        """The first cap of ``budget`` that ``stage``'s spend, plus the calls in flight, plus one
        more call costing at most ``usd`` / ``tokens`` (input + output) / ``proxy_s`` would
        exceed, as a message; None when all caps hold. ``usd=None`` (an unpriced call) breaks a
        USD cap, since its cost is unknown."""
        if budget.max_usd is None and budget.max_tokens is None and budget.max_proxy_s is None:
            return None
        u, n, s = self._committed(stage)
        if budget.max_usd is not None:
            if usd is None:
                return f"an unpriced call cannot be held to max_usd={budget.max_usd}"
            if u + usd > budget.max_usd:
                return f"spent ${u:.6g} + up to ${usd:.6g} would exceed max_usd={budget.max_usd}"
        if budget.max_tokens is not None and n + tokens > budget.max_tokens:
            return f"spent {n} + up to {tokens} tokens would exceed max_tokens={budget.max_tokens}"
        if budget.max_proxy_s is not None and s + proxy_s > budget.max_proxy_s:
            return f"spent {s:.4g} s + up to {proxy_s:.4g} s would exceed max_proxy_s={budget.max_proxy_s}"
        return None

    @contextlib.contextmanager
    def reserve(self, usd: float, tokens: int, proxy_s: float):
        """Hold a call's worst case against the budget while it runs (concurrent calls see it)."""
        item = (usd, tokens, proxy_s)
        self._reserved.append(item)
        try:
            yield
        finally:
            self._reserved.remove(item)

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
            fallbacks=list(self.fallbacks),
        )

    def usd(self, stage: Stage | None = None) -> float:
        return sum(c.usd or 0.0 for c in self.calls if stage is None or c.stage == stage)

    def proxy_s(self, stage: Stage | None = None) -> float:
        return trajectory_proxy_s(
            (c.parallel_stage, c.proxy_s) for c in self.calls if stage is None or c.stage == stage
        )

    def extend(self, other: "Ledger") -> None:
        self.calls.extend(other.calls)
        self.events.update(other.events)
        self.fallbacks.extend(other.fallbacks)


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


def count_event(event: str, n: int = 1) -> None:
    """Count ``event`` in the current ledger; a no-op outside :func:`use_ledger`."""
    ledger = _current.get()
    if ledger is not None:
        ledger.count(event, n)


def record_fallback(
    *, role: str, module: str, tier: str | None = None, reason: str | None = None, step: int = 0
) -> None:
    """:meth:`Ledger.fallback` on the current ledger; a no-op outside :func:`use_ledger`."""
    ledger = _current.get()
    if ledger is not None:
        ledger.fallback(role=role, module=module, tier=tier, reason=reason, step=step)


def sum_usage_records(records) -> dict:
    """Key-wise sum of stored usage records (dicts such as :meth:`StageUsage.model_dump` plus
    counters): numbers are added (booleans skipped), dict values (``calls_by_role``, ``events``)
    are added key by key, the ``fallbacks`` record lists are concatenated, anything else is
    dropped. Returns a new dict; ``{}`` for no records."""
    total: dict = {}
    for rec in records:
        for key, v in rec.items():
            if key == "fallbacks" and isinstance(v, list):
                total.setdefault(key, []).extend(v)
            elif isinstance(v, dict):
                acc = total.setdefault(key, {})
                for k, n in v.items():
                    acc[k] = acc.get(k, 0) + n
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                total[key] = total.get(key, 0) + v
    return total

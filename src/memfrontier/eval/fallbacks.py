"""Eval's side of the fallback gate: stopping a memory construction that is bound to end above the
threshold (:func:`doomed_build`) and counting units built before their failures were recorded
(:func:`unrecorded_units`). The shares and the refusal themselves are
:mod:`memfrontier.core.fallbacks`' (re-exported here)."""

from __future__ import annotations

from typing import Iterable

from ..core.fallbacks import DEFAULT_THRESHOLD, FallbackError, exceeded_message, fallback_report, why

__all__ = [
    "DEFAULT_THRESHOLD",
    "DOOM_MARGIN",
    "FallbackError",
    "doomed_build",
    "fallback_report",
    "exceeded_message",
    "unrecorded_units",
    "why",
]

#: How far a construction's failures must exceed the threshold of its projected calls before it is
#: stopped (the projection assumes the work left costs what the work done did; the margin covers
#: work that costs more).
DOOM_MARGIN = 1.5


def doomed_build(
    entry: dict,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    growth: float,
    future: float = 1.0,
    settled: Iterable[dict] = (),
) -> str | None:
    """Why a run's memory construction under way is bound to end above ``threshold``, or None.

    ``entry``: the counts of the conversation being built, this run's calls so far
    (``calls_by_role``, ``events``, ``call_errors``, as :func:`fallback_report` reads them);
    ``settled``: final counts of what else the run's construction holds (conversations built before
    this one, units of this one built by earlier runs). Calls are projected to the end of the run's
    construction as ``(settled + entry x growth) x future``: ``growth`` = 1 + units left / units this
    run has built of this conversation, ``future`` = 1 + turns of the conversations still to build /
    turns of those built and this one. A role's failures (errors or fallbacks, whichever is more) only
    grow; when they already exceed ``threshold x DOOM_MARGIN`` of that projection, the finished
    construction's share would be above the threshold unless the rest costs far more per unit, and
    building on only spends calls on a run that will be refused. Returns one line naming the role,
    its counts and why (its first error or most frequent refusal)."""
    now = fallback_report([], threshold, construction=[entry])["by_role"]
    before = fallback_report([], threshold, construction=list(settled))["by_role"]
    zero = {"calls": 0, "errors": 0, "fallbacks": 0}
    worst = None
    for role in now:
        a, b = now[role], before.get(role, zero)
        errors, fallbacks, calls = a["errors"] + b["errors"], a["fallbacks"] + b["fallbacks"], a["calls"] + b["calls"]
        failed = max(errors, fallbacks)
        projected = (b["calls"] + a["calls"] * growth) * future
        if failed and failed > threshold * DOOM_MARGIN * projected and (worst is None or failed / projected > worst[0]):
            worst = (
                failed / projected,
                role,
                a,
                failed,
                calls,
                projected,
                "failed" if errors >= fallbacks else "fell back",
            )
    if worst is None:
        return None
    _, role, a, failed, calls, projected, what = worst
    reason = why(a)
    return (
        f"role {role!r}: {failed} of its {calls} calls so far {what}, already {failed / projected:.0%} of the "
        f"~{projected:.0f} calls the run's memory construction would make; threshold {threshold:.0%}"
        + (f". First error: {reason}" if reason else "")
    )


#: Construction-entry counters of units built before units recorded their calls and failures, and
#: what those units are (MemoryCPT sessions, AutoMEM index windows).
UNRECORDED_KEYS = (("sessions_without_events", "memory sessions"), ("windows_without_events", "index windows"))


def unrecorded_units(construction: Iterable[dict]) -> dict[str, int]:
    """``{units: n}`` over a summary's construction entries (only the nonzero ones): units built
    before they recorded their calls and failures, whose fallbacks the shares therefore miss."""
    built = list(construction)
    counts = {units: sum(int(c.get(key) or 0) for c in built) for key, units in UNRECORDED_KEYS}
    return {units: n for units, n in counts.items() if n}

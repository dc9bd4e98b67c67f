"""Per-run error and fallback shares by role, so a degraded run is never reported as the
configuration that was asked for.

Read from the ledgers as the runner stores them: each question's row (``usage.by_role``,
``usage.events``, ``call_errors``) and, when given, each conversation's offline construction
(``calls_by_role``, ``events``, ``call_errors``: this run's, plus earlier runs' when the view
records them, as MemoryCPT's bank does):

* an **error** of role R is a model call of R that failed for good (event ``llm_error.R``,
  counted by :class:`~memfrontier.llm.metered.MeteredLLM` or by a strategy for a call it makes
  itself);
* a **fallback** of R is an output of R that was not used and replaced by something cheaper
  (events ``fallback.X`` / ``NS.fallback.X`` / ``X.fallback``; ``X`` is matched to the role that
  is ``X`` or ends in ``.X``, e.g. BudgetMem's ``fallback.filter.high`` -> ``budgetmem.filter.high``,
  MemoryCPT's ``memorycpt.fallback.segmenter`` -> ``segmenter``).

A role's share is errors (resp. fallbacks) over its calls, retries included (an output refused, retried
and refused again is two calls and one fallback: the share of outputs that fell back is up to twice
it for a role that retries; near the threshold retries are few and the two agree); a role with more failures than
recorded calls (calls a strategy does not meter, module-cache hits that replay a fallback)
counts its failures as its calls, so a share never exceeds 1. A run **exceeds** the threshold
when any role's error or fallback share is above it.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

__all__ = ["DEFAULT_THRESHOLD", "DOOM_MARGIN", "FallbackError", "doomed_build", "fallback_report", "exceeded_message", "unrecorded_units", "why"]

#: Share of a role's calls that may fail or fall back before a run is refused (5 %).
DEFAULT_THRESHOLD = 0.05


class FallbackError(RuntimeError):
    """The run's error or fallback share of some role is above the threshold. ``summary`` is the
    run's summary (already written to ``summary.json``), or None when the run was stopped while it
    built its memory, before it had one (:func:`doomed_build`)."""

    def __init__(self, message: str, summary: dict | None):
        super().__init__(message)
        self.summary = summary


#: How far a construction's failures must exceed the threshold of its projected calls before it is
#: stopped (the projection assumes the work left costs what the work done did; the margin covers
#: work that costs more).
DOOM_MARGIN = 1.5


def doomed_build(entry: dict, threshold: float = DEFAULT_THRESHOLD, *, growth: float, future: float = 1.0,
                 settled: Iterable[dict] = ()) -> str | None:
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
            worst = (failed / projected, role, a, failed, calls, projected, "failed" if errors >= fallbacks else "fell back")
    if worst is None:
        return None
    _, role, a, failed, calls, projected, what = worst
    reason = why(a)
    return (f"role {role!r}: {failed} of its {calls} calls so far {what}, already {failed / projected:.0%} of the "
            f"~{projected:.0f} calls the run's memory construction would make; threshold {threshold:.0%}"
            + (f". First error: {reason}" if reason else ""))


def _fallback_key(event: str) -> str | None:
    """What a fallback event names: ``X`` of ``fallback.X``, ``NS.fallback.X`` (a strategy's own
    namespace, e.g. MemoryCPT's ``memorycpt.fallback.segmenter``) or ``X.fallback``; None for
    any other event."""
    parts = event.split(".")
    if "fallback" not in parts:
        return None
    i = parts.index("fallback")
    key = ".".join(parts[i + 1:]) if i + 1 < len(parts) else ".".join(parts[:i])
    return key or None


def _role_of(key: str, roles: set[str]) -> str:
    """The one role that is ``key`` or ends in ``.key``; else ``key`` itself."""
    if key in roles:
        return key
    hits = [r for r in roles if r.endswith("." + key)]
    return hits[0] if len(hits) == 1 else key


def fallback_report(rows: Iterable[dict], threshold: float = DEFAULT_THRESHOLD, *,
                    construction: Iterable[dict] = ()) -> dict:
    """Error and fallback shares per role over the run's result ``rows`` and its
    ``construction`` entries (the summary's per-conversation construction dicts).

    Returns ``{"threshold": float, "by_role": {role: {"calls", "errors", "fallbacks",
    "error_share", "fallback_share", "first_error", "top_rejection"}}, "exceeded": [role, ...]}``
    with roles sorted by name, shares in [0, 1], ``first_error`` the message of the first failed
    call of the role (None when no message was recorded) and ``top_rejection`` its most frequent
    output refusal (:func:`_top_rejection`). ``exceeded`` lists the roles whose error or
    fallback share is above ``threshold``, worst first. Raises ValueError for a threshold outside
    [0, 1].
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"fallback threshold must be in [0, 1], not {threshold}")
    built = [{"usage": {"by_role": {r: {"calls": n} for r, n in (c.get("calls_by_role") or {}).items()},
                        "events": c.get("events") or {}}, "call_errors": c.get("call_errors") or ()}
             for c in construction]
    rows = [*rows, *built]
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    fallback_keys: Counter[str] = Counter()
    rejections: Counter[str] = Counter()
    first_error: dict[str, str] = {}
    meta_errors: list[tuple[str, str]] = []
    for r in rows:
        usage = r.get("usage") or {}
        for role, st in (usage.get("by_role") or {}).items():
            calls[role] += int(st.get("calls", 0))
        for ev, n in (usage.get("events") or {}).items():
            if ev.startswith("llm_error."):
                errors[ev[len("llm_error."):]] += int(n)
            elif (key := _fallback_key(ev)) is not None:
                fallback_keys[key] += int(n)
            elif "rejected" in ev:
                rejections[ev] += int(n)
        for e in r.get("call_errors") or ():
            first_error.setdefault(e["role"], e["error"])
        meta = r.get("strategy_meta")
        if isinstance(meta, dict):  # a strategy that makes a call itself notes its error as ROLE_error
            meta_errors += [(k[: -len("_error")], v) for k, v in meta.items() if k.endswith("_error") and isinstance(v, str) and v]
    roles = set(calls) | set(errors)
    fallbacks: Counter[str] = Counter()
    for key, n in fallback_keys.items():
        fallbacks[_role_of(key, roles)] += n
    for role, msg in meta_errors:
        if role in errors:
            first_error.setdefault(role, msg)
    by_role = {}
    for role in sorted(roles | set(fallbacks)):
        n = max(calls[role], errors[role], fallbacks[role])
        by_role[role] = {
            "calls": n, "errors": errors[role], "fallbacks": fallbacks[role],
            "error_share": errors[role] / n if n else 0.0,
            "fallback_share": fallbacks[role] / n if n else 0.0,
            "first_error": first_error.get(role),
            "top_rejection": _top_rejection(role, rejections),
        }
    worst = sorted(((max(v["error_share"], v["fallback_share"]), role) for role, v in by_role.items()), reverse=True)
    return {"threshold": threshold, "by_role": by_role, "exceeded": [role for share, role in worst if share > threshold]}


def _top_rejection(role: str, rejections: Counter[str]) -> str | None:
    """The most frequent refusal of ``role``'s outputs, ``"EVENT (N)"``, from the events that say
    ``rejected`` and name the role: its dotted parts after its namespace, in a row (MemoryCPT's role
    ``episode_generator`` in ``memorycpt.content_rejected.episode_generator.instruction_echo``,
    BudgetMem's ``budgetmem.summary.low`` in ``output_rejected.summary.low.empty``: the reason its
    outputs were refused before they fell back); the most specific (longest) event among equal
    counts; None when none was counted."""
    parts = role.split(".")
    name = parts[1:] if len(parts) > 1 else parts
    k = len(name)

    def names_role(event: str) -> bool:
        ev = event.split(".")
        return any(ev[i:i + k] == name for i in range(len(ev) - k + 1))

    hits = [(n, len(ev), ev) for ev, n in rejections.items() if names_role(ev)]
    if not hits:
        return None
    n, _, ev = max(hits)
    return f"{ev} ({n})"


def why(v: dict) -> str | None:
    """What went wrong with a role (a :func:`fallback_report` entry): its first call error, else its
    most frequent output refusal; None when neither was recorded."""
    return v.get("first_error") or (f"outputs refused, most often {v['top_rejection']}" if v.get("top_rejection") else None)


def exceeded_message(report: dict) -> str | None:
    """One line naming the worst role above the threshold, its shares and first error; None when
    no role is above it."""
    if not report.get("exceeded"):
        return None
    role = report["exceeded"][0]
    v = report["by_role"][role]
    others = len(report["exceeded"]) - 1
    first = why(v) or f"no message recorded (events llm_error.{role} / fallback)"
    return (f"role {role!r}: {v['errors']} of {v['calls']} calls failed ({v['error_share']:.0%}), "
            f"{v['fallbacks']} fell back ({v['fallback_share']:.0%}); threshold {report['threshold']:.0%}"
            + (f"; {others} more role(s) above it" if others else "")
            + f". First error: {first}. Pass --allow-fallbacks to keep such a run.")


#: Construction-entry counters of units built before units recorded their calls and failures, and
#: what those units are (MemoryCPT sessions, AutoMEM index windows).
UNRECORDED_KEYS = (("sessions_without_events", "memory sessions"), ("windows_without_events", "index windows"))


def unrecorded_units(construction: Iterable[dict]) -> dict[str, int]:
    """``{units: n}`` over a summary's construction entries (only the nonzero ones): units built
    before they recorded their calls and failures, whose fallbacks the shares therefore miss."""
    built = list(construction)
    counts = {units: sum(int(c.get(key) or 0) for c in built) for key, units in UNRECORDED_KEYS}
    return {units: n for units, n in counts.items() if n}

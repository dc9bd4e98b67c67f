"""The fallback gate: per-role error and fallback shares of a run or a build, and the refusal of
one whose share of some role is above a threshold, so a degraded memory is never served or
reported as the configuration that was asked for.

Read from ledger rows (a question's ``usage`` -> ``by_role``, ``events``, ``fallbacks``, plus
``call_errors`` and ``strategy_meta``) and construction entries (``calls_by_role``, ``events``,
``fallbacks``, ``call_errors``):

* an **error** of role R is a model call of R that failed for good (event ``llm_error.R``,
  counted by :class:`~memfrontier.llm.metered.MeteredLLM` or by a strategy for a call it makes
  itself);
* a **fallback** of R is a :class:`~memfrontier.core.ledger.FallbackRecord` of role R at step 0 of
  its chain: one module execution whose output of R was not used and was replaced by something
  cheaper. An execution that fell further (BudgetMem High -> Mid -> rules) records one record per
  step; only the first counts, so it is one fallback however far down its chain it fell.

A role's share is errors (resp. fallbacks) over its calls, retries included; a role with more
failures than recorded calls (calls a strategy does not meter, cache hits that replay a fallback)
counts its failures as its calls, so a share never exceeds 1. A run **exceeds** the threshold when
any role's error or fallback share is above it.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

__all__ = ["DEFAULT_THRESHOLD", "FallbackError", "fallback_report", "exceeded_message", "why"]

#: Share of a role's calls that may fail or fall back before a run or a build is refused (5 %).
DEFAULT_THRESHOLD = 0.05


class FallbackError(RuntimeError):
    """Some role's error or fallback share is above the threshold. ``summary`` is an eval run's
    summary (already written to ``summary.json``), or None when no summary was written (a build
    stopped or refused); ``report`` is the :func:`fallback_report` that was refused, when known;
    ``usage`` the refused build's :class:`~memfrontier.core.ledger.Usage` (its calls were made), when
    known."""

    def __init__(self, message: str, summary: dict | None = None, *, report: dict | None = None, usage=None):
        super().__init__(message)
        self.summary = summary
        self.report = report if report is not None else (summary or {}).get("fallbacks")
        self.usage = usage


def _fallback_records(records) -> list[dict]:
    """Fallback records as dicts (a row's ``usage.fallbacks`` or an entry's ``fallbacks``)."""
    return [r if isinstance(r, dict) else r.model_dump() for r in records or ()]


def fallback_report(
    rows: Iterable[dict], threshold: float = DEFAULT_THRESHOLD, *, construction: Iterable[dict] = ()
) -> dict:
    """Error and fallback shares per role over result ``rows`` and ``construction`` entries.

    Returns ``{"threshold": float, "by_role": {role: {"calls", "errors", "fallbacks",
    "error_share", "fallback_share", "first_error", "top_rejection"}}, "exceeded": [role, ...]}``
    with roles sorted by name, shares in [0, 1], ``first_error`` the message of the first failed
    call of the role (None when none was recorded) and ``top_rejection`` the most frequent reason
    of its fallbacks, ``"REASON (N)"`` (None when none was given). ``exceeded`` lists the roles
    whose error or fallback share is above ``threshold``, worst first. Raises ValueError for a
    threshold outside [0, 1].
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"fallback threshold must be in [0, 1], not {threshold}")
    built = [
        {
            "usage": {
                "by_role": {r: {"calls": n} for r, n in (c.get("calls_by_role") or {}).items()},
                "events": c.get("events") or {},
                "fallbacks": c.get("fallbacks") or [],
            },
            "call_errors": c.get("call_errors") or (),
        }
        for c in construction
    ]
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    reasons: dict[str, Counter[str]] = {}
    first_error: dict[str, str] = {}
    meta_errors: list[tuple[str, str]] = []
    for r in [*rows, *built]:
        usage = r.get("usage") or {}
        for role, st in (usage.get("by_role") or {}).items():
            calls[role] += int(st.get("calls", 0))
        for ev, n in (usage.get("events") or {}).items():
            if ev.startswith("llm_error."):
                errors[ev[len("llm_error.") :]] += int(n)
        for f in _fallback_records(usage.get("fallbacks")):
            if int(f.get("step", 0)) == 0:  # one module execution, however far down its chain it fell
                fallbacks[f["role"]] += 1
                if f.get("reason"):
                    reasons.setdefault(f["role"], Counter())[f["reason"]] += 1
        for e in r.get("call_errors") or ():
            first_error.setdefault(e["role"], e["error"])
        meta = r.get("strategy_meta")
        if isinstance(meta, dict):  # a strategy that makes a call itself notes its error as ROLE_error
            meta_errors += [
                (k[: -len("_error")], v) for k, v in meta.items() if k.endswith("_error") and isinstance(v, str) and v
            ]
    for role, msg in meta_errors:
        if role in errors:
            first_error.setdefault(role, msg)
    by_role = {}
    for role in sorted(set(calls) | set(errors) | set(fallbacks)):
        n = max(calls[role], errors[role], fallbacks[role])
        top = reasons.get(role)
        reason, count = max(top.items(), key=lambda kv: (kv[1], kv[0])) if top else (None, 0)
        by_role[role] = {
            "calls": n,
            "errors": errors[role],
            "fallbacks": fallbacks[role],
            "error_share": errors[role] / n if n else 0.0,
            "fallback_share": fallbacks[role] / n if n else 0.0,
            "first_error": first_error.get(role),
            "top_rejection": f"{reason} ({count})" if reason else None,
        }
    worst = sorted(((max(v["error_share"], v["fallback_share"]), role) for role, v in by_role.items()), reverse=True)
    return {
        "threshold": threshold,
        "by_role": by_role,
        "exceeded": [role for share, role in worst if share > threshold],
    }


def why(v: dict) -> str | None:
    """What went wrong with a role (a :func:`fallback_report` entry): its first call error, else the
    most frequent reason of its fallbacks; None when neither was recorded."""
    return v.get("first_error") or (
        f"outputs refused, most often {v['top_rejection']}" if v.get("top_rejection") else None
    )


#: What a refused eval run tells its caller to do (the end of :func:`exceeded_message`).
EVAL_ADVICE = "Pass --allow-fallbacks to keep such a run."


def exceeded_message(report: dict, advice: str = EVAL_ADVICE) -> str | None:
    """One line naming the worst role above the threshold, its shares and first error, ending with
    ``advice`` (what the refused caller can do); None when no role is above it."""
    if not report.get("exceeded"):
        return None
    role = report["exceeded"][0]
    v = report["by_role"][role]
    others = len(report["exceeded"]) - 1
    first = why(v) or f"no message recorded (events llm_error.{role} / fallback records)"
    return (
        f"role {role!r}: {v['errors']} of {v['calls']} calls failed ({v['error_share']:.0%}), "
        f"{v['fallbacks']} fell back ({v['fallback_share']:.0%}); threshold {report['threshold']:.0%}"
        + (f"; {others} more role(s) above it" if others else "")
        + f". First error: {first}. {advice}"
    )

"""Rendering helpers shared by every view and strategy: dates in words, dated evidence blocks.

A context read for a question asked at a known time (``asked``: the question's date) dates each
block in words and by its distance from that time (``"8 May 2023, 22 days ago"``), so "how long
ago" and "which came first" can be read off the context; without ``asked`` (LoCoMo, whose questions
carry no date) a block shows its date alone, as before.
"""

from __future__ import annotations

from datetime import datetime

from .timeutil import parse_instant


def human_date(ts: str | None) -> str | None:
    """ISO timestamp -> "8 May 2023" (the form LoCoMo's gold temporal answers use); None stays None."""
    if not ts:
        return None
    try:
        d = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    return f"{d.day} {d:%B %Y}"


def asked_on(ts: str | None) -> str | None:
    """The question's time as the answer prompt gives it: ``"Tuesday, 30 May 2023"``; None stays None,
    and an unreadable value is returned as it is."""
    if not ts:
        return None
    d = parse_instant(ts)
    return f"{d:%A}, {d.day} {d:%B %Y}" if d else ts


def days_before(ts: str | None, asked: str | None) -> int | None:
    """Calendar days from ``ts`` to ``asked`` (both ISO timestamps, read in UTC): 0 the same day,
    negative when ``ts`` is later than ``asked``; None when either is missing or unreadable."""
    a, b = parse_instant(ts) if ts else None, parse_instant(asked) if asked else None
    if a is None or b is None:
        return None
    return (b.date() - a.date()).days


def age_words(days: int) -> str:
    """A distance in days as a context's date line says it: ``"today"``, ``"1 day ago"``,
    ``"22 days (3 weeks) ago"``, ``"75 days (10 weeks, about 2 months) ago"``, ``"800 days (about 2
    years) ago"``, ``"3 days later"`` (a block dated after the question). Days count in UTC."""
    if days == 0:
        return "today"
    if days < 0:
        return f"{-days} day{'s' if days != -1 else ''} later"
    parts = []
    if 14 <= days < 730:
        parts.append(f"{days // 7} weeks")
    if 60 <= days < 730:
        parts.append(f"about {round(days / 30.44)} months")
    if days >= 730:
        parts.append(f"about {round(days / 365.25)} years")
    return f"{days} day{'s' if days != 1 else ''}" + (f" ({', '.join(parts)})" if parts else "") + " ago"


def date_label(ts: str | None, asked: str | None = None) -> str | None:
    """A block's date in words (:func:`human_date`), with its distance from ``asked`` when both are
    known (``"8 May 2023, 22 days ago"``); None when ``ts`` is None."""
    day = human_date(ts)
    if day is None or asked is None:
        return day
    days = days_before(ts, asked)
    return day if days is None else f"{day}, {age_words(days)}"


def render_dated(blocks: list[tuple[str | None, str]], asked: str | None = None) -> str:
    """Join ``(timestamp, text)`` blocks into context text, each prefixed with its date in words
    (:func:`date_label`: with its distance from ``asked``, the question's time, when given)."""
    out = []
    for ts, text in blocks:
        day = date_label(ts, asked)
        out.append(f"({day}) {text}" if day else text)
    return "\n".join(out)

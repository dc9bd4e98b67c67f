"""Dates in constructed memories: relative expressions resolved against the session date.

Episodic memories must carry absolute time (Nemori's EpisodeGenerator, distilled by MemoryCPT's
QAD): "yesterday" said in a session on 8 May 2023 means 7 May 2023, whatever the wall clock says.
Phrases are found with a regular expression and resolved against the session time
(:func:`memfrontier.core.timeutil.read_date`); the absolute date is appended in parentheses at the granularity of the
phrase ("last year" -> "(2022)", "last month" -> "(April 2023)", "last Friday" -> "(5 May 2023)").
"""

from __future__ import annotations

import re
from datetime import datetime

from ....core.timeutil import parse_instant, read_date

_NUM = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple of|a few)"
_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_UNIT = r"(?:day|week|month|year)s?"
_RELATIVE_RE = re.compile(
    r"\b(?:"
    r"yesterday|today|tonight|tomorrow|last night|the day before yesterday|the day after tomorrow"
    rf"|(?:last|this|next|this past|this coming) (?:{_DAY}|week|weekend|month|year)"
    rf"|{_NUM} {_UNIT} ago"
    rf"|in {_NUM} {_UNIT}"
    r")\b",
    re.IGNORECASE,
)
_ALREADY_RESOLVED = re.compile(r"^\s*\((?:week of )?(?:\d{1,2} )?(?:[A-Z][a-z]+ )?\d{4}\)")
_FUZZY = {"a couple of": "2", "a few": "3"}


def parse_timestamp(value: str | datetime | None) -> datetime | None:
    """A complete, absolute timestamp -> aware UTC datetime; None when unreadable, partial
    ("Tuesday", "(Mon) 17:50") or relative ("today"): see :func:`memfrontier.core.timeutil.parse_instant`.
    Never completed from the wall clock."""
    return parse_instant(value)


def _granularity(phrase: str) -> str:
    p = phrase.lower()
    if "year" in p:
        return "year"
    if "month" in p:
        return "month"
    if re.search(r"\bweeks?\b", p) and "ago" not in p and not p.startswith("in "):
        return "week"
    return "day"


def resolve_phrase(phrase: str, reference: datetime) -> str | None:
    """The absolute form of one relative phrase against ``reference``; None if it cannot be resolved.

    >>> resolve_phrase("last Friday", datetime(2023, 5, 8, 13, 56))
    '5 May 2023'
    """
    text = phrase.lower()
    for k, v in _FUZZY.items():
        text = text.replace(k, v)
    text = text.replace("this past ", "last ").replace("this coming ", "next ").replace("weekend", "saturday")
    prefer = "future" if text.startswith(("next", "in ", "tomorrow", "the day after")) else "past"
    read = read_date(text, reference, prefer=prefer)
    if read is None:
        return None
    when = read[0]
    gran = _granularity(text)
    if gran == "year":
        return f"{when:%Y}"
    if gran == "month":
        return f"{when:%B %Y}"
    if gran == "week":
        return f"week of {when.day} {when:%B %Y}"
    return f"{when.day} {when:%B %Y}"


def resolve_relative_dates(text: str, reference: datetime | str | None) -> str:
    """Append the absolute date after every relative time phrase in ``text``.

    ``reference`` is the session time (a datetime or a timestamp string). With no usable reference
    (None, unreadable, or partial such as ``"Tuesday 10:00"``) the text is returned unchanged:
    nothing is ever resolved against the wall clock. A phrase already followed
    by a parenthesised date is left alone, so the function is idempotent.

    >>> resolve_relative_dates("Caroline went to a support group yesterday.", "2023-05-08T13:56:00")
    'Caroline went to a support group yesterday (7 May 2023).'
    """
    ref = reference if isinstance(reference, datetime) else parse_timestamp(reference)
    if ref is None or not text:
        return text
    out, last = [], 0
    for m in _RELATIVE_RE.finditer(text):
        if _ALREADY_RESOLVED.match(text[m.end() :]):
            continue
        absolute = resolve_phrase(m.group(0), ref)
        if absolute is None:
            continue
        out.append(text[last : m.end()])
        out.append(f" ({absolute})")
        last = m.end()
    out.append(text[last:])
    return "".join(out)

"""Timestamps: one canonical form, ordered by instant, never filled in from the wall clock.

Every timestamp a record, chunk or memory carries is ISO-8601 in UTC with an explicit offset,
``2023-05-08T13:56:00+00:00`` (:func:`canonical_timestamp`). A naive input (no offset) is read in
:data:`DEFAULT_ZONE`, which is UTC. Because the canonical form has a fixed layout, comparing two
canonical strings compares the instants, so stores may order by the column; code that must also
accept other spellings (``2023-5-9``, ``-05:00`` offsets) orders with :func:`instant_key`.

A date that lacks a day, month or year ("Tuesday", "(Mon) 17:50", "May 2023") or is relative
("today", "yesterday") is *unreadable* here: the parsers return None (or raise, for the strict
validator) instead of completing it from today's date. Relative phrases are resolved only
against an explicit reference (:mod:`memfrontier.strategies.memorycpt.construction.dates`).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone

DEFAULT_ZONE = timezone.utc
"""The zone of a naive timestamp (one written without an offset): UTC."""

_CANONICAL_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{6})?\+00:00")
_LOOSE_DATE_RE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?=$|[T ])")
_DATEPARSER_SETTINGS = {
    # every part of the date must be written: nothing is taken from the wall clock
    "REQUIRE_PARTS": ["day", "month", "year"],
    # absolute dates only: "today" / "2 days ago" need a reference this function does not have
    "PARSERS": ["custom-formats", "absolute-time"],
    "RETURN_AS_TIMEZONE_AWARE": True,
    "TIMEZONE": "UTC",
    "TO_TIMEZONE": "UTC",
}


def _aware_utc(dt: datetime) -> datetime:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=DEFAULT_ZONE)
    return dt.astimezone(timezone.utc)


def parse_iso(value: str) -> datetime | None:
    """An ISO-8601 date or date-time -> aware UTC datetime; None when it is not one.

    Accepts what :meth:`datetime.fromisoformat` accepts (``Z``, offsets, date only) plus
    unpadded dates (``2023-5-9``). A naive value is in :data:`DEFAULT_ZONE`.

    >>> parse_iso("2023-05-08T23:30:00-05:00").isoformat()
    '2023-05-09T04:30:00+00:00'
    """
    text = value.strip()
    m = _LOOSE_DATE_RE.match(text)
    if m:  # pad month and day so fromisoformat reads it
        y, mo, d = m.groups()
        text = f"{y}-{int(mo):02d}-{int(d):02d}{text[m.end():]}"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return _aware_utc(dt)


def parse_instant(value: str | datetime | date | None) -> datetime | None:
    """A timestamp in any complete, absolute spelling -> aware UTC datetime; None if unreadable.

    ISO-8601 first (:func:`parse_iso`), then ``dateparser`` for written dates such as
    ``"1:56 pm on 8 May, 2023"``, with day, month and year required and relative phrases
    refused, so a partial or relative date gives None instead of borrowing today's date.
    A ``datetime`` is converted (naive = :data:`DEFAULT_ZONE`); a ``date`` is its midnight.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        return _aware_utc(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if not isinstance(value, str) or not value.strip():
        return None
    parsed = parse_iso(value)
    if parsed is not None:
        return parsed
    import dateparser

    try:
        parsed = dateparser.parse(value.strip(), languages=["en"], settings=_DATEPARSER_SETTINGS)
    except Exception:  # noqa: BLE001 - dateparser raises assorted errors on odd input: unreadable
        return None
    return _aware_utc(parsed) if parsed is not None else None


def format_instant(dt: datetime) -> str:
    """Aware or naive (:data:`DEFAULT_ZONE`) datetime -> the canonical string."""
    return _aware_utc(dt).isoformat()


def canonical_timestamp(value, *, what: str = "timestamp") -> str | None:
    """Validate and normalise a timestamp for storage: None/"" stay None, anything readable by
    :func:`parse_instant` becomes ``YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00``.

    Raises ValueError naming ``what`` and the value for text that is not a complete absolute
    date (``"N/A"``, ``"2023-13-45"``, ``"Tuesday"``) and for non-text values (an int is not
    read as epoch seconds: pass a datetime).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and _CANONICAL_RE.fullmatch(value):  # canonical layout (a store row, say)
        try:
            datetime.fromisoformat(value)  # a real date, not 2023-13-45
            return value
        except ValueError:
            pass
    if not isinstance(value, (str, datetime, date)):
        raise ValueError(f"{what} must be an ISO-8601 string or a datetime, got {type(value).__name__} {value!r}")
    parsed = parse_instant(value)
    if parsed is None:
        raise ValueError(f"{what} {value!r} is not a complete date (expected ISO-8601, e.g. 2023-05-08T13:56:00Z)")
    return format_instant(parsed)


def instant_key(value: str | datetime | None) -> tuple[int, str]:
    """Sort key ordering timestamps by instant; missing or unreadable ones first (as the stores'
    ``ORDER BY timestamp IS NOT NULL, timestamp`` does). The key holds the canonical string
    (which sorts as the instant), so an already canonical value costs one regex match."""
    if isinstance(value, str) and _CANONICAL_RE.fullmatch(value):
        return (1, value)
    parsed = parse_instant(value) if value is not None else None
    return (0, "") if parsed is None else (1, format_instant(parsed))

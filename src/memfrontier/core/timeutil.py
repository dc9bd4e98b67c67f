"""Timestamps: one canonical form, ordered by instant, never filled in from the wall clock.

Every timestamp a record, chunk or memory carries is ISO-8601 in UTC with an explicit offset,
``2023-05-08T13:56:00+00:00`` (:func:`canonical_timestamp`). A naive input (no offset) is read in
:data:`DEFAULT_ZONE`, which is UTC. Because the canonical form has a fixed layout, comparing two
canonical strings compares the instants, so stores may order by the column; code that must also
accept other spellings (``2023-5-9``, ``-05:00`` offsets) orders with :func:`instant_key`.

:func:`read_date` is the one reader of written dates (every other parser of the package calls
it). Without a reference, a date that lacks a day, month or year ("Tuesday", "(Mon) 17:50",
"May 2023") or is relative ("today", "yesterday") is *unreadable*: the parsers return None (or
raise, for the strict validator) instead of completing it from today's date. With an explicit
reference (a session's time) relative phrases and missing parts are taken from that reference,
never from the wall clock. A numeric date written year first (``2023/05/23``) is always read
year-month-day: ``2023/13/01`` is unreadable, not 13 January.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime, timezone
from functools import lru_cache
from typing import Literal

DEFAULT_ZONE = timezone.utc
"""The zone of a naive timestamp (one written without an offset): UTC."""

_CANONICAL_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{6})?\+00:00")
_LOOSE_DATE_RE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?=$|[T ])")
_YEAR_FIRST_RE = re.compile(r"^(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_DAY_OR_MONTH_FIRST_RE = re.compile(r"^(\d{1,2})[-/.](\d{1,2})[-/.]\d{2,4}(?!\d)")

#: The punctuation a written timestamp may hold besides letters, decimal digits and spaces
#: (``2023-05-08T13:56:00+00:00``, ``1:56 pm on 8 May, 2023``, ``2023/05/20 (Sat) 02:21``).
DATE_PUNCTUATION = frozenset("-/.:,+()")


def foreign_character(text: str) -> str | None:
    """The first character of ``text`` (surrounding whitespace aside) that no timestamp is written
    with, or None: anything but a letter (Unicode L*, with its marks M*), a decimal digit (Nd), a
    space (Zs) or :data:`DATE_PUNCTUATION`, e.g. NUL and other control or format characters,
    U+FFFD, ``@`` or ``☃``. The date reader would skip it (``"2024-01-01\\x00"`` read as
    2024-01-01), so a timestamp holding one is no timestamp."""
    for ch in text.strip():
        kind = unicodedata.category(ch)
        if ch not in DATE_PUNCTUATION and kind[0] not in "LM" and kind not in ("Nd", "Zs"):
            return ch
    return None


def ambiguous_numeric_date(text: str) -> bool:
    """Whether ``text`` starts with a numeric date whose day and month could be either way round
    (``01/02/2023``: 1 February or 2 January); ``13/01/2023`` and ``05/05/2023`` are not."""
    m = _DAY_OR_MONTH_FIRST_RE.match(text.strip())
    return bool(m) and int(m[1]) <= 12 and int(m[2]) <= 12 and m[1].lstrip("0") != m[2].lstrip("0")


#: What every reading assumes: English, and a date without an offset is UTC.
_BASE_SETTINGS = {"RETURN_AS_TIMEZONE_AWARE": True, "TIMEZONE": "UTC", "TO_TIMEZONE": "UTC"}
_ABSOLUTE_SETTINGS = {
    # every part of the date must be written: nothing is taken from the wall clock
    "REQUIRE_PARTS": ["day", "month", "year"],
    # absolute dates only: "today" / "2 days ago" need a reference
    "PARSERS": ["custom-formats", "absolute-time"],
}


class OutOfRangeError(ValueError):
    """A date whose UTC instant falls outside years 1-9999 (``9999-12-31T23:59:59-01:00``)."""


def _aware_utc(dt: datetime) -> datetime:
    """``dt`` as aware UTC (naive = :data:`DEFAULT_ZONE`); OutOfRangeError when that instant is
    outside years 1-9999 (Python's datetime range)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=DEFAULT_ZONE)
    try:
        return dt.astimezone(timezone.utc)
    except OverflowError:
        raise OutOfRangeError(f"{dt.isoformat()} falls outside years 1-9999 in UTC") from None


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
        text = f"{y}-{int(mo):02d}-{int(d):02d}{text[m.end() :]}"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return _aware_utc(dt)


@lru_cache(maxsize=256)
def _date_parser(reference: datetime | None, prefer: str, year_first: bool):
    """A ``dateparser`` reader for one (naive UTC reference or None, preference, order); building
    one costs more than reading a date, so they are kept."""
    from dateparser.date import DateDataParser

    settings = {**_BASE_SETTINGS, "PREFER_DATES_FROM": prefer}
    if reference is None:
        settings.update(_ABSOLUTE_SETTINGS)
    else:
        settings["RELATIVE_BASE"] = reference
    if year_first:
        settings["DATE_ORDER"] = "YMD"
    return DateDataParser(languages=["en"], settings=settings)


def read_date(
    text: str, reference: datetime | None = None, *, prefer: Literal["past", "future"] = "past"
) -> tuple[datetime, str] | None:
    """A written date or time phrase -> ``(instant, period)``; None when it cannot be read.

    ``instant``: aware UTC datetime. ``period``: the precision the text gives, ``"day"``,
    ``"week"``, ``"month"`` or ``"year"`` (``"last year"`` -> ``"year"``; a full date -> ``"day"``).

    ``reference`` None: only complete absolute dates are read (day, month and year written;
    ``"(Mon) 17:50"``, ``"May 2023"``, ``"yesterday"`` -> None). ``reference`` given (aware, or
    naive = :data:`DEFAULT_ZONE`): relative phrases and missing parts are resolved against it, an
    ambiguous one (``"Friday"``) towards ``prefer``. The wall clock is never read. A numeric date
    written year first is read year-month-day, and an impossible one (``"2023/13/01"``) is None;
    one written day or month first whose two fields could be either (``"01/02/2023"``) is None
    (:func:`ambiguous_numeric_date`).

    >>> read_date("last Friday", datetime(2023, 5, 8, 13, 56))[0].date().isoformat()
    '2023-05-05'
    >>> read_date("last month", datetime(2023, 5, 8))[1], read_date("(Mon) 17:50"), read_date("2023/13/01")
    ('month', None, None)
    """
    text = text.strip()
    if not text:
        return None
    if ambiguous_numeric_date(text):  # 01/02/2023: which field is the day is not written
        return None
    ymd = _YEAR_FIRST_RE.match(text)
    if ymd:
        try:
            date(*(int(g) for g in ymd.groups()))
        except ValueError:  # month 13, 30 February...: not a date (dateparser would swap the fields)
            return None
    ref = None if reference is None else _aware_utc(reference).replace(tzinfo=None)
    try:
        data = _date_parser(ref, prefer, bool(ymd)).get_date_data(text)
    except Exception:  # noqa: BLE001 - dateparser raises assorted errors on odd input: unreadable
        return None
    if data is None or data.date_obj is None:
        return None
    period = data.period if data.period in ("week", "month", "year") else "day"
    return _aware_utc(data.date_obj), period


def parse_instant(value: str | datetime | date | None) -> datetime | None:
    """A timestamp in any complete, absolute spelling -> aware UTC datetime; None if unreadable or
    outside years 1-9999 in UTC (see :func:`_instant`)."""
    try:
        return _instant(value)
    except OutOfRangeError:
        return None


def _instant(value: str | datetime | date | None) -> datetime | None:
    """A timestamp in any complete, absolute spelling -> aware UTC datetime; None if unreadable.

    ISO-8601 first (:func:`parse_iso`), then :func:`read_date` without a reference for written
    dates such as ``"1:56 pm on 8 May, 2023"``: day, month and year required and relative phrases
    refused, so a partial or relative date gives None instead of borrowing today's date.
    A ``datetime`` is converted (naive = :data:`DEFAULT_ZONE`); a ``date`` is its midnight. Text
    holding a :func:`foreign_character` (NUL, ``@``...) is unreadable, whatever else it holds.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        return _aware_utc(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if not isinstance(value, str) or not value.strip():
        return None
    if foreign_character(value) is not None:  # never read around a character no date holds
        return None
    if value.lstrip()[0] in "+-":  # a signed year ("-2023-05-30") is no date of ours: never read without its sign
        return None
    parsed = parse_iso(value)
    if parsed is not None:
        return parsed
    read = read_date(value)
    return read[0] if read is not None else None


def format_instant(dt: datetime) -> str:
    """Aware or naive (:data:`DEFAULT_ZONE`) datetime -> the canonical string."""
    return _aware_utc(dt).isoformat()


def canonical_timestamp(value, *, what: str = "timestamp") -> str | None:
    """Validate and normalise a timestamp for storage: None stays None (no timestamp), anything
    readable by :func:`parse_instant` becomes ``YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00``.

    Raises ValueError naming ``what`` and the value for an empty or blank string (no timestamp is
    None, not ``""``), for text holding a character no date is written with
    (:func:`foreign_character`: ``"2024-01-01\\x00"``, ``"2024-01-01 @"``), for text that is not a
    complete absolute date (``"N/A"``, ``"2023-13-45"``, ``"2023/13/01"``, ``"Tuesday"``) and for
    non-text values (an int is not read as epoch seconds: pass a datetime).
    """
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():
        raise ValueError(
            f"{what} is {'empty' if not value else 'blank'} ({value!r}): give a date or leave it out (None)"
        )
    if isinstance(value, str) and _CANONICAL_RE.fullmatch(value):  # canonical layout (a store row, say)
        try:
            datetime.fromisoformat(value)  # a real date, not 2023-13-45
            return value
        except ValueError:
            pass
    if not isinstance(value, (str, datetime, date)):
        raise ValueError(f"{what} must be an ISO-8601 string or a datetime, got {type(value).__name__} {value!r}")
    if isinstance(value, str) and (ch := foreign_character(value)) is not None:
        raise ValueError(
            f"{what} {value!r} is not a date: it holds {ch!r} (U+{ord(ch):04X}); a date is written with letters, "
            f"digits, spaces and {' '.join(sorted(DATE_PUNCTUATION))}"
        )
    try:
        parsed = _instant(value)
    except OutOfRangeError:
        raise ValueError(f"{what} {value!r} falls outside years 1-9999 in UTC") from None
    if parsed is None and isinstance(value, str) and ambiguous_numeric_date(value):
        raise ValueError(
            f"{what} {value!r} is ambiguous: its day and month could be either way round "
            "(write it ISO-8601, year first, e.g. 2023-02-01)"
        )
    if parsed is None:
        raise ValueError(f"{what} {value!r} is not a complete date (expected ISO-8601, e.g. 2023-05-08T13:56:00Z)")
    return format_instant(parsed)


def utc_now() -> datetime:
    """The current instant, timezone-aware UTC (a live ``ask``'s question time when none is given)."""
    return datetime.now(timezone.utc)


def instant_key(value: str | datetime | None) -> tuple[int, str]:
    """Sort key ordering timestamps by instant; missing or unreadable ones first (as the stores'
    ``ORDER BY timestamp IS NOT NULL, timestamp`` does). The key holds the canonical string
    (which sorts as the instant), so an already canonical value costs one regex match."""
    if isinstance(value, str) and _CANONICAL_RE.fullmatch(value):
        return (1, value)
    parsed = parse_instant(value) if value is not None else None
    return (0, "") if parsed is None else (1, format_instant(parsed))


def day_times(timestamps: list[str | None]) -> list[str | None]:
    """The time each record of one session is dated by in memory (a chunk, a turn item): the
    earliest of the session's timestamps on the record's calendar day (its date as written, the
    day a context shows), so records added on different days of one session keep their own day;
    an undated record takes the session's earliest timestamp (None when none is dated). A session
    whose records share one day gets its earliest timestamp everywhere (each benchmark session)."""
    dated = [t for t in timestamps if t is not None]
    if not dated:
        return [None] * len(timestamps)
    first: dict[str, str] = {}
    for t in sorted(dated, key=instant_key):
        first.setdefault(calendar_day(t), t)
    session = min(dated, key=instant_key)
    return [first[calendar_day(t)] if t is not None else session for t in timestamps]


def calendar_day(ts: str) -> str:
    """A timestamp's calendar day as written (in its own offset), ``2023-05-08``; the text itself
    when it does not parse. Two records are of one day in memory when these are equal."""
    try:
        return datetime.fromisoformat(ts).date().isoformat()
    except ValueError:
        return ts

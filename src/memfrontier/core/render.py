"""Rendering helpers shared by every view and strategy: dates in words, dated evidence blocks."""

from __future__ import annotations

from datetime import datetime


def human_date(ts: str | None) -> str | None:
    """ISO timestamp -> "8 May 2023" (the form LoCoMo's gold temporal answers use); None stays None."""
    if not ts:
        return None
    try:
        d = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    return f"{d.day} {d:%B %Y}"


def render_dated(blocks: list[tuple[str | None, str]]) -> str:
    """Join ``(timestamp, text)`` blocks into context text, each prefixed with its date in words."""
    out = []
    for ts, text in blocks:
        day = human_date(ts)
        out.append(f"({day}) {text}" if day else text)
    return "\n".join(out)

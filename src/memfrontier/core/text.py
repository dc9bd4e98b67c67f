"""Text that crosses a boundary (API, CLI, MCP, loaders, model output) is valid Unicode.

Python ``str`` can hold lone surrogates (``"\\ud83d"``): ``json.loads`` produces them from a
``"\\ud83d"`` escape, and ``surrogateescape`` produces them from invalid UTF-8 bytes in a command
line. They cannot be encoded as UTF-8, so SQLite, tokenizers and JSON writers fail on them deep
inside. :func:`clean_text` joins a high+low surrogate pair into the character it encodes and
replaces each lone one with U+FFFD (the replacement character), as a UTF-8 decoder with
``errors="replace"`` does for invalid bytes.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with surrogate pairs joined and every lone surrogate replaced by U+FFFD; valid
    text is returned unchanged.

    Raises ValueError when ``text`` is not a ``str`` (bytes must be decoded by the caller, who
    knows their encoding).

    >>> clean_text("Guest likes green tea \\ud83d")
    'Guest likes green tea \\ufffd'
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text (str), got {type(text).__name__}")
    if text.isascii() or _SURROGATE_RE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_json(value):
    """``value`` (parsed JSON: dicts, lists, strings, numbers) with every string, keys included,
    passed through :func:`clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_json(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    return value

"""Text that crosses a boundary (API, CLI, MCP, loaders, model output) is valid Unicode.

Python ``str`` can hold lone surrogates (``"\\ud83d"``): ``json.loads`` produces them from a
``"\\ud83d"`` escape, and ``surrogateescape`` produces them from invalid UTF-8 bytes in a command
line. They cannot be encoded as UTF-8, so SQLite, tokenizers and JSON writers fail on them deep
inside. :func:`clean_text` joins a high+low surrogate pair into the character it encodes and
replaces each lone one with U+FFFD (the replacement character), as a UTF-8 decoder with
``errors="replace"`` does for invalid bytes.

One normalization rule: text that crosses a boundary is put in Unicode NFC (canonical composition:
``"e\u0301"`` -> ``"\u00e9"``), so stored text (a :class:`~memfrontier.core.types.Record`'s
fields) and queries (``Memory.search``, a strategy's query, an ``rg`` pattern) are compared in one
form by every retriever on every store.
"""

from __future__ import annotations

import re
import unicodedata

REPLACEMENT = "\ufffd"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with surrogate pairs joined, every lone surrogate replaced by U+FFFD, and put in
    Unicode NFC; ASCII text is returned unchanged.

    Raises ValueError when ``text`` is not a ``str`` (bytes must be decoded by the caller, who
    knows their encoding).

    >>> clean_text("Guest likes green tea \\ud83d")
    'Guest likes green tea \\ufffd'
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text (str), got {type(text).__name__}")
    if text.isascii():
        return text
    if _SURROGATE_RE.search(text) is not None:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


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

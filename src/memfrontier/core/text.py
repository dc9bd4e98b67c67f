"""Text that crosses a boundary (API, CLI, MCP, loaders, model output) is valid Unicode.

Python ``str`` can hold lone surrogates (``"\\ud83d"``): ``json.loads`` produces them from a
``"\\ud83d"`` escape, and ``surrogateescape`` produces them from invalid UTF-8 bytes in a command
line. They cannot be encoded as UTF-8, so SQLite, tokenizers and JSON writers fail on them deep
inside. :func:`clean_text` joins a high+low surrogate pair into the character it encodes and
replaces each lone one with U+FFFD (the replacement character), as a UTF-8 decoder with
``errors="replace"`` does for invalid bytes.

NUL (U+0000) is no character a store can keep (PostgreSQL text refuses it, and C strings end at it), so
:func:`clean_text` replaces it with U+FFFD too: in free text (a record's text, speaker, role, action,
observation, an image caption, a query, a question) a NUL and a lone surrogate become U+FFFD, the same
on every store. An identifier (a record id, a scope id, a session id) is kept exactly as given, so it
is never altered: :func:`check_id` refuses one that holds either (ValueError naming the field).

One normalization rule: text that crosses a boundary is put in Unicode NFC (canonical composition:
``"e\u0301"`` -> ``"\u00e9"``), so stored text (a :class:`~memfrontier.core.types.Record`'s
fields) and queries (``Memory.search``, a strategy's query, an ``rg`` pattern) are compared in one
form by every retriever on every store.
"""

from __future__ import annotations

import re
import unicodedata

REPLACEMENT = "\ufffd"
NUL = "\x00"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_UNSTORABLE_RE = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with surrogate pairs joined, every lone surrogate and every NUL (U+0000) replaced by
    U+FFFD, and put in Unicode NFC; ASCII text without a NUL is returned unchanged.

    Raises ValueError when ``text`` is not a ``str`` (bytes must be decoded by the caller, who
    knows their encoding).

    >>> clean_text("Guest likes green tea \\ud83d")
    'Guest likes green tea \\ufffd'
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text (str), got {type(text).__name__}")
    if NUL in text:
        text = text.replace(NUL, REPLACEMENT)
    if text.isascii():
        return text
    if _SURROGATE_RE.search(text) is not None:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def check_id(value, what: str, *, blank_ok: bool = False) -> str:
    """``value`` unchanged when it can be an identifier (a record id, a scope id, a session id):
    a ``str`` without NUL (U+0000) or a lone surrogate, and not empty or blank (whitespace only)
    unless ``blank_ok``. Raises ValueError naming ``what`` otherwise. An id is never altered (no
    replacement, no normalization): it must find its record again exactly as given.

    >>> check_id("conv-49:D1:3", "id")
    'conv-49:D1:3'
    """
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    bad = _UNSTORABLE_RE.search(value)
    if bad is not None:
        char = "a NUL character (U+0000)" if bad.group() == NUL else "a lone surrogate (not valid Unicode)"
        raise ValueError(f"{what} holds {char} at position {bad.start()}; an identifier may not hold one")
    if not blank_ok:
        require_non_blank(value, what)
    return value


def require_non_blank(value: str, what: str) -> str:
    """``value`` unchanged unless it is empty or whitespace only: then ValueError naming ``what``
    (an absent value is None or a missing key, never an empty string)."""
    if not value.strip():
        raise ValueError(f"{what} is {'empty' if not value else 'blank'} ({value!r}): give a value or leave it out")
    return value


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

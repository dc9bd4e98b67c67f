"""Defensive parsing of model output: JSON (fenced, prose-wrapped, truncated), XML-ish tags, and
``<think>`` rationales.

Small models (the embedded Gemma 3 270M above all) wrap JSON in prose or code fences, stop in the
middle of an array when ``max_tokens`` runs out, or produce nothing usable. The contract here:

* a parse never *silently* succeeds on garbage: :class:`ParseResult.ok` is False with an ``error``;
* truncated output is salvaged to its complete items and flagged (``truncated=True``), never
  padded with invented partial values;
* callers count failures in the ledger (:func:`parse_or_count`, or ``current_ledger().count``) so
  they show up in reports instead of turning into quiet empty answers.

Nothing in this module calls a model; it is pure text processing (plus the optional ledger count).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import json_repair

from ..core.ledger import count_event, current_ledger
from ..core.text import clean_json

Expect = Literal["object", "array"] | None

__all__ = [
    "ParseResult",
    "ParseError",
    "TagMatch",
    "parse_json",
    "parse_or_count",
    "find_tag",
    "extract_tag",
    "strip_think",
]

#: At most this many candidate start positions (``{`` / ``[``) are tried per text, so a long prose
#: answer full of brackets cannot make parsing quadratic.
MAX_CANDIDATES = 32


@dataclass(frozen=True)
class ParseResult:
    """The outcome of :func:`parse_json`.

    ``value``: the parsed JSON value (dict / list / scalar), or None when ``ok`` is False.
    ``ok``: a usable value of the expected type was found.
    ``truncated``: the JSON was cut off (no closing bracket); ``value`` keeps only the complete
    items / key-value pairs (the partial last one is dropped).
    ``repaired``: the text was not valid JSON as written and ``json_repair`` fixed it (single
    quotes, trailing commas, unquoted keys...).
    ``error``: why ``ok`` is False (None when ok).
    """

    value: Any = None
    ok: bool = False
    truncated: bool = False
    repaired: bool = False
    error: str | None = None


class ParseError(ValueError):
    """Model output could not be parsed into the expected shape. ``result`` holds the details."""

    def __init__(self, message: str, result: ParseResult | None = None):
        super().__init__(message)
        self.result = result


# --------------------------------------------------------------------------------------------
# think / tags
# --------------------------------------------------------------------------------------------
_THINK_OPEN = re.compile(r"<think(?:ing)?\s*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?\s*>", re.IGNORECASE)


def strip_think(text: str | None) -> tuple[str, str]:
    """Split ``<think>...</think>`` rationales off ``text``.

    Returns ``(rationale, rest)``, both stripped: ``rationale`` is the content of every think block
    joined with a blank line ("" when there is none); ``rest`` is the text with the blocks removed.
    An unclosed ``<think>`` (output truncated while thinking) makes everything after it rationale.
    A ``</think>`` with no opening tag (chat templates that pre-insert ``<think>`` in the prompt)
    makes everything before it rationale. ``<thinking>`` is accepted too.
    """
    if not text:
        return "", ""
    rationale: list[str] = []
    rest: list[str] = []
    pos = 0
    # A leading close tag with no open tag before it.
    first_open = _THINK_OPEN.search(text)
    first_close = _THINK_CLOSE.search(text)
    if first_close and (first_open is None or first_close.start() < first_open.start()):
        rationale.append(text[: first_close.start()])
        pos = first_close.end()
    while True:
        m = _THINK_OPEN.search(text, pos)
        if m is None:
            rest.append(text[pos:])
            break
        rest.append(text[pos : m.start()])
        c = _THINK_CLOSE.search(text, m.end())
        if c is None:  # unclosed: rationale to the end
            rationale.append(text[m.end() :])
            break
        rationale.append(text[m.end() : c.start()])
        pos = c.end()
    rat = "\n\n".join(r.strip() for r in rationale if r.strip())
    return rat, "".join(rest).strip()


@dataclass(frozen=True)
class TagMatch:
    """The content of one ``<tag>...</tag>``. ``closed`` is False when the closing tag was missing
    (output truncated: content runs to the end of the text); ``opened`` is False when only a
    closing tag was present (the opening tag was in the prompt, e.g. an assistant prefix)."""

    text: str
    closed: bool = True
    opened: bool = True


def find_tag(text: str | None, tag: str) -> TagMatch | None:
    """Find ``<tag>...</tag>`` in ``text`` (case-insensitive; attributes on the opening tag allowed).

    Takes the *last* opening tag (models often mention the tag while reasoning). If it is closed,
    its content; if it is unclosed and non-empty, the text to the end with ``closed=False``; if it
    is unclosed and empty, the last closed pair instead. With no opening tag but a closing tag,
    the text before the closing tag (``opened=False``). None when the tag does not occur. Content
    is stripped. ``<think>`` blocks are not removed here: call :func:`strip_think` first.
    """
    if not text:
        return None
    t = re.escape(tag)
    open_re = re.compile(rf"<{t}(?:\s[^>]*)?>", re.IGNORECASE)
    close_re = re.compile(rf"</{t}\s*>", re.IGNORECASE)
    opens = list(open_re.finditer(text))
    if not opens:
        c = close_re.search(text)
        if c is None:
            return None
        return TagMatch(text[: c.start()].strip(), closed=True, opened=False)
    last = opens[-1]
    c = close_re.search(text, last.end())
    if c is not None:
        return TagMatch(text[last.end() : c.start()].strip())
    tail = text[last.end() :].strip()
    if tail:
        return TagMatch(tail, closed=False)
    # The last opening tag is empty and unclosed: fall back to the last complete pair.
    for o in reversed(opens[:-1]):
        c = close_re.search(text, o.end())
        if c is not None and c.start() < last.start():
            return TagMatch(text[o.end() : c.start()].strip())
    return TagMatch("", closed=False)


def extract_tag(text: str | None, tag: str, *, event: str | None = None) -> str | None:
    """The stripped content of ``<tag>...</tag>`` in ``text``, or None when the tag is absent.

    See :func:`find_tag` for which occurrence is taken. An unclosed final tag yields the text to
    the end and is flagged: the event ``event`` (default ``"unclosed_tag.<tag>"``) is counted on
    the current ledger, if one is current. Use :func:`find_tag` to get the flag itself.
    """
    m = find_tag(text, tag)
    if m is None:
        return None
    if not m.closed:
        count_event(event or f"unclosed_tag.{tag}")
    return m.text


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


def _fenced_blocks(text: str) -> list[str]:
    """Contents of ``` fenced blocks (an unclosed last fence runs to the end), JSON-tagged first."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    jsonish = [b for lang, b in blocks if lang in ("json", "jsonc", "json5")]
    other = [b for lang, b in blocks if lang not in ("json", "jsonc", "json5")]
    return [b for b in jsonish + other if b.strip()]


@dataclass
class _Frame:
    kind: str  # "{" or "["
    start: int
    last_complete: int | None = None  # end index (exclusive) of the last complete element
    expecting_value: bool = False  # objects: a ':' was seen, the next token is a value


@dataclass
class _Scan:
    end: int | None  # exclusive end of a balanced value, None when truncated / broken
    salvage: str | None  # for truncated input: the complete prefix, closed; None if nothing complete
    broken: bool = False  # mismatched closing bracket


def _scan(text: str, start: int) -> _Scan:
    """Scan the JSON container starting at ``text[start]`` (``{`` or ``[``).

    Tracks string state (double-quoted strings with escapes) and bracket nesting. Returns the end
    of the balanced container, or for a truncated one, the text cut after the last complete element
    of the innermost container that has one, with every still-open container closed.
    """
    stack: list[_Frame] = []
    in_str = False
    str_is_value = False
    esc = False
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                if str_is_value and stack:
                    stack[-1].last_complete = i + 1
            i += 1
            continue
        if ch == '"':
            in_str = True
            top = stack[-1] if stack else None
            str_is_value = top is not None and (top.kind == "[" or top.expecting_value)
        elif ch in "{[":
            stack.append(_Frame(ch, i))
        elif ch in "}]":
            if not stack or (ch == "}") != (stack[-1].kind == "{"):
                return _Scan(None, None, broken=True)
            stack.pop()
            if not stack:
                return _Scan(i + 1, None)
            stack[-1].last_complete = i + 1
        elif ch == ",":
            top = stack[-1]
            # A scalar (number / literal) element is complete once its comma arrives.
            top.last_complete = i
            top.expecting_value = False
        elif ch == ":":
            stack[-1].expecting_value = True
        i += 1
    # Truncated: find the innermost open container holding a complete element; deeper (empty or
    # partial) containers are dropped together with the key that introduced them.
    for depth in range(len(stack) - 1, -1, -1):
        cut = stack[depth].last_complete
        if cut is not None:
            body = text[start:cut].rstrip().rstrip(",")
            closers = "".join("}" if f.kind == "{" else "]" for f in reversed(stack[: depth + 1]))
            return _Scan(None, body + closers)
    return _Scan(None, None)


def _type_ok(value: Any, expect: Expect) -> bool:
    if expect == "object":
        return isinstance(value, dict)
    if expect == "array":
        return isinstance(value, list)
    return True


def _loads(s: str) -> tuple[Any, bool] | None:
    """(value, repaired) from strict json, else json_repair; None when neither yields a value."""
    try:
        return json.loads(s), False
    except (ValueError, RecursionError):
        pass
    try:
        v = json_repair.repair_json(s, return_objects=True)
    except Exception:  # json_repair is best effort; any failure means "not JSON"
        return None
    if v == "" or v is None:
        return None
    return v, True


def _plausible(value: Any, source: str) -> bool:
    """True when every string *value* in ``value`` was quoted in ``source`` (keys may be bare).

    ``json_repair`` turns bare words into strings; a repair that had to do so was prose, not JSON.
    """
    if isinstance(value, str):
        probes = {value[:24], json.dumps(value)[1:25]}
        return any(q + p in source for p in probes for q in ('"', "'"))
    if isinstance(value, list):
        return all(_plausible(v, source) for v in value)
    if isinstance(value, dict):
        return all(_plausible(v, source) for v in value.values())
    return True


_INVALID = object()


def _parse_region(text: str, expect: Expect) -> ParseResult | None:
    """Best parse of one region of text, or None when it holds no JSON at all.

    Every ``{`` / ``[`` (per ``expect``) is a candidate start; the usable candidate with the
    *largest span* wins (so an outer structure beats the ones nested in it, and a prose citation
    such as ``[1]`` loses to the real array). Usable: strictly valid JSON of the expected type,
    or a plausible repair / truncation salvage. Candidates nested in a usable one are skipped, and
    at most :data:`MAX_CANDIDATES` starts are scanned.
    """
    openers = {"object": "{", "array": "[", None: "{["}[expect]
    best: tuple[int, ParseResult] | None = None  # (span in chars, result)
    covered_to = -1
    scans = 0
    truncated_empty = False
    for start, ch in enumerate(text):
        if ch not in openers or start < covered_to:
            continue
        if scans >= MAX_CANDIDATES:
            break
        scans += 1
        sc = _scan(text, start)
        res: ParseResult | None = None
        if sc.end is not None:
            chunk = text[start : sc.end]
            span_end = sc.end
            try:
                v, repaired = json.loads(chunk), False
            except (ValueError, RecursionError):
                # Not valid as written (single quotes, trailing commas...): repair, but keep the
                # repair only if it did not invent strings from prose ("[see below]").
                r = _loads(chunk)
                v, repaired = r if r is not None else (_INVALID, True)
                if v is not _INVALID and not _plausible(v, chunk):
                    v = _INVALID
            if v is not _INVALID and _type_ok(v, expect):
                res = ParseResult(value=v, ok=True, repaired=repaired)
        elif sc.salvage is not None:
            span_end = len(text)
            r = _loads(sc.salvage)
            if r is not None and _type_ok(r[0], expect) and _plausible(r[0], sc.salvage):
                res = ParseResult(value=r[0], ok=True, truncated=True, repaired=r[1])
        else:
            truncated_empty = truncated_empty or not sc.broken
            continue
        if res is not None:
            covered_to = span_end
            if best is None or span_end - start > best[0]:
                best = (span_end - start, res)
    if best is not None:
        return best[1]
    if truncated_empty:
        return ParseResult(ok=False, truncated=True, error="truncated before any complete item")
    return None


def parse_json(text: str | None, *, expect: Expect = None) -> ParseResult:
    """Parse the JSON value in a model's output; every string in the value is valid Unicode
    (a ``"\\ud83d"`` escape of a lone surrogate becomes U+FFFD, :func:`memfrontier.core.text.clean_json`).

    ``expect``: ``"object"`` (a dict is required), ``"array"`` (a list is required) or None (any
    JSON value; a bare scalar such as ``42`` or ``"yes"`` is accepted only when it is the whole
    text). Handles, in order: ``<think>`` blocks (dropped), ```` ```json ```` fences (their
    content is preferred; an unclosed fence runs to the end), prose before/after the JSON, invalid
    but repairable JSON (``json_repair``; ``repaired=True``), and truncated JSON (complete items /
    key-value pairs kept, the partial one dropped, ``truncated=True``).

    Never raises on bad input: empty or whitespace text gives ``ok=False, error="empty output"``;
    text with no usable JSON of the expected type gives ``ok=False`` with an error. Never returns
    ``ok=True`` with a value invented from garbage.
    """
    res = _parse_json(text, expect)
    return dataclasses.replace(res, value=clean_json(res.value)) if res.ok else res


def _parse_json(text: str | None, expect: Expect) -> ParseResult:
    if text is None or not text.strip():
        return ParseResult(ok=False, error="empty output")
    _, body = strip_think(text)
    if not body:
        return ParseResult(ok=False, error="empty output (only a <think> block)")
    regions = _fenced_blocks(body) + [body]
    truncated_empty: ParseResult | None = None
    for region in regions:
        stripped = region.strip()
        if expect is None:
            try:  # the whole region is one JSON value (scalars included)
                return ParseResult(value=json.loads(stripped), ok=True)
            except (ValueError, RecursionError):
                pass
        res = _parse_region(region, expect)
        if res is not None and res.ok:
            return res
        if res is not None and truncated_empty is None:
            truncated_empty = res
    if truncated_empty is not None:
        return truncated_empty
    want = {"object": "JSON object", "array": "JSON array", None: "JSON"}[expect]
    return ParseResult(ok=False, error=f"no {want} found in output: {body[:80]!r}")


def parse_or_count(
    text: str | None,
    event: str,
    *,
    expect: Expect = None,
    count_truncated: bool = True,
    raise_on_error: bool = False,
) -> ParseResult:
    """:func:`parse_json`, counting problems on the current ledger (if one is current).

    On failure counts ``event`` (e.g. ``"parse_error.router"``); on a salvaged truncation counts
    ``event + ".truncated"`` when ``count_truncated``. With ``raise_on_error`` a failure raises
    :class:`ParseError` (after counting) instead of returning ``ok=False``.
    """
    res = parse_json(text, expect=expect)
    ledger = current_ledger()
    if ledger is not None:
        if not res.ok:
            ledger.count(event)
        elif res.truncated and count_truncated:
            ledger.count(f"{event}.truncated")
    if not res.ok and raise_on_error:
        raise ParseError(f"{event}: {res.error}", res)
    return res

"""``rg``: regular expressions over the scope's raw records (AutoMEM, arXiv 2606.04315, Sec. 5;
no model inside).

Each record's searchable text is ``(date) <render()>`` (speaker, text, image captions, step
index / action / observation). A record matches when any pattern matches (``regex`` module
syntax, a superset of ``re``); the observation reports how many records match in total (so
"how many times..." questions can be answered by counting), then the ``max_hits`` best matches,
each as ``<id> (date) <text around the match of its rarest pattern, context_chars either side>``,
the whole capped at ``max_chars``. A record's score is the summed rarity of the patterns it
matches, ``sum_p ln(1 + N / df_p)`` over N records of the scope, df_p = records pattern p matches
(Lucene's non-negative IDF without the 0.5 smoothing; DCI-Lite ranks by plain term overlap,
released-code notes 4.2, which lets a speaker's name that matches every turn swamp the rare
words); ties in time order.

Bad input is an error observation, never an exception: an invalid pattern (``bad_pattern``), too
many or too long patterns (``bad_args``), and a pattern that runs past the time limit on the
corpus (``timeout``; the ``regex`` module interrupts catastrophic backtracking such as
``(a|aa)+$``).
"""

from __future__ import annotations

import math
import time

import regex

from ....core.text import clean_text
from ..corpus import ScopedCorpus
from ..observation import Observation
from .limits import ToolLimits


def _snippet(text: str, start: int, end: int, ctx: int) -> str:
    a, b = max(0, start - ctx), min(len(text), end + ctx)
    return ("..." if a > 0 else "") + text[a:b].replace("\n", " ") + ("..." if b < len(text) else "")


def rg(
    corpus: ScopedCorpus, patterns: list[str], ignore_case: bool = True, limits: ToolLimits | None = None
) -> Observation:
    """Search ``corpus`` for ``patterns``; see the module doc for the output and the errors."""
    lim = limits or ToolLimits()
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
        return Observation.failure("rg", "bad_args", "give one or more non-empty patterns")
    if len(patterns) > lim.rg_max_patterns:
        return Observation.failure("rg", "bad_args", f"{len(patterns)} patterns; at most {lim.rg_max_patterns}")
    long = [p for p in patterns if len(p) > lim.rg_pattern_chars]
    if long:
        return Observation.failure(
            "rg", "bad_args", f"pattern longer than {lim.rg_pattern_chars} characters: {long[0][:40]!r}..."
        )
    flags = regex.IGNORECASE if ignore_case else 0
    patterns = [clean_text(p) for p in patterns]  # one Unicode form (NFC) for patterns and text
    compiled = []
    for p in patterns:
        try:
            compiled.append(regex.compile(p, flags))
        except (regex.error, ValueError, OverflowError) as e:
            return Observation.failure("rg", "bad_pattern", f"invalid regular expression {p!r}: {e}")
    deadline = time.monotonic() + lim.rg_timeout_s
    matched: list[tuple[int, str, str, list]] = []  # (position, id, text, [(pattern index, match)])
    df = [0] * len(compiled)
    for pos, r in enumerate(corpus.records):
        text = clean_text(corpus.body(r))
        found = []
        for i, p in enumerate(compiled):
            left = deadline - time.monotonic()
            if left <= 0:
                return _timeout(patterns, lim)
            try:
                m = p.search(text, timeout=left)
            except TimeoutError:
                return _timeout(patterns, lim)
            if m:
                found.append((i, m))
                df[i] += 1
        if found:
            matched.append((pos, r.id, text, found))
    total, n = len(matched), len(corpus.records)
    idf = [math.log(1 + n / d) if d else 0.0 for d in df]
    ranked = sorted(matched, key=lambda t: (-sum(idf[i] for i, _ in t[3]), t[0]))[: lim.rg_max_hits]
    hits = []
    for _, rid, text, found in ranked:
        _, m = max(found, key=lambda f: idf[f[0]])
        hits.append((rid, f"{rid} {_snippet(text, m.start(), m.end(), lim.rg_context_chars)}"))
    head = f"rg {patterns}{'' if ignore_case else ' (case-sensitive)'}: {total} record{'s' if total != 1 else ''} match"
    if total > len(hits):
        head += f" (showing the {len(hits)} best: rarest patterns first)"
    lines, used, shown = [head], len(head), []
    truncated = total > len(hits)
    for rid, line in hits:
        if used + len(line) + 1 > lim.rg_max_chars:
            lines.append(f"... {len(hits) - len(shown)} more hits cut at {lim.rg_max_chars} characters")
            truncated = True
            break
        lines.append(line)
        shown.append(rid)
        used += len(line) + 1
    return Observation(tool="rg", text="\n".join(lines), record_ids=shown, truncated=truncated)


def _timeout(patterns: list[str], lim: ToolLimits) -> Observation:
    return Observation.failure(
        "rg",
        "timeout",
        f"patterns {patterns} ran past the {lim.rg_timeout_s:g} s limit (catastrophic backtracking?); simplify them",
    )

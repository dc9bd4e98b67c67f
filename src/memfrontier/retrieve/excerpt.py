"""Excerpts of long turns: the part of a turn that bears on the question, within a token limit.

A chat assistant's answers run to hundreds of tokens (LongMemEval_S: a third of its turns are
longer than 256 MiniLM tokens, its evidence turns seldom are). Shown whole, one long distractor
turn takes a budget that would hold several short ones. :func:`excerpt` keeps a turn's text whole
when it fits ``max_tokens`` and otherwise keeps the run of its sentences around the sentence that
shares the most BM25 terms with the question (:func:`~memfrontier.store.bm25.bm25_terms`: stopwords
dropped, stemmed), grown sentence by sentence toward the better-matching side while it fits, with
``…`` where text was left out.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

from ..store.bm25 import bm25_terms

#: Where a text is cut into sentences: after ``.``, ``!`` or ``?`` followed by space, and at line breaks.
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")
GAP = "…"


@functools.lru_cache(maxsize=256)
def _terms(text: str) -> frozenset[str]:
    """The distinct BM25 terms of ``text`` (a question is excerpted against every long turn it meets)."""
    return frozenset(bm25_terms(text))


def sentences(text: str) -> list[str]:
    """``text`` cut into its sentences and lines (:data:`_SENTENCE`), empty pieces dropped."""
    return [s for s in (p.strip() for p in _SENTENCE.split(text)) if s]


def excerpt(text: str, question: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """``text`` when ``count_tokens(text) <= max_tokens``; else its best-matching run of sentences.

    The run starts at the sentence with the most distinct BM25 terms of ``question`` (the first of
    equals) and takes the next sentence before or after it, the one with more question terms
    first (after it on a tie), while the excerpt, joined by spaces with :data:`GAP` marking each
    cut end, stays within ``max_tokens`` (counted sentence by sentence and summed: exact for a
    tokenizer that splits at spaces first, as MiniLM's WordPiece does, and never under the count of
    the joined text for one that adds a start or end token per call). A first sentence longer than
    ``max_tokens`` on its own is cut to its leading words that fit. Raises ValueError for
    ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if count_tokens(text) <= max_tokens:
        return text
    parts = sentences(text)
    if not parts:
        return ""
    asked = _terms(question)
    score = [len(asked & set(bm25_terms(p))) for p in parts]
    best = max(range(len(parts)), key=lambda i: (score[i], -i))
    lo = hi = best
    sizes, gap, last = [count_tokens(p) for p in parts], count_tokens(GAP), len(parts) - 1

    def size(a: int, b: int) -> int:
        return sum(sizes[a : b + 1]) + gap * ((a > 0) + (b < last))

    if size(lo, hi) > max_tokens:
        return _leading_words(parts[best], lo > 0, max_tokens, count_tokens)
    while True:
        steps = []
        if hi < last:
            steps.append((score[hi + 1], 1, lo, hi + 1))
        if lo > 0:
            steps.append((score[lo - 1], 0, lo - 1, hi))
        fits = [(a, b) for _, _, a, b in sorted(steps, reverse=True) if size(a, b) <= max_tokens]
        if not fits:
            body = " ".join(parts[lo : hi + 1])
            return f"{GAP + ' ' if lo > 0 else ''}{body}{' ' + GAP if hi < last else ''}"
        lo, hi = fits[0]


def _leading_words(sentence: str, cut_before: bool, max_tokens: int, count_tokens) -> str:
    """The longest start of ``sentence`` (whole words) that fits ``max_tokens`` with its gap marks."""
    words = sentence.split()
    head = f"{GAP} " if cut_before else ""
    lo, hi = 0, len(words)
    while lo < hi:  # the most words whose excerpt fits (count_tokens grows with the words)
        mid = (lo + hi + 1) // 2
        if count_tokens(f"{head}{' '.join(words[:mid])} {GAP}") <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return f"{head}{' '.join(words[:lo])} {GAP}" if lo else GAP


__all__ = ["GAP", "excerpt", "sentences"]

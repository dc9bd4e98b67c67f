"""Near-duplicate folding: a ranked list in which one fact said many times holds it once.

A history repeats itself: one fact said in six sessions, the same greeting every day. Ranked as
they are, the copies fill a small context and push out the other facts, and the older copies of a
fact outrank its one later correction. :func:`fold_near_duplicates` walks a ranked list best first
and puts each document into the group of the first earlier document it nearly repeats (word-set
Jaccard similarity >= ``threshold``, :func:`word_set`); a group stands at the rank of its best
member and is represented by its **latest** member (by time; the best-ranked on a tie), with
the other members' ids counted as folded. A correction ("I moved to Boston" after six "I live in
Seattle") shares too few words with the copies to fold, so it keeps a slot of its own.

Word sets, not embeddings: the test is exact and cheap, needs no vectors from the store (any
backend) and never folds two statements of different values ("blue" / "green": 4 of 6 words).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence, TypeVar

from ..core.timeutil import instant_key

#: Default similarity from which two documents are copies of one another: a sentence of five words
#: folds with itself plus one word ("I still live in Seattle"), not with one word changed.
FOLD_THRESHOLD = 0.8

_WORD = re.compile(r"\w+")

T = TypeVar("T")


def word_set(text: str) -> frozenset[str]:
    """The lower-cased words (``\\w+``, any script) of ``text``."""
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 1.0 for two empty sets (two texts without a word are copies)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def fold_near_duplicates(
    ranked: Sequence[T],
    text: Callable[[T], str],
    time: Callable[[T], str | None],
    *,
    threshold: float = FOLD_THRESHOLD,
    limit: int | None = None,
) -> list[tuple[T, T, list[T]]]:
    """Fold the near-duplicates of ``ranked`` (best first).

    Args:
        ranked: documents, best first.
        text: a document's text (compared as :func:`word_set`).
        time: a document's timestamp (ISO; None sorts first, as the stores order them).
        threshold: the Jaccard similarity in [0, 1] from which a document joins an earlier one's
            group (compared with the group's first, best-ranked, member).
        limit: stop once this many groups are formed (None: fold the whole list); the documents
            after that point are not read, so a copy ranked below it does not join its group.

    Returns:
        ``[(kept, best, folded)]`` in the order of each group's best member: ``kept`` the group's
        latest member, ``best`` its best-ranked one (the rank the group stands at), ``folded`` the
        members other than ``kept`` (best first); at most ``limit`` groups.

    Raises:
        ValueError: ``threshold`` outside [0, 1].
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    heads: list[frozenset[str]] = []
    groups: list[list[tuple[int, T]]] = []
    for pos, doc in enumerate(ranked):
        if limit is not None and len(groups) >= limit:
            break
        words = word_set(text(doc))
        n = len(words)
        for head, group in zip(heads, groups):
            # |a ∩ b| / |a ∪ b| <= min / max of the sizes: most pairs are ruled out without a set operation
            if min(n, len(head)) >= threshold * max(n, len(head)) and jaccard(head, words) >= threshold:
                group.append((pos, doc))
                break
        else:
            heads.append(words)
            groups.append([(pos, doc)])
    out = []
    for group in groups:
        latest = max(group, key=lambda m: (instant_key(time(m[1])), -m[0]))
        out.append((latest[1], group[0][1], [d for p, d in group if p != latest[0]]))
    return out


__all__ = ["FOLD_THRESHOLD", "fold_near_duplicates", "jaccard", "word_set"]

"""Near-duplicate folding: a ranked list in which one fact said many times holds it once.

A history repeats itself: one fact said in six sessions, the same greeting every day. Ranked as
they are, the copies fill a small context and push out the other facts, and the older copies of a
fact outrank its one later correction. :func:`fold_near_duplicates` walks a ranked list best first
and puts each document into the group of the first earlier document it repeats
(:func:`repeats`: one's words are all among the other's, and they are at least ``threshold`` of
them); a group stands at the rank of its best member and is represented by its **latest** member
(by time; the best-ranked on a tie), with the other members' ids counted as folded.

A repeat may add words ("Oh, and I still live in Seattle"), never change one: "I moved to Boston"
after six "I live in Seattle", or an appointment on Friday beside one on Monday, keeps its own slot
whatever the overlap. Word sets ignore order, so "room 101 has the printer, room 102 the scanner"
repeats its swapped version. Only documents of one scope fold together (a search over every scope
never merges two tenants' records). Word sets, not embeddings: the test is exact and cheap and
needs no vectors from the store (any backend).
"""

from __future__ import annotations

import re
from typing import Callable, Hashable, Sequence, TypeVar

from ..core.timeutil import instant_key

#: Default share of the longer text's words the shorter one must hold (all of its own words being
#: among them): "I live in Seattle" repeats "I still live in Seattle" (4 of 5 words).
FOLD_THRESHOLD = 0.8
#: After the k-th group is formed, this many more documents (at least; ``limit`` when larger) are
#: read for copies of the groups already formed: copies score alike, so they rank close together.
LOOKAHEAD = 16

_WORD = re.compile(r"\w+")

T = TypeVar("T")


def word_set(text: str) -> frozenset[str]:
    """The lower-cased words (``\\w+``, any script) of ``text``."""
    return frozenset(_WORD.findall(text.lower()))


def repeats(a: frozenset[str], b: frozenset[str], threshold: float = FOLD_THRESHOLD) -> bool:
    """Whether word sets ``a`` and ``b`` are one statement said twice: the smaller is a subset of the
    larger and holds at least ``threshold`` of its words (then their Jaccard similarity is that
    share). Two empty sets repeat each other."""
    na, nb = len(a), len(b)
    if na > nb:
        a, b, na, nb = b, a, nb, na
    return na >= threshold * nb and a <= b


def fold_near_duplicates(
    ranked: Sequence[T],
    text: Callable[[T], str],
    time: Callable[[T], str | None],
    *,
    threshold: float = FOLD_THRESHOLD,
    limit: int | None = None,
    key: Callable[[T], Hashable] | None = None,
) -> list[tuple[T, T, list[T]]]:
    """Fold the repeats (:func:`repeats`) of ``ranked`` (best first).

    Args:
        ranked: documents, best first.
        text: a document's text (compared as :func:`word_set`).
        time: a document's timestamp (ISO; None sorts first, as the stores order them).
        threshold: in [0.5, 1]: the share of the longer text's words the shorter must hold
            (compared with the group's first, best-ranked, member).
        limit: the groups wanted (None: fold the whole list). Once ``limit`` groups are formed, the
            next ``max(limit, LOOKAHEAD)`` documents are still read for copies of them; the rest of
            the list is not read.
        key: only documents of equal ``key`` (e.g. their scope) fold together (None: any).

    Returns:
        ``[(kept, best, folded)]`` in the order of each group's best member: ``kept`` the group's
        latest member, ``best`` its best-ranked one (the rank the group stands at), ``folded`` the
        members other than ``kept`` (best first); at most ``limit`` groups.

    Raises:
        ValueError: ``threshold`` outside [0.5, 1].
    """
    if not 0.5 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0.5, 1], got {threshold}")
    heads: dict[Hashable, list[tuple[frozenset[str], int]]] = {}  # key -> (first member's words, group)
    groups: list[list[tuple[int, T]]] = []
    stop = None  # the position after which nothing is read
    for pos, doc in enumerate(ranked):
        if stop is not None and pos >= stop:
            break
        words = word_set(text(doc))
        same_key = heads.setdefault(key(doc) if key is not None else None, [])
        for head, g in same_key:
            if repeats(head, words, threshold):
                groups[g].append((pos, doc))
                break
        else:
            if stop is not None:  # the groups are formed: only copies of them are read now
                continue
            same_key.append((words, len(groups)))
            groups.append([(pos, doc)])
            if limit is not None and len(groups) >= limit:
                stop = pos + 1 + max(limit, LOOKAHEAD)
    out = []
    for group in groups:
        latest = max(group, key=lambda m: (instant_key(time(m[1])), -m[0]))
        out.append((latest[1], group[0][1], [d for p, d in group if p != latest[0]]))
    return out


__all__ = ["FOLD_THRESHOLD", "LOOKAHEAD", "fold_near_duplicates", "repeats", "word_set"]

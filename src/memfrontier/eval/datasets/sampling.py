"""Question slices of a benchmark: all questions, or a seeded slice that covers every category
(the frontier's and eval's ``--limit``; the routers' training draws)."""

from __future__ import annotations

import random
from collections import defaultdict

from ...core.types import Conversation, Question


def select_questions(convs: list[Conversation], limit: int | None, seed: int) -> list[Question]:
    """All questions, or a ``limit``-sized slice that covers every category: shuffle each category
    with ``seed`` and take them round-robin (categories in sorted order). Returned in dataset order."""
    return stratified_sample([q for c in convs for q in c.questions], limit, seed)


def stratified_sample(allq: list[Question], limit: int | None, seed: int) -> list[Question]:
    """:func:`select_questions` over a list of questions (kept in their given order)."""
    if limit is None or limit >= len(allq):
        return allq
    by_cat: dict[str, list[Question]] = defaultdict(list)
    for q in allq:
        by_cat[q.category].append(q)
    rng = random.Random(seed)
    for qs in by_cat.values():
        rng.shuffle(qs)
    picked: set[str] = set()
    cats = sorted(by_cat)
    while len(picked) < limit:
        for c in cats:
            if by_cat[c] and len(picked) < limit:
                picked.add(by_cat[c].pop().id)
    return [q for q in allq if q.id in picked]


__all__ = ["select_questions", "stratified_sample"]

"""Counts in words for people: ``plural(1, "call")`` is ``"1 call"``, ``plural(2, "call")`` is
``"2 calls"``. One helper, so every message the command line, the tables and the errors print
agrees with its number."""

from __future__ import annotations

#: Nouns whose plural is not the noun plus ``s``.
_IRREGULAR = {
    "entry": "entries",
    "query": "queries",
    "summary": "summaries",
    "memory": "memories",
    "match": "matches",
    "batch": "batches",
    "index": "indexes",
}


def plural_noun(n: int | float, noun: str, many: str | None = None) -> str:
    """``noun`` for a count of ``n``: singular when ``n == 1``, else ``many`` (default: the
    irregular form above, else ``noun + "s"``). A multi-word noun is pluralised on its last word
    (``"model call"`` -> ``"model calls"``)."""
    if n == 1:
        return noun
    if many is not None:
        return many
    head, _, last = noun.rpartition(" ")
    return (head + " " if head else "") + _IRREGULAR.get(last, last + "s")


def plural(n: int | float, noun: str, many: str | None = None) -> str:
    """``"N noun"`` with the noun agreeing with ``n`` (see :func:`plural_noun`):
    ``plural(1, "call") == "1 call"``, ``plural(0, "record") == "0 records"``,
    ``plural(3, "entry") == "3 entries"``."""
    return f"{n} {plural_noun(n, noun, many)}"

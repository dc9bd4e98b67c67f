"""Fitting text into a token budget: keep whole lines while they fit (:func:`fit_lines`), or cut
one string until it fits (:func:`shrink_to_fit`). The token counter is the caller's (the model
whose window is being filled), so these functions load nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: A token counter: the number of tokens of a string under some model's tokenizer.
CountTokens = Callable[[str], int]


def fit_lines(lines: Iterable[str], room: int, count: CountTokens) -> tuple[list[str], int]:
    """The longest leading run of ``lines`` whose tokens fit in ``room``, and the tokens it uses.

    Each line costs ``count(line) + 1`` tokens (the line plus the newline that joins it to the
    next), so ``"\\n".join(kept)`` never needs more than ``used <= room`` tokens. Stops at the first
    line that does not fit (a later, shorter line is not taken: the order is the priority).
    Returns ``(kept, used)``; the caller tells truncation by ``len(kept) < len(lines)``.

    >>> fit_lines(["ab", "cde", "f"], 7, len)  # 3 + 4 tokens fit; "f" would make 9
    (['ab', 'cde'], 7)
    """
    kept: list[str] = []
    used = 0
    for line in lines:
        n = count(line) + 1
        if used + n > room:
            break
        kept.append(line)
        used += n
    return kept, used


def shrink_to_fit(text: str, room: int, count: CountTokens, factor: float = 0.9) -> str:
    """The prefix of ``text`` left after cutting it to ``int(len * factor)`` characters until
    ``count(prefix) <= room`` (``""`` when nothing fits). ``text`` itself when it fits.

    Geometric cutting needs O(log) token counts instead of one per character; the prefix found is
    not the longest that fits, only one within a factor of it. ``factor`` (0 < factor < 1): the
    share kept per step; a larger one keeps more of the text for more counts. Callers keep the
    factor their prompts were recorded with (the answerer's context line 0.9, MemPilot's
    observation cap 0.85): another factor cuts at another character, so another prompt.

    >>> shrink_to_fit("abcdefghij", 5, len)  # 10 -> 9 -> 8 -> 7 -> 6 -> 5 characters
    'abcde'
    """
    if not 0 < factor < 1:
        raise ValueError(f"factor must be in (0, 1), got {factor}")
    while text and count(text) > room:
        text = text[: int(len(text) * factor)]
    return text


def cut_to_tokens(
    text: str, room: int, count: CountTokens, *, whole: CountTokens | None = None, overhead: int = 0
) -> tuple[str, bool]:
    """``text`` cut to fit: whole lines from the top, then, when one line is left that does not
    fit alone, that line shrunk (:func:`shrink_to_fit`, factor 0.9). Returns ``(text, cut)``.

    ``whole(text)`` (default ``count``) is what must end ``<= room``: a prompt's count when
    ``text`` is placed in one (``overhead``: the tokens that prompt takes without it). Lines are
    first taken by their own counts in ``room - overhead`` (:func:`fit_lines`); since the parts'
    counts do not add up to the whole's, lines are then dropped from the tail until the whole fits.

    >>> cut_to_tokens("ab\\ncde\\nf", 7, len)  # lines cost 3 + 4; 'f' would make 9
    ('ab\\ncde', True)
    >>> cut_to_tokens("abcdefghij", 5, len)
    ('abcde', True)
    """
    whole = whole or count
    if whole(text) <= room:
        return text, False
    lines = text.splitlines()
    kept = fit_lines(lines, room - overhead, count)[0] or lines[:1]
    while len(kept) > 1 and whole("\n".join(kept)) > room:
        kept.pop()
    if len(kept) == 1:
        kept = [shrink_to_fit(kept[0], room, whole, 0.9)]
    return "\n".join(kept), True

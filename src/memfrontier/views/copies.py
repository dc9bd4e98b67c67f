"""Checks that keep transcript and prompt examples out of memories a model derives from turns:
whether a text copies its source turns (a small model asked for a note or a narrative often
returns the messages themselves) and whether it names people of a prompt's worked example whom
the source does not name (the example written into memory). Shared by MemoryCPT's episodes and
AutoMEM's graph notes.
"""

from __future__ import annotations

import re

COPY_FRACTION = 0.5  # at least this share of a text's words inside whole copied turns makes a copy

_WORD_RE = re.compile(r"\w+")
# a turn written as dialogue: "Sam: ..." or a quote, as records render it ("Sam said, '...'") or
# with another verb of speech ("Sam replied: '...'", "Sam asks “...”"); reported speech without
# quotes, "Sam said it is done", is a retelling
_SPEECH_VERBS = r"(?:said|says|replied|replies|asked|asks|answered|answers|wrote|writes|added|adds|told \w+)"
_SPEAKER_PREFIX = re.compile(r"^\s*[\w .'-]{1,40}(?::\s|\s+" + _SPEECH_VERBS + r"[,:]?\s*[\"'\u201c\u2018])")


def words(text: str) -> list[str]:
    """The lower-cased word tokens of ``text`` (``\\w+``): punctuation and case never hide a copy."""
    return _WORD_RE.findall(text.lower())


def _contains(seq: list[str], sub: list[str]) -> bool:
    n = len(sub)
    return any(seq[i : i + n] == sub for i in range(len(seq) - n + 1))


def copies_turns(text: str, turns: list[str]) -> bool:
    """True when ``text`` is a verbatim copy of source turns: whole turns (3+ words) cover at least
    :data:`COPY_FRACTION` of its words, or it is a stretch of one turn covering 80% of that turn,
    or a stretch of 3+ words of a turn written as dialogue (``"Sam: Hey Evan, good to see you!"``,
    ``"Sam said, 'Hey Evan, good to see you!'"``, also when cut short).
    Words are compared lower-cased without punctuation, so a ``"Sam: "`` prefix does not hide a copy."""
    text_words = words(text)
    if not text_words:
        return False
    speaker = _SPEAKER_PREFIX.match(text)
    if speaker:
        said = words(text[speaker.end() :])
        if len(said) >= 3 and any(_contains(words(t), said) for t in turns):
            return True
    copied = 0
    for turn in turns:
        tw = words(turn)
        if len(tw) < 3:
            continue
        if _contains(text_words, tw):
            copied += len(tw)
        elif len(text_words) >= 3 and len(text_words) >= 0.8 * len(tw) and _contains(tw, text_words):
            return True
    return copied >= COPY_FRACTION * len(text_words)


def names_absent_people(text: str, names: tuple[str, ...], turns: list[str]) -> bool:
    """Whether ``text`` names one of ``names`` (a prompt example's people) that no turn names."""
    found = {n.lower() for n in names}.intersection(words(text))
    return bool(found - set().union(*(words(t) for t in turns)))


__all__ = ["COPY_FRACTION", "copies_turns", "names_absent_people", "words"]

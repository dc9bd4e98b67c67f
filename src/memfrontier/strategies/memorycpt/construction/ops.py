"""Validation of the construction roles' JSON operations before anything touches the bank.

A model never writes the store: its JSON is parsed, checked here, and only then applied by the
builder. Each function returns the accepted operation(s) plus the reasons for what it rejected
(the builder counts them in the ledger), and raises :class:`OperationError` when the output as a
whole is unusable (the builder then retries the call once, then falls back).

Valid JSON is not enough: every title, narrative and fact also passes :func:`content_problem`,
which rejects text that is too short, bare punctuation (``":{"``, ``","``), an echo of the
instructions, or a verbatim copy of the source turns (``"Sam: Hey Evan, good to see you!"`` as a
"fact"). The reason names (:data:`CONTENT_REASONS`) are what the builder counts.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field

from ....core.timeutil import format_instant
from ....views.copies import copies_turns, names_absent_people
from ....views.copies import words as _words
from . import prompts as P
from .dates import parse_timestamp

MAX_FACT_CHARS = 300
MIN_FACT_WORDS = 3
MIN_TITLE_WORDS = 2
MIN_CONTENT_WORDS = 5
ECHO_NGRAM = 5  # this many consecutive words shared with an instruction make an echo
CONTENT_REASONS = ("bare_punctuation", "too_few_words", "instruction_echo", "copied_turn")

_INSTRUCTIONS = (
    P.SEGMENTER_SYSTEM,
    P.EPISODE_SYSTEM,
    P.MERGER_SYSTEM,
    P.PREDICT_SYSTEM,
    P.EXTRACT_SYSTEM,
    P.EXTRACT_DIRECT_SYSTEM,
)
# the labels of the roles' user prompts (episodic_prompts.*_user): a text holding one is an echo
_PROMPT_LABELS = re.compile(
    r"\b(?:JSON|Messages|Episode topic|Original messages|Prediction|Known facts|"
    r"Stored episodes|New episode|Predicted content|Episode title):"
)
# the line every role reads for a turn: "[2023-05-08 13:56] Evan: text" (construction.episodic.render_turn)
_TURN_LINE = re.compile(
    r"^\s*(?:\d+\.\s+)?\[(?:\d{4}-\d{2}-\d{2} \d{2}:\d{2}|unknown time)\] [^:\n]*: (.*)$", re.MULTILINE
)


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


_INSTRUCTION_NGRAMS = set().union(*(_ngrams(_words(t), ECHO_NGRAM) for t in _INSTRUCTIONS))


def turn_texts(prompt: str) -> list[str]:
    """The turn bodies quoted in a role's prompt (lines rendered ``[YYYY-MM-DD HH:MM] speaker: text``)."""
    return [m.group(1).strip() for m in _TURN_LINE.finditer(prompt)]


def _day_words(iso: str) -> tuple[str, ...]:
    d = _dt.date.fromisoformat(iso)
    return (d.strftime("%B").lower(), str(d.day), str(d.year))


# each example day as the words of its written form ("March 12, 2024" -> march, 12, 2024)
_EXAMPLE_DAYS = {iso: _day_words(iso) for iso in P.EXAMPLE_DATES}


def gives_example_date(text: str, day: str | None) -> bool:
    """Whether ``text`` gives a day of the episode prompt's examples (:data:`P.EXAMPLE_DATES`,
    written "March 12, 2024") other than ``day`` (the messages' timestamp, ISO)."""
    other = {words for iso, words in _EXAMPLE_DAYS.items() if not (day and day.startswith(iso))}
    return bool(other & _ngrams(_words(text), 3))


def content_problem(text: str, *, min_words: int, turns: list[str] = ()) -> str | None:
    """Why ``text`` (a title, narrative or fact the model wrote) is not memory content, or None.

    Reasons, checked in order: ``bare_punctuation`` (no letter or digit), ``too_few_words``
    (fewer than ``min_words`` words), ``instruction_echo`` (a prompt label such as ``JSON:`` or
    :data:`ECHO_NGRAM` consecutive words of a role's instructions), ``copied_turn``
    (:func:`copies_turns` against ``turns``, the source turn texts).
    """
    words = _words(text)
    if not words:
        return "bare_punctuation"
    if len(words) < min_words:
        return "too_few_words"
    if _PROMPT_LABELS.search(text) or _ngrams(words, ECHO_NGRAM) & _INSTRUCTION_NGRAMS:
        return "instruction_echo"
    if turns and copies_turns(text, list(turns)):
        return "copied_turn"
    return None


class OperationError(ValueError):
    """The role's output as a whole cannot be applied (wrong shape, empty, unknown target).
    ``reason`` is a :data:`CONTENT_REASONS` name when the content check refused it, else None."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason


@dataclass
class Segment:
    """Message positions (1-based, ascending) of one episode and its topic."""

    indices: list[int]
    topic: str
    from_model: bool = True


@dataclass
class EpisodeDraft:
    title: str
    content: str
    timestamp: str | None


@dataclass
class MergeDecision:
    merge: bool
    target: int = 0  # 1-based position in the candidate list when merging
    draft: EpisodeDraft | None = None


@dataclass
class FactOps:
    facts: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(obj: dict, key: str) -> str:
    v = obj.get(key)
    return v.strip() if isinstance(v, str) else ""


def validate_segments(obj, n_messages: int) -> tuple[list[Segment], list[str]]:
    """BatchSegmenter output -> segments covering every message exactly once.

    An episode naming an index outside 1..n, a repeated index, or no index is rejected (reason
    returned). Messages no accepted episode covers are grouped into contiguous runs, each its own
    segment (``from_model=False``), so nothing is dropped. Segments come back in order of their
    first message. Raises OperationError when ``obj`` has no ``episodes`` list.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("episodes"), list):
        raise OperationError("segmenter output has no 'episodes' list")
    used: set[int] = set()
    segments: list[Segment] = []
    rejected: list[str] = []
    for k, ep in enumerate(obj["episodes"]):
        if not isinstance(ep, dict) or not isinstance(ep.get("indices"), list) or not ep["indices"]:
            rejected.append(f"episode {k}: no indices")
            continue
        idx = ep["indices"]
        if not all(_is_int(i) for i in idx):
            rejected.append(f"episode {k}: non-integer index")
            continue
        bad = [i for i in idx if not 1 <= i <= n_messages]
        if bad:
            rejected.append(f"episode {k}: unknown indices {bad[:5]}")
            continue
        if len(set(idx)) != len(idx) or used.intersection(idx):
            rejected.append(f"episode {k}: index already used")
            continue
        used.update(idx)
        segments.append(Segment(sorted(idx), _text(ep, "topic")))
    run: list[int] = []
    for i in range(1, n_messages + 1):
        if i in used:
            if run:
                segments.append(Segment(run, "", from_model=False))
                run = []
        else:
            run.append(i)
    if run:
        segments.append(Segment(run, "", from_model=False))
    segments.sort(key=lambda s: s.indices[0])
    return segments, rejected


def _timestamp(value: str, fallback: str | None) -> tuple[str | None, bool]:
    """(canonical UTC timestamp, was_fixed): the model's timestamp when it is a complete absolute
    date, else the fallback (the session time). "N/A", "today", "Tuesday", "Sunday afternoon",
    "(Mon) 17:50" are not: they would otherwise be completed from the wall clock."""
    parsed = parse_timestamp(value)
    if parsed is None:
        ref = parse_timestamp(fallback)
        return (format_instant(ref) if ref is not None else fallback), True
    return format_instant(parsed), False


def validate_episode(
    obj, fallback_timestamp: str | None, turns: list[str] = (), speakers: list[str] = ()
) -> tuple[EpisodeDraft, bool]:
    """EpisodeGenerator output -> (draft, timestamp_was_fixed). Raises OperationError without a
    non-empty title and content, or (with ``reason`` set) when either fails :func:`content_problem`
    (title: 2+ words; content: 5+ words and not a copy of ``turns``, the source turn texts) or
    names a person of the prompt's worked examples whom neither ``turns`` nor ``speakers`` (the
    source turns' speakers) name, or gives an example's day other than ``fallback_timestamp``'s
    (:func:`gives_example_date`; both ``instruction_echo``).
    A timestamp that is not a complete absolute date is replaced by ``fallback_timestamp`` (the
    segment's session time); both come back in the canonical UTC form."""
    if not isinstance(obj, dict):
        raise OperationError("episode output is not an object")
    title, content = _text(obj, "title"), _text(obj, "content")
    if not title or not content:
        raise OperationError("episode output has an empty title or content")
    for what, text, min_words, against in (
        ("title", title, MIN_TITLE_WORDS, ()),
        ("content", content, MIN_CONTENT_WORDS, turns),
    ):
        problem = content_problem(text, min_words=min_words, turns=against)
        if problem is None and (
            names_absent_people(text, P.EXAMPLE_NAMES, [*turns, *speakers])
            or gives_example_date(text, fallback_timestamp)
        ):
            problem = "instruction_echo"
        if problem is not None:
            raise OperationError(f"episode {what} rejected: {problem}", reason=problem)
    ts, fixed = _timestamp(_text(obj, "timestamp"), fallback_timestamp)
    return EpisodeDraft(title, content, ts), fixed


def validate_merge(
    obj, n_candidates: int, fallback_timestamp: str | None, turns: list[str] = (), speakers: list[str] = ()
) -> MergeDecision:
    """EpisodeMerger output -> decision. Raises OperationError for an unknown decision, a merge
    target that is not one of the ``n_candidates`` offered (1-based), or a merge without content;
    the merged episode is checked as :func:`validate_episode` checks one."""
    if not isinstance(obj, dict):
        raise OperationError("merger output is not an object")
    decision = _text(obj, "decision").lower()
    if decision == "new":
        return MergeDecision(False)
    if decision != "merge":
        raise OperationError(f"unknown merge decision {decision!r}")
    target = obj.get("target")
    if not _is_int(target) or not 1 <= target <= n_candidates:
        raise OperationError(f"merge target {target!r} is not one of the {n_candidates} candidates")
    draft, _ = validate_episode(obj, fallback_timestamp, turns, speakers)
    return MergeDecision(True, target, draft)


def normalise_fact(text: str) -> str:
    """Lower-case, collapse spaces, drop trailing punctuation: the key for exact-duplicate facts."""
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(".!;:, ")


def validate_facts(obj, existing: set[str] = frozenset(), turns: list[str] = ()) -> FactOps:
    """SemanticExtractor output -> new facts. Each fact must be a non-empty string of at most
    300 characters that passes :func:`content_problem` (3+ words, not an echo, not a copy of
    ``turns``, the source turn texts) and is not a duplicate (by :func:`normalise_fact`) of an
    existing or earlier fact; others are rejected one by one, their reason (a
    :data:`CONTENT_REASONS` name, or ``empty``, ``too_long``, ``duplicate``) in ``rejected``.
    Raises OperationError when ``facts`` is not a list."""
    if not isinstance(obj, dict) or not isinstance(obj.get("facts"), list):
        raise OperationError("extractor output has no 'facts' list")
    out = FactOps()
    seen = set(existing)
    for f in obj["facts"]:
        if not isinstance(f, str) or not f.strip():
            out.rejected.append("empty")
            continue
        text = re.sub(r"\s+", " ", f.strip())
        if len(text) > MAX_FACT_CHARS:
            out.rejected.append("too_long")
            continue
        problem = content_problem(text, min_words=MIN_FACT_WORDS, turns=turns)
        if problem is not None:
            out.rejected.append(problem)
            continue
        key = normalise_fact(text)
        if not key or key in seen:
            out.rejected.append("duplicate")
            continue
        seen.add(key)
        out.facts.append(text)
    return out

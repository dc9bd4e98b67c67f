"""Validation of the construction roles' JSON operations before anything touches the bank.

A model never writes the store: its JSON is parsed, checked here, and only then applied by the
builder. Each function returns the accepted operation(s) plus the reasons for what it rejected
(the builder counts them in the ledger), and raises :class:`OperationError` when the output as a
whole is unusable (the builder then retries the call once, then falls back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .dates import parse_timestamp

MAX_FACT_CHARS = 300


class OperationError(ValueError):
    """The role's output as a whole cannot be applied (wrong shape, empty, unknown target)."""


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
    """(ISO timestamp, was_fixed): a readable model timestamp, else the fallback."""
    parsed = parse_timestamp(value)
    if parsed is None:
        return fallback, True
    return parsed.isoformat(timespec="minutes"), False


def validate_episode(obj, fallback_timestamp: str | None) -> tuple[EpisodeDraft, bool]:
    """EpisodeGenerator output -> (draft, timestamp_was_fixed). Raises OperationError without a
    non-empty title and content. An unreadable timestamp is replaced by ``fallback_timestamp``
    (the segment's first message time)."""
    if not isinstance(obj, dict):
        raise OperationError("episode output is not an object")
    title, content = _text(obj, "title"), _text(obj, "content")
    if not title or not content:
        raise OperationError("episode output has an empty title or content")
    ts, fixed = _timestamp(_text(obj, "timestamp"), fallback_timestamp)
    return EpisodeDraft(title, content, ts), fixed


def validate_merge(obj, n_candidates: int, fallback_timestamp: str | None) -> MergeDecision:
    """EpisodeMerger output -> decision. Raises OperationError for an unknown decision, a merge
    target that is not one of the ``n_candidates`` offered (1-based), or a merge without content."""
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
    draft, _ = validate_episode(obj, fallback_timestamp)
    return MergeDecision(True, target, draft)


def normalise_fact(text: str) -> str:
    """Lower-case, collapse spaces, drop trailing punctuation: the key for exact-duplicate facts."""
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(".!;:, ")


def validate_facts(obj, existing: set[str] = frozenset()) -> FactOps:
    """SemanticExtractor output -> new facts. Each fact must be a non-empty string of at most
    300 characters, not a duplicate (by :func:`normalise_fact`) of an existing or earlier fact;
    others are rejected one by one. Raises OperationError when ``facts`` is not a list."""
    if not isinstance(obj, dict) or not isinstance(obj.get("facts"), list):
        raise OperationError("extractor output has no 'facts' list")
    out = FactOps()
    seen = set(existing)
    for f in obj["facts"]:
        if not isinstance(f, str) or not f.strip():
            out.rejected.append("empty or non-string fact")
            continue
        text = re.sub(r"\s+", " ", f.strip())
        if len(text) > MAX_FACT_CHARS:
            out.rejected.append("fact too long")
            continue
        key = normalise_fact(text)
        if not key or key in seen:
            out.rejected.append("duplicate fact")
            continue
        seen.add(key)
        out.facts.append(text)
    return out

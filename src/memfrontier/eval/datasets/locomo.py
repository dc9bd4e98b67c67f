"""LoCoMo loader (``locomo/locomo10.json``; snap-research/LoCoMo, Maharana et al., ACL 2024).

One :class:`Conversation` per sample (id ``conv-49``): every turn becomes a ``Record`` with id
``conv-49:D3:7``, session ``conv-49:session_3`` and the session's date as ISO-8601 timestamp.
Questions get id ``conv-49:q<index>`` (0-based index into ``qa``), ``category`` "1".."5"
(1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial).

Quirks handled (see shared/data/README.md): int answers are cast to str; category 5 usually has
only ``adversarial_answer`` (answer None); malformed evidence strings are split on ``;``/``,``/
whitespace and ids that do not resolve to a turn are dropped and counted in
``question.meta["unresolved_evidence"]``; dangling ``session_N_date_time`` keys are ignored.
"""

from __future__ import annotations

import os
import re
from datetime import datetime

from ...core.timeutil import parse_instant
from ...core.types import Conversation, ImageRef, Question, Record, Scope
from . import load_conversations

TEST_CONVERSATIONS = ("conv-49", "conv-50")
SCORED_CATEGORIES = ("1", "2", "3", "4")
CATEGORY_NAMES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}

_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for m in names
}
_DATE_RE = re.compile(
    r"^\s*(\d{1,2})[:.](\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
_SESSION_RE = re.compile(r"^session_(\d+)$")
_DIA_RE = re.compile(r"^D(\d+):(\d+)$")
_EVIDENCE_SPLIT_RE = re.compile(r"[;,\s]+")


def parse_locomo_datetime(text: str) -> str | None:
    """``"1:56 pm on 8 May, 2023"`` -> ``"2023-05-08T13:56:00"``; None if unparseable.

    A strict regex first (every date in locomo10.json matches), then
    :func:`~memfrontier.core.timeutil.parse_instant` (a complete date in another spelling, read in
    UTC; a partial one such as ``"1:56 pm on Monday"`` is None, never completed from today).
    """
    m = _DATE_RE.match(text or "")
    if m:
        hour, minute, ampm, day, month, year = m.groups()
        mon = _MONTHS.get(month.lower())
        h = int(hour)
        if mon is not None and 1 <= h <= 12:
            h = h % 12 + (12 if ampm.lower() == "p" else 0)
            try:
                return datetime(int(year), mon, int(day), h, int(minute)).isoformat()
            except ValueError:
                pass
    if not text or not text.strip():
        return None
    dt = parse_instant(text.replace(" on ", " "))
    return dt.replace(tzinfo=None, microsecond=0).isoformat() if dt else None


def _session_time(raw, where: str) -> str | None:
    """A session's ``_date_time`` value -> its time (:func:`parse_locomo_datetime`); None when the
    file gives none (key missing, null or empty: the session is undated and named in the run's
    summary). Raises ValueError naming ``where`` and the value for one that is not a complete date
    (``"2023/13/01"``, ``"(Mon) 17:50"``): it is never completed from today, nor dropped silently."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    ts = parse_locomo_datetime(raw) if isinstance(raw, str) else None
    if ts is None:
        raise ValueError(f"{where} {raw!r} is not a complete date (expected e.g. '1:56 pm on 8 May, 2023')")
    return ts


def _parse_evidence(raw: list, turn_ids: set[str]) -> tuple[list[str], list[str]]:
    """Split evidence strings into dia ids; return (resolved dia ids in order, unresolved tokens).
    A single string (``"D1:3"`` where the format has ``["D1:3"]``) is one item, not its characters."""
    resolved: list[str] = []
    unresolved: list[str] = []
    for item in [raw] if isinstance(raw, str) else raw or []:
        for tok in _EVIDENCE_SPLIT_RE.split(str(item).strip()):
            if not tok:
                continue
            if _DIA_RE.match(tok) and tok in turn_ids:
                if tok not in resolved:
                    resolved.append(tok)
            else:
                unresolved.append(tok)
    return resolved, unresolved


def _convert_sample(sample: dict) -> Conversation:
    sid = sample["sample_id"]
    conv = sample["conversation"]
    scope = Scope(user_id=sid)
    sessions = sorted(
        (int(m.group(1)), key) for key in conv if (m := _SESSION_RE.match(key)) and isinstance(conv[key], list)
    )
    records: list[Record] = []
    turn_ids: set[str] = set()
    session_dates: dict[str, str | None] = {}
    for n, key in sessions:
        raw_date = conv.get(f"{key}_date_time")
        ts = _session_time(raw_date, f"{sid}: {key}_date_time")
        session_id = f"{sid}:session_{n}"
        session_dates[session_id] = ts
        for idx, turn in enumerate(conv[key]):
            dia_id = turn["dia_id"]
            rid = f"{sid}:{dia_id}"
            meta: dict = {"dia_id": dia_id, "session": n, "turn_index": idx, "session_date_raw": raw_date}
            images: list[ImageRef] = []
            if turn.get("blip_caption"):
                images.append(ImageRef(id=f"{rid}:img0", caption=str(turn["blip_caption"]), path=None))
            if "img_url" in turn:
                urls = turn["img_url"]
                meta["img_urls"] = list(urls) if isinstance(urls, list) else [urls]
            for extra in ("query", "re-download"):
                if extra in turn:
                    meta[extra.replace("-", "_")] = turn[extra]
            records.append(
                Record(
                    id=rid,
                    kind="turn",
                    scope=scope,
                    session_id=session_id,
                    speaker=str(turn["speaker"]),
                    role="user",
                    timestamp=ts,
                    text=str(turn.get("text", "")),
                    images=images,
                    meta=meta,
                )
            )
            turn_ids.add(dia_id)

    questions: list[Question] = []
    for i, qa in enumerate(sample["qa"]):
        cat = str(int(qa["category"]))
        resolved, unresolved = _parse_evidence(qa.get("evidence", []), turn_ids)
        adv = qa.get("adversarial_answer")
        questions.append(
            Question(
                id=f"{sid}:q{i}",
                conversation_id=sid,
                question=str(qa["question"]),
                answer=qa.get("answer"),  # validator casts int -> str; None when absent (cat 5)
                category=cat,
                evidence_ids=[f"{sid}:{d}" for d in resolved],
                question_date=None,
                adversarial_answer=None if adv is None else str(adv),
                abstention=cat == "5",
                meta={
                    "index": i,
                    "evidence_raw": [ev] if isinstance(ev := qa.get("evidence", []), str) else list(ev),
                    "unresolved_evidence": len(unresolved),
                    "unresolved_evidence_tokens": unresolved,
                },
            )
        )

    summaries = sample.get("session_summary") or {}
    return Conversation(
        id=sid,
        records=records,
        questions=questions,
        meta={
            "dataset": "locomo",
            "speaker_a": conv.get("speaker_a"),
            "speaker_b": conv.get("speaker_b"),
            "n_sessions": len(sessions),
            "session_dates": session_dates,
            "session_summaries": {
                f"{sid}:session_{k.split('_')[1]}": v for k, v in summaries.items() if k.count("_") >= 2
            },
        },
    )


def load_locomo(path: str | os.PathLike | None = None) -> list[Conversation]:
    """Load locomo10.json -> 10 conversations (272 sessions, 5,882 turns, 1,986 questions).

    ``path``: the JSON file or a data-root folder; default ``data_root()/locomo/locomo10.json``.
    Raises :class:`DatasetError` if the file is missing, not JSON or not in LoCoMo's schema.
    """
    return load_conversations("locomo", path, _convert_sample)


def locomo_split(conversations: list[Conversation], split: str) -> list[Conversation]:
    """Select the benchmark split; records are kept whole, questions are filtered.

    ``test``: conv-49 and conv-50, categories 1-4 (314 questions); ``train``: the other eight
    conversations, categories 1-4; ``all``: everything (categories 1-5). Raises ValueError otherwise.
    """
    if split == "all":
        return list(conversations)
    if split not in ("test", "train"):
        raise ValueError(f"unknown LoCoMo split {split!r}; choose test, train or all")
    out = []
    for c in conversations:
        if (c.id in TEST_CONVERSATIONS) != (split == "test"):
            continue
        qs = [q for q in c.questions if q.category in SCORED_CATEGORIES]
        out.append(c.model_copy(update={"questions": qs, "meta": {**c.meta, "split": split}}))
    return out

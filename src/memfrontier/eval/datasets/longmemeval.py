"""LongMemEval loader (oracle, S or M file; xiaowu0162/LongMemEval, Wu et al., ICLR 2025).

Two datasets read this format: ``longmemeval`` (the oracle file: each question's evidence sessions
only) and ``longmemeval_s`` (the S setting, ``longmemeval_s_dev.json.gz``: ~50 sessions a question,
most of them unrelated chats), whose ``test`` split holds only questions no trained part has seen
(:func:`load_longmemeval_s`).

One :class:`Conversation` per question (id = ``question_id``, scope ``user_id=question_id``): its
haystack sessions become turn records. Session id ``f"{qid}:{haystack_session_id}"``; when a
haystack session id repeats inside one question (13 questions in S), later occurrences get
``#<session_index>`` appended so sessions and record ids stay unique. Record id
``f"{session_id}:{turn}"`` (turn 1-based). Timestamps ``"2023/05/23 (Tue) 19:11"`` ->
``"2023-05-23T19:11:00"``. Turns with ``has_answer`` give the question's ``evidence_ids``;
``_abs`` questions have ``abstention=True``; int answers become str.
"""

from __future__ import annotations

import os
import random
import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from ...core.timeutil import foreign_character, parse_instant
from ...core.types import Conversation, Question, Record, Scope
from . import DATASET_FILES, DatasetError, how_to_override, load_conversations
from . import data_root as find_data_root
from .sampling import select_questions

#: LongMemEval questions the reports read, never trained on: the retrieval bench's samples of the
#: oracle file of these sizes (seed 0) and the frontier's oracle slices of these limits (seed 42,
#: eval's default). Every trained part (the turn reranker) draws from the other questions, in either
#: file (the oracle and S files share question ids).
REPORT_SAMPLES = (40, 100)
REPORT_SLICES = (30,)

QUESTION_TYPES = (
    "temporal-reasoning",
    "multi-session",
    "knowledge-update",
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
)

_DATE_RE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})\s*$")


def parse_lme_datetime(text: str | None) -> str | None:
    """``"2023/05/23 (Tue) 19:11"`` -> ``"2023-05-23T19:11:00"``; None if absent or unparseable.

    A strict regex first, then :func:`~memfrontier.core.timeutil.parse_instant` (a complete date in
    another spelling, read in UTC). None for a partial date (``"(Mon) 17:50"``: never completed
    from today), an impossible one (``"2023/13/01 10:00"``: not 13 January) and one holding a
    character no date is written with (:func:`~memfrontier.core.timeutil.foreign_character`, even
    inside the weekday this reader drops)."""
    if not text or foreign_character(text) is not None:
        return None
    m = _DATE_RE.match(text)
    if m:
        y, mo, d, h, mi = (int(g) for g in m.groups())
        try:
            return datetime(y, mo, d, h, mi).isoformat()
        except ValueError:
            pass
    dt = parse_instant(re.sub(r"\([^)]*\)", " ", text))
    return dt.replace(tzinfo=None, microsecond=0).isoformat() if dt else None


def _date(raw, where: str) -> str | None:
    """A date of the file -> its time (:func:`parse_lme_datetime`); None when absent (null, missing or
    empty). Raises ValueError naming ``where`` and the value for one that is not a complete date
    (``"2023/13/01 (Mon) 10:00"``, ``"(Mon) 17:50"``): never completed from today, nor dropped silently."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    ts = parse_lme_datetime(raw) if isinstance(raw, str) else None
    if ts is None:
        raise ValueError(f"{where} {raw!r} is not a complete date (expected e.g. '2023/05/23 (Tue) 19:11')")
    return ts


def _convert(item: dict) -> Conversation:
    qid = str(item["question_id"])
    scope = Scope(user_id=qid)
    dates = item["haystack_dates"]
    sids = item["haystack_session_ids"]
    sessions = item["haystack_sessions"]
    if not (len(dates) == len(sids) == len(sessions)):
        raise ValueError(
            f"question {qid}: haystack lists differ in length "
            f"(dates {len(dates)}, session ids {len(sids)}, sessions {len(sessions)})"
        )
    records: list[Record] = []
    evidence: list[str] = []
    seen: set[str] = set()
    session_ids: list[str] = []
    for si, (raw_sid, raw_date, turns) in enumerate(zip(sids, dates, sessions)):
        session_id = f"{qid}:{raw_sid}"
        if session_id in seen:
            session_id = f"{session_id}#{si}"
        seen.add(session_id)
        session_ids.append(session_id)
        ts = _date(raw_date, f"question {qid}: haystack_dates[{si}]")
        for ti, turn in enumerate(turns, start=1):
            role = str(turn["role"])
            rid = f"{session_id}:{ti}"
            has_answer = bool(turn.get("has_answer", False))
            records.append(
                Record(
                    id=rid,
                    kind="turn",
                    scope=scope,
                    session_id=session_id,
                    speaker=role,
                    role=role,
                    timestamp=ts,
                    text=str(turn["content"]),
                    meta={
                        "haystack_session_id": raw_sid,
                        "session_index": si,
                        "turn_index": ti,
                        "has_answer": has_answer,
                        "session_date_raw": raw_date,
                    },
                )
            )
            if has_answer:
                evidence.append(rid)
    answer_sids = set(item.get("answer_session_ids", []))
    question = Question(
        id=qid,
        conversation_id=qid,
        question=str(item["question"]),
        answer=item["answer"],  # validator casts int -> str
        category=str(item["question_type"]),
        evidence_ids=evidence,
        question_date=_date(item.get("question_date"), f"question {qid}: question_date"),
        abstention=qid.endswith("_abs"),
        meta={
            "question_date_raw": item.get("question_date"),
            "answer_session_ids": list(item.get("answer_session_ids", [])),
            "evidence_session_ids": [s for s, raw in zip(session_ids, sids) if raw in answer_sids],
        },
    )
    return Conversation(
        id=qid,
        records=records,
        questions=[question],
        meta={"dataset": "longmemeval", "n_sessions": len(sessions), "session_ids": session_ids},
    )


def load_longmemeval(path: str | os.PathLike | None = None) -> list[Conversation]:
    """Load a LongMemEval file -> one Conversation per question (oracle: 500).

    ``path``: the JSON file (oracle, S or M: same format) or a data-root folder; default
    ``data_root()/longmemeval/longmemeval_oracle.json``. Raises :class:`DatasetError` if the
    file is missing, not JSON or not in LongMemEval's schema. Loads the whole file in memory
    (fine for oracle and S; M is about 2.7 GB).
    """
    return load_conversations("longmemeval", path, _convert)


def longmemeval_sample(convs: list[Conversation], n: int, seed: int = 0) -> list[Conversation]:
    """``n`` of ``convs`` (one per question) drawn by ``random.Random(seed).sample``, sorted by id:
    the retrieval bench's LongMemEval sample (``benchmarks/bench_retrieval.py --lme-limit n --seed
    seed``); all of them when ``n`` is not smaller."""
    return sorted(random.Random(seed).sample(convs, min(n, len(convs))), key=lambda c: c.id)


def report_reserve(convs: list[Conversation]) -> set[str]:
    """The ids of the conversations (one per question) of ``convs`` (the oracle file) that a report
    reads (:data:`REPORT_SAMPLES`, :data:`REPORT_SLICES`): never trained on."""
    reserved = {c.id for n in REPORT_SAMPLES for c in longmemeval_sample(convs, n, 0)}
    owner = {q.id: c.id for c in convs for q in c.questions}
    return reserved | {owner[q.id] for n in REPORT_SLICES for q in select_questions(convs, n, 42)}


@lru_cache(maxsize=4)
def _reserve_of(oracle: Path) -> frozenset[str]:
    return frozenset(report_reserve(load_longmemeval(oracle)))


def _oracle_file(data_root) -> Path:
    return find_data_root(data_root) / DATASET_FILES["longmemeval"]


def load_longmemeval_s(
    path: str | os.PathLike | None = None, split: str = "all", data_root: str | os.PathLike | None = None
) -> list[Conversation]:
    """LongMemEval's S setting (``longmemeval_s_dev.json.gz``, 438 questions, ~50 sessions each) ->
    one Conversation per question, as :func:`load_longmemeval`.

    ``split``: ``test``: the S questions in the report reserve (:func:`report_reserve` of the oracle
    file under ``data_root``), which no trained part has seen in either file; the frontier's report
    slice is 60 of them (``--limit 60``, seed 42, stratified by question type); ``train``: the
    others (the training pool: what a trained part may read); ``all``. Only the split's items are
    converted. Raises :class:`DatasetError` for a missing or corrupt file (the oracle file too, for
    ``test`` and ``train``) and ValueError for another split."""
    if split not in ("test", "train", "all"):
        raise ValueError(f"unknown split {split!r} for longmemeval_s; choose one of ['test', 'train', 'all']")
    keep = None
    if split != "all":
        oracle = _oracle_file(data_root)
        if not oracle.is_file():
            raise DatasetError(
                f"longmemeval_s's {split} split is drawn from the LongMemEval oracle file (its report reserve: "
                f"the questions no trained part has seen), which is not at {oracle}: put longmemeval_oracle.json "
                f"in the data root's longmemeval/ ({how_to_override()}), or read the S file whole with split 'all'"
            )
        reserve = _reserve_of(oracle)
        keep = lambda item: (str(item.get("question_id")) in reserve) == (split == "test")  # noqa: E731
    return load_conversations("longmemeval_s", path, _convert, keep)

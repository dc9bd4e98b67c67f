"""Mem-Gallery loader (``mem_gallery/dialog/*.json``; Bei et al., arXiv 2601.03515), used by MemPilot.

One :class:`Conversation` per file (id = the file stem, e.g. ``Baking_Dessert_Daily_Life_Skill``).
Each dialogue round becomes one ``Record`` (a round is the turn-atomic unit MemPilot chunks):
id ``<conv>:D3:7``, session ``<conv>:D3``, timestamp the session date, text
``"<Name>: <user>\\nAssistant: <assistant>"``; image rounds keep their image ids, captions and paths
as :class:`ImageRef` (the path is resolved even though our copy has no image files: consumers must
check that the file exists). Questions get id ``<conv>:q<index>``, ``category`` = the ``point`` code
(FR, MR, TR, VR, TTL, VS, CD, KR, AR), evidence = the ``clue`` rounds as record ids. A question with
an image keeps its caption: it is appended to the question text as ``(Question image: <caption>)``
and kept in ``meta`` with the image path.

Splits (MemPilot App. A.4): conversations are split 70/10/20 into train/val/test with seed 13
(sorted ids shuffled by ``random.Random(13)``: 14 / 2 / 4 of the 20 conversations); answer-refusal
questions (``AR``, answer "Not mentioned.") are excluded from these splits as in the paper;
``all`` keeps every conversation and every question.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

from ...core.types import Conversation, ImageRef, Question, Record, Scope
from . import DatasetError, data_root, read_json, schema_error, skip_empty_turns

SPLIT_SEED = 13
SPLIT_FRACTIONS = (0.7, 0.1, 0.2)  # train, val, test
SPLITS = ("train", "val", "test", "all")
REFUSAL_POINT = "AR"
POINT_NAMES = {
    "FR": "factual retrieval",
    "MR": "multi-entity reasoning",
    "TR": "temporal reasoning",
    "VR": "visual-centric reasoning",
    "TTL": "test-time learning",
    "VS": "visual-centric search",
    "CD": "conflict detection",
    "KR": "knowledge resolution",
    "AR": "answer refusal",
}
_ROUND_RE = re.compile(r"^D(\d+):(\d+)$")
_SESSION_RE = re.compile(r"^D(\d+)$")
QA_KEY = "human-annotated QAs"


def dialog_dir(path: str | os.PathLike | None = None) -> Path:
    """The folder of Mem-Gallery JSON files: ``path`` may be that folder, a single file's folder, a
    data root (holding ``mem_gallery/dialog``) or None (the default data root)."""
    p = Path(path).expanduser() if path is not None else data_root() / "mem_gallery" / "dialog"
    if p.is_file():
        return p.parent
    if (p / "mem_gallery" / "dialog").is_dir():
        return p / "mem_gallery" / "dialog"
    return p


def _images(rnd: dict, base: Path) -> list[ImageRef]:
    ids = rnd.get("image_id") or []
    caps = rnd.get("image_caption") or []
    paths = rnd.get("input_image") or []
    if not (isinstance(ids, list) and isinstance(caps, list) and isinstance(paths, list)):
        raise TypeError(f"round {rnd.get('round')}: image_id / image_caption / input_image must be lists")
    if not (len(ids) == len(caps) == len(paths)):
        raise ValueError(
            f"round {rnd.get('round')}: image lists differ in length ({len(ids)}, {len(caps)}, {len(paths)})"
        )
    return [ImageRef(id=str(i), caption=str(c), path=str((base / p).resolve())) for i, c, p in zip(ids, caps, paths)]


def convert_file(path: Path, data: dict) -> Conversation:
    """One Mem-Gallery JSON object -> Conversation (raises KeyError/TypeError/ValueError on schema errors)."""
    cid = path.stem
    scope = Scope(user_id=cid)
    profile = data.get("character_profile") or {}
    name = str(profile.get("name") or "User")
    records: list[Record] = []
    round_ids: set[str] = set()
    dates: dict[str, str] = {}
    for session in data["multi_session_dialogues"]:
        sid = str(session["session_id"])
        if not _SESSION_RE.match(sid):
            raise ValueError(f"session id {sid!r} is not of the form D<k>")
        date = str(session["date"]) if session.get("date") else None
        dates[sid] = date
        for rnd in session["dialogues"]:
            rid = str(rnd["round"])
            if not _ROUND_RE.match(rid):
                raise ValueError(f"round id {rid!r} is not of the form D<k>:<i>")
            user, assistant = str(rnd.get("user", "")).strip(), str(rnd.get("assistant", "")).strip()
            text = "\n".join(
                t for t in (f"{name}: {user}" if user else "", f"Assistant: {assistant}" if assistant else "") if t
            )
            records.append(
                Record(
                    id=f"{cid}:{rid}",
                    kind="turn",
                    scope=scope,
                    session_id=f"{cid}:{sid}",
                    speaker="",
                    role="user",
                    timestamp=date,
                    text=text,
                    images=_images(rnd, path.parent),
                    meta={"round": rid, "session": sid},
                )
            )
            round_ids.add(rid)

    questions: list[Question] = []
    for i, qa in enumerate(data[QA_KEY]):
        clues = [str(c) for c in qa.get("clue") or []]
        resolved = [c for c in clues if c in round_ids]
        question = str(qa["question"]).strip()
        meta: dict = {
            "index": i,
            "point": qa["point"],
            "session_ids": list(qa.get("session_id") or []),
            "unresolved_clues": [c for c in clues if c not in round_ids],
        }
        if qa.get("question_image"):
            meta["question_image"] = str((path.parent / str(qa["question_image"])).resolve())
        caption = qa.get("image_caption")
        if caption:
            meta["question_image_caption"] = str(caption)
            question = f"{question}\n(Question image: {str(caption).strip()})"
        questions.append(
            Question(
                id=f"{cid}:q{i}",
                conversation_id=cid,
                question=question,
                answer=str(qa["answer"]),
                category=str(qa["point"]),
                evidence_ids=[f"{cid}:{c}" for c in resolved],
                abstention=qa["point"] == REFUSAL_POINT,
                meta=meta,
            )
        )
    return Conversation(
        id=cid,
        records=records,
        questions=questions,
        meta={
            "dataset": "mem_gallery",
            "source": str(path),
            "character": name,
            "session_dates": {f"{cid}:{k}": v for k, v in dates.items()},
        },
    )


def load_mem_gallery(path: str | os.PathLike | None = None) -> list[Conversation]:
    """Load every ``*.json`` of the Mem-Gallery dialog folder (20 conversations, 3,962 rounds,
    1,711 questions in our copy), sorted by conversation id.

    Raises :class:`DatasetError` when the folder is missing or empty, or a file is not JSON or
    not in Mem-Gallery's schema (the message names the file).
    """
    folder = dialog_dir(path)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise DatasetError(
            f"mem_gallery data not found: no *.json in {folder}; set MEMFRONTIER_DATA=/path/to/data "
            "(the folder holding mem_gallery/dialog) or pass --data-root"
        )
    convs = []
    for f in files:
        data = read_json(f, "mem_gallery")
        try:
            if not isinstance(data, dict):
                raise TypeError("top level is not an object")
            convs.append(convert_file(f, data))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise schema_error(f, "mem_gallery", exc) from exc
        skip_empty_turns(convs[-1])
    return convs


def split_ids(conversation_ids: list[str], seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    """Conversation ids -> ``{"train", "val", "test"}`` (70/10/20 by conversation, seeded shuffle of
    the sorted ids; sizes rounded, test taking the remainder)."""
    ids = sorted(conversation_ids)
    random.Random(seed).shuffle(ids)
    n_train = round(SPLIT_FRACTIONS[0] * len(ids))
    n_val = round(SPLIT_FRACTIONS[1] * len(ids))
    return {"train": ids[:n_train], "val": ids[n_train : n_train + n_val], "test": ids[n_train + n_val :]}


def mem_gallery_split(conversations: list[Conversation], split: str, seed: int = SPLIT_SEED) -> list[Conversation]:
    """Select ``split`` (train | val | test | all); see the module docstring. Raises ValueError otherwise."""
    if split == "all":
        return list(conversations)
    if split not in SPLITS:
        raise ValueError(f"unknown Mem-Gallery split {split!r}; choose one of {', '.join(SPLITS)}")
    keep = set(split_ids([c.id for c in conversations], seed)[split])
    return [
        c.model_copy(
            update={
                "questions": [q for q in c.questions if q.category != REFUSAL_POINT],
                "meta": {**c.meta, "split": split},
            }
        )
        for c in conversations
        if c.id in keep
    ]


__all__ = ["POINT_NAMES", "SPLITS", "SPLIT_SEED", "dialog_dir", "load_mem_gallery", "mem_gallery_split", "split_ids"]

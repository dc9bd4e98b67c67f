"""HotpotQA loader (dev distractor format; Yang et al., EMNLP 2018).

One :class:`Conversation` per question (id = ``_id``, scope ``user_id=_id``): each context
paragraph becomes a ``Record`` of kind "paragraph" with id ``f"{qid}:{title}"`` (``#2``, ``#3``
appended if a title repeats), speaker = title, text = sentences joined with "" (sentences after
the first keep their leading space). ``evidence_ids`` are the paragraphs named in
``supporting_facts`` (in order, deduplicated); the sentence-level facts stay in ``meta``.
"""

from __future__ import annotations

import os

from ...core.types import Conversation, Question, Record, Scope
from . import load_conversations


def _convert(item: dict) -> Conversation:
    qid = str(item["_id"])
    scope = Scope(user_id=qid)
    session_id = f"{qid}:context"
    records: list[Record] = []
    by_title: dict[str, str] = {}  # first record id per title (supporting facts name titles)
    counts: dict[str, int] = {}
    for pi, (title, sentences) in enumerate(item["context"]):
        title = str(title)
        counts[title] = counts.get(title, 0) + 1
        rid = f"{qid}:{title}" if counts[title] == 1 else f"{qid}:{title}#{counts[title]}"
        by_title.setdefault(title, rid)
        sentences = [str(s) for s in sentences]
        records.append(
            Record(
                id=rid,
                kind="paragraph",
                scope=scope,
                session_id=session_id,
                speaker=title,
                role="document",
                timestamp=None,
                text="".join(sentences),
                meta={"title": title, "paragraph_index": pi, "sentences": sentences},
            )
        )
    evidence: list[str] = []
    unresolved = 0
    facts = [[str(t), int(s)] for t, s in item.get("supporting_facts", [])]
    for title, _sent in facts:
        rid = by_title.get(title)
        if rid is None:
            unresolved += 1
        elif rid not in evidence:
            evidence.append(rid)
    question = Question(
        id=qid,
        conversation_id=qid,
        question=str(item["question"]),
        answer=item["answer"],
        category=str(item["type"]),
        evidence_ids=evidence,
        meta={"level": item.get("level"), "supporting_facts": facts, "unresolved_evidence": unresolved},
    )
    return Conversation(id=qid, records=records, questions=[question], meta={"dataset": "hotpotqa"})


def load_hotpotqa(path: str | os.PathLike | None = None) -> list[Conversation]:
    """Load a HotpotQA distractor file -> one Conversation per question (staged file: 103).

    ``path``: the JSON file or a data-root folder; default
    ``data_root()/hotpotqa/hotpot_dev_distractor_v1_103.json``. Raises :class:`DatasetError` if
    the file is missing, not JSON or not in HotpotQA's schema.
    """
    return load_conversations("hotpotqa", path, _convert)

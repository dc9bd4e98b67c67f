"""QAR training data and reward: the contextual-bandit pool of (q, M_q^RRF) states and the
cost-aware reward of a sampled summary (MemoryCPT Eq. 11-16).

- :func:`build_qar_pool` builds (or reuses) the episodic/semantic memory of the training
  conversations and turns each training question into one state: the summarizer prompt over its
  RRF candidates (the same prompt the ``memorycpt`` strategy uses at inference), plus the gold answer.
- :class:`SummaryReward` scores a batch of sampled summaries m_q: the frozen answerer reads
  (q, m_q), F1 is computed against the gold answer, and R = alpha F1 + (1 - alpha)(1 - C~) with the
  Eq. 14 cost of |m_q| and |y| tokens priced by the price book's roles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from ..answerer import Answerer
from ..core.types import Context, Conversation, Question, Record, Scope
from ..eval.metrics import locomo_f1, token_f1
from ..strategies.memorycpt import MemoryCPT, render_candidates, summary_messages
from .cost_reward import DEFAULT_ALPHA, SummaryCostModel


def first_sessions(records: list[Record], n_sessions: int | None) -> list[Record]:
    """The records of the first ``n_sessions`` sessions (in order of first appearance); all when None/0."""
    if not n_sessions:
        return list(records)
    keep: list[str] = []
    for r in records:
        if r.session_id not in keep:
            keep.append(r.session_id)
    allowed = set(keep[:n_sessions])
    return [r for r in records if r.session_id in allowed]


def answerable(questions: list[Question], record_ids: set[str]) -> list[Question]:
    """Questions with a gold answer whose gold evidence is non-empty and entirely in ``record_ids``."""
    return [q for q in questions if q.answer and q.evidence_ids and set(q.evidence_ids) <= record_ids]


async def build_qar_pool(mem, strategy: MemoryCPT, convs: list[Conversation], *, sessions: int | None = None,
                         max_questions: int | None = None, on_progress: Callable | None = None) -> list[dict]:
    """One GRPO state per training question (MemoryCPT Eq. 11).

    Each conversation's first ``sessions`` sessions are ingested and built (QAD, resumable); the
    questions answerable from them are kept (at most ``max_questions`` overall, in dataset order).
    Returns dicts with ``prompt`` (chat messages), ``question``, ``answer``, ``category``,
    ``conversation_id`` and ``candidates_tokens``.
    """
    progress = on_progress or (lambda *a, **k: None)
    pool: list[dict] = []
    for conv in convs:
        if max_questions is not None and len(pool) >= max_questions:
            break
        records = first_sessions(conv.records, sessions)
        scope = Scope(user_id=conv.id)
        await asyncio.to_thread(mem.store.add, records)
        progress("build", conversation=conv.id)
        await mem.build(strategy, scope)
        for q in answerable(conv.questions, {r.id for r in records}):
            if max_questions is not None and len(pool) >= max_questions:
                break
            episodes, facts = strategy.candidates(q.question, scope, mem.env)
            text = render_candidates(episodes, facts)
            pool.append({"prompt": summary_messages(q.question, text), "question": q.question, "answer": q.answer,
                         "category": q.category, "conversation_id": conv.id,
                         "candidates_tokens": mem.env.llm.count_tokens(text)})
        progress("pool", conversation=conv.id, size=len(pool))
    return pool


@dataclass
class SummaryReward:
    """R(q, m_q) for a batch of summaries (MemoryCPT Eq. 16), answering with the frozen answerer.

    ``dataset`` selects the F1 (``locomo``: the official per-category F1; else token F1).
    ``history`` keeps one dict per scored summary (F1, token counts, reward) for logging.
    """

    answerer: Answerer
    cost: SummaryCostModel
    alpha: float = DEFAULT_ALPHA
    dataset: str = "locomo"
    history: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self._loop = asyncio.new_event_loop()

    def _f1(self, prediction: str, row: dict) -> float:
        if self.dataset == "locomo":
            return locomo_f1(prediction, row["answer"], int(row["category"]))
        return token_f1(prediction, row["answer"])

    def __call__(self, completions: list[str], rows: list[dict]) -> list[float]:
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions for {len(rows)} rows")
        answers = self._loop.run_until_complete(asyncio.gather(
            *(self.answerer.answer(r["question"], Context(text=c.strip())) for c, r in zip(completions, rows))))
        out = []
        for c, r, y in zip(completions, rows, answers):
            f1 = self._f1(y, r)
            n_sum, n_ans = self.answerer.llm.count_tokens(c.strip()), self.answerer.llm.count_tokens(y)
            reward = self.cost.reward(f1, n_sum, n_ans, self.alpha)
            self.history.append({"f1": f1, "summary_tokens": n_sum, "answer_tokens": n_ans, "reward": reward})
            out.append(reward)
        return out

    def close(self) -> None:
        self._loop.close()

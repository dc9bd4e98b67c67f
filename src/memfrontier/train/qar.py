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
from statistics import fmean

from ..answerer import Answerer
from ..core.jsonio import jsonl_lines
from ..core.types import Context, Conversation, Question, Record, Scope
from ..eval.metrics import locomo_f1, token_f1
from ..strategies.memorycpt.config import MemoryCPTConfig
from ..strategies.memorycpt.pipeline import (
    MemoryCPT,
    render_candidates,
    summary_messages,
)
from .configs import QARConfig
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


async def build_qar_pool(
    mem,
    strategy: MemoryCPT,
    convs: list[Conversation],
    *,
    sessions: int | None = None,
    max_questions: int | None = None,
    on_progress: Callable | None = None,
) -> list[dict]:
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
        await mem.construct(strategy, scope)
        for q in answerable(conv.questions, {r.id for r in records}):
            if max_questions is not None and len(pool) >= max_questions:
                break
            episodes, facts = strategy.candidates(q.question, scope, mem.env)
            text = render_candidates(episodes, facts)
            pool.append(
                {
                    "prompt": summary_messages(q.question, text),
                    "question": q.question,
                    "answer": q.answer,
                    "category": q.category,
                    "conversation_id": conv.id,
                    "candidates_tokens": mem.env.llm.count_tokens(text),
                }
            )
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

        async def answer_all():
            return await asyncio.gather(
                *(self.answerer.answer(r["question"], Context(text=c.strip())) for c, r in zip(completions, rows))
            )

        answers = self._loop.run_until_complete(answer_all())
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


def train_qar(config: QARConfig, *, mem, convs: list[Conversation], on_progress: Callable | None = None) -> dict:
    """LoRA-B for the Fine Summary (MemoryCPT Sec. 3.3, Eq. 11-16), end to end.

    ``config``: :class:`~memfrontier.train.configs.QARConfig` (its ``store``, ``llm``, ``dataset`` and
    ``split`` name what the caller opens as ``mem`` and loads as ``convs``). Builds the training
    pool (:func:`build_qar_pool`) in ``mem``'s store, then GRPO-trains a new LoRA adapter on ``base`` (None = the packaged base; the merged LoRA-A checkpoint otherwise)
    with :class:`SummaryReward` (frozen answerer = ``mem``'s answer model). Writes into ``out``:
    ``adapter/``, ``train_log.jsonl``, ``reward_curve.png`` and ``qar_summary.json`` (settings,
    pool size, reward/F1/summary-length per step, provenance). Returns the summary dict.

    Raises ValueError when no training question is answerable from the built sessions.
    """
    import json
    from pathlib import Path

    from ..core.jsonio import write_json_atomic
    from ..core.provenance import provenance
    from ..eval import plots
    from .grpo import train_grpo

    c = config
    out, dataset, alpha, base, construction_llm, seed = (
        Path(c.out),
        c.dataset,
        c.alpha,
        c.base,
        c.construction_llm,
        c.seed,
    )
    sessions, max_questions = c.sessions, c.questions
    num_generations, beta, lr, max_steps = c.num_generations, c.beta, c.lr, c.max_steps
    max_completion_tokens, temperature = c.max_summary_tokens, c.temperature
    out.mkdir(parents=True, exist_ok=True)
    strategy = MemoryCPT(MemoryCPTConfig(construction_llm=construction_llm))
    pool = asyncio.run(
        build_qar_pool(mem, strategy, convs, sessions=sessions, max_questions=max_questions, on_progress=on_progress)
    )
    if not pool:
        raise ValueError(f"no training question is answerable from the first {sessions} sessions; raise --sessions")
    cost = SummaryCostModel.from_pricebook(mem.env.llm.prices)
    reward = SummaryReward(mem.answerer, cost, alpha=alpha, dataset=dataset)
    try:
        result = train_grpo(
            pool,
            reward,
            out,
            base=base,
            num_generations=num_generations,
            beta=beta,
            lr=lr,
            max_steps=max_steps,
            max_completion_tokens=max_completion_tokens,
            temperature=temperature,
            seed=seed,
            on_progress=on_progress,
        )
    finally:
        reward.close()
    per_step = num_generations
    steps = [reward.history[i : i + per_step] for i in range(0, len(reward.history), per_step)]
    step_stats = [
        {
            "step": n + 1,
            "f1_mean": fmean([h["f1"] for h in s]),
            "summary_tokens_mean": fmean([h["summary_tokens"] for h in s]),
            "reward_mean": fmean([h["reward"] for h in s]),
        }
        for n, s in enumerate(steps)
    ]
    log = [json.loads(line) for line in jsonl_lines(result.train_log.read_text("utf-8")) if line.strip()]
    curve = [
        {"update": r["step"], "mean_reward": r["reward_mean"], "std_reward": r.get("reward_std")}
        for r in log
        if r.get("reward_mean") is not None
    ]
    if curve:
        plots.plot_reward_curve(
            curve, out / "reward_curve.png", title=f"QAR GRPO (alpha={alpha:g})", xlabel="GRPO step"
        )
    summary = {
        "alpha": alpha,
        "c_ref_usd": cost.reference_usd(),
        "pool_size": len(pool),
        "sessions": sessions,
        "result": result.model_dump(mode="json"),
        "steps": step_stats,
        "provenance": provenance(
            seed=seed,
            policy_base=base or "packaged gemma-3-270m (transformers)",
            answer_model=mem.env.answer_llm.model_id,
            construction_model=construction_llm or mem.env.llm.model_id,
            prompt_versions={"strategy": strategy.prompt_version},
            price_book_version=mem.env.llm.prices.version,
        ),
    }
    write_json_atomic(out / "qar_summary.json", summary)
    return summary

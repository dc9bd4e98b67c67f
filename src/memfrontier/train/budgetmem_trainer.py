"""Train the BudgetMem tier router with PPO on the LoCoMo training pool (BudgetMem Sec. 4.3, App. A.4).

Protocol (``memfrontier train router``):

* data: the LoCoMo training pool (eight conversations, categories 1-4); validation questions are
  held out first, stratified by category with ``seed`` (:func:`~memfrontier.eval.runner.stratified_sample`),
  then the training questions are drawn the same way from the rest;
* the pool's conversations are ingested into ``store`` (idempotent: a reused store adds nothing);
* one update = one batch of ``batch_questions`` training questions (reshuffled each pass over the
  set), each one episode: the :class:`~memfrontier.strategies.budgetmem.BudgetMem` strategy with the
  router *sampling* tiers (``greedy=False``) answers it through ``AsyncMemory.ask``;
  ``r_task`` is the LoCoMo F1 (or the judge's 0/1 with ``reward="judge"``), the raw cost is the
  episode's ``extraction_usd`` (the routed module calls, replayed on cache hits), and
  :class:`~memfrontier.train.budget_reward.BudgetRewardShaper` gives ``r = r_task + lambda * alpha * r_cost``
  (Eq. 7-10); :meth:`PPOTrainer.update` then runs ``epochs`` PPO passes on the batch;
* after each update the router decides greedily (argmax, test time) on the validation questions;
  their mean reward (cost normalised with the training window, the current alpha) picks
  ``router_best.pt``; ``router_last.pt`` is the latest;
* module outputs, answers and judge verdicts are cached in one persistent
  :class:`~memfrontier.strategies.budgetmem.ModuleCache` file keyed by (question, module, tier,
  input hash): every model is greedy, so a repeated (question, tier, input) gives the same
  output, and epochs and reruns make no repeated model calls.

Failed model calls (events ``llm_error.*``) and module outputs replaced by a lower tier (events
``fallback.<module>.<tier>``, replayed on cache hits) are counted per update (``llm_errors``,
``fallbacks``, ``failure_events``) and in total in the summary: ``tier_ratios`` are the tiers the
router chose, so a run whose High tier kept falling back is visible as such.

Outputs in ``out``: ``train_log.jsonl`` (one line per update), ``reward_curve.png``,
``router_best.pt``, ``router_last.pt`` and ``train_summary.json`` (config, best update, provenance).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..answerer import PROMPT_VERSION as QA_PROMPT_VERSION
from ..answerer import prompt_version as answer_prompt_version
from ..core.jsonio import json_safe, write_json_atomic
from ..core.ledger import Ledger, count_event, use_ledger
from ..core.provenance import provenance, sha256_file
from ..core.types import Question, Scope
from ..eval import datasets
from ..eval.datasets.sampling import stratified_sample
from ..eval.judge import PROMPT_VERSION as JUDGE_PROMPT_VERSION
from ..eval.judge import make_judge
from ..eval.metrics import choice_ratios
from ..eval.tasks import score_f1
from ..strategies.budgetmem import PROMPT_VERSION as BUDGETMEM_PROMPT_VERSION
from ..strategies.budgetmem import BudgetMem, BudgetMemConfig, ModuleCache
from ..strategies.budgetmem.cache import input_hash
from ..strategies.budgetmem.router import TIERS, TierRouter, router_dir_name
from .budget_reward import BudgetRewardShaper, budget_reward
from .configs import RouterPPOConfig
from .ppo import Decision, Episode, PPOTrainer

LOCAL_MODEL_IDS = frozenset({"rules", "minilm", "tier-router"})  # ledger calls that are not model calls


def split_questions(questions: list[Question], n_val: int, n_train: int | None, seed: int) -> tuple[list, list]:
    """(train, val): ``n_val`` held out stratified by category, then ``n_train`` (None: all) of the rest."""
    if n_val >= len(questions):
        raise ValueError(f"{n_val} validation questions leave none to train on (the pool has {len(questions)})")
    val = stratified_sample(questions, n_val, seed)
    held = {q.id for q in val}
    train = stratified_sample([q for q in questions if q.id not in held], n_train, seed)
    return train, val


class CachedAnswerer:
    """Wraps an :class:`~memfrontier.answerer.Answerer`: one answer per (question, answer model,
    prompt version, context text) in a :class:`ModuleCache` (the answerer is greedy). A hit makes
    no call and counts ``cache_hit.answerer`` in the current ledger."""

    def __init__(self, inner, cache: ModuleCache):
        self.inner, self.cache = inner, cache

    async def answer(self, question, context, budget=None, question_date=None) -> str:
        salt = {
            "model": self.inner.llm.model_id,
            "prompt": answer_prompt_version(question_date),
            "context": context.text,
            "budget": budget.model_dump() if budget is not None else None,
            **({"question_date": question_date} if question_date is not None else {}),  # undated: the keys of before
        }
        return await cached(
            self.cache,
            question,
            "answerer",
            salt,
            lambda: self.inner.answer(question, context, budget, question_date),
        )


async def cached(cache: ModuleCache, question: str, kind: str, salt: dict, compute) -> object:
    """``compute()`` once per (question, kind, salt); later calls return the stored ``value``."""
    key = ModuleCache.key(question, kind, "-", input_hash(salt))
    entry = cache.get(key)
    if entry is not None:
        count_event(f"cache_hit.{kind}")
        return entry["value"]
    value = await compute()
    cache.put(key, {"module": kind, "value": value})
    return value


class _Rollouts:
    """Runs questions through ``mem.answer`` (the facade's unchecked answer step) with a BudgetMem strategy and scores them."""

    def __init__(self, cfg: RouterPPOConfig, mem, cache: ModuleCache, on_question: Callable[[dict], None]):
        self.cfg, self.mem, self.cache, self.on_question = cfg, mem, cache, on_question
        self.judge = make_judge(mem, cfg.judge_llm, cfg.base_url) if cfg.reward == "judge" else None

    async def run(self, q: Question, strategy: BudgetMem) -> dict:
        ledger = Ledger()
        ans = await self.mem.answer(
            q.question, Scope(user_id=q.conversation_id), strategy, question_date=q.question_date, ledger=ledger
        )
        f1 = score_f1("locomo", ans.text, q)
        r_task, judge_error = f1, False
        if self.judge is not None:
            salt = {
                "model": self.judge.llm.model_id,
                "prompt": JUDGE_PROMPT_VERSION,
                "gold": q.answer,
                "answer": ans.text,
            }
            with use_ledger(Ledger(), "query"):  # judge calls are evaluation, not the episode's cost
                verdict = await cached(
                    self.cache, q.question, "judge", salt, lambda: self.judge(q.question, q.answer or "", ans.text)
                )
            judge_error = verdict is None
            r_task = 1.0 if verdict else 0.0
        meta = ans.meta
        out = {
            "id": q.id,
            "f1": f1,
            "r_task": r_task,
            "judge_error": judge_error,
            "cost_usd": float(meta.get("extraction_usd", 0.0)),
            "meta": meta,
            "llm_calls": sum(1 for c in ledger.calls if c.model_id not in LOCAL_MODEL_IDS),
            "events": {k: n for k, n in ledger.events.items() if k.startswith(FAILURE_PREFIXES)},
        }
        self.on_question(out)
        return out


def _episode(meta: dict, reward: float) -> Episode | None:
    """The PPO episode of one rollout (None when nothing was routed: no chunks retrieved)."""
    decisions = meta.get("decisions") or []
    if not decisions or "query_emb" not in meta:
        return None
    q = np.asarray(meta["query_emb"], dtype=np.float32)
    ds = [
        Decision(d["module"], q, np.asarray(d["input_emb"], dtype=np.float32), TIERS.index(d["tier"]), d["logprob"])
        for d in decisions
    ]
    return Episode(decisions=ds, old_value=float(decisions[0]["value"]), reward=reward)


FAILURE_PREFIXES = ("llm_error.", "fallback.")


def failure_counts(events: list[dict[str, int]]) -> dict:
    """Failed calls and fallbacks over per-question ledger ``events`` (event -> count).

    Returns ``{"llm_errors": int, "fallbacks": int, "failure_events": {event: int}}``: the sums of
    the ``llm_error.*`` and ``fallback.*`` events and those events by name (sorted); other events
    (cache hits, budget cuts...) are ignored.
    """
    by_event: dict[str, int] = {}
    for ev in events:
        for k, n in ev.items():
            if k.startswith(FAILURE_PREFIXES):
                by_event[k] = by_event.get(k, 0) + int(n)
    return {
        "llm_errors": sum(n for k, n in by_event.items() if k.startswith("llm_error.")),
        "fallbacks": sum(n for k, n in by_event.items() if k.startswith("fallback.")),
        "failure_events": dict(sorted(by_event.items())),
    }


def _mean(xs) -> float | None:
    xs = list(xs)
    return float(np.mean(xs)) if xs else None


async def train_router(cfg: RouterPPOConfig, on_progress: Callable | None = None) -> dict:
    """Train a router; returns the summary written to ``cfg.out/train_summary.json``.

    ``on_progress(event, **info)``: ``start`` (updates, train, val, questions_per_update),
    ``ingest`` (conversation, added), ``question`` (row), ``update`` (log row).
    Raises DatasetError (missing data), ValueError (bad configuration).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the router is tiny: intra-op threads only wait (see strategies/budgetmem/router.py)
    try:
        return await _train(cfg, on_progress or (lambda *a, **k: None))
    finally:
        torch.set_num_threads(threads)


async def _train(cfg: RouterPPOConfig, progress: Callable) -> dict:
    from ..api import AsyncMemory
    from ..eval.plots import plot_reward_curve

    torch.manual_seed(cfg.seed)  # router init and the strategy's tier sampling (global generator)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    convs = datasets.load_dataset("locomo", "train", data_root=cfg.data_root)
    if cfg.conversations:
        unknown = set(cfg.conversations) - {c.id for c in convs}
        if unknown:
            raise ValueError(f"not in the LoCoMo training pool: {sorted(unknown)}; pool: {[c.id for c in convs]}")
        convs = [c for c in convs if c.id in set(cfg.conversations)]
    train_qs, val_qs = split_questions(
        [q for c in convs for q in c.questions], cfg.val_questions, cfg.train_questions, cfg.seed
    )
    needed = {q.conversation_id for q in train_qs + val_qs}
    progress(
        "start",
        updates=cfg.updates,
        train=len(train_qs),
        val=len(val_qs),
        questions_per_update=cfg.batch_questions + len(val_qs),
    )

    mem = AsyncMemory.open(
        cfg.store_dir, llm=cfg.llm, base_url=cfg.base_url, price_book=cfg.price_book, allow_unpriced=cfg.allow_unpriced
    )
    try:
        for c in convs:
            if c.id in needed:
                added = await asyncio.to_thread(mem.store.add, c.records)
                progress("ingest", conversation=c.id, added=len(added.added))
        cache = ModuleCache(cfg.cache_file)
        hits0, misses0 = cache.hits, cache.misses
        mem.answerer = CachedAnswerer(mem.answerer, cache)
        router = TierRouter.from_embedder(mem.store.embedder.encode)
        trainer = PPOTrainer(router, lr=cfg.lr, epochs=cfg.epochs, batch_questions=cfg.batch_questions, seed=cfg.seed)
        shaper = BudgetRewardShaper(cfg.lam, align=cfg.align)
        options = dict(k=cfg.k, module_topk=cfg.module_topk, tiering=cfg.tiering, max_relations=cfg.max_relations)
        sampler = BudgetMem(BudgetMemConfig(**options, greedy=False), router=router, cache=cache, record_states=True)
        greedy = BudgetMem(BudgetMemConfig(**options, greedy=True), router=router, cache=cache)
        rollouts = _Rollouts(cfg, mem, cache, lambda row: progress("question", row=row))

        order: list[Question] = []
        rng = random.Random(cfg.seed)
        log_path = out / "train_log.jsonl"
        log_path.write_text("", "utf-8")
        log: list[dict] = []
        best: dict | None = None
        t_start = time.perf_counter()
        for update in range(1, cfg.updates + 1):
            batch = []
            while len(batch) < cfg.batch_questions:  # one pass over the shuffled set, then reshuffle
                if not order:
                    order = list(train_qs)
                    rng.shuffle(order)
                batch.append(order.pop())
            t0 = time.perf_counter()
            rows = [await rollouts.run(q, sampler) for q in batch]
            rollout_s = time.perf_counter() - t0
            shaped = shaper.shape([r["r_task"] for r in rows], [r["cost_usd"] for r in rows])
            episodes = [e for r, rew in zip(rows, shaped.rewards) if (e := _episode(r["meta"], rew)) is not None]
            t1 = time.perf_counter()
            stats = trainer.update(episodes) if episodes else {}
            update_s = time.perf_counter() - t1

            t2 = time.perf_counter()
            val = [await rollouts.run(q, greedy) for q in val_qs]
            val_s = time.perf_counter() - t2
            alpha = shaper.aligner.alpha
            val_rewards = [
                budget_reward(v["r_task"], shaper.costs.normalize(v["cost_usd"]), cfg.lam, alpha) for v in val
            ]

            row = {
                "update": update,
                "episodes": len(episodes),
                "mean_reward": _mean(shaped.rewards),
                "std_reward": float(np.std(shaped.rewards)),
                "r_task": _mean(shaped.r_task),
                "r_cost": _mean(shaped.r_cost),
                "f1": _mean(r["f1"] for r in rows),
                "alpha": shaped.alpha,
                "lam": cfg.lam,
                "extraction_usd_per_question": _mean(r["cost_usd"] for r in rows),
                **{
                    k: stats.get(k)
                    for k in ("policy_loss", "value_loss", "entropy", "clip_frac", "approx_kl", "grad_norm")
                },
                "tier_ratios": choice_ratios(r["meta"].get("tiers", {}) for r in rows),
                "val_reward": _mean(val_rewards),
                "val_r_task": _mean(v["r_task"] for v in val),
                "val_f1": _mean(v["f1"] for v in val),
                "val_extraction_usd_per_question": _mean(v["cost_usd"] for v in val),
                "val_tier_ratios": choice_ratios(v["meta"].get("tiers", {}) for v in val),
                "llm_calls": sum(r["llm_calls"] for r in rows + val),
                "judge_errors": sum(r["judge_error"] for r in rows + val),
                **failure_counts([r["events"] for r in rows + val]),
                "train_questions_per_s": len(rows) / rollout_s if rollout_s > 0 else None,
                "rollout_s": rollout_s,
                "ppo_s": update_s,
                "val_s": val_s,
                "cache_entries": len(cache),
            }
            router.save(out / "router_last.pt")
            if best is None or row["val_reward"] > best["val_reward"]:
                best = row
                router.save(out / "router_best.pt")
            row["best_update"] = best["update"]
            log.append(row)
            with log_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(json_safe(row), allow_nan=False) + "\n")
            cache.save()
            plot_reward_curve(log, out / "reward_curve.png", title=f"BudgetMem router, lambda={cfg.lam:g}")
            progress("update", row=row)

        summary = {
            "config": cfg.model_dump(mode="json"),
            "train_questions": len(train_qs),
            "val_questions": len(val_qs),
            "val_question_ids": [q.id for q in val_qs],
            "best_update": best["update"],
            "best_val_reward": best["val_reward"],
            "best_val_f1": best["val_f1"],
            "final": log[-1],
            "llm_calls": sum(r["llm_calls"] for r in log),
            "llm_errors": sum(r["llm_errors"] for r in log),
            "fallbacks": sum(r["fallbacks"] for r in log),
            "module_cache": {
                "file": str(cfg.cache_file),
                "entries": len(cache),
                "hits": cache.hits - hits0,
                "misses": cache.misses - misses0,
            },
            "wall_s": time.perf_counter() - t_start,
            "files": {
                "best": str(out / "router_best.pt"),
                "last": str(out / "router_last.pt"),
                "log": str(log_path),
                "reward_curve": str(out / "reward_curve.png"),
            },
            "provenance": _provenance(cfg, mem),
        }
        write_json_atomic(out / "train_summary.json", summary)
        return summary
    finally:
        mem.close()


def _provenance(cfg: RouterPPOConfig, mem) -> dict:
    data_file = datasets.dataset_path("locomo", cfg.data_root)
    return provenance(
        data_file=str(data_file),
        data_sha256=sha256_file(data_file),
        seed=cfg.seed,
        answer_model=mem.env.answer_llm.model_id,
        memory_model=mem.env.llm.model_id,
        embedding_model=mem.store.embedder.model_id,
        judge_model=(cfg.judge_llm or mem.env.answer_llm.model_id) if cfg.reward == "judge" else None,
        prompt_versions={
            "answerer": QA_PROMPT_VERSION,
            "strategy": BUDGETMEM_PROMPT_VERSION,
            **({"judge": JUDGE_PROMPT_VERSION} if cfg.reward == "judge" else {}),
        },
        price_book_version=mem.env.answer_llm.prices.version,
        torch=torch.__version__,
    )


__all__ = ["RouterPPOConfig", "train_router", "split_questions", "router_dir_name", "CachedAnswerer", "failure_counts"]

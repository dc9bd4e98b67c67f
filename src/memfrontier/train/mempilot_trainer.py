"""``memfrontier train orchestrator``: GRPO for the MemPilot policy with objective-wise advantage
decoupling and prefix marginal utility (MemPilot Sec. 3.3, Eq. 9-13, App. A.1/A.3, Table 5).

Why not TRL's ``GRPOTrainer`` (used by :mod:`memfrontier.train.grpo`): a MemPilot rollout is a
multi-turn tool-using trajectory (policy turns interleaved with tool observations and delegate
calls), its advantage is not a group-normalised scalar reward but the decoupled, batch-normalised
A^lambda (Eq. 9-10) refined *per token* by the marginal utility of each curation stage (Eq. 13),
and only the tokens the policy sampled (not the schema's forced text, nor the observations) carry
gradient. TRL samples one completion per prompt and computes its own advantages, so this module
has its own small policy-gradient loop over the same PEFT LoRA setup
(:func:`memfrontier.train.lora_common.lora_config`, the model from
:func:`memfrontier.llm.hf.load_causal_lm`):

1. per query, G rollouts at temperature 1.0 with :class:`~memfrontier.strategies.mempilot.policy.HFPolicy`
   (schema-guided decoding on the LoRA-wrapped model) through the same
   :class:`~memfrontier.strategies.mempilot.orchestrator.Orchestrator` the strategy uses (local pool);
2. rewards: Q = F1 of the policy's final answer, gated (Eq. 20); C and L from Eq. 14 / Eq. 19;
3. probes: greedy answer-only continuations of each stage prefix (not charged), u_t = F1 (Eq. 12);
4. A^lambda (Eq. 9-10), token advantages A~ (Eq. 13, eta = 0.5);
5. loss per sampled token: the clipped surrogate of Eq. 11 (clip 0.2) + beta * KL(pi_theta || pi_ref)
   with the low-variance k3 estimator (pi_ref = the adapter disabled; beta = 0.001), averaged over
   all sampled tokens of the batch (verl's token-mean); AdamW, lr 1e-6, gradient norm clipped at 1.

Writes ``adapter/`` (PEFT; load with ``get_strategy("mempilot", adapter=...)`` or ``eval --strategy mempilot
--set adapter=DIR``), ``train_log.jsonl`` (one line per step) and ``train_summary.json``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.extras import require_extra
from ..core.jsonio import write_json_atomic
from ..core.ledger import Ledger, use_ledger
from ..core.types import Budget, Preference, Question, Scope
from ..strategies.mempilot.accounting import format_gate
from ..strategies.mempilot.policy import Generation
from .configs import OrchestratorGRPOConfig
from .mempilot_reward import Rewards, decoupled_advantages, marginal_credit


@dataclass
class Rollout:
    """One trajectory with what training needs: its generations, rewards, probe scores, advantages."""

    question: Question
    generations: list[Generation]
    stage_turns: list[int]
    rewards: Rewards
    gate_reasons: list[str]
    probes: list[float | None] = field(default_factory=list)
    advantage: float = 0.0
    token_advantages: list[float] = field(default_factory=list)
    answer: str | None = None


def token_advantages(r: Rollout, eta: float) -> list[float]:
    """A~ over all completion tokens of the rollout's generations, in order (Eq. 13): the span of stage t
    is the whole generation (turn) that launched it. Forced tokens get values too; the loss masks them."""
    offsets, n = [], 0
    for g in r.generations:
        offsets.append(n)
        n += len(g.completion_ids)
    spans = [
        (offsets[t], offsets[t] + len(r.generations[t].completion_ids)) for t in r.stage_turns if t < len(r.generations)
    ]
    probes = r.probes if len(r.probes) == len(spans) + 1 else [None] * (len(spans) + 1)
    return marginal_credit(n, r.advantage, spans, probes, eta=eta, valid=r.rewards.valid)


def pg_token_loss(logp, old_logp, ref_logp, adv, clip: float, beta: float):
    """Per-token loss: -min(rho A, clip(rho, 1-eps, 1+eps) A) + beta * k3-KL(pi_theta || pi_ref)
    (MemPilot Eq. 11; k3 = exp(ref - logp) - (ref - logp) - 1, the low-variance estimator). Tensors of equal shape."""
    import torch

    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    d = ref_logp - logp
    kl = torch.exp(d) - d - 1
    return -surrogate + beta * kl, kl


def _completion_logp(model, g: Generation):
    """log pi(completion token | prefix) for every completion token of ``g`` (temperature 1), shape (n,).

    Only the n + 1 last positions go through the output head (``logits_to_keep``): the prompt's
    logits are never used, and with a 262k-token vocabulary they are most of the forward and
    backward cost of a long prompt."""
    import torch

    n = len(g.completion_ids)
    ids = torch.tensor([g.prompt_ids + g.completion_ids], device=model.device)
    logits = model(input_ids=ids, logits_to_keep=n + 1).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, ids[0, len(g.prompt_ids) :, None])[:, 0]


def _pick_questions(convs, cfg: OrchestratorGRPOConfig) -> tuple[list, list[Question]]:
    """Conversations (cut to ``sessions``) and the scored questions whose evidence they contain."""
    chosen = [c for c in convs if cfg.conversations is None or c.id in set(cfg.conversations)]
    if cfg.conversations is None:
        chosen = chosen[:1]
    if not chosen:
        raise ValueError(f"no conversation {cfg.conversations} in {cfg.dataset} {cfg.split}")
    out_convs, qs = [], []
    for c in chosen:
        sessions = list(dict.fromkeys(r.session_id for r in c.records))
        keep = set(sessions[: cfg.sessions] if cfg.sessions else sessions)
        recs = [r for r in c.records if r.session_id in keep]
        ids = {r.id for r in recs}
        out_convs.append(c.model_copy(update={"records": recs}))
        qs += [
            q for q in c.questions if q.answer and not q.abstention and q.evidence_ids and set(q.evidence_ids) <= ids
        ]
    if not qs:
        raise ValueError("no training question has its evidence inside the ingested sessions; raise --sessions")
    random.Random(cfg.seed).shuffle(qs)
    return out_convs, qs


async def train_orchestrator(cfg: OrchestratorGRPOConfig, *, on_progress: Callable | None = None) -> dict:
    """Run the training loop of the module docstring; returns the summary (also ``train_summary.json``).
    Raises ValueError for an empty selection, DatasetError for missing data, LLMError when a model fails to load."""
    require_extra("train", "peft", "accelerate", feature="MemPilot's orchestrator training")
    import torch
    from peft import get_peft_model

    from ..api import AsyncMemory
    from ..eval import datasets
    from ..eval.tasks import score_f1
    from ..llm.hf import load_causal_lm
    from ..strategies.mempilot import MemPilot, MemPilotConfig
    from ..strategies.mempilot.policy import HFPolicy
    from .lora_common import lora_config, lora_delta_l2, lora_snapshot

    progress = on_progress or (lambda *a, **k: None)
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    pref: Preference = Preference.of(cfg.preference)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    convs, questions = _pick_questions(datasets.load_dataset(cfg.dataset, cfg.split, data_root=cfg.data_root), cfg)
    n_needed = cfg.steps * cfg.questions_per_step
    batch_qs = [questions[i % len(questions)] for i in range(n_needed)]
    progress("start", steps=cfg.steps, questions=len(questions), rollouts=n_needed * cfg.group_size)

    mem = AsyncMemory.open(cfg.store or out / "store")
    lm, tok = load_causal_lm(None, copy=True)
    model = get_peft_model(lm, lora_config(cfg.rank, cfg.alpha, cfg.dropout))
    policy = HFPolicy(model, tok, seed=cfg.seed)
    # the rollouts' turn options are the strategy's config, as an evaluation reads them
    rollout = MemPilotConfig(
        pool=cfg.pool,
        preference=pref,
        compressor="offline",
        temperature=cfg.temperature,
        max_rounds=cfg.max_rounds,
        policy_max_tokens=cfg.policy_max_tokens,
        max_observation_tokens=cfg.max_observation_tokens,
    )
    strat = MemPilot(rollout, policy=policy)
    for c in convs:
        await asyncio.to_thread(mem.store.add, c.records)
        await mem.construct(strat, Scope(user_id=c.id))
        progress("ingest", conversation=c.id, records=len(c.records))
    orch = strat.orchestrator(mem.env, pref, Budget())
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=cfg.lr)
    snap = lora_snapshot(model)
    log_path = out / "train_log.jsonl"
    log_path.write_text("", "utf-8")
    log_rows = []

    def score(pred: str | None, q: Question) -> float:
        return score_f1(cfg.dataset, pred or "", q)

    for step in range(cfg.steps):
        t0 = time.perf_counter()
        groups: list[list[Rollout]] = []
        model.eval()
        for qi, q in enumerate(batch_qs[step * cfg.questions_per_step : (step + 1) * cfg.questions_per_step]):
            group = []
            for g in range(cfg.group_size):
                policy.generations.clear()
                policy.recording = True
                ledger = Ledger()
                with use_ledger(ledger):
                    traj = await orch.run(q.question, Scope(user_id=q.conversation_id), rollout_key=f"{step}:{qi}:{g}")
                policy.recording = False
                gate = format_gate(traj.segments, set(orch.pool.ids), tool_errors=traj.tool_errors)
                usd, secs = orch.spent(traj)
                r = Rollout(
                    q,
                    list(policy.generations),
                    list(traj.stage_turns),
                    Rewards(score(traj.answer, q), usd, secs, gate.valid),
                    gate.reasons,
                    answer=traj.answer,
                )
                if gate.valid and traj.stages:  # Alg. 1: probes only for valid trajectories with stages
                    r.probes = [
                        None if (a := await orch.probe(traj, t, cfg.probe_max_tokens)) is None else score(a, q)
                        for t in range(len(traj.stages) + 1)
                    ]
                group.append(r)
                progress(
                    "rollout",
                    step=step,
                    group=qi,
                    index=g,
                    valid=gate.valid,
                    quality=r.rewards.quality,
                    usd=usd,
                    proxy_s=secs,
                    turns=len(traj.turns),
                )
            groups.append(group)

        advs = decoupled_advantages([[r.rewards for r in grp] for grp in groups], pref)
        rollouts = [r for grp in groups for r in grp]
        for r, a in zip(rollouts, [a for grp in advs for a in grp]):
            r.advantage = a
            r.token_advantages = token_advantages(r, cfg.eta)
        n_sampled = sum(sum(g.sampled) for r in rollouts for g in r.generations)

        model.train()
        loss_sum, kl_sum = 0.0, 0.0
        old: dict[tuple[int, int], torch.Tensor] = {}
        for epoch in range(cfg.epochs):
            opt.zero_grad(set_to_none=True)
            for ri, r in enumerate(rollouts):
                offset = 0
                for gi, g in enumerate(r.generations):
                    n = len(g.completion_ids)
                    mask = torch.tensor(g.sampled, dtype=torch.float32, device=model.device)
                    adv = torch.tensor(
                        r.token_advantages[offset : offset + n], dtype=torch.float32, device=model.device
                    )
                    offset += n
                    if n == 0 or not g.sampled or not any(g.sampled):
                        continue
                    logp = _completion_logp(model, g)
                    if epoch == 0:
                        old[(ri, gi)] = logp.detach()
                    with torch.no_grad(), model.disable_adapter():
                        ref = _completion_logp(model, g)
                    tok_loss, kl = pg_token_loss(logp, old[(ri, gi)], ref, adv, cfg.clip, cfg.beta)
                    loss = (tok_loss * mask).sum() / max(n_sampled, 1)
                    loss.backward()
                    if epoch == cfg.epochs - 1:
                        loss_sum += float(loss.detach())
                        kl_sum += float((kl.detach() * mask).sum()) / max(n_sampled, 1)
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            opt.step()
        model.eval()

        qual = [r.rewards.quality for r in rollouts]
        row = {
            "step": step + 1,
            "rollouts": len(rollouts),
            "valid_share": sum(r.rewards.valid for r in rollouts) / len(rollouts),
            "quality_mean": sum(qual) / len(qual),
            "task_reward_mean": sum(r.rewards.quality if r.rewards.valid else -1.0 for r in rollouts) / len(rollouts),
            "usd_mean": sum(r.rewards.cost_usd for r in rollouts) / len(rollouts),
            "proxy_s_mean": sum(r.rewards.latency_s for r in rollouts) / len(rollouts),
            "advantages": [round(r.advantage, 4) for r in rollouts],
            "probes": [r.probes for r in rollouts],
            "sampled_tokens": n_sampled,
            "loss": loss_sum,
            "kl": kl_sum,
            "lora_delta_l2": lora_delta_l2(model, snap),
            "seconds": time.perf_counter() - t0,
            "gate_reasons": sorted({x for r in rollouts for x in r.gate_reasons}),
        }
        log_rows.append(row)
        with log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        progress("step", row=row)

    adapter_dir = out / "adapter"
    model.save_pretrained(str(adapter_dir), save_embedding_layers=False)
    mem.close()
    summary = {
        "adapter_dir": str(adapter_dir),
        "train_log": str(log_path),
        "steps": cfg.steps,
        "lora_delta_l2": log_rows[-1]["lora_delta_l2"],
        "seconds": time.perf_counter() - t_start,
        "config": cfg.model_dump(mode="json"),
        "preference": pref.model_dump(),
        "questions": [q.id for q in batch_qs],
    }
    write_json_atomic(out / "train_summary.json", summary)
    progress("saved", adapter_dir=str(adapter_dir))
    return summary


__all__ = ["OrchestratorGRPOConfig", "Rollout", "pg_token_loss", "token_advantages", "train_orchestrator"]

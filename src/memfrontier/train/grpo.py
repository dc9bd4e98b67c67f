"""LoRA-B: GRPO training of the query-aware summarizer (MemoryCPT QAR, Eq. 11-13), through TRL.

MemoryCPT casts QAR as a contextual bandit: the state is s_q = (q, M_q^RRF) (Eq. 11), the action
one sampled summary m_q ~ pi_phi(. | s_q) (Eq. 12), and pi_phi = base_A + a *new* LoRA-B adapter
phi, trained to maximise E[R(q, m_q)] - beta KL(pi_phi || pi_ref) (Eq. 13) with pi_ref = base_A
(the adapter disabled). GRPO samples ``num_generations`` summaries per prompt and uses the
group-normalised reward as the advantage, A_i = (R_i - mean_group R) / std_group R (Shao et al.,
2024); one episode is one generation, so there is no value function and no bootstrapping.

The wiring, kept in small reusable pieces (MemPilot's orchestrator reuses them with its own
rollouts and advantages):

* :func:`prompt_text` renders a state's ``prompt`` (chat messages or a string) with
  :func:`memfrontier.llm.prompt_format.render_prompt` -- the template :class:`~memfrontier.llm.hf.HFLLM`
  serves the trained adapter with; TRL tokenizes it with BOS, as HFLLM does;
* :func:`make_reward_func` adapts ``reward_fn(completions, rows) -> rewards`` to TRL's
  ``reward_funcs`` signature (each completion gets its own state dict, extra keys included);
* :func:`grpo_config` holds every TRL knob in one place;
* :func:`train_grpo` runs it, logs per step the reward mean/std, KL and loss to
  ``train_log.jsonl``, saves the adapter and reports how far the LoRA weights moved.

Sampling during training is plain temperature sampling (top-k off, top-p 1): what
``HFLLM(temperature=T)`` draws from.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..core.extras import require_extra
from ..core.jsonio import write_json_atomic
from ..llm.hf import load_causal_lm
from ..llm.prompt_format import render_prompt
from .lora_common import (
    JsonlLogCallback,
    device_args,
    lora_config,
    lora_delta_l2,
    lora_snapshot,
    noop_progress,
)

__all__ = ["GRPOResult", "RewardFn", "grpo_config", "make_reward_func", "prompt_text", "train_grpo"]

#: ``reward_fn(completions, rows) -> one float per completion``; rows[i] is the state dict that
#: completion i was sampled for.
RewardFn = Callable[[list[str], list[dict]], list[float]]

#: Names in the train log shared with the other trainers: TRL's ``reward`` is the batch mean.
_LOG_ALIASES = {"reward": "reward_mean"}


class GRPOResult(BaseModel):
    """Outcome of :func:`train_grpo`. ``lora_delta_l2`` = ||phi_end - phi_0||_2 over all LoRA
    tensors (0 means the adapter never changed). ``reward_mean_by_step`` is the logged batch mean
    reward of each optimizer step, in order."""

    adapter_dir: Path
    train_log: Path
    steps: int
    lora_delta_l2: float
    reward_mean_by_step: list[float]
    seconds: float


def prompt_text(prompt: Any) -> str:
    """A state's policy input as text: a string as is, chat messages through
    :func:`render_prompt`. Raises ValueError for anything else or an empty result."""
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        text = render_prompt(prompt)
    else:
        raise ValueError(f"'prompt' must be a string or a list of chat messages, got {type(prompt).__name__}")
    if not text.strip():
        raise ValueError("empty prompt")
    return text


def make_reward_func(reward_fn: RewardFn, rows: list[dict]) -> Callable[..., list[float]]:
    """Adapt ``reward_fn`` to TRL's ``reward_funcs`` protocol.

    The training dataset carries the column ``row`` (an index into ``rows``) next to ``prompt``;
    TRL passes it back as a keyword list aligned with ``completions``. The wrapper calls
    ``reward_fn(completions, [rows[i] for i in row])`` and checks the answer: one finite float
    per completion, else ValueError (a silent NaN would be ignored by TRL's mean).
    """

    def memfrontier_reward(prompts, completions, row, **_: Any) -> list[float]:
        batch = [rows[int(i)] for i in row]
        out = list(reward_fn([str(c) for c in completions], batch))
        if len(out) != len(completions):
            raise ValueError(f"reward_fn returned {len(out)} rewards for {len(completions)} completions")
        vals = []
        for k, r in enumerate(out):
            try:
                v = float(r)
            except (TypeError, ValueError) as e:
                raise ValueError(f"reward_fn returned a non-number for completion {k}: {r!r}") from e
            if not math.isfinite(v):
                raise ValueError(f"reward_fn returned a non-finite reward for completion {k}: {v}")
            vals.append(v)
        return vals

    return memfrontier_reward


def grpo_config(
    out_dir: Path,
    *,
    num_generations: int,
    prompts_per_step: int,
    beta: float,
    lr: float,
    max_steps: int,
    max_completion_tokens: int,
    temperature: float,
    seed: int,
    loss_type: str = "grpo",
):
    """The TRL ``GRPOConfig`` of one run: ``prompts_per_step * num_generations`` completions per
    optimizer step (one generation round per step, one gradient pass: pi_old = pi_theta, so the
    clipped ratio is 1 and the objective is exactly Eq. 13's policy gradient + beta KL), rewards
    scaled by the group std, a constant learning rate, logging every step, no checkpoints.
    ``loss_type="grpo"`` averages the token losses per sequence, then over sequences (Shao et
    al.); ``"dapo"`` averages over all tokens of the batch (verl's token-mean)."""
    require_extra("train", "trl", "peft", "accelerate", "datasets", feature="GRPO training")
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(Path(out_dir) / "checkpoints"),
        per_device_train_batch_size=int(num_generations) * int(prompts_per_step),
        gradient_accumulation_steps=1,
        num_generations=int(num_generations),
        max_completion_length=int(max_completion_tokens),
        temperature=float(temperature),
        top_p=1.0,
        top_k=0,
        beta=float(beta),
        learning_rate=float(lr),
        lr_scheduler_type="constant",
        max_steps=int(max_steps),
        loss_type=loss_type,
        scale_rewards="group",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=int(seed),
        data_seed=int(seed),
        dataloader_num_workers=0,
        **device_args(),
    )


def train_grpo(
    prompts: list[dict],
    reward_fn: RewardFn,
    out_dir: Path,
    *,
    base: str | None = None,
    num_generations: int = 4,
    beta: float = 0.04,
    lr: float = 1e-5,
    max_steps: int = 2,
    max_completion_tokens: int = 64,
    temperature: float = 1.0,
    rank: int = 16,
    alpha: float = 32,
    dropout: float = 0.05,
    prompts_per_step: int = 1,
    loss_type: str = "grpo",
    seed: int = 13,
    on_progress: Callable[..., None] | None = None,
) -> GRPOResult:
    """Train a new LoRA-B on ``base`` with GRPO (MemoryCPT Eq. 13) and save it to ``out_dir/adapter``.

    Args:
        prompts: states s_q (Eq. 11): dicts with ``prompt`` (chat messages -- e.g.
            :func:`memfrontier.strategies.memorycpt.pipeline.summary_messages` -- or rendered text, see
            :func:`prompt_text`) and any other keys (question, answer, ...), handed to
            ``reward_fn`` untouched.
        reward_fn: ``reward_fn(completions, rows) -> list[float]``, one finite reward per
            completion (e.g. :class:`memfrontier.train.qar.SummaryReward`, Eq. 16). Called once per
            step with ``prompts_per_step * num_generations`` completions (text after the prompt,
            special tokens removed).
        out_dir: receives ``adapter/`` (serve with ``HFLLM(base, adapter=out_dir / "adapter")``),
            ``train_log.jsonl`` (per step: ``reward_mean`` (= ``reward``), ``reward_std``, ``kl``,
            ``loss``, completion lengths, ...) and ``train_summary.json``.
        base: base_A (a merged LoRA-A directory) or None for the packaged Gemma; loaded through
            :func:`memfrontier.llm.hf.load_causal_lm` and frozen (the reference policy).
        num_generations: group size G (>= 2: the advantage is relative to the group).
        beta: KL coefficient of Eq. 13 (0 drops the KL term).
        lr: AdamW learning rate (constant).
        max_steps: optimizer steps; prompts are reshuffled (``seed``) and cycled.
        max_completion_tokens: summary length cap (tokens).
        temperature: sampling temperature of the rollouts.
        rank, alpha, dropout: LoRA-B (:func:`~memfrontier.train.lora_common.lora_config`).
        prompts_per_step: distinct states per step.
        loss_type: ``"grpo"`` or ``"dapo"`` (see :func:`grpo_config`).
        on_progress: ``on_progress(event, **info)``: ``start`` (prompts, steps), ``log`` (each
            train_log line), ``saved`` (adapter_dir).

    Raises ValueError for an empty or malformed ``prompts`` list, ``num_generations < 2``,
    ``max_steps < 1`` or a bad reward; :class:`~memfrontier.llm.base.LLMError` when the base
    cannot be loaded.
    """
    require_extra("train", "trl", "peft", "accelerate", "datasets", feature="GRPO training")
    from datasets import Dataset
    from trl import GRPOTrainer

    progress = on_progress or noop_progress
    t0 = time.perf_counter()
    if not prompts:
        raise ValueError("no prompts to train on")
    if int(num_generations) < 2:
        raise ValueError(f"num_generations must be >= 2 (GRPO's group baseline), got {num_generations}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    rows = [dict(r) for r in prompts]
    texts = []
    for i, r in enumerate(rows):
        if "prompt" not in r:
            raise ValueError(f"prompt {i} has no 'prompt' key")
        try:
            texts.append(prompt_text(r["prompt"]))
        except ValueError as e:
            raise ValueError(f"prompt {i}: {e}") from e
    out_dir = Path(out_dir)
    progress("start", prompts=len(rows), steps=int(max_steps))

    lm, tok = load_causal_lm(base, copy=True)
    args = grpo_config(
        out_dir,
        num_generations=num_generations,
        prompts_per_step=prompts_per_step,
        beta=beta,
        lr=lr,
        max_steps=max_steps,
        max_completion_tokens=max_completion_tokens,
        temperature=temperature,
        seed=seed,
        loss_type=loss_type,
    )
    log = JsonlLogCallback(out_dir / "train_log.jsonl", aliases=_LOG_ALIASES, on_progress=progress)
    trainer = GRPOTrainer(
        model=lm,
        reward_funcs=[make_reward_func(reward_fn, rows)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": t, "row": i} for i, t in enumerate(texts)]),
        processing_class=tok,
        peft_config=lora_config(rank, alpha, dropout),
        callbacks=[log],
    )
    start = lora_snapshot(trainer.model)
    trainer.train()
    delta = lora_delta_l2(trainer.model, start)

    adapter_dir = out_dir / "adapter"
    trainer.model.save_pretrained(str(adapter_dir), save_embedding_layers=False)
    progress("saved", adapter_dir=str(adapter_dir))
    result = GRPOResult(
        adapter_dir=adapter_dir,
        train_log=log.path,
        steps=int(trainer.state.global_step),
        lora_delta_l2=delta,
        reward_mean_by_step=[float(r["reward"]) for r in log.records if isinstance(r.get("reward"), (int, float))],
        seconds=time.perf_counter() - t0,
    )
    write_json_atomic(
        out_dir / "train_summary.json",
        {
            "result": result.model_dump(mode="json"),
            "config": {
                "base": base,
                "num_generations": num_generations,
                "beta": beta,
                "lr": lr,
                "max_steps": max_steps,
                "max_completion_tokens": max_completion_tokens,
                "temperature": temperature,
                "rank": rank,
                "alpha": alpha,
                "dropout": dropout,
                "prompts_per_step": prompts_per_step,
                "loss_type": loss_type,
                "seed": seed,
                "prompts": len(rows),
            },
        },
    )
    return result

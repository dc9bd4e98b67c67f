"""Pieces shared by the LoRA trainers (:mod:`.lora_sft` for MemoryCPT LoRA-A, :mod:`.grpo` for
LoRA-B, and later MemPilot's orchestrator): the LoRA configuration, the device flags of a
transformers ``TrainingArguments``, a ``train_log.jsonl`` writer, and the L2 norm of how far the
LoRA weights moved from their initialisation."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..core.extras import require_extra
from ..core.jsonio import json_safe

__all__ = ["JsonlLogCallback", "device_args", "lora_config", "lora_delta_l2", "lora_snapshot", "noop_progress"]


def noop_progress(event: str, **info: Any) -> None:
    """The default ``on_progress(event, **info)`` callback: does nothing."""


def lora_config(rank: int, alpha: float, dropout: float):
    """A PEFT ``LoraConfig`` for a causal LM over *all* linear projections (attention q/k/v/o and
    MLP gate/up/down; the output head excluded). Update: W + (alpha / rank) B A with A random and
    B zero at initialisation, so the adapter starts as the identity. Raises ValueError for
    rank < 1, alpha <= 0 or dropout outside [0, 1)."""
    require_extra("train", "peft", "accelerate", feature="LoRA training")
    from peft import LoraConfig, TaskType

    if int(rank) < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    if not alpha > 0:
        raise ValueError(f"LoRA alpha must be > 0, got {alpha}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout}")
    return LoraConfig(
        r=int(rank),
        lora_alpha=alpha,
        lora_dropout=float(dropout),
        target_modules="all-linear",
        bias="none",
        task_type=TaskType.CAUSAL_LM,
    )


def device_args() -> dict[str, Any]:
    """``TrainingArguments`` device flags: on CPU ``use_cpu=True`` in fp32 (no bf16/fp16) and no
    activation checkpointing (TRL turns it on by default; it only costs time at smoke scale); on
    a CUDA GPU bf16 mixed precision when supported (fp32 master weights) with activation
    checkpointing (memory for long prompts)."""
    import torch

    if torch.cuda.is_available():
        return {
            "use_cpu": False,
            "bf16": bool(torch.cuda.is_bf16_supported()),
            "fp16": False,
            "activation_checkpointing": True,
        }
    return {"use_cpu": True, "bf16": False, "fp16": False, "activation_checkpointing": False}


class JsonlLogCallback(TrainerCallback):
    """Append every trainer log event to ``path`` as one JSON line ``{"step": global_step, ...}``
    (floats as logged; NaN -> null) and relay it as ``on_progress("log", step=..., **logs)``.

    ``aliases`` adds renamed copies of keys (e.g. ``{"reward": "reward_mean"}``) so that log
    files of different trainers share names. The file is truncated when training begins.
    """

    def __init__(
        self, path: Path, *, aliases: dict[str, str] | None = None, on_progress: Callable[..., None] | None = None
    ):
        self.path = Path(path)
        self.aliases = dict(aliases or {})
        self.on_progress = on_progress or noop_progress
        self.records: list[dict] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", "utf-8")
        self.records = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        row: dict[str, Any] = {"step": int(state.global_step)}
        for k, v in logs.items():
            row[k] = v
            if k in self.aliases:
                row[self.aliases[k]] = v
        row = json_safe(row)
        self.records.append(row)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        self.on_progress("log", **row)


def lora_snapshot(model) -> dict[str, Any]:
    """Detached CPU copies of the trainable LoRA tensors of a PEFT ``model`` (names containing
    ``lora_``), to measure later how far training moved them."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if "lora_" in n and p.requires_grad}


def lora_delta_l2(model, snapshot: dict[str, Any]) -> float:
    """sqrt(sum over LoRA tensors of ||theta - theta_0||_F^2): the L2 norm of the change of the
    LoRA weights since :func:`lora_snapshot` (0.0 exactly when nothing was updated). Raises
    ValueError when the snapshot is empty or names a tensor the model no longer has."""
    if not snapshot:
        raise ValueError("empty LoRA snapshot: the model has no trainable LoRA tensors")
    params = dict(model.named_parameters())
    total = 0.0
    for name, before in snapshot.items():
        if name not in params:
            raise ValueError(f"LoRA tensor {name} is not in the model")
        diff = params[name].detach().to("cpu", dtype=before.dtype) - before
        total += float((diff.double() ** 2).sum())
    return math.sqrt(total)

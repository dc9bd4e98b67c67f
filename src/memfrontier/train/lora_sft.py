"""LoRA-A: supervised distillation of the memory-construction roles (MemoryCPT QAD, Eq. 8-9).

Objective (Eq. 9): L_QAD = -E_(x,r,y) sum_t log p_theta(z_t | z_<t, x), z = r (+) y, over the
LoRA-A parameters theta of a frozen base. Here x is the role's prompt (system + user turns), z the
teacher target ``<think>r</think>\\n{json y}``; the loss covers the completion tokens and the EOS
only (the prompt is masked). Hyper-parameters default to the paper's (App. B / Sec. 4): rank 16,
alpha 32, dropout 0.05, lr 1e-4, cutoff 8192 tokens, best-validation-loss checkpoint; LoRA-A is
then merged into the base (``base_A``) and saved so :class:`memfrontier.llm.hf.HFLLM` serves it.

Data: per-role ShareGPT JSONL (:mod:`memfrontier.train.sft_export`), one object per line::

    {"role": "segmenter",
     "conversations": [{"from": "system", "value": ...}, {"from": "human", "value": ...},
                       {"from": "gpt", "value": "<think>...</think>\\n{...}"}],
     "meta": {...}}

The system turn is optional; the last turn must be ``gpt`` (the target); every earlier turn is
part of the prompt (system -> system, human -> user, gpt -> assistant), rendered with
:func:`memfrontier.llm.prompt_format.render_prompt`, the template the backends use at inference.
Validation is strict: a malformed line raises :class:`SFTDataError` naming ``file:line`` (the
files are produced by our own exporter, so a bad line is a bug to fix, not noise to skip). Blank
lines are ignored. Samples longer than ``cutoff_tokens`` are dropped and counted (truncating
them would teach an output without its end).

Tokenization matches inference exactly: ``tokenizer(prompt)`` (with BOS) followed by
``tokenizer(completion, add_special_tokens=False)`` and EOS -- the same prompt ids
:class:`~memfrontier.llm.hf.HFLLM` feeds before it generates.
"""

from __future__ import annotations

import math
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..core.extras import require_extra
from ..core.jsonio import read_jsonl_objects, write_json_atomic
from ..llm.hf import load_causal_lm
from ..llm.prompt_format import render_prompt
from .configs import QADConfig
from .lora_common import JsonlLogCallback, device_args, lora_config, noop_progress

__all__ = [
    "SFTDataError",
    "SFTResult",
    "load_sharegpt",
    "sharegpt_to_prompt_completion",
    "split_train_val",
    "tokenize_sample",
    "train_lora_sft",
]

_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}


class SFTDataError(ValueError):
    """A malformed SFT input; the message starts with ``file:line:`` when it comes from a file."""


class SFTResult(BaseModel):
    """Outcome of :func:`train_lora_sft`. ``best_val_loss`` is the lowest validation loss (mean
    token NLL in nats over completion tokens) among the evaluations, whose checkpoint was kept;
    None without a validation split."""

    adapter_dir: Path
    merged_dir: Path | None
    best_val_loss: float | None
    best_step: int | None
    train_log: Path
    n_train: int
    n_val: int
    n_too_long: int
    steps: int
    seconds: float


def sharegpt_to_prompt_completion(sample: Any) -> dict[str, str]:
    """One ShareGPT sample -> ``{"prompt": str, "completion": str, "role": str}`` (TRL's
    prompt-completion form; ``role`` is the sample's memory role or ``""``).

    The prompt is :func:`render_prompt` of every turn before the last; the completion is the last
    (``gpt``) turn's value verbatim. Raises :class:`SFTDataError` (without a location) when the
    sample is not an object, ``conversations`` is not a non-empty list of ``{"from", "value"}``
    objects with ``from`` in system/human/gpt and a string value, a system turn is not first, no
    human turn precedes the target, or the target is missing or blank.
    """
    if not isinstance(sample, dict):
        raise SFTDataError(f"expected a JSON object, got {type(sample).__name__}")
    conv = sample.get("conversations")
    if not isinstance(conv, list) or not conv:
        raise SFTDataError("'conversations' must be a non-empty list")
    messages = []
    for i, turn in enumerate(conv):
        if not isinstance(turn, dict):
            raise SFTDataError(f"turn {i} is not an object")
        who, value = turn.get("from"), turn.get("value")
        if who not in _ROLES:
            raise SFTDataError(f"turn {i}: 'from' must be one of system/human/gpt, got {who!r}")
        if not isinstance(value, str):
            raise SFTDataError(f"turn {i}: 'value' must be a string, got {type(value).__name__}")
        if who == "system" and i != 0:
            raise SFTDataError(f"turn {i}: a system turn must come first")
        messages.append({"role": _ROLES[who], "content": value})
    if messages[-1]["role"] != "assistant":
        raise SFTDataError("the last turn must be the 'gpt' target")
    if not messages[-1]["content"].strip():
        raise SFTDataError("the 'gpt' target is empty")
    if not any(m["role"] == "user" for m in messages[:-1]):
        raise SFTDataError("no 'human' turn before the 'gpt' target")
    role = sample.get("role")
    return {
        "prompt": render_prompt(messages[:-1]),
        "completion": messages[-1]["content"],
        "role": role if isinstance(role, str) else "",
    }


def load_sharegpt(paths: list[Path]) -> list[dict[str, str]]:
    """Read and convert every non-blank line of the JSONL ``paths`` (in order) with
    :func:`sharegpt_to_prompt_completion`. Raises FileNotFoundError for a missing file and
    :class:`SFTDataError` ``"file:line: reason"`` for invalid JSON or an invalid sample."""
    out = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no SFT data file at {path}")
        for lineno, sample in read_jsonl_objects(path, SFTDataError):
            try:
                out.append(sharegpt_to_prompt_completion(sample))
            except SFTDataError as e:
                raise SFTDataError(f"{path}:{lineno}: {e}") from e
    return out


def split_train_val(samples: list, val_fraction: float, seed: int) -> tuple[list, list]:
    """Shuffle with ``seed`` and hold out ``max(1, round(n * val_fraction))`` samples for
    validation (none when ``val_fraction == 0``), always leaving at least one for training.
    Raises ValueError for ``val_fraction`` outside [0, 1) or fewer than 2 samples with a split."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    items = list(samples)
    random.Random(seed).shuffle(items)
    if val_fraction == 0.0:
        return items, []
    if len(items) < 2:
        raise ValueError(f"need at least 2 samples to hold out a validation split, got {len(items)}")
    n_val = min(len(items) - 1, max(1, round(len(items) * val_fraction)))
    return items[n_val:], items[:n_val]


def tokenize_sample(tokenizer, prompt: str, completion: str, cutoff_tokens: int) -> dict[str, list[int]] | None:
    """``{"input_ids", "labels"}`` for one sample: prompt ids (with BOS, labels -100), then the
    completion ids and EOS (labels = ids). None when the total exceeds ``cutoff_tokens``."""
    p_ids = list(tokenizer(prompt)["input_ids"])
    c_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    if len(p_ids) + len(c_ids) > cutoff_tokens:
        return None
    return {"input_ids": p_ids + c_ids, "labels": [-100] * len(p_ids) + c_ids}


def _tokenized(tokenizer, samples: list[dict], cutoff_tokens: int) -> tuple[list[dict], int]:
    rows, too_long = [], 0
    for s in samples:
        row = tokenize_sample(tokenizer, s["prompt"], s["completion"], cutoff_tokens)
        if row is None:
            too_long += 1
        else:
            rows.append(row)
    return rows, too_long


def sft_files(data: list[Path]) -> list[Path]:
    """The JSONL files of ``data``: each folder's ``*.jsonl`` (sorted), each file itself.
    Raises :class:`SFTDataError` when there is none or a path does not exist."""
    files: list[Path] = []
    for d in map(Path, data):
        files.extend(sorted(d.glob("*.jsonl")) if d.is_dir() else [d])
    if not files or not all(f.is_file() for f in files):
        raise SFTDataError(
            f"no SFT data at {', '.join(map(str, data))}; write it with "
            "`memfrontier export sft --store STORE --out DIR`"
        )
    return files


def train_lora_sft(config: QADConfig, *, on_progress: Callable[..., None] | None = None) -> SFTResult:
    """Train LoRA-A on ShareGPT role data (MemoryCPT Eq. 9) and save it (merged when ``merge``).

    ``config`` (:class:`~memfrontier.train.configs.QADConfig`):
        data: ShareGPT JSONL files or folders of them (see the module docstring, :func:`sft_files`).
        out: receives ``adapter/`` (PEFT adapter), ``merged/`` (base + LoRA-A merged, with the
            tokenizer: ``HFLLM(model=str(out_dir / "merged"))``), ``train_log.jsonl`` (one line
            per log event: ``step`` and ``loss`` / ``eval_loss`` / ``learning_rate`` ...) and
            ``train_summary.json``. Intermediate checkpoints are deleted at the end.
        base: the base model (:func:`memfrontier.llm.hf.load_causal_lm`; None = packaged Gemma).
        rank, lora_alpha, dropout: LoRA (:func:`~memfrontier.train.lora_common.lora_config`).
        lr: AdamW learning rate (cosine decay, no warm-up).
        cutoff_tokens: longer samples (prompt + target + EOS) are dropped and counted.
        epochs / max_steps: training length; ``max_steps`` (optimizer steps) wins when given.
        val_fraction: share of samples held out (:func:`split_train_val`); 0 = no validation.
        eval_steps: evaluate (and checkpoint) every this many steps; default once per epoch (or
            at the end when ``max_steps`` is shorter than an epoch). The checkpoint with the
            lowest validation loss is restored at the end (``load_best_model_at_end``).
        batch_size, grad_accum_steps: sequences per device step, steps per optimizer update.
        seed: data split, shuffling and LoRA initialisation.
        on_progress: ``on_progress(event, **info)`` with ``start`` (n_train, n_val, n_too_long,
            steps), ``log`` (each train_log line), ``saved`` (adapter_dir, merged_dir).

    Runs on CPU in fp32 (``use_cpu``), on a GPU with bf16 when available. Raises
    :class:`SFTDataError` for malformed input, ValueError when no sample fits ``cutoff_tokens``
    or the split is impossible, :class:`~memfrontier.llm.base.LLMError` when the base cannot load.
    """
    require_extra("train", "trl", "peft", "accelerate", "datasets", feature="LoRA fine-tuning")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    c = config
    base, rank, alpha, dropout, lr, cutoff_tokens = c.base, c.rank, c.lora_alpha, c.dropout, c.lr, c.cutoff_tokens
    epochs, max_steps, val_fraction, eval_steps, seed, merge = (
        c.epochs,
        c.max_steps,
        c.val_fraction,
        c.eval_steps,
        c.seed,
        c.merge,
    )
    batch_size, grad_accum_steps = c.batch_size, c.grad_accum_steps
    progress = on_progress or noop_progress
    t0 = time.perf_counter()
    out_dir = Path(c.out)
    data = sft_files(c.data)
    samples = load_sharegpt(data)
    if not samples:
        raise SFTDataError(f"no samples in {[str(p) for p in data]}")
    lm, tok = load_causal_lm(base, copy=True)
    rows, too_long = _tokenized(tok, samples, int(cutoff_tokens))
    if not rows:
        raise ValueError(f"all {len(samples)} samples exceed cutoff_tokens={cutoff_tokens}")
    train_rows, val_rows = split_train_val(rows, val_fraction, seed)

    per_step = max(1, int(batch_size)) * max(1, int(grad_accum_steps))
    steps_per_epoch = max(1, math.ceil(len(train_rows) / per_step))
    total_steps = int(max_steps) if max_steps else max(1, math.ceil(float(epochs) * steps_per_epoch))
    every = min(int(eval_steps) if eval_steps else steps_per_epoch, total_steps)
    has_val = bool(val_rows)
    progress("start", n_train=len(train_rows), n_val=len(val_rows), n_too_long=too_long, steps=total_steps)

    ckpt_dir = out_dir / "checkpoints"
    args = SFTConfig(
        output_dir=str(ckpt_dir),
        per_device_train_batch_size=max(1, int(batch_size)),
        per_device_eval_batch_size=max(1, int(batch_size)),
        gradient_accumulation_steps=max(1, int(grad_accum_steps)),
        learning_rate=float(lr),
        lr_scheduler_type="cosine",
        num_train_epochs=float(epochs),
        max_steps=total_steps,
        max_length=int(cutoff_tokens),
        logging_steps=1,
        eval_strategy="steps" if has_val else "no",
        eval_steps=every if has_val else None,
        save_strategy="steps" if has_val else "no",
        save_steps=every,
        save_only_model=True,
        save_total_limit=2,
        load_best_model_at_end=has_val,
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        report_to="none",
        disable_tqdm=True,
        seed=int(seed),
        data_seed=int(seed),
        dataloader_num_workers=0,
        **device_args(),
    )
    log = JsonlLogCallback(out_dir / "train_log.jsonl", on_progress=progress)
    trainer = SFTTrainer(
        model=lm,
        args=args,
        train_dataset=Dataset.from_list(train_rows),
        eval_dataset=Dataset.from_list(val_rows) if has_val else None,
        processing_class=tok,
        peft_config=lora_config(rank, alpha, dropout),
        callbacks=[log],
    )
    trainer.train()

    best = trainer.state.best_metric if has_val else None
    best_step = _best_step(log.records) if has_val else None
    adapter_dir = out_dir / "adapter"
    trainer.model.save_pretrained(str(adapter_dir), save_embedding_layers=False)
    merged_dir = None
    if merge:
        merged_dir = out_dir / "merged"
        merged = trainer.model.merge_and_unload()
        merged.save_pretrained(str(merged_dir))
        tok.save_pretrained(str(merged_dir))
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    progress("saved", adapter_dir=str(adapter_dir), merged_dir=str(merged_dir) if merged_dir else None)
    result = SFTResult(
        adapter_dir=adapter_dir,
        merged_dir=merged_dir,
        best_val_loss=float(best) if best is not None else None,
        best_step=best_step,
        train_log=log.path,
        n_train=len(train_rows),
        n_val=len(val_rows),
        n_too_long=too_long,
        steps=int(trainer.state.global_step),
        seconds=time.perf_counter() - t0,
    )
    write_json_atomic(
        out_dir / "train_summary.json",
        {
            "result": result.model_dump(mode="json"),
            "config": {
                "base": base,
                "rank": rank,
                "alpha": alpha,
                "dropout": dropout,
                "lr": lr,
                "cutoff_tokens": cutoff_tokens,
                "epochs": epochs,
                "max_steps": max_steps,
                "val_fraction": val_fraction,
                "eval_steps": every,
                "batch_size": batch_size,
                "grad_accum_steps": grad_accum_steps,
                "seed": seed,
                "data": [str(p) for p in data],
            },
        },
    )
    return result


def _best_step(records: list[dict]) -> int | None:
    """The step of the lowest ``eval_loss`` in the log (the first one on ties)."""
    evals = [(r["eval_loss"], r["step"]) for r in records if isinstance(r.get("eval_loss"), (int, float))]
    return min(evals, key=lambda e: (e[0], e[1]))[1] if evals else None

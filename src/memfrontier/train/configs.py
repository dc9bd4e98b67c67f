"""The configs of the trainers, one pydantic model per trainer: each field has its type, default and
description (unit, paper section), and the ``train`` commands' options are generated from them
(:func:`memfrontier.cli.fields.model_options`). This module imports no model code, so the command
line can read the configs without loading torch.

* :class:`RouterPPOConfig` -- the BudgetMem tier router, PPO (:func:`~memfrontier.train.budgetmem_trainer.train_router`);
* :class:`QADConfig` -- MemoryCPT LoRA-A, SFT on teacher traces (:func:`~memfrontier.train.lora_sft.train_lora_sft`);
* :class:`QARConfig` -- MemoryCPT LoRA-B, GRPO on the summarizer (:func:`~memfrontier.train.qar.train_qar`);
* :class:`OrchestratorGRPOConfig` -- the MemPilot policy, GRPO (:func:`~memfrontier.train.mempilot_trainer.train_orchestrator`);
* :class:`StrategyRouterConfig` -- the ``auto`` strategy's router (:func:`~memfrontier.train.strategy_router.train_strategy_router`);
* :class:`TurnRerankerConfig` -- ``rag``'s turn reranker (:func:`~memfrontier.train.turn_reranker.train_turn_reranker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core.types import PRESETS, PreferenceSpec
from .cost_reward import DEFAULT_ALPHA as QAR_ALPHA
from .mempilot_reward import ETA

LLM_DOC = (
    "'local' (embedded Gemma 3 270M, no network), 'local:qwen2.5-1.5b' / 'local:qwen2.5-0.5b' (embedded bench "
    "models) or 'openai:MODEL' for any OpenAI-compatible server"
)


class RouterPPOConfig(BaseModel):
    """One PPO training run of the BudgetMem tier router (BudgetMem Sec. 3.3-3.4). ``store`` and
    ``cache`` default to siblings of ``out`` (``store/``, ``module_cache.json``) so that routers
    trained at several lambdas share them; ``out`` defaults to ``runs/budgetmem/routers/lambda_L``."""

    model_config = ConfigDict(extra="forbid")

    tiering: Literal["implementation", "reasoning", "capacity"] = Field(
        "implementation",
        description="How tiers are realised: implementation (Low rules, Mid MiniLM, High the LLM) | "
        "reasoning | capacity (BudgetMem Sec. 3.2)",
    )
    lam: float = Field(
        0.3,
        ge=0,
        json_schema_extra={"flag": "--lambda"},
        description="Cost weight lambda of the reward r = r_task + lambda * alpha * r_cost (BudgetMem Eq. 7)",
    )
    reward: Literal["f1", "judge"] = Field(
        "f1", description="Task reward r_task: f1 (LoCoMo F1) | judge (LLM judge, 0/1)"
    )
    align: bool = Field(
        True, description="Reward-scale alignment alpha = std(r_task)/std(r_cost) (Eq. 10); --no-align sets alpha = 1"
    )
    updates: int = Field(20, ge=1, description="PPO updates (one batch of questions each)")
    batch_questions: int = Field(32, ge=1, description="Questions (episodes) per update")
    epochs: int = Field(4, ge=1, description="PPO epochs over each batch")
    lr: float = Field(3e-4, gt=0, description="Adam learning rate")
    train_questions: int | None = Field(
        None,
        ge=1,
        description="Training questions drawn (stratified by category, "
        "seeded) from the pool left after validation; None: all",
    )
    val_questions: int = Field(
        32,
        ge=1,
        description="Validation questions held out from the training pool (stratified); they pick router_best.pt",
    )
    conversations: list[str] | None = Field(
        None,
        json_schema_extra={"flag": "--conversation"},
        description="Only these training-pool conversations (repeatable; default all eight)",
    )
    k: int = Field(5, ge=1, description="Chunks retrieved per question")
    module_topk: int = Field(5, ge=1, description="Chunks the filter module keeps")
    max_relations: int = Field(10, ge=1, description="Relations per extraction module at most")
    seed: int = Field(42, description="Seed of the split, the batch order, the router init and tier sampling")
    out: Path | None = Field(
        None,
        description="Output directory (default runs/budgetmem/routers/lambda_L): "
        "router_best.pt, router_last.pt, train_log.jsonl, reward_curve.png, train_summary.json",
    )
    store: Path | None = Field(
        None, description="Store directory for the training conversations, reused across runs (default OUT/../store)"
    )
    cache: Path | None = Field(
        None, description="Module/answer cache file, reused across runs and lambdas (default OUT/../module_cache.json)"
    )
    llm: str = Field(
        "local",
        description="The answer/module model: 'local' (embedded Gemma 3 270M), "
        "'local:qwen2.5-1.5b' / 'local:qwen2.5-0.5b' or 'openai:MODEL'",
    )
    base_url: str | None = Field(None, description="Base URL of the OpenAI-compatible server (with --llm openai:MODEL)")
    judge_llm: str | None = Field(None, description="With --reward judge: the judge model (default: the answer model)")
    data_root: Path | None = Field(None, description="Benchmark data root (default ../shared/data)")
    price_book: Path | None = Field(None, description="A price-book YAML (default: the packaged one)")
    allow_unpriced: bool = Field(
        False, description="Record calls to models missing from the price book as unpriced instead of failing"
    )

    @model_validator(mode="after")
    def _default_out(self) -> "RouterPPOConfig":
        from ..strategies.budgetmem.router import router_dir_name

        if self.out is None:
            self.out = Path("runs/budgetmem/routers") / router_dir_name(self.lam)
        return self

    @property
    def store_dir(self) -> Path:
        return self.store or self.out.parent / "store"

    @property
    def cache_file(self) -> Path:
        return self.cache or self.out.parent / "module_cache.json"


class QADConfig(BaseModel):
    """LoRA-A: SFT of the construction roles on teacher traces (MemoryCPT Sec. 3.2, Eq. 9), then merged."""

    model_config = ConfigDict(extra="forbid")

    data: list[Path] = Field(
        [Path("runs/sft")],
        description="Folders of per-role ShareGPT JSONL from `export sft` (each "
        "*.jsonl in it) or .jsonl files (repeatable)",
    )
    out: Path = Field(
        Path("runs/qad"),
        description="Output: adapter/, merged/ (serve with --set construction_llm=hf:OUT/merged), train_log.jsonl",
    )
    base: str | None = Field(
        None, description="Base checkpoint directory (default: the packaged Gemma 3 270M, loaded from its GGUF)"
    )
    rank: int = Field(16, ge=1, description="LoRA rank (MemoryCPT: 16)")
    lora_alpha: float = Field(32, description="LoRA alpha (MemoryCPT: 32)")
    dropout: float = Field(0.05, ge=0, le=1, description="LoRA dropout (MemoryCPT: 0.05)")
    lr: float = Field(1e-4, description="Learning rate (MemoryCPT: 1e-4)")
    cutoff_tokens: int = Field(
        8192, ge=16, description="Longer samples are dropped and counted, in tokens (MemoryCPT: 8192)"
    )
    epochs: float = Field(1.0, description="Epochs over the training split")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps (smoke runs)")
    val_fraction: float = Field(
        0.1, ge=0, le=0.9, description="Held-out share; the best validation-loss checkpoint is kept"
    )
    eval_steps: int | None = Field(None, ge=1, description="Validate every this many steps (default: once per epoch)")
    batch_size: int = Field(1, ge=1, description="Samples per device batch")
    grad_accum_steps: int = Field(1, ge=1, description="Gradient-accumulation steps per optimizer step")
    merge: bool = Field(True, description="Also write merged/ (base + LoRA-A)")
    seed: int = Field(42, description="Seed of the split and the LoRA init")


class QARConfig(BaseModel):
    """LoRA-B: GRPO of the query-aware Fine Summary with the cost-aware reward (MemoryCPT Sec. 3.3, Eq. 11-16)."""

    model_config = ConfigDict(extra="forbid")

    alpha: float = Field(
        QAR_ALPHA, ge=0, le=1, description="Reward weight of F1 against cost (MemoryCPT Eq. 16; paper: 0.8)"
    )
    out: Path | None = Field(
        None,
        description="Output (default runs/qar/alpha_A): adapter/, train_log.jsonl, reward_curve.png, qar_summary.json",
    )
    store: Path = Field(
        Path("runs/qar/store"), description="Store for the training conversations' memories (reused across runs)"
    )
    dataset: str = Field("locomo", description="locomo | longmemeval | hotpotqa | mem_gallery")
    split: str = Field("train", description="locomo: train (the eight non-test conversations) | all")
    sessions: int = Field(
        2,
        ge=0,
        description="Sessions built per conversation (0 = all; construction with the embedded model "
        "takes ~30 s per session)",
    )
    questions: int = Field(16, ge=1, description="Training states (questions answerable from the built sessions)")
    base: str | None = Field(
        None, description="Policy base checkpoint (default the packaged base; e.g. runs/qad/merged for base_A)"
    )
    construction_llm: str | None = Field(
        None, description="The QAD model that builds the memories (e.g. 'hf:runs/qad/merged'); default --llm"
    )
    llm: str = Field("local", description="The frozen answerer: " + LLM_DOC)
    base_url: str | None = Field(None, description="Base URL of the OpenAI-compatible server (with --llm openai:MODEL)")
    max_steps: int = Field(4, ge=1, description="GRPO steps (one question x --num-generations summaries each)")
    num_generations: int = Field(4, ge=2, description="Summaries sampled per question (the GRPO group, Eq. 12)")
    beta: float = Field(0.04, ge=0, description="KL weight against the frozen base (Eq. 13)")
    lr: float = Field(1e-5, description="Learning rate")
    max_summary_tokens: int = Field(64, ge=4, description="Longest sampled summary, in tokens")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the summaries")
    data_root: Path | None = Field(None, description="Benchmark data root (default ../shared/data)")
    seed: int = Field(42, description="Seed of the question pool, sampling and the LoRA init")
    price_book: Path | None = Field(None, description="A price-book YAML (default: the packaged one)")

    @model_validator(mode="after")
    def _default_out(self) -> "QARConfig":
        if self.out is None:
            self.out = Path("runs/qar") / f"alpha_{self.alpha:g}"
        return self


class OrchestratorGRPOConfig(BaseModel):
    """One GRPO run of the MemPilot policy (MemPilot Sec. 3.3; defaults: Table 5 where it applies,
    smoke-scale sizes otherwise)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field("locomo", description="locomo | longmemeval | hotpotqa | mem_gallery")
    split: str = Field("train", description="locomo: train | all; mem_gallery: train (70/10/20, seed 13) | val | all")
    preference: PreferenceSpec = Field(
        "balanced",
        description="perf | balanced | cost, or weights (MemPilot Eq. 10): --set preference.quality=1 "
        "--set preference.cost=0.5 --set preference.latency=0",
    )
    group_size: int = Field(4, ge=2, description="Rollouts per query, G (Table 5: 4)")
    temperature: float = Field(1.0, gt=0, description="Rollout temperature (Table 5: 1.0)")
    lr: float = Field(1e-6, ge=0, description="AdamW learning rate (Table 5: 1e-6)")
    beta: float = Field(0.001, ge=0, description="KL-loss coefficient (Table 5: 0.001)")
    clip: float = Field(0.2, gt=0, description="GRPO clipping epsilon (Table 5: 0.2)")
    eta: float = Field(ETA, ge=0, description="Marginal-utility weight (Eq. 13; Table 5: 0.5)")
    steps: int = Field(1, ge=1, description="Optimizer steps (one batch of questions x --group-size rollouts each)")
    questions_per_step: int = Field(1, ge=1, description="Queries per step")
    epochs: int = Field(1, ge=1, description="Gradient passes over each batch")
    max_rounds: int = Field(3, ge=1, description="Policy turns per rollout (Table 5: 6; smaller at CPU smoke scale)")
    policy_max_tokens: int = Field(96, ge=16, description="Longest policy turn, in tokens")
    max_observation_tokens: int = Field(
        384, ge=32, description="Longest tool observation shown to the policy, in tokens"
    )
    probe_max_tokens: int = Field(32, ge=4, description="Longest probe answer, in tokens")
    conversations: list[str] | None = Field(
        None,
        json_schema_extra={"flag": "--conversation"},
        description="Train on these conversations (repeatable; default the split's first)",
    )
    sessions: int | None = Field(
        2, ge=1, description="Sessions ingested per conversation (None: all); questions need their evidence inside"
    )
    rank: int = Field(16, ge=1, description="LoRA rank")
    alpha: float = Field(32, description="LoRA alpha")
    dropout: float = Field(
        0.0,
        ge=0,
        le=1,
        description="LoRA dropout (0: rollout and update see the same network, exact importance ratios)",
    )
    seed: int = Field(13, description="Seed of the question order, sampling and LoRA init")
    pool: str = Field("local", description="Model pool: local | table3 | bench | a pool YAML")
    out: Path | None = Field(
        None,
        description="Output (default runs/mempilot/orchestrator/PREFERENCE): adapter/, "
        "train_log.jsonl, train_summary.json",
    )
    store: Path | None = Field(None, description="Store for the training conversations (default OUT/store)")
    data_root: Path | None = Field(None, description="Benchmark data root (default ../shared/data)")

    @field_validator("preference", mode="before")
    @classmethod
    def _known_preset(cls, v):
        if isinstance(v, str) and v not in PRESETS:
            raise ValueError(f"unknown preference preset {v!r}; choose one of {', '.join(PRESETS)}")
        return v

    @model_validator(mode="after")
    def _default_out(self) -> "OrchestratorGRPOConfig":
        if self.out is None:
            p = self.preference
            name = p if isinstance(p, str) else "w_" + "_".join(f"{v:g}" for v in p.model_dump().values())
            self.out = Path("runs/mempilot/orchestrator") / name
        return self


class StrategyRouterConfig(BaseModel):
    """The ``auto`` strategy's router, fitted on a frontier's per-question records (ridge regression per
    configuration and target: F1, USD, latency, tokens)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    frontier_dir: Path = Field(
        ...,
        json_schema_extra={"flag": "--from"},
        description="A frontier output folder (configs/LABEL/predictions.jsonl) run on the training "
        "pool (--split train); never the test split",
    )
    out: Path = Field(
        Path("runs/auto/router.json"),
        description="The router file to write; the validation report goes next to it (NAME.validation.json / .md)",
    )
    val_share: float = Field(
        0.2, ge=0.0, le=1.0, description="Share of the questions held out for validation (category-balanced)"
    )
    seed: int = Field(42, description="Seed of the validation split and the cross-validation folds")
    only: list[str] | None = Field(
        None,
        description="Configuration labels to route among (repeatable; default: every finished "
        "configuration except the oracle anchor and refused runs)",
    )
    store: str | None = Field(
        None,
        description="The store the frontier ran on, a directory or postgresql:// URL (default: "
        "the one its runs recorded)",
    )


class TurnRerankerConfig(BaseModel):
    """``rag``'s learned turn reranker (:mod:`memfrontier.retrieve.rerank`), fitted on the gold
    evidence of the LoCoMo training pool and of LongMemEval's training pool (never a test question:
    :mod:`memfrontier.train.turn_reranker`)."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(
        Path("runs/turn_reranker/turn_reranker.json"),
        description="The reranker file to write (the shipped one: src/memfrontier/retrieve/turn_reranker.json)",
    )
    store: Path = Field(
        Path("runs/turn_reranker/store"),
        description="Store directory for the training conversations and their turn view, reused across runs",
    )
    data_root: Path | None = Field(None, description="Benchmark data root (default ../shared/data)")
    candidates: int = Field(64, ge=2, description="Turns the hybrid search hands the reranker per question (rag's k)")
    longmemeval: int = Field(
        160,
        ge=0,
        description="LongMemEval questions drawn (seed) from its training pool, beside LoCoMo's (0: LoCoMo only)",
    )
    longmemeval_s: int = Field(
        40,
        ge=0,
        description="LongMemEval_S questions (~50 sessions each, most of them distractors) drawn (seed) from "
        "its training split, none of them drawn from the oracle file too (0: none; each is ~1 minute of ingest)",
    )
    hidden: int = Field(32, ge=1, description="Hidden ReLU units")
    epochs: int = Field(8, ge=1, description="Passes over the training pairs (AdamW, batches of 512)")
    weight_decay: float = Field(1e-3, ge=0, description="AdamW weight decay")
    seed: int = Field(0, description="Seed of the initialisation and the batch order")


__all__ = [
    "OrchestratorGRPOConfig",
    "QADConfig",
    "QARConfig",
    "RouterPPOConfig",
    "StrategyRouterConfig",
    "TurnRerankerConfig",
]

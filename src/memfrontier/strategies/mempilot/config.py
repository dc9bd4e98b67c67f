"""MemPilot's options (arXiv 2610.06830) and the one definition of its choice names."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ...core.types import PreferenceSpec
from ..config import Bool, BudgetedConfig, Float, Int, operator_only, operator_values
from .compressed_bank import KINDS
from .pool import PROFILES

#: decoupled: the answerer reads question + evidence; policy: the policy's own answer first (Sec. 3.3).
AnswerMode = Literal["decoupled", "policy"]
ANSWER_MODES: tuple[str, ...] = typing.get_args(AnswerMode)
#: compressed: the bank built from the raw chunks by compression (Sec. 3.1); imported: a JSONL bank.
BankKind = Literal[KINDS]
#: The packaged model pools (local: the embedded model behind every route; table3: Table 3, OpenRouter;
#: bench: three embedded models of 270M / 0.5B / 1.5B parameters, each priced as itself).
PoolName = Literal[PROFILES]


class MemPilotConfig(BudgetedConfig):
    """Options of ``mempilot`` (defaults: MemPilot Sec. 4 and Table 5)."""

    strategy = "mempilot"

    pool: PoolName | Path = Field(
        "local",
        json_schema_extra=operator_only(),
        description="Model pool: local | table3 | bench | a pool YAML (Sec. 3.2, Table 3).",
    )
    preference: PreferenceSpec | None = Field(
        None,
        title="preference preset",
        description="perf | balanced | cost or weights {quality, cost, latency} (Eq. 10); "
        "when set it is this configuration's and wins over the caller's; default: the caller's preference, else perf "
        "(strategies.base.resolve_preference).",
    )
    answer_mode: AnswerMode = Field("decoupled", description="Who answers (Sec. 3.3).")
    bank: BankKind = Field(
        "compressed",
        description="Which memory bank the Retrieve tool reads (Sec. 3.1); imported when bank_file is given.",
    )
    compressor: Literal["auto", "offline", "llmlingua2"] = Field(
        "auto",
        json_schema_extra=operator_values("auto", "llmlingua2"),  # LLMLingua-2 loads a model
        description="Bank compressor (auto: LLMLingua-2 when installed, else offline).",
    )
    adapter: Path | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="A LoRA adapter directory from `train orchestrator` (the policy then runs in transformers).",
    )
    max_rounds: Int = Field(6, ge=1, description="Policy turns per trajectory (Table 5: 6).")
    temperature: Float = Field(0.0, ge=0, description="Policy sampling temperature (0: greedy).")
    constrained: Bool = Field(True, description="Grammar-constrained policy output (the action format, Eq. 20).")
    first_turn_tools: Bool = Field(True, description="The first turn must call a tool.")
    answer_after_repeat: Bool = Field(True, description="Answer once the policy repeats a call.")
    policy_max_tokens: Int = Field(256, ge=8, description="Tokens per policy turn at most.")
    max_observation_tokens: Int = Field(1024, ge=16, description="Tokens of one tool observation at most.")
    delegate_timeout_s: Float | None = Field(None, gt=0, description="Timeout of one delegate call (s).")
    rollout_key: str = Field("0", description="Mixed into the per-rollout permutation of tools and model cards.")
    bank_file: Path | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="A JSONL imported as the memory bank (implies bank=imported).",
    )

    @model_validator(mode="before")
    @classmethod
    def _imported_with_file(cls, data):
        if isinstance(data, dict) and data.get("bank_file") is not None and "bank" not in data:
            data = {**data, "bank": "imported"}
        return data

    @model_validator(mode="after")
    def _files(self):
        if self.adapter is not None and not self.adapter.is_dir():
            raise ValueError(f"adapter: no LoRA adapter directory {self.adapter}")
        if self.bank_file is not None and not self.bank_file.is_file():
            raise ValueError(f"bank_file: no bank file {self.bank_file}")
        if self.bank_file is not None and self.bank != "imported":
            raise ValueError("bank_file needs bank='imported'")
        if isinstance(self.pool, Path) and not self.pool.is_file():
            raise ValueError(f"pool: {str(self.pool)!r} is neither {', '.join(PROFILES)} nor a pool YAML file")
        return self

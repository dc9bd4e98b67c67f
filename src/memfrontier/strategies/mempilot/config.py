"""MemPilot's options (arXiv 2610.06830) and the one definition of its choice names."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .compressed_bank import KINDS
from ..config import Float, Int, StrategyConfig
from .pool import PROFILES

#: Named preferences lambda = (lambda_Q, lambda_C, lambda_L) (Sec. 4.4; values in core.types.Preference.preset).
PreferencePreset = Literal["perf", "balanced", "cost"]
PRESETS: tuple[str, ...] = typing.get_args(PreferencePreset)
#: decoupled: the answerer reads question + evidence; policy: the policy's own answer first (Sec. 3.3).
AnswerMode = Literal["decoupled", "policy"]
ANSWER_MODES: tuple[str, ...] = typing.get_args(AnswerMode)
#: compressed: the bank built from the raw chunks by compression (Sec. 3.1); imported: a JSONL bank.
BankKind = Literal[KINDS]
#: The packaged model pools (local: the embedded model behind every route; table3: Table 3, OpenRouter;
#: bench: three embedded models of 270M / 0.5B / 1.5B parameters, each priced as itself).
PoolName = Literal[PROFILES]


class PreferenceWeights(BaseModel):
    """Explicit preference weights (MemPilot Eq. 10), each >= 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quality: Float = Field(1.0, ge=0)
    cost: Float = Field(0.0, ge=0)
    latency: Float = Field(0.0, ge=0)


class StrategyBudget(BaseModel):
    """Hard per-question caps of the strategy (None = no cap), combined with the caller's budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_usd: Float | None = Field(None, ge=0, description="USD per question.")
    max_tokens: Int | None = Field(None, ge=1, description="Tokens per question.")
    max_proxy_s: Float | None = Field(None, ge=0, description="Latency proxy per question (s, Eq. 15-19).")


def as_plain(v):
    """A :class:`~memfrontier.core.types.Preference` / ``Budget`` given by code, as the dict that
    :class:`PreferenceWeights` / :class:`StrategyBudget` validate; anything else unchanged."""
    return v.model_dump() if isinstance(v, BaseModel) and not isinstance(v, (PreferenceWeights, StrategyBudget)) else v


class MemPilotConfig(StrategyConfig):
    """Options of ``mempilot`` (defaults: MemPilot Sec. 4 and Table 5)."""

    strategy = "mempilot"

    pool: PoolName | Path = Field("local", description="Model pool: local | table3 | bench | a pool YAML (Sec. 3.2, Table 3).")
    preference: PreferencePreset | PreferenceWeights | None = Field(
        None, title="preference preset", description="perf | balanced | cost or weights {quality, cost, latency} (Eq. 10); "
        "default: the caller's preference (perf in evaluation).")
    answer_mode: AnswerMode = Field("decoupled", description="Who answers (Sec. 3.3).")
    bank: BankKind = Field("compressed", description="Which memory bank the Retrieve tool reads (Sec. 3.1); "
                           "imported when bank_file is given.")
    compressor: Literal["auto", "offline", "llmlingua2"] = Field(
        "auto", description="Bank compressor (auto: LLMLingua-2 when installed, else offline).")
    adapter: Path | None = Field(None, description="A LoRA adapter directory from `train orchestrator` "
                                 "(the policy then runs in transformers).")
    max_rounds: Int = Field(6, ge=1, description="Policy turns per trajectory (Table 5: 6).")
    temperature: Float = Field(0.0, ge=0, description="Policy sampling temperature (0: greedy).")
    constrained: bool = Field(True, description="Grammar-constrained policy output (the action format, Eq. 20).")
    first_turn_tools: bool = Field(True, description="The first turn must call a tool.")
    answer_after_repeat: bool = Field(True, description="Answer once the policy repeats a call.")
    policy_max_tokens: Int = Field(256, ge=8, description="Tokens per policy turn at most.")
    max_observation_tokens: Int = Field(1024, ge=16, description="Tokens of one tool observation at most.")
    delegate_timeout_s: Float | None = Field(None, gt=0, description="Timeout of one delegate call (s).")
    rollout_key: str = Field("0", description="Mixed into the per-rollout permutation of tools and model cards.")
    budget: StrategyBudget | None = Field(None, description="Hard caps {max_usd, max_tokens, max_proxy_s} per question.")
    bank_file: Path | None = Field(None, description="A JSONL imported as the memory bank (implies bank=imported).")

    @field_validator("preference", "budget", mode="before")
    @classmethod
    def _plain(cls, v):
        return as_plain(v)

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

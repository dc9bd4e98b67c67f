"""MemoryCPT's options (arXiv 2608.04843) and the one definition of its ablation names."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..config import Int, StrategyConfig, operator_only

#: MemoryCPT Table 3: ``no_qad`` builds with the untrained base model, ``no_qar`` reads a plain
#: dense top-(k_e+k_s) (no RRF, no summary), ``no_fs`` reads the RRF candidates (no summary).
Ablation = Literal["none", "no_qad", "no_qar", "no_fs"]
ABLATIONS: tuple[str, ...] = typing.get_args(Ablation)


class MemoryCPTConfig(StrategyConfig):
    """Options of ``memorycpt`` (defaults: MemoryCPT Sec. 4, the 20/50 RRF depth of Table 4)."""

    strategy = "memorycpt"

    episodic_k: Int = Field(20, ge=0, description="Episodes RRF keeps (Eq. 10; k_e).")
    semantic_k: Int = Field(50, ge=0, description="Facts RRF keeps (Eq. 10; k_s).")
    ablation: Ablation = Field(
        "none", description="Table 3 ablation (none | no_qad | no_qar | no_fs; '-' may replace '_')."
    )
    construction_llm: str | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="The QAD model of the four construction roles "
        "(Sec. 3.1), e.g. 'hf:runs/qad/merged' (merged LoRA-A); default the run's --llm.",
    )
    summarizer_llm: str | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="The Fine Summary model (Eq. 12), e.g. 'hf'; default "
        "the run's --llm ('hf' with summarizer_adapter).",
    )
    summarizer_adapter: Path | None = Field(
        None, json_schema_extra=operator_only(), description="A LoRA-B adapter directory from `train qar` (Eq. 16-17)."
    )
    concurrency: Int = Field(4, ge=1, description="Sessions built at once during construction.")

    @field_validator("ablation", mode="before")
    @classmethod
    def _dashes(cls, v):
        return v.replace("-", "_") if isinstance(v, str) else v

    @field_validator("summarizer_adapter")
    @classmethod
    def _adapter_dir(cls, v):
        if v is not None and not (v / "adapter_config.json").is_file():
            raise ValueError(
                f"{v} is not a LoRA adapter directory (no adapter_config.json); train one with `memfrontier train qar`"
            )
        return v

    @model_validator(mode="after")
    def _depth(self):
        if self.episodic_k + self.semantic_k == 0:
            raise ValueError("episodic_k and semantic_k are both 0: nothing would be retrieved")
        return self

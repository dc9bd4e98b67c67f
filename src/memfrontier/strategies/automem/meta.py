"""What one AutoMEM question reports with its context (``Context.meta``, a prediction row's
``strategy_meta``): :class:`AutoMemMeta`, the shape the run report reads
(:mod:`memfrontier.eval.reports.automem`) instead of dictionary keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .prefix import CallPrefix


class AutoMemMeta(BaseModel):
    """One question's loop (AutoMEM Table 9 and Sec. 5 quantities). Rows written before a field
    existed read it as its default."""

    model_config = ConfigDict(extra="ignore")

    single_pass: bool = Field(False, description="The single-pass variant ran (one planner call, no judge).")
    stopped: str | None = Field(None, description="Why the loop ended: sufficient, k_max, budget...")
    steps: int = Field(0, description="Actions run.")
    trace: list[dict] = Field(default_factory=list, description="Per step: action, observation (cut), verdict.")
    calls: list[CallPrefix] = Field(default_factory=list, description="Each call's prompt and stable prefix.")
    stable_prefix_fraction: float | None = Field(None, description="Token-weighted, over calls after the first.")
    graph: str | None = Field(None, description="The graph backend read (None: no graph index).")
    k_max: int = Field(0, description="The loop's step budget.")
    models: dict[str, str] = Field(default_factory=dict, description="Role -> model id (planner, judge, dump).")

    @classmethod
    def of_row(cls, row: dict) -> AutoMemMeta:
        """The meta of a prediction row (its ``strategy_meta``; an empty one when it has none)."""
        meta = row.get("strategy_meta")
        return cls.model_validate(meta if isinstance(meta, dict) else {})


__all__ = ["AutoMemMeta"]

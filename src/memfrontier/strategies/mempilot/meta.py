"""What one MemPilot trajectory reports with its context (``Context.meta``, an answer's ``meta``, a
prediction row's ``strategy_meta``): :class:`MemPilotMeta`, the shape the run reports read
(:mod:`memfrontier.eval.reports.mempilot`) instead of dictionary keys."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...core.types import Preference


class MemPilotMeta(BaseModel):
    """One trajectory's report (MemPilot Eq. 14, 19, 20, 22 quantities). Rows written before a
    field existed read it as its default."""

    model_config = ConfigDict(extra="ignore")

    policy_answer: str | None = Field(None, description="The policy's own answer (None: it gave none).")
    answer_mode: str = Field("decoupled", description="Who answers (Sec. 3.3): decoupled or policy.")
    format_valid: bool = Field(False, description="The trajectory passes the format gate (Eq. 20).")
    gate_reasons: list[str] = Field(default_factory=list, description="Why the gate refused it.")
    rounds: int = Field(0, description="Policy turns taken.")
    retrieve_calls: int = Field(0, description="Valid retrieve_memory calls run (repeats excluded).")
    curate_calls: int = Field(0, description="Valid runtime_memory calls run (repeats excluded).")
    repeated_calls: int = Field(0, description="Calls identical to an earlier one (not run again).")
    invalid_calls: int = Field(0, description="Calls refused before running (bad arguments...).")
    delegate_calls: int = Field(0, description="Attempted external calls, N_ext of Eq. 22.")
    routes: list[str | None] = Field(default_factory=list, description="The route of each delegate call.")
    route_models: dict[str, str | None] = Field(default_factory=dict, description="route id -> model.")
    image_requests: int = Field(0, description="Images the policy asked for.")
    image_accesses: int = Field(0, description="Images sent to a vision route.")
    tool_errors: int = Field(0, description="Tool calls that ended in an error observation.")
    trajectory_usd: float = Field(0.0, description="USD of the policy and delegates (Eq. 14), no answerer.")
    trajectory_proxy_s: float = Field(0.0, description="Latency proxy of the same calls (Eq. 19), seconds.")
    stopped_by_budget: bool = Field(False, description="The hard budget stopped the curation.")
    policy_error: str | None = Field(None, description="The policy model's error, when it failed.")
    preference: Preference = Field(default_factory=Preference, description="The lambda it ran under.")
    preference_source: Literal["config", "caller", "default"] | None = Field(
        None, description="Where the preference came from (strategies.base.resolve_preference)."
    )
    pool: str = Field("", description="The model pool's profile name.")
    tool_order: list[str] = Field(default_factory=list, description="The tools as permuted for this rollout.")
    segments: list[str] = Field(default_factory=list, description="The policy's turns as emitted.")

    @classmethod
    def of_row(cls, row: dict) -> MemPilotMeta | None:
        """The meta of a prediction row (its ``strategy_meta``), or None when the row carries none
        of MemPilot's (another strategy's row, a row refused before answering)."""
        meta = row.get("strategy_meta")
        if not isinstance(meta, dict) or "rounds" not in meta:
            return None
        return cls.model_validate(meta)


__all__ = ["MemPilotMeta"]

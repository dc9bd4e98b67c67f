"""Options of ``auto``, the router across strategy configurations."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from ...core.types import PreferenceSpec
from ..config import BudgetedConfig, operator_only


class AutoConfig(BudgetedConfig):
    """Options of ``auto``: the router file, the preference it decides under and a hard budget."""

    strategy = "auto"

    router: Path = Field(
        json_schema_extra=operator_only(),
        description="A router file from `memfrontier train strategy-router`.",
    )
    preference: PreferenceSpec | None = Field(
        None,
        title="preference preset",
        description="perf | balanced | cost or weights {quality, cost, latency} "
        "the decision maximises (MemPilot Eq. 10 presets); when set it is this configuration's and wins over the "
        "caller's; default: the caller's preference, else perf (strategies.base.resolve_preference).",
    )

    @model_validator(mode="after")
    def _router_file(self):
        if not self.router.is_file():
            raise ValueError(
                f"router: no router file {self.router} (train one with "
                f"`memfrontier train strategy-router --from FRONTIER_DIR`)"
            )
        return self

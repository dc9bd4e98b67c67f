"""BudgetMem's options (arXiv 2602.06025) and the one definition of its module and tier names."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ..config import Bool, Int, StrategyConfig, operator_only, operator_values

#: The five extraction modules (Sec. 4.1): filter (Eq. 4), entity / temporal / topic (Eq. 5), summary (Eq. 6).
Module = Literal["filter", "entity", "temporal", "topic", "summary"]
MODULES: tuple[str, ...] = typing.get_args(Module)
#: Budget tiers of every module (Sec. 4.2).
Tier = Literal["low", "mid", "high"]
TIERS: tuple[str, ...] = typing.get_args(Tier)
#: How a tier is realised (Sec. 4.2): implementation (Low rules, Mid MiniLM, High the LLM), reasoning
#: (one LLM, prompt styles of rising effort), capacity (models of rising size).
TieringName = Literal["implementation", "reasoning", "capacity"]
TIERINGS: tuple[str, ...] = typing.get_args(TieringName)


class BudgetMemConfig(StrategyConfig):
    """Options of ``budgetmem`` (defaults: BudgetMem Sec. 5.2 and the released code)."""

    strategy = "budgetmem"

    k: Int = Field(5, ge=1, description="Chunks retrieved per question (top-K, Sec. 5.2: K=5).")
    module_topk: Int = Field(5, ge=1, description="Chunks the filter module keeps (Eq. 4).")
    tiering: TieringName = Field(
        "implementation",
        json_schema_extra=operator_values("capacity"),  # its own models
        description="How tiers are realised (Sec. 4.2).",
    )
    tiers: Tier | dict[Module, Tier] | None = Field(
        None, description="Fixed tiers without a router: one tier for every module or {module: tier}; default mid."
    )
    router: Path | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="A trained tier-router checkpoint (router_best.pt from "
        "`train router`); it picks each module's tier per question (Sec. 4.3).",
    )
    greedy: Bool = Field(True, description="Router: argmax tiers (True) or sample them (training rollouts).")
    max_relations: Int = Field(10, ge=1, description="Relations each extraction module returns at most.")
    retrievers: tuple[Literal["dense", "bm25"], ...] = Field(
        ("dense", "bm25"), min_length=1, description="Retrievers fused by RRF (k=60) for the top-K chunks."
    )
    tiering_options: dict[str, Any] | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="Options of the tiering (e.g. capacity: models = a preset, hosted | local "
        "(embedded 270M / 0.5B / 1.5B), or {low, mid, high} model specs; style).",
    )

    @model_validator(mode="after")
    def _router_or_tiers(self):
        if self.router is not None and self.tiers is not None:
            raise ValueError("give router or tiers, not both")
        if self.router is not None and not self.router.is_file():
            raise ValueError(f"router: no checkpoint file {self.router}")
        return self

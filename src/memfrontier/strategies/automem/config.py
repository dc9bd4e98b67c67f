"""AutoMEM's options (arXiv 2606.04315)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..config import Bool, Int, StrategyConfig, operator_only, operator_values
from .graph import BACKENDS
from .tools.limits import ToolLimits


class AutoMEMConfig(StrategyConfig):
    """Options of ``automem`` (defaults: AutoMEM Sec. 4-5)."""

    strategy = "automem"

    single_pass: Bool = Field(
        False,
        description="The single-pass variant (Sec. 4.3): one plan of parallel "
        "tool calls, no judge, no dump (k_max = 1).",
    )
    k_max: Int = Field(3, ge=1, description="Plan -> execute -> judge rounds at most (Sec. 4.2).")
    judge_every_round: Bool = Field(
        True,
        description="Ask the judge after every round, as Algorithm 1 does. "
        "False (our lean variant, a departure from the paper): skip it after the last "
        "round and after a failed tool call, one call fewer where it cannot change the end.",
    )
    graph: Literal[(*BACKENDS, "none")] = Field(
        "ladybug",
        json_schema_extra=operator_values("neo4j"),  # neo4j: the server of the environment
        description="Graph index backend queried with Cypher (none: no index_query tool).",
    )
    window_turns: Int = Field(20, ge=1, description="Turns per note window when building the graph index (Sec. 5).")
    planner_llm: str | None = Field(
        None, json_schema_extra=operator_only(), description="The planner model; default the run's --llm."
    )
    judge_llm: str | None = Field(
        None, json_schema_extra=operator_only(), description="The sufficiency judge model; default the run's --llm."
    )
    base_url: str | None = Field(
        None,
        json_schema_extra=operator_only(),
        description="Base URL for planner_llm / judge_llm given as 'openai:MODEL'.",
    )
    build_concurrency: Int = Field(4, ge=1, description="Note windows built at once.")
    limits: ToolLimits = Field(
        default_factory=ToolLimits, description="Per-call caps of rg / read / dump / index_query."
    )

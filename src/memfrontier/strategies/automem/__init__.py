"""The AutoMEM agentic memory harness (arXiv 2606.04315): tools over a scope's memory
(:mod:`.tools`: ``rg``, ``read``, ``dump``, ``index_query``), the observation and trace types,
versioned prompts, and the plan -> execute -> judge loop with its single-pass variant
(:mod:`.loop`). The strategy that plugs it into memfrontier is
:class:`memfrontier.strategies.automem.pipeline.AutoMem`; the MCP server exposes the same tools.
"""

from .actions import TOOLS, Action, parse_action
from .corpus import ScopedCorpus
from .loop import AgentResult, AutoMemAgent, parse_verdict
from .observation import Observation, TraceStep, Verdict, render_trace
from .prompts import PROMPT_VERSION
from .tools import Toolbox, ToolLimits

__all__ = [
    "PROMPT_VERSION",
    "TOOLS",
    "Action",
    "AgentResult",
    "AutoMemAgent",
    "Observation",
    "ScopedCorpus",
    "ToolLimits",
    "Toolbox",
    "TraceStep",
    "Verdict",
    "parse_action",
    "parse_verdict",
    "render_trace",
]

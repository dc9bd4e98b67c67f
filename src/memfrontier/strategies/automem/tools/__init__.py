"""The AutoMEM tool menu (arXiv 2606.04315, Algorithm 1, ``A = {rg, read, dump, index_query}``)
and :class:`Toolbox`, which executes validated actions for one question and counts every event.

Only ``dump`` calls a model; ``rg``, ``read`` and ``index_query`` are plain code and run in a
worker thread (so the single-pass variant can run several concurrently). Each event of an
observation is counted on the current ledger as ``automem.<tool>.<event>`` (e.g.
``automem.rg.bad_pattern``, ``automem.index_query.rejected``, ``automem.read.out_of_scope``,
``automem.planner.unknown_tool``).
"""

from __future__ import annotations

import asyncio

from ....core.ledger import count_event
from ....core.types import Budget
from ....llm.metered import MeteredLLM
from ..actions import Action
from ..corpus import ScopedCorpus
from ..graph.backend import GraphBackend
from ..observation import Observation
from .dump import dump
from .index_query import index_query
from .limits import ToolLimits
from .read import read
from .rg import rg


def count_events(obs: Observation) -> None:
    """Count ``obs.events`` on the current ledger (no-op without one)."""
    for ev in obs.events:
        count_event(f"automem.{obs.tool}.{ev}")


class Toolbox:
    """The tools bound to one question's scope.

    Args:
        corpus: the scope's records (:class:`ScopedCorpus`).
        graph: the scope's graph index, or None (``index_query`` then answers ``no_index``).
        dump_llm: the answer-side model ``dump`` calls (None: ``dump`` is unavailable).
        limits: the caps of every tool.
        budget: the question's hard budget; a ``dump`` call that could cross it is not made.
    """

    def __init__(
        self,
        corpus: ScopedCorpus,
        *,
        graph: GraphBackend | None = None,
        dump_llm: MeteredLLM | None = None,
        limits: ToolLimits | None = None,
        budget: Budget | None = None,
    ):
        self.budget = budget
        self.corpus = corpus
        self.graph = graph
        self.dump_llm = dump_llm
        self.limits = limits or ToolLimits()

    async def execute(self, action: Action, question: str) -> Observation:
        """Run one action; never raises for bad input (errors become observations)."""
        lim = self.limits
        if action.tool == "rg":
            obs = await asyncio.to_thread(rg, self.corpus, action.patterns, action.ignore_case, lim)
        elif action.tool == "read":
            obs = await asyncio.to_thread(read, self.corpus, action.ids, lim)
        elif action.tool == "index_query":
            obs = await asyncio.to_thread(index_query, self.graph, action.cypher, self.corpus, lim)
        elif action.tool == "dump":
            if self.dump_llm is None:
                obs = Observation.failure("dump", "unavailable", "dump is not available here")
            else:
                obs = await dump(self.corpus, action.ids, question, self.dump_llm, lim, self.budget)
        else:
            obs = Observation.failure("planner", "unknown_tool", f"unknown tool {action.tool!r}")
        count_events(obs)
        return obs


__all__ = ["ToolLimits", "Toolbox", "count_events", "dump", "index_query", "read", "rg"]

"""``automem``: the AutoMEM agentic memory harness (arXiv 2606.04315) as a memfrontier strategy.

``build`` (stage ``construction``) builds the scope's graph index from write-time summary notes
(:mod:`memfrontier.graph`; role ``indexer``, one call per window of turns). ``context`` (stage
``query``) runs Algorithm 1 (:class:`~memfrontier.strategies.automem.loop.AutoMemAgent`; roles ``planner``,
``judge``, ``dump``) or, with ``single_pass=True``, the single-pass variant, and returns the
trace as the context; the shared answerer makes the one answer call over it (role ``answerer``).

Models per role: planner and judge default to the memory-side model (``env.llm``); pass
``planner_llm`` / ``judge_llm`` (``"local"``, ``"openai:MODEL"`` with ``base_url``, or a
ChatClient) to put them on a cheaper model, priced by the run's rules (:meth:`MemoryEnv.model`). ``dump`` and the
answer use the answer model (``env.answer_llm``), the indexer the memory-side model.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from typing import Any

from ...core.types import Budget, Context, Preference, Scope
from ...graph import (
    BACKENDS,
    GRAPH_VIEW,
    SCHEMA_HINT,
    graph_exists,
    open_graph,
    state_dir,
)
from ...graph.backend import GraphBackend, GraphData
from ...llm.metered import MeteredLLM
from .graph_builder import GraphIndexer
from .graph_notes import PROMPT_VERSION as INDEXER_PROMPT_VERSION
from ..base import BuildProgress, MemoryEnv, Query
from . import prompts
from .config import AutoMEMConfig
from .corpus import ScopedCorpus
from .loop import AutoMemAgent
from .tools import Toolbox, ToolLimits


class AutoMem:
    """The AutoMEM strategy.

    Args:
        single_pass: the single-pass variant (K_max = 1, no dump, no judge, parallel actions).
        k_max: the loop's step budget K_max (default 3: one plan and up to two re-plans, as in
            the released code's ``max_agentic_iters = 2``).
        graph: ``"ladybug"`` (embedded, default), ``"neo4j"`` (server from the environment) or
            ``"none"`` (no graph index; ``index_query`` answers ``no_index``).
        window_turns: records per indexer call.
        planner_llm / judge_llm: per-role model (spec string or ChatClient); None = ``env.llm``.
        base_url: the OpenAI-compatible server of ``openai:`` role specs.
        build_concurrency: indexer calls in flight at once.
        limits: tool caps (:class:`~memfrontier.strategies.automem.tools.ToolLimits` or a dict of its fields).
    Raises ValueError for an unknown ``graph`` or ``k_max < 1``.
    """

    name = "automem"
    config_class = AutoMEMConfig
    prompt_version = f"{prompts.PROMPT_VERSION}+{INDEXER_PROMPT_VERSION}"
    recipes: tuple[str, ...] = ()  # no search recipe

    def __init__(
        self,
        single_pass: bool = False,
        k_max: int = 3,
        judge_every_round: bool = True,
        graph: str = "ladybug",
        window_turns: int = 20,
        planner_llm: Any = None,
        judge_llm: Any = None,
        base_url: str | None = None,
        build_concurrency: int = 4,
        limits: ToolLimits | dict | None = None,
    ):
        if graph not in (*BACKENDS, "none"):
            raise ValueError(f"unknown graph backend {graph!r}; choose one of {(*BACKENDS, 'none')}")
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        self.single_pass = bool(single_pass)
        self.k_max = 1 if self.single_pass else int(k_max)
        self.judge_every_round = bool(judge_every_round)
        self.graph = graph
        self.window_turns = int(window_turns)
        self.role_specs = {"planner": planner_llm, "judge": judge_llm}
        self.base_url = base_url
        self.build_concurrency = build_concurrency
        self.limits = limits if isinstance(limits, ToolLimits) else ToolLimits(**(limits or {}))
        self._graphs: dict[str, GraphBackend] = {}
        self._lock = threading.Lock()

    # --- models ----------------------------------------------------------------------------
    def role_llm(self, env: MemoryEnv, role: str) -> MeteredLLM:
        """The metered model of ``role`` (``planner`` / ``judge``), made by :meth:`MemoryEnv.model`
        (the run's price book, ``price_as`` and ``allow_unpriced``); None = ``env.llm``."""
        spec = self.role_specs.get(role)
        return env.llm if spec is None else env.model(spec, role, base_url=self.base_url)

    # --- graph -----------------------------------------------------------------------------
    def _graph_for(self, env: MemoryEnv, scope: Scope, *, create: bool) -> GraphBackend | None:
        """The scope's graph backend (cached); for queries, None when none was built."""
        key = scope.key()
        with self._lock:
            if key in self._graphs:
                g = self._graphs[key]
                if not (g.kind == "ladybug" and not g.exists()):
                    return g
                g.close()  # its files were dropped (records deleted): never read the old graph
                del self._graphs[key]
            if self.graph == "none":
                return None
            root = env.store.view_dir(GRAPH_VIEW)
            if not create and not graph_exists(self.graph, root, scope):
                return None
            g = open_graph(self.graph, root, scope)
            self._graphs[key] = g
            return g

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """Whether the scope's graph index exists (always True without a graph, ``graph="none"``)."""
        return self.graph == "none" or self._graph_for(env, scope, create=False) is not None

    def graph_index(self, env: MemoryEnv, scope: Scope) -> GraphBackend | None:
        """The scope's graph index in ``env.store``'s directory (read it with Cypher through
        ``query``), or None when none was built or the graph is off."""
        return self._graph_for(env, scope, create=False)

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """Build the scope's graph index (idempotent: an up-to-date graph costs no call);
        ``progress(done, total, "windows")`` after each window of turns."""
        if self.graph == "none":
            return
        records = await asyncio.to_thread(env.store.records, scope)
        if not records:  # nothing to index: no graph may outlive the records it came from
            await asyncio.to_thread(self._drop_graph, env, scope)
            return
        backend = self._graph_for(env, scope, create=True)
        indexer = GraphIndexer(
            env.llm,
            window_turns=self.window_turns,
            concurrency=self.build_concurrency,
            embed=env.store.embedder.encode,
        )
        await indexer.build(records, backend, scope.key(), state_dir(env.store.view_dir(GRAPH_VIEW), scope),
                            progress=progress)

    def construction_usage(self, env: MemoryEnv, scope: Scope) -> dict:
        """What building ``scope``'s graph index cost over every run that built part of it, with its
        calls by role and events (:meth:`GraphIndexer.stored_usage`: the usage stored with each
        window's notes, summed; ``windows_without_usage`` / ``windows_without_events`` count cached
        windows whose cost / events were not recorded). {} with ``graph="none"`` or a store
        without local view files."""
        folder = state_dir(env.store.view_dir(GRAPH_VIEW), scope) if self.graph != "none" else None
        if folder is None:
            return {}
        indexer = GraphIndexer(env.llm, window_turns=self.window_turns)
        return indexer.stored_usage(env.store.records(scope), folder)

    def _drop_graph(self, env: MemoryEnv, scope: Scope) -> None:
        """Remove ``scope``'s graph: its Ladybug folder (database, notes cache, build meta), or the
        scope's nodes on a Neo4j server."""
        key = scope.key()
        with self._lock:
            g = self._graphs.pop(key, None)
        if g is not None:
            g.close()
        if self.graph == "neo4j":
            g = open_graph(self.graph, None, scope)
            try:
                g.replace(GraphData())
            finally:
                g.close()
            return
        folder = state_dir(env.store.view_dir(GRAPH_VIEW), scope)
        if folder is not None and folder.exists():
            shutil.rmtree(folder)

    # --- query -----------------------------------------------------------------------------
    async def context(self, query: Query, env: MemoryEnv, preference: Preference, budget: Budget) -> Context:
        corpus = await asyncio.to_thread(ScopedCorpus, env.store, query.scope)
        graph = self._graph_for(env, query.scope, create=False)
        toolbox = Toolbox(
            corpus, graph=graph, dump_llm=None if self.single_pass else env.answer_llm, limits=self.limits,
            budget=budget,
        )
        agent = AutoMemAgent(
            toolbox,
            planner=self.role_llm(env, "planner"),
            judge=self.role_llm(env, "judge"),
            context=prompts.context_block(corpus.catalog(), SCHEMA_HINT if graph else None),
            k_max=self.k_max,
            budget=budget,
            judge_every_round=self.judge_every_round,
        )
        run = agent.run_single_pass if self.single_pass else agent.run
        result = await run(query.text, query.question_date)
        meta = {
            **result.meta(),
            "graph": graph.kind if graph is not None else None,
            "k_max": self.k_max,
            "models": {
                "planner": agent.planner.model_id,
                "judge": agent.judge.model_id,
                "dump": env.answer_llm.model_id,
            },
        }
        return Context(text=result.context_text(), evidence_ids=result.evidence_ids(), meta=meta)

    def close(self) -> None:
        """Close the open graph handles."""
        with self._lock:
            for g in self._graphs.values():
                g.close()
            self._graphs.clear()

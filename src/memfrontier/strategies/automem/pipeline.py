"""``automem``: the AutoMEM agentic memory harness (arXiv 2606.04315) as a memfrontier strategy.

``build`` (stage ``construction``) builds the scope's graph index from write-time summary notes
(:mod:`memfrontier.strategies.automem.graph`; role ``indexer``, one call per window of turns). ``context`` (stage
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
from ...llm.metered import MeteredLLM
from ..base import BuildProgress, MemoryEnv, Query, StrategyBase
from . import prompts
from .config import AutoMEMConfig
from .corpus import ScopedCorpus
from .graph import (
    GRAPH_VIEW,
    SCHEMA_HINT,
    graph_exists,
    open_graph,
    state_dir,
)
from .graph.backend import GraphBackend, GraphData
from .graph_builder import GraphIndexer
from .graph_notes import PROMPT_VERSION as INDEXER_PROMPT_VERSION
from .loop import AutoMemAgent
from .meta import AutoMemMeta
from .tools import Toolbox


class AutoMem(StrategyBase):
    """The AutoMEM strategy.

    Args:
        config: the options (:class:`~.config.AutoMEMConfig`): ``single_pass`` (K_max = 1, no
            dump, no judge, parallel actions), ``k_max`` (the loop's step budget, default 3: one
            plan and up to two re-plans, as in the released code's ``max_agentic_iters = 2``),
            ``judge_every_round``, ``graph`` (``"ladybug"`` embedded, default; ``"neo4j"``, server
            from the environment; ``"none"``: no graph index, ``index_query`` answers
            ``no_index``), ``window_turns`` (records per indexer call), ``planner_llm`` /
            ``judge_llm`` (per-role model spec; None = ``env.llm``), ``base_url`` (the
            OpenAI-compatible server of ``openai:`` role specs), ``build_concurrency`` (indexer
            calls in flight at once), ``limits`` (tool caps).
        planner_llm / judge_llm: a client (ChatClient or MeteredLLM) serving that role instead of
            a spec (runtime objects). ValueError when the config also names that role's model.
    """

    name = "automem"
    config_class = AutoMEMConfig
    meta_model = AutoMemMeta
    config: AutoMEMConfig
    prompt_version = f"{prompts.PROMPT_VERSION}+{INDEXER_PROMPT_VERSION}"
    recipes: tuple[str, ...] = ()  # no search recipe

    def __init__(self, config: AutoMEMConfig | None = None, *, planner_llm: Any = None, judge_llm: Any = None):
        super().__init__(config)
        cfg = self.config
        for role, given, spec in (
            ("planner_llm", planner_llm, cfg.planner_llm),
            ("judge_llm", judge_llm, cfg.judge_llm),
        ):
            if given is not None and spec is not None:
                raise ValueError(f"{role}: the config names {spec!r} and a client was given as well; give one")
        self.role_specs = {
            "planner": planner_llm if planner_llm is not None else cfg.planner_llm,
            "judge": judge_llm if judge_llm is not None else cfg.judge_llm,
        }
        self._graphs: dict[str, GraphBackend] = {}
        self._lock = threading.Lock()

    @property
    def k_max(self) -> int:
        """The loop's step budget: ``config.k_max``, 1 for the single-pass variant."""
        return 1 if self.config.single_pass else self.config.k_max

    # --- models ----------------------------------------------------------------------------
    def role_llm(self, env: MemoryEnv, role: str) -> MeteredLLM:
        """The metered model of ``role`` (``planner`` / ``judge``), made by :meth:`MemoryEnv.model`
        (the run's price book, ``price_as`` and ``allow_unpriced``); None = ``env.llm``."""
        spec = self.role_specs.get(role)
        return env.llm if spec is None else env.model(spec, role, base_url=self.config.base_url)

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
            if self.config.graph == "none":
                return None
            root = env.store.view_dir(GRAPH_VIEW)
            if not create and not graph_exists(self.config.graph, root, scope):
                return None
            g = open_graph(self.config.graph, root, scope)
            self._graphs[key] = g
            return g

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """Whether the scope's graph index exists (always True without a graph, ``graph="none"``)."""
        return self.config.graph == "none" or self._graph_for(env, scope, create=False) is not None

    def graph_index(self, env: MemoryEnv, scope: Scope) -> GraphBackend | None:
        """The scope's graph index in ``env.store``'s directory (read it with Cypher through
        ``query``), or None when none was built or the graph is off."""
        return self._graph_for(env, scope, create=False)

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """Build the scope's graph index (idempotent: an up-to-date graph costs no call);
        ``progress(done, total, "windows")`` after each window of turns."""
        if self.config.graph == "none":
            return
        records = await asyncio.to_thread(env.store.records, scope)
        if not records:  # nothing to index: no graph may outlive the records it came from
            await asyncio.to_thread(self._drop_graph, env, scope)
            return
        backend = self._graph_for(env, scope, create=True)
        indexer = GraphIndexer(
            env.llm,
            window_turns=self.config.window_turns,
            concurrency=self.config.build_concurrency,
            embed=env.store.embedder.encode,
        )
        await indexer.build(
            records, backend, scope.key(), state_dir(env.store.view_dir(GRAPH_VIEW), scope), progress=progress
        )

    def construction_usage(self, env: MemoryEnv, scope: Scope) -> dict:
        """What building ``scope``'s graph index cost over every run that built part of it, with its
        calls by role and events (:meth:`GraphIndexer.stored_usage`: the usage stored with each
        window's notes, summed; ``windows_without_usage`` / ``windows_without_events`` count cached
        windows whose cost / events were not recorded). {} with ``graph="none"`` or a store
        without local view files."""
        folder = state_dir(env.store.view_dir(GRAPH_VIEW), scope) if self.config.graph != "none" else None
        if folder is None:
            return {}
        indexer = GraphIndexer(env.llm, window_turns=self.config.window_turns)
        return indexer.stored_usage(env.store.records(scope), folder)

    def _drop_graph(self, env: MemoryEnv, scope: Scope) -> None:
        """Remove ``scope``'s graph: its Ladybug folder (database, notes cache, build meta), or the
        scope's nodes on a Neo4j server."""
        key = scope.key()
        with self._lock:
            g = self._graphs.pop(key, None)
        if g is not None:
            g.close()
        if self.config.graph == "neo4j":
            g = open_graph(self.config.graph, None, scope)
            try:
                g.replace(GraphData())
            finally:
                g.close()
            return
        folder = state_dir(env.store.view_dir(GRAPH_VIEW), scope)
        if folder is not None and folder.exists():
            shutil.rmtree(folder)

    # --- query -----------------------------------------------------------------------------
    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        corpus = await asyncio.to_thread(ScopedCorpus, env.store, query.scope)
        graph = self._graph_for(env, query.scope, create=False)
        toolbox = Toolbox(
            corpus,
            graph=graph,
            dump_llm=None if self.config.single_pass else env.answer_llm,
            limits=self.config.limits,
            budget=budget,
        )
        agent = AutoMemAgent(
            toolbox,
            planner=self.role_llm(env, "planner"),
            judge=self.role_llm(env, "judge"),
            context=prompts.context_block(corpus.catalog(), SCHEMA_HINT if graph else None),
            k_max=self.k_max,
            budget=budget,
            judge_every_round=self.config.judge_every_round,
        )
        run = agent.run_single_pass if self.config.single_pass else agent.run
        result = await run(query.text, query.question_date)
        meta = AutoMemMeta(
            **result.meta(),
            graph=graph.kind if graph is not None else None,
            k_max=self.k_max,
            models={"planner": agent.planner.model_id, "judge": agent.judge.model_id, "dump": env.answer_llm.model_id},
        )
        return Context(
            text=result.context_text(), evidence_ids=result.evidence_ids(), meta=meta.model_dump(mode="json")
        )

    def close(self) -> None:
        """Close the open graph handles."""
        with self._lock:
            for g in self._graphs.values():
                g.close()
            self._graphs.clear()

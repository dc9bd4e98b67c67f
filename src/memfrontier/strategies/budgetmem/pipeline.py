"""``budgetmem``: runtime extraction over raw chunks with per-module budget tiers
(BudgetMem, arXiv 2602.06025, Sec. 4.1-4.3).

Per question: retrieve the top-K chunks (K=5, Sec. 5.2) -> filter (Eq. 4) -> {entity,
temporal, topic} in one parallel stage (Eq. 5) -> summary (Eq. 6) -> the frozen answerer reads
the summary. Each module's tier comes from a fixed ``tiers`` mapping or from a router
(Sec. 4.3): any object with ``decide(query_emb, input_emb, module, greedy) -> (tier, logprob,
value)`` such as :class:`memfrontier.strategies.budgetmem.router.TierRouter`, whose state is the query
embedding and the mean embedding of the module input (the previous module's output).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...core.ledger import current_ledger
from ...core.threads import run_cpu
from ...core.types import Budget, Context, Preference
from ...retrieve.hybrid import hybrid_search
from ...retrieve.recipes import chunk_recipe
from ..base import MemoryEnv, Query, StrategyBase
from .cache import ModuleCache
from .config import MODULES, TIERS, BudgetMemConfig
from .engine import BudgetMemModules
from .modules import EXTRACTORS, ModuleResult, SummaryInput
from .prompts import PROMPT_VERSION
from .tiering import make_tiering


class BudgetMem(StrategyBase):
    """The BudgetMem strategy (implements :class:`~memfrontier.strategies.base.Strategy`).

    Args:
        config: the options (:class:`~.config.BudgetMemConfig`: ``k``, ``module_topk``,
            ``tiering`` and ``tiering_options``, fixed ``tiers`` (one for every module or a
            mapping module -> tier, missing modules ``"mid"``; default all ``"mid"``) or a
            ``router`` checkpoint path, ``greedy``, ``max_relations``, ``retrievers``).
        router: a router object (runtime; e.g. a :class:`~memfrontier.strategies.budgetmem.router.TierRouter`
            being trained) with ``decide(...)`` (see the module doc), used instead of fixed tiers.
            ValueError when the config also names ``router`` or ``tiers``.
        cache: a :class:`ModuleCache`, a path for one, ``True`` (in memory) or None (off).
        record_states: put the router states (embeddings) in ``meta`` for PPO; default: when
            sampling (``config.greedy`` False).

    ``Context.meta``: ``tiers`` (chosen), ``tiers_used`` (after fallbacks), ``fallbacks``
    (module -> failed tiers), ``cached`` (module -> bool), ``module_usd`` and ``extraction_usd``
    (what the module calls cost, replayed from the cache on a hit: the cost of Eq. 7),
    ``decisions`` (router: module, tier, logprob, value), ``retrieved_chunks``,
    ``filtered_chunks``, ``relations`` (counts), ``filter_passthrough``.

    A hard :class:`~memfrontier.core.types.Budget` is honoured before every call: an LLM tier
    whose worst case (predicted prompt, output at ``max_tokens``) could cross a cap is not called
    and falls back to the next lower tier (event ``budget.call_refused.<role>`` and
    ``fallback.<module>.<tier>``); once a cap is reached, the remaining modules run their rules
    ($0, ``tiers_used`` = ``"rules"``, event ``budget.rules_only.<module>``). The answerer then
    cuts its context to what is left.
    """

    name = "budgetmem"
    prompt_version = PROMPT_VERSION
    config_class = BudgetMemConfig
    config: BudgetMemConfig

    def __init__(
        self,
        config: BudgetMemConfig | None = None,
        *,
        router: Any = None,
        cache: ModuleCache | str | Path | bool | None = None,
        record_states: bool | None = None,
    ):
        super().__init__(config)
        cfg = self.config
        if router is not None and (cfg.router is not None or cfg.tiers is not None):
            raise ValueError("a router object replaces the config's router and tiers: give one of them")
        self.tiering = make_tiering(cfg.tiering, **(cfg.tiering_options or {}))
        tiers = cfg.tiers if cfg.tiers is not None else "mid"
        self.tiers = {m: tiers if isinstance(tiers, str) else tiers.get(m, "mid") for m in MODULES}
        self._router = router
        self.record_states = (not cfg.greedy) if record_states is None else record_states
        self.recipe = chunk_recipe(cfg.retrievers)
        if cache is True:
            cache = ModuleCache()
        elif isinstance(cache, (str, Path)):
            cache = ModuleCache(cache)
        self.cache: ModuleCache | None = cache if isinstance(cache, ModuleCache) else None  # an empty cache is falsy
        self._runtime: BudgetMemModules | None = None

    def runtime(self, env: MemoryEnv) -> BudgetMemModules:
        """The modules bound to ``env`` (rebuilt when the env changes)."""
        if self._runtime is None or self._runtime.env is not env:
            self._runtime = BudgetMemModules(env, self.tiering, config=self.config, cache=self.cache)
        return self._runtime

    def router(self, env: MemoryEnv):
        if self._router is None and self.config.router is not None:
            from .router import TierRouter

            self._router = TierRouter.load(
                self.config.router, expected_modules=MODULES, expected_emb_dim=int(self.runtime(env).embedder.dim)
            )
        return self._router

    # --- routing ---------------------------------------------------------------------------------
    def _route(
        self,
        rt: BudgetMemModules,
        modules: tuple[str, ...],
        q_emb: np.ndarray | None,
        input_texts: list[str],
        meta: dict,
    ) -> dict[str, str]:
        router = self._router
        if router is None:
            return {m: self.tiers[m] for m in modules}
        t0 = time.perf_counter()
        x = rt.embed(input_texts).mean(axis=0) if input_texts else np.zeros_like(q_emb)
        if len(modules) > 1 and hasattr(router, "decide_many"):
            out = router.decide_many(q_emb, x, list(modules), self.config.greedy)
        else:
            out = [router.decide(q_emb, x, m, self.config.greedy) for m in modules]
        ledger = current_ledger()
        if ledger is not None:  # the router is local compute: $0, its wall time recorded
            ledger.record_local("budgetmem.router", time.perf_counter() - t0, model_id="tier-router")
        chosen = {}
        for m, (tier, logp, value) in zip(modules, out):
            if tier not in TIERS:
                raise ValueError(f"router chose unknown tier {tier!r} for {m}")
            chosen[m] = tier
            d = {"module": m, "tier": tier, "logprob": float(logp), "value": float(value)}
            if self.record_states:
                d["input_emb"] = [float(v) for v in x]
            meta["decisions"].append(d)
        return chosen

    @property
    def recipes(self) -> tuple[str, ...]:
        """Names of the search recipes this strategy runs (provenance)."""
        return (self.recipe.name,)

    # --- the strategy ------------------------------------------------------------------------------
    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        rt = self.runtime(env)
        router = self.router(env)
        ledger = current_ledger()
        q = query.text
        meta: dict[str, Any] = {
            "tiering": self.tiering.name,
            "k": self.config.k,
            "module_topk": self.config.module_topk,
            "prompt_version": PROMPT_VERSION,
            "tiers": {},
            "tiers_used": {},
            "fallbacks": {},
            "cached": {},
            "module_usd": {},
            "decisions": [],
            "router": router is not None,
        }
        hits = await run_cpu(hybrid_search, env.store, q, query.scope, self.recipe, self.config.k)
        chunks = [h.chunk for h in hits]
        meta["retrieved_chunks"] = [c.id for c in chunks]
        if not chunks:
            if ledger is not None:
                ledger.count("budgetmem.no_chunks")
            meta.update(filtered_chunks=[], relations={}, extraction_usd=0.0, filter_passthrough=False)
            return Context(text="", evidence_ids=[], meta=meta)
        q_emb = rt.embed([q])[0] if router is not None else None
        if router is not None and self.record_states:
            meta["query_emb"] = [float(v) for v in q_emb]

        results: dict[str, ModuleResult] = {}

        async def run(module: str, inp: Any, tier: str) -> ModuleResult:
            spent = ledger is not None and ledger.exhausted(budget)  # a hard cap reached: no more paid calls
            if spent and ledger is not None:
                ledger.count(f"budget.rules_only.{module}")
            res = await rt.run_traced(rt.modules[module], q, inp, tier, rules_only=spent, budget=budget)
            results[module] = res
            return res

        # M_fil (Eq. 4)
        tier_f = self._route(rt, ("filter",), q_emb, rt.filter.input_texts(chunks), meta)["filter"]
        filtered = (await run("filter", chunks, tier_f)).output
        # {M_ent, M_tmp, M_top} in one parallel stage (Eq. 5)
        ext_tiers = self._route(rt, EXTRACTORS, q_emb, rt.entity.input_texts(filtered), meta)
        stage = ledger.parallel() if ledger is not None else contextlib.nullcontext()
        with stage:
            await asyncio.gather(*(run(m, filtered, ext_tiers[m]) for m in EXTRACTORS))
        s_in = SummaryInput(
            chunks=filtered,
            entity=results["entity"].output,
            temporal=results["temporal"].output,
            topic=results["topic"].output,
        )
        # M_sum (Eq. 6)
        tier_s = self._route(rt, ("summary",), q_emb, rt.summary.input_texts(s_in), meta)["summary"]
        summary = (await run("summary", s_in, tier_s)).output

        for m in MODULES:
            r = results[m]
            meta["tiers"][m], meta["tiers_used"][m] = r.tier, r.tier_used
            meta["fallbacks"][m], meta["cached"][m], meta["module_usd"][m] = r.fallbacks, r.cached, r.usd
        meta["extraction_usd"] = sum(meta["module_usd"].values())
        meta["filtered_chunks"] = [c.id for c in filtered]
        meta["relations"] = {m: len(results[m].output) for m in EXTRACTORS}
        meta["filter_passthrough"] = any(e.startswith("filter.empty.") for e in results["filter"].events)
        if ledger is not None and ledger.exhausted(budget):
            meta["budget_spent"] = True
        evidence: list[str] = []
        for c in filtered:
            evidence.extend(i for i in c.record_ids if i not in evidence)
        return Context(text=summary, evidence_ids=evidence, meta=meta)

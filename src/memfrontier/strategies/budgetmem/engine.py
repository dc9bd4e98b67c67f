"""The BudgetMem engine: the five modules (:mod:`.modules`) bound to a memory environment, a
tiering strategy and a cache, and the one way every module runs at a tier (BudgetMem Sec. 4.1):
cache lookup, the tiering strategy (:mod:`.tiering`), fallback to the next lower tier on an
unusable output (below Low, the rules), the contract check, cost attribution."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from ...core.ledger import BudgetExceededError, count_event, current_ledger, record_fallback
from ...core.types import Budget
from . import prompts
from .cache import ModuleCache, input_hash
from .config import MODULES, BudgetMemConfig
from .modules import FLOOR, MODULE_CLASSES, Module, ModuleResult
from .tiering import TIERS, ModuleOutputError, Tiering, lower_tier, make_tiering, run_local

log = logging.getLogger(__name__)


class BudgetMemModules:
    """The five modules bound to a :class:`~memfrontier.strategies.base.MemoryEnv`, a tiering
    strategy and an optional :class:`~.cache.ModuleCache`.

    Args:
        env: store (its ``embedder`` is the MiniLM used by Mid tiers and the router) and models.
        tiering: ``"implementation"`` / ``"reasoning"`` / ``"capacity"`` or a Tiering.
        config: the strategy's :class:`~.config.BudgetMemConfig`; the engine reads ``module_topk``
            (chunks the filter keeps) and ``max_relations`` (relations an extraction module returns
            at most) from it. Default: the config's defaults.
        mid_threshold: Mid filter score threshold (0.7 cos + 0.3 overlap; default 0.3).
        mid_min_sim: Mid extraction similarity floor (default 0.2).
        cache: module output cache (None = off).

    ``modules[name]`` (and the attributes ``filter``, ``entity``...) are the modules.
    """

    def __init__(
        self,
        env,
        tiering: str | Tiering = "implementation",
        *,
        config: BudgetMemConfig | None = None,
        mid_threshold: float = 0.3,
        mid_min_sim: float = 0.2,
        cache: ModuleCache | None = None,
        embed_cache_size: int = 4096,
    ):
        self.env = env
        self.tiering = make_tiering(tiering)
        self.config = config if config is not None else BudgetMemConfig()
        self.mid_threshold = mid_threshold
        self.mid_min_sim = mid_min_sim
        self.cache = cache
        self._embed_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._embed_cache_size = embed_cache_size
        self._embedder = env.store.embedder if env.store is not None else None
        self.modules: dict[str, Module] = {m: MODULE_CLASSES[m](self) for m in MODULES}
        for m, mod in self.modules.items():
            setattr(self, m, mod)

    @property
    def module_topk(self) -> int:
        """Chunks the filter keeps (``config.module_topk``)."""
        return self.config.module_topk

    @property
    def max_relations(self) -> int:
        """Relations an extraction module returns at most (``config.max_relations``)."""
        return self.config.max_relations

    # --- embeddings -----------------------------------------------------------------------------
    @property
    def embedder(self):
        if self._embedder is None:
            from ...embed.minilm import MiniLMEmbedder

            self._embedder = MiniLMEmbedder()
        return self._embedder

    def embed(self, texts: list[str]) -> np.ndarray:
        """Normalised MiniLM vectors of ``texts`` (rows), memoised per text (LRU)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._embed_cache))
        if missing:
            vecs = np.asarray(self.embedder.encode(missing), dtype=np.float32)
            for t, v in zip(missing, vecs):
                self._embed_cache[t] = v
        out = np.stack([self._embed_cache[t] for t in texts]) if texts else np.zeros((0, self.embedder.dim), np.float32)
        for t in texts:
            self._embed_cache.move_to_end(t)
        while len(self._embed_cache) > self._embed_cache_size:
            self._embed_cache.popitem(last=False)
        return out

    # --- the tier interface -----------------------------------------------------------------
    def _salt(self) -> str:
        return (
            f"{prompts.PROMPT_VERSION}|{self.tiering.fingerprint(self.env)}|topk={self.module_topk}|"
            f"rel={self.max_relations}|thr={self.mid_threshold}|sim={self.mid_min_sim}"
        )

    async def run(self, module: str, query: str, module_input: Any, tier: str) -> Any:
        return await self.modules[module].run(query, module_input, tier)

    async def run_traced(
        self,
        module: Module,
        query: str,
        module_input: Any,
        tier: str,
        *,
        rules_only: bool = False,
        budget: Budget | None = None,
    ) -> ModuleResult:
        """Run ``module`` at ``tier``: cache, tiering, fallback chain, contract, cost attribution.

        Fallback: an unusable output at a tier counts
        ``fallback.<module>.<tier>`` and runs the next lower tier; below Low, the rules
        (``tier_used="rules"``), which always produce a valid output. ``rules_only`` runs the
        rules directly (a hard budget already spent). An LLM call whose worst case could cross the
        hard ``budget`` is not made (``budget.call_refused.<role>``) and falls back the same way.
        The module's cost is the ledger's view of the calls made inside this execution
        (:meth:`~memfrontier.core.ledger.Ledger.span`).
        """
        if tier not in TIERS:
            raise ValueError(f"unknown tier {tier!r}; choose one of {TIERS}")
        ledger = current_ledger()
        key = None
        if self.cache is not None and not rules_only:
            key = ModuleCache.key(
                query, module.name, tier, input_hash({"salt": self._salt(), "input": module.input_key(module_input)})
            )
            entry = self.cache.get(key)
            if entry is not None:
                if ledger is not None:  # no call is made; the events describe the cached output
                    ledger.count(f"cache_hit.{module.name}")
                    for ev in entry["events"]:
                        ledger.count(ev)
                    _record_chain(module.name, entry["fallbacks"], entry["events"])
                return ModuleResult(
                    module.name,
                    tier,
                    entry["tier_used"],
                    module.decode(entry["output"], module_input),
                    list(entry["fallbacks"]),
                    list(entry["events"]),
                    True,
                    entry["usd"],
                    entry["calls"],
                    entry["input_tokens"],
                    entry["output_tokens"],
                    entry["wall_s"],
                )
        span_cm = ledger.span(f"budgetmem.{module.name}") if ledger is not None else contextlib.nullcontext()
        with span_cm as span:
            out, current, fallbacks, events, t0, refused = await self._run_chain(
                module, query, module_input, tier, rules_only, budget
            )
        for ev in events:
            count_event(ev)
        _record_chain(module.name, fallbacks, events)
        res = ModuleResult(module.name, tier, current, out, fallbacks, events, wall_s=time.perf_counter() - t0)
        if span is not None:
            u = span.usage()
            res.usd, res.calls, res.input_tokens, res.output_tokens = u.usd, u.calls, u.input_tokens, u.output_tokens
        if key is not None and not refused:  # a budget's fallback is not the tier's output: not cached
            self.cache.put(
                key,
                {
                    "module": module.name,
                    "tier": tier,
                    "tier_used": res.tier_used,
                    "output": module.encode(out),
                    "fallbacks": fallbacks,
                    "events": events,
                    "usd": res.usd,
                    "calls": res.calls,
                    "input_tokens": res.input_tokens,
                    "output_tokens": res.output_tokens,
                    "wall_s": res.wall_s,
                },
            )
        return res

    async def _run_chain(
        self, module: Module, query: str, module_input: Any, tier: str, rules_only: bool, budget: Budget | None
    ):
        """The tier chain of :meth:`run_traced`: (output, tier used, fallbacks, events, start time,
        whether a call was refused by the budget)."""
        t0 = time.perf_counter()
        refused = False
        current: str = FLOOR if rules_only else tier
        fallbacks: list[str] = []
        events: list[str] = []
        while True:
            try:
                if current == FLOOR:
                    out = run_local(module, "rules", "rules", query, module_input)
                else:
                    out = await self.tiering.execute(module, query, module_input, current, self.env, budget)
                notes: list[str] = []
                out = module.finalize(out, module_input, current if current != FLOOR else "low", notes)
                events.extend(notes)
                break
            except ModuleOutputError as e:
                if current == FLOOR:  # the rules broke the contract: a bug, not model noise
                    raise
                log.info("budgetmem %s: %s; falling back", module.name, e)
                fallbacks.append(current)
                events += [f"output_rejected.{module.name}.{current}.{e.reason}", f"fallback.{module.name}.{current}"]
                refused = refused or isinstance(e.__cause__, BudgetExceededError)
                current = lower_tier(current) or FLOOR
        return out, current, fallbacks, events, t0, refused


def _record_chain(module: str, fallbacks: list[str], events: list[str]) -> None:
    """Record one module execution's fallback chain on the current ledger: one
    :class:`~memfrontier.core.ledger.FallbackRecord` per tier that fell back (``fallbacks``, in
    order; step 0 is the tier asked for), its reason read from the execution's
    ``output_rejected.MODULE.TIER.REASON`` event."""
    for step, tier in enumerate(fallbacks):
        prefix = f"output_rejected.{module}.{tier}."
        reason = next((ev[len(prefix) :] for ev in events if ev.startswith(prefix)), None)
        record_fallback(role=f"budgetmem.{module}.{tier}", module=module, tier=tier, reason=reason, step=step)

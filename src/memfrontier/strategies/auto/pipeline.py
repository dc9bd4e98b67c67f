"""``auto``: pick the strategy configuration per question from a trained router, then run it.

Before any model call the router reads the question's features (:mod:`.features`: its MiniLM
embedding from the store's embedder, length, cues, the scope's size, which views are built),
predicts F1, USD, latency-proxy seconds and tokens of every configuration it knows
(:class:`~.router.Router`) and picks one under the preference and the hard budget
(:func:`~.decision.decide`). The chosen configuration's strategy then answers as it would alone:
each configuration's strategy is built once, when ``auto`` is, and shares the caller's store and
models. The decision costs no model call and no ledger entry.
"""

from __future__ import annotations

import threading
import time
import weakref

from ...core.ledger import BudgetExceededError, count_event, sum_usage_records
from ...core.types import Budget, Context, Preference, Scope
from ..base import (
    BuildProgress,
    MemoryEnv,
    Query,
    Strategy,
    StrategyBase,
    ViewNotBuiltError,
    resolve_preference,
    view_built,
)
from .config import AutoConfig
from .decision import Decision, Prediction, decide
from .features import ScopeStats, feature_vector, scope_stats
from .router import Router, RouterFileError

PROMPT_VERSION = "auto-v1"


class Auto(StrategyBase):
    """The router across strategy configurations (implements :class:`~memfrontier.strategies.base.Strategy`).

    Args:
        config: the options (:class:`~.config.AutoConfig`): ``router`` (a router file, see
            :mod:`.router`), ``preference`` (this configuration's; the decision maximises the one
            :func:`~memfrontier.strategies.base.resolve_preference` gives: the config's, else the
            caller's, else perf) and ``budget`` (hard caps, combined with the caller's, the tighter
            cap wins; the decision keeps to it, see :mod:`.decision`, and the chosen strategy and
            the answerer are held to it as well).
        router: a loaded :class:`Router` used instead of reading ``config.router`` (runtime object).
        members: already built strategies by configuration label (runtime objects, e.g. with
            clients of their own); the router's other configurations are built from their
            strategy name and options. Raises ValueError for a label the router does not know.

    The chosen member answers under the preference the decision was made under (handed to it as
    the caller's; a member whose own config names a preference keeps its own, by the same rule:
    that is the configuration the router measured).

    ``Context.meta``: the chosen strategy's own meta, plus ``auto`` (``configuration``,
    ``strategy``, ``rule``, per-configuration ``predictions`` with their ``utility`` and whether
    they fit the budget, ``unbuilt`` configurations left out, ``preference``,
    ``preference_source``, ``budget``, ``scales``, ``route_ms`` (features, the query embedding
    included, and decision, in ms), ``router_sha256``) and ``route`` ({``configuration``: label},
    whose shares the evaluation summary reports under ``choices``).
    """

    name = "auto"
    prompt_version = PROMPT_VERSION
    config_class = AutoConfig
    config: AutoConfig

    def __init__(self, config: AutoConfig, *, router: Router | None = None, members: dict[str, Strategy] | None = None):
        from .. import get_strategy  # the registry builds each configuration's strategy

        super().__init__(config)
        self.router = router if router is not None else Router.load(self.config.router)
        given = dict(members or {})
        if unknown := sorted(set(given) - set(self.router.labels)):
            raise ValueError(
                f"members {', '.join(unknown)} are not configurations of the router ({', '.join(self.router.labels)})"
            )
        self.members: dict[str, Strategy] = {
            c.label: given[c.label] if c.label in given else get_strategy(c.strategy, c.options)
            for c in self.router.file.configurations
        }
        # per store (one strategy may serve several), scope key -> (its write counter, stats, built views)
        self._scopes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @property
    def recipes(self) -> tuple[str, ...]:
        """Every search recipe a configuration may run (provenance)."""
        return tuple(dict.fromkeys(r for m in self.members.values() for r in m.recipes))

    def _distinct(self) -> list[Strategy]:
        return list({id(m): m for m in self.members.values()}.values())

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """Build every configuration's view of ``scope`` (each idempotent; shared views once), one
        after another; ``progress`` gets each one's steps, its unit prefixed with the configuration's label."""
        labels: dict[int, str] = {}
        for label, m in self.members.items():
            labels.setdefault(id(m), label)
        for m in self._distinct():
            if progress is None:
                await m.build(env, scope)
            else:
                await m.build(
                    env, scope, lambda done, total, unit, label=labels[id(m)]: progress(done, total, f"{label} {unit}")
                )

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """Whether every configuration's view of ``scope`` is built."""
        return all(view_built(m, env, scope) for m in self._distinct())

    def construction_usage(self, env: MemoryEnv, scope: Scope) -> dict:
        """What building the configurations' views of ``scope`` cost, over every run that built them
        (summed; a view several configurations read, such as one MemoryCPT bank and its ablations,
        reports the same usage for each and is counted once)."""
        seen: list[dict] = []
        for m in self._distinct():
            if (u := m.construction_usage(env, scope)) and u not in seen:
                seen.append(u)
        return sum_usage_records(seen)

    def _scope(self, env: MemoryEnv, scope: Scope) -> tuple[ScopeStats, dict[str, bool]]:
        """The scope's size and which configurations' views are built. Both are kept while the
        scope's records do not change (:meth:`~memfrontier.store.base.MemoryStore.scope_generation`);
        a view not built yet is looked for again at every call (it may be built meanwhile, which
        writes no record)."""
        gen = env.store.scope_generation(scope)
        key = scope.key()
        with self._lock:
            scopes = self._scopes.setdefault(env.store, {})
            hit = scopes.get(key)
        if hit is not None and hit[0] == gen:
            stats, built = hit[1], dict(hit[2])
            if all(built.values()):
                return stats, built
        else:
            stats, built = scope_stats(env.store, scope), {}
        built = {label: built.get(label) or view_built(m, env, scope) for label, m in self.members.items()}
        with self._lock:
            scopes[key] = (gen, stats, built)
        return stats, built

    def _check_embedder(self, env: MemoryEnv) -> None:
        spec, emb = self.router.file.features, env.store.embedder
        if emb.model_id != spec.embedding_model or emb.dim != spec.embedding_dim:
            raise RouterFileError(
                f"the router was fit on {spec.embedding_model} ({spec.embedding_dim}-d) query "
                f"embeddings; this store embeds with {emb.model_id} ({emb.dim}-d)"
            )

    def route(
        self, query: Query, env: MemoryEnv, preference: Preference, budget: Budget, *, embedding=None
    ) -> tuple[Decision, list[Prediction], list[str]]:
        """(decision, predictions of the configurations it chose among, configurations left out
        because their view of the scope is not built). No model call. ``embedding``: the query's
        embedding (shape ``(dim,)``) when the caller has it; else the store's embedder makes it.

        Raises ViewNotBuiltError when no configuration's view is built, BudgetExceededError when
        none is predicted to fit ``budget``, RouterFileError for a store with another embedder."""
        self._check_embedder(env)
        stats, built = self._scope(env, query.scope)
        unbuilt = [label for label, ok in built.items() if not ok]
        if len(unbuilt) == len(built):
            raise ViewNotBuiltError(
                f"no configuration of the router has its view of this scope built "
                f"({', '.join(unbuilt)}); build them first (`memfrontier ask --build --strategy auto`)"
            )
        emb = env.store.encode_query(query.text) if embedding is None else embedding
        x = feature_vector(emb, query.text, stats, 1.0 - len(unbuilt) / len(built))
        preds = [p for p in self.router.predict(x) if p.label not in unbuilt]
        return decide(preds, preference, budget, self.router.scales), preds, unbuilt

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        """Decide under the preference :func:`~memfrontier.strategies.base.resolve_preference` gives
        and ``budget`` (the question's effective caps: the caller's made stricter by the config's,
        :func:`~memfrontier.strategies.base.effective_budget`), then run the chosen member under
        that same preference and budget."""
        pref, source = resolve_preference(self.config.preference, preference)
        t0 = time.perf_counter()
        try:
            decision, preds, unbuilt = self.route(query, env, pref, budget)
        except BudgetExceededError:  # no configuration fits: the question is refused, and that is counted
            count_event("budget.call_refused.router")
            raise
        route_ms = (time.perf_counter() - t0) * 1e3
        member = self.members[decision.label]
        ctx = await member.context(query, env, pref, budget)
        routed = {
            "configuration": decision.label,
            "strategy": member.name,
            "rule": decision.rule,
            "predictions": {
                p.label: {
                    "f1": p.f1,
                    "usd": p.usd,
                    "proxy_s": p.proxy_s,
                    "tokens": p.tokens,
                    "usd_high": p.usd_high,
                    "proxy_s_high": p.proxy_s_high,
                    "tokens_high": p.tokens_high,
                    "utility": decision.utilities[p.label],
                    "fits_budget": decision.fits[p.label],
                }
                for p in preds
            },
            "unbuilt": unbuilt,
            "preference": pref.model_dump(),
            "preference_source": source,
            "budget": budget.model_dump(),
            "scales": self.router.file.scales.model_dump(),
            "route_ms": route_ms,
            "router_sha256": self.router.sha256,
        }
        return Context(
            text=ctx.text,
            evidence_ids=ctx.evidence_ids,
            meta={**ctx.meta, "auto": routed, "route": {"configuration": decision.label}},
        )


__all__ = ["PROMPT_VERSION", "Auto"]

"""The strategy interface: f_mem(q, memory) -> context m_q (MemoryCPT Eq. 1).

A strategy sees the query, the store (through :class:`MemoryEnv`) and the caller's preference
(resolved against its config's by :func:`resolve_preference`) and budget, and returns a :class:`~memfrontier.core.types.Context`. The answerer then reads it.
Offline construction (episodes, graphs...) happens in ``build``, recorded under stage
``construction``; ``context`` runs under stage ``query``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

from pydantic import BaseModel, field_validator, model_validator

from ..core.ledger import count_event
from ..core.pricebook import PriceBook
from ..core.text import clean_text
from ..core.types import Budget, Context, Preference, PreferenceSpec, Scope, missing_scope_message
from ..llm.base import ChatClient
from ..llm.metered import MeteredLLM
from ..store.base import MemoryStore
from .config import BudgetedConfig, StrategyConfig

#: ``progress(done, total, unit)``: an offline construction's progress, called once before the
#: first step (``done`` 0) and after each step (``done`` of ``total`` steps of ``unit``, e.g.
#: ``"sessions"``, ``"windows"``; steps already built count as done). Strategies whose
#: construction has no steps never call it. It may raise to stop the build (the runner does when the
#: build is bound to be refused for its fallbacks): the exception propagates out of ``build``
#: after the steps finished so far were kept, and no step runs on in the background.
BuildProgress = Callable[[int, int, str], None]


class Query(BaseModel):
    """One question as a strategy sees it. ``gold_evidence_ids`` (None when unknown) is read only
    by the ``oracle`` anchor; every other strategy must ignore it.

    ``scope`` names at least one of user_id / agent_id / run_id, so every strategy's corpus, bank
    and graph reads stay inside one tenant; an empty scope (every tenant's records) needs
    ``all_scopes=True``. Raises ValueError otherwise."""

    text: str
    scope: Scope
    question_date: str | None = None
    gold_evidence_ids: list[str] | None = None
    all_scopes: bool = False

    @model_validator(mode="after")
    def _scoped(self) -> "Query":
        empty = self.scope.user_id is None and self.scope.agent_id is None and self.scope.run_id is None
        if empty and not self.all_scopes:
            raise ValueError(missing_scope_message("a query", "every tenant's records only with all_scopes=True"))
        if self.all_scopes and not empty:
            raise ValueError("all_scopes=True reads every scope; do not combine it with a scope id")
        return self

    @field_validator("text")
    @classmethod
    def _valid_unicode(cls, v: str) -> str:  # lone surrogates -> U+FFFD before any tokenizer sees them
        return clean_text(v)


#: Roles whose default model is the answer model (the rest default to the memory-side model).
ANSWER_SIDE_ROLES = frozenset({"answerer", "judge", "dump"})


@dataclass
class MemoryEnv:
    """What a strategy may use: the store, the memory-side model, the answer model (for token
    counting and context limits) and the run's pricing rules, from which every other model of the
    run is made (:meth:`model`).

    ``prices`` / ``allow_unpriced`` / ``price_as`` default to ``llm``'s (so an env built from two
    metered clients prices like them).
    """

    store: MemoryStore
    llm: MeteredLLM
    answer_llm: MeteredLLM
    prices: PriceBook | None = None
    allow_unpriced: bool | None = None
    price_as: str | None = None
    _models: dict = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.llm is None:  # an env without models (retrieval-only use)
            return
        if self.prices is None:
            self.prices = self.llm.prices
        if self.allow_unpriced is None:
            self.allow_unpriced = self.llm.allow_unpriced
        if self.price_as is None:
            self.price_as = self.llm.price_as

    def model(
        self,
        spec: str | ChatClient | MeteredLLM | None,
        role: str,
        adapter: str | None = None,
        *,
        stands_for: str | None = None,
        base_url: str | None = None,
        **client_kw,
    ) -> MeteredLLM:
        """The metered client of ``role`` on ``spec``, priced by the run's rules. The one way a
        priced model is made.

        Args:
            spec: ``None`` (the env's answer model for the roles in :data:`ANSWER_SIDE_ROLES`, else
                its memory-side model), a :func:`~memfrontier.llm.make_llm` spec (``"local"``,
                ``"openai:MODEL"``, ``"hf:PATH"``), a ChatClient, or a MeteredLLM (returned as is:
                its maker chose its pricing).
            role: the role the client serves (``judge``, ``planner``, ``budgetmem.high``...).
            adapter: a LoRA adapter directory for ``hf`` specs.
            stands_for: the price-book model this client stands in for (a MemPilot pool route).
            base_url / client_kw: for :func:`~memfrontier.llm.make_llm` (``base_url`` is ignored
                by the local backends).

        Pricing, first match wins: the run's ``price_as`` (every call of the run priced as that
        model); ``stands_for``; a LoRA adapter's base model when the book has it (an adapter costs
        what its base costs per token); the client's own model id. Unknown to the book: raises
        :class:`~memfrontier.core.pricebook.UnpricedModelError` unless the run allows unpriced
        calls (then recorded ``unpriced``, never $0). Clients are cached per (spec, adapter,
        stands_for, base_url, options), so a spec's model is loaded once per env.
        """
        if isinstance(spec, MeteredLLM):
            return spec
        if spec is None:
            base = self.answer_llm if role in ANSWER_SIDE_ROLES else self.llm
            if stands_for is None:
                return base
            spec = base.client
        key = (
            spec if isinstance(spec, str) else id(spec),
            adapter,
            stands_for,
            base_url,
            tuple(sorted((k, repr(v)) for k, v in client_kw.items())),
        )
        with self._lock:
            if key in self._models:
                return self._models[key]
        client = spec
        if isinstance(spec, str):
            from ..llm import make_llm, served_base_url

            s = spec.strip()
            kw = dict(client_kw)
            if adapter:
                kw["adapter"] = adapter
            if (url := served_base_url(s, base_url)) is not None:
                kw["base_url"] = url
            client = make_llm(s, **kw)
        price_as = self.price_as or stands_for
        base_id = client.model_id.split("+", 1)[0]
        if price_as is None and adapter and base_id != client.model_id and self.prices.resolve(base_id):
            price_as = base_id
        metered = MeteredLLM(client, self.prices, allow_unpriced=bool(self.allow_unpriced), price_as=price_as)
        with self._lock:
            return self._models.setdefault(key, metered)


@runtime_checkable
class Strategy(Protocol):
    """What the runner, the API and ``auto`` read of a strategy. A strategy is built from its
    config: ``Cls(config, *, runtime objects)`` (:func:`~memfrontier.strategies.get_strategy` by
    name), and reads its options from ``self.config`` only."""

    name: str
    prompt_version: str
    #: names of the search recipes (:mod:`memfrontier.retrieve.recipes`) the strategy runs; ``()``
    #: for a strategy that searches nothing. Written into ``summary.json`` provenance.
    recipes: tuple[str, ...]
    #: the pydantic class of its options (``memfrontier config NAME`` lists its fields)
    config_class: type[StrategyConfig]
    #: the options it was built with (recorded in ``summary.json`` with its ``config_hash``)
    config: StrategyConfig

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """Offline, query-agnostic construction for ``scope`` (idempotent). No-op for raw views.
        ``progress`` (:data:`BuildProgress`) follows a construction made of steps."""
        ...

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """Whether the offline view of ``scope`` exists (True for strategies over raw records)."""
        ...

    def construction_usage(self, env: MemoryEnv, scope: Scope) -> dict:
        """What building ``scope``'s view cost over every run that built part of it, as a usage
        record (:func:`~memfrontier.core.ledger.sum_usage_records`); ``{}`` when the view keeps no
        record of it (or there is nothing to build)."""
        ...

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        """m_q for ``query``. ``preference``: the caller's (None: the caller names none; see
        :func:`resolve_preference`); ``budget``: hard caps the strategy keeps to."""
        ...


class StrategyBase:
    """The common part of the strategies: construction from the config and the defaults of a
    strategy over raw records (nothing to build, always built, no construction usage).

    ``config`` None means the config class's defaults; a config of another class raises
    TypeError. Subclasses set ``name``, ``prompt_version``, ``recipes`` and ``config_class``, and
    ``meta_model`` when their context carries a report of its own (``Context.meta`` is then that
    model's JSON dump; the run reports read it through the model, never by the strategy's name)."""

    config_class: type[StrategyConfig]
    meta_model: type[BaseModel] | None = None

    def __init__(self, config: StrategyConfig | None = None):
        if config is None:
            config = self.config_class()
        elif not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}")
        self.config = config

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        return None

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        return True

    @property
    def view_name(self) -> str:
        """The strategy's built view as messages name it ("the ... of this scope was never built")."""
        return f"{self.name} memory view"

    def construction_usage(self, env: MemoryEnv, scope: Scope) -> dict:
        return {}


def effective_budget(config: StrategyConfig, caller: Budget) -> Budget:
    """The hard caps a question runs under: ``caller``'s budget made stricter, cap by cap, by the
    configuration's own (:class:`~memfrontier.strategies.config.BudgetedConfig`: ``auto``,
    ``mempilot``; other configurations have none). The facade computes it once per question and
    hands it to the strategy's ``context`` and to the answer call."""
    return caller.stricter(config.budget) if isinstance(config, BudgetedConfig) else caller


def resolve_preference(configured: PreferenceSpec | None, caller: Preference | None) -> tuple[Preference, str]:
    """The preference a strategy runs under, and where it came from (``"config"``, ``"caller"``
    or ``"default"``). The one precedence rule of every strategy that reads a preference
    (``mempilot``, ``auto``):

    1. the strategy's config names one (``configured``): that one. A configuration's preference is
       part of what the configuration is (its options, its ``config_hash``, the frontier point it
       was measured as, the predictions a router holds for it), so a caller's preference does not
       change it; when the caller named a different one, the event
       ``preference.config_over_caller`` is counted in the current ledger, so it is never silent.
    2. else the caller's (``caller``, e.g. ``ask(preference=...)``, or the preference ``auto``
       decided under, handed to the member it chose);
    3. else ``perf`` (:meth:`Preference.preset`), quality only.

    Raises ValueError for an unknown preset name.
    """
    if configured is not None:
        pref = Preference.of(configured)
        if caller is not None and caller != pref:
            count_event("preference.config_over_caller")
        return pref, "config"
    if caller is not None:
        return caller, "caller"
    return Preference.preset("perf"), "default"


class ViewNotBuiltError(RuntimeError):
    """The strategy reads a view (episodes, compressed bank, graph index) that was never built for
    the scope: answering would read nothing. Build it first (``memfrontier ask --build`` or
    ``memfrontier eval``)."""


def view_built(strategy, env: MemoryEnv, scope: Scope) -> bool:
    """Whether ``strategy``'s offline view exists for ``scope`` (True for strategies over raw
    records, which have nothing to build)."""
    return bool(strategy.is_built(env, scope))

"""The ``Memory`` facade (mem0-like): open a store, add history, search it, ask questions.

>>> from memfrontier import Memory
>>> with Memory.open("./mem") as m:                                    # doctest: +SKIP
...     m.add([{"role": "user", "content": "I moved to Lisbon in May."}], user_id="ana")
...     ans = m.ask("Where does Ana live?", user_id="ana", strategy="rag")
...     ans.text, ans.usage.query.usd

Sync facade over the async core (:class:`AsyncMemory`); use the async class inside a running loop.
One :class:`Memory` may be shared by many threads (as an HTTP client is).

Scopes are a security boundary. Every ``search`` / ``ask`` / ``delete`` / ``delete_all`` names at
least one of ``user_id``, ``agent_id``, ``run_id`` (as in mem0), else ``ValueError``; searching or
asking over every tenant's records is a separate, explicit opt-in: ``all_scopes=True``. Record ids
are unique per scope: ``delete(record_id, user_id=...)`` can only reach the caller's own record.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from .answerer import Answerer
from .core.errors import EmptyScopeError, empty_scope_message, explain_validation
from .core.fallbacks import DEFAULT_THRESHOLD, FallbackError, exceeded_message, fallback_report
from .core.ledger import USAGE_FIELDS, BudgetExceededError, Ledger, StageUsage, Usage, use_ledger
from .core.messages import messages_to_records
from .core.pricebook import PriceBook
from .core.text import check_id, clean_text, require_non_blank
from .core.threads import run_cpu
from .core.timeutil import canonical_timestamp, utc_now
from .core.types import Budget, Hit, Preference, Record, Scope
from .llm import default_llm, make_llm
from .llm.base import ChatClient
from .llm.metered import MeteredLLM
from .retrieve.fold import FOLD_THRESHOLD
from .retrieve.hybrid import hybrid_search
from .retrieve.recipes import HYBRID_RRF
from .store.base import AddResult, MemoryStore
from .strategies import (
    BuildProgress,
    MemoryEnv,
    Query,
    Strategy,
    StrategyConfig,
    ViewNotBuiltError,
    effective_budget,
    get_strategy,
    strategy_config,
    view_built,
)

#: Strategies named by a call are built once per configuration and kept, the latest this many (a
#: service's tenants send free-form options): their views' in-memory indexes and loaded files then
#: persist across calls instead of being rebuilt by each one.
STRATEGY_CACHE_SIZE = 16


class BuildReport(BaseModel):
    """What building a strategy's view of a scope did: its construction ``usage`` (the model calls
    of this build: calls, tokens, USD, latency proxy, their wall seconds), ``wall_s`` (the build's
    own seconds, embedding included) and its ``fallbacks``: the error and
    fallback shares per role of the view's construction
    (:func:`~memfrontier.core.fallbacks.fallback_report`; over every build of the view when the
    view records its construction, else this build's)."""

    strategy: str  # as Answer.strategy
    usage: StageUsage
    fallbacks: dict
    wall_s: float = 0.0


class Answer(BaseModel):
    """An answer with the context's evidence record ids and its usage by stage
    (tokens, USD, latency proxy seconds, wall seconds). ``strategy`` is the name asked for (a
    named configuration's own, e.g. ``rag-turns-rr``), or the strategy object's ``name``."""

    text: str
    evidence_ids: list[str] = Field(default_factory=list)
    context: str = ""
    strategy: str
    usage: Usage
    wall_s: float
    meta: dict = Field(default_factory=dict)
    build: BuildReport | None = None  # the view's build, when ``ask(build=True)`` built it first
    #: when the question was asked (ISO, UTC): the caller's ``question_date``, or the time ``ask`` ran
    #: when none was given; None for an undated question (:meth:`AsyncMemory.answer` without one)
    question_date: str | None = None


#: What a refused build tells its caller (Python, CLI, REST or MCP) to do: there is no per-call
#: override, as ``eval --allow-fallbacks`` is for a run.
BUILD_ADVICE = (
    "What was built is kept; build it with a stronger model, or open the memory with a higher "
    "fallback_threshold to accept it."
)


def _asked_name(strategy: str | Strategy) -> str:
    """The name an answer or build report carries: the one asked for (a named configuration's own),
    or a strategy object's ``name``."""
    return strategy if isinstance(strategy, str) else strategy.name


def unbuilt_view_message(view: str) -> str:
    """The one message of a question refused because ``view`` (a strategy's ``view_name``, e.g. "automem
    memory view") of the scope was never built."""
    return (
        f"the {view} of this scope was never built, so the answer would come from no "
        f'evidence; ask again with build=True (REST "build": true, MCP build: true, CLI --build) to '
        f"build it first"
    )


def _scope(user_id, agent_id, run_id) -> Scope:
    """The scope of the ids; a ValueError naming the id that is not one (empty or blank, which no
    stored record may have; too long...)."""
    for name, value in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
        if isinstance(value, str):
            require_non_blank(value, name)
    try:
        return Scope(user_id=user_id, agent_id=agent_id, run_id=run_id)
    except ValidationError as e:
        raise ValueError(explain_validation("the scope", e)) from None


def ambiguous_record_message(what: str, record_id: str, n: int) -> str:
    """The refusal of a ``get`` or ``delete`` whose id ``n`` records hold in scopes inside the one
    given (ids are unique per scope; ``None`` scope fields match any): it names no scope, so a
    service's tenant prefixes never show."""
    return (
        f"{what}: record id {record_id!r} is held by {n} records in scopes inside this one (the same "
        "ids under other agent_id or run_id values): give the record's agent_id and run_id as it was added"
    )


def _text_asked(name: str, text) -> str:
    """``text`` (a question or a query) cleaned as stored text is (:func:`~memfrontier.core.text.clean_text`);
    a ValueError naming ``name`` when it is not a string or holds nothing to look for."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string, got {type(text).__name__}")
    text = clean_text(text)
    if not text.strip():
        raise ValueError(f"{name} is empty: there is nothing to look for")
    return text


def _positive_int(name: str, value) -> int:
    """``value`` when it is an int >= 1 (not a bool); else ValueError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def scope_for_read(what: str, user_id, agent_id, run_id, all_scopes: bool) -> Scope:
    """The scope a read (``what``: "search", "ask") runs in: at least one id, or ``all_scopes=True``
    and no id. Raises ValueError otherwise (the message names the missing parameters)."""
    scope = _scope(user_id, agent_id, run_id)
    if all_scopes:
        if scope != Scope():
            raise ValueError(
                f"{what}: all_scopes=True reads every scope; do not combine it with user_id/agent_id/run_id"
            )
        return scope
    if scope == Scope():
        raise ValueError(
            f"{what} needs a scope: give user_id, agent_id or run_id (reading every tenant's "
            f"records is a separate opt-in: all_scopes=True)"
        )
    return scope


def scope_for_add(user_id, agent_id, run_id) -> Scope:
    """The scope records are added under (no id given: records that carry their own). Raises
    ValueError as :func:`_scope`."""
    return _scope(user_id, agent_id, run_id)


def scope_for_write(what: str, user_id, agent_id, run_id) -> Scope:
    """The scope of a delete or a view build: at least one id. Raises ValueError otherwise."""
    scope = _scope(user_id, agent_id, run_id)
    if scope == Scope():
        raise ValueError(f"{what} needs the scope of the records: give user_id, agent_id or run_id")
    return scope


_BUILD_PROGRESS: contextvars.ContextVar[BuildProgress | None] = contextvars.ContextVar("build_progress", default=None)


@contextmanager
def build_progress(callback: BuildProgress | None) -> Iterator[None]:
    """Within this block (this thread or task and what it starts), every build the facade runs
    (:meth:`AsyncMemory.build`, ``ask(build=True)``) reports ``callback(done, total, unit)`` after
    each step of a construction made of steps. Progress is a concern of the caller's display,
    not an argument of the memory's methods, so :class:`Memory`, :class:`AsyncMemory` and the
    REST clients keep the same signatures."""
    token = _BUILD_PROGRESS.set(callback)
    try:
        yield
    finally:
        _BUILD_PROGRESS.reset(token)


class AsyncMemory:
    """The async core. Construct with :meth:`open`.

    Its verbs (``add``, ``search``, ``ask``, ``build``, ``get``, ``delete``, ``delete_all``,
    ``usage``) are mirrored exactly by :class:`Memory` and the service's clients. Rules it owns: a
    question is refused on a scope with no records (:class:`~memfrontier.core.errors.EmptyScopeError`)
    and on a strategy view never built for the scope (:class:`~memfrontier.strategies.ViewNotBuiltError`)
    unless ``build=True``; a build whose construction's error or fallback share of some role is
    above ``fallback_threshold`` is refused (:class:`~memfrontier.core.fallbacks.FallbackError`,
    as ``eval`` refuses a run). :meth:`construct` and :meth:`answer` are the unchecked steps under
    them, for in-process engines (``eval`` gates its runs itself).
    """

    def __init__(
        self,
        store: MemoryStore,
        llm: MeteredLLM,
        answer_llm: MeteredLLM,
        *,
        prices: PriceBook | None = None,
        allow_unpriced: bool | None = None,
        price_as: str | None = None,
        fallback_threshold: float = DEFAULT_THRESHOLD,
    ):
        if not 0.0 <= fallback_threshold <= 1.0:
            raise ValueError(f"fallback_threshold must be in [0, 1], not {fallback_threshold}")
        self.store = store
        self.env = MemoryEnv(
            store=store, llm=llm, answer_llm=answer_llm, prices=prices, allow_unpriced=allow_unpriced, price_as=price_as
        )
        self.answerer = Answerer(answer_llm)
        self.fallback_threshold = fallback_threshold
        self._totals: dict[str, dict[str, float]] = {}
        self._strategies: OrderedDict[str, Strategy] = OrderedDict()  # config hash -> strategy, latest last
        self._strategies_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        llm: str | ChatClient | None = None,
        answer_llm: str | ChatClient | None = None,
        base_url: str | None = None,
        price_book: str | Path | PriceBook | None = None,
        allow_unpriced: bool = False,
        price_as: str | None = None,
        embedder=None,
        reembed: bool = False,
        view_dir: str | Path | None = None,
        fallback_threshold: float = DEFAULT_THRESHOLD,
    ) -> "AsyncMemory":
        """Open (or create) the store at ``path``: a directory (SQLite) or a ``postgres://`` /
        ``postgresql://`` URL (PostgreSQL + pgvector, see :func:`~memfrontier.store.open.open_store`).

        ``llm`` is a :func:`~memfrontier.llm.make_llm` spec (``"local:qwen2.5-1.5b"``, the embedded
        Qwen2.5-Coder-1.5B-Instruct; ``"local"``, the packaged Gemma 3 270M; ``"openai:MODEL"`` with
        ``base_url``) or a ChatClient; None = :func:`~memfrontier.llm.default_llm` (``$MEMFRONTIER_LLM``
        or :data:`~memfrontier.llm.DEFAULT_LLM`); ``answer_llm`` defaults to the same model. Raises
        :class:`~memfrontier.llm.local_models.ModelNotInstalledError` (saying how to install it)
        for an embedded model that is not installed. Raises UnpricedModelError for a
        model missing from the price book unless ``allow_unpriced``; EmbeddingMismatchError if the
        store was built with another embedding model (pass ``reembed=True`` to rebuild vectors).
        ``price_as`` prices every call as that price-book model (see :class:`MeteredLLM`).
        ``view_dir``: a PostgreSQL store's local folder for view files (banks, graph index).
        ``fallback_threshold``: the share of a role's construction calls that may fail or fall back
        before a build is refused (as ``eval --fallback-threshold``).
        """
        from .embed.minilm import MiniLMEmbedder
        from .store.open import open_store

        prices = price_book if isinstance(price_book, PriceBook) else PriceBook.load(price_book)
        if llm is None:
            llm = default_llm()
        mem_client = make_llm(llm, base_url=base_url) if isinstance(llm, str) else llm
        if answer_llm is None:
            ans_client = mem_client
        else:
            ans_client = make_llm(answer_llm, base_url=base_url) if isinstance(answer_llm, str) else answer_llm
        store = open_store(path, embedder or MiniLMEmbedder(), reembed=reembed, view_dir=view_dir)
        return cls(
            store,
            MeteredLLM(mem_client, prices, allow_unpriced=allow_unpriced, price_as=price_as),
            MeteredLLM(ans_client, prices, allow_unpriced=allow_unpriced, price_as=price_as),
            prices=prices,
            allow_unpriced=allow_unpriced,
            price_as=price_as,
            fallback_threshold=fallback_threshold,
        )

    async def add(
        self,
        messages,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        session_id: str = "default",
        timestamp: str | None = None,
    ) -> AddResult:
        """Store ``messages`` under the scope. Record ids are unique per scope: the same id in
        another scope is another record; a message whose id is already stored in this scope with
        the same content is skipped (re-adding adds nothing), with other content it raises
        :class:`~memfrontier.store.base.RecordConflictError` (a ValueError) and nothing is written.
        Raises ValueError when a record would have no scope id."""
        scope = scope_for_add(user_id, agent_id, run_id)
        records = messages_to_records(messages, scope=scope, session_id=session_id, timestamp=timestamp)
        if any(r.scope == Scope() for r in records):  # it could never be searched nor deleted by its owner
            raise ValueError("add needs a scope: give user_id, agent_id or run_id (or Records that carry one)")
        return await run_cpu(self.store.add, records)

    async def warm_answerer(self) -> None:
        """Ready the answering model's client before the first question (see its ``warm``; a client
        without one, such as the embedded model, loads on its first call)."""
        warm = getattr(getattr(self.answerer.llm, "client", None), "warm", None)
        if warm is not None:
            await warm()

    async def search(
        self, query: str, *, user_id=None, agent_id=None, run_id=None, k: int = 10, all_scopes: bool = False
    ) -> list[Hit]:
        """Top-``k`` chunks of the scope by the :data:`~memfrontier.retrieve.recipes.HYBRID_RRF` recipe
        (dense + BM25, RRF k=60), near-duplicates folded (:mod:`memfrontier.retrieve.fold`): ``k``
        distinct chunks, each the latest of its copies, the copies' ids in ``Hit.folded``. Raises
        ValueError for a ``k`` that is not an integer >= 1 (``2.5``, ``"2"``, ``True``) and without a
        scope id unless ``all_scopes=True`` (every tenant's records)."""
        k = _positive_int("k", k)
        query = _text_asked("query", query)  # valid Unicode in NFC, as stored text is (core.text)
        scope = scope_for_read("search", user_id, agent_id, run_id, all_scopes)
        return await run_cpu(hybrid_search, self.store, query, scope, HYBRID_RRF, k, fold=FOLD_THRESHOLD)

    async def construct(
        self, strategy: Strategy, scope: Scope, ledger: Ledger | None = None, progress: BuildProgress | None = None
    ) -> Ledger:
        """Run a strategy's offline construction for ``scope`` under stage ``construction``, its
        calls recorded in ``ledger`` (a new one when None; returned); ``progress(done, total, unit)``
        after each step of a construction made of steps (:data:`~memfrontier.strategies.base.BuildProgress`;
        default: the one :func:`build_progress` set for this context).
        Unchecked: no fallback gate (see :meth:`build`). Raises ValueError for a scope without any id
        (a view over every tenant's records)."""
        scope_for_write("build", scope.user_id, scope.agent_id, scope.run_id)
        ledger = ledger if ledger is not None else Ledger()
        with use_ledger(ledger, "construction"):
            await strategy.build(self.env, scope, progress if progress is not None else _BUILD_PROGRESS.get())
        return ledger

    async def build(
        self,
        strategy: str | Strategy = "rag",
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy_options: StrategyConfig | dict | None = None,
    ) -> BuildReport:
        """Build ``strategy``'s memory view of the scope (resuming what earlier builds left) and
        report its construction usage and fallback shares (:class:`BuildReport`). Raises
        EmptyScopeError for a scope with no records, FallbackError (``report`` = the shares) when
        some role's error or fallback share is above ``fallback_threshold`` (the view built so far
        is kept), ValueError without a scope id or for a rejected option."""
        scope = scope_for_write("build", user_id, agent_id, run_id)
        strat = await self._strategy(strategy, strategy_options)
        await self._require_records(scope)
        ledger = Ledger()
        try:
            return await self._gated_build(strat, scope, ledger, name=_asked_name(strategy))
        finally:
            self._add_totals(ledger.usage())

    async def _gated_build(
        self, strat: Strategy, scope: Scope, ledger: Ledger, progress: BuildProgress | None = None, *, name: str
    ) -> BuildReport:
        """:meth:`construct`, then the fallback gate over the view's construction; ``name``: the
        strategy as the report names it (:func:`_asked_name`)."""
        t0 = time.perf_counter()
        await self.construct(strat, scope, ledger, progress)
        wall_s = time.perf_counter() - t0
        entry = {
            "calls_by_role": {r: st.calls for r, st in ledger.usage().by_role.items() if st.calls},
            "events": dict(ledger.events),
            "fallbacks": [f.model_dump() for f in ledger.fallbacks],
            "call_errors": [{"role": c.role, "error": c.error} for c in ledger.calls if c.error][:5],
        }
        report = await self._gate(strat, scope, entry)
        if report["exceeded"]:
            raise FallbackError(exceeded_message(report, BUILD_ADVICE), None, report=report, usage=ledger.usage())
        return BuildReport(strategy=name, usage=ledger.usage().construction, fallbacks=report, wall_s=wall_s)

    async def _gate(self, strat: Strategy, scope: Scope, entry: dict | None = None) -> dict:
        """The fallback report of ``strat``'s view of ``scope``: the construction record the view
        keeps over every build (MemoryCPT's sessions, AutoMEM's windows) when it keeps one, else
        ``entry`` (this build's counts; None: nothing to judge)."""
        recorded = await asyncio.to_thread(strat.construction_usage, self.env, scope)
        if recorded.get("calls_by_role"):  # the view keeps its construction's record over every build
            entry = {
                **(entry or {}),
                **{k: recorded[k] for k in ("calls_by_role", "events", "fallbacks") if k in recorded},
            }
        return fallback_report([], self.fallback_threshold, construction=[entry] if entry else [])

    async def _require_records(self, scope: Scope) -> None:
        if (await asyncio.to_thread(self.store.count, scope))["records"] == 0:
            raise EmptyScopeError(empty_scope_message())

    def strategy(self, strategy: str | Strategy, options: StrategyConfig | dict | None = None) -> Strategy:
        """The strategy a call runs: one given as an object is used as it is; one given by name is
        built from its config (:func:`~memfrontier.strategies.strategy_config`) once per effective
        configuration (its ``config_hash``) and kept, the latest :data:`STRATEGY_CACHE_SIZE`, so
        every ``ask``/``build`` naming it (Python, CLI, REST, MCP) shares its views' in-memory
        indexes instead of reopening and re-reading them per call. A file an option names (a
        router, an adapter) is read when the strategy is built.
        Raises ValueError for an unknown name, a rejected option, options with a strategy object,
        or something that is neither a name nor a strategy (None, a number)."""
        if not isinstance(strategy, str) and not callable(getattr(strategy, "context", None)):
            raise ValueError(f"strategy must be a strategy name or a Strategy, not {type(strategy).__name__}")
        if not isinstance(strategy, str):
            if options is not None:
                raise ValueError("strategy_options apply to a strategy given by name")
            return strategy
        cfg = strategy_config(strategy, options)
        key = cfg.config_hash()
        with self._strategies_lock:
            if (hit := self._strategies.get(key)) is not None:
                self._strategies.move_to_end(key)
                return hit
        built = get_strategy(strategy, cfg)  # may load files: outside the lock
        with self._strategies_lock:
            hit = self._strategies.setdefault(key, built)
            self._strategies.move_to_end(key)
            while len(self._strategies) > STRATEGY_CACHE_SIZE:
                self._strategies.popitem(last=False)
            return hit

    async def _strategy(self, strategy: str | Strategy, options: StrategyConfig | dict | None) -> Strategy:
        """:meth:`strategy` for :meth:`ask` and :meth:`build`: one given by name is built in a worker
        thread (a first build reads files: a router, the reranker), off the event loop that serves
        other requests (REST, MCP)."""
        if not isinstance(strategy, str):
            return self.strategy(strategy, options)
        return await asyncio.to_thread(self.strategy, strategy, options)

    def _add_totals(self, usage: Usage) -> None:
        for stage, u in usage.by_stage.items():
            acc = self._totals.setdefault(stage, dict.fromkeys(USAGE_FIELDS, 0))
            for f in USAGE_FIELDS:
                acc[f] += getattr(u, f)

    async def ask(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str | Strategy = "rag",
        strategy_options: StrategyConfig | dict | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
    ) -> Answer:
        """Answer ``question`` from the scope's memory with ``strategy``; usage covers every call made
        (a build's too, under stage ``construction``).

        ``strategy_options``: the named strategy's config or its options (e.g. ``{"k": 3}``; see
        ``memfrontier config STRATEGY``); ValueError names a rejected option. ``preference``: a
        preset name or a Preference; None names none (a strategy that reads one then runs under its
        config's, else ``perf``: :func:`~memfrontier.strategies.base.resolve_preference`). ``budget``: a
        Budget or a mapping of its caps (:meth:`~memfrontier.core.types.Budget.of`). Refused with
        EmptyScopeError when the scope has no records and ViewNotBuiltError when the strategy's view
        of the scope was never built; ``build=True`` builds it first (gated as :meth:`build`:
        FallbackError above the threshold; the report is ``Answer.build``); a view built earlier whose
        construction record is above the threshold is refused too (FallbackError). Raises ValueError without
        a scope id unless ``all_scopes=True`` (the context may then hold every tenant's records;
        neither rule is checked then, and nothing is built), and for a ``question_date`` that is not a
        complete date in years 1-9999 (UTC).

        ``question_date``: when the question is asked (the strategies and the answer prompt read it,
        so "how long ago" and "what is it now" can be answered); None means now, and the time used
        is recorded in ``Answer.question_date``.
        """
        question = _text_asked("question", question)
        scope = scope_for_read("ask", user_id, agent_id, run_id, all_scopes)
        # a date that is not one (or not one in years 1-9999) is named now; none given: asked now
        question_date = canonical_timestamp(
            question_date if question_date is not None else utc_now(), what="question_date"
        )
        strat = await self._strategy(strategy, strategy_options)
        # bad arguments are named before the scope is read
        preference = Preference.of(preference)
        budget = Budget.of(budget)
        ledger = Ledger()
        report = None
        try:
            if not all_scopes:
                await self._require_records(scope)
                if not await asyncio.to_thread(view_built, strat, self.env, scope):
                    if not build:
                        raise ViewNotBuiltError(
                            unbuilt_view_message(getattr(strat, "view_name", f"{strat.name} memory view"))
                        )
                    report = await self._gated_build(strat, scope, ledger, name=_asked_name(strategy))
                elif (kept := await self._gate(strat, scope))["exceeded"]:  # a view built earlier, refused then
                    raise FallbackError(exceeded_message(kept, BUILD_ADVICE), None, report=kept, usage=ledger.usage())
            ans = await self.answer(
                question,
                scope,
                strat,
                preference=preference,
                budget=budget,
                question_date=question_date,
                all_scopes=all_scopes,
                ledger=ledger,
            )
        finally:
            self._add_totals(ledger.usage())
        return ans.model_copy(update={"build": report, "strategy": _asked_name(strategy)})

    async def answer(
        self,
        question: str,
        scope: Scope,
        strategy: Strategy,
        *,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        gold_evidence_ids: list[str] | None = None,
        all_scopes: bool = False,
        ledger: Ledger | None = None,
    ) -> Answer:
        """The unchecked answer step of :meth:`ask`: ``strategy``'s context for ``question`` in
        ``scope`` and the answerer's reply, every call recorded in ``ledger`` (a new one when None).
        ``gold_evidence_ids`` is only read by the ``oracle`` strategy. The question runs under
        ``budget`` made stricter by the configuration's own caps
        (:func:`~memfrontier.strategies.base.effective_budget`), in ``context`` and the answer call."""
        pref = Preference.of(preference)  # None: the caller names none (strategies.base.resolve_preference)
        budget = effective_budget(strategy.config, Budget.of(budget))
        ledger = ledger if ledger is not None else Ledger()
        query = Query(
            text=question,
            scope=scope,
            question_date=question_date,
            gold_evidence_ids=gold_evidence_ids,
            all_scopes=all_scopes,
        )
        t0 = time.perf_counter()
        with use_ledger(ledger, "query"):
            try:
                ctx = await strategy.context(query, self.env, pref, budget)
                text = await self.answerer.answer(question, ctx, budget, question_date)
            except BudgetExceededError as exc:  # refused: what was spent before, and the refusal's event
                exc.usage = ledger.usage()
                raise
        return Answer(
            text=text,
            evidence_ids=ctx.evidence_ids,
            context=ctx.text,
            strategy=strategy.name,
            usage=ledger.usage(),
            wall_s=time.perf_counter() - t0,
            meta=ctx.meta,
            question_date=question_date,
        )

    async def get(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> Record | None:
        """The caller's record ``record_id`` (ids are unique per scope, so the scope is required:
        ValueError without one); None when the scope has no such record. An id that several records
        hold in scopes inside the one given (the same user's records under other agent or run ids)
        is refused with ValueError (:func:`ambiguous_record_message`): name the record's whole scope."""
        return await self._one_record("get", record_id, user_id, agent_id, run_id)

    async def delete(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> bool:
        """Delete the caller's record ``record_id`` (ids are unique per scope, so the scope is
        required: ValueError without one) and everything derived from it in every view (chunks,
        vectors, BM25, bank items, graph index). False when the scope has no such record; an id that
        several records hold inside the scope is refused as :meth:`get` refuses it (nothing deleted)."""
        found = await self._one_record("delete", record_id, user_id, agent_id, run_id)
        if found is None:
            return False
        return await asyncio.to_thread(self.store.delete, found.id, found.scope)

    async def _one_record(self, what: str, record_id: str, user_id, agent_id, run_id) -> Record | None:
        """The one record ``record_id`` of the scope, or None; ValueError for a blank id, a missing
        scope, or an id held by several records in scopes inside it."""
        check_id(record_id, "record id")
        scope = scope_for_write(what, user_id, agent_id, run_id)
        found = await asyncio.to_thread(self.store.get, [record_id], scope)
        if len(found) > 1:
            raise ValueError(ambiguous_record_message(what, record_id, len(found)))
        return found[0] if found else None

    async def delete_all(self, *, user_id=None, agent_id=None, run_id=None) -> int:
        """Delete every record of the scope and everything derived from them in every view; returns
        the records deleted. ValueError without a scope id."""
        scope = scope_for_write("delete_all", user_id, agent_id, run_id)
        return await asyncio.to_thread(self.store.delete_all, scope)

    async def usage(self) -> dict[str, dict[str, float]]:
        """Totals by stage of every ``ask`` and ``build`` of this memory since it was opened:
        ``{stage: {calls, input_tokens, ..., usd, proxy_s, wall_s}}`` (USD in dollars, seconds)."""
        return {stage: dict(v) for stage, v in sorted(self._totals.items())}

    def close(self) -> None:
        self.store.close()


async def _drain() -> None:
    """Wait for every other task of the running loop, then its default executor's threads."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_default_executor()


class Memory:
    """Synchronous facade: the same methods, parameters and defaults as :class:`AsyncMemory`'s verbs
    (see its docstrings).

    Safe to share across threads: every call is submitted to one private event loop that runs in
    a daemon thread (``asyncio.run_coroutine_threadsafe``) and the calling thread waits for its
    result; the store underneath serialises writes. :meth:`close` stops the loop and joins the
    thread. Calling a sync method from inside the facade's own loop raises RuntimeError (use
    :attr:`aio` there).
    """

    def __init__(self, inner: AsyncMemory):
        self._inner = inner
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memfrontier-memory-loop", daemon=True)
        self._thread.start()
        self._closed = False
        self._close_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path, **kwargs) -> "Memory":
        """See :meth:`AsyncMemory.open`."""
        return cls(AsyncMemory.open(path, **kwargs))

    @property
    def aio(self) -> AsyncMemory:
        return self._inner

    def _run(self, coro):
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync Memory method was called from its own event loop; await Memory.aio instead")
        with self._close_lock:  # a call is either submitted before close() drains, or refused
            if self._closed:
                coro.close()
                raise RuntimeError("this Memory is closed")
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    def add(
        self,
        messages,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        session_id: str = "default",
        timestamp: str | None = None,
    ) -> AddResult:
        return self._run(
            self._inner.add(
                messages, user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id, timestamp=timestamp
            )
        )

    def search(
        self, query: str, *, user_id=None, agent_id=None, run_id=None, k: int = 10, all_scopes: bool = False
    ) -> list[Hit]:
        return self._run(
            self._inner.search(query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, all_scopes=all_scopes)
        )

    def ask(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str | Strategy = "rag",
        strategy_options: StrategyConfig | dict | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
    ) -> Answer:
        return self._run(
            self._inner.ask(
                question,
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                strategy=strategy,
                strategy_options=strategy_options,
                preference=preference,
                budget=budget,
                question_date=question_date,
                build=build,
                all_scopes=all_scopes,
            )
        )

    def build(
        self,
        strategy: str | Strategy = "rag",
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy_options: StrategyConfig | dict | None = None,
    ) -> BuildReport:
        return self._run(
            self._inner.build(
                strategy, user_id=user_id, agent_id=agent_id, run_id=run_id, strategy_options=strategy_options
            )
        )

    def get(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> Record | None:
        return self._run(self._inner.get(record_id, user_id=user_id, agent_id=agent_id, run_id=run_id))

    def delete(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> bool:
        return self._run(self._inner.delete(record_id, user_id=user_id, agent_id=agent_id, run_id=run_id))

    def delete_all(self, *, user_id=None, agent_id=None, run_id=None) -> int:
        return self._run(self._inner.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id))

    def usage(self) -> dict[str, dict[str, float]]:
        return self._run(self._inner.usage())

    def close(self) -> None:
        """Finish the calls in flight, stop the loop, join its thread, close the store. Idempotent."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("Memory.close() was called from its own event loop; close it from another thread")
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        asyncio.run_coroutine_threadsafe(_drain(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._inner.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

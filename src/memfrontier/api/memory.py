"""The async core of the facade: :class:`AsyncMemory`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

from ..answerer import Answerer
from ..core.errors import EmptyScopeError, empty_scope_message
from ..core.fallbacks import DEFAULT_THRESHOLD, FallbackError, exceeded_message, fallback_report
from ..core.fit import cut_to_tokens
from ..core.ledger import USAGE_FIELDS, BudgetExceededError, Ledger, Usage, count_event, use_ledger
from ..core.messages import messages_to_records
from ..core.observers import AskRecord, notify_asked, observed
from ..core.pricebook import PriceBook
from ..core.text import check_id
from ..core.threads import run_cpu
from ..core.timeutil import canonical_timestamp, utc_now
from ..core.types import Budget, Context, Hit, Preference, Record, Scope, missing_scope_message
from ..llm import default_llm, make_llm
from ..llm.base import ChatClient
from ..llm.metered import MeteredLLM
from ..retrieve.fold import FOLD_THRESHOLD
from ..retrieve.hybrid import hybrid_search
from ..retrieve.recipes import HYBRID_RRF
from ..store.base import AddResult, MemoryStore
from ..strategies import (
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
from .models import Answer, BuildReport, Recall
from .rules import (
    BUILD_ADVICE,
    ambiguous_record_message,
    asked_name,
    current_build_progress,
    positive_int,
    scope_for_add,
    scope_for_read,
    scope_for_write,
    text_asked,
    unbuilt_view_message,
)

#: Strategies named by a call are built once per configuration and kept, the latest this many (a
#: service's tenants send free-form options): their views' in-memory indexes and loaded files then
#: persist across calls instead of being rebuilt by each one.
STRATEGY_CACHE_SIZE = 16


class AsyncMemory:
    """The async core. Construct with :meth:`open`.

    Its verbs (``add``, ``search``, ``ask``, ``recall``, ``build``, ``get``, ``records``, ``delete``,
    ``delete_all``, ``usage``) are mirrored exactly by :class:`Memory` and the service's clients. Rules it owns: a
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
        from ..embed.minilm import MiniLMEmbedder
        from ..store.open import open_store

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
            raise ValueError(missing_scope_message("add", "or Records that carry one"))
        return await run_cpu(self.store.add, records)

    async def warm_answerer(self) -> None:
        """Ready the answering model's client before the first question (see its ``warm``; a client
        without one, such as the embedded model, loads on its first call)."""
        warm = getattr(getattr(self.answerer.llm, "client", None), "warm", None)
        if warm is not None:
            await warm()

    async def search(
        self,
        query: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        k: int = 10,
        all_scopes: bool = False,
        fold: bool = True,
    ) -> list[Hit]:
        """Top-``k`` chunks of the scope by the :data:`~memfrontier.retrieve.recipes.HYBRID_RRF` recipe
        (dense + BM25, RRF k=60), near-duplicates folded (:mod:`memfrontier.retrieve.fold`): ``k``
        distinct chunks, each the latest of its copies, the copies' ids in ``Hit.folded``
        (``fold=False``: every chunk, copies too, as a key-value store's items are). Raises
        ValueError for a ``k`` that is not an integer >= 1 (``2.5``, ``"2"``, ``True``) and without a
        scope id unless ``all_scopes=True`` (every tenant's records)."""
        k = positive_int("k", k)
        query = text_asked("query", query)  # valid Unicode in NFC, as stored text is (core.text)
        scope = scope_for_read("search", user_id, agent_id, run_id, all_scopes)
        return await run_cpu(
            hybrid_search, self.store, query, scope, HYBRID_RRF, k, fold=FOLD_THRESHOLD if fold else None
        )

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
            await strategy.build(self.env, scope, progress if progress is not None else current_build_progress())
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
            return await self._gated_build(strat, scope, ledger, name=asked_name(strategy))
        finally:
            self._add_totals(ledger.usage())

    async def _gated_build(
        self, strat: Strategy, scope: Scope, ledger: Ledger, progress: BuildProgress | None = None, *, name: str
    ) -> BuildReport:
        """:meth:`construct`, then the fallback gate over the view's construction; ``name``: the
        strategy as the report names it (:func:`asked_name`)."""
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
        question, scope, question_date, strat, preference, budget = await self._asked(
            "ask",
            question,
            user_id,
            agent_id,
            run_id,
            strategy,
            strategy_options,
            preference,
            budget,
            question_date,
            all_scopes,
        )
        ledger = Ledger()
        label, started = asked_name(strategy), time.time()
        try:
            try:
                report = await self._check_asked(strat, scope, ledger, build=build, all_scopes=all_scopes, name=label)
            except BaseException as exc:  # refused before the answer step: the observers see it too
                effective = effective_budget(getattr(strat, "config", None), budget)
                _observe(question, scope, strat, label, effective, ledger, started, None, exc)
                raise
            ans = await self.answer(
                question,
                scope,
                strat,
                preference=preference,
                budget=budget,
                question_date=question_date,
                all_scopes=all_scopes,
                ledger=ledger,
                label=label,
            )
        finally:
            self._add_totals(ledger.usage())
        return ans.model_copy(update={"build": report, "strategy": label})

    async def recall(
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
        max_context_tokens: int | None = None,
    ) -> Recall:
        """What ``strategy`` retrieves for ``question`` (its context m_q), without the answer call:
        the same parameters, rules and refusals as :meth:`ask` (the budget binds the retrieval's
        own model calls; BudgetExceededError carries what was spent). ``max_context_tokens``: the
        context is cut to that many tokens of the answering model's tokenizer, whole lines from the
        top (:func:`~memfrontier.core.fit.fit_lines`; a first line alone too long is cut short),
        counted ``budget.context_truncated``; None keeps it whole. ValueError for a
        ``max_context_tokens`` that is not an integer >= 1. What an agent framework's memory block
        reads (:mod:`memfrontier.integrations`)."""
        room = None if max_context_tokens is None else positive_int("max_context_tokens", max_context_tokens)
        question, scope, question_date, strat, preference, budget = await self._asked(
            "recall",
            question,
            user_id,
            agent_id,
            run_id,
            strategy,
            strategy_options,
            preference,
            budget,
            question_date,
            all_scopes,
        )
        ledger = Ledger()
        t0 = time.perf_counter()
        try:
            report = await self._check_asked(
                strat, scope, ledger, build=build, all_scopes=all_scopes, name=asked_name(strategy)
            )
            query = Query(text=question, scope=scope, question_date=question_date, all_scopes=all_scopes)
            ctx = await self._context(strat, query, preference, effective_budget(strat.config, budget), ledger)
            text, truncated = ctx.text, False
            if room is not None:
                text, truncated = await asyncio.to_thread(cut_to_tokens, text, room, self.count_tokens)
                if truncated:
                    with use_ledger(ledger, "query"):
                        count_event("budget.context_truncated")
        finally:
            self._add_totals(ledger.usage())
        return Recall(
            context=text,
            evidence_ids=ctx.evidence_ids,
            strategy=asked_name(strategy),
            usage=ledger.usage(),
            wall_s=time.perf_counter() - t0,
            truncated=truncated,
            question_date=question_date,
            build=report,
        )

    async def _context(
        self, strategy: Strategy, query: Query, preference: Preference | None, budget: Budget, ledger: Ledger
    ) -> Context:
        """``strategy``'s context for ``query`` under ``budget`` (already made stricter by its
        config's caps), its calls recorded in ``ledger`` at stage ``query`` (the step :meth:`answer`
        and :meth:`recall` share)."""
        with _billed_refusals(ledger):
            return await strategy.context(query, self.env, preference, budget)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the answering model's tokenizer: what ``max_context_tokens`` and
        a budget's ``max_tokens`` count."""
        return self.answerer.llm.count_tokens(text)

    async def _asked(
        self,
        what,
        question,
        user_id,
        agent_id,
        run_id,
        strategy,
        strategy_options,
        preference,
        budget,
        question_date,
        all_scopes,
    ) -> tuple[str, Scope, str, Strategy, Preference | None, Budget]:
        """The arguments of a question (:meth:`ask`, :meth:`recall`) checked and resolved, bad ones
        named before the scope is read: the question's text, its scope, its date (now when None),
        the strategy, the preference and the budget."""
        question = text_asked("question", question)
        scope = scope_for_read(what, user_id, agent_id, run_id, all_scopes)
        # a date that is not one (or not one in years 1-9999) is named now; none given: asked now
        question_date = canonical_timestamp(
            question_date if question_date is not None else utc_now(), what="question_date"
        )
        strat = await self._strategy(strategy, strategy_options)
        return question, scope, question_date, strat, Preference.of(preference), Budget.of(budget)

    async def _check_asked(
        self, strat: Strategy, scope: Scope, ledger: Ledger, *, build: bool, all_scopes: bool, name: str
    ) -> BuildReport | None:
        """The rules before a question is answered (see :meth:`ask`): records in the scope, the
        strategy's view built (or built now, gated, when ``build``; its report is returned) and not
        refused for its fallbacks. Nothing is checked with ``all_scopes``."""
        if all_scopes:
            return None
        await self._require_records(scope)
        if not await asyncio.to_thread(view_built, strat, self.env, scope):
            if not build:
                raise ViewNotBuiltError(unbuilt_view_message(getattr(strat, "view_name", f"{strat.name} memory view")))
            return await self._gated_build(strat, scope, ledger, name=name)
        if (kept := await self._gate(strat, scope))["exceeded"]:  # a view built earlier, refused then
            raise FallbackError(exceeded_message(kept, BUILD_ADVICE), None, report=kept, usage=ledger.usage())
        return None

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
        label: str | None = None,
    ) -> Answer:
        """The unchecked answer step of :meth:`ask`: ``strategy``'s context for ``question`` in
        ``scope`` and the answerer's reply, every call recorded in ``ledger`` (a new one when None).
        ``gold_evidence_ids`` is only read by the ``oracle`` strategy. The question runs under
        ``budget`` made stricter by the configuration's own caps
        (:func:`~memfrontier.strategies.base.effective_budget`), in ``context`` and the answer call.
        ``label``: the name the question's observers are given (the one asked for; default
        ``strategy.name``)."""
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
        t0, started = time.perf_counter(), time.time()
        text = error = None
        try:
            ctx = await self._context(strategy, query, pref, budget, ledger)
            with _billed_refusals(ledger):
                text = await self.answerer.answer(question, ctx, budget, question_date)
        except BaseException as exc:
            error = exc
            raise
        finally:  # the observers (a tracer) see every question, answered or not
            _observe(question, scope, strategy, label, budget, ledger, started, text, error)
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

    async def records(
        self, *, user_id=None, agent_id=None, run_id=None, session_id: str | None = None, limit: int | None = None
    ) -> list[Record]:
        """The scope's records (those of the scopes inside it too: a user's records under any agent
        or run id), oldest first (timestamp, then the order they were added); only session
        ``session_id``'s when given; the latest ``limit`` when given. ValueError without a scope id
        and for a ``limit`` that is not an integer >= 1."""
        scope = scope_for_write("records", user_id, agent_id, run_id)
        limit = None if limit is None else positive_int("limit", limit)
        if session_id is not None:
            check_id(session_id, "session_id")
        found = await asyncio.to_thread(self.store.records, scope, session_id)
        return found if limit is None else found[-limit:]

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


@contextmanager
def _billed_refusals(ledger: Ledger):
    """Run the enclosed calls under ``ledger`` at stage ``query``; a refusal for the budget
    (BudgetExceededError) leaves with what was spent before it and the refusal's event."""
    with use_ledger(ledger, "query"):
        try:
            yield
        except BudgetExceededError as exc:
            exc.usage = ledger.usage()
            raise


def _observe(
    question: str,
    scope: Scope,
    strategy: Strategy,
    label: str | None,
    budget: Budget,
    ledger: Ledger,
    started: float,
    answer: str | None,
    error: BaseException | None,
) -> None:
    """Hand the question to its observers (:mod:`memfrontier.core.observers`), when there are any."""
    if not observed():
        return
    notify_asked(
        AskRecord(
            question=question,
            scope=scope,
            strategy=label or strategy.name,
            config=getattr(strategy, "config", None),
            budget=budget,
            ledger=ledger,
            started_unix_s=started,
            ended_unix_s=time.time(),
            answer=answer,
            error=error,
        )
    )

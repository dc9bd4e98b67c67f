"""``rag``: the top hits of the shared hybrid search (dense + BM25, RRF k=60), read as they are.

Two units (``unit``): the store's ~256-token chunks (recipe
:data:`~memfrontier.retrieve.recipes.HYBRID_RRF`, the default and every paper's baseline), or single
turns (the turn view :mod:`memfrontier.views.turns`, recipe
:data:`~memfrontier.retrieve.recipes.TURNS_RRF`), where each hit may bring its neighbouring turns
of the same session (``neighbours``), a learned reranker may re-order the candidates (``rerank``,
:mod:`memfrontier.retrieve.rerank`) and a token budget (``max_tokens``) replaces the fixed ``k``.
"""

from __future__ import annotations

import functools
import threading
from typing import Literal

from pydantic import Field, model_validator

from ..core.ledger import count_event
from ..core.render import date_label, render_dated
from ..core.threads import run_cpu
from ..core.timeutil import instant_key
from ..core.types import Budget, Context, Preference, Scope, TurnStyle
from ..retrieve.excerpt import excerpt
from ..retrieve.fold import FOLD_THRESHOLD
from ..retrieve.hybrid import hybrid_search
from ..retrieve.recipes import Unit, chunk_recipe
from ..retrieve.rerank import load_reranker
from ..store.bank import BANK_VIEW, BankHit, BankItem, MemoryBank
from ..views.turns import KIND as TURN_KIND
from ..views.turns import turn_view
from .base import BuildProgress, MemoryEnv, Query, StrategyBase
from .config import Bool, Float, Int, StrategyConfig

#: The retrievers, fused by RRF when more than one is named; ``chunk`` (unit=turn): a turn ranked by its chunk.
Retriever = Literal["dense", "bm25", "chunk"]


class RagConfig(StrategyConfig):
    """Options of ``rag`` (the retrieval baseline of every paper's comparison)."""

    strategy = "rag"

    k: Int = Field(
        8, ge=1, description="Units retrieved (top-k after RRF fusion, k_RRF = 60); with max_tokens, the most."
    )
    retrievers: tuple[Retriever, ...] = Field(
        ("dense", "bm25"),
        min_length=1,
        description="Retrievers fused by RRF: dense (MiniLM cosine), bm25 (Okapi); with unit=turn, "
        "('dense', 'bm25', 'chunk') adds each turn's chunk rank (recipe turns_chunks_rrf, RRF k=5).",
    )
    unit: Unit = Field(
        "chunk",
        description="What is searched: chunk (the store's ~256-token chunks) or turn (single turns, the "
        "turn view, built once per scope with the embedder only, then kept in line with the store by each query).",
    )
    neighbours: Int = Field(
        0, ge=0, description="unit=turn: turns before and after each hit, same session, added to the context."
    )
    neighbour_hits: Int | None = Field(
        None,
        ge=1,
        description="unit=turn: only the first this many hits (in rank order) bring their neighbours "
        "(None: every hit).",
    )
    max_tokens: Int | None = Field(
        None,
        ge=1,
        description="unit=turn: context budget in retriever (MiniLM) tokens; hits (with their neighbours) "
        "are taken in rank order while the context stays within it (None: the k hits, no budget).",
    )
    rerank: Bool = Field(
        False,
        description="unit=turn, with max_tokens: re-order the k candidates with the learned turn reranker "
        "before the budget takes them (memfrontier.retrieve.rerank; trained on LoCoMo's and LongMemEval's "
        "training pools; recall in results/retrieval).",
    )
    fold: Float | None = Field(
        FOLD_THRESHOLD,
        ge=0.5,
        le=1.0,
        description="Fold repeated hits before the k are taken: a unit whose words are all among another's and "
        "at least this share of them (one said again, words added, none changed) is one hit with it, shown "
        "as the latest of them (a chunk with how many times it was said), so repeats do not crowd out other "
        "facts nor outrank a later correction (memfrontier.retrieve.fold). None: no folding.",
    )
    excerpt_tokens: Int | None = Field(
        None,
        ge=16,
        description="unit=turn: a turn longer than this many retriever tokens is shown as its excerpt, the run "
        "of its sentences around the one sharing the most terms with the question (memfrontier.retrieve.excerpt), "
        "so one long answer does not take the budget of several turns (None: turns shown whole).",
    )
    turn_style: TurnStyle = Field(
        "said",
        description='unit=turn: how a turn reads in the context: said (Ana said, "text", as indexed) or '
        "colon (Ana: text, fewer tokens, so a budget holds more turns).",
    )

    @model_validator(mode="after")
    def _turn_options(self) -> "RagConfig":
        turn_only = (
            self.neighbours
            or self.neighbour_hits is not None
            or self.max_tokens is not None
            or self.rerank
            or self.excerpt_tokens is not None
        )
        if self.unit == "chunk" and (turn_only or self.turn_style != "said"):
            raise ValueError(
                "neighbours, neighbour_hits, max_tokens, rerank, excerpt_tokens and turn_style apply to unit=turn only"
            )
        if self.rerank and self.max_tokens is None:
            # turns are shown in time order, so without a budget the k candidates all go in whatever their order
            raise ValueError(
                "rerank chooses which candidates a token budget keeps: set max_tokens too "
                "(the frontier's rag-turns-rr: k=64, max_tokens=672, retrievers [dense, bm25, chunk])"
            )
        chunk_recipe(self.retrievers, self.unit)  # a retriever tuple without a recipe: ValueError naming the choices
        return self


class Rag(StrategyBase):
    """The top hits by hybrid search (options: :class:`RagConfig`): chunks in rank order, each with
    its date; or turns grouped by session and day in time order under each day's date."""

    name = "rag"
    prompt_version = "rag-v1"
    config_class = RagConfig

    config: RagConfig

    def __init__(self, config: RagConfig | None = None):
        super().__init__(config)
        self.recipe = chunk_recipe(self.config.retrievers, self.config.unit)
        self._lock = threading.Lock()
        self._counters: dict[str, object] = {}

    def turn_bank(self, env: MemoryEnv) -> MemoryBank:
        """The turn view's bank of ``env.store``, shared with every strategy reading that store
        (:func:`~memfrontier.views.turns.turn_view`)."""
        return turn_view(env.store).bank

    @property
    def recipes(self) -> tuple[str, ...]:
        """Names of the search recipes this strategy runs (provenance); with ``rerank``, the reranker
        as ``turn_reranker:<first 12 hex digits of its file's sha256>``."""
        if self.config.rerank:
            return (self.recipe.name, f"turn_reranker:{(load_reranker().sha256 or '')[:12]}")
        return (self.recipe.name,)

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """unit=turn: the turn view of ``scope`` (embedder only; nothing to build for chunks)."""
        if self.config.unit == "turn":
            await run_cpu(turn_view(env.store).current, env.store, scope)

    @property
    def view_name(self) -> str:
        """unit=turn: the turn view (which rag-turns and rag-turns-rr read); else the base's."""
        return "turn view (rag, unit=turn)" if self.config.unit == "turn" else super().view_name

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """unit=turn: whether the scope's turn view was built (queries then keep it in line with
        the store: :meth:`current_turn_bank`); always True for chunks."""
        return self.config.unit == "chunk" or self.turn_bank(env).count(scope, TURN_KIND) > 0

    def current_turn_bank(self, env: MemoryEnv, scope: Scope) -> MemoryBank:
        """The turn view, first brought in line with ``env.store``'s records of ``scope`` when the
        store was written in that scope since it last was (records added after the build are
        searchable at once, edited or deleted ones gone; only new turns are embedded, no model
        call): :meth:`~memfrontier.views.turns.TurnView.current`, shared by the strategies reading
        the store."""
        return turn_view(env.store).current(env.store, scope)

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        # the search embeds the query and scans the index (CPU-bound): off the event loop
        if self.config.unit == "turn":
            return await run_cpu(self._turn_context, query, env)
        hits = await run_cpu(
            hybrid_search, env.store, query.text, query.scope, self.recipe, k=self.config.k, fold=self.config.fold
        )
        evidence: list[str] = []
        for h in hits:
            evidence.extend(i for i in h.chunk.record_ids if i not in evidence)
        text = render_dated([(h.chunk.timestamp, _said(h.chunk.text, h.folded)) for h in hits], query.question_date)
        meta = {"chunks": [h.chunk.id for h in hits], "folded": sum(len(h.folded) for h in hits)}
        return Context(text=text, evidence_ids=evidence, meta=meta)

    def _counter(self, env: MemoryEnv):
        """The embedder's token count, remembered per text (turns and date lines recur across queries)."""
        key = str(env.store.view_dir(BANK_VIEW))
        with self._lock:
            if key not in self._counters:
                self._counters[key] = functools.lru_cache(maxsize=1 << 16)(env.store.embedder.count_tokens)
            return self._counters[key]

    def _turn_context(self, query: Query, env: MemoryEnv) -> Context:
        bank = self.current_turn_bank(env, query.scope)
        hits = hybrid_search(
            bank, query.text, query.scope, self.recipe, k=self.config.k, store=env.store, fold=self.config.fold
        )
        if self.config.rerank:
            hits = load_reranker().rerank(bank, query.scope, TURN_KIND, query.text, hits, self._counter(env))
        render = self._renderer(env, query.scope, [h.item for h in hits], query.text)
        picked = select_turns(
            hits,
            bank.items(query.scope, TURN_KIND),
            self._counter(env),
            neighbours=self.config.neighbours,
            neighbour_hits=self.config.neighbour_hits,
            max_tokens=self.config.max_tokens,
            render=render,
            asked=query.question_date,
        )
        evidence = [i for it in picked for i in it.source_ids]
        return Context(
            text=render_turns(picked, render, query.question_date),
            evidence_ids=list(dict.fromkeys(evidence)),
            meta={"turns": len(picked), "hits": len(hits), "folded": sum(len(h.folded) for h in hits)},
        )

    def _renderer(self, env: MemoryEnv, scope: Scope, items: list[BankItem], question: str):
        """A turn item's context text in ``turn_style``: the item's own text (said, shown whole), or
        its records re-rendered (colon, or any style with ``excerpt_tokens``: a long record's text
        cut to its :func:`~memfrontier.retrieve.excerpt.excerpt` for ``question``; the records of
        ``items`` read in one store call, any other on first use)."""
        limit = self.config.excerpt_tokens
        if self.config.turn_style == "said" and limit is None:
            return BankItem.render
        style = self.config.turn_style
        recs = {r.id: r for r in env.store.get([i for it in items for i in it.source_ids], scope)}
        count = self._counter(env)

        def shown(r):
            if limit is None:
                return r.render(style)
            return r.model_copy(update={"text": excerpt(r.text, question, limit, count)}).render(style)

        texts: dict[str, str] = {}  # item id -> its text: the budget and the context read it more than once

        def render(it: BankItem) -> str:
            if it.id in texts:
                return texts[it.id]
            missing = [i for i in it.source_ids if i not in recs]
            if missing:
                recs.update((r.id, r) for r in env.store.get(missing, scope))
            texts[it.id] = " ".join(shown(recs[i]) for i in it.source_ids if i in recs) or it.render()
            return texts[it.id]

        return render


def _said(text: str, folded: list[str]) -> str:
    """A chunk's context text, marked with how often it was said when copies were folded into it."""
    return f"[said {len(folded) + 1} times] {text}" if folded else text


def _date_line(ts: str | None, asked: str | None = None) -> str:
    return f"({date_label(ts, asked)})" if ts else "(undated)"


def select_turns(
    hits: list[BankHit],
    items: list[BankItem],
    count_tokens,
    *,
    neighbours: int = 0,
    neighbour_hits: int | None = None,
    max_tokens: int | None = None,
    render=BankItem.render,
    asked: str | None = None,
) -> list[BankItem]:
    """The turns a context shows: each hit in rank order with its ``neighbours`` turns before and
    after it in its session (from ``items``, the scope's turn items; only the first
    ``neighbour_hits`` hits bring them, every hit when None), taken while the rendered
    context (:func:`render_turns` with ``render``, a turn's text) stays within ``max_tokens`` tokens
    by ``count_tokens`` (None: no budget; date lines dated from ``asked``, the question's time, as
    :func:`render_turns` writes them); a hit whose turns would exceed it is skipped and the next one tried (a
    turn longer than the whole budget is counted, event ``rag.turn_over_budget``). A turn is shown
    once. Returns the turns in context order (sessions by time, turns by position)."""
    where = {(it.meta.get("session_id"), it.meta.get("position")): it for it in items}
    chosen: dict[str, BankItem] = {}
    shown: set[tuple] = set()  # (session, day time) of the date lines so far
    used = 0
    for rank, h in enumerate(hits):
        sid, pos = h.item.meta.get("session_id"), h.item.meta.get("position")
        group = [h.item]
        near = neighbours if neighbour_hits is None or rank < neighbour_hits else 0
        if near and isinstance(pos, int):
            group = [where[(sid, p)] for p in range(pos - near, pos + near + 1) if (sid, p) in where]
            if h.item.id not in {g.id for g in group}:
                group.append(h.item)
        new = [g for g in group if g.id not in chosen]
        if not new:
            continue
        cost = sum(count_tokens(render(g)) for g in new)
        days = {(g.meta.get("session_id"), g.timestamp) for g in new} - shown  # the date lines they add
        cost += sum(count_tokens(_date_line(ts, asked)) for _, ts in days)
        if max_tokens is not None and used + cost > max_tokens:
            if cost > max_tokens and len(new) == 1:  # a turn longer than the whole budget: never shown
                count_event("rag.turn_over_budget")
            continue
        used += cost
        shown |= days
        chosen.update((g.id, g) for g in new)
    return sorted(
        chosen.values(),
        key=lambda it: (instant_key(it.timestamp), str(it.meta.get("session_id")), it.meta.get("position", 0)),
    )


def render_turns(turns: list[BankItem], render=BankItem.render, asked: str | None = None) -> str:
    """Turns (in context order) as text: one ``(8 May 2023)`` line per session and day (a turn
    item is dated by its day in the session: :mod:`memfrontier.views.turns`; ``(8 May 2023, 22 days
    ago)`` for a question asked at ``asked``), then its turns (``render``: a turn's text), one a line."""
    out: list[str] = []
    last = object()
    for it in turns:
        key = (it.meta.get("session_id"), it.timestamp)
        if key != last:
            out.append(_date_line(it.timestamp, asked))
            last = key
        out.append(render(it))
    return "\n".join(out)

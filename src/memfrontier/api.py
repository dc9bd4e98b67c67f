"""The ``Memory`` facade (mem0-like): open a store, add history, search it, ask questions.

>>> from memfrontier import Memory
>>> with Memory.open("./mem") as m:                                    # doctest: +SKIP
...     m.add([{"role": "user", "content": "I moved to Lisbon in May."}], user_id="ana")
...     ans = m.ask("Where does Ana live?", user_id="ana", strategy="rag")
...     ans.text, ans.usage.query.usd

Sync facade over the async core (:class:`AsyncMemory`); use the async class inside a running loop.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from pydantic import BaseModel, Field

from .answerer import Answerer
from .core.ledger import Ledger, Usage, use_ledger
from .core.pricebook import PriceBook
from .core.types import Budget, Hit, Preference, Record, Scope, record_id
from .llm import make_llm
from .llm.base import ChatClient
from .llm.metered import MeteredLLM
from .retrieve.hybrid import hybrid_search
from .retrieve.recipes import HYBRID_RRF
from .store.base import AddResult, MemoryStore
from .strategies import MemoryEnv, Query, Strategy, get_strategy


class Answer(BaseModel):
    """An answer with the context's evidence record ids and its usage by stage
    (tokens, USD, latency proxy seconds, wall seconds)."""

    text: str
    evidence_ids: list[str] = Field(default_factory=list)
    context: str = ""
    strategy: str
    usage: Usage
    wall_s: float
    meta: dict = Field(default_factory=dict)


def _scope(user_id, agent_id, run_id) -> Scope:
    return Scope(user_id=user_id, agent_id=agent_id, run_id=run_id)


def messages_to_records(messages, *, scope: Scope, session_id: str, timestamp: str | None) -> list[Record]:
    """Turn ``Record``s, strings or chat dicts (``role``, ``content``, optional ``name``/``speaker``,
    ``timestamp``, ``id``) into records with deterministic ids. Raises ValueError on anything else."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, Record):
            out.append(m if m.scope == scope or scope == Scope() else m.model_copy(update={"scope": scope}))
            continue
        if isinstance(m, str):
            m = {"role": "user", "content": m}
        if not isinstance(m, dict) or "content" not in m:
            raise ValueError(f"message {i} must be a Record, a string or a dict with 'content'; got {type(m).__name__}")
        role = str(m.get("role", "user"))
        speaker = str(m.get("speaker") or m.get("name") or role)
        ts = m.get("timestamp", timestamp)
        text = str(m["content"])
        rid = m.get("id") or record_id(scope, session_id, i, speaker, text, ts)
        out.append(Record(id=rid, scope=scope, session_id=session_id, speaker=speaker, role=role, timestamp=ts, text=text))
    return out


class AsyncMemory:
    """The async core. Construct with :meth:`open`."""

    def __init__(self, store: MemoryStore, llm: MeteredLLM, answer_llm: MeteredLLM):
        self.store = store
        self.env = MemoryEnv(store=store, llm=llm, answer_llm=answer_llm)
        self.answerer = Answerer(answer_llm)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        llm: str | ChatClient = "local",
        answer_llm: str | ChatClient | None = None,
        base_url: str | None = None,
        price_book: str | Path | PriceBook | None = None,
        allow_unpriced: bool = False,
        price_as: str | None = None,
        embedder=None,
        reembed: bool = False,
    ) -> "AsyncMemory":
        """Open (or create) the store directory at ``path``.

        ``llm`` is ``"local"`` (embedded Gemma 3 270M), ``"openai:MODEL"`` (with ``base_url``) or a
        ChatClient; ``answer_llm`` defaults to the same model. Raises UnpricedModelError for a
        model missing from the price book unless ``allow_unpriced``; EmbeddingMismatchError if the
        store was built with another embedding model (pass ``reembed=True`` to rebuild vectors).
        ``price_as`` prices every call as that price-book model (see :class:`MeteredLLM`).
        """
        from .embed.minilm import MiniLMEmbedder
        from .store.sqlite import SQLiteStore

        prices = price_book if isinstance(price_book, PriceBook) else PriceBook.load(price_book)
        mem_client = make_llm(llm, base_url=base_url) if isinstance(llm, str) else llm
        if answer_llm is None:
            ans_client = mem_client
        else:
            ans_client = make_llm(answer_llm, base_url=base_url) if isinstance(answer_llm, str) else answer_llm
        store = SQLiteStore(Path(path), embedder or MiniLMEmbedder(), reembed=reembed)
        return cls(
            store,
            MeteredLLM(mem_client, prices, allow_unpriced=allow_unpriced, price_as=price_as),
            MeteredLLM(ans_client, prices, allow_unpriced=allow_unpriced, price_as=price_as),
        )

    async def add(self, messages, *, user_id=None, agent_id=None, run_id=None, session_id: str = "default",
                  timestamp: str | None = None) -> AddResult:
        scope = _scope(user_id, agent_id, run_id)
        records = messages_to_records(messages, scope=scope, session_id=session_id, timestamp=timestamp)
        return await asyncio.to_thread(self.store.add, records)

    async def search(self, query: str, *, user_id=None, agent_id=None, run_id=None, k: int = 10) -> list[Hit]:
        """Top-``k`` chunks by the :data:`~memfrontier.retrieve.recipes.HYBRID_RRF` recipe (dense + BM25, RRF k=60)."""
        return await asyncio.to_thread(hybrid_search, self.store, query, _scope(user_id, agent_id, run_id), HYBRID_RRF, k)

    async def build(self, strategy: Strategy, scope: Scope, ledger: Ledger | None = None) -> Ledger:
        """Run a strategy's offline construction for ``scope`` under stage ``construction``."""
        ledger = ledger or Ledger()
        with use_ledger(ledger, "construction"):
            await strategy.build(self.env, scope)
        return ledger

    async def ask(self, question: str, *, user_id=None, agent_id=None, run_id=None,
                  strategy: str | Strategy = "rag", preference: Preference | str | None = None,
                  budget: Budget | None = None, question_date: str | None = None,
                  gold_evidence_ids: list[str] | None = None, ledger: Ledger | None = None) -> Answer:
        """Answer ``question`` from the scope's memory with ``strategy``; usage covers every call made.

        ``gold_evidence_ids`` is only read by the ``oracle`` strategy.
        """
        strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
        pref = Preference.preset(preference) if isinstance(preference, str) else (preference or Preference())
        budget = budget or Budget()
        ledger = ledger or Ledger()
        query = Query(text=question, scope=_scope(user_id, agent_id, run_id), question_date=question_date,
                      gold_evidence_ids=gold_evidence_ids)
        t0 = time.perf_counter()
        with use_ledger(ledger, "query"):
            ctx = await strat.context(query, self.env, pref, budget)
            text = await self.answerer.answer(question, ctx, budget)
        return Answer(text=text, evidence_ids=ctx.evidence_ids, context=ctx.text, strategy=strat.name,
                      usage=ledger.usage(), wall_s=time.perf_counter() - t0, meta=ctx.meta)

    async def delete(self, record_id: str) -> bool:
        return await asyncio.to_thread(self.store.delete, record_id)

    async def delete_all(self, *, user_id=None, agent_id=None, run_id=None) -> int:
        return await asyncio.to_thread(self.store.delete_all, _scope(user_id, agent_id, run_id))

    def close(self) -> None:
        self.store.close()


class Memory:
    """Synchronous facade: the same methods as :class:`AsyncMemory`, run on a private event loop."""

    def __init__(self, inner: AsyncMemory):
        self._inner = inner
        self._loop = asyncio.new_event_loop()

    @classmethod
    def open(cls, path: str | Path, **kwargs) -> "Memory":
        """See :meth:`AsyncMemory.open`."""
        return cls(AsyncMemory.open(path, **kwargs))

    @property
    def aio(self) -> AsyncMemory:
        return self._inner

    def _run(self, coro):
        return self._loop.run_until_complete(coro)

    def add(self, messages, **kw) -> AddResult:
        return self._run(self._inner.add(messages, **kw))

    def search(self, query: str, **kw) -> list[Hit]:
        return self._run(self._inner.search(query, **kw))

    def ask(self, question: str, **kw) -> Answer:
        return self._run(self._inner.ask(question, **kw))

    def delete(self, record_id: str) -> bool:
        return self._run(self._inner.delete(record_id))

    def delete_all(self, **kw) -> int:
        return self._run(self._inner.delete_all(**kw))

    def close(self) -> None:
        self._inner.close()
        self._loop.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

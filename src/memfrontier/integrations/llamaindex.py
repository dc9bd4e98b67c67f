"""A LlamaIndex memory block over memfrontier (``pip install 'memfrontier[llamaindex]'``).

>>> from llama_index.core.memory import Memory as ChatMemory           # doctest: +SKIP
>>> from memfrontier.integrations.llamaindex import MemfrontierMemoryBlock, tokenizer_fn
>>> block = MemfrontierMemoryBlock(mem, user_id="ana", max_tokens=400)  # doctest: +SKIP
>>> chat = ChatMemory.from_defaults(session_id="s1", memory_blocks=[block],
...                                 tokenizer_fn=tokenizer_fn(mem))     # doctest: +SKIP

:class:`MemfrontierMemoryBlock` is a ``llama_index.core.memory.BaseMemoryBlock[str]`` (LlamaIndex's
``Memory``, 0.14): the messages LlamaIndex flushes out of its short-term chat history are stored
with the facade's ``add`` under the block's scope (``user_id`` / ``agent_id`` / ``run_id``) and
``session_id``; each time LlamaIndex reads its memory, the block asks the facade's ``recall`` for
the latest user message (what ``strategy`` retrieves, no answer call) and returns that context,
which LlamaIndex puts in a system message (or the latest user message) between ``<memfrontier>``
tags. The facade owns every rule: the scope check (two users never see each other's records), the
budget, the cut of the context to ``max_tokens`` by whole lines.

Tokens. LlamaIndex counts every token with its ``tokenizer_fn`` (tiktoken by default, which
downloads its encoding on first use); the block's ``max_tokens`` and :meth:`~MemfrontierMemoryBlock.atruncate`
count with ``count_tokens`` (default: the facade's answering model's tokenizer). Give LlamaIndex
:func:`tokenizer_fn` of the same memory so that the two agree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from ..api import AsyncMemory, Memory, Recall, scope_for_write
from ..api.rules import positive_int
from ..core.errors import EmptyScopeError
from ..core.extras import require_extra
from ..core.fit import CountTokens, cut_to_tokens
from ..core.ledger import BudgetExceededError, StageUsage, Usage
from ..core.text import check_id
from ..core.timeutil import utc_now
from ..core.types import Budget

require_extra("llamaindex", "llama_index.core", feature="memfrontier.integrations.llamaindex")

from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.bridge.pydantic import Field, PrivateAttr  # noqa: E402
from llama_index.core.memory.memory import BaseMemoryBlock  # noqa: E402


def _async_memory(memory) -> AsyncMemory:
    if isinstance(memory, Memory):
        return memory.aio
    if isinstance(memory, AsyncMemory):
        return memory
    raise ValueError(f"memory must be a memfrontier Memory or AsyncMemory, not {type(memory).__name__}")


def answer_token_counter(memory: Memory | AsyncMemory) -> CountTokens:
    """``count(text) -> int``: tokens of ``text`` in ``memory``'s answering model's tokenizer, the
    count the facade cuts a recalled context with (an embedded model is loaded on the first count).
    Raises ValueError for something that is not a memfrontier ``Memory`` / ``AsyncMemory``."""
    return _async_memory(memory).count_tokens


def tokenizer_fn(memory: Memory | AsyncMemory) -> Callable[[str], list[int]]:
    """A LlamaIndex ``tokenizer_fn`` (``str -> list``; LlamaIndex reads only its length) that
    counts as :func:`answer_token_counter` does, for ``Memory.from_defaults(tokenizer_fn=...)``:
    LlamaIndex's ``token_limit``, the block's ``max_tokens`` and :meth:`MemfrontierMemoryBlock.atruncate`
    then count the same tokens, and no tiktoken encoding is downloaded."""
    count = answer_token_counter(memory)

    def tokenize(text: str) -> list[int]:
        return [0] * count(text)

    return tokenize


def _message_text(message: ChatMessage) -> str:
    """The text of a chat message: its text blocks joined by newlines ("" when it has none)."""
    return message.content or ""


def _role(message: ChatMessage) -> str:
    return getattr(message.role, "value", str(message.role))


def _add_stage(total: StageUsage, more: StageUsage) -> StageUsage:
    """Field-wise sum of two stage totals (lists such as ``priced_as``: their sorted union)."""
    out = {}
    for name in type(total).model_fields:
        a, b = getattr(total, name), getattr(more, name)
        out[name] = sorted({*a, *b}) if isinstance(a, list) else a + b
    return type(total)(**out)


def _add_usage(total: Usage, more: Usage) -> Usage:
    """``total`` plus one more question's usage: stage and role totals added, events added,
    fallback records appended (the latency proxy of questions asked one after another adds up)."""

    def merged(a: dict[str, StageUsage], b: dict[str, StageUsage]) -> dict[str, StageUsage]:
        return {k: _add_stage(a.get(k, StageUsage()), b.get(k, StageUsage())) for k in sorted({*a, *b})}

    events = dict(total.events)
    for k, n in more.events.items():
        events[k] = events.get(k, 0) + n
    return Usage(
        by_stage=merged(total.by_stage, more.by_stage),
        by_role=merged(total.by_role, more.by_role),
        events=events,
        fallbacks=[*total.fallbacks, *more.fallbacks],
    )


class MemfrontierMemoryBlock(BaseMemoryBlock[str]):
    """A LlamaIndex memory block whose memory is a memfrontier scope.

    Args:
        memory: a memfrontier ``Memory`` (its calls run on its own loop, from a worker thread) or
            ``AsyncMemory`` (awaited on LlamaIndex's loop); ValueError for anything else.
        user_id, agent_id, run_id: the scope the block writes and reads (at least one; ValueError
            otherwise). One block per user: a block never reads another scope's records.
        strategy, strategy_options: what ``recall`` runs (a strategy name and its options, or a
            Strategy); checked when the block is made (ValueError for an unknown name or option).
        budget: a ``Budget`` (or a mapping of its caps) each recall runs under; it binds the
            strategy's own model calls (``rag`` makes none).
        max_tokens: the block's share of LlamaIndex's window, in ``count_tokens`` tokens: the
            recalled context is cut to it by whole lines from the top (the facade's rule); None:
            no cap of the block's own (LlamaIndex may still call :meth:`atruncate`).
        session_id: the memfrontier session the flushed messages are stored under.
        count_tokens: ``count(text) -> int`` for :meth:`atruncate`; default
            :func:`answer_token_counter` (the unit of ``max_tokens``).
        name: the block's name (LlamaIndex's tag around its content; unique per LlamaIndex memory).
        priority: LlamaIndex's truncation order (0 = never truncated; higher = truncated later).

    What LlamaIndex calls:

    - ``aget(messages)``: the question is the text of the latest user message (the latest message
      when none is from a user); no messages, or a question with no text: ``""``. Returns
      ``recall(question, ...).context``; ``""`` when the scope holds no records yet
      (EmptyScopeError) or the budget refused the retrieval (BudgetExceededError, counted in
      :attr:`refusals`, its spend in :attr:`usage`). ViewNotBuiltError (a strategy whose view was
      never built for the scope: build it with ``memory.build``) and ValueError are raised.
    - ``aput(messages)``: the messages flushed from the chat history, stored with ``add``: role,
      text (a message without text, such as a bare tool call, is skipped) and
      ``additional_kwargs["timestamp"]`` when the message carries one, else the time of the flush.
    - ``atruncate(content, tokens_to_truncate)``: see :meth:`atruncate`.

    The spend of the block's recalls: :attr:`usage` (a ``Usage``, summed over them),
    :attr:`recalls`, :attr:`refusals`, :attr:`truncated` and :attr:`last_recall`; the facade's
    ``usage()`` holds them too, with every other call of the memory.
    """

    memory: Any = Field(exclude=True, description="The memfrontier Memory or AsyncMemory.")
    user_id: str | None = Field(default=None, description="The scope's user id.")
    agent_id: str | None = Field(default=None, description="The scope's agent id.")
    run_id: str | None = Field(default=None, description="The scope's run id.")
    strategy: Any = Field(default="rag", description="The strategy recall runs (a name or a Strategy).")
    strategy_options: Any = Field(default=None, description="The named strategy's options.")
    budget: Budget = Field(default_factory=Budget, description="The hard caps of each recall.")
    max_tokens: int | None = Field(default=None, description="The recalled context's cap, in tokens.")
    session_id: str = Field(default="llamaindex", description="The memfrontier session of flushed messages.")
    count_tokens: Any = Field(default=None, exclude=True, description="The token counter of atruncate.")

    _usage: Usage = PrivateAttr(default_factory=Usage)
    _recalls: int = PrivateAttr(default=0)
    _refusals: int = PrivateAttr(default=0)
    _truncated: int = PrivateAttr(default=0)
    _last_recall: Recall | None = PrivateAttr(default=None)

    def __init__(
        self,
        memory: Memory | AsyncMemory,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        strategy: Any = "rag",
        strategy_options: Mapping | Any | None = None,
        budget: Budget | Mapping | None = None,
        max_tokens: int | None = None,
        session_id: str = "llamaindex",
        count_tokens: CountTokens | None = None,
        name: str = "memfrontier",
        priority: int = 1,
        **kwargs: Any,
    ):
        inner = _async_memory(memory)
        scope_for_write("a memfrontier memory block", user_id, agent_id, run_id)
        inner.strategy(strategy, strategy_options)  # an unknown name or a rejected option, named now
        if max_tokens is not None:
            positive_int("max_tokens", max_tokens)
        check_id(session_id, "session_id")
        if count_tokens is not None and not callable(count_tokens):
            raise ValueError(f"count_tokens must be a callable str -> int, not {type(count_tokens).__name__}")
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            raise ValueError(f"priority must be an integer >= 0, got {priority!r}")
        super().__init__(
            memory=memory,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            strategy=strategy,
            strategy_options=strategy_options,
            budget=Budget.of(budget),
            max_tokens=max_tokens,
            session_id=session_id,
            count_tokens=count_tokens,
            name=name,
            priority=priority,
            **kwargs,
        )

    # --- what the block spent -------------------------------------------------------------
    @property
    def usage(self) -> Usage:
        """The usage of every recall this block made (refused ones included), summed: by stage
        and role (calls, tokens, USD, latency proxy seconds, wall seconds), events, fallbacks.
        ``usage.query.usd`` is what its retrievals cost; ``rag`` calls no model (0 calls)."""
        return self._usage

    @property
    def recalls(self) -> int:
        """Recalls made (each ``aget`` with a question, over a scope with records)."""
        return self._recalls

    @property
    def refusals(self) -> int:
        """Recalls the budget refused (BudgetExceededError; the block returned ``""``)."""
        return self._refusals

    @property
    def truncated(self) -> int:
        """Recalls whose context was cut to ``max_tokens``."""
        return self._truncated

    @property
    def last_recall(self) -> Recall | None:
        """The latest recall the facade answered (context, evidence record ids, usage), or None."""
        return self._last_recall

    def token_counter(self) -> CountTokens:
        """The counter :meth:`atruncate` uses: ``count_tokens``, else :func:`answer_token_counter`."""
        return self.count_tokens or answer_token_counter(self.memory)

    # --- the facade ---------------------------------------------------------------------------
    def _scope(self) -> dict[str, str | None]:
        return {"user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.run_id}

    async def _call(self, verb: str, *args, **kwargs):
        """The facade's ``verb``: awaited on an AsyncMemory, run in a worker thread on a Memory
        (whose own loop then runs it)."""
        if isinstance(self.memory, Memory):
            return await asyncio.to_thread(getattr(self.memory, verb), *args, **kwargs)
        return await getattr(self.memory, verb)(*args, **kwargs)

    def _spent(self, usage: Usage | None) -> None:
        self._recalls += 1
        if usage is not None:
            self._usage = _add_usage(self._usage, usage)

    # --- LlamaIndex's interface ---------------------------------------------------------------
    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The recalled context for the latest user message (see the class docstring)."""
        if not messages:
            return ""
        users = [m for m in messages if _role(m) == "user"]
        question = _message_text(users[-1] if users else messages[-1])
        if not question.strip():
            return ""
        try:
            recall = await self._call(
                "recall",
                question,
                **self._scope(),
                strategy=self.strategy,
                strategy_options=self.strategy_options,
                budget=self.budget,
                max_context_tokens=self.max_tokens,
            )
        except EmptyScopeError:
            return ""
        except BudgetExceededError as e:
            self._refusals += 1
            self._spent(e.usage)
            return ""
        self._spent(recall.usage)
        self._truncated += int(recall.truncated)
        self._last_recall = recall
        return recall.context

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Store the flushed ``messages`` with the facade's ``add`` (see the class docstring)."""
        rows = []
        for m in messages:
            text = _message_text(m)
            if not text.strip():
                continue
            row: dict[str, Any] = {"role": _role(m), "content": text}
            if m.additional_kwargs.get("timestamp") is not None:
                row["timestamp"] = m.additional_kwargs["timestamp"]
            rows.append(row)
        if rows:
            await self._call("add", rows, **self._scope(), session_id=self.session_id, timestamp=utc_now())

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """``content`` less at least ``tokens_to_truncate`` tokens (:meth:`token_counter`): whole
        lines kept from the top while they fit in ``count(content) - tokens_to_truncate`` (a first
        line alone too long is cut short: :func:`~memfrontier.core.fit.cut_to_tokens`, the rule
        ``recall`` cuts with). None when nothing is left; ``content`` itself when
        ``tokens_to_truncate <= 0``."""
        if not content:
            return None
        if tokens_to_truncate <= 0:
            return content
        count = self.token_counter()

        def cut() -> str:  # off the event loop: an embedded model's tokenizer may load on first use
            room = count(content) - tokens_to_truncate
            return cut_to_tokens(content, room, count)[0] if room > 0 else ""

        text = await asyncio.to_thread(cut)
        return text if text.strip() else None


__all__ = ["MemfrontierMemoryBlock", "answer_token_counter", "tokenizer_fn"]

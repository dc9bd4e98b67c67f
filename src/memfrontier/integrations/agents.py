"""An OpenAI Agents SDK session and a memory tool over the facade (``pip install 'memfrontier[agents]'``).

>>> from memfrontier.integrations.agents import MemfrontierSession, recall_tool
>>> session = MemfrontierSession("chat-1", memory, user_id="ana")            # doctest: +SKIP
>>> tool = recall_tool(memory, user_id="ana", budget=Budget(max_usd=1e-4))   # doctest: +SKIP
>>> agent = Agent(name="assistant", tools=[tool])                            # doctest: +SKIP
>>> await Runner.run(agent, "Where do I live?", session=session)             # doctest: +SKIP

:class:`MemfrontierSession` implements the SDK's ``agents.memory.Session`` protocol: the run's
conversation history (the items ``Runner.run(..., session=...)`` reads before a turn and appends
after it) is kept as memfrontier records, so the same history is also long-term memory that
``search``, ``ask`` and the tool read. Each item is one record in the session's scope
(``user_id`` / ``agent_id`` / ``run_id``, at least one) under ``session_id`` = the session's id:

==================  =================================================================================
record field        from the item
==================  =================================================================================
``id``              ``agents:<session id>:<sequence number>:<12 random hex digits>`` (unique even for
                    identical items)
``session_id``      the session's id
``role``            the item's ``role`` (``user``, ``assistant``, ``system``, ``developer``), else its
                    ``type`` (``function_call``, ``function_call_output``, ``reasoning``...)
``speaker``         the role for a message; ``tool`` for an ``*_output`` item; ``assistant`` otherwise
``text``            the item's readable text (:func:`item_text`): a message's text parts, a call as
                    ``called NAME(ARGUMENTS)``, an output as ``NAME returned: OUTPUT``...
``timestamp``       when :meth:`~MemfrontierSession.add_items` stored it (UTC)
``meta``            ``{"openai_agents_item": <the item's JSON>, "openai_agents_seq": <sequence number>}``
==================  =================================================================================

The session's items are the records of exactly its scope and session carrying
``meta["openai_agents_item"]``, in sequence-number order; ``get_items`` returns them as added
(JSON round trip: equal to the items added). Records that others added to the same ``session_id``
(``Memory.add``) or stored under a wider or narrower scope (the same user with another
``agent_id``) are not the session's items: it neither returns nor deletes them.

:func:`recall_tool` is a ``FunctionTool`` named ``recall`` (by default) whose one argument
``question`` is answered from long-term memory by the facade's ``ask`` with the tool's strategy
and budget (per question). A question the budget refuses returns a short message to the model
instead of failing the run (:data:`REFUSAL_MESSAGE`), and so does any other refusal (no records
yet...: :data:`ERROR_MESSAGE`, with the facade's message). What every question spent is kept on
``tool.recall`` (:class:`MemoryRecall`: ``questions``, ``refused``, ``usage``, ``usd``, ``tokens``).

``memory`` is a :class:`~memfrontier.api.Memory` (its calls run in a worker thread),
an :class:`~memfrontier.api.AsyncMemory` (awaited on the caller's loop) or anything with the same
verbs (the service's ``MemoryClient`` / ``AsyncMemoryClient``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from ..api import scope_for_write
from ..core.extras import require_extra
from ..core.ledger import USAGE_FIELDS, BudgetExceededError, Usage
from ..core.text import check_id
from ..core.timeutil import utc_now
from ..core.types import Budget, Record, Scope

require_extra("agents", "agents", feature="memfrontier.integrations.agents")

from agents import FunctionTool, function_tool  # noqa: E402
from agents.memory import SessionSettings, await_session_mutation, coerce_session_settings  # noqa: E402

#: ``Record.meta`` key holding the item's exact JSON.
ITEM_KEY = "openai_agents_item"
#: ``Record.meta`` key holding the item's sequence number in its session (1, 2, ...).
SEQ_KEY = "openai_agents_seq"
#: What the tool answers the model when the budget refuses a question (``{reason}``: the refusal).
REFUSAL_MESSAGE = "Memory was not consulted: the question would exceed its budget ({reason})."
#: What the tool answers the model when the question is refused otherwise (an empty scope, a view
#: never built, a bad option: ``{error}``, the facade's message) instead of the SDK's generic one.
ERROR_MESSAGE = "Memory could not answer: {error}"
#: What a function tool may be named (the OpenAI function-calling rule).
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

_GENERIC_CHARS = 300  # an unknown item type is rendered as its type and this many characters of JSON


async def _call(memory, verb: str, *args, **kwargs):
    """``memory.verb(*args, **kwargs)``: awaited when it is a coroutine function (AsyncMemory, the
    async client), else run in a worker thread (Memory, the sync client), off the caller's loop."""
    method = getattr(memory, verb)
    if inspect.iscoroutinefunction(method):
        return await method(*args, **kwargs)
    return await asyncio.to_thread(method, *args, **kwargs)


def _parts_text(content) -> str:
    """The text of a message's ``content``: a string, or its parts' text joined with newlines
    (``input_text`` / ``output_text`` / ``text``, a ``refusal``; an image or a file as a bracketed
    mention)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, ensure_ascii=False)
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            out.append(f"[refused: {part['refusal']}]")
        elif kind in ("input_image", "image_url"):
            out.append("[image]")
        elif kind == "input_file":
            out.append(f"[file: {part.get('filename') or part.get('file_id') or 'attached'}]")
        elif kind == "input_audio":
            out.append("[audio]")
        elif kind:
            out.append(f"[{kind}]")
    return "\n".join(t for t in out if t)


def item_role(item: Mapping) -> str:
    """The record role of an item: its ``role`` (a message), else its ``type`` (``function_call``...),
    else ``item``."""
    for key in ("role", "type"):
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return "item"


def item_text(item: Mapping, call_names: Mapping[str, str] | None = None) -> str:
    """An item's readable text, what the memory indexes and a strategy reads: a message's text
    (:func:`_parts_text`); a tool call as ``called NAME(ARGUMENTS)``; a tool output as ``NAME returned:
    OUTPUT`` (``NAME`` from ``call_names``, call id -> tool name, else ``tool``); reasoning as its
    summary; anything else as its type and up to 300 characters of its JSON. Never empty."""
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        text = _parts_text(item.get("content"))
        return text if text.strip() else f"[{item_role(item)} message with no text]"
    if kind in ("function_call", "custom_tool_call", "mcp_call"):
        args = item.get("arguments", item.get("input", ""))
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        text = f"called {item.get('name') or 'a tool'}({args})"
        if kind == "mcp_call" and item.get("output"):
            text += f" -> {_parts_text(item['output'])}"
        return text
    if isinstance(kind, str) and kind.endswith("_output") and "output" in item:
        name = (call_names or {}).get(item.get("call_id"), "tool")
        return f"{name} returned: {_parts_text(item['output']) or '(nothing)'}"
    if kind == "reasoning":
        summary = _parts_text(item.get("summary") or [])
        return f"reasoning: {summary}" if summary.strip() else "[reasoning]"
    rest = {k: v for k, v in item.items() if k not in ("type", "id", "status")}
    body = json.dumps(rest, ensure_ascii=False, separators=(",", ":"))
    if len(body) > _GENERIC_CHARS:
        body = body[:_GENERIC_CHARS] + "..."
    return f"[{kind or 'item'}] {body}" if rest else f"[{kind or 'item'}]"


def _tool_error(ctx, error: Exception) -> str:
    """The tool's output when its question raised (the SDK's ``failure_error_function``): the
    facade's message, so the model reads why (no records yet...) rather than a generic failure."""
    return ERROR_MESSAGE.format(error=error)


def _speaker(item: Mapping, role: str) -> str:
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        return role
    return "tool" if isinstance(kind, str) and kind.endswith("_output") else "assistant"


class MemfrontierSession:
    """An ``agents.memory.Session`` whose items are memfrontier records (see the module docstring
    for the mapping).

    ``session_id``: the session's id, also the records' ``session_id`` (a non-blank string without
    NUL). ``memory``: a Memory, an AsyncMemory or a service client. ``user_id`` / ``agent_id`` /
    ``run_id``: the scope every item is stored and read in (at least one: ValueError otherwise,
    the facade's rule). ``session_settings``: the SDK's :class:`~agents.memory.SessionSettings`
    (or a dict of it); its ``limit`` is the default of :meth:`get_items`.

    Concurrency: the methods of one session object run one at a time (an ``asyncio.Lock`` of the
    object, on the loop it is used from), so a sequence number is never taken twice by one object.
    Two objects (or processes) writing the same session at once may take the same number; both
    items are kept (the record ids stay unique) and ordered as the store added them.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        memory,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ):
        self.session_id = check_id(session_id, "session_id")
        self.scope: Scope = scope_for_write("MemfrontierSession", user_id, agent_id, run_id)
        self.memory = memory
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._lock = asyncio.Lock()

    @property
    def _ids(self) -> dict[str, str | None]:
        return {"user_id": self.scope.user_id, "agent_id": self.scope.agent_id, "run_id": self.scope.run_id}

    async def records(self) -> list[Record]:
        """The session's records (its items), oldest first: those of exactly this scope and
        session that carry an item (``meta["openai_agents_item"]``), by sequence number (ties: the
        store's order)."""
        found = await _call(self.memory, "records", session_id=self.session_id, **self._ids)
        mine = [r for r in found if r.scope == self.scope and ITEM_KEY in r.meta]
        return sorted(mine, key=lambda r: r.meta.get(SEQ_KEY, 0))  # stable: the store's order breaks ties

    async def get_items(self, limit: int | None = None) -> list[dict]:
        """The session's items, oldest first; the latest ``limit`` when given (None:
        ``session_settings.limit``, None there too: all). ``limit`` <= 0 gives no items (the SDK's
        rule); a ``limit`` that is not an int raises ValueError."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ValueError(f"limit must be an integer or None, got {limit!r}")
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit <= 0:
            return []
        async with self._lock:
            found = await self.records()
        if limit is not None:
            found = found[-limit:]
        return [r.meta[ITEM_KEY] for r in found]

    async def add_items(self, items: list) -> None:
        """Append ``items`` (SDK input items: JSON objects) to the session, one record each (see
        the module docstring), in one ``add`` call. Raises ValueError naming ``items[i]`` for an item
        that is not a JSON-serialisable mapping; nothing is stored then."""
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"items must be a list of input items, got {type(items).__name__}")
        plain: list[dict] = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValueError(f"items[{i}] must be an input item (a dict), got {type(item).__name__}")
            try:
                plain.append(json.loads(json.dumps(item)))
            except (TypeError, ValueError) as e:
                raise ValueError(f"items[{i}] is not JSON-serialisable: {e}") from None
        if not plain:
            return
        await await_session_mutation(self._add(plain))

    async def _add(self, items: list[dict]) -> None:
        async with self._lock:
            existing = await self.records()
            seq = max((int(r.meta.get(SEQ_KEY, 0)) for r in existing), default=0)
            names = {
                r.meta[ITEM_KEY].get("call_id"): r.meta[ITEM_KEY].get("name")
                for r in existing
                if isinstance(r.meta[ITEM_KEY].get("name"), str)
            }
            now = utc_now()
            records = []
            for item in items:
                seq += 1
                if isinstance(item.get("call_id"), str) and isinstance(item.get("name"), str):
                    names[item["call_id"]] = item["name"]
                role = item_role(item)
                records.append(
                    Record(
                        id=f"agents:{self.session_id}:{seq}:{uuid.uuid4().hex[:12]}",
                        scope=self.scope,
                        session_id=self.session_id,
                        role=role,
                        speaker=_speaker(item, role),
                        timestamp=now,
                        text=item_text(item, names),
                        meta={ITEM_KEY: item, SEQ_KEY: seq},
                    )
                )
            await _call(self.memory, "add", records, session_id=self.session_id, **self._ids)

    async def pop_item(self) -> dict | None:
        """Remove the latest item (its record, and what the memory derived from it) and return it;
        None when the session is empty."""
        return await await_session_mutation(self._pop())

    async def _pop(self) -> dict | None:
        async with self._lock:
            while True:
                found = await self.records()
                if not found:
                    return None
                last = found[-1]
                if await _call(self.memory, "delete", last.id, **self._ids):
                    return last.meta[ITEM_KEY]
                # deleted by another writer in between: take the next latest

    async def clear_session(self) -> None:
        """Delete every item of the session (its records, and what the memory derived from them);
        the scope's other sessions and records are left as they are."""
        await await_session_mutation(self._clear())

    async def _clear(self) -> None:
        async with self._lock:
            for r in await self.records():
                await _call(self.memory, "delete", r.id, **self._ids)


class MemoryRecall:
    """What a recall tool runs: ``await recall(question)`` answers ``question`` from the scope's
    long-term memory with the facade's ``ask`` (``strategy``, ``strategy_options``, ``budget`` per
    question, as :meth:`~memfrontier.api.AsyncMemory.ask` takes them) and returns the answer's text;
    a question the budget refuses (BudgetExceededError) returns :data:`REFUSAL_MESSAGE` instead.
    Other refusals (an empty scope, a view never built, a bad option) are raised; inside a run the
    tool hands the model :data:`ERROR_MESSAGE` with the facade's message instead.

    Spend over every question asked: ``questions`` (asked), ``refused`` (by the budget),
    ``usage`` (``{stage: {calls, input_tokens, ..., usd, proxy_s, wall_s}}``, as ``Memory.usage()``;
    a refused question counts what it spent before the refusal), ``usd`` (dollars), ``tokens``
    (input + output) and ``proxy_s`` (latency proxy seconds), all stages.
    """

    def __init__(
        self,
        memory,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        strategy: str = "rag",
        strategy_options: Mapping | None = None,
        budget: Budget | Mapping | None = None,
    ):
        self.memory = memory
        self.scope = scope_for_write("recall_tool", user_id, agent_id, run_id)
        self.strategy = strategy
        self.strategy_options = strategy_options
        self.budget = Budget.of(budget)
        self.questions = 0
        self.refused = 0
        self._usage: dict[str, dict[str, float]] = {}
        self._spend_lock = threading.Lock()

    async def __call__(self, question: str) -> str:
        try:
            ans = await _call(
                self.memory,
                "ask",
                question,
                user_id=self.scope.user_id,
                agent_id=self.scope.agent_id,
                run_id=self.scope.run_id,
                strategy=self.strategy,
                strategy_options=self.strategy_options,
                budget=self.budget,
            )
        except BudgetExceededError as exc:
            self._count(exc.usage, refused=True)
            return REFUSAL_MESSAGE.format(reason=str(exc).rstrip("."))
        self._count(ans.usage, refused=False)
        return ans.text

    def _count(self, usage: Usage | None, *, refused: bool) -> None:
        with self._spend_lock:
            self.questions += 1
            self.refused += refused
            for stage, u in (usage.by_stage if usage is not None else {}).items():
                acc = self._usage.setdefault(stage, dict.fromkeys(USAGE_FIELDS, 0))
                for f in USAGE_FIELDS:
                    acc[f] += getattr(u, f)

    @property
    def usage(self) -> dict[str, dict[str, float]]:
        with self._spend_lock:
            return {stage: dict(v) for stage, v in sorted(self._usage.items())}

    def _total(self, field: str) -> float:
        return sum(v[field] for v in self.usage.values())

    @property
    def usd(self) -> float:
        return self._total("usd")

    @property
    def tokens(self) -> int:
        return int(self._total("input_tokens") + self._total("output_tokens"))

    @property
    def proxy_s(self) -> float:
        return self._total("proxy_s")


#: The tool's description, as the model reads it.
TOOL_DESCRIPTION = (
    "Answer a question from long-term memory: what the user said or did in earlier conversations "
    "(facts, preferences, plans, dates). Use it when the answer may depend on something said before."
)


def recall_tool(
    memory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    strategy: str = "rag",
    strategy_options: Mapping | None = None,
    budget: Budget | Mapping | None = None,
    name: str = "recall",
) -> FunctionTool:
    """An Agents SDK ``FunctionTool`` that answers the model's ``question`` (its one argument, a
    string) from the scope's long-term memory: :class:`MemoryRecall` (the facade's ``ask`` with
    ``strategy``, ``strategy_options``, ``budget``; ``"auto"`` routes per question). The returned
    tool carries its :class:`MemoryRecall` as ``tool.recall``: call it directly
    (``await tool.recall("...")``) and read what the questions spent (``tool.recall.usd``,
    ``.tokens``, ``.usage``). Inside a run, a question that raises (an empty scope, a view never
    built) gives the model :data:`ERROR_MESSAGE` with the facade's message; called directly, it
    raises. Raises ValueError without a scope id, for a budget that is not one,
    and for a ``name`` that is not 1-64 letters, digits, ``_`` or ``-``."""
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise ValueError(f"name must be 1-64 letters, digits, '_' or '-' (a function name), got {name!r}")
    recall = MemoryRecall(
        memory,
        user_id=user_id,
        agent_id=agent_id,
        run_id=run_id,
        strategy=strategy,
        strategy_options=strategy_options,
        budget=budget,
    )

    async def answer_from_memory(question: str) -> str:
        """Answer from long-term memory.

        Args:
            question: The question, self-contained (name who and what it is about).
        """
        return await recall(question)

    tool = function_tool(
        answer_from_memory,
        name_override=name,
        description_override=TOOL_DESCRIPTION,
        failure_error_function=_tool_error,
    )
    tool.recall = recall  # type: ignore[attr-defined]  # the spend, read by the builder
    return tool


__all__ = [
    "ERROR_MESSAGE",
    "ITEM_KEY",
    "REFUSAL_MESSAGE",
    "SEQ_KEY",
    "TOOL_DESCRIPTION",
    "MemfrontierSession",
    "MemoryRecall",
    "item_role",
    "item_text",
    "recall_tool",
]

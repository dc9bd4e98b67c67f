"""The one scripted chat client of the test suite.

Allowed only in unit tests of parsing and control flow; a strategy's end-to-end test runs the
real embedded model (DESIGN.md, "Tests").
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable

from memfrontier.llm.base import Completion
from memfrontier.llm.prompt_format import render_prompt


def message_text(content) -> str:
    """The text of a message's content: a string, or the ``text`` parts of a content-part list."""
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content or ""


class ScriptedClient:
    """A ChatClient that answers from a script instead of a model.

    Token rule (the only one in the suite): a token is a whitespace-separated word. A call's
    ``input_tokens`` are the words of the text of all its messages, its ``output_tokens`` the words
    of the reply.

    ``replies`` is a list consumed in order (running out raises IndexError, unless
    ``repeat_last``: then the last reply answers forever) or a callable ``script(messages) ->
    reply`` (``script(messages, kwargs)`` when it takes two parameters: it then also sees the
    call's ``json_schema``, ``max_tokens``...). A reply is a ``str`` (the completion text), a :class:`Completion` (returned as is),
    an ``Exception`` (raised), or a ``(seconds, reply)`` tuple (sleep first, then that reply).

    Every call is kept in ``seen`` as ``(messages, kwargs)`` (a snapshot of the message list).
    """

    context_tokens = 8192

    def __init__(
        self,
        replies: list | Callable[[list[dict]], object] = (),
        *,
        model_id: str = "scripted",
        repeat_last: bool = False,
        context_tokens: int | None = None,
    ):
        self.script = replies if callable(replies) else None
        self._script_sees_kwargs = self.script is not None and len(inspect.signature(self.script).parameters) == 2
        self.replies = [] if callable(replies) else list(replies)
        self.model_id = model_id
        self.repeat_last = repeat_last
        if context_tokens is not None:
            self.context_tokens = context_tokens
        self.seen: list[tuple[list[dict], dict]] = []

    @property
    def n_calls(self) -> int:
        return len(self.seen)

    @property
    def prompts(self) -> list[str]:
        """Each call's messages rendered as one completion prompt (as the embedded model sees them)."""
        return [render_prompt(m) for m, _ in self.seen]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _next(self, messages: list[dict], kw: dict):
        if self.script is not None:
            return self.script(messages, kw) if self._script_sees_kwargs else self.script(messages)
        if self.repeat_last and len(self.replies) == 1:
            return self.replies[0]
        return self.replies.pop(0)

    async def complete(self, messages, **kw) -> Completion:
        self.seen.append((list(messages), kw))
        reply = self._next(messages, kw)
        if isinstance(reply, tuple):
            await asyncio.sleep(reply[0])
            reply = reply[1]
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, Completion):
            return reply
        n_in = sum(self.count_tokens(message_text(m.get("content"))) for m in messages)
        return Completion(text=reply, model_id=self.model_id, input_tokens=n_in, output_tokens=self.count_tokens(reply))


def schema_instance(schema: dict, text: str = "x", defs: dict | None = None):
    """The smallest instance of a JSON ``schema`` (the subset the strategies ask with: ``$ref``,
    ``anyOf``/``oneOf`` (first branch), ``const``, ``enum`` (first value), objects (their required
    properties), arrays (``minItems`` items), strings (``text``), numbers (``minimum`` or 0),
    booleans (False))."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        return schema_instance(defs[schema["$ref"].rsplit("/", 1)[-1]], text, defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return schema_instance(schema[key][0], text, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: schema_instance(props.get(k, {}), text, defs) for k in schema.get("required", list(props))}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), text, defs) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return text
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return None


def any_schema_script(text: str) -> Callable[[list[dict], dict], str]:
    """A :class:`ScriptedClient` script that replies ``text`` to a free-text call and the smallest
    instance of the call's ``json_schema`` (:func:`schema_instance`) to a structured one: every
    strategy's control flow runs to its end on it (the outputs are poor, never malformed)."""

    def script(messages: list[dict], kw: dict) -> str:
        schema = kw.get("json_schema")
        return text if not schema else json.dumps(schema_instance(schema, text))

    return script

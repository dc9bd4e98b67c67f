"""The one model-access protocol every backend implements: async chat completion -> text + usage.

Backends: :mod:`memfrontier.llm.openai_compat` (any OpenAI-compatible server) and
:mod:`memfrontier.llm.embedded` (llama-cpp-python + the packaged Gemma 3 270M GGUF).
Strategies never call a backend directly: they go through
:class:`memfrontier.llm.metered.MeteredLLM`, which records each call in the ledger.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}


class Completion(BaseModel):
    """One backend reply. ``input_tokens`` includes ``cached_tokens``; ``output_tokens`` includes
    ``reasoning_tokens`` (the OpenAI usage convention). ``exact_usd`` is set only when the API
    itself reported the cost of the call."""

    text: str
    model_id: str
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    images: int = 0
    finish_reason: str | None = None
    exact_usd: float | None = None


class LLMError(RuntimeError):
    """A model call failed for good (after the retries the backend allows)."""


class LLMTimeoutError(LLMError):
    """A model call exceeded its timeout (after retries)."""


@runtime_checkable
class ChatClient(Protocol):
    """Async chat completion. ``json_schema``, when given, asks the backend for schema-constrained
    decoding (llama.cpp grammar / OpenAI ``response_format``); callers still parse defensively.
    ``single_line`` asks for one non-empty line of plain text (a short answer): a grammar on the
    embedded backend, which otherwise tends to open with a newline or copy the context's layout,
    and a newline stop elsewhere."""

    model_id: str

    async def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        json_schema: dict | None = None,
        stop: list[str] | None = None,
        single_line: bool = False,
    ) -> Completion: ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in this model's tokenizer (an estimate where the tokenizer is remote)."""
        ...

    @property
    def context_tokens(self) -> int:
        """The model's usable context window in tokens."""
        ...

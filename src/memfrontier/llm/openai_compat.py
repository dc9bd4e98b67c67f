"""A :class:`~memfrontier.llm.base.ChatClient` for any OpenAI-compatible chat-completions endpoint
(OpenAI, OpenRouter, vLLM, SGLang, llama.cpp's server, Ollama) through the ``openai`` SDK.

Retry policy (ours; the SDK's own retries are disabled so the policy is exact and testable):

* HTTP 429 and 503 (plus 502 / 504, see ``retry_statuses``), connection errors and timeouts are
  retried up to ``max_retries`` times. The wait honours ``Retry-After`` (seconds or an HTTP date)
  or ``retry-after-ms``, capped at ``max_retry_after_s``; without the header it is exponential
  backoff ``backoff_base_s * 2**attempt`` (capped at ``backoff_max_s``, with up to 25 % jitter).
* Any other 4xx is never retried: :class:`LLMError` is raised at once with status and message.
* When the retries are spent: :class:`LLMTimeoutError` if the last failure was a timeout, else
  :class:`LLMError`.

Structured output adapts to the server (``schema_format="auto"``, the default). A call with a
JSON schema is sent in the first mode of :data:`SCHEMA_MODES` the endpoint has not rejected:

1. ``json_schema``: OpenAI's strict ``{"type": "json_schema", "json_schema": {...}}`` (OpenAI,
   vLLM, SGLang, OpenRouter, llama.cpp's C++ ``llama-server``);
2. ``json_object``: ``{"type": "json_object", "schema": ...}`` (llama-cpp-python's
   ``llama_cpp.server``, which answers the first form with HTTP 500 "response_format.type: Input
   should be 'text' or 'json_object'");
3. ``prompt``: no ``response_format``; the schema is appended to the prompt and the reply is
   parsed with :func:`memfrontier.llm.parsing.parse_json` (the JSON found is returned as text).

A non-retryable error whose message names ``response_format`` moves the endpoint to the next mode
at once (no backoff, event ``structured_output.<mode>`` on the current ledger). The mode that
works is remembered per endpoint (base URL + model) for the process: later clients of the same
endpoint start there, and :func:`structured_output_modes` reports it for run provenance.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import threading
import time
from typing import Any, Literal

import openai

from ..core.ledger import count_event
from .base import Completion, LLMError, LLMTimeoutError, Message
from .parsing import parse_json

__all__ = ["OpenAICompatLLM", "SCHEMA_MODES", "parse_retry_after_s", "structured_output_modes"]

#: Structured-output modes, most to least constrained; ``auto`` walks them in this order.
SCHEMA_MODES = ("json_schema", "json_object", "prompt")

_MODES_LOCK = threading.Lock()
_ENDPOINT_MODES: dict[str, str] = {}


def _endpoint_key(base_url: str | None, model: str) -> str:
    return f"{(base_url or 'https://api.openai.com/v1').rstrip('/')}|{model}"


def structured_output_modes() -> dict[str, str]:
    """``{"BASE_URL|MODEL": mode}`` for every endpoint whose structured-output mode this process
    has settled (a JSON-schema call succeeded, or a mode was rejected). For run provenance."""
    with _MODES_LOCK:
        return dict(_ENDPOINT_MODES)


def _remember_mode(key: str, mode: str) -> None:
    with _MODES_LOCK:
        _ENDPOINT_MODES[key] = mode


def _names_response_format(status: int | None, message: str) -> bool:
    """Whether a failed request was rejected for its ``response_format`` (any 4xx / 5xx whose
    message names the field, e.g. llama_cpp.server's HTTP 500 ``response_format.type: ...``)."""
    return status is not None and status >= 400 and "response_format" in message.lower()


def _schema_prompt(messages: list[Message], schema: dict) -> list[Message]:
    """``messages`` with the JSON-only instruction and the schema appended as a last user turn
    (a trailing assistant prefix stays last)."""
    note = {
        "role": "user",
        "content": (
            "Reply with one JSON value and nothing else. It must match this JSON schema:\n"
            + json.dumps(schema, ensure_ascii=False)
        ),
    }
    msgs = list(messages)
    if msgs and msgs[-1].get("role") == "assistant":
        return [*msgs[:-1], note, msgs[-1]]
    return [*msgs, note]


def parse_retry_after_s(headers: Any, *, cap_s: float = 60.0) -> float | None:
    """Seconds to wait from a response's ``retry-after-ms`` / ``Retry-After`` header.

    ``Retry-After`` may be a number of seconds or an HTTP date. Returns None when absent or
    unparseable; the result is clamped to ``[0, cap_s]``.
    """
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return min(max(float(ms) / 1000.0, 0.0), cap_s)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra is None:
        return None
    try:
        return min(max(float(ra), 0.0), cap_s)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return min(max(when.timestamp() - time.time(), 0.0), cap_s)


def _reported(n: Any) -> int:
    """A provider's token count as an int: 0 when absent, -1 when not a finite number."""
    if n is None:
        return 0
    try:
        x = float(n)
    except (TypeError, ValueError):
        return -1
    return int(x) if math.isfinite(x) else -1


class OpenAICompatLLM:
    """Chat completions against an OpenAI-compatible server.

    Args:
        model: the model name the server expects (e.g. ``"gpt-4o-mini"``, ``"qwen/qwen3-8b"``).
        base_url: the API root (e.g. ``"http://127.0.0.1:8000/v1"``); None means OpenAI's.
        api_key: defaults to ``$OPENAI_API_KEY``, else the placeholder ``"EMPTY"`` (local servers).
        timeout_s: per-attempt limit in seconds (connect + wait for the whole response).
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests).
        model_id: the id used for pricing in the ledger (defaults to ``model``).
        context_tokens: the usable context window in tokens (default 32768; not queried remotely).
        retry_statuses: HTTP statuses that are retried (default 429, 502, 503, 504).
        max_retry_after_s: cap on a server's ``Retry-After`` (seconds).
        backoff_base_s / backoff_max_s: exponential backoff without ``Retry-After`` (seconds).
        extra_body: extra JSON fields sent with every request (e.g. OpenRouter's
            ``{"usage": {"include": True}}`` to get the exact cost back).
        schema_format: how ``json_schema`` is sent: ``"auto"`` (default: adapt to the server, see
            the module docstring) or one fixed mode of :data:`SCHEMA_MODES`, which is never
            changed (a rejection is then an :class:`LLMError`).

    ``complete`` returns a :class:`Completion` whose ``input_tokens`` is the server's
    ``prompt_tokens`` (cached tokens included, ``cached_tokens`` from
    ``prompt_tokens_details``) and ``output_tokens`` its ``completion_tokens`` (reasoning tokens
    included, ``reasoning_tokens`` from ``completion_tokens_details``): nothing is added twice.
    ``exact_usd`` is set when the response carries ``usage.cost`` (OpenRouter). When a server
    returns no usage at all, tokens are estimated with :meth:`count_tokens` and the event
    ``usage_estimated`` is counted on the current ledger.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        *,
        model_id: str | None = None,
        context_tokens: int = 32768,
        retry_statuses: tuple[int, ...] = (429, 502, 503, 504),
        max_retry_after_s: float = 60.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        extra_body: dict | None = None,
        default_headers: dict[str, str] | None = None,
        schema_format: Literal["auto", "json_schema", "json_object", "prompt"] = "auto",
    ):
        self.model = model
        self.model_id = model_id or model
        self.base_url = base_url
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.retry_statuses = frozenset(retry_statuses)
        self.max_retry_after_s = float(max_retry_after_s)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_body = dict(extra_body) if extra_body else None
        if schema_format != "auto" and schema_format not in SCHEMA_MODES:
            raise ValueError(f"schema_format must be 'auto' or one of {SCHEMA_MODES}, not {schema_format!r}")
        self.schema_format = schema_format
        self.endpoint = _endpoint_key(base_url, model)
        self._context_tokens = int(context_tokens)
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._default_headers = default_headers
        # One SDK client per event loop: its connection pool is bound to the loop that created
        # it, and the sync facade may run each call under a fresh ``asyncio.run``.
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, openai.AsyncOpenAI]] = {}

    def _new_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=0,  # our policy, in complete()
            default_headers=self._default_headers,
        )

    def _client(self, made: openai.AsyncOpenAI | None = None) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        hit = self._clients.get(id(loop))
        if hit is not None and hit[0] is loop:
            return hit[1]
        # Drop clients of loops that are gone (their pools cannot be closed from this loop).
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = made if made is not None else self._new_client()
        self._clients[id(loop)] = (loop, client)
        return client

    async def warm(self, timeout_s: float = 10.0) -> None:
        """Make this loop's SDK client ready before the first completion: build it in a worker
        thread (its TLS context loads the CA bundle) and send one ``GET /models``, which imports the
        SDK's HTTP stack and opens a connection. That first-request set-up otherwise runs on the event
        loop inside the first completion and stalls every request in flight (~0.5 s on 2 busy
        cores). Costs no tokens; any error is ignored (the first completion reports it)."""
        made = await asyncio.to_thread(self._new_client)
        client = self._client(made)
        try:
            await asyncio.wait_for(client.models.list(), timeout_s)
        except Exception:  # noqa: BLE001 - a warm-up: the endpoint may not list models
            pass

    @property
    def structured_output_mode(self) -> str:
        """The mode the next JSON-schema call uses: the fixed ``schema_format``, else the mode
        remembered for this endpoint (``json_schema`` until the server rejects it)."""
        if self.schema_format != "auto":
            return self.schema_format
        with _MODES_LOCK:
            return _ENDPOINT_MODES.get(self.endpoint, SCHEMA_MODES[0])

    # --- protocol --------------------------------------------------------------------------
    @property
    def context_tokens(self) -> int:
        """The configured context window in tokens (default 32768)."""
        return self._context_tokens

    def count_tokens(self, text: str) -> int:
        """An *estimate*: ``ceil(len(text) / 4)`` (about 4 characters a token for English text),
        because the tokenizer lives on the server. Use it for budgeting, not for billing."""
        return (len(text) + 3) // 4 if text else 0

    async def complete(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        json_schema: dict | None = None,
        stop: list[str] | None = None,
        single_line: bool = False,
    ) -> Completion:
        """One chat completion (``max_tokens`` output tokens at most), retried per the module
        policy. ``json_schema`` is sent in :attr:`structured_output_mode`; with ``"auto"`` a
        rejection naming ``response_format`` moves to the next mode and sends again (module
        docstring). Each retry counts ``llm_retry`` on the current ledger.

        Raises :class:`LLMError` (non-retryable status, or retries spent, or the last structured
        mode rejected) or :class:`LLMTimeoutError` (the last attempt timed out).
        """
        while True:
            mode = self.structured_output_mode if json_schema is not None else None
            try:
                out = await self._complete_once(
                    messages,
                    mode,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    json_schema=json_schema,
                    stop=stop,
                    single_line=single_line,
                )
            except _FormatRejected as e:
                nxt = SCHEMA_MODES.index(mode) + 1
                if self.schema_format != "auto" or nxt >= len(SCHEMA_MODES):
                    raise LLMError(str(e)) from e.__cause__
                _remember_mode(self.endpoint, SCHEMA_MODES[nxt])
                count_event(f"structured_output.{SCHEMA_MODES[nxt]}")
                continue
            if mode is not None and self.schema_format == "auto":
                _remember_mode(self.endpoint, mode)
            if mode == "prompt":
                parsed = parse_json(out.text)
                if parsed.ok:
                    out = out.model_copy(update={"text": json.dumps(parsed.value, ensure_ascii=False)})
            return out

    async def _complete_once(
        self, messages, mode, *, max_tokens, temperature, json_schema, stop, single_line
    ) -> Completion:
        """One request (with the retry policy) in structured mode ``mode`` (None: no schema)."""
        if mode == "prompt":
            messages = _schema_prompt(messages, json_schema)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if single_line:
            stop = [*(stop or []), "\n"]
        if stop:
            kwargs["stop"] = stop
        if mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": json_schema, "strict": True},
            }
        elif mode == "json_object":
            kwargs["response_format"] = {"type": "json_object", "schema": json_schema}
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body

        attempt = 0
        while True:
            try:
                resp = await asyncio.wait_for(self._client().chat.completions.create(**kwargs), timeout=self.timeout_s)
                return self._to_completion(resp, messages)
            except (openai.APITimeoutError, asyncio.TimeoutError, TimeoutError) as e:
                if attempt >= self.max_retries:
                    raise LLMTimeoutError(
                        f"{self.model}: timed out after {attempt + 1} attempt(s) of {self.timeout_s:g}s"
                    ) from e
                wait = self._backoff_s(attempt)
            except openai.APIConnectionError as e:
                if attempt >= self.max_retries:
                    where = (self.base_url or "https://api.openai.com/v1 (no --base-url given)").rstrip("/")
                    raise LLMError(
                        f"{self.model}: connection to {where} failed after {attempt + 1} attempt(s): {e}"
                    ) from e
                wait = self._backoff_s(attempt)
            except openai.APIStatusError as e:
                status = e.status_code
                msg = _error_message(e)
                if mode in ("json_schema", "json_object") and _names_response_format(status, msg):
                    raise _FormatRejected(f"{self.model}: HTTP {status}: {msg}") from e
                if status not in self.retry_statuses:
                    raise LLMError(f"{self.model}: HTTP {status}: {msg}") from e
                if attempt >= self.max_retries:
                    raise LLMError(f"{self.model}: HTTP {status} after {attempt + 1} attempt(s): {msg}") from e
                ra = parse_retry_after_s(getattr(e.response, "headers", None), cap_s=self.max_retry_after_s)
                wait = ra if ra is not None else self._backoff_s(attempt)
            except openai.APIResponseValidationError as e:
                raise LLMError(f"{self.model}: malformed response: {e}") from e
            except openai.OpenAIError as e:  # anything else the SDK raises: not retryable
                raise LLMError(f"{self.model}: {type(e).__name__}: {e}") from e
            count_event("llm_retry")
            attempt += 1
            await asyncio.sleep(wait)

    # --- helpers ---------------------------------------------------------------------------
    def _backoff_s(self, attempt: int) -> float:
        base = min(self.backoff_base_s * (2**attempt), self.backoff_max_s)
        return base * (1.0 + 0.25 * random.random())

    def _to_completion(self, resp: Any, messages: list[Message]) -> Completion:
        if not getattr(resp, "choices", None):
            raise LLMError(f"{self.model}: response has no choices")
        choice = resp.choices[0]
        msg = choice.message
        text = (msg.content if msg is not None else None) or ""
        usage = getattr(resp, "usage", None)
        if usage is None or not usage.prompt_tokens:
            count_event("usage_estimated")
            n_in = sum(self.count_tokens(str(m.get("content") or "")) for m in messages)
            return Completion(
                text=text,
                model_id=self.model_id,
                input_tokens=n_in,
                output_tokens=self.count_tokens(text),
                finish_reason=choice.finish_reason,
            )
        ptd = getattr(usage, "prompt_tokens_details", None)
        ctd = getattr(usage, "completion_tokens_details", None)
        cost = getattr(usage, "cost", None)
        exact = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
        # reported as is (a count that is not a finite number as -1): the metered client checks,
        # clamps and flags them (cached > input, negative or non-finite figures)
        return Completion(
            text=text,
            model_id=self.model_id,
            input_tokens=_reported(usage.prompt_tokens),
            cached_tokens=_reported(getattr(ptd, "cached_tokens", None)),
            output_tokens=_reported(usage.completion_tokens),
            reasoning_tokens=_reported(getattr(ctd, "reasoning_tokens", None)),
            finish_reason=choice.finish_reason,
            exact_usd=exact,
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool this event loop uses (others are dropped)."""
        loop = asyncio.get_running_loop()
        hit = self._clients.pop(id(loop), None)
        self._clients.clear()
        if hit is not None and hit[0] is loop:
            await hit[1].close()


class _FormatRejected(Exception):
    """The server rejected the request's ``response_format`` (internal: triggers the next mode)."""


def _error_message(e: "openai.APIStatusError") -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return str(getattr(e, "message", e))[:500]

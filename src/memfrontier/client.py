"""Clients of ``memfrontier serve``: :class:`MemoryClient` (sync) and :class:`AsyncMemoryClient`,
with the method names and return types of :class:`memfrontier.Memory`, so moving from the
embedded memory to the service is one line:

>>> m = Memory.open("./mem")                                              # doctest: +SKIP
>>> m = MemoryClient("http://127.0.0.1:8000", api_key="mf_...")           # doctest: +SKIP
>>> m.add("I moved to Lisbon in May.", user_id="ana")                     # doctest: +SKIP

Both are built on ``httpx2`` (the maintained ``httpx``). Scopes name the caller's own users,
agents and runs; the server confines them to the key's tenant.

Errors: a 422 raises :class:`InvalidRequestError` (a ``ValueError``, as ``Memory`` raises), a 409
for a record id stored with other content raises :class:`ConflictError` (a
:class:`~memfrontier.store.base.RecordConflictError`); the facade's refusals raise errors that are
also ``Memory``'s, with its messages: :class:`UnbuiltViewError` (a ``ViewNotBuiltError``),
:class:`ServiceEmptyScopeError` (an ``EmptyScopeError``), :class:`RefusedBuildError` (a
``FallbackError``), :class:`ServiceBudgetError` (a ``BudgetExceededError`` with the question's
``usage`` up to the refusal); every other non-2xx raises
:class:`ServiceError` with ``status``, ``kind`` and the server's message. ``get`` returns None and
``delete`` False for an absent record (404), as ``Memory`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx

from .api import Answer, BuildReport, Recall
from .core.errors import EmptyScopeError, RecordConflictError
from .core.fallbacks import FallbackError
from .core.ledger import BudgetExceededError, Usage
from .core.text import check_id, clean_json, clean_text
from .core.types import Budget, Hit, Preference, Record
from .store.base import AddResult
from .strategies import ViewNotBuiltError


class ServiceError(RuntimeError):
    """A non-2xx answer of the service: ``status`` (HTTP), ``kind`` and ``message`` (its JSON error)."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(f"{status} {kind}: {message}")
        self.status, self.kind, self.message = status, kind, message


class InvalidRequestError(ServiceError, ValueError):
    """422: the request was invalid (the message names the parameter)."""


class ConflictError(ServiceError, RecordConflictError):
    """409: a record id already stored in the scope with other content."""


class UnbuiltViewError(ConflictError, ViewNotBuiltError):
    """409 ``view_not_built``: the strategy's view of the scope was never built (``Memory`` raises
    :class:`~memfrontier.strategies.ViewNotBuiltError` with the same message)."""


class ServiceEmptyScopeError(InvalidRequestError, EmptyScopeError):
    """422 ``empty_scope``: the scope holds no records (``Memory`` raises
    :class:`~memfrontier.core.errors.EmptyScopeError` with the same message)."""


class RefusedBuildError(ServiceError, FallbackError):
    """422 ``fallbacks``: a build's error or fallback share of some role was above the server's
    threshold (``Memory`` raises :class:`~memfrontier.core.fallbacks.FallbackError` with the same
    message)."""

    summary = report = usage = None


class ServiceBudgetError(InvalidRequestError, BudgetExceededError):
    """422 ``budget``: the question cannot be answered within its budget (``Memory`` raises
    :class:`~memfrontier.core.ledger.BudgetExceededError` with the same message); ``usage``: the
    question's :class:`~memfrontier.core.ledger.Usage` up to the refusal (the refusal's
    ``budget.call_refused.<role>`` event), None when the server sent none."""

    usage: Usage | None = None


#: error kind -> the typed error of that refusal (else by status).
_KINDS = {
    "view_not_built": UnbuiltViewError,
    "empty_scope": ServiceEmptyScopeError,
    "fallbacks": RefusedBuildError,
    "budget": ServiceBudgetError,
}


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    json: dict | None = None
    params: dict | None = None
    missing_ok: bool = False  # a 404 is an answer (None / False), not an error


def _scope(user_id, agent_id, run_id) -> dict:
    """The scope ids given; ValueError naming the id when one holds NUL or a lone surrogate, as
    ``Memory`` refuses it (:func:`~memfrontier.core.text.check_id`)."""
    out = {k: v for k, v in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)) if v is not None}
    for k, v in out.items():
        if isinstance(v, str):
            check_id(v, k, blank_ok=True)
    return out


#: request fields holding free text: lone surrogates in them become U+FFFD, as ``Memory`` does
#: (:func:`~memfrontier.core.text.clean_text`).
_TEXT_FIELDS = ("messages", "query", "question")


def _encodable(value, key: str) -> None:
    """ValueError naming ``key`` when ``value`` holds a lone surrogate (UTF-8 cannot encode it)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{key} holds a lone surrogate (not valid Unicode)") from None


def _json(body: dict) -> dict:
    """``body`` ready for the wire: the text fields (:data:`_TEXT_FIELDS`) cleaned of lone surrogates
    and NUL; a session id that ``Memory`` refuses (:func:`~memfrontier.core.text.check_id`) and a lone
    surrogate anywhere else (a timestamp, an option) raise ValueError naming the field, instead of a
    UnicodeEncodeError from the encoder."""
    out = {}
    for key, value in body.items():
        if key == "messages":  # a message's id is an identifier: refused, never altered
            for i, m in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(m, dict) and isinstance(m.get("id"), str):
                    check_id(m["id"], f"message {i}.id")
        if key in _TEXT_FIELDS:
            value = clean_json(value)
        elif key == "session_id" and isinstance(value, str):
            check_id(value, key)
        else:
            _encodable(value, key)
        out[key] = value
    return out


def _raise_for(resp: httpx.Response) -> None:
    try:
        body = resp.json()
        kind, message = body.get("error", "error"), body.get("message", resp.text)
    except (ValueError, AttributeError):
        body, kind, message = {}, "error", resp.text
    cls = _KINDS.get(kind) or (
        InvalidRequestError if resp.status_code == 422 else ConflictError if resp.status_code == 409 else ServiceError
    )
    err = cls(resp.status_code, kind, message)
    if cls is ServiceBudgetError and isinstance(body.get("usage"), dict):
        err.usage = Usage.model_validate(body["usage"])
    raise err


def _kind(resp: httpx.Response) -> str | None:
    try:
        return resp.json().get("error")
    except (ValueError, AttributeError):
        return None


def _body(resp: httpx.Response, call: _Call):
    if call.missing_ok and resp.status_code == 404 and _kind(resp) == "not_found":
        return None
    if resp.status_code >= 400:
        _raise_for(resp)
    return resp.json()


class _Calls:
    """The requests of each verb and the parsing of their answers (shared by both clients)."""

    @staticmethod
    def add(
        messages, *, user_id=None, agent_id=None, run_id=None, session_id: str = "default", timestamp: str | None = None
    ) -> _Call:
        return _Call(
            "POST",
            "/v1/memories",
            _json(
                {
                    "messages": messages,
                    "session_id": session_id,
                    "timestamp": timestamp,
                    **_scope(user_id, agent_id, run_id),
                }
            ),
        )

    @staticmethod
    def search(
        query: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        k: int = 10,
        all_scopes: bool = False,
        fold: bool = True,
    ) -> _Call:
        return _Call(
            "POST",
            "/v1/search",
            _json(
                {"query": query, "k": k, "all_scopes": all_scopes, "fold": fold, **_scope(user_id, agent_id, run_id)}
            ),
        )

    @staticmethod
    def ask(
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str = "rag",
        strategy_options: dict[str, Any] | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
    ) -> _Call:
        return _Call(
            "POST",
            "/v1/ask",
            _json(
                {
                    "question": question,
                    "strategy": strategy,
                    "strategy_options": strategy_options,
                    "preference": preference.model_dump() if isinstance(preference, Preference) else preference,
                    "budget": Budget.of(budget).model_dump() if budget is not None else None,
                    "question_date": question_date,
                    "build": build,
                    "all_scopes": all_scopes,
                    **_scope(user_id, agent_id, run_id),
                }
            ),
        )

    @staticmethod
    def recall(
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str = "rag",
        strategy_options: dict[str, Any] | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
        max_context_tokens: int | None = None,
    ) -> _Call:
        call = _Calls.ask(
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
        return _Call("POST", "/v1/recall", {**call.json, "max_context_tokens": max_context_tokens})

    @staticmethod
    def build(
        strategy: str = "rag",
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy_options: dict[str, Any] | None = None,
    ) -> _Call:
        return _Call(
            "POST",
            "/v1/build",
            _json({"strategy": strategy, "strategy_options": strategy_options, **_scope(user_id, agent_id, run_id)}),
        )

    @staticmethod
    def get(record_id: str, *, user_id=None, agent_id=None, run_id=None) -> _Call:
        return _Call(
            "GET", f"/v1/records/{_segment(record_id)}", params=_scope(user_id, agent_id, run_id), missing_ok=True
        )

    @staticmethod
    def records(
        *, user_id=None, agent_id=None, run_id=None, session_id: str | None = None, limit: int | None = None
    ) -> _Call:
        if session_id is not None:
            check_id(session_id, "session_id")
        extra = {k: v for k, v in (("session_id", session_id), ("limit", limit)) if v is not None}
        return _Call("GET", "/v1/records", params={**_scope(user_id, agent_id, run_id), **extra})

    @staticmethod
    def delete(record_id: str, *, user_id=None, agent_id=None, run_id=None) -> _Call:
        return _Call(
            "DELETE", f"/v1/records/{_segment(record_id)}", params=_scope(user_id, agent_id, run_id), missing_ok=True
        )

    @staticmethod
    def delete_all(*, user_id=None, agent_id=None, run_id=None) -> _Call:
        return _Call("DELETE", "/v1/memories", params=_scope(user_id, agent_id, run_id))

    @staticmethod
    def usage() -> _Call:
        return _Call("GET", "/v1/usage")


def _segment(record_id: str) -> str:
    """``record_id`` as one URL path segment that reaches the server unchanged: every character but
    ASCII letters, digits, ``-``, ``_`` and ``~`` percent-encoded (UTF-8), ``.`` too, so that
    ``"."`` and ``".."`` (``%2E``, ``%2E%2E``) are never read as dot segments and removed. Raises
    ValueError for an empty or blank id (as the service does), and for one holding NUL or a lone
    surrogate, which no stored id holds (:func:`~memfrontier.core.text.check_id`)."""
    check_id(record_id, "record_id")
    from urllib.parse import quote

    return quote(clean_text(record_id), safe="").replace(".", "%2E")


#: verb -> how its JSON answer becomes the value ``Memory`` returns.
_PARSE = {
    "add": AddResult.model_validate,
    "search": lambda b: [Hit.model_validate(h) for h in b["hits"]],
    "ask": Answer.model_validate,
    "recall": Recall.model_validate,
    "records": lambda b: [Record.model_validate(r) for r in b["records"]],
    "build": BuildReport.model_validate,
    "get": lambda b: None if b is None else Record.model_validate(b),
    "delete": lambda b: b is not None,
    "delete_all": lambda b: b["deleted"],
    "usage": lambda b: b["by_stage"],
}


def _headers(api_key: str) -> dict:
    return {"Authorization": f"Bearer {api_key}"}


class MemoryClient:
    """Synchronous client: ``add``, ``search``, ``ask``, ``build``, ``get``, ``delete``,
    ``delete_all`` and ``usage`` (the tenant's totals by stage) with the parameters and defaults of
    :class:`memfrontier.Memory` (the service refuses ``all_scopes=True``).

    ``timeout_s`` bounds each request (``ask`` with a local model can take tens of seconds);
    ``transport`` is an ``httpx2`` transport (e.g. ``ASGITransport`` in tests).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 120.0, transport=None):
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport)

    def _do(self, verb: str, *args, **kw):
        call: _Call = getattr(_Calls, verb)(*args, **kw)
        resp = self._http.request(call.method, call.path, json=call.json, params=call.params)
        return _PARSE[verb](_body(resp, call))

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
        return self._do(
            "add",
            messages,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            session_id=session_id,
            timestamp=timestamp,
        )

    def search(
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
        return self._do(
            "search", query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, all_scopes=all_scopes, fold=fold
        )

    def ask(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str = "rag",
        strategy_options: dict[str, Any] | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
    ) -> Answer:
        return self._do(
            "ask",
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

    def recall(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str = "rag",
        strategy_options: dict[str, Any] | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
        max_context_tokens: int | None = None,
    ) -> Recall:
        return self._do(
            "recall",
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
            max_context_tokens=max_context_tokens,
        )

    def build(
        self,
        strategy: str = "rag",
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy_options: dict[str, Any] | None = None,
    ) -> BuildReport:
        return self._do(
            "build", strategy, user_id=user_id, agent_id=agent_id, run_id=run_id, strategy_options=strategy_options
        )

    def get(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> Record | None:
        return self._do("get", record_id, user_id=user_id, agent_id=agent_id, run_id=run_id)

    def records(
        self, *, user_id=None, agent_id=None, run_id=None, session_id: str | None = None, limit: int | None = None
    ) -> list[Record]:
        return self._do(
            "records", user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id, limit=limit
        )

    def delete(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> bool:
        return self._do("delete", record_id, user_id=user_id, agent_id=agent_id, run_id=run_id)

    def delete_all(self, *, user_id=None, agent_id=None, run_id=None) -> int:
        return self._do("delete_all", user_id=user_id, agent_id=agent_id, run_id=run_id)

    def usage(self) -> dict[str, dict[str, float]]:
        return self._do("usage")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "MemoryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncMemoryClient:
    """The asynchronous mirror of :class:`MemoryClient` (same methods, awaited)."""

    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 120.0, transport=None):
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    async def _do(self, verb: str, *args, **kw):
        call: _Call = getattr(_Calls, verb)(*args, **kw)
        resp = await self._http.request(call.method, call.path, json=call.json, params=call.params)
        return _PARSE[verb](_body(resp, call))

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
        return await self._do(
            "add",
            messages,
            user_id=user_id,
            agent_id=agent_id,
            run_id=run_id,
            session_id=session_id,
            timestamp=timestamp,
        )

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
        return await self._do(
            "search", query, user_id=user_id, agent_id=agent_id, run_id=run_id, k=k, all_scopes=all_scopes, fold=fold
        )

    async def ask(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str = "rag",
        strategy_options: dict[str, Any] | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
    ) -> Answer:
        return await self._do(
            "ask",
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

    async def recall(
        self,
        question: str,
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy: str = "rag",
        strategy_options: dict[str, Any] | None = None,
        preference: Preference | str | None = None,
        budget: Budget | Mapping | None = None,
        question_date: str | None = None,
        build: bool = False,
        all_scopes: bool = False,
        max_context_tokens: int | None = None,
    ) -> Recall:
        return await self._do(
            "recall",
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
            max_context_tokens=max_context_tokens,
        )

    async def build(
        self,
        strategy: str = "rag",
        *,
        user_id=None,
        agent_id=None,
        run_id=None,
        strategy_options: dict[str, Any] | None = None,
    ) -> BuildReport:
        return await self._do(
            "build", strategy, user_id=user_id, agent_id=agent_id, run_id=run_id, strategy_options=strategy_options
        )

    async def get(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> Record | None:
        return await self._do("get", record_id, user_id=user_id, agent_id=agent_id, run_id=run_id)

    async def records(
        self, *, user_id=None, agent_id=None, run_id=None, session_id: str | None = None, limit: int | None = None
    ) -> list[Record]:
        return await self._do(
            "records", user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id, limit=limit
        )

    async def delete(self, record_id: str, *, user_id=None, agent_id=None, run_id=None) -> bool:
        return await self._do("delete", record_id, user_id=user_id, agent_id=agent_id, run_id=run_id)

    async def delete_all(self, *, user_id=None, agent_id=None, run_id=None) -> int:
        return await self._do("delete_all", user_id=user_id, agent_id=agent_id, run_id=run_id)

    async def usage(self) -> dict[str, dict[str, float]]:
        return await self._do("usage")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncMemoryClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

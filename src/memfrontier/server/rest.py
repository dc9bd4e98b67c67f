"""``memfrontier serve``: the ``Memory`` verbs over HTTP (FastAPI + uvicorn), one tenant per API key.

Endpoints (JSON; every one but ``/healthz`` needs ``Authorization: Bearer <key>``):

==========================================  ======================================================
``POST   /v1/memories``                     add messages -> ``AddResult`` (added / skipped ids)
``DELETE /v1/memories?user_id=..``          delete_all of a scope -> ``{"deleted": n}``
``POST   /v1/search``                       top-k chunks -> ``{"hits": [Hit, ...]}``
``POST   /v1/ask``                          strategy, preference, budget -> ``Answer`` (text,
                                            evidence ids, usage by stage); ``build: true`` builds
                                            a strategy's missing view first (else 409)
``POST   /v1/build``                        build a strategy's view of a scope -> ``BuildReport``
                                            (construction usage, fallback shares per role)
``GET    /v1/records/{id}?user_id=..``      one record (404 when the scope has none)
``DELETE /v1/records/{id}?user_id=..``      delete it and what derives from it (404 when absent)
``GET    /v1/usage``                        the tenant's usage totals by stage
``GET    /healthz``                         liveness (no key)
==========================================  ======================================================

The OpenAPI schema is at ``/openapi.json`` (docs at ``/docs``).

Tenancy, the option policy, error codes and running several workers: ``docs/service.md``
("The REST contract").

Its length (over 500 lines): the endpoints, the error mapping and the four ASGI layers (a URL
that is UTF-8, body limit, keys, in-flight slots) of one app; the rules they apply are the facade's
(:mod:`memfrontier.api.rules`), the tenant scopes live in :mod:`.tenants` and the keys in :mod:`.keys`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..core.extras import MissingExtraError, require_extra

try:  # the 'serve' extra
    from fastapi import Depends, FastAPI, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ModuleNotFoundError as e:
    raise MissingExtraError("memfrontier serve", "serve", [e.name or "fastapi"]) from e

from ..api import Answer, AsyncMemory, BuildReport, Recall
from ..core.errors import ArtifactError, EmptyScopeError, RecordConflictError, StoreError, StoreUnavailableError
from ..core.fallbacks import FallbackError
from ..core.files import private_dir
from ..core.ledger import BudgetExceededError, Usage
from ..core.messages import check_network_images
from ..core.pricebook import UnpricedModelError
from ..core.text import clean_text
from ..core.types import Budget, Hit, Preference, Record
from ..llm import default_llm
from ..llm.base import LLMError
from ..store.base import AddResult
from ..store.postgres import is_postgres_url
from ..strategies import ViewNotBuiltError, check_strategy_name
from .keys import KeyStore, open_key_store
from .options import check_remote_options
from .tenants import client_scope, tenant_scope

SETTINGS_ENV = "MEMFRONTIER_SERVE_SETTINGS"
# 200 characters: three ASCII ids with the tenant prefix stay under the store's 1,024-byte scope key
# (memfrontier.store.records.MAX_KEY_BYTES); mostly non-ASCII ones may not, and the add is then a 422.
ScopeId = Annotated[str | None, Field(default=None, min_length=1, max_length=200)]
ScopeIdQ = Annotated[str | None, Query(min_length=1, max_length=200)]
#: A query or a question: a lone surrogate (a ``"\ud83d"`` escape) or a NUL becomes U+FFFD before
#: the string is checked, as on every other path (:func:`~memfrontier.core.text.clean_text`).
AskedText = Annotated[str, BeforeValidator(lambda v: clean_text(v) if isinstance(v, str) else v), Field(min_length=1)]


class ServeSettings(BaseModel):
    """What ``memfrontier serve`` runs with (also passed to each uvicorn worker as JSON in the
    ``MEMFRONTIER_SERVE_SETTINGS`` environment variable).

    Fields: ``store`` (the store ``Memory.open`` opens: a directory or a PostgreSQL URL),
    ``keys`` (the key store, :func:`~memfrontier.server.keys.open_key_store`: a SQLite file or a
    PostgreSQL URL), ``view_dir`` (a PostgreSQL store's view files; None for its default),
    ``llm`` / ``base_url`` / ``price_book`` / ``allow_unpriced`` / ``price_as`` (models for
    ``ask``, see :meth:`memfrontier.api.AsyncMemory.open`; ``llm`` defaults to
    :func:`memfrontier.llm.default_llm` when the settings are made), ``max_body_bytes`` (413 above it),
    ``max_in_flight`` (requests of one tenant at once across every worker sharing ``keys``; 429
    above it), ``router`` (the router file strategy ``auto`` routes with; None: ``auto`` is refused
    with 422). :func:`memfrontier.server.data.service_data` gives ``store``/``keys``/``view_dir``.
    """

    model_config = ConfigDict(extra="forbid")
    store: str
    keys: str
    view_dir: str | None = None
    llm: str = Field(default_factory=default_llm)
    base_url: str | None = None
    price_book: str | None = None
    allow_unpriced: bool = False
    price_as: str | None = None
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_in_flight: int = Field(default=8, ge=1, le=1024)
    router: str | None = None


# --- request bodies -----------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ScopeBody(_Body):
    user_id: ScopeId = None
    agent_id: ScopeId = None
    run_id: ScopeId = None


class AddBody(ScopeBody):
    """``messages``: a string, a chat dict or a list of them (see ``Memory.add``); an image part's
    url is an ``http(s):`` or ``data:`` URL (a local path is refused with 422,
    :func:`~memfrontier.core.messages.check_network_images`)."""

    messages: str | dict[str, Any] | list[Any]
    session_id: str = Field(default="default", min_length=1, max_length=200)
    timestamp: str | None = None


class SearchBody(ScopeBody):
    query: AskedText
    k: int = Field(default=10, ge=1, le=200)
    all_scopes: bool = False  # the clients mirror Memory; every scope is not offered over HTTP (422)
    fold: bool = True  # near-duplicate hits folded into the latest (Memory.search)


class BuildBody(ScopeBody):
    strategy: str = "rag"
    strategy_options: dict[str, Any] | None = None


class AskBody(BuildBody):
    question: AskedText
    preference: str | Preference | None = None
    budget: Budget | None = None
    question_date: str | None = None
    build: bool = False  # build a strategy's missing view first (MemoryCPT, MemPilot, AutoMEM)
    all_scopes: bool = False  # refused (422), as for search


class RecallBody(AskBody):
    max_context_tokens: int | None = Field(default=None, ge=1)


class SearchResult(BaseModel):
    hits: list[Hit]


class RecordList(BaseModel):
    records: list[Record]


class Deleted(BaseModel):
    deleted: int


class ErrorBody(BaseModel):
    error: str
    message: str
    usage: Usage | None = Field(None, description="422 budget: the question's usage up to the refusal.")


# --- the middle layers --------------------------------------------------------------------------
class BodyLimit:
    """ASGI middleware: refuse a body above ``limit`` bytes with 413: by ``Content-Length`` before
    reading, else (a chunked body) by reading it whole, up to the limit, before the app runs; the
    app then receives the buffered body."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    def _too_large(self) -> JSONResponse:
        return _error(413, "body_too_large", f"request body is larger than {self.limit} bytes")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._too_large()(scope, receive, send)
        parts, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            parts.append(message.get("body", b""))
            seen += len(parts[-1])
            if seen > self.limit:
                return await self._too_large()(scope, receive, send)
            more = message.get("more_body", False)
        body, replayed = b"".join(parts), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def url_not_utf8(raw_path: bytes, query_string: bytes) -> str | None:
    """Why a request's URL is refused, or None: its path, or a query parameter (``name=value``),
    whose bytes once percent-decoded are not UTF-8, named in its encoded form. The server would read
    such bytes with U+FFFD in their place, so ``/v1/records/%ED%A0%80?user_id=%ED%A0%80`` would read
    the records of the user ``"\ufffd\ufffd\ufffd"``."""
    parts = [("path", raw_path)] + [("query parameter", p) for p in query_string.split(b"&") if p]
    for what, raw in parts:
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            return (
                f"{what} {raw.decode('ascii', 'backslashreplace')!r} is not UTF-8 once percent-decoded "
                f"({e.reason}); ids and dates in a URL are UTF-8, percent-encoded"
            )
    return None


class Utf8Url:
    """ASGI middleware: refuse with 422 ``invalid`` a request whose raw path or query string is not
    UTF-8 once percent-decoded (:func:`url_not_utf8`), before any route reads it; every path and
    query parameter (ids, session ids, limits) is held to the rule a JSON body already is."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            why = url_not_utf8(scope.get("raw_path") or b"", scope.get("query_string") or b"")
            if why is not None:
                return await _error(422, "invalid", why)(scope, receive, send)
        return await self.app(scope, receive, send)


def _artifact_error(e: ArtifactError) -> JSONResponse:
    """500 for a file of the operator's that cannot serve the request (a router, the reranker, a
    checkpoint, model weights: :class:`~memfrontier.core.errors.ArtifactError`): logged with its
    message, which may name server paths; the caller is told whose it is, not where it is."""
    logging.getLogger(__name__).error("a server file cannot serve a request: %s", e)
    return _error(
        500,
        "server_file",
        "a file of this server's configuration (a router, reranker or model) cannot serve this "
        "request; its operator's log names the problem",
    )


def _error(status: int, kind: str, message: str, headers: dict | None = None, **extra) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message, **extra}, status_code=status, headers=headers)


def _budget_error(e: BudgetExceededError) -> JSONResponse:
    """422 ``budget``, with the question's usage up to the refusal (what it spent, the refusal's
    ``budget.call_refused.<role>`` event) when the facade attached it."""
    usage = {} if e.usage is None else {"usage": e.usage.model_dump(mode="json")}
    return _error(422, "budget", str(e), **usage)


class _Tenants:
    """The key store (keys, usage, in-flight slots) and the in-flight limit."""

    def __init__(self, keys: KeyStore, max_in_flight: int):
        self.keys = keys
        self.max_in_flight = max_in_flight


class Unauthorized(Exception):
    pass


class TooManyInFlight(Exception):
    pass


async def _in_thread(fn, *args):
    """``fn(*args)`` in a worker thread, off the event loop (the key store's calls block on its
    database and its slot lock). Run to its end even when the awaiting request is cancelled."""
    return await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, fn, *args))


async def _acquire(keys: KeyStore, name: str, limit: int):
    """:meth:`KeyStore.acquire` in a worker thread. A request cancelled while the thread takes the
    slot does not leave it held: the slot is released as soon as the thread returns it."""
    loop = asyncio.get_running_loop()
    taken = loop.run_in_executor(None, keys.acquire, name, limit)
    try:
        return await asyncio.shield(taken)
    except asyncio.CancelledError:

        def give_back(f) -> None:
            if not f.cancelled() and f.exception() is None and f.result() is not None:
                loop.run_in_executor(None, keys.release, f.result())

        taken.add_done_callback(give_back)
        raise


async def tenant(request: Request):
    """The caller's tenant (401 without a valid key), holding one of its in-flight slots for the
    request (429 when every slot is held, in any worker). The key store's calls run in worker
    threads; a slot taken is always released (in ``finally``, also for a cancelled request)."""
    t: _Tenants = request.app.state.tenants
    auth = request.headers.get("authorization", "")
    scheme, _, key = auth.partition(" ")
    name = await _in_thread(t.keys.authenticate, key.strip()) if scheme.lower() == "bearer" else None
    if name is None:
        raise Unauthorized()
    slot = await _acquire(t.keys, name, t.max_in_flight)
    if slot is None:
        raise TooManyInFlight(f"tenant has {t.max_in_flight} requests in flight; retry later")
    try:
        yield name
    finally:
        await _in_thread(t.keys.release, slot)


Tenant = Annotated[str, Depends(tenant)]


def _memory(request: Request) -> AsyncMemory:
    return request.app.state.memory


def _out_record(name: str, r: Record) -> Record:
    return r.model_copy(update={"scope": client_scope(name, r.scope)})


def _out_hit(name: str, h: Hit) -> Hit:
    return h.model_copy(update={"chunk": h.chunk.model_copy(update={"scope": client_scope(name, h.chunk.scope)})})


def _scope_kw(name: str, user_id, agent_id, run_id) -> dict:
    s = tenant_scope(name, user_id, agent_id, run_id)
    return {"user_id": s.user_id, "agent_id": s.agent_id, "run_id": s.run_id}


def _one_scope(all_scopes: bool) -> None:
    if all_scopes:
        raise ValueError("all_scopes: reading every scope is not offered over HTTP; name a user_id, agent_id or run_id")


async def _bill(request: Request, name: str, e: FallbackError) -> None:
    """Add a refused build's construction usage (``e.usage``, when known) to the tenant's totals."""
    usage = getattr(e, "usage", None)
    if usage is not None:
        await _in_thread(request.app.state.tenants.keys.record_usage, name, usage)


def _strategy_options(request: Request, name: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """The options a request's strategy runs with, under the service's option policy
    (:func:`~memfrontier.server.options.check_remote_options`: 422 for an unknown strategy, an
    option naming a file, a model or an endpoint, or a value selecting one the operator did not
    configure); the facade builds and keeps the strategy (:meth:`~memfrontier.api.AsyncMemory.strategy`,
    off the event loop). ``auto`` routes with the operator's router file (``ServeSettings.router``;
    ValueError, 422, when the server has none)."""
    check_strategy_name(name)
    check_remote_options(name, options)
    if name == "auto":
        settings: ServeSettings = request.app.state.settings
        if settings.router is None:
            raise ValueError(
                "strategy auto: this server has no router file; its operator starts it with "
                "`memfrontier serve --router FILE`"
            )
        options = {**(options or {}), "router": settings.router}
    return options


class NoQueryInAccessLog(logging.Filter):
    """Drops the query string from uvicorn's access-log lines (``client - "GET /path?q HTTP/1.1"
    200``): a key sent as ``?api_key=...`` (refused, but a permanent secret) never reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


def keep_queries_out_of_access_log() -> None:
    """Install :class:`NoQueryInAccessLog` on the ``uvicorn.access`` logger (once per process)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, NoQueryInAccessLog) for f in logger.filters):
        logger.addFilter(NoQueryInAccessLog())


def create_app(settings: ServeSettings, *, memory: AsyncMemory | None = None, keys: KeyStore | None = None) -> FastAPI:
    """The FastAPI application. ``memory`` / ``keys`` are opened from ``settings`` at start-up
    when not given (and then closed at shutdown). Query strings are kept out of the access log
    (:func:`keep_queries_out_of_access_log`)."""
    keep_queries_out_of_access_log()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        owned = []
        if memory is None:
            mem = await asyncio.to_thread(
                AsyncMemory.open,
                settings.store,
                llm=settings.llm,
                base_url=settings.base_url,
                price_book=settings.price_book,
                allow_unpriced=settings.allow_unpriced,
                price_as=settings.price_as,
                view_dir=settings.view_dir,
            )
            owned.append(mem)
        app.state.memory = memory or mem
        # Load the embedder (and the search indexes) before the first request, not during it: a search
        # in a scope no tenant can name (tenant names are non-empty, so no request's id starts with "/").
        await app.state.memory.search("warm-up", user_id="/warm-up", k=1)
        ks = keys or await asyncio.to_thread(open_key_store, settings.keys)
        if keys is None:
            owned.append(ks)
        app.state.tenants = _Tenants(ks, settings.max_in_flight)
        try:
            yield
        finally:
            for o in owned:
                o.close()

    app = FastAPI(
        title="memfrontier",
        version="1",
        lifespan=lifespan,
        description="Long-term memory for LLM agents: add, search, ask, delete; one tenant per API key.",
        responses={
            401: {"model": ErrorBody},
            413: {"model": ErrorBody},
            422: {"model": ErrorBody},
            429: {"model": ErrorBody},
            503: {"model": ErrorBody},
        },
    )
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(Utf8Url)  # added last, so it runs first: a URL is checked before a body is read
    app.state.settings = settings

    handlers = [
        (
            Unauthorized,
            lambda e: _error(
                401,
                "unauthorized",
                "a valid API key is required (Authorization: Bearer <key>)",
                {"WWW-Authenticate": "Bearer"},
            ),
        ),
        (TooManyInFlight, lambda e: _error(429, "too_many_requests", str(e), {"Retry-After": "1"})),
        (RecordConflictError, lambda e: _error(409, "conflict", str(e))),
        (ViewNotBuiltError, lambda e: _error(409, "view_not_built", str(e))),
        (EmptyScopeError, lambda e: _error(422, "empty_scope", str(e))),
        (FallbackError, lambda e: _error(422, "fallbacks", str(e))),
        (BudgetExceededError, _budget_error),
        (UnpricedModelError, lambda e: _error(500, "unpriced_model", str(e.args[0] if e.args else e))),
        (LLMError, lambda e: _error(502, "model_error", str(e))),
        (StoreUnavailableError, lambda e: _error(503, "store_unavailable", str(e), {"Retry-After": "1"})),
        (StoreError, lambda e: _error(503, "store_error", str(e))),
        (ArtifactError, _artifact_error),  # a ValueError, but the operator's to fix: before ValueError
        (ValueError, lambda e: _error(422, "invalid", str(e))),
        (Exception, lambda e: _error(500, "internal", "internal server error")),  # no trace reaches the client
    ]
    for exc, make in handlers:
        app.add_exception_handler(exc, lambda request, e, make=make: make(e))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        parts = []
        for err in e.errors():
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return _error(422, "invalid", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        return _error(e.status_code, "http", str(e.detail), getattr(e, "headers", None))

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"ok": True}

    @app.post("/v1/memories", response_model=AddResult, responses={409: {"model": ErrorBody}})
    async def add(body: AddBody, name: Tenant, request: Request) -> AddResult:
        check_network_images(body.messages)  # 422 for a local image path: the server reads no file for a tenant
        return await _memory(request).add(
            body.messages,
            session_id=body.session_id,
            timestamp=body.timestamp,
            **_scope_kw(name, body.user_id, body.agent_id, body.run_id),
        )

    @app.delete("/v1/memories", response_model=Deleted)
    async def delete_all(
        name: Tenant, request: Request, user_id: ScopeIdQ = None, agent_id: ScopeIdQ = None, run_id: ScopeIdQ = None
    ) -> Deleted:
        n = await _memory(request).delete_all(**_scope_kw(name, user_id, agent_id, run_id))
        return Deleted(deleted=n)

    @app.post("/v1/search", response_model=SearchResult)
    async def search(body: SearchBody, name: Tenant, request: Request) -> SearchResult:
        _one_scope(body.all_scopes)
        hits = await _memory(request).search(
            body.query, k=body.k, fold=body.fold, **_scope_kw(name, body.user_id, body.agent_id, body.run_id)
        )
        return SearchResult(hits=[_out_hit(name, h) for h in hits])

    @app.post(
        "/v1/ask",
        response_model=Answer,
        responses={409: {"model": ErrorBody}, 422: {"model": ErrorBody}, 502: {"model": ErrorBody}},
    )
    async def ask(body: AskBody, name: Tenant, request: Request) -> Answer:
        _one_scope(body.all_scopes)
        options = _strategy_options(request, body.strategy, body.strategy_options)
        mem = _memory(request)
        try:
            ans = await mem.ask(
                body.question,
                strategy=body.strategy,
                strategy_options=options,
                preference=body.preference,
                budget=body.budget,
                question_date=body.question_date,
                build=body.build,
                **_scope_kw(name, body.user_id, body.agent_id, body.run_id),
            )
        except FallbackError as e:  # the refused build's calls were made: they are billed
            await _bill(request, name, e)
            raise
        await _in_thread(request.app.state.tenants.keys.record_usage, name, ans.usage)
        return ans

    @app.post(
        "/v1/recall",
        response_model=Recall,
        responses={409: {"model": ErrorBody}, 422: {"model": ErrorBody}, 502: {"model": ErrorBody}},
    )
    async def recall(body: RecallBody, name: Tenant, request: Request) -> Recall:
        _one_scope(body.all_scopes)
        options = _strategy_options(request, body.strategy, body.strategy_options)
        try:
            got = await _memory(request).recall(
                body.question,
                strategy=body.strategy,
                strategy_options=options,
                preference=body.preference,
                budget=body.budget,
                question_date=body.question_date,
                build=body.build,
                max_context_tokens=body.max_context_tokens,
                **_scope_kw(name, body.user_id, body.agent_id, body.run_id),
            )
        except FallbackError as e:
            await _bill(request, name, e)
            raise
        await _in_thread(request.app.state.tenants.keys.record_usage, name, got.usage)
        return got

    @app.post("/v1/build", response_model=BuildReport, responses={422: {"model": ErrorBody}, 502: {"model": ErrorBody}})
    async def build(body: BuildBody, name: Tenant, request: Request) -> BuildReport:
        options = _strategy_options(request, body.strategy, body.strategy_options)
        try:
            report = await _memory(request).build(
                body.strategy, strategy_options=options, **_scope_kw(name, body.user_id, body.agent_id, body.run_id)
            )
        except FallbackError as e:
            await _bill(request, name, e)
            raise
        await _in_thread(
            request.app.state.tenants.keys.record_usage, name, Usage(by_stage={"construction": report.usage})
        )
        return report

    @app.get("/v1/records", response_model=RecordList)
    async def records(
        name: Tenant,
        request: Request,
        user_id: ScopeIdQ = None,
        agent_id: ScopeIdQ = None,
        run_id: ScopeIdQ = None,
        session_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        limit: Annotated[int | None, Query(ge=1)] = None,
    ) -> RecordList:
        found = await _memory(request).records(
            session_id=session_id, limit=limit, **_scope_kw(name, user_id, agent_id, run_id)
        )
        return RecordList(records=[_out_record(name, r) for r in found])

    @app.get("/v1/records/{record_id:path}", response_model=Record, responses={404: {"model": ErrorBody}})
    async def get(
        record_id: str,
        name: Tenant,
        request: Request,
        user_id: ScopeIdQ = None,
        agent_id: ScopeIdQ = None,
        run_id: ScopeIdQ = None,
    ) -> Record:
        r = await _memory(request).get(record_id, **_scope_kw(name, user_id, agent_id, run_id))
        if r is None:
            return _error(404, "not_found", f"no record {record_id!r} in this scope")
        return _out_record(name, r)

    @app.delete("/v1/records/{record_id:path}", response_model=Deleted, responses={404: {"model": ErrorBody}})
    async def delete(
        record_id: str,
        name: Tenant,
        request: Request,
        user_id: ScopeIdQ = None,
        agent_id: ScopeIdQ = None,
        run_id: ScopeIdQ = None,
    ) -> Deleted:
        if not await _memory(request).delete(record_id, **_scope_kw(name, user_id, agent_id, run_id)):
            return _error(404, "not_found", f"no record {record_id!r} in this scope")
        return Deleted(deleted=1)

    @app.get("/v1/usage")
    async def usage(name: Tenant, request: Request) -> dict:
        """The tenant's usage totals by stage (calls, tokens, usd, proxy_s, wall_s)."""
        return {"tenant": name, "by_stage": await _in_thread(request.app.state.tenants.keys.usage, name)}

    return app


def app_from_env() -> FastAPI:
    """The application of a uvicorn worker: settings from ``$MEMFRONTIER_SERVE_SETTINGS``."""
    raw = os.environ.get(SETTINGS_ENV)
    if not raw:
        raise RuntimeError(f"{SETTINGS_ENV} is not set; start the service with `memfrontier serve`")
    if os.environ.get("MEMFRONTIER_OTEL", "").strip() not in ("", "0"):  # each worker traces its questions
        from ..integrations.otel import instrument_from_env

        instrument_from_env()
    return create_app(ServeSettings.model_validate(json.loads(raw)))


@contextmanager
def exit_on_signals() -> Iterator[None]:
    """While open, SIGTERM and SIGINT raise ``SystemExit(0)`` in the main thread, so ``finally``
    blocks and context managers run (stopping an embedded PostgreSQL server). uvicorn installs its
    own handlers while it serves and, after its graceful shutdown, raises the signal it received
    again: it then lands here. The previous handlers are restored on exit."""

    def stop(signum, frame):
        raise SystemExit(0)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Run the service under uvicorn (``workers`` processes sharing the store and the key store;
    each worker reads ``settings`` from ``$MEMFRONTIER_SERVE_SETTINGS``, so a database started by
    the caller, e.g. the embedded PostgreSQL server, is reached by every worker at the same URL)."""
    require_extra("serve", "uvicorn", feature="memfrontier serve")
    import uvicorn

    if not is_postgres_url(settings.keys):
        private_dir(Path(settings.keys).parent)
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
    if workers == 1:
        uvicorn.run(create_app(settings), host=host, port=port)
    else:
        uvicorn.run("memfrontier.server.rest:app_from_env", factory=True, host=host, port=port, workers=workers)

"""``memfrontier mcp --store PATH|URL``: the memory over the Model Context Protocol (official ``mcp``
SDK, ``MCPServer``), on stdio or streamable HTTP bound to a loopback address.

Tools (AutoMEM's memory tools, arXiv 2606.04315, Sec. 5, plus hybrid search and a full answer):

* ``search(query, k)`` - hybrid dense + BM25 search fused by RRF (k=60); top-k chunks.
* ``rg(patterns, ignore_case)`` - regular expressions over the scope's raw records.
* ``read(ids)`` - full records by id.
* ``index_query(cypher)`` - one read-only Cypher query on the scope's graph index.
* ``ask(question, strategy, preference, budget, options, build)`` - an answer with its usage (tokens, USD);
  ``options`` are the strategy config's values (``memfrontier config STRATEGY``) under the
  service's option policy (:func:`~memfrontier.server.options.check_remote_options`, as REST);
  ``build`` builds the strategy's missing view first. Refusals are the facade's
  (:meth:`memfrontier.api.AsyncMemory.ask`): an empty scope, an unbuilt view, a build above the
  fallback threshold, with its messages.

Every tool takes the caller's scope (``user_id`` / ``agent_id`` / ``run_id``, at least one) and
sees only that scope's records. A server started with a pinned scope (``--user-id`` ...) refuses
calls that name another value for a pinned field and fills the pinned fields in. Each tool's
arguments are one pydantic model (``extra="forbid"``, strict: ``k=2.5``, ``k="2"``, ``k=true`` and
unknown names are refused) checked before the tool runs; the message names the parameter. A bad
argument or a known error (budget, unpriced model, store, model) comes back as an error result
(``isError``) with its message, never as a crash or a bare "Error executing tool".

Every reply is bounded, one rule for every tool (:func:`fit_reply`): at most ``reply_max_bytes``
(default :data:`REPLY_MAX_BYTES`) of JSON. A longer one is cut, its texts to previews and, if
need be, the tail of its lists left out, and says so (``truncated: true``, ``omitted``); the record
ids of what it shows stay, so ``read`` fetches a record.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import explain_validation
from ..core.extras import require_extra
from ..core.types import Budget, Preference, Scope, missing_scope_message
from ..core.version import __version__
from ..strategies.automem.actions import (
    CYPHER_MAX_CHARS,
    MAX_IDS,
    MAX_PATTERNS,
    PATTERN_MAX_CHARS,
)
from ..strategies.automem.corpus import ScopedCorpus
from ..strategies.automem.tools import ToolLimits, index_query, read, rg

require_extra("mcp", "mcp", feature="memfrontier mcp")  # imported by the tools' server below

LOOPBACK_NAMES = ("localhost",)
#: Strategies the MCP ``ask`` tool answers with.
AskStrategy = Literal["rag", "rag-turns", "rag-turns-rr", "longctx", "automem"]

ScopeField = Annotated[str | None, Field(default=None, min_length=1, max_length=200)]

#: The most a tool's reply may be, in bytes of its JSON as the tool's text block holds it (UTF-8,
#: indented): about 4,000 tokens, far under what MCP hosts accept in one result.
REPLY_MAX_BYTES = 16_000
#: The keys whose values :func:`fit_reply` cuts (a hit's or an observation's ``text``, an ``answer``).
TEXT_KEYS = ("text", "answer")
#: The shortest preview :func:`fit_reply` cuts a text to before it leaves list items out.
PREVIEW_MIN_CHARS = 80


def reply_bytes(reply: dict) -> int:
    """The size of ``reply`` as a tool's text block holds it: UTF-8 bytes of its indented JSON."""
    return len(pydantic_core.to_json(reply, indent=2, fallback=str))


def _texts(node) -> list[tuple[dict, str]]:
    """``(dict, key)`` of every string under a :data:`TEXT_KEYS` key in ``node``, at any depth."""
    if isinstance(node, list):
        return [t for x in node for t in _texts(x)]
    if not isinstance(node, dict):
        return []
    here = [(node, k) for k in TEXT_KEYS if isinstance(node.get(k), str)]
    return here + [t for v in node.values() if isinstance(v, (dict, list)) for t in _texts(v)]


def _preview(text: str, max_chars: int) -> str:
    """``text`` whole when it fits ``max_chars``; else cut at the last space in its second half (at
    ``max_chars`` when there is none), ending ``" ..."`` as ``read`` marks a cut record."""
    if len(text) <= max_chars:
        return text
    cut = text.rfind(" ", max_chars // 2, max_chars + 1)
    return text[: cut if cut > 0 else max_chars].rstrip() + " ..."


def fit_reply(reply: dict, max_bytes: int = REPLY_MAX_BYTES) -> dict:
    """``reply`` itself when :func:`reply_bytes` is at most ``max_bytes``; else a copy that fits,
    with ``truncated: true``. Its texts (:data:`TEXT_KEYS`) are cut to the longest common preview
    length that fits (:func:`_preview`); while even :data:`PREVIEW_MIN_CHARS` does not fit, the last
    item of its longest list (``hits``, ``record_ids``, ``evidence_ids``) is left out, counted by
    its key in ``omitted``. What is shown keeps its record ids (a hit's are never cut), for ``read``."""
    if reply_bytes(reply) <= max_bytes:
        return reply
    out = {**copy.deepcopy(reply), "truncated": True}
    originals = {(id(node), key): node[key] for node, key in _texts(out)}
    omitted: dict[str, int] = {}

    def cut(n: int) -> dict:  # every text to a preview of n characters
        for node, key in _texts(out):
            node[key] = _preview(originals[id(node), key], n)
        return {**out, **({"omitted": omitted} if omitted else {})}

    while reply_bytes(cut(PREVIEW_MIN_CHARS)) > max_bytes and (
        lists := [(k, v) for k, v in out.items() if isinstance(v, list) and v]
    ):
        key, longest = max(lists, key=lambda kv: len(kv[1]))
        longest.pop()
        omitted[key] = omitted.get(key, 0) + 1
    lo, hi = PREVIEW_MIN_CHARS, max((len(v) for v in originals.values()), default=PREVIEW_MIN_CHARS)
    while lo < hi:  # the longest preview that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if reply_bytes(cut(mid)) <= max_bytes else (lo, mid - 1)
    return cut(lo)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MemoryService:
    """The store and models behind the MCP tools (opened lazily on the first call).

    Args:
        store: an existing store directory, or a ``postgresql://`` URL (kept as a string: a
            ``Path`` would collapse its ``//`` and open an empty SQLite store in its place); its
            view files are in the default folder (:func:`~memfrontier.store.postgres.default_directory`).
        pinned: the scope every call is confined to (None fields are free).
        llm / base_url / price_book / allow_unpriced / price_as: models for ``ask`` (see
            :meth:`memfrontier.api.AsyncMemory.open`; ``llm`` None = its default).
        limits: caps of ``rg`` / ``read`` / ``index_query``.
        reply_max_bytes: the bound of every tool's reply (:func:`fit_reply`).
    """

    def __init__(
        self,
        store: str | Path,
        *,
        pinned: Scope | None = None,
        llm: str | None = None,
        base_url: str | None = None,
        price_book: str | Path | None = None,
        allow_unpriced: bool = False,
        price_as: str | None = None,
        limits: ToolLimits | None = None,
        reply_max_bytes: int = REPLY_MAX_BYTES,
    ):
        from ..store.postgres import is_postgres_url

        self.store_path = store if is_postgres_url(store) else Path(store)
        self.pinned = pinned or Scope()
        self.open_kwargs = {
            "llm": llm,  # None: AsyncMemory.open's default (memfrontier.llm.default_llm)
            "base_url": base_url,
            "price_book": price_book,
            "allow_unpriced": allow_unpriced,
            "price_as": price_as,
        }
        self.limits = limits or ToolLimits()
        self.reply_max_bytes = reply_max_bytes
        self._mem = None
        self._lock = asyncio.Lock()

    async def memory(self):
        async with self._lock:
            if self._mem is None:
                from ..api import AsyncMemory

                self._mem = await asyncio.to_thread(AsyncMemory.open, self.store_path, **self.open_kwargs)
            return self._mem

    def scope(self, user_id: str | None, agent_id: str | None, run_id: str | None) -> Scope:
        """The effective scope of a call; raises ValueError when none is given or a pinned field
        is contradicted."""
        given = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
        out = {}
        for k, v in given.items():
            pin = getattr(self.pinned, k)
            if pin is not None and v is not None and v != pin:
                raise ValueError(f"{k}={v!r} is outside this server's scope")
            out[k] = pin if pin is not None else v
        if all(v is None for v in out.values()):
            raise ValueError(missing_scope_message("every tool"))
        return Scope(**out)

    async def corpus(self, scope: Scope) -> ScopedCorpus:
        mem = await self.memory()
        return await asyncio.to_thread(ScopedCorpus, mem.store, scope)

    def graph(self, store, scope: Scope):
        """The scope's Ladybug graph in ``store`` opened read-only, or None when none was built."""
        from ..strategies.automem.graph import GRAPH_VIEW, graph_exists, open_graph

        root = store.view_dir(GRAPH_VIEW)
        if not graph_exists("ladybug", root, scope):
            return None
        return open_graph("ladybug", root, scope, read_only=True)

    @staticmethod
    def strategy_config(name: str, options: dict[str, Any] | None = None):
        """The config the strategy ``name`` runs with ``options`` under the service's option policy
        (:func:`~memfrontier.server.options.check_remote_options`); raises ValueError naming a
        rejected option, before the store opens. The facade builds and keeps the strategy
        (:meth:`~memfrontier.api.AsyncMemory.strategy`, off the event loop)."""
        from ..strategies import strategy_config
        from .options import check_remote_options

        check_remote_options(name, options)
        return strategy_config(name, options)

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()


class ScopeArgs(BaseModel):
    """The caller's scope, taken by every tool (at least one id; pinned fields are filled in).
    Tool arguments are strict: unknown names are refused, a number is never a bool or a string."""

    model_config = ConfigDict(extra="forbid", strict=True)

    user_id: ScopeField = None
    agent_id: ScopeField = None
    run_id: ScopeField = None


class SearchArgs(ScopeArgs):
    query: Annotated[str, Field(min_length=1, max_length=2000, description="What to look for.")]
    k: Annotated[int, Field(ge=1, le=50, description="Chunks returned (1-50).")] = 5


class RgArgs(ScopeArgs):
    patterns: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=PATTERN_MAX_CHARS * 2)]],
        Field(min_length=1, max_length=MAX_PATTERNS, description="Regular expressions (any may match)."),
    ]
    ignore_case: bool = True


class ReadArgs(ScopeArgs):
    ids: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=200)]],
        Field(min_length=1, max_length=MAX_IDS, description="Record ids of the scope."),
    ]


class IndexQueryArgs(ScopeArgs):
    cypher: Annotated[
        str, Field(min_length=1, max_length=CYPHER_MAX_CHARS * 5, description="One read-only Cypher query.")
    ]


class AskArgs(ScopeArgs):
    question: Annotated[str, Field(min_length=1, max_length=2000)]
    strategy: AskStrategy = "rag"
    preference: Annotated[
        str | Preference | None,
        Field(
            description="perf | balanced | cost, or weights {quality, cost, latency}: the trade-off a strategy "
            "that reads one weighs (a configuration's own preference wins)."
        ),
    ] = None
    budget: Annotated[
        Budget | None,
        Field(
            description="Hard caps of this question, each optional and >= 0: {max_usd, max_tokens (input + output "
            "of every call), max_proxy_s (latency-proxy seconds)}, as REST takes them."
        ),
    ] = None
    options: Annotated[
        dict[str, Any] | None,
        Field(description='Options of the strategy\'s config (see `memfrontier config STRATEGY`), e.g. {"k": 3}.'),
    ] = None
    build: Annotated[
        bool,
        Field(
            description="Build the strategy's memory view of the scope first when it "
            "was never built (its cost is reported)."
        ),
    ] = False
    question_date: Annotated[
        str | None,
        Field(
            max_length=64,
            description="When the question is asked (ISO 8601, e.g. 2024-10-01T12:00); default now. "
            "The answer reads it ('22 days ago', what is current).",
        ),
    ] = None


def _tool_errors() -> tuple[type[BaseException], ...]:
    """Errors a tool reports with their own message (the caller can act on them)."""
    from ..answerer import BudgetExceededError
    from ..core.errors import StoreError
    from ..core.fallbacks import FallbackError
    from ..core.pricebook import UnpricedModelError
    from ..llm.base import LLMError
    from ..strategies import ViewNotBuiltError

    return (BudgetExceededError, UnpricedModelError, LLMError, StoreError, ViewNotBuiltError, FallbackError, ValueError)


def build_server(service: MemoryService):
    """An ``MCPServer`` with the five tools bound to ``service``. Each tool's arguments are one
    pydantic model (:class:`SearchArgs`, ...), checked before the tool runs; a known error
    (budget, unpriced model, model, store, unbuilt view, bad value) comes back with its message;
    every reply is held to ``service.reply_max_bytes`` (:func:`fit_reply`)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    arg_models: dict[str, type[ScopeArgs]] = {}

    class StrictServer(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            model = arg_models.get(name)
            if model is not None:
                try:
                    model.model_validate(arguments or {})
                except ValidationError as e:
                    raise ToolError(explain_validation(name, e, "unknown parameter")) from None
            return await super().call_tool(name, arguments, context)

    server = StrictServer(
        "memfrontier",
        version=__version__,
        log_level="WARNING",
        instructions=(
            "Long-term memory. Every tool needs a scope (user_id, agent_id or run_id). Use search for "
            "relevant passages, rg for exact words or counts, read for full records, index_query for "
            "Cypher over the graph index (read-only), ask for an answer with its cost."
        ),
    )

    def scoped_tool(model: type[ScopeArgs], description: str):
        """Register ``handler(args, scope)`` as the tool named after it, with ``model``'s fields as
        its parameters; the scope is resolved (and checked against the pinned one) and the reply
        bounded (:func:`fit_reply`) once, here."""

        def deco(handler):
            async def tool(**kwargs) -> dict[str, Any]:
                args = model.model_validate(kwargs, strict=False)
                try:
                    scope = service.scope(args.user_id, args.agent_id, args.run_id)
                    return fit_reply(await handler(args, scope), service.reply_max_bytes)
                except ToolError:
                    raise
                except _tool_errors() as e:
                    raise ToolError(str(e)) from None

            tool.__name__ = handler.__name__
            tool.__signature__ = inspect.Signature(
                [
                    inspect.Parameter(
                        name,
                        inspect.Parameter.KEYWORD_ONLY,
                        default=inspect.Parameter.empty if f.is_required() else f.default,
                        annotation=Annotated[(f.annotation, *f.metadata, Field(description=f.description))],
                    )
                    for name, f in model.model_fields.items()
                ],
                return_annotation=dict[str, Any],
            )
            arg_models[handler.__name__] = model
            server.tool(structured_output=True, description=description)(tool)
            return handler

        return deco

    def result(obs) -> dict[str, Any]:
        if not obs.ok:
            raise ToolError(obs.text.removeprefix("error: "))
        return {"text": obs.text, "record_ids": obs.record_ids, "truncated": obs.truncated}

    @scoped_tool(SearchArgs, "Hybrid (dense + BM25, RRF) search over the scope's memory; returns the top-k chunks.")
    async def search(args: SearchArgs, scope: Scope) -> dict[str, Any]:
        mem = await service.memory()  # the facade's search: its checks, its recipe, copies folded
        hits = await mem.search(
            args.query, user_id=scope.user_id, agent_id=scope.agent_id, run_id=scope.run_id, k=args.k
        )
        return {
            "hits": [
                {
                    "chunk_id": h.chunk.id,
                    "score": h.score,
                    "session_id": h.chunk.session_id,
                    "timestamp": h.chunk.timestamp,
                    "text": h.chunk.text,
                    "record_ids": h.chunk.record_ids,
                    "folded": h.folded,  # the near-duplicate chunks this one (their latest) stands for
                }
                for h in hits
            ],
            "truncated": False,  # fit_reply sets it when the hits are cut to fit
        }

    @scoped_tool(
        RgArgs,
        "Regular expressions over the scope's raw records: how many records match and the "
        "matching lines with record id and date.",
    )
    async def rg(args: RgArgs, scope: Scope) -> dict[str, Any]:
        corpus = await service.corpus(scope)
        return result(await asyncio.to_thread(_rg, corpus, args.patterns, args.ignore_case, service.limits))

    @scoped_tool(ReadArgs, "Full records of the scope by id.")
    async def read(args: ReadArgs, scope: Scope) -> dict[str, Any]:
        corpus = await service.corpus(scope)
        return result(await asyncio.to_thread(_read, corpus, args.ids, service.limits))

    @scoped_tool(
        IndexQueryArgs,
        "One read-only Cypher query on the scope's graph index (Memory, Speaker, Topic; "
        "SAID_BY, OF_TOPIC, FOLLOWS). Writes are rejected.",
    )
    async def index_query(args: IndexQueryArgs, scope: Scope) -> dict[str, Any]:
        corpus = await service.corpus(scope)
        graph = service.graph((await service.memory()).store, scope)
        try:
            return result(await asyncio.to_thread(_index_query, graph, args.cypher, corpus, service.limits))
        finally:
            if graph is not None:
                graph.close()

    @scoped_tool(
        AskArgs,
        "Answer a question from the scope's memory; returns the answer, its evidence ids "
        "and usage (calls, tokens, USD). A strategy whose view was never built is refused unless build "
        "is true; a scope with no records is refused.",
    )
    async def ask(args: AskArgs, scope: Scope) -> dict[str, Any]:
        mem = await service.memory()
        cfg = service.strategy_config(args.strategy, args.options)
        ans = await mem.ask(
            args.question,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            run_id=scope.run_id,
            strategy=args.strategy,
            strategy_options=cfg,
            preference=args.preference,
            budget=args.budget,
            question_date=args.question_date,
            build=args.build,
        )
        q = ans.usage.query
        return {
            "answer": ans.text,
            "evidence_ids": ans.evidence_ids,
            "strategy": ans.strategy,
            "question_date": ans.question_date,
            "usage": {
                "calls": q.calls,
                "input_tokens": q.input_tokens,
                "output_tokens": q.output_tokens,
                "usd": q.usd,
                "proxy_s": q.proxy_s,
                "wall_s": ans.wall_s,
                "events": ans.usage.events,
            },
            "truncated": False,  # fit_reply sets it when the reply is cut to fit
            **(
                {"build": {"usage": ans.build.usage.model_dump(), "fallbacks": ans.build.fallbacks}}
                if ans.build
                else {}
            ),
        }

    return server


# The tool functions under other names (the MCP tool functions above shadow them).
_rg, _read, _index_query = rg, read, index_query


def transport_security(host: str, port: int, allowed_hosts: Sequence[str] = ()):
    """The HTTP transport's DNS-rebinding protection for a server bound to ``host:port``: a request
    is served only when its ``Host`` header names the bound address (or ``localhost`` for a
    loopback bind) or one of ``allowed_hosts`` (``name`` or ``name:port``), and its ``Origin``, when
    present, is ``http://`` one of those. Without it, a web page whose name resolves to the bound
    address (DNS rebinding) could call the tools from a browser; the SDK checks only 127.0.0.1 and
    localhost by itself."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = [host, *(("localhost",) if is_loopback(host) and host != "localhost" else ()), *allowed_hosts]
    bracketed = [f"[{n}]" if ":" in n and not n.startswith("[") and _is_ip(n) else n for n in names]
    hosts = sorted({h if _has_port(h) else f"{h}:{port}" for h in bracketed})
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=[f"http://{h}" for h in hosts]
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


def _has_port(name: str) -> bool:
    """``name:port`` or ``[v6]:port`` (a bare IPv6 literal has colons but no port)."""
    if name.startswith("["):
        return "]:" in name
    return ":" in name and not _is_ip(name)


def serve(
    store: str | Path,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    allowed_hosts: Sequence[str] = (),
    **service_kwargs,
) -> None:
    """Run the server until the client disconnects (stdio) or the process is stopped (HTTP). Over
    HTTP, requests must name the bound address (:func:`transport_security`; ``allowed_hosts`` adds
    names, e.g. a reverse proxy's).

    Raises ValueError for an unknown transport or a host that is not a loopback address.
    """
    if transport not in ("stdio", "http"):
        raise ValueError(f"unknown transport {transport!r}; choose stdio or http")
    if transport == "http" and not is_loopback(host):
        raise ValueError(f"--host {host!r} is not a loopback address; the MCP server only binds loopback")
    service = MemoryService(store, **service_kwargs)
    server = build_server(service)
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run(
                "streamable-http",
                host=host,
                port=port,
                transport_security=transport_security(host, port, allowed_hosts),
            )
    finally:
        service.close()

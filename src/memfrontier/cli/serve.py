"""Commands that serve: ``serve-model`` (a local model), ``mcp``, ``serve`` (REST) and ``keys``."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from .app import (
    OPT_ALLOW_UNPRICED,
    OPT_BASE_URL,
    OPT_LLM,
    OPT_PRICE_AS,
    OPT_PRICE_BOOK,
    _fail,
    _known_errors,
    app,
    err,
    keys_app,
    known_errors,
)
from .options import _check_router, _existing_store


def _check_llm(llm: str, base_url: str | None) -> None:
    """Refuse to start a server whose ``ask`` model cannot be built (an unknown spec, an embedded
    model not installed: the message says how to install it) rather than failing every ``ask``."""
    from ..llm import check_llm_spec

    with known_errors():
        check_llm_spec(llm, base_url)


@app.command("serve-model")
def serve_model_cmd(
    name: str = typer.Argument(
        ...,
        help="A local model: gemma-3-270m | qwen2.5-1.5b | qwen2.5-0.5b (see `python -m memfrontier.llm.local_models list`).",
    ),
    port: int = typer.Option(8011, min=1, max=65535, help="Port on 127.0.0.1."),
    n_ctx: Optional[int] = typer.Option(None, min=256, help="Context window in tokens (default: the model's, 8192)."),
):
    """Serve a local model OpenAI-compatibly on 127.0.0.1 (llama_cpp.server), for
    `--llm openai:MODEL_ID --base-url http://127.0.0.1:PORT/v1`."""
    from ..llm.embedded import serve
    from ..llm.local_models import resolve_local, serve_argv

    try:
        model = resolve_local(name)
        argv = serve_argv(model, port, n_ctx=n_ctx)
    except _known_errors() as e:
        _fail(str(e))
    err.print(
        f"serving {model.name} as {model.model_id!r} on http://127.0.0.1:{port}/v1 -- use "
        f"--llm openai:{model.model_id} --base-url http://127.0.0.1:{port}/v1"
    )
    serve(argv)


@app.command("mcp")
def mcp_cmd(
    store: str = typer.Option(..., help="Store directory or postgresql:// URL to serve."),
    transport: str = typer.Option("stdio", help="stdio | http (streamable HTTP, loopback only)."),
    host: str = typer.Option("127.0.0.1", help="HTTP: a loopback address to bind."),
    port: int = typer.Option(8765, min=1, max=65535, help="HTTP: port."),
    allowed_host: Optional[list[str]] = typer.Option(
        None,
        "--allowed-host",
        help="HTTP: another Host name requests may carry (repeatable; e.g. a proxy's name:port). Requests naming any other host or origin are refused.",
    ),
    user_id: Optional[str] = typer.Option(None, help="Pin every call to this user (calls naming another are refused)."),
    agent_id: Optional[str] = typer.Option(None, help="Pin every call to this agent."),
    run_id: Optional[str] = typer.Option(None, help="Pin every call to this run."),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
):
    """Serve the memory over MCP: tools search, rg, read, index_query, ask (each scoped)."""
    from ..core.types import Scope

    with known_errors():  # names the 'mcp' extra when it is missing
        from ..server.mcp import is_loopback, serve

    if transport not in ("stdio", "http"):
        _fail(f"unknown --transport {transport!r}; choose stdio or http")
    if transport == "http" and not is_loopback(host):
        _fail(f"--host {host!r} is not a loopback address")
    _check_llm(llm, base_url)
    serve(
        _existing_store(store),
        transport=transport,
        host=host,
        port=port,
        allowed_hosts=tuple(allowed_host or ()),
        pinned=Scope(user_id=user_id, agent_id=agent_id, run_id=run_id),
        llm=llm,
        base_url=base_url,
        price_book=price_book,
        allow_unpriced=allow_unpriced,
        price_as=price_as,
    )


@app.command("serve")
def serve_cmd(
    data_dir: Path = typer.Option(
        Path("memfrontier-data"),
        help="Service data directory: by default the embedded PostgreSQL server's data (DATA_DIR/pg: store, keys, usage) and the view files (DATA_DIR/views); with --store DIR, the key file DATA_DIR/keys.db.",
    ),
    store: Optional[str] = typer.Option(
        None,
        help="Serve another store than the embedded PostgreSQL one: a postgresql:// URL (keys and usage in the same database) or a SQLite store directory (keys and usage in DATA_DIR/keys.db).",
    ),
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port."),
    workers: int = typer.Option(1, min=1, help="uvicorn worker processes sharing the store and the keys."),
    max_body_bytes: int = typer.Option(1 << 20, min=1024, help="Largest request body (413 above it)."),
    max_in_flight: int = typer.Option(
        8, min=1, max=1024, help="Requests of one tenant running at once, across all workers (429 above it)."
    ),
    llm: str = OPT_LLM,
    base_url: Optional[str] = OPT_BASE_URL,
    price_book: Optional[Path] = OPT_PRICE_BOOK,
    allow_unpriced: bool = OPT_ALLOW_UNPRICED,
    price_as: Optional[str] = OPT_PRICE_AS,
    router: Optional[Path] = typer.Option(
        None,
        help="The router file of strategy `auto` (from `train strategy-router`); without it the service refuses strategy auto.",
    ),
):
    """Serve the memory over HTTP (REST, OpenAPI at /docs): add, search, ask, get/delete, usage; one tenant per API key
    (create keys with `memfrontier keys create TENANT`, same --data-dir/--store). By default it starts an embedded
    PostgreSQL server on DATA_DIR/pg (joined if already running) and stops it on exit (ctrl-c, SIGTERM)."""
    from contextlib import ExitStack

    from ..server.data import service_data

    with known_errors():  # names the 'serve' extra when it is missing
        from ..server.rest import ServeSettings, exit_on_signals, serve

    if router is not None:
        _check_router(router, "auto")
    _check_llm(llm, base_url)

    with ExitStack() as stack:
        stack.enter_context(exit_on_signals())
        with known_errors():
            data = stack.enter_context(service_data(data_dir, store))
        settings = ServeSettings(
            store=data.store,
            keys=data.keys,
            view_dir=data.view_dir,
            llm=llm,
            base_url=base_url,
            price_book=None if price_book is None else str(price_book),
            allow_unpriced=allow_unpriced,
            price_as=price_as,
            max_body_bytes=max_body_bytes,
            max_in_flight=max_in_flight,
            router=None if router is None else str(router),
        )
        err.print(f"serving on http://{host}:{port} (OpenAPI: /docs); {data.description}")
        serve(settings, host=host, port=port, workers=workers)


OPT_DATA_DIR = typer.Option(
    Path("memfrontier-data"), help="The service data directory (as given to `memfrontier serve`)."
)
OPT_KEYS_STORE = typer.Option(
    None,
    "--store",
    help="As given to `memfrontier serve --store`: a postgresql:// URL (keys in that database) or a SQLite store directory (keys in DATA_DIR/keys.db).",
)


@contextmanager
def _key_store(data_dir: Path, store: Optional[str]):
    """The key store the service of ``--data-dir`` / ``--store`` uses (see memfrontier.server.data)."""
    from ..server.data import service_data
    from ..server.keys import open_key_store

    with known_errors(), service_data(data_dir, store) as data:
        ks = open_key_store(data.keys)
        try:
            yield ks
        finally:
            ks.close()


@keys_app.command("create")
def keys_create_cmd(
    tenant: str = typer.Argument(..., help="Tenant name: lower-case letters, digits, '_' and '-'."),
    data_dir: Path = OPT_DATA_DIR,
    store: Optional[str] = OPT_KEYS_STORE,
):
    """Create a key for TENANT and print it once (only its hash is stored)."""
    with _key_store(data_dir, store) as ks:
        key_id, key = ks.create(tenant)
    err.print(f"key {key_id} for tenant {tenant!r} (shown once):")
    print(key)


@keys_app.command("revoke")
def keys_revoke_cmd(
    key_id: str = typer.Argument(..., help="The key's id (see `memfrontier keys list`)."),
    data_dir: Path = OPT_DATA_DIR,
    store: Optional[str] = OPT_KEYS_STORE,
):
    """Revoke a key: every worker refuses it from its next request."""
    with _key_store(data_dir, store) as ks:
        revoked = ks.revoke(key_id)
    if not revoked:
        _fail(f"no active key {key_id!r}")
    err.print(f"revoked {key_id}")


@keys_app.command("list")
def keys_list_cmd(
    tenant: Optional[str] = typer.Option(None, help="Only this tenant's keys."),
    data_dir: Path = OPT_DATA_DIR,
    store: Optional[str] = OPT_KEYS_STORE,
):
    """List keys (id, tenant, created, revoked); secrets are never shown."""
    with _key_store(data_dir, store) as ks:
        keys = ks.list(tenant)
    for k in keys:
        print(json.dumps(k.model_dump()))

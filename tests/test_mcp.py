"""``memfrontier mcp``: a real server process (stdio, and streamable HTTP on loopback) driven by the
official ``mcp`` client SDK: list tools, call search / rg / read / index_query, argument
validation and scope isolation."""

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest
from fakes import ScriptedClient
from mcp import Client, StdioServerParameters
from test_automem_tools import RUN, build_store

from memfrontier import Memory
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.server.mcp import is_loopback

pytestmark = pytest.mark.slow  # starts server processes (MiniLM loads in them)

ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcp") / "store"
    build_store(path, MiniLMEmbedder()).close()
    return path


def stdio(store_path, *extra):
    return Client(
        StdioServerParameters(
            command=sys.executable, args=["-m", "memfrontier.cli", "mcp", "--store", str(store_path), *extra], env=ENV
        ),
        read_timeout_seconds=120,
    )


def text(result) -> str:
    return "\n".join(c.text for c in result.content)


def test_stdio_round_trip_lists_tools_and_calls_search_and_rg(store_path):
    async def main():
        async with stdio(store_path) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {"search", "rg", "read", "index_query", "ask"}
            assert tools["rg"].input_schema["properties"]["patterns"]["maxItems"] == 4
            assert tools["search"].input_schema["properties"]["k"]["maximum"] == 50

            found = await c.call_tool("search", {"query": "beagle named Biscuit", "k": 5, "user_id": "alice"})
            assert not found.is_error
            hits = found.structured_content["hits"]
            assert hits and all(i.startswith("alice:") for h in hits for i in h["record_ids"])
            assert "alice:a1:0" in hits[0]["record_ids"]
            # the facade's search, the same hits (its recipe, its near-duplicate folding)
            with Memory.open(
                store_path, llm=ScriptedClient(model_id="gemma-3-270m-q4_k_m"), embedder=MiniLMEmbedder()
            ) as m:
                same = m.search("beagle named Biscuit", k=5, user_id="alice")
            assert [(h["chunk_id"], h["folded"]) for h in hits] == [(h.chunk.id, h.folded) for h in same]

            rg = await c.call_tool("rg", {"patterns": ["Biscuit"], "user_id": "alice"})
            assert not rg.is_error
            assert rg.structured_content["record_ids"] == ["alice:a1:0", "alice:a1:1", "alice:a2:0", "alice:a2:1"]
            assert rg.structured_content["text"].startswith("rg ['Biscuit']: 4 records match")

            steps = await c.call_tool("rg", {"patterns": [r"action: scroll"], "user_id": RUN})
            assert steps.structured_content["record_ids"] == [f"{RUN}:step{i}" for i in (1, 3, 9)]
            iq = await c.call_tool(
                "index_query",
                {"cypher": "MATCH (m:Memory)-[:OF_TOPIC]->(:Topic {name: 'scroll'}) RETURN count(m)", "user_id": RUN},
            )
            assert iq.structured_content["text"] == "1 row; columns: COUNT(m._ID)\n3"  # Ladybug's column name
            rd = await c.call_tool("read", {"ids": ["a1:2"], "user_id": "alice"})
            assert rd.structured_content["record_ids"] == ["alice:a1:2"]

    asyncio.run(main())


def test_stdio_validates_arguments_and_honours_scope(store_path):
    async def main():
        async with stdio(store_path) as c:
            bob = await c.call_tool("rg", {"patterns": ["Biscuit"], "user_id": "bob"})
            assert bob.structured_content["record_ids"] == ["bob:b1:1"]
            leak = await c.call_tool("rg", {"patterns": ["4711"], "user_id": "alice"})
            assert leak.structured_content["record_ids"] == []
            other = await c.call_tool("read", {"ids": ["bob:b1:0"], "user_id": "alice"})
            assert other.is_error and "no record with id 'bob:b1:0'" in text(other) and "4711" not in text(other)
            graph = await c.call_tool("index_query", {"cypher": "MATCH (m:Memory) RETURN m.text", "user_id": "alice"})
            assert "4711" not in graph.structured_content["text"]

            no_scope = await c.call_tool("rg", {"patterns": ["Biscuit"]})
            assert no_scope.is_error and "every tool needs a scope: give user_id, agent_id or run_id" in text(no_scope)
            for name, args in [
                ("search", {"query": "x", "k": 0, "user_id": "alice"}),
                ("search", {"query": "", "user_id": "alice"}),
                ("rg", {"patterns": [], "user_id": "alice"}),
                ("rg", {"patterns": "Biscuit", "user_id": "alice"}),
                ("read", {"ids": ["x"] * 9, "user_id": "alice"}),
                ("ask", {"question": "hi", "strategy": "magic", "user_id": "alice"}),
            ]:
                res = await c.call_tool(name, args)
                assert res.is_error and "validation error" in text(res), (name, args)
            bad = await c.call_tool("rg", {"patterns": ["(unclosed"], "user_id": "alice"})
            assert bad.is_error and "invalid regular expression" in text(bad)
            write = await c.call_tool("index_query", {"cypher": "MATCH (m:Memory) DETACH DELETE m", "user_id": "alice"})
            assert write.is_error and "read-only" in text(write)
            sp = await c.call_tool(
                "ask", {"question": "hi", "strategy": "rag", "single_pass": True, "user_id": "alice"}
            )
            assert sp.is_error and "single_pass: unknown parameter" in text(sp)
            still = await c.call_tool("index_query", {"cypher": "MATCH (m:Memory) RETURN count(m)", "user_id": "alice"})
            assert still.structured_content["text"].endswith("\n3")

    asyncio.run(main())


def test_pinned_server_refuses_other_scopes(store_path):
    async def main():
        async with stdio(store_path, "--user-id", "alice") as c:
            mine = await c.call_tool("rg", {"patterns": ["Biscuit"]})
            assert len(mine.structured_content["record_ids"]) == 4
            other = await c.call_tool("rg", {"patterns": ["Biscuit"], "user_id": "bob"})
            assert other.is_error and "user_id='bob' is outside this server's scope" in text(other)

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_http(store_path, host: str, port: int) -> subprocess.Popen:
    """``memfrontier mcp --transport http`` on ``host:port``, returned once it accepts connections."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memfrontier.cli",
            "mcp",
            "--store",
            str(store_path),
            "--transport",
            "http",
            "--host",
            host,
            "--port",
            str(port),
        ],
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 90
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            socket.create_connection((host, port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise AssertionError(f"the MCP server did not start on {host}:{port}")


def test_streamable_http_on_loopback(store_path):
    port = _free_port()
    proc = _start_http(store_path, "127.0.0.1", port)
    try:

        async def main():
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert names == {"search", "rg", "read", "index_query", "ask"}
                rg = await c.call_tool("rg", {"patterns": ["hik"], "user_id": "alice"})
                assert rg.structured_content["record_ids"] == ["alice:a2:0", "alice:a2:1", "alice:a2:2"]
                s = await c.call_tool("search", {"query": "Mount Tam", "k": 1, "user_id": "alice"})
                assert s.structured_content["hits"][0]["session_id"] == "alice:a2"

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_http_refuses_non_loopback_hosts(store_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "memfrontier.cli",
            "mcp",
            "--store",
            str(store_path),
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
        ],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "not a loopback address" in out.stderr
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")


def test_http_checks_host_and_origin_for_every_loopback_address():
    """DNS rebinding: the SDK checks Host/Origin only for 127.0.0.1 and localhost; the server checks
    them for whatever loopback address it binds (127.0.0.2 here), plus the names it is given."""
    from memfrontier.server.mcp import transport_security

    t = transport_security("127.0.0.2", 8765)
    assert t.enable_dns_rebinding_protection and t.allowed_hosts == ["127.0.0.2:8765", "localhost:8765"]
    assert t.allowed_origins == ["http://127.0.0.2:8765", "http://localhost:8765"]
    assert transport_security("::1", 9, ("proxy.lan:443",)).allowed_hosts == ["[::1]:9", "localhost:9", "proxy.lan:443"]


def test_http_refuses_a_forged_host_or_origin_on_another_loopback_address(store_path):
    import httpx2 as httpx

    port = _free_port()
    proc = _start_http(store_path, "127.0.0.2", port)
    try:
        url = f"http://127.0.0.2:{port}/mcp"
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        head = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        forged = httpx.post(url, json=init, headers={**head, "Host": f"attacker.example:{port}"}, timeout=30)
        assert forged.status_code == 421
        page = httpx.post(url, json=init, headers={**head, "Origin": "http://attacker.example"}, timeout=30)
        assert page.status_code == 403
        ok = httpx.post(url, json=init, headers=head, timeout=30)
        assert ok.status_code == 200, ok.text
        from memfrontier import __version__

        assert f'"serverInfo":{{"name":"memfrontier","version":"{__version__}"' in ok.text.replace(" ", "")
    finally:
        proc.terminate()
        proc.wait(timeout=30)

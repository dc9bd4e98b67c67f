"""MCP tool arguments are validated at the boundary (strict types, unknown names refused) and
known errors keep their message; driven in-process by the official ``mcp`` client."""

import asyncio

import pytest
from mcp import Client

from memfrontier.api import Memory
from memfrontier.server.mcp import MemoryService, build_server


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcpargs") / "store"
    with Memory.open(path) as mem:
        for i, text in enumerate(
            ["I adopted a beagle named Biscuit.", "Biscuit loves the beach.", "My sister lives in Quito."]
        ):
            mem.add([text], user_id="alice", session_id=f"s{i}")
        mem.add(["Eve keeps bees."], user_id="eve")
    return path


def text(result) -> str:
    return "\n".join(c.text for c in result.content)


def calls(store_path, batch):
    """Run ``batch`` (name, arguments) calls against one in-process server; returns the results."""
    service = MemoryService(store_path)

    async def main():
        async with Client(build_server(service)) as c:
            return [await c.call_tool(name, args) for name, args in batch]

    try:
        return asyncio.run(main())
    finally:
        service.close()


def test_arguments_are_strict_and_unknown_names_refused(store_path):
    ok, *bad = calls(
        store_path,
        [
            ("search", {"query": "beagle named Biscuit", "k": 2, "user_id": "alice"}),
            ("search", {"query": "beagle", "k": 2.5, "user_id": "alice"}),
            ("search", {"query": "beagle", "k": "2", "user_id": "alice"}),
            ("search", {"query": "beagle", "k": True, "user_id": "alice"}),
            ("search", {"query": "beagle", "limit": 3, "user_id": "alice"}),
            ("rg", {"patterns": ["Biscuit"], "ignore_case": "yes", "user_id": "alice"}),
            ("ask", {"question": "hi", "user_id": "alice", "max_usd": 1e-5}),  # the caps are under budget
            ("ask", {"question": "hi", "user_id": "alice", "budget": {"max_usd": -1.0}}),
        ],
    )
    assert not ok.is_error and len(ok.structured_content["hits"]) == 2
    expected = [
        "1 validation error for search: k: Input should be a valid integer (got 2.5)",
        "1 validation error for search: k: Input should be a valid integer (got '2')",
        "1 validation error for search: k: Input should be a valid integer (got True)",
        "1 validation error for search: limit: unknown parameter",
        "1 validation error for rg: ignore_case: Input should be a valid boolean (got 'yes')",
        "1 validation error for ask: max_usd: unknown parameter",
        "1 validation error for ask: budget.max_usd: max_usd must be a finite number >= 0, got -1.0",
    ]
    for res, want in zip(bad, expected, strict=True):
        assert res.is_error and text(res) == want


def test_known_errors_keep_their_message(store_path):
    small, opts, unknown, unbuilt = calls(
        store_path,
        [
            ("ask", {"question": "What is the dog called?", "budget": {"max_usd": 1e-12}, "user_id": "alice"}),
            ("ask", {"question": "hi", "options": {"k": 2.5}, "user_id": "alice"}),
            ("ask", {"question": "hi", "options": {"depth": 2}, "user_id": "alice"}),
            ("ask", {"question": "hi", "strategy": "automem", "user_id": "eve"}),
        ],
    )
    prefix = "Error executing tool ask: "  # the SDK's prefix; the cause follows it (no longer a bare prefix)
    assert small.is_error and text(small).startswith(prefix + "the question alone needs ")
    assert text(small).endswith("but max_usd=1e-12 (what is left of it: 1e-12) leaves room for 0; raise max_usd")
    assert opts.is_error and text(opts) == prefix + "strategy rag: k=2.5: Input should be a valid integer"
    assert unknown.is_error and text(unknown) == prefix + (
        "strategy rag: unknown key 'depth'; keys: k, retrievers, unit, neighbours, neighbour_hits, max_tokens, rerank, fold, excerpt_tokens, turn_style"
    )
    assert unbuilt.is_error and text(unbuilt).startswith(
        prefix + "the automem memory view of this scope was never built"
    )


def test_tool_schemas_are_unchanged_by_the_argument_models(store_path):
    service = MemoryService(store_path)

    async def main():
        async with Client(build_server(service)) as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}

    schemas = asyncio.run(main())
    service.close()
    assert set(schemas) == {"search", "rg", "read", "index_query", "ask"}
    k = schemas["search"]["properties"]["k"]
    assert (k["type"], k["minimum"], k["maximum"], k["default"]) == ("integer", 1, 50, 5)
    assert schemas["search"]["required"] == ["query"]
    assert schemas["rg"]["properties"]["patterns"]["maxItems"] == 4
    assert set(schemas["ask"]["properties"]) == {
        "question",
        "strategy",
        "preference",
        "budget",
        "options",
        "build",
        "question_date",
        "user_id",
        "agent_id",
        "run_id",
    }


def test_memory_search_checks_k(store_path, tmp_path):
    with Memory.open(tmp_path / "m") as mem:
        mem.add(["Ana moved to Lisbon."], user_id="ana")
        assert len(mem.search("Lisbon", user_id="ana", k=1)) == 1
        for bad in (2.5, "2", True, 0):
            with pytest.raises(ValueError, match=rf"k must be an integer >= 1, got {bad!r}"):
                mem.search("Lisbon", user_id="ana", k=bad)
        with pytest.raises(ValueError, match=r"strategy rag: k=2.5: Input should be a valid integer"):
            mem.ask("Where?", user_id="ana", strategy="rag", strategy_options={"k": 2.5})


def test_options_selecting_what_the_operator_did_not_configure_are_tool_errors(store_path):
    """The REST policy (memfrontier.server.options), with the same messages, as tool errors; a
    value-only option still answers."""
    prefix = "Error executing tool ask: "
    neo4j, planner, url, ok, named = calls(
        store_path,
        [
            ("ask", {"question": "hi", "strategy": "automem", "options": {"graph": "neo4j"}, "user_id": "alice"}),
            (
                "ask",
                {
                    "question": "hi",
                    "strategy": "automem",
                    "options": {"planner_llm": "openai:gpt-4o"},
                    "user_id": "alice",
                },
            ),
            (
                "ask",
                {
                    "question": "hi",
                    "strategy": "automem",
                    "options": {"base_url": "http://169.254.169.254"},
                    "user_id": "alice",
                },
            ),
            ("ask", {"question": "What is the dog called?", "options": {"k": 1}, "user_id": "alice"}),
            (
                "ask",
                {"question": "What is the dog called?", "strategy": "rag-turns", "build": True, "user_id": "alice"},
            ),
        ],
    )
    assert neo4j.is_error and text(neo4j) == prefix + (
        "strategy_options.graph='neo4j': not settable over the service (this value selects a model, an endpoint, a "
        "file or a cache the server's operator did not configure); choose one of: ladybug, none"
    )
    for res, name in ((planner, "planner_llm"), (url, "base_url")):
        assert res.is_error and text(res) == prefix + (
            f"strategy_options.{name}: not settable over the service (it names a file, a model, an endpoint or a "
            f"cache, which only the server's operator chooses)"
        )
    assert not ok.is_error and ok.structured_content["evidence_ids"]
    assert not named.is_error and named.structured_content["strategy"] == "rag-turns"  # the name asked for
    service = MemoryService(store_path)  # the strategies the ask tool does not offer go through the same check
    for name, options, message in (
        ("budgetmem", {"tiering": "capacity"}, "strategy_options.tiering='capacity'"),
        ("mempilot", {"compressor": "llmlingua2"}, "strategy_options.compressor='llmlingua2'"),
    ):
        with pytest.raises(ValueError, match=f"^{message}: not settable over the service"):
            service.strategy_config(name, options)
    assert service.strategy_config("budgetmem", {"tiering": "reasoning"}).tiering == "reasoning"
    service.close()

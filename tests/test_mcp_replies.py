"""Every MCP tool's reply is bounded by one rule (:func:`memfrontier.server.mcp.fit_reply`): at most
``reply_max_bytes`` of JSON as the tool's text block holds it, cut to previews with the record ids
kept and ``truncated: true``. Driven in-process by the official ``mcp`` client over records of
~27 KB, where ten ``search`` hits came back as ~490 KB in one result."""

import asyncio

import pytest
from fakes import ScriptedClient
from mcp import Client

from memfrontier.api import Memory
from memfrontier.core.types import Scope
from memfrontier.server.mcp import REPLY_MAX_BYTES, MemoryService, build_server, fit_reply, reply_bytes
from memfrontier.strategies.automem.graph import open_graph
from memfrontier.strategies.automem.graph_builder import graph_from_notes
from memfrontier.strategies.automem.graph_notes import Note

USER = "big"
#: ten records of ~27 KB (4,500 words, Cyrillic and ASCII: 1-2 bytes a character), each its own session
TEXTS = [f"Record {i} about the garden. " + "слово word " * 2_250 for i in range(10)]
LONG_ANSWER = "Москва " * 1_000


@pytest.fixture(scope="module")
def store_path(tmp_path_factory, minilm):
    path = tmp_path_factory.mktemp("mcpreplies") / "store"
    with Memory.open(path, llm=ScriptedClient(lambda m: "ok", model_id="gemma-3-270m-q4_k_m"), embedder=minilm) as m:
        for i, text in enumerate(TEXTS):
            m.add([{"content": text, "id": f"r{i}"}], user_id=USER, session_id=f"s{i}")
        scope = Scope(user_id=USER)
        notes = [
            Note(f"Note {i}: " + "a long note " * 200, ["Ann"], "garden", None, f"s{i}", [f"r{i}"]) for i in range(10)
        ]
        g = open_graph("ladybug", m.aio.store.view_dir("graph"), scope)
        g.replace(graph_from_notes(notes, scope.key()))
        g.close()
    return path


CALLS = [
    ("search", {"query": "garden", "k": 10, "user_id": USER}),
    ("rg", {"patterns": ["garden"], "user_id": USER}),
    ("read", {"ids": ["r0", "r1", "r2"], "user_id": USER}),
    ("index_query", {"cypher": "MATCH (m:Memory) RETURN m.text", "user_id": USER}),
    ("ask", {"question": "Where is the garden?", "user_id": USER}),
]


def calls(store_path, batch, **service_kw):
    service = MemoryService(
        store_path, llm=ScriptedClient(lambda m: LONG_ANSWER, model_id="gemma-3-270m-q4_k_m"), **service_kw
    )

    async def main():
        async with Client(build_server(service)) as c:
            return [await c.call_tool(name, args) for name, args in batch]

    try:
        return asyncio.run(main())
    finally:
        service.close()


def _bytes(result) -> int:
    return len("".join(c.text for c in result.content).encode())


def test_ten_hits_over_large_records_fit_the_default_bound_as_previews_with_their_ids(store_path):
    (found,) = calls(store_path, CALLS[:1])
    reply = found.structured_content
    assert not found.is_error and reply["truncated"] is True
    assert reply_bytes(reply) <= REPLY_MAX_BYTES and _bytes(found) <= REPLY_MAX_BYTES
    assert len(reply["hits"]) == 10 and "omitted" not in reply  # every hit shown, as a preview
    assert sorted(i for h in reply["hits"] for i in h["record_ids"]) == [f"r{i}" for i in range(10)]
    for h in reply["hits"]:
        assert h["text"].endswith(" ...") and 200 < len(h["text"]) < 2_000 and "Record " in h["text"][:40]


def test_every_tool_holds_to_the_bound_and_says_so(store_path):
    """With a bound of 2,000 bytes every tool's natural reply is over it: each is cut by the same
    rule (texts to previews, the tail of its longest list left out) and says so."""
    results = calls(store_path, CALLS, reply_max_bytes=2_000)
    for (name, _), res in zip(CALLS, results, strict=True):
        reply = res.structured_content
        assert not res.is_error, (name, res.content)
        assert reply["truncated"] is True, name
        assert reply_bytes(reply) <= 2_000 and _bytes(res) <= 2_000, (name, reply_bytes(reply))
    search, rg, read, index_query, ask = (r.structured_content for r in results)
    assert search["hits"] and all(h["record_ids"] and h["text"].endswith(" ...") for h in search["hits"])
    assert search["omitted"] == {"hits": 10 - len(search["hits"])}  # ten previews do not fit: the last hits go
    assert rg["text"].startswith("rg ['garden']: 10 records match") and rg["record_ids"]
    assert read["text"].startswith("r0 ") and read["record_ids"][0] == "r0"
    assert index_query["text"].startswith("10 rows; columns: m.text")
    assert ask["answer"].startswith("Москва") and ask["answer"].endswith(" ...") and ask["usage"]["calls"] == 1


def test_a_reply_within_the_bound_is_whole():
    small = {"hits": [{"text": "Ana lives in Lisbon.", "record_ids": ["a1"]}], "truncated": False}
    assert fit_reply(small) is small
    big = {"answer": "x " * 5_000, "evidence_ids": [f"conv-26:D{i}:{j}" for i in range(30) for j in range(40)]}
    cut = fit_reply(big, 4_000)
    assert reply_bytes(cut) <= 4_000 and cut["truncated"] is True
    assert cut["evidence_ids"] == big["evidence_ids"][: len(cut["evidence_ids"])]  # the first ids, in order
    assert cut["omitted"] == {"evidence_ids": 1_200 - len(cut["evidence_ids"])}
    assert len(big["evidence_ids"]) == 1_200 and big.get("truncated") is None  # the reply given is not changed

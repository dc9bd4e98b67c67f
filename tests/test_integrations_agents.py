"""The OpenAI Agents SDK adapter (``memfrontier.integrations.agents``) with the real SDK, the real
SQLite store and MiniLM: the Session protocol round trip (items come back equal, in order, the
latest ``limit``, popped and cleared), scopes that never see each other's items, the recall tool
answering within its budget and refusing without crashing, and a ``Runner.run`` against a scripted
Chat Completions server that calls the tool and leaves the run's items in the session."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fakes import ScriptedClient

pytest.importorskip("agents", reason="the agents extra")

import agents  # noqa: E402
import openai  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from memfrontier.api import AsyncMemory, Memory  # noqa: E402
from memfrontier.core.errors import EmptyScopeError  # noqa: E402
from memfrontier.core.types import Budget  # noqa: E402
from memfrontier.integrations.agents import (  # noqa: E402
    ITEM_KEY,
    SEQ_KEY,
    MemfrontierSession,
    item_text,
    recall_tool,
)

MODEL = "gemma-3-270m-q4_k_m"

ITEMS = [
    {"role": "user", "content": "I moved to Lisbon in May 2023."},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Lisbon is lovely in May.", "annotations": []}],
    },
    {"type": "function_call", "call_id": "call_1", "name": "recall", "arguments": '{"question": "Where?"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Lisbon"},
    {"role": "user", "content": "ok"},
    {"role": "user", "content": "ok"},  # the same item twice: two items, two records
]


@pytest.fixture()
def mem(tmp_path, minilm):
    llm = ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL)
    m = Memory(AsyncMemory.open(tmp_path / "store", llm=llm, embedder=minilm))
    yield m, llm
    m.close()


@pytest.mark.parametrize("facade", ["Memory", "AsyncMemory"])
def test_the_session_protocol_round_trip(mem, facade):
    m, _ = mem
    memory = m if facade == "Memory" else m.aio  # AsyncMemory is awaited on the caller's loop
    session = MemfrontierSession("s1", memory, user_id="ana")
    other = MemfrontierSession("s2", memory, user_id="ana")
    assert isinstance(session, Session)

    async def run():
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items(ITEMS[:3])
        await session.add_items(ITEMS[3:])
        await other.add_items([{"role": "user", "content": "In session two I said Porto."}])
        got = (await session.get_items(), await session.get_items(2), await session.get_items(0))
        popped = await session.pop_item()
        after_pop = await session.get_items()
        await session.clear_session()
        return got, popped, after_pop, await session.get_items(), await other.get_items(), await session.pop_item()

    m.add([{"role": "user", "content": "Added by hand to s1."}], user_id="ana", session_id="s1")
    (full, last2, none), popped, after_pop, cleared, other_items, empty_pop = asyncio.run(run())
    assert full == ITEMS and last2 == ITEMS[-2:] and none == []
    assert popped == ITEMS[-1] and after_pop == ITEMS[:-1]
    assert cleared == [] and empty_pop is None
    assert other_items == [{"role": "user", "content": "In session two I said Porto."}]
    left = m.records(user_id="ana")
    assert [r.text for r in left] == ["Added by hand to s1.", "In session two I said Porto."]  # only s1's items went


def test_items_are_records_with_a_readable_text_role_and_the_exact_item(mem):
    m, _ = mem
    session = MemfrontierSession("s1", m, user_id="ana", session_settings={"limit": 3})
    asyncio.run(session.add_items(ITEMS))
    recs = m.records(user_id="ana", session_id="s1")
    assert [r.meta[ITEM_KEY] for r in recs] == ITEMS and [r.meta[SEQ_KEY] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r.role for r in recs] == ["user", "assistant", "function_call", "function_call_output", "user", "user"]
    assert [r.speaker for r in recs] == ["user", "assistant", "assistant", "tool", "user", "user"]
    assert [r.text for r in recs[:4]] == [
        "I moved to Lisbon in May 2023.",
        "Lisbon is lovely in May.",
        'called recall({"question": "Where?"})',
        "recall returned: Lisbon",
    ]
    assert len({r.id for r in recs}) == 6 and all(r.id.startswith("agents:s1:") for r in recs)
    assert recs[0].timestamp is not None and {r.timestamp for r in recs} == {recs[0].timestamp}  # one add call
    assert asyncio.run(session.get_items()) == ITEMS[-3:]  # session_settings.limit is the default
    assert asyncio.run(session.get_items(5)) == ITEMS[-5:]
    hits = m.search("Where did Ana move?", user_id="ana", k=1)  # the history is long-term memory too
    assert recs[0].id in hits[0].chunk.record_ids
    assert (
        item_text({"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}) == "reasoning: think"
    )
    assert item_text({"role": "assistant", "content": []}) == "[assistant message with no text]"


def test_two_users_with_the_same_session_id_never_see_each_others_items(mem):
    m, _ = mem
    ana = MemfrontierSession("chat", m, user_id="ana")
    bob = MemfrontierSession("chat", m, user_id="bob")
    ana_bot = MemfrontierSession("chat", m, user_id="ana", agent_id="bot")  # a scope inside ana's

    async def run():
        await ana.add_items([{"role": "user", "content": "My PIN is 4321."}])
        await bob.add_items([{"role": "user", "content": "I like tea."}])
        await ana_bot.add_items([{"role": "user", "content": "Bot-only note."}])
        seen = (await ana.get_items(), await bob.get_items(), await ana_bot.get_items())
        popped = await bob.pop_item()
        bob_empty_pop = await bob.pop_item()
        await bob.clear_session()
        await ana_bot.clear_session()
        return seen, popped, bob_empty_pop, await ana.get_items()

    (a, b, ab), popped, bob_empty_pop, ana_after = asyncio.run(run())
    assert a == [{"role": "user", "content": "My PIN is 4321."}]
    assert b == [{"role": "user", "content": "I like tea."}]
    assert ab == [{"role": "user", "content": "Bot-only note."}]
    assert popped == {"role": "user", "content": "I like tea."} and bob_empty_pop is None  # never ana's item
    assert ana_after == a  # bob's clear and the bot's clear left ana's own item
    assert [r.text for r in m.records(user_id="ana")] == ["My PIN is 4321."]
    assert m.records(user_id="bob") == []
    assert all("4321" not in h.chunk.text for h in m.search("PIN", user_id="bob", k=5))


def test_bad_input_is_named(mem):
    m, _ = mem
    with pytest.raises(ValueError, match="user_id"):
        MemfrontierSession("s1", m)
    with pytest.raises(ValueError, match="session_id"):
        MemfrontierSession("  ", m, user_id="ana")
    session = MemfrontierSession("s1", m, user_id="ana")
    with pytest.raises(ValueError, match=r"items\[1\]"):
        asyncio.run(session.add_items([{"role": "user", "content": "a"}, "b"]))
    with pytest.raises(ValueError, match=r"items\[0\] is not JSON"):
        asyncio.run(session.add_items([{"role": "user", "content": {1, 2}}]))
    with pytest.raises(ValueError, match="limit"):
        asyncio.run(session.get_items("2"))
    assert m.records(user_id="ana") == []  # nothing was stored by the refused calls
    with pytest.raises(ValueError, match="name"):
        recall_tool(m, user_id="ana", name="re call")
    with pytest.raises(ValueError, match="user_id"):
        recall_tool(m)
    with pytest.raises(ValueError, match="budget"):
        recall_tool(m, user_id="ana", budget=5)


def test_the_recall_tool_answers_within_its_budget_and_a_refusal_spends_nothing_more(mem):
    m, llm = mem
    ctx = ToolContext(context=None, tool_name="recall", tool_call_id="c1", tool_arguments="{}")
    early = recall_tool(m, user_id="ana")
    with pytest.raises(EmptyScopeError):  # called directly, a refusal other than the budget's is raised
        asyncio.run(early.recall("Where is item 7?"))
    said = asyncio.run(early.on_invoke_tool(ctx, json.dumps({"question": "Where is item 7?"})))
    assert said.startswith("Memory could not answer: no records in this scope")  # in a run: the model reads why
    m.add([{"role": "user", "content": f"Fact {i}: Ana keeps item {i} in Lisbon."} for i in range(10)], user_id="ana")
    cap = 400
    tool = recall_tool(m, user_id="ana", strategy="rag", strategy_options={"k": 3}, budget=Budget(max_tokens=cap))
    assert isinstance(tool, agents.FunctionTool) and tool.name == "recall"
    assert tool.params_json_schema["required"] == ["question"]
    out = asyncio.run(tool.on_invoke_tool(ctx, json.dumps({"question": "Where is item 7?"})))
    assert out == "Lisbon" and llm.n_calls == 1 and "Where is item 7?" in llm.prompts[0]
    spent = tool.recall
    assert (spent.questions, spent.refused) == (1, 0)
    assert 0 < spent.tokens <= cap and spent.usd > 0
    assert spent.usage == m.usage()  # the tool's account is the memory's (its only question)

    small = recall_tool(m, user_id="ana", budget={"max_tokens": 5})
    refused = asyncio.run(small.on_invoke_tool(ctx, json.dumps({"question": "Where is item 7?"})))
    assert refused.startswith("Memory was not consulted") and "max_tokens" in refused
    assert llm.n_calls == 1  # no model call was made
    assert (small.recall.questions, small.recall.refused) == (1, 1) and small.recall.tokens == 0 <= 5
    assert small.recall.usd == 0.0


class ChatStub:
    """A scripted Chat Completions endpoint: ``replies`` (message dicts) answered in order;
    ``requests``: the JSON bodies received."""

    def __init__(self, replies: list[dict]):
        self.replies, self.requests = list(replies), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                stub.requests.append((self.path, body))
                message = stub.replies.pop(0)
                reason = "tool_calls" if message.get("tool_calls") else "stop"
                data = json.dumps(
                    {
                        "id": f"chatcmpl-{len(stub.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "stub",
                        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_runner_run_calls_the_tool_and_keeps_its_items_in_the_session(mem):
    m, llm = mem
    m.add([{"role": "user", "content": "I moved to Lisbon in May 2023."}], user_id="ana", session_id="old")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "recall", "arguments": '{"question": "Where does Ana live?"}'},
    }
    stub = ChatStub(
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "assistant", "content": "You live in Lisbon."},
            {"role": "assistant", "content": "You're welcome."},
        ]
    )
    agents.set_tracing_disabled(True)
    try:
        client = openai.AsyncOpenAI(base_url=stub.base_url, api_key="x")
        agent = agents.Agent(
            name="assistant",
            instructions="Answer from memory.",
            model=agents.OpenAIChatCompletionsModel(model="stub", openai_client=client),
            tools=[recall_tool(m, user_id="ana", budget=Budget(max_tokens=400))],
        )
        session = MemfrontierSession("chat-1", m, user_id="ana")

        async def run():
            first = await agents.Runner.run(agent, "Where do I live?", session=session)
            items = await session.get_items()
            second = await agents.Runner.run(agent, "Thanks!", session=session)
            return first, items, second, await session.get_items()

        first, items, second, after = asyncio.run(run())
    finally:
        stub.close()
    assert first.final_output == "You live in Lisbon." and second.final_output == "You're welcome."
    assert llm.n_calls == 1 and "Where does Ana live?" in llm.prompts[0]  # the tool asked the memory
    (path, req1), (_, req2), (_, req3) = stub.requests
    assert path == "/v1/chat/completions" and [t["function"]["name"] for t in req1["tools"]] == ["recall"]
    tool_msg = next(msg for msg in req2["messages"] if msg["role"] == "tool")
    assert tool_msg == {"role": "tool", "tool_call_id": "call_1", "content": "Lisbon"}
    assert items[0] == {"content": "Where do I live?", "role": "user"}
    kinds = [i.get("type", "message") for i in items]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert items[1]["name"] == "recall" and items[2]["output"] == "Lisbon"
    assert items[3]["role"] == "assistant" and items[3]["content"][0]["text"] == "You live in Lisbon."
    assert after[: len(items)] == items and len(after) == len(items) + 2  # the second turn appended
    contents = [msg.get("content") for msg in req3["messages"]]  # the second turn was sent the history
    assert "Where do I live?" in contents and "Thanks!" in contents
    recs = m.records(user_id="ana", session_id="chat-1")
    assert [r.role for r in recs] == ["user", "function_call", "function_call_output", "assistant", "user", "assistant"]
    assert recs[2].text == "recall returned: Lisbon"

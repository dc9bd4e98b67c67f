"""The LlamaIndex memory block (``memfrontier.integrations.llamaindex``) inside LlamaIndex's own
``Memory`` (llama-index-core 0.14): flushed chat history is stored with ``add``, ``aget`` puts the
facade's ``recall`` in the prompt, ``atruncate`` and ``max_tokens`` cut whole lines by the count,
the budget binds the retrieval's model calls, and two users' blocks never see each other's records.

Real store, MiniLM and LlamaIndex; the model is the scripted client (a token is a word), which the
block's counter and LlamaIndex's ``tokenizer_fn`` both count with here (no tiktoken download)."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys

import pytest
from fakes import ScriptedClient

pytest.importorskip("llama_index.core", reason="the llamaindex extra")

from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.memory import InsertMethod  # noqa: E402
from llama_index.core.memory import Memory as ChatMemory  # noqa: E402
from llama_index.core.storage.chat_store.base_db import MessageStatus  # noqa: E402

from memfrontier.api import AsyncMemory, Memory  # noqa: E402
from memfrontier.core.extras import MissingExtraError  # noqa: E402
from memfrontier.core.types import Budget, Context  # noqa: E402
from memfrontier.integrations.llamaindex import MemfrontierMemoryBlock, answer_token_counter, tokenizer_fn  # noqa: E402
from memfrontier.strategies import StrategyConfig  # noqa: E402

MODEL = "gemma-3-270m-q4_k_m"

ANA = [
    ("user", "I moved to Lisbon in May 2023 for a new job."),
    ("assistant", "Congratulations on the move to Lisbon!"),
    ("user", "My sister Marta lives in Porto with two cats."),
    ("assistant", "Porto is lovely, say hi to Marta."),
    ("user", "I am learning Portuguese on Tuesday evenings."),
    ("assistant", "Boa sorte with the lessons!"),
    ("user", "Where did I move in 2023?"),
]
BOB = [
    ("user", "I moved to Oslo in May 2023 for a new job."),
    ("assistant", "Congratulations on the move to Oslo!"),
    ("user", "My brother Lars lives in Bergen with a dog."),
    ("assistant", "Bergen is rainy, say hi to Lars."),
    ("user", "I am learning Norwegian on Monday evenings."),
    ("assistant", "Lykke til with the lessons!"),
    ("user", "Where did I move in 2023?"),
]


@pytest.fixture
def llm():
    return ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL)


@pytest.fixture
def memory(tmp_path, minilm, llm):
    m = Memory(AsyncMemory.open(tmp_path / "store", llm=llm, embedder=minilm))
    yield m
    m.close()


def chat_memory(block, memory, session_id="chat-ana", token_limit=300, **kw) -> ChatMemory:
    """LlamaIndex's Memory with 30 tokens of chat history, flushing 10 at a time into ``block``
    (the window, ``token_limit``, leaves the block room: no truncation)."""
    return ChatMemory.from_defaults(
        session_id=session_id,
        token_limit=token_limit,
        chat_history_token_ratio=30 / token_limit,
        token_flush_size=10,
        memory_blocks=[block],
        tokenizer_fn=tokenizer_fn(memory),
        **kw,
    )


async def converse(chat: ChatMemory, turns) -> None:
    for role, text in turns:
        await chat.aput(ChatMessage(role=role, content=text))


def block_text(messages: list[ChatMessage], name: str = "memfrontier") -> str | None:
    """The text LlamaIndex's template put between ``<name>`` tags, or None when there is none."""
    found = re.search(rf"<{name}>\n(.*?)\n</{name}>", "\n".join(m.content or "" for m in messages), re.S)
    return found.group(1).strip() if found else None


def test_flushed_history_is_stored_and_the_recall_goes_in_the_system_message(memory, llm):
    block = MemfrontierMemoryBlock(memory, user_id="ana")
    words = answer_token_counter(memory)

    async def run():
        chat = chat_memory(block, memory)
        await converse(chat, ANA)
        return await chat.aget_all(status=MessageStatus.ACTIVE), await chat.aget()

    active, messages = asyncio.run(run())
    stored = memory.records(user_id="ana", session_id="llamaindex")
    # the oldest turns left LlamaIndex's 30-token window and were stored, role and text, in order;
    # LlamaIndex keeps the rest as its short-term history
    assert 0 < len(stored) < len(ANA)
    assert [(r.role, r.text) for r in stored] == ANA[: len(stored)]
    assert [(m.role.value, m.content) for m in active] == ANA[len(stored) :]
    assert sum(words(m.content) for m in active) <= 30
    assert all(r.timestamp is not None for r in stored)  # dated when flushed (chat messages carry no time)
    # aget: one system message first, holding exactly the facade's recall for the latest user message
    assert messages[0].role.value == "system" and [m.role.value for m in messages[1:]] == [
        r for r, _ in ANA[len(stored) :]
    ]
    recalled = memory.recall(ANA[-1][1], user_id="ana")
    assert block_text(messages) == recalled.context.strip()
    assert "I moved to Lisbon in May 2023 for a new job." in block_text(messages)
    assert block.recalls == 1 and block.last_recall.evidence_ids == recalled.evidence_ids
    assert set(recalled.evidence_ids) <= {r.id for r in stored}
    assert block.usage.query.calls == 0 and llm.n_calls == 0  # rag retrieves without a model call


def test_insert_method_user_puts_the_recall_in_the_latest_user_message(memory):
    block = MemfrontierMemoryBlock(memory, user_id="ana")

    async def run():
        chat = chat_memory(block, memory, insert_method=InsertMethod.USER)
        await converse(chat, ANA)
        return await chat.aget()

    messages = asyncio.run(run())
    assert [m.role.value for m in messages].count("system") == 0
    last = messages[-1]
    assert last.role.value == "user" and last.content.endswith(ANA[-1][1])
    assert "I moved to Lisbon" in block_text([last])


def test_a_message_timestamp_dates_its_record(memory):
    block = MemfrontierMemoryBlock(memory, user_id="ana", session_id="s-1")
    asyncio.run(
        block.aput(
            [
                ChatMessage(
                    role="user", content="I adopted a cat.", additional_kwargs={"timestamp": "2024-03-02T09:00:00"}
                ),
                ChatMessage(role="assistant", content="   "),  # no text: nothing to store
                ChatMessage(role="assistant", content="What is its name?"),
            ]
        )
    )
    (cat, name) = memory.records(user_id="ana", session_id="s-1")
    assert (cat.role, cat.text, cat.timestamp) == ("user", "I adopted a cat.", "2024-03-02T09:00:00+00:00")
    assert (name.role, name.text) == ("assistant", "What is its name?") and name.timestamp > cat.timestamp


class EchoStrategy:
    """A strategy over raw records whose context names the question it was given (control flow of
    the block's choice of question)."""

    name = "echo"
    prompt_version = "v1"
    recipes = ()
    config_class = StrategyConfig
    config = StrategyConfig()

    def is_built(self, env, scope) -> bool:
        return True

    def construction_usage(self, env, scope) -> dict:
        return {}

    async def build(self, env, scope, progress=None) -> None:
        return None

    async def context(self, query, env, pref, budget) -> Context:
        return Context(text=f"asked: {query.text}", evidence_ids=[])


def test_the_question_is_the_latest_user_message(memory):
    memory.add(["I moved to Lisbon."], user_id="ana")
    block = MemfrontierMemoryBlock(memory, user_id="ana", strategy=EchoStrategy())

    def get(messages):
        return asyncio.run(block.aget(messages))

    user, bot = ChatMessage(role="user", content="Where do I live?"), ChatMessage(role="assistant", content="Lisbon.")
    assert get([ChatMessage(role="user", content="Hi"), bot, user, bot]) == "asked: Where do I live?"
    assert get([ChatMessage(role="system", content="Be brief."), bot]) == "asked: Lisbon."  # no user message
    assert get([]) == "" and get(None) == "" and get([user, ChatMessage(role="user", content=" ")]) == ""
    assert block.recalls == 2

    async def via_llamaindex():  # aget(input=...) is the latest user message
        chat = chat_memory(block, memory)
        await converse(chat, [("user", "Hello"), ("assistant", "Hi Ana")])
        return await chat.aget(input="What city am I in?")

    assert block_text(asyncio.run(via_llamaindex())) == "asked: What city am I in?"


def test_atruncate_cuts_whole_lines_within_the_count(memory):
    block = MemfrontierMemoryBlock(memory, user_id="ana")
    count = block.token_counter()
    content = "one two three\nfour five six seven\neight nine\nten"  # 3 + 4 + 2 + 1 = 10 words
    lines = content.split("\n")

    def cut(n):
        return asyncio.run(block.atruncate(content, n))

    for n in range(1, 10):
        out = cut(n)
        assert out is not None and count(out) <= count(content) - n
        kept = out.split("\n")
        assert kept == lines[: len(kept)] or (len(kept) == 1 and lines[0].startswith(kept[0]))
    # a line costs its tokens plus one for its newline (core.fit.fit_lines): 4, 5, 3, 2
    assert cut(1) == "one two three\nfour five six seven" and cut(3) == cut(5) == "one two three"
    assert cut(8).rstrip() == "one two"  # a first line alone too long is cut short (the facade's rule)
    assert cut(10) is None and cut(11) is None
    assert cut(0) == content and asyncio.run(block.atruncate("", 3)) is None


def test_llamaindex_truncates_the_block_by_whole_lines_when_over_its_token_limit(memory):
    # the same scope read twice: "full" is never truncated (priority 0) and stores nothing (the
    # flushed messages go to "cut" only, once)
    full = MemfrontierMemoryBlock(memory, user_id="ana", name="full", priority=0, accept_short_term_memory=False)
    cut = MemfrontierMemoryBlock(memory, user_id="ana", name="cut", priority=1)
    count = answer_token_counter(memory)

    async def run():
        chat = ChatMemory.from_defaults(
            session_id="chat-ana",
            token_limit=96,
            chat_history_token_ratio=30 / 96,
            token_flush_size=10,
            memory_blocks=[full, cut],
            tokenizer_fn=tokenizer_fn(memory),
        )
        await converse(chat, ANA)
        return await chat.aget_all(status=MessageStatus.ACTIVE), await chat.aget()

    history, messages = asyncio.run(run())
    whole, kept = block_text(messages, "full"), block_text(messages, "cut")
    over = count(whole) * 2 + sum(count(m.content) for m in history) - 96
    assert over > 0 and kept is not None  # the two blocks and the history did not fit
    lines = kept.split("\n")
    assert 1 < len(lines) < len(whole.split("\n")) and lines == whole.split("\n")[: len(lines)]
    assert count(kept) <= count(whole) - over


def test_max_tokens_caps_the_recalled_context(memory):
    block = MemfrontierMemoryBlock(memory, user_id="ana", max_tokens=20)
    count = block.token_counter()

    async def run():
        chat = chat_memory(block, memory)
        await converse(chat, ANA)
        return await chat.aget()

    context = block_text(asyncio.run(run()))
    whole = memory.recall(ANA[-1][1], user_id="ana").context
    assert count(whole) > 20 >= count(context) > 0
    assert whole.startswith(context + "\n") and block.truncated == 1 and block.last_recall.truncated
    with pytest.raises(ValueError, match="max_tokens"):
        MemfrontierMemoryBlock(memory, user_id="ana", max_tokens=0)


def test_a_budget_on_rag_calls_no_model(memory, llm):
    memory.add(["I moved to Lisbon in May 2023."], user_id="ana")
    block = MemfrontierMemoryBlock(memory, user_id="ana", budget={"max_usd": 0.0, "max_tokens": 0})
    out = asyncio.run(block.aget([ChatMessage(role="user", content="Where do I live?")]))
    assert "Lisbon" in out and block.budget == Budget(max_usd=0.0, max_tokens=0)
    assert block.usage.query.calls == 0 and block.usage.query.usd == 0.0 and llm.n_calls == 0
    assert block.refusals == 0


@pytest.mark.parametrize("cap", [1e-9, 2e-6])
def test_a_model_calling_strategy_spends_within_the_cap(memory, llm, cap):
    """BudgetMem with every module at its LLM tier: calls whose worst case would cross the cap are
    refused (counted) and fall back to the rules; what was spent stays within the cap."""
    memory.add([{"role": r, "content": t} for r, t in ANA[:4]], user_id="ana")
    block = MemfrontierMemoryBlock(
        memory, user_id="ana", strategy="budgetmem", strategy_options={"tiers": "high"}, budget=Budget(max_usd=cap)
    )
    out = asyncio.run(block.aget([ChatMessage(role="user", content="Where did I move?")]))
    refused = {k: n for k, n in block.usage.events.items() if k.startswith("budget.call_refused.")}
    assert "Lisbon" in out and block.refusals == 0
    assert block.usage.query.usd <= cap and sum(refused.values()) >= 1
    paid = sum(u.calls for role, u in block.usage.by_role.items() if role.endswith(".high"))
    assert paid == llm.n_calls and (paid > 0) == (cap > 1e-9)  # the larger cap paid for a call
    assert (block.usage.query.usd > 0) == (paid > 0)


class OneCallStrategy(EchoStrategy):
    """A retrieval that must make one model call (through the metered client, under the budget)."""

    name = "one_call"

    async def context(self, query, env, pref, budget) -> Context:
        out = await env.llm.complete([{"role": "user", "content": query.text}], role="test.reader", budget=budget)
        return Context(text=out.text, evidence_ids=[])


def test_a_refused_recall_gives_empty_content_and_records_the_refusal(memory, llm):
    memory.add(["I moved to Lisbon."], user_id="ana")
    block = MemfrontierMemoryBlock(memory, user_id="ana", strategy=OneCallStrategy(), budget=Budget(max_usd=1e-12))

    async def run():
        chat = chat_memory(block, memory)
        await converse(chat, [("user", "Where do I live?")])
        return await chat.aget()

    messages = asyncio.run(run())
    assert [m.role.value for m in messages] == ["user"] and block_text(messages) is None
    assert block.refusals == 1 and block.recalls == 1 and llm.n_calls == 0
    assert block.usage.events == {"budget.call_refused.test.reader": 1} and block.usage.query.usd == 0.0
    # the same block with room for the call: the reply is the content, its cost the block's usage
    paid = MemfrontierMemoryBlock(memory, user_id="ana", strategy=OneCallStrategy(), budget=Budget(max_usd=1e-3))
    assert asyncio.run(paid.aget([ChatMessage(role="user", content="Where do I live?")])) == "Lisbon"
    assert paid.usage.by_role["test.reader"].calls == 1 and llm.n_calls == 1
    assert 0 < paid.usage.query.usd <= 1e-3 and paid.refusals == 0


def test_two_users_blocks_never_see_each_others_records(tmp_path, minilm):
    mem = AsyncMemory.open(
        tmp_path / "store", llm=ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL), embedder=minilm
    )
    ana = MemfrontierMemoryBlock(mem, user_id="ana")
    bob = MemfrontierMemoryBlock(mem, user_id="bob")

    async def run():
        chat_a = chat_memory(ana, mem, session_id="chat-ana")
        chat_b = chat_memory(bob, mem, session_id="chat-bob")
        await converse(chat_a, ANA)
        before = await chat_b.aget(input="Where did I move in 2023?")  # bob has no records yet
        bob_recalls = bob.recalls
        await converse(chat_b, BOB)
        return (before, bob_recalls), await chat_a.aget(), await chat_b.aget()

    try:
        (before, bob_recalls), seen_a, seen_b = asyncio.run(run())
        assert before == []  # no history of bob's, and no content from his block
        assert bob_recalls == 0  # an empty scope: no content, no recall
        text_a, text_b = block_text(seen_a), block_text(seen_b)
        assert "Lisbon" in text_a and "Marta" in text_a and not re.search("Oslo|Lars|Bergen", text_a)
        assert "Oslo" in text_b and "Lars" in text_b and not re.search("Lisbon|Marta|Porto", text_b)
        ids_a = {r.id for r in asyncio.run(mem.records(user_id="ana"))}
        ids_b = {r.id for r in asyncio.run(mem.records(user_id="bob"))}
        assert ids_a and ids_b and not ids_a & ids_b
        assert set(ana.last_recall.evidence_ids) <= ids_a and set(bob.last_recall.evidence_ids) <= ids_b
    finally:
        mem.close()


def test_bad_arguments_are_named(memory):
    with pytest.raises(ValueError, match="user_id"):
        MemfrontierMemoryBlock(memory)
    with pytest.raises(ValueError, match="memory must be a memfrontier Memory or AsyncMemory"):
        MemfrontierMemoryBlock("mem/", user_id="ana")
    with pytest.raises(ValueError, match="nope"):
        MemfrontierMemoryBlock(memory, user_id="ana", strategy="nope")
    with pytest.raises(ValueError, match="session_id"):
        MemfrontierMemoryBlock(memory, user_id="ana", session_id=" ")
    with pytest.raises(ValueError, match="priority"):
        MemfrontierMemoryBlock(memory, user_id="ana", priority=-1)
    with pytest.raises(ValueError, match="budget"):
        MemfrontierMemoryBlock(memory, user_id="ana", budget=3)


def test_without_llama_index_the_error_names_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "memfrontier.integrations.llamaindex")
    monkeypatch.setitem(sys.modules, "llama_index", None)
    monkeypatch.setitem(sys.modules, "llama_index.core", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'memfrontier\[llamaindex\]'"):
        importlib.import_module("memfrontier.integrations.llamaindex")

"""The facade owns its rules: the four facades mirror each other, and a question to an empty scope or
an unbuilt view, and a build that falls back above the threshold, are refused in Python, REST and
MCP with one message each (a scripted model and a scripted view: control flow only)."""

from __future__ import annotations

import asyncio
import inspect
import re

import httpx2 as httpx
import pytest
from fakes import ScriptedClient

from memfrontier.api import BUILD_ADVICE, STRATEGY_CACHE_SIZE, AsyncMemory, Memory, unbuilt_view_message
from memfrontier.client import AsyncMemoryClient, MemoryClient
from memfrontier.core.errors import EmptyScopeError, empty_scope_message
from memfrontier.core.fallbacks import FallbackError
from memfrontier.core.ledger import Call, current_ledger, record_fallback
from memfrontier.core.types import Context
from memfrontier.strategies import StrategyConfig, ViewNotBuiltError

VERBS = ("add", "search", "ask", "recall", "build", "get", "records", "delete", "delete_all", "usage")
MODEL = "gemma-3-270m-q4_k_m"


def _shape(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def test_the_four_facades_mirror_each_other():
    classes = (Memory, AsyncMemory, MemoryClient, AsyncMemoryClient)
    for verb in VERBS:
        shapes = {cls.__name__: _shape(getattr(cls, verb)) for cls in classes}
        assert len({repr(s) for s in shapes.values()}) == 1, (verb, shapes)
        assert inspect.iscoroutinefunction(getattr(AsyncMemory, verb)) and inspect.iscoroutinefunction(
            getattr(AsyncMemoryClient, verb)
        ), verb
        assert not inspect.iscoroutinefunction(getattr(Memory, verb)) and not inspect.iscoroutinefunction(
            getattr(MemoryClient, verb)
        ), verb
    ask = dict((n, d) for n, _, d in _shape(Memory.ask))
    assert ask["build"] is False and ask["all_scopes"] is False and ask["strategy"] == "rag"


class ScriptedView:
    """A strategy with a view to build: its build makes 10 ``segmenter`` calls of which
    ``fallbacks`` fall back (the records a real construction writes), and the view keeps its
    construction's record per scope, as MemoryCPT's bank and AutoMEM's windows do."""

    name = "scripted_view"
    prompt_version = "v1"
    recipes = ()
    config_class = StrategyConfig
    config = StrategyConfig()  # no options of its own (the Strategy protocol's attribute)

    def __init__(self, fallbacks: int):
        self.fallbacks = fallbacks
        self.built: set = set()
        self.record: dict = {}

    def is_built(self, env, scope) -> bool:
        return scope in self.built

    async def build(self, env, scope, progress=None) -> None:
        ledger = current_ledger()
        for _ in range(10):
            ledger.record(Call(stage="construction", role="segmenter", model_id="scripted", usd=0.0))
        for _ in range(self.fallbacks):
            record_fallback(role="segmenter", module="segmenter", reason="unparsable")
        self.built.add(scope)
        self.record[scope] = {
            "calls_by_role": {"segmenter": 10},
            "fallbacks": [{"role": "segmenter", "module": "segmenter", "tier": None, "reason": "unparsable", "step": 0}]
            * self.fallbacks,
        }

    def construction_usage(self, env, scope) -> dict:
        return self.record.get(scope, {})

    async def context(self, query, env, pref, budget) -> Context:
        return Context(text="Ana moved to Lisbon in May.", evidence_ids=["r1"])


@pytest.fixture()
def memory(tmp_path, minilm):
    m = Memory(
        AsyncMemory.open(
            tmp_path / "store", llm=ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL), embedder=minilm
        )
    )
    yield m
    m.close()


def test_python_refuses_an_empty_scope_and_an_unbuilt_view_and_builds_when_asked(memory):
    with pytest.raises(EmptyScopeError) as e:
        memory.ask("Where does Ana live?", user_id="ana")
    assert str(e.value) == empty_scope_message()
    memory.add(["I moved to Lisbon in May."], user_id="ana")
    view = ScriptedView(fallbacks=0)
    with pytest.raises(ViewNotBuiltError) as e:
        memory.ask("Where does Ana live?", user_id="ana", strategy=view)
    assert str(e.value) == unbuilt_view_message("scripted_view memory view")
    ans = memory.ask("Where does Ana live?", user_id="ana", strategy=view, build=True)
    assert ans.text == "Lisbon" and ans.build is not None
    assert ans.build.usage.calls == 10 and ans.usage.construction.calls == 10  # the build's calls are billed
    assert ans.build.fallbacks["by_role"]["segmenter"]["fallback_share"] == 0.0
    again = memory.ask("Where does Ana live?", user_id="ana", strategy=view)  # built: no build, no refusal
    assert again.build is None and again.usage.construction.calls == 0
    assert memory.usage()["construction"]["calls"] == 10


def test_a_build_above_the_threshold_is_refused_with_evals_message(memory):
    memory.add(["I moved to Lisbon in May."], user_id="ana")
    view = ScriptedView(fallbacks=1)  # 1 of 10 segmenter calls fell back: 10% > 5%
    with pytest.raises(FallbackError) as e:
        memory.ask("Where does Ana live?", user_id="ana", strategy=view, build=True)
    assert str(e.value).startswith("role 'segmenter': 0 of 10 calls failed (0%), 1 fell back (10%); threshold 5%")
    assert "most often unparsable (1)" in str(e.value) and str(e.value).endswith(BUILD_ADVICE)
    assert "--allow-fallbacks" not in str(e.value)  # eval's advice: no such flag here
    assert e.value.report["exceeded"] == ["segmenter"]
    with pytest.raises(FallbackError) as again:  # the refused view is kept, and stays refused
        memory.ask("Where does Ana live?", user_id="ana", strategy=view)
    assert str(again.value) == str(e.value)
    ok = ScriptedView(fallbacks=0)
    report = memory.build(ok, user_id="ana")
    assert report.usage.calls == 10 and report.fallbacks["exceeded"] == []
    with pytest.raises(FallbackError):
        memory.build(ScriptedView(fallbacks=1), user_id="ana")


def test_rest_and_mcp_refuse_with_the_facades_messages(tmp_path, minilm, monkeypatch):
    from memfrontier.client import RefusedBuildError, ServiceEmptyScopeError, UnbuiltViewError
    from memfrontier.server import rest
    from memfrontier.server.keys import SQLiteKeyStore
    from memfrontier.server.mcp import MemoryService, build_server

    views = {"ok": ScriptedView(fallbacks=0), "bad": ScriptedView(fallbacks=1)}
    said = {}  # where -> the refused build's message
    monkeypatch.setattr(rest, "check_strategy_name", lambda name: name)  # the scripted view is no registered name
    monkeypatch.setattr(rest, "check_remote_options", lambda name, options: None)
    mem = AsyncMemory.open(
        tmp_path / "store", llm=ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL), embedder=minilm
    )
    monkeypatch.setattr(  # the facade's strategy by name (REST and MCP ask for it by name)
        mem, "strategy", lambda s, options=None: views[(options or {}).get("v", "ok")] if isinstance(s, str) else s
    )
    keys = SQLiteKeyStore(tmp_path / "keys.db")
    key = keys.create("t")[1]
    app = rest.create_app(
        rest.ServeSettings(store=str(tmp_path / "store"), keys=str(tmp_path / "keys.db")), memory=mem, keys=keys
    )

    async def over_http():
        async with app.router.lifespan_context(app):
            client = AsyncMemoryClient("http://t", key, transport=httpx.ASGITransport(app=app))
            with pytest.raises(ServiceEmptyScopeError) as e:
                await client.ask("Where?", user_id="ana", strategy="scripted_view")
            assert e.value.message == empty_scope_message() and e.value.status == 422
            await client.add(["I moved to Lisbon in May."], user_id="ana")
            with pytest.raises(UnbuiltViewError) as e:
                await client.ask("Where?", user_id="ana", strategy="scripted_view")
            assert e.value.message == unbuilt_view_message("scripted_view memory view") and e.value.status == 409
            with pytest.raises(RefusedBuildError) as e:
                await client.build("scripted_view", user_id="ana", strategy_options={"v": "bad"})
            assert e.value.status == 422 and e.value.message.startswith("role 'segmenter': 0 of 10 calls failed")
            said["rest"] = e.value.message
            report = await client.build("scripted_view", user_id="ana")
            assert report.usage.calls == 10
            ans = await client.ask("Where?", user_id="ana", strategy="scripted_view")
            assert ans.text == "Lisbon"
            await client.aclose()

    asyncio.run(over_http())

    service = MemoryService(tmp_path / "store")
    service._mem = mem

    service.strategy_config = lambda name, options=None: options  # the scripted views take no config
    server = build_server(service)

    async def over_mcp():
        from mcp.server.mcpserver.exceptions import ToolError

        with pytest.raises(ToolError, match="no records in this scope"):
            await server.call_tool("ask", {"question": "Where?", "user_id": "ana"})
        await mem.add(["I moved to Lisbon in May."], user_id="ana")  # MCP scopes carry no tenant prefix
        with pytest.raises(ToolError) as e:
            await server.call_tool("ask", {"question": "Where?", "user_id": "ana", "strategy": "automem"})
        assert unbuilt_view_message("scripted_view memory view") in str(e.value)
        with pytest.raises(ToolError, match="role 'segmenter': 0 of 10 calls failed") as e:
            await server.call_tool(
                "ask",
                {"question": "Where?", "user_id": "ana", "strategy": "automem", "options": {"v": "bad"}, "build": True},
            )
        said["mcp"] = str(e.value).removeprefix("Error executing tool ask: ")
        with pytest.raises(FallbackError) as e:
            await mem.build(ScriptedView(fallbacks=1), user_id="ana")
        said["python"] = str(e.value)

    asyncio.run(over_mcp())
    assert said["rest"] == said["mcp"] == said["python"]  # one message, wherever the build was refused
    mem.close()
    keys.close()


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_an_empty_question_or_query_is_refused_before_any_model_call(memory, blank):
    memory.add(["I moved to Lisbon in May."], user_id="ana")
    with pytest.raises(ValueError, match="question is empty"):
        memory.ask(blank, user_id="ana")
    with pytest.raises(ValueError, match="query is empty"):
        memory.search(blank, user_id="ana")
    assert memory.usage() == {}  # nothing was asked of a model


def test_a_scope_id_that_is_not_one_is_named_without_a_pydantic_dump(memory):
    with pytest.raises(ValueError) as e:
        memory.ask("Where?", user_id="")
    text = str(e.value)
    assert "user_id" in text and "pydantic" not in text and "errors.pydantic.dev" not in text
    # every verb says it as add does (delete_all said "1 validation error for the scope: ...")
    said = "user_id is empty ('')"
    for call in (
        lambda: memory.add(["x"], user_id=""),
        lambda: memory.search("x", user_id=""),
        lambda: memory.get("r1", user_id=""),
        lambda: memory.delete("r1", user_id=""),
        lambda: memory.delete_all(user_id=""),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            call()
    with pytest.raises(ValueError, match=re.escape("agent_id is blank ('  ')")):
        memory.delete_all(agent_id="  ")


def test_a_strategy_named_by_calls_is_built_once_per_configuration_and_stays_in_line(memory):
    aio = memory.aio
    turns = {"unit": "turn", "k": 16}
    first = aio.strategy("rag", turns)
    assert aio.strategy("rag", {"k": 16, "unit": "turn", "neighbours": 0}) is first  # the same effective options
    assert aio.strategy("rag", {"unit": "turn", "k": 8}) is not first
    view = ScriptedView(fallbacks=0)
    assert aio.strategy(view) is view
    with pytest.raises(ValueError, match="strategy_options apply to a strategy given by name"):
        aio.strategy(view, {"k": 1})
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        aio.strategy("nope")
    # a named configuration is the strategy with its options: the same kept object
    rr = {"unit": "turn", "retrievers": ["dense", "bm25", "chunk"], "k": 64, "max_tokens": 672}
    assert aio.strategy("rag-turns") is aio.strategy("rag", rr)
    assert aio.strategy("rag-turns", {"k": 16}) is aio.strategy("rag", {**rr, "k": 16})
    # asks by name run the kept strategy, whose turn view follows records added between them
    memory.add(["I moved to Lisbon in May."], user_id="ana")
    memory.ask("Where did Ana move?", user_id="ana", strategy="rag", strategy_options=turns, build=True)
    porto = memory.add(["In June I moved on to Porto."], user_id="ana").added
    ans = memory.ask("Where did Ana move in June?", user_id="ana", strategy="rag", strategy_options=turns)
    assert set(porto) <= set(ans.evidence_ids) and aio.strategy("rag", turns) is first
    # the latest STRATEGY_CACHE_SIZE are kept: the least recently used is built again
    for k in range(1, STRATEGY_CACHE_SIZE + 1):
        aio.strategy("rag", {"k": k})
    assert aio.strategy("rag", {"k": STRATEGY_CACHE_SIZE}) is aio.strategy("rag", {"k": STRATEGY_CACHE_SIZE})
    assert aio.strategy("rag", turns) is not first


def test_a_strategy_or_budget_of_the_wrong_type_is_named(memory):
    """``strategy=None`` and ``budget=-1`` said AttributeError from deep inside; a budget given as
    a mapping (as REST takes one) is read as a Budget."""
    memory.add(["I moved to Lisbon in May."], user_id="ana")
    with pytest.raises(ValueError, match="strategy must be a strategy name or a Strategy, not NoneType"):
        memory.ask("Where?", user_id="ana", strategy=None)
    with pytest.raises(ValueError, match="budget must be a Budget or a mapping .*, not int"):
        memory.ask("Where?", user_id="ana", budget=-1)
    with pytest.raises(ValueError, match="max_usd"):
        memory.ask("Where?", user_id="ana", budget={"max_usd": -1.0})
    assert memory.usage() == {}  # refused before any model call


def test_budget_of_reads_a_mapping_and_refuses_other_types():
    from memfrontier.core.types import Budget

    assert Budget.of(None) == Budget()
    assert Budget.of({"max_usd": 1e-6, "max_tokens": 500}) == Budget(max_usd=1e-6, max_tokens=500)
    b = Budget(max_tokens=3)
    assert Budget.of(b) is b
    with pytest.raises(ValueError, match="not list"):
        Budget.of([1e-6])
    with pytest.raises(ValueError, match="extra"):
        Budget.of({"usd": 1.0})


def test_recall_returns_the_strategys_context_without_an_answer_call_and_cuts_it_by_whole_lines(memory):
    with pytest.raises(EmptyScopeError):
        memory.recall("Where does Ana live?", user_id="ana")
    memory.add(
        ["I moved to Lisbon in May.", "My sister Joana lives in Porto.", "I work at a bakery on Rua Augusta."],
        user_id="ana",
        session_id="s1",
        timestamp="2026-05-02T10:00:00Z",
    )
    memory.add(["Bob likes Lisbon too."], user_id="bob")
    got = memory.recall("Where does Ana live?", user_id="ana", question_date="2026-10-01")
    assert "Lisbon in May" in got.context and "Bob" not in got.context  # the scope holds
    assert got.usage.query.calls == 0 and got.strategy == "rag" and not got.truncated  # no model call
    assert got.question_date == "2026-10-01T00:00:00+00:00" and len(got.evidence_ids) == 3
    lines = got.context.splitlines()
    count = memory.count_tokens
    room = count(lines[0]) + 1  # the first line alone
    cut = memory.recall("Where does Ana live?", user_id="ana", question_date="2026-10-01", max_context_tokens=room)
    assert cut.truncated and cut.context == lines[0] and count(cut.context) <= room
    assert cut.usage.events == {"budget.context_truncated": 1} and not got.usage.events
    assert cut.evidence_ids == got.evidence_ids  # the ids the context was built from, all of them
    for bad in (0, 2.5, "3"):
        with pytest.raises(ValueError, match="max_context_tokens"):
            memory.recall("Where?", user_id="ana", max_context_tokens=bad)
    view = ScriptedView(fallbacks=0)
    with pytest.raises(ViewNotBuiltError):
        memory.recall("Where?", user_id="ana", strategy=view)
    built = memory.recall("Where?", user_id="ana", strategy=view, build=True)
    assert built.context == "Ana moved to Lisbon in May." and built.build.usage.calls == 10


def test_records_lists_a_scopes_records_oldest_first_by_session_and_the_latest_n(memory):
    memory.add(["first", "second"], user_id="ana", session_id="s1", timestamp="2026-01-01T00:00:00Z")
    memory.add(["third"], user_id="ana", session_id="s2", timestamp="2026-02-01T00:00:00Z")
    memory.add(["bob's"], user_id="bob", session_id="s1")
    assert [r.text for r in memory.records(user_id="ana")] == ["first", "second", "third"]
    assert [r.text for r in memory.records(user_id="ana", session_id="s1")] == ["first", "second"]
    assert [r.text for r in memory.records(user_id="ana", limit=2)] == ["second", "third"]
    assert memory.records(user_id="carol") == []
    with pytest.raises(ValueError, match="user_id"):
        memory.records()
    with pytest.raises(ValueError, match="limit"):
        memory.records(user_id="ana", limit=0)


def test_recall_and_records_over_http_keep_to_the_tenant_and_the_scope(tmp_path, minilm):
    from memfrontier.server import rest
    from memfrontier.server.keys import SQLiteKeyStore

    mem = AsyncMemory.open(
        tmp_path / "store", llm=ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL), embedder=minilm
    )
    keys = SQLiteKeyStore(tmp_path / "keys.db")
    key_a, key_b = keys.create("a")[1], keys.create("b")[1]
    app = rest.create_app(
        rest.ServeSettings(store=str(tmp_path / "store"), keys=str(tmp_path / "keys.db")), memory=mem, keys=keys
    )

    async def over_http():
        async with app.router.lifespan_context(app):
            a = AsyncMemoryClient("http://t", key_a, transport=httpx.ASGITransport(app=app))
            b = AsyncMemoryClient("http://t", key_b, transport=httpx.ASGITransport(app=app))
            await a.add(["I moved to Lisbon in May.", "I love tiles."], user_id="ana", session_id="s1")
            await b.add(["I moved to Berlin."], user_id="ana", session_id="s1")  # another tenant's "ana"
            got = await a.recall("Where do I live?", user_id="ana", max_context_tokens=500)
            assert "Lisbon" in got.context and "Berlin" not in got.context and got.usage.query.calls == 0
            listed = await a.records(user_id="ana", session_id="s1")
            assert [r.text for r in listed] == ["I moved to Lisbon in May.", "I love tiles."]
            assert listed[0].scope.user_id == "ana"  # the tenant's own name for the scope
            assert [r.text for r in await b.records(user_id="ana", limit=5)] == ["I moved to Berlin."]
            assert [r.text for r in await a.records(user_id="ana", limit=1)] == ["I love tiles."]

    asyncio.run(over_http())


def test_search_folds_copies_unless_asked_not_to(memory):
    memory.add(["My favourite tea is genmaicha."], user_id="ana", session_id="s1", timestamp="2026-01-01")
    memory.add(["My favourite tea is genmaicha."], user_id="ana", session_id="s2", timestamp="2026-02-01")
    folded = memory.search("favourite tea", user_id="ana")
    assert len(folded) == 1 and folded[0].chunk.session_id == "s2" and len(folded[0].folded) == 1
    both = memory.search("favourite tea", user_id="ana", fold=False)
    assert sorted(h.chunk.session_id for h in both) == ["s1", "s2"] and all(not h.folded for h in both)

"""A LangGraph store over the facade (``memfrontier.integrations.langgraph``), checked with the real
``langgraph`` package, the SQLite store and MiniLM: items round-trip through records of the scope
their namespace names, searches rank, filter and page as ``BaseStore`` says, two users never see
each other's items, and a compiled graph with a checkpointer writes a memory in one thread and
reads it back in another."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from typing import TypedDict

import pytest
from fakes import ScriptedClient

pytest.importorskip("langgraph.store.base", reason="the langgraph extra")

from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from memfrontier.api import AsyncMemory, Memory  # noqa: E402
from memfrontier.core.types import Scope  # noqa: E402
from memfrontier.integrations.langgraph import (  # noqa: E402
    META_KEY,
    UNINDEXED_TEXT,
    MemfrontierStore,
    item_id,
    namespace_scope,
)

MODEL = "gemma-3-270m-q4_k_m"
ANA = ("users", "ana", "memories")
BOB = ("users", "bob", "memories")

FACTS = [
    "Ana moved to Lisbon in May 2023.",
    "Ana's cat is called Miso and sleeps on the sofa.",
    "Ana works night shifts as a nurse at the city hospital.",
    "Ana prefers green tea to coffee.",
    "Ana plays the cello in an amateur orchestra on Sundays.",
]


def open_async(tmp_path, minilm) -> AsyncMemory:
    return AsyncMemory.open(
        tmp_path / "store", llm=ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL), embedder=minilm
    )


@pytest.fixture()
def memory(tmp_path, minilm):
    m = Memory(open_async(tmp_path, minilm))
    yield m
    m.close()


@pytest.fixture()
def store(memory):
    return MemfrontierStore(memory)


def put_facts(store, ns=ANA, facts=FACTS):
    for i, text in enumerate(facts):
        store.put(ns, f"m{i}", {"text": text, "n": i})


# -- mapping -----------------------------------------------------------------------------------


def test_a_namespace_names_one_scope_and_an_item_id_holds_the_rest_and_the_key():
    assert namespace_scope(("users", "ana", "prefs")) == (Scope(user_id="ana"), ("prefs",))
    assert namespace_scope(("agents", "bot")) == (Scope(agent_id="bot"), ())
    assert namespace_scope(("runs", "r1", "a", "b")) == (Scope(run_id="r1"), ("a", "b"))
    assert item_id(("users", "ana", "prefs"), "theme") == '["prefs","theme"]'
    # injective: the rest and the key cannot be confused, whatever their characters
    assert item_id(("users", "ana", "x"), "y") != item_id(("users", "ana"), 'x","y')
    assert item_id(("users", "ana", "x", "y"), "z") != item_id(("users", "ana", "x"), "y/z")
    assert item_id(("users", "ana"), "") == '[""]'  # still a valid identifier


@pytest.mark.parametrize("namespace", [("memories",), ("users",), ("teams", "x"), ("user", "ana"), ("users", " "), ()])
def test_a_namespace_that_names_no_scope_is_refused_naming_the_mapping(store, memory, namespace):
    with pytest.raises(InvalidNamespaceError) as e:
        store.batch([PutOp(namespace, "k", {"text": "hello"})])
    assert isinstance(e.value, ValueError)
    assert "'users' (user_id=ID)" in str(e.value) or "blank" in str(e.value)
    with pytest.raises(ValueError):
        store.batch([GetOp(namespace, "k")])


def test_a_search_or_a_listing_that_names_no_scope_is_refused(store):
    put_facts(store)
    for prefix in [(), ("users",), ("users", "*"), ("*", "ana")]:
        with pytest.raises(InvalidNamespaceError, match="names no scope|across scopes"):
            store.search(prefix, query="cat")
        with pytest.raises(InvalidNamespaceError, match="names no scope|across scopes"):
            store.search(prefix)
    with pytest.raises(InvalidNamespaceError, match="across scopes"):
        store.list_namespaces()
    with pytest.raises(InvalidNamespaceError, match="across scopes"):
        store.list_namespaces(suffix=("memories",))
    for prefix in [("users",), ("users", "*"), ("*", "ana", "memories")]:
        with pytest.raises(InvalidNamespaceError):
            store.list_namespaces(prefix=prefix)


def test_a_batch_checks_every_op_before_it_writes_anything(store, memory):
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(ANA, "ok", {"text": "first"}), PutOp(("teams", "x"), "bad", {"text": "second"})])
    with pytest.raises(ValueError, match="JSON"):
        store.batch([PutOp(ANA, "ok", {"text": "first"}), PutOp(ANA, "nan", {"x": float("nan")})])
    with pytest.raises(ValueError, match="unknown operator '\\$in'"):
        store.batch([PutOp(ANA, "ok", {"text": "first"}), SearchOp(ANA, filter={"n": {"$in": [1]}})])
    assert memory.records(user_id="ana") == []


# -- put / get / update / delete ---------------------------------------------------------------


def test_put_get_update_and_delete_round_trip_through_one_record(store, memory):
    value = {"text": "Ana moved to Lisbon.", "tags": ["move", "city"], "meta": {"year": 2023, "ok": True}}
    assert store.put(ANA, "home", value) is None
    item = store.get(ANA, "home")
    assert (item.namespace, item.key, item.value) == (ANA, "home", value)
    assert item.created_at == item.updated_at and item.created_at.tzinfo is not None
    assert abs((datetime.now(timezone.utc) - item.created_at).total_seconds()) < 60

    (rec,) = memory.records(user_id="ana")
    assert (rec.id, rec.session_id, rec.scope) == ('["memories","home"]', '["memories","home"]', Scope(user_id="ana"))
    assert rec.text == "Ana moved to Lisbon."  # the value's text field is what is indexed
    assert rec.meta[META_KEY]["namespace"] == list(ANA) and rec.meta[META_KEY]["value"] == value

    store.put(ANA, "home", {"text": "Ana moved to Porto."})
    again = store.get(ANA, "home")
    assert again.value == {"text": "Ana moved to Porto."}
    assert again.created_at == item.created_at and again.updated_at > item.updated_at
    assert [r.text for r in memory.records(user_id="ana")] == ["Ana moved to Porto."]
    assert store.get(ANA, "elsewhere") is None
    assert store.get(("users", "ana", "other"), "home") is None  # the exact namespace only

    store.batch([PutOp(ANA, "home", None)])  # a None value deletes
    assert store.get(ANA, "home") is None
    assert memory.records(user_id="ana") == []
    store.put(ANA, "k2", {"text": "x"})
    store.delete(ANA, "k2")
    store.delete(ANA, "never-there")  # deleting what is not there is a no-op
    assert memory.records(user_id="ana") == []


def test_one_batch_runs_its_ops_in_order_and_returns_their_results(store):
    out = store.batch(
        [
            PutOp(ANA, "a", {"text": "first"}),
            GetOp(ANA, "a"),
            PutOp(ANA, "a", {"text": "second"}),
            GetOp(ANA, "a"),
            PutOp(ANA, "a", None),
            GetOp(ANA, "a"),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("users", "ana")),)),
        ]
    )
    assert out[0] is None and out[2] is None and out[4] is None
    assert out[1].value == {"text": "first"} and out[3].value == {"text": "second"} and out[5] is None
    assert out[6] == []


def test_a_value_that_is_not_json_or_a_ttl_is_refused(store, memory):
    with pytest.raises(ValueError, match="value must be JSON"):
        store.put(ANA, "k", {"when": datetime.now()})
    with pytest.raises(ValueError, match="value must be a dict"):
        store.batch([PutOp(ANA, "k", ["not", "a", "dict"])])
    assert store.supports_ttl is False
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(ANA, "k", {"text": "x"}, ttl=5)
    with pytest.raises(NotImplementedError, match="TTL"):
        store.batch([PutOp(ANA, "k", {"text": "x"}, ttl=5.0)])
    assert memory.records(user_id="ana") == []


def test_what_is_indexed_follows_index_then_the_store_fields_then_text_content_or_json(memory):
    store = MemfrontierStore(memory)
    store.put(ANA, "t", {"text": "from text", "content": "not this"})
    store.put(ANA, "c", {"content": "from content", "n": 1})
    store.put(ANA, "j", {"b": 2, "a": "x y"})
    store.put(ANA, "f", {"title": "Title here", "body": {"parts": ["one", "two"]}}, index=["title", "body.parts[*]"])
    store.put(ANA, "w", {"title": "T"}, index=["$"])
    store.put(ANA, "off", {"text": "secret words"}, index=False)
    store.put(ANA, "none", {"other": "x"}, index=["missing"])
    texts = {r.meta[META_KEY]["key"]: r.text for r in memory.records(user_id="ana")}
    assert texts == {
        "t": "from text",
        "c": "from content",
        "j": '{"a":"x y","b":2}',
        "f": "Title here\none\ntwo",
        "w": '{"title":"T"}',
        "off": UNINDEXED_TEXT,
        "none": UNINDEXED_TEXT,
    }
    fielded = MemfrontierStore(memory, index={"fields": ["summary"]})
    fielded.put(ANA, "s", {"summary": "the summary", "text": "the text"})
    assert [r.text for r in memory.records(user_id="ana") if r.meta[META_KEY]["key"] == "s"] == ["the summary"]
    with pytest.raises(ValueError, match="dims"):
        MemfrontierStore(memory, index={"dims": 384, "embed": "openai:x", "fields": ["text"]})
    with pytest.raises(ValueError, match="index must be a list"):
        store.put(ANA, "bad", {"text": "x"}, index="text")
    with pytest.raises(ValueError, match="Memory or AsyncMemory"):
        MemfrontierStore(object())


def test_an_unindexed_item_is_kept_out_of_query_search_only(store):
    put_facts(store)
    store.put(ANA, "hidden", {"text": "Ana's cat Miso is afraid of the vacuum cleaner."}, index=False)
    assert store.get(ANA, "hidden").value["text"].startswith("Ana's cat")
    assert "hidden" not in [r.key for r in store.search(("users", "ana"), query="Ana's cat Miso", limit=50)]
    assert "hidden" in [r.key for r in store.search(("users", "ana"), limit=50)]


# -- search ------------------------------------------------------------------------------------


def test_a_query_ranks_the_relevant_item_first_with_descending_scores(store):
    put_facts(store)
    for query, best in [("What is the name of Ana's cat?", "m1"), ("which city did Ana move to?", "m0")]:
        found = store.search(("users", "ana"), query=query)
        assert found[0].key == best
        assert {r.key for r in found} == {f"m{i}" for i in range(len(FACTS))}  # every indexed item, once
        scores = [r.score for r in found]
        assert all(isinstance(s, float) and s > 0 for s in scores)
        assert scores == sorted(scores, reverse=True)
        assert found[0].value == {"text": FACTS[int(best[1:])], "n": int(best[1:])}
        assert found[0].namespace == ANA


def test_two_items_with_the_same_text_are_two_items_to_a_query(store, memory):
    same = {"text": "Ana's favourite tea is genmaicha."}
    store.put(("users", "ana", "facts"), "a", same)
    store.put(("users", "ana", "prefs"), "b", same)  # the later copy, in another namespace
    assert [r.key for r in store.search(("users", "ana", "facts"), query="Ana's favourite tea")] == ["a"]
    assert {r.key for r in store.search(("users", "ana"), query="Ana's favourite tea")} == {"a", "b"}
    folded = memory.search("Ana's favourite tea", user_id="ana")  # the facade's default folds the copy
    assert len(folded) == 1 and len(folded[0].folded) == 1


def test_a_query_search_widens_until_it_has_the_items_under_the_prefix(store, memory):
    music = [f"Ana practised cello piece number {i} for the orchestra concert." for i in range(24)]
    put_facts(store, ("users", "ana", "music"), music)
    other = ["Bus timetable for line 28 changes in winter.", "The bakery closes at noon.", "Rain is due Friday."]
    put_facts(store, ("users", "ana", "errands"), other)
    query = "cello orchestra concert practice"
    # the first 10 hits of the scope are all music items: a search that did not widen would find none
    first = memory.search(query, user_id="ana", k=10)
    assert all('"music"' in h.chunk.session_id for h in first)
    found = store.search(("users", "ana", "errands"), query=query, limit=3)
    assert sorted(r.key for r in found) == ["m0", "m1", "m2"]
    assert all(r.namespace == ("users", "ana", "errands") for r in found)


def test_offset_and_limit_page_both_searches(store):
    put_facts(store)
    everything = store.search(("users", "ana"), query="Ana", limit=10)
    assert len(everything) == 5
    assert [r.key for r in store.search(("users", "ana"), query="Ana", limit=2, offset=1)] == [
        r.key for r in everything[1:3]
    ]
    assert store.search(("users", "ana"), query="Ana", limit=0) == []
    assert store.search(("users", "ana"), query="Ana", offset=5) == []
    newest_first = [r.key for r in store.search(("users", "ana"))]
    assert newest_first == ["m4", "m3", "m2", "m1", "m0"]
    assert all(r.score is None for r in store.search(("users", "ana")))
    store.put(ANA, "m1", {"text": FACTS[1], "n": 1})  # updated now: first
    assert [r.key for r in store.search(("users", "ana"), limit=2)] == ["m1", "m4"]
    assert [r.key for r in store.search(("users", "ana"), limit=2, offset=2)] == ["m3", "m2"]
    with pytest.raises(ValueError, match="limit must be an integer >= 0"):
        store.search(("users", "ana"), limit=-1)
    with pytest.raises(ValueError, match="offset must be an integer >= 0"):
        store.search(("users", "ana"), query="x", offset=1.5)


def test_filters_apply_each_operator_to_the_value(store):
    rows = [
        ("a", {"text": "Alpha note about tea", "n": 1, "kind": "note", "when": "2024-01-05", "meta": {"lang": "en"}}),
        ("b", {"text": "Beta note about tea", "n": 2, "kind": "note", "when": "2024-03-01", "meta": {"lang": "pt"}}),
        ("c", {"text": "Gamma task about tea", "n": 3, "kind": "task", "when": "2024-06-30", "flag": True}),
        ("d", {"text": "Delta task about tea", "n": 4.5, "kind": "task", "when": "2025-01-01", "flag": 1}),
    ]
    for key, value in rows:
        store.put(ANA, key, value)

    def keys(flt, query=None):
        return sorted(r.key for r in store.search(("users", "ana"), query=query, filter=flt))

    assert keys({"kind": "note"}) == ["a", "b"]
    assert keys({"kind": {"$eq": "task"}}) == ["c", "d"]
    assert keys({"kind": {"$ne": "task"}}) == ["a", "b"]
    assert keys({"n": {"$gt": 2}}) == ["c", "d"]
    assert keys({"n": {"$gte": 2}}) == ["b", "c", "d"]
    assert keys({"n": {"$lt": 2}}) == ["a"]
    assert keys({"n": {"$lte": 3}}) == ["a", "b", "c"]
    assert keys({"n": {"$gt": 1, "$lt": 4}}) == ["b", "c"]  # both operators hold
    assert keys({"when": {"$gte": "2024-03-01", "$lt": "2025-01-01"}}) == ["b", "c"]  # strings order as text
    assert keys({"n": {"$gt": "1"}}) == []  # a number never orders against a string
    assert keys({"kind": "task", "n": {"$lt": 4}}) == ["c"]  # every field's condition holds
    assert keys({"meta": {"lang": "pt"}}) == ["b"]  # a dict matches the nested fields it names
    assert keys({"flag": True}) == ["c"]  # a boolean equals only a boolean (not 1)
    assert keys({"flag": {"$ne": True}}) == ["a", "b", "d"]  # a missing field matches $ne only
    assert keys({"n": 4.5}) == ["d"] and keys({"n": 1.0}) == ["a"]  # numbers by value
    assert keys({"kind": "note"}, query="tea") == ["a", "b"]
    assert keys({"n": {"$gte": 3}}, query="Gamma task") == ["c", "d"]
    with pytest.raises(ValueError, match="unknown operator"):
        keys({"n": {"$regex": "x"}})
    with pytest.raises(ValueError, match="may not be mixed"):
        keys({"meta": {"$eq": 1, "lang": "en"}})


# -- namespaces --------------------------------------------------------------------------------


def test_list_namespaces_by_prefix_suffix_wildcard_and_depth(store):
    for ns in [
        ("users", "ana"),
        ("users", "ana", "prefs"),
        ("users", "ana", "memories"),
        ("users", "ana", "memories", "2024"),
        ("users", "ana", "trips", "2024"),
    ]:
        store.put(ns, "k", {"text": f"item in {'/'.join(ns)}"})
    store.put(("users", "bob", "prefs"), "k", {"text": "bob's"})
    everything = [
        ("users", "ana"),
        ("users", "ana", "memories"),
        ("users", "ana", "memories", "2024"),
        ("users", "ana", "prefs"),
        ("users", "ana", "trips", "2024"),
    ]
    assert store.list_namespaces(prefix=("users", "ana")) == everything
    assert store.list_namespaces(prefix=("users", "ana", "memories")) == everything[1:3]
    assert store.list_namespaces(prefix=("users", "ana"), max_depth=3) == [
        ("users", "ana"),
        ("users", "ana", "memories"),
        ("users", "ana", "prefs"),
        ("users", "ana", "trips"),
    ]
    assert store.list_namespaces(prefix=("users", "ana"), suffix=("2024",)) == [everything[2], everything[4]]
    assert store.list_namespaces(prefix=("users", "ana", "*", "2024")) == [everything[2], everything[4]]
    assert store.list_namespaces(prefix=("users", "ana"), suffix=("ana", "*")) == everything[1:2] + everything[3:4]
    assert store.list_namespaces(prefix=("users", "ana"), limit=2, offset=1) == everything[1:3]
    assert store.list_namespaces(prefix=("users", "nobody")) == []
    with pytest.raises(ValueError, match="max_depth"):
        store.list_namespaces(prefix=("users", "ana"), max_depth=0)


def test_agents_and_runs_namespaces_are_their_scopes_and_other_records_are_no_items(store, memory):
    store.put(("agents", "planner", "notes"), "n1", {"text": "The planner prefers short plans."})
    store.put(("runs", "r-7"), "n1", {"text": "Run 7 started at noon."})
    assert [r.scope for r in memory.records(agent_id="planner")] == [Scope(agent_id="planner")]
    assert [r.scope for r in memory.records(run_id="r-7")] == [Scope(run_id="r-7")]
    assert store.get(("agents", "planner", "notes"), "n1").value["text"].startswith("The planner")
    assert [r.key for r in store.search(("runs", "r-7"), query="when did run 7 start")] == ["n1"]
    # records the application adds itself (plain chat turns, a user's records under an agent) are no items
    memory.add([{"role": "user", "content": "The planner likes long plans too."}], user_id="ana", agent_id="planner")
    memory.add([{"role": "user", "content": "Ana likes short plans."}], user_id="ana")
    assert store.search(("agents", "planner"), limit=50) != []
    assert [r.key for r in store.search(("agents", "planner"), query="plans", limit=50)] == ["n1"]
    assert [r.key for r in store.search(("agents", "planner"), limit=50)] == ["n1"]
    assert store.search(("users", "ana"), query="plans") == [] and store.search(("users", "ana")) == []
    assert store.list_namespaces(prefix=("users", "ana")) == []


def test_two_users_never_see_each_others_items(store, memory):
    put_facts(store, ANA)
    store.put(BOB, "m0", {"text": "Bob moved to Oslo and keeps a parrot.", "n": 0})
    store.put(("users", "bob", "secret"), "s", {"text": "Bob's cat is called Miso too."})
    assert store.get(BOB, "m0").value["text"].startswith("Bob") and store.get(ANA, "m0").value["text"] == FACTS[0]
    assert store.get(BOB, "m1") is None  # ana's key, bob's namespace
    assert store.get(("users", "ana", "secret"), "s") is None
    ana_hits = store.search(("users", "ana"), query="cat called Miso parrot Oslo Bob", limit=50)
    assert {r.namespace[:2] for r in ana_hits} == {("users", "ana")} and len(ana_hits) == len(FACTS)
    bob_hits = store.search(("users", "bob"), query="Ana moved to Lisbon", limit=50)
    assert sorted(r.key for r in bob_hits) == ["m0", "s"]
    assert all(r.namespace[:2] == ("users", "bob") for r in store.search(("users", "bob"), limit=50))
    assert store.list_namespaces(prefix=("users", "bob")) == [BOB, ("users", "bob", "secret")]
    assert store.list_namespaces(prefix=("users", "ana")) == [ANA]
    store.delete(BOB, "m1")  # ana has an m1; bob's delete cannot reach it
    assert store.get(ANA, "m1") is not None
    assert len(memory.records(user_id="ana")) == len(FACTS)


# -- async -------------------------------------------------------------------------------------


def test_the_async_path_runs_on_an_async_memory(tmp_path, minilm):
    async def main():
        mem = open_async(tmp_path, minilm)
        try:
            store = MemfrontierStore(mem)
            for i, text in enumerate(FACTS):
                await store.aput(ANA, f"m{i}", {"text": text, "n": i})
            got = await store.aget(ANA, "m3")
            found = await store.asearch(("users", "ana"), query="what does Ana drink?", filter={"n": {"$gte": 1}})
            spaces = await store.alist_namespaces(prefix=("users", "ana"))
            await store.adelete(ANA, "m3")
            gone = await store.aget(ANA, "m3")
            left = await mem.records(user_id="ana")
            with pytest.raises(RuntimeError, match="AsyncMemory: use abatch"):
                store.get(ANA, "m0")
            return got, found, spaces, gone, left
        finally:
            mem.close()

    got, found, spaces, gone, left = asyncio.run(main())
    assert got.value == {"text": FACTS[3], "n": 3}
    assert found[0].key == "m3" and "m0" not in [r.key for r in found]
    assert spaces == [ANA]
    assert gone is None and len(left) == len(FACTS) - 1


def test_a_memory_serves_the_async_methods_too(store, memory):
    store.put(ANA, "k", {"text": "written by the sync facade"})
    item = asyncio.run(store.aget(ANA, "k"))
    assert item.value == {"text": "written by the sync facade"}


# -- a graph -----------------------------------------------------------------------------------


class State(TypedDict, total=False):
    message: str
    reply: str


def agent(state: State, config: RunnableConfig, *, store: BaseStore) -> State:
    """A plain-Python stand-in for a model: "remember: X" stores X for the user, anything else is
    answered with the user's best-matching memory."""
    ns = ("users", config["configurable"]["user_id"], "memories")
    message = state["message"]
    if message.startswith("remember: "):
        store.put(ns, uuid.uuid4().hex, {"text": message.removeprefix("remember: ")})
        return {"reply": "noted"}
    found = store.search(ns, query=message, limit=1)
    return {"reply": found[0].value["text"] if found else "I don't know yet."}


def test_a_graph_remembers_in_one_thread_and_recalls_in_another(store, memory):
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    graph = builder.compile(checkpointer=InMemorySaver(), store=store)

    def cfg(thread, user):
        return {"configurable": {"thread_id": thread, "user_id": user}}

    assert graph.invoke({"message": "remember: I moved to Lisbon in May 2023."}, cfg("t1", "ana"))["reply"] == "noted"
    graph.invoke({"message": "remember: My cat is called Miso."}, cfg("t1", "ana"))
    assert graph.invoke({"message": "Which city do I live in?"}, cfg("t2", "ana"))["reply"] == (
        "I moved to Lisbon in May 2023."
    )
    assert graph.invoke({"message": "What is my cat's name?"}, cfg("t3", "ana"))["reply"] == "My cat is called Miso."
    assert graph.invoke({"message": "Which city do I live in?"}, cfg("t4", "bob"))["reply"] == "I don't know yet."
    # the threads are the checkpointer's; the memories are the user's records
    assert graph.get_state(cfg("t2", "ana")).values["message"] == "Which city do I live in?"
    assert sorted(r.text for r in memory.records(user_id="ana")) == [
        "I moved to Lisbon in May 2023.",
        "My cat is called Miso.",
    ]
    assert memory.records(user_id="bob") == []

"""The input boundary through the network: ids in URL paths round-trip through the clients, and
odd values reach the REST service as a 422 naming the field (never a 500)."""

from __future__ import annotations

import asyncio

import pytest
from fakes import ScriptedClient
from test_server import running

from memfrontier.api import AsyncMemory
from memfrontier.client import AsyncMemoryClient, MemoryClient
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.server.keys import SQLiteKeyStore
from memfrontier.server.rest import ServeSettings, create_app

ODD_IDS = [".", "..", "a/b", "%", "?x", "#", " x ", "a b", "%2E", "a/../b", "./x", "é/..", "a\\b", "+"]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("svc")
    mem = AsyncMemory.open(
        root / "store",
        llm=ScriptedClient(lambda m: "ok", model_id="gemma-3-270m-q4_k_m"),
        embedder=MiniLMEmbedder(num_threads=1),
    )
    keys = SQLiteKeyStore(root / "keys.db")
    settings = ServeSettings(store=str(root / "store"), keys=str(root / "keys.db"))
    with running(create_app(settings, memory=mem, keys=keys)) as url:
        yield {"url": url, "key": keys.create("tenant-paths")[1]}
    mem.close()
    keys.close()


def test_every_record_id_round_trips_through_the_sync_client(service):
    with MemoryClient(service["url"], service["key"]) as m:
        msgs = [{"role": "user", "content": f"note number {i}", "id": rid} for i, rid in enumerate(ODD_IDS)]
        assert m.add(msgs, user_id="paths", session_id="s1").added == ODD_IDS
        for i, rid in enumerate(ODD_IDS):
            rec = m.get(rid, user_id="paths")
            assert rec is not None and (rec.id, rec.text) == (rid, f"note number {i}"), rid
        for rid in ODD_IDS:
            assert m.delete(rid, user_id="paths") is True, rid
            assert m.get(rid, user_id="paths") is None and m.delete(rid, user_id="paths") is False, rid


def test_every_record_id_round_trips_through_the_async_client(service):
    async def go():
        async with AsyncMemoryClient(service["url"], service["key"]) as m:
            msgs = [{"role": "user", "content": f"async note {i}", "id": rid} for i, rid in enumerate(ODD_IDS)]
            assert (await m.add(msgs, user_id="apaths", session_id="s1")).added == ODD_IDS
            for i, rid in enumerate(ODD_IDS):
                assert (await m.get(rid, user_id="apaths")).text == f"async note {i}", rid
            for rid in ODD_IDS:
                assert await m.delete(rid, user_id="apaths") is True, rid
                assert await m.get(rid, user_id="apaths") is None, rid

    asyncio.run(go())


def test_clients_replace_lone_surrogates_in_text_and_refuse_them_in_ids(service):
    with MemoryClient(service["url"], service["key"]) as m:
        res = m.add([{"role": "user", "content": "tea \ud83d time", "id": "sur"}], user_id="sur")
        assert res.added == ["sur"] and m.get("sur", user_id="sur").text == "tea \ufffd time"
        assert [h.chunk.record_ids for h in m.search("tea \udc00", user_id="sur")] == [["sur"]]
        for kw in ({"user_id": "u\ud800"}, {"user_id": "u", "session_id": "s\udfff"}):
            with pytest.raises(ValueError, match="(user_id|session_id) holds a lone surrogate"):
                m.add("hello", **kw)
        with pytest.raises(ValueError, match="user_id holds a lone surrogate"):
            m.get("sur", user_id="\ud800")

    async def go():
        async with AsyncMemoryClient(service["url"], service["key"]) as m:
            assert (await m.add("coffee \ud83d", user_id="asur", session_id="s")).added
            hits = await m.search("coffee \ud83d", user_id="asur")
            assert "coffee \ufffd" in hits[0].chunk.text
            with pytest.raises(ValueError, match="user_id holds a lone surrogate"):
                await m.search("x", user_id="\udc00")

    asyncio.run(go())


OUT_OF_RANGE = ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+05:00"]


@pytest.mark.parametrize("ts", OUT_OF_RANGE)
def test_a_timestamp_outside_years_1_to_9999_in_utc_is_a_value_error_naming_the_field(ts):
    from memfrontier.core.messages import messages_to_records
    from memfrontier.core.timeutil import canonical_timestamp, parse_instant
    from memfrontier.core.types import Record, Scope

    assert parse_instant(ts) is None  # not an instant Python can hold
    with pytest.raises(ValueError, match=r"timestamp '.*' falls outside years 1-9999 in UTC"):
        canonical_timestamp(ts)
    with pytest.raises(ValueError, match=r"message 0\.timestamp '.*' falls outside years 1-9999"):
        messages_to_records([{"content": "x", "timestamp": ts}], scope=Scope(user_id="u"), session_id="s")
    with pytest.raises(ValueError, match="falls outside years 1-9999"):
        Record(id="r", text="x", timestamp=ts)


@pytest.mark.parametrize("ts", OUT_OF_RANGE)
def test_rest_answers_422_for_an_out_of_range_timestamp(service, ts):
    import httpx2 as httpx

    with httpx.Client(base_url=service["url"], headers={"Authorization": f"Bearer {service['key']}"}) as h:
        for body in (
            {"messages": "x", "user_id": "u", "timestamp": ts},
            {"messages": [{"content": "x", "timestamp": ts}], "user_id": "u"},
        ):
            r = h.post("/v1/memories", json=body)
            assert r.status_code == 422 and "falls outside years 1-9999" in r.text, r.text
        assert h.post("/v1/memories", json={"messages": "a note", "user_id": "u"}).status_code == 200
        r = h.post("/v1/ask", json={"question": "when?", "user_id": "u", "question_date": ts})
        assert r.status_code == 422 and "question_date" in r.text and "1-9999" in r.text, r.text

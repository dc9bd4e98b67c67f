"""Reliability of the embedded store under crashes, concurrency and cross-tenant probes.

Prints three tables of counts, in one run:

(a) kill -9 during ingest: a child process adds ``--messages`` messages one by one (one ``add``
    each, client ids ``m-<i>``) and prints each id once ``add`` has returned; the parent kills it
    with SIGKILL after a random number of acknowledgements (``--trials`` times, seeded). Then the
    store is reopened: ``PRAGMA integrity_check``, acknowledged ids missing (must be 0), records
    present, re-running the whole ingest (adds exactly the rest), and re-running it once more
    (adds nothing).
(a') kill -9 during deletes: ``--users`` users, each with a record and every derived view (banks,
    graph, BM25 files); a child process ``delete_all``s them one after another and is killed after
    a random number of acknowledged deletes (plus a random delay). After reopening: intents left
    pending at the kill and after the open (must be 0), acknowledged users with records or text
    left on disk (must be 0), whether the delete in flight happened, and users whose records are
    gone but whose text is still on disk (must be 0).
(b) concurrent writers: ``--threads`` threads sharing one ``Memory`` (``--thread-adds`` adds
    each; 10 x 50 by default, the issue's case) and ``--processes`` processes sharing one store
    directory (``--adds`` adds each): records expected, stored, calls that raised, wall seconds.
(c) scope probes: users alice and bob hold records with the same client ids; every read path is
    asked, as bob, for alice's secret, and without any scope: search, ask's context (``rag``,
    ``longctx``), get, delete, the MemPilot and MemoryCPT banks, the graph index, the MCP tools
    (search, rg, read, index_query, and a call without scope) and the CLI. Leaks must be 0 and
    unscoped calls refused (a control row shows the same queries finding the secret as alice,
    so the probes can see it). Then ``delete_all(user_id="alice")`` and a byte grep of every file
    under the store directory for her secret.

Usage::

    .venv/bin/python benchmarks/bench_reliability.py [--trials 3] [--messages 120] [--threads 10]
        [--thread-adds 50] [--processes 3] [--adds 20] [--seed 0]

No model call is made (bank items come from the offline compressor, graph notes are written
directly); MiniLM is loaded in every process. Only CPU is used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
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

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


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


def kill_during_ingest(trials: int, n: int, rng: random.Random) -> list[dict]:
    from memfrontier import Memory
    from memfrontier.core.types import Scope

    rows = []
    for t in range(trials):
        store = Path(tempfile.mkdtemp(prefix="mf-kill-")) / "store"
        kill_after = rng.randint(5, n - 5)
        proc = subprocess.Popen([sys.executable, __file__, "--child-ingest", str(store), str(n)],
                                stdout=subprocess.PIPE, text=True, env=ENV)
        acked: list[str] = []
        for line in proc.stdout:
            if line.startswith("ack "):
                acked.append(line.split()[1])
                if len(acked) >= kill_after:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
        db = sqlite3.connect(store / "store.db")
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        db.close()
        with Memory.open(store) as m:
            scope = Scope(user_id="ingest")
            present = {r.id for r in m.aio.store.records(scope)}
            missing = [i for i in acked if i not in present]
            def ingest() -> int:  # the whole ingest again, by session (the child's sessions)
                return sum(len(m.add([message(i) for i in range(s, min(s + 10, n))], user_id="ingest",
                                     session_id=f"s{s // 10}").added) for s in range(0, n, 10))

            rerun = ingest()
            again = ingest()
            total = m.aio.store.count(scope)["records"]
        rows.append({"trial": t + 1, "acked": len(acked), "killed_rc": proc.returncode, "integrity": integrity,
                     "acked_missing": len(missing), "present": len(present), "rerun_added": rerun,
                     "rerun_again_added": again, "final_records": total})
    return rows


# -- (a') kill -9 during deletes --------------------------------------------------------------------


def _nonce(user: str) -> bytes:
    return f"nonce{user}q{sum(map(ord, user)) * 7919}".encode()


def _populate_views(m, users: list[str]) -> None:
    """One record per user and every derived view of it (no model call): MemPilot's compressed bank,
    a MemoryCPT-like bank with a trace, and a Ladybug graph with its notes cache."""
    from memfrontier.core.jsonio import write_json_atomic
    from memfrontier.core.types import Scope
    from memfrontier.graph import GRAPH_VIEW, open_graph, state_dir
    from memfrontier.store.bank import BankItem, MemoryBank, Trace
    from memfrontier.views.compress import OfflineCompressor
    from memfrontier.views.compressed_bank import build_from_store, open_bank
    from memfrontier.views.graph_builder import graph_from_notes
    from memfrontier.views.graph_notes import Note

    store = m.aio.store
    bank, cpt = open_bank(store), MemoryBank.for_store(store, "memorycpt-probe")
    for u in users:
        text = f"{u} keeps the code {_nonce(u).decode()} in a drawer."
        m.add([{"id": "r-1", "content": text}], user_id=u, session_id="s1")
        sc = Scope(user_id=u)
        build_from_store(bank, store, sc, OfflineCompressor(rate=1.0))
        cpt.apply([BankItem(id=f"ep-{u}", kind="episode", scope=sc, text=text, source_ids=["r-1"])],
                  traces=[(sc, Trace(role="episode_generator", model_id="m", prompt_version="v",
                                     messages=[{"role": "user", "content": text}]))])
        notes = [Note(text, [u], "codes", "", "s1", ["r-1"])]
        g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), sc)
        g.replace(graph_from_notes(notes, sc.key()))
        g.close()
        write_json_atomic(state_dir(store.view_dir(GRAPH_VIEW), sc) / "notes.json", {"w": [n.to_json() for n in notes]})
    m.search("drawer", user_id=users[0], k=1)  # BM25 files on disk
    bank.close()
    cpt.close()


def kill_during_deletes(trials: int, users: int, rng: random.Random) -> list[dict]:
    from memfrontier import Memory
    from memfrontier.core.types import Scope
    from memfrontier.embed.minilm import MiniLMEmbedder
    from memfrontier.store.sqlite import SQLiteStore

    names = [f"user{i}" for i in range(users)]
    rows = []
    for t in range(trials):
        store = Path(tempfile.mkdtemp(prefix="mf-killdel-")) / "store"
        with Memory.open(store) as m:
            _populate_views(m, names)
        kill_after = rng.randint(1, users - 1)
        proc = subprocess.Popen([sys.executable, __file__, "--child-delete", str(store), *names],
                                stdout=subprocess.PIPE, text=True, env=ENV)
        acked: list[str] = []
        for line in proc.stdout:
            if line.startswith("deleted "):
                acked.append(line.split()[1])
                if len(acked) >= kill_after:
                    time.sleep(rng.uniform(0, 0.2))  # land somewhere inside the next delete
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait()
        db = sqlite3.connect(store / "store.db")
        pending_before = db.execute("SELECT COUNT(*) FROM pending_purges").fetchone()[0]
        db.close()
        with SQLiteStore(store, MiniLMEmbedder()) as s:  # opening completes pending intents
            db = sqlite3.connect(store / "store.db")
            pending_after = db.execute("SELECT COUNT(*) FROM pending_purges").fetchone()[0]
            db.close()
            state = {}
            for u in names:
                n = s.count(Scope(user_id=u))["records"]
                files = sum(1 for p in store.rglob("*") if p.is_file() and _nonce(u) in p.read_bytes())
                state[u] = (n, files)
        acked_left = sum(1 for u in acked if state[u] != (0, 0))
        inflight = names[len(acked)] if len(acked) < users else None
        torn = sum(1 for u in names if state[u][0] == 0 and state[u][1] > 0)
        rows.append({"trial": t + 1, "deletes_acked": len(acked), "killed_rc": proc.returncode,
                     "intents_pending_at_kill": pending_before, "pending_after_open": pending_after,
                     "acked_with_leftovers": acked_left,
                     "in_flight": "-" if inflight is None else ("deleted" if state[inflight][0] == 0 else "kept"),
                     "deleted_but_text_on_disk": torn})
    return rows


# -- (b) concurrent writers -----------------------------------------------------------------------


def concurrent_threads(threads: int, adds: int) -> dict:
    from memfrontier import Memory

    store = Path(tempfile.mkdtemp(prefix="mf-threads-")) / "store"
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
    return {"writers": f"{threads} threads, one Memory", "expected": threads * adds, "stored": stored,
            "raised": len(errors), "wall_s": round(wall, 1)}


def concurrent_processes(processes: int, adds: int) -> dict:
    from memfrontier.embed.minilm import MiniLMEmbedder
    from memfrontier.store.sqlite import SQLiteStore

    store = Path(tempfile.mkdtemp(prefix="mf-procs-")) / "store"
    SQLiteStore(store, MiniLMEmbedder()).close()
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child-writer", str(store), str(w), str(adds)],
                              stdout=subprocess.PIPE, text=True, env=ENV) for w in range(processes)]
    raised = 0
    for p in procs:
        out, _ = p.communicate()
        raised += sum(int(line.split()[1]) for line in out.splitlines() if line.startswith("errors "))
        raised += p.returncode != 0
    wall = time.perf_counter() - t0
    with SQLiteStore(store, MiniLMEmbedder()) as s:
        stored = s.count()["records"]
    return {"writers": f"{processes} processes, one directory", "expected": processes * adds, "stored": stored,
            "raised": raised, "wall_s": round(wall, 1)}


# -- (c) scope probes -----------------------------------------------------------------------------

ALICE_SECRET = "my locker code is 4417 and the spare key is with Ottoline"
NEEDLES = ("4417", "Ottoline")


def _leaks(text: str) -> int:
    return int(any(n in text for n in NEEDLES))


def scope_probes() -> tuple[list[dict], list[str]]:
    from mcp import Client
    from typer.testing import CliRunner

    from memfrontier import Memory
    from memfrontier.cli import app
    from memfrontier.core.types import Budget, Preference, Scope
    from memfrontier.graph import GRAPH_VIEW, open_graph
    from memfrontier.retrieve.hybrid import hybrid_search
    from memfrontier.retrieve.recipes import MEMORYCPT_EPISODIC, MEMPILOT_BANK
    from memfrontier.server.mcp import MemoryService, build_server
    from memfrontier.store.bank import BankItem, MemoryBank
    from memfrontier.strategies import Query, get_strategy
    from memfrontier.views.compress import OfflineCompressor
    from memfrontier.views.compressed_bank import build_from_store, open_bank
    from memfrontier.views.graph_builder import graph_from_notes
    from memfrontier.views.graph_notes import Note

    alice, bob = Scope(user_id="alice"), Scope(user_id="bob")
    store_dir = Path(tempfile.mkdtemp(prefix="mf-probe-")) / "store"
    rows: list[dict] = []

    def row(path: str, probes: int, leaks: int, refused: int = 0) -> None:
        rows.append({"path": path, "probes": probes, "leaks": leaks, "refused": refused})

    with Memory.open(store_dir) as m:
        store = m.aio.store
        m.add([{"id": "msg-1", "content": ALICE_SECRET}, {"id": "msg-2", "content": "I like rowing at dawn."}],
              user_id="alice", session_id="a1", timestamp="2024-05-01T10:00:00")
        m.add([{"id": "msg-1", "content": "My sister lives in Quito."}, {"id": "msg-2", "content": "I bake rye bread."}],
              user_id="bob", session_id="b1", timestamp="2024-05-01T11:00:00")
        bank = open_bank(store)
        cpt = MemoryBank.for_store(store, "memorycpt-probe")
        for sc in (alice, bob):
            build_from_store(bank, store, sc, OfflineCompressor(rate=1.0))
            cpt.apply([BankItem(id=f"ep-{sc.user_id}-{r.id}", kind="episode", scope=sc, text=r.text, source_ids=[r.id])
                       for r in store.records(sc)])
            g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), sc)
            g.replace(graph_from_notes([Note(r.text, [sc.user_id], "life", r.timestamp or "", r.session_id, [r.id])
                                        for r in store.records(sc)], sc.key()))
            g.close()

        queries = ["locker code", "spare key Ottoline", "4417", "what is the code?"]
        own = sum(any(_leaks(h.chunk.text) for h in m.search(q, user_id="alice", k=10)) for q in queries)
        row("control: API search as alice (leaks = her own hits)", len(queries), own)
        hits = [h for q in queries for h in m.search(q, user_id="bob", k=10)]
        row("API search (as bob)", len(queries), sum(_leaks(h.chunk.text) for h in hits))
        refused = 0
        for call in (lambda: m.search("locker code"), lambda: m.ask("What is the locker code?"),
                     lambda: m.delete("msg-1"), lambda: m.delete_all()):
            try:
                call()
            except ValueError:
                refused += 1
        row("API without scope (search, ask, delete, delete_all)", 4, 0, refused)
        for name in ("rag", "longctx"):
            strat = get_strategy(name)
            ctxs = [asyncio.run(strat.context(Query(text=q, scope=bob), m.aio.env, Preference(), Budget())) for q in queries]
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
                    calls = [("search", {"query": "locker code spare key", "k": 10}),
                             ("rg", {"patterns": ["locker", "spare key"]}),  # patterns never echo a needle
                             ("read", {"ids": ["msg-1", "msg-2", "a1:msg-1"]}),
                             ("index_query", {"cypher": "MATCH (m:Memory) RETURN m.text"})]
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
    refused = sum(runner.invoke(app, [cmd, "locker code", "--store", str(store_dir)]).exit_code == 2 for cmd in ("search", "ask"))
    res = runner.invoke(app, ["search", "locker code 4417", "--store", str(store_dir), "--user-id", "bob"])
    row("CLI search (as bob)", 1, _leaks(res.output))
    row("CLI search/ask without scope", 2, 0, refused)

    with Memory.open(store_dir) as m:
        n = m.delete_all(user_id="alice")
    grep = sorted(str(p.relative_to(store_dir)) for p in store_dir.rglob("*")
                  if p.is_file() and any(x.encode() in p.read_bytes() for x in NEEDLES))
    row(f"files holding alice's secret after delete_all ({n} records)", 1, len(grep))
    return rows, grep


# -- report ---------------------------------------------------------------------------------------


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
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--users", type=int, default=6, help="users deleted one after another in (a')")
    ap.add_argument("--messages", type=int, default=120)
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--thread-adds", type=int, default=50, help="adds per thread")
    ap.add_argument("--adds", type=int, default=20, help="adds per process")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ.update({k: ENV[k] for k in ("HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")})
    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    table("(a) kill -9 during ingest", kill_during_ingest(args.trials, args.messages, rng))
    table("(a') kill -9 during delete_all of one user after another (each user has every view)",
          kill_during_deletes(args.trials, args.users, rng))
    table("(b) concurrent writers", [concurrent_threads(args.threads, args.thread_adds),
                                     concurrent_processes(args.processes, args.adds)])
    rows, grep = scope_probes()
    table("(c) scope probes across two users (leaks must be 0)", rows)
    if grep:
        print("files still holding the deleted text:", grep)
    print(f"\ntotal wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

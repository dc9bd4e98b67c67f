"""Tenant isolation on both stores: SQLite in a temp directory and PostgreSQL +
pgvector on the session's embedded server (``pg_server`` in conftest.py, one fresh database per
test), with real bm25s / full-text search, MiniLM and Ladybug. Tests that take ``mem`` or
``location`` run once per backend. No model call is made (except in the one slow AutoMEM test):
bank items are written directly or by the offline compressor, and graphs from hand-written notes.

* record ids are unique per scope (the same id in two scopes is two records; other content under
  a stored id is an error), and every lookup by id takes the scope;
* every read names a scope, or opts in to all of them explicitly;
* delete / delete_all reach every derived view (banks, graph index, BM25 files), a crash between
  the commit and the purge is finished on the next open, and the deleted text is stored nowhere:
  no byte of it under the store directory (SQLite: the database and the view files; PostgreSQL:
  the view files), and for PostgreSQL no live row of any table of the database holds it (see
  :func:`leftovers` for why the server's own files are out of scope);
* one ``Memory`` is safe to share across threads.
"""

import asyncio
import json
import shutil
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest
from mcp import Client
from typer.testing import CliRunner

from memfrontier import Memory
from memfrontier.cli import app
from memfrontier.core.errors import RecordConflictError
from memfrontier.core.jsonio import write_json_atomic
from memfrontier.core.purgers import (
    Purge,
    register_view_purger,
    require_view_purger,
    unregister_view_purger,
    view_purgers,
)
from memfrontier.core.types import Record, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.server.mcp import MemoryService, build_server
from memfrontier.store.bank import BankItem, MemoryBank, Trace
from memfrontier.store.open import open_store
from memfrontier.store.pg_audit import columns_holding
from memfrontier.store.postgres import PostgresStore
from memfrontier.store.purge import covering_scopes, view_root_id
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import Query, get_strategy, strategy_class
from memfrontier.strategies.automem.corpus import ScopedCorpus
from memfrontier.strategies.automem.graph import GRAPH_VIEW, open_graph, purge_graph_view, state_dir
from memfrontier.strategies.automem.graph_builder import graph_from_notes
from memfrontier.strategies.automem.graph_notes import Note
from memfrontier.strategies.memorycpt.recipes import MEMORYCPT_EPISODIC
from memfrontier.strategies.mempilot.compress import OfflineCompressor
from memfrontier.strategies.mempilot.compressed_bank import build_from_store, open_bank
from memfrontier.strategies.mempilot.recipes import MEMPILOT_BANK

ALICE, BOB, DANA, ERIN = (Scope(user_id=u) for u in ("alice", "bob", "dana", "erin"))
SECRET = "my secret code is quokka7731"
NONCE = b"quokka7731"
OTHER_NONCE = b"wombat5520"  # a record of dana's that a single-record delete must leave


@pytest.fixture(scope="module")
def embedder():
    return MiniLMEmbedder(num_threads=1)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    return request.param


@pytest.fixture
def location(backend, tmp_path, request, monkeypatch):
    """``location(name="store")``: where this test's store ``name`` lives on the backend: a directory
    under tmp_path, or the URL of a fresh database of the embedded server (the same one on every
    call), whose view files go under ``MEMFRONTIER_HOME=tmp_path/home`` (so the CLI and the MCP
    service, which open the URL themselves, find them)."""
    if backend == "sqlite":
        return lambda name="store": tmp_path / name
    monkeypatch.setenv("MEMFRONTIER_HOME", str(tmp_path / "home"))
    return lambda name="store": request.getfixturevalue("pg_database")(name)


@pytest.fixture
def mem(location, embedder):
    m = Memory.open(location(), embedder=embedder)
    yield m
    m.close()


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def leftovers(store, needle: bytes) -> list[str]:
    """Where ``needle`` is still stored: the files under the store's directory (SQLite: the database,
    its WAL, the view files; PostgreSQL: the view files), and for a PostgreSQL store
    ``db:<schema>.<table>.<column>`` for each column of any table of its database with a live row
    holding it (:func:`~memfrontier.store.pg_audit.columns_holding`: text, JSON, record id arrays,
    full-text lexemes).

    For PostgreSQL the bytes of the server's own files are out of scope: a deleted row stays in
    its table file as a dead tuple until VACUUM reuses the space, and in the write-ahead log until
    the segment is recycled; that is the server's storage (its data directory, shared by every
    database), reached by the operator's VACUUM FULL and WAL retention settings, not by the store.
    What the store controls, and what is checked, is that no live row of any table holds it."""
    found = files_containing(store.path, needle)
    if isinstance(store, PostgresStore):
        found += ["db:" + c for c in columns_holding(store.dsn, needle.decode())]
    return found


def pending_intents(location) -> list[dict]:
    """The purge intents left in the store's ``pending_purges`` table (read without opening the store)."""
    if isinstance(location, str):
        with psycopg.connect(location, autocommit=True) as conn:
            rows = conn.execute("SELECT intent_json FROM pending_purges ORDER BY seq").fetchall()
    else:
        db = sqlite3.connect(location / "store.db")
        rows = db.execute("SELECT intent_json FROM pending_purges ORDER BY seq").fetchall()
        db.close()
    return [json.loads(r[0]) for r in rows]


# -- item 2: record ids are per scope ------------------------------------------------------------


def test_the_same_id_in_two_scopes_is_two_records(mem):
    a = mem.add([{"id": "msg-1", "content": "I am allergic to peanuts."}], user_id="alice")
    b = mem.add([{"id": "msg-1", "content": "My sister lives in Quito."}], user_id="bob")
    assert (a.added, a.skipped) == (["msg-1"], [])
    assert (b.added, b.skipped) == (["msg-1"], [])  # was: added [], skipped ['msg-1']
    store = mem.aio.store
    assert [r.text for r in store.get(["msg-1"], ALICE)] == ["I am allergic to peanuts."]
    assert [r.text for r in store.get(["msg-1"], BOB)] == ["My sister lives in Quito."]
    assert [h.chunk.text for h in mem.search("Quito", user_id="bob", k=3)] == ['user said, "My sister lives in Quito."']
    assert all("Quito" not in h.chunk.text for h in mem.search("Quito", user_id="alice", k=3))

    # the same id and content again: nothing added; other content: an error, nothing written
    again = mem.add([{"id": "msg-1", "content": "I am allergic to peanuts."}], user_id="alice")
    assert (again.added, again.skipped) == ([], ["msg-1"])
    with pytest.raises(RecordConflictError, match="msg-1.*already exist in this scope"):
        mem.add([{"id": "msg-2", "content": "new"}, {"id": "msg-1", "content": "I love peanuts."}], user_id="alice")
    with pytest.raises(RecordConflictError, match="msg-3.*appear twice in this batch"):  # one (scope, id), two texts
        mem.add([{"id": "msg-3", "content": "one"}, {"id": "msg-3", "content": "two"}], user_id="alice")
    assert store.count() == {"records": 2, "chunks": 2, "vectors": 2}

    # delete by id needs the scope and reaches only that scope's record
    with pytest.raises(ValueError, match="scope"):
        mem.delete("msg-1")
    assert mem.delete("msg-1", user_id="carol") is False
    assert mem.delete("msg-1", user_id="bob") is True
    assert [r.text for r in store.get(["msg-1"], Scope())] == ["I am allergic to peanuts."]


def test_get_and_delete_by_id_refuse_an_id_several_sub_scopes_hold(mem):
    """One user's record ids under three agent scopes: a get or delete naming the user alone is
    refused as ambiguous (nothing deleted), naming no scope; with the whole scope it reaches that
    record only. A blank id is refused by name."""
    for agent in (None, "x", "y"):
        mem.add([{"id": "note-1", "content": f"alice note via {agent}"}], user_id="alice", agent_id=agent)
    mem.add([{"id": "solo", "content": "only one of these"}], user_id="alice", agent_id="x")
    for call in (mem.get, mem.delete):
        with pytest.raises(ValueError) as e:
            call("note-1", user_id="alice")
        assert str(e.value) == (
            f"{call.__name__}: record id 'note-1' is held by 3 records in scopes inside this one (the same ids "
            "under other agent_id or run_id values): give the record's agent_id and run_id as it was added"
        )
        with pytest.raises(ValueError, match="record id is (empty|blank)"):
            call(" ", user_id="alice")
    assert mem.get("note-1", user_id="alice", agent_id="y").text == "alice note via y"
    assert mem.delete("note-1", user_id="alice", agent_id="x") is True
    left = mem.aio.store.get(["note-1"], ALICE)
    assert sorted(r.text for r in left) == ["alice note via None", "alice note via y"]
    assert mem.get("solo", user_id="alice").scope == Scope(user_id="alice", agent_id="x")  # one: found
    assert mem.delete("solo", user_id="alice") is True and mem.aio.store.get(["solo"], ALICE) == []


def test_a_schema_1_store_is_migrated_on_open(tmp_path, embedder):
    path = tmp_path / "store"
    with SQLiteStore(path, embedder) as s:
        s.add([Record(id="msg-1", scope=ALICE, text="I am allergic to peanuts.")])
    # rewrite it as schema 1 wrote it: one global UNIQUE(id), no purge table
    db = sqlite3.connect(path / "store.db")
    cols = [r[1] for r in db.execute("PRAGMA table_info(records)")]
    ddl = db.execute("SELECT sql FROM sqlite_master WHERE name = 'records'").fetchone()[0]
    old = ddl.replace("id TEXT NOT NULL,", "id TEXT NOT NULL UNIQUE,").replace(",\n    UNIQUE (scope_key, id)", "")
    assert old != ddl
    db.executescript(f"""
        DROP INDEX records_id; ALTER TABLE records RENAME TO r0; {old};
        INSERT INTO records SELECT {",".join(cols)} FROM r0; DROP TABLE r0; DROP TABLE pending_purges;
        UPDATE meta SET value = '1' WHERE key = 'schema_version';""")
    db.close()
    with SQLiteStore(path, embedder) as s:
        assert s.generation >= 1
        assert [r.text for r in s.get(["msg-1"], ALICE)] == ["I am allergic to peanuts."]
        assert s.add([Record(id="msg-1", scope=BOB, text="My sister lives in Quito.")]).added == ["msg-1"]
        assert s.count() == {"records": 2, "chunks": 2, "vectors": 2}
        assert s.record_vectors(ALICE, ["msg-1"]).shape == s.record_vectors(BOB, ["msg-1"]).shape == (1, 384)
    db = sqlite3.connect(path / "store.db")
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "3"
    db.close()


def test_postgres_records_are_unique_per_scope_in_the_schema(pg_database, tmp_path, embedder):
    """The PostgreSQL counterpart of the schema-1 migration above: its first schema already keys
    records by (scope, id), so there is nothing to migrate; the database itself enforces it."""
    dsn = pg_database()
    with PostgresStore(dsn, embedder, directory=tmp_path / "views") as s:
        s.add([Record(id="msg-1", scope=ALICE, text="I am allergic to peanuts.")])
        assert s.add([Record(id="msg-1", scope=BOB, text="My sister lives in Quito.")]).added == ["msg-1"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        uniques = [
            r[0]
            for r in conn.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'records'::regclass "
                "AND contype IN ('u', 'p') ORDER BY 1"
            )
        ]
        assert uniques == ["PRIMARY KEY (seq)", "UNIQUE (scope_key, id)"]  # no UNIQUE (id) of its own
        with pytest.raises(psycopg.errors.UniqueViolation):  # a writer that skips the store's check
            conn.execute(
                "INSERT INTO records (id, kind, scope_key, scope_json, session_id, speaker, role, text, "
                "images_json, meta_json, n_tokens) SELECT id, kind, scope_key, scope_json, session_id, "
                "speaker, role, 'other', images_json, meta_json, n_tokens FROM records WHERE user_id = 'bob'"
            )


# -- item 3: a read names a scope --------------------------------------------------------------


def test_search_and_ask_need_a_scope_or_an_explicit_all_scopes(mem):
    mem.add(["My PIN is 7788."], user_id="alice")
    mem.add(["I water the ferns on Sundays."], user_id="bob")
    with pytest.raises(ValueError, match="search needs a scope.*all_scopes=True"):
        mem.search("PIN")
    with pytest.raises(ValueError, match="ask needs a scope"):
        mem.ask("What is the PIN?")  # refused before any model call
    with pytest.raises(ValueError, match="do not combine"):
        mem.search("PIN", user_id="alice", all_scopes=True)
    assert {h.chunk.scope.user_id for h in mem.search("PIN ferns", all_scopes=True, k=5)} == {"alice", "bob"}
    assert {h.chunk.scope.user_id for h in mem.search("PIN ferns", user_id="bob", k=5)} == {"bob"}
    with pytest.raises(ValueError, match="delete_all needs"):
        mem.delete_all()
    with pytest.raises(ValueError, match="add needs a scope"):  # its owner could never reach it again
        mem.add(["Nobody's note."])
    with pytest.raises(ValueError, match="build needs"):  # no view over every tenant's records
        mem.build("mempilot")
    with pytest.raises(ValueError, match="build needs"):  # nor through the unchecked step
        asyncio.run(mem.aio.construct(get_strategy("mempilot"), Scope()))
    # strategies' own corpora: a query and a corpus without a scope are refused
    with pytest.raises(ValueError, match="a query needs a scope"):
        Query(text="What is the PIN?", scope=Scope())
    assert Query(text="q", scope=Scope(), all_scopes=True).all_scopes
    with pytest.raises(ValueError, match="a corpus needs a scope"):
        ScopedCorpus(mem.aio.store, Scope())
    assert [r.text for r in ScopedCorpus(mem.aio.store, BOB).records] == ["I water the ferns on Sundays."]


def test_cli_search_and_ask_need_a_scope(location, embedder):
    path = location()
    with Memory.open(path, embedder=embedder) as m:
        m.add(["My PIN is 7788."], user_id="alice")
        m.add(["I water the ferns on Sundays."], user_id="bob")
    runner = CliRunner()
    for cmd in (["search", "PIN"], ["ask", "What is the PIN?"]):
        res = runner.invoke(app, [*cmd, "--store", str(path)])
        assert res.exit_code == 2, res.output
        assert "--user-id, --agent-id or --run-id" in res.output and "--all-scopes" in res.output
    res = runner.invoke(app, ["search", "PIN", "--store", str(path), "--user-id", "bob"])
    assert res.exit_code == 0 and "7788" not in res.output and "ferns" in res.output
    res = runner.invoke(app, ["search", "PIN", "--store", str(path), "--all-scopes"])
    assert res.exit_code == 0 and "7788" in res.output and "ferns" in res.output


# -- item 4: delete reaches every view -----------------------------------------------------------


def _note(text: str, rid: str, session: str) -> Note:
    return Note(text, ["Dana"], "codes", "2024-05-01T10:00:00", session, [rid])


def _populate(mem) -> None:
    """Records of dana and erin, and every derived view for both: MemPilot's compressed bank
    (offline compressor, every word kept), a MemoryCPT-like bank (episodes, done marks and traces
    holding the text), a Ladybug graph with its notes cache, and the BM25 index files."""
    store = mem.aio.store
    mem.add(
        [
            {"id": "d-1", "content": f"Remember this: {SECRET}."},
            {"id": "d-2", "content": f"My locker is {OTHER_NONCE.decode()}."},
        ],
        user_id="dana",
        session_id="s1",
        timestamp="2024-05-01T10:00:00",
    )
    mem.add(
        [{"id": "d-1", "content": "I grow basil and lemons on the balcony."}],
        user_id="erin",
        session_id="s1",
        timestamp="2024-05-01T10:00:00",
    )
    bank = open_bank(store)
    for sc in (DANA, ERIN):
        build_from_store(bank, store, sc, OfflineCompressor(rate=1.0))
    bank.close()
    cpt = MemoryBank.for_store(store, "memorycpt-test")
    for sc in (DANA, ERIN):
        recs = store.records(sc)
        cpt.apply(
            [
                BankItem(
                    id=f"ep-{sc.user_id}-{r.id}",
                    kind="episode",
                    scope=sc,
                    title="episode",
                    text=r.text,
                    source_ids=[r.id],
                )
                for r in recs
            ],
            done=[(sc, "session:s1", {"calls": 1})],
            traces=[
                (
                    sc,
                    Trace(
                        role="episode_generator",
                        model_id="m",
                        prompt_version="v",
                        messages=[{"role": "user", "content": " ".join(r.text for r in recs)}],
                    ),
                )
            ],
        )
    cpt.close()
    for sc in (DANA, ERIN):
        notes = [_note(r.text, r.id, "s1") for r in store.records(sc)]
        g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), sc)
        g.replace(graph_from_notes(notes, sc.key()))
        g.close()
        write_json_atomic(state_dir(store.view_dir(GRAPH_VIEW), sc) / "notes.json", {"w": [n.to_json() for n in notes]})
    assert mem.search("quokka7731", user_id="dana", k=1)


async def _mcp_index_query(path: Path | str, scope: Scope) -> tuple[bool, str]:
    service = MemoryService(path)
    try:
        async with Client(build_server(service)) as c:
            res = await c.call_tool(
                "index_query", {"cypher": "MATCH (m:Memory) RETURN m.text", "user_id": scope.user_id}
            )
            return res.is_error, "\n".join(getattr(x, "text", "") for x in res.content)
    finally:
        service.close()


def test_delete_all_reaches_every_view_and_leaves_no_byte_of_the_text(mem, location, backend):
    _populate(mem)
    store, root = mem.aio.store, mem.aio.store.path
    before = leftovers(store, NONCE)  # everywhere before: store, banks, graph (and bm25 files for SQLite)
    assert any(f.startswith("graph/") for f in before) and any(f.startswith("banks/") for f in before)
    if backend == "sqlite":
        assert any(f.startswith("store.db") for f in before)  # the database or its WAL
    else:  # the row check does see the text where it lives: records, chunks and their lexemes
        assert {
            "db:public.records.text",
            "db:public.chunks.text",
            "db:public.chunks.tsv",
            "db:public.postings.lexeme",
        } <= set(before)
    mp = open_bank(store)
    cpt = MemoryBank.for_store(store, "memorycpt-test")
    assert "quokka7731" in hybrid_search(mp, "secret code", DANA, MEMPILOT_BANK, 1)[0].item.text
    assert hybrid_search(cpt, "secret code", DANA, MEMORYCPT_EPISODIC, 1)[0].item.source_ids == ["d-1"]
    is_error, text = asyncio.run(_mcp_index_query(location(), DANA))
    assert not is_error and "quokka7731" in text
    assert not (Path.cwd() / "postgresql:").exists()  # the URL was not taken for a path (was: an empty SQLite store)

    assert mem.delete_all(user_id="dana") == 2

    assert leftovers(store, NONCE) == []
    assert leftovers(store, OTHER_NONCE) == []
    # the open banks see the purge at once (no stale cache); erin's views are untouched
    assert hybrid_search(mp, "secret code", DANA, MEMPILOT_BANK, 5) == [] and mp.items(DANA, "compressed") == []
    assert cpt.items(DANA, "episode") == [] and not cpt.is_done(DANA, "session:s1") and cpt.traces(DANA) == []
    assert [it.source_ids for it in mp.items(ERIN, "compressed")] == [["d-1"]]
    assert cpt.is_done(ERIN, "session:s1") and len(cpt.traces(ERIN)) == 1
    assert cpt.items(ERIN, "episode")[0].text == "I grow basil and lemons on the balcony."
    assert not state_dir(root / GRAPH_VIEW, DANA).exists() and state_dir(root / GRAPH_VIEW, ERIN).exists()
    is_error, text = asyncio.run(_mcp_index_query(location(), DANA))
    assert is_error and "no graph index" in text
    is_error, text = asyncio.run(_mcp_index_query(location(), ERIN))
    assert not is_error and "basil" in text
    assert leftovers(store, b"basil and lemons")  # the check does find live text
    assert mem.search("secret code quokka7731", user_id="dana", k=3) == []
    mp.close()
    cpt.close()


def test_deleting_one_record_purges_only_what_came_from_it(mem):
    _populate(mem)
    store, root = mem.aio.store, mem.aio.store.path
    assert mem.delete("d-1", user_id="dana") is True
    assert leftovers(store, NONCE) == []
    assert leftovers(store, OTHER_NONCE)  # dana's other record lives on
    mp, cpt = open_bank(store), MemoryBank.for_store(store, "memorycpt-test")
    assert [it.source_ids for it in cpt.items(DANA, "episode")] == [["d-2"]]
    assert not cpt.is_done(DANA, "session:s1")  # marked for rebuild
    assert all("d-1" not in it.source_ids for it in mp.items(DANA, "compressed"))
    # erin's record with the same id is another record: nothing of hers went
    assert [it.source_ids for it in cpt.items(ERIN, "episode")] == [["d-1"]] and cpt.is_done(ERIN, "session:s1")
    assert [r.id for r in store.records(ERIN)] == ["d-1"]
    assert not state_dir(root / GRAPH_VIEW, DANA).exists() and state_dir(root / GRAPH_VIEW, ERIN).exists()
    mp.close()
    cpt.close()


def test_a_crash_between_commit_and_purge_is_finished_on_the_next_open(location, embedder, monkeypatch):
    loc = location()
    m = Memory.open(loc, embedder=embedder)
    _populate(m)
    root = m.aio.store.path
    with monkeypatch.context() as patch:  # the process dies after COMMIT
        patch.setattr(type(m.aio.store), "complete_purges", lambda self: 0)
        assert m.delete_all(user_id="dana") == 2
        m.close()
    assert pending_intents(loc) == [
        {
            "scope": {"user_id": "dana", "agent_id": None, "run_id": None},
            "records": [[{"user_id": "dana", "agent_id": None, "run_id": None}, ["d-1", "d-2"]]],
        }
    ]
    assert files_containing(root, NONCE)  # the views still hold it
    with open_store(loc, embedder) as s:  # reopening completes the intent
        assert pending_intents(loc) == []
        assert s.count(DANA)["records"] == 0
        assert leftovers(s, NONCE) == []


def test_a_delete_reaches_the_views_of_every_view_root(pg_database, embedder, tmp_path):
    """Processes sharing one PostgreSQL store keep their view files in different directories (``serve``'s
    DATA_DIR/views, the CLI's default). A delete through one reaches every other's views: an open
    one's when it next reaches them, a closed one's when it next opens; the intent stays until every
    registered root applied it, and a root whose folder is gone does not hold it back."""
    url = pg_database()
    roots = {name: tmp_path / name for name in ("a", "b", "c", "gone")}
    mems = {name: Memory.open(url, embedder=embedder, view_dir=root) for name, root in roots.items()}
    for m in mems.values():
        _populate(m)
    for name in ("c", "gone"):
        mems[name].close()
    shutil.rmtree(roots["gone"])
    assert all(files_containing(roots[name], NONCE) for name in ("a", "b", "c"))

    assert mems["a"].delete_all(user_id="dana") == 2
    assert files_containing(roots["a"], NONCE) == []
    assert files_containing(roots["b"], NONCE) and files_containing(roots["c"], NONCE)
    assert len(pending_intents(url)) == 1  # was: [], the intent dropped with b's and c's views unpurged

    cpt = MemoryBank.for_store(mems["b"].aio.store, "memorycpt-test")  # b's next use of its views
    assert cpt.items(DANA, "episode") == [] and cpt.traces(DANA) == [] and len(cpt.traces(ERIN)) == 1
    cpt.close()
    assert files_containing(roots["b"], NONCE) == [] and not state_dir(roots["b"] / GRAPH_VIEW, DANA).exists()
    assert files_containing(roots["b"], b"basil and lemons")  # erin's views stay
    assert len(pending_intents(url)) == 1  # c has not applied it yet

    with open_store(url, embedder, view_dir=roots["c"]) as s:  # c's next open
        assert files_containing(roots["c"], NONCE) == [] and leftovers(s, NONCE) == []
    assert pending_intents(url) == []
    with psycopg.connect(url, autocommit=True) as conn:  # the registry: the three live roots, nothing pending
        assert sorted(r for (r,) in conn.execute("SELECT root FROM view_roots")) == sorted(
            view_root_id(roots[name]) for name in ("a", "b", "c")
        )
        assert conn.execute("SELECT count(*) FROM purges_applied").fetchone() == (0,)
    for name in ("a", "b"):
        mems[name].close()


def test_a_moved_sqlite_store_does_not_hold_back_its_purges(tmp_path, embedder):
    """A SQLite store's view root is its directory: once the directory is moved, the old root is gone
    from the registry, and a delete completes on the new one."""
    with Memory.open(tmp_path / "old", embedder=embedder) as m:
        _populate(m)
    (tmp_path / "old").rename(tmp_path / "new")
    with Memory.open(tmp_path / "new", embedder=embedder) as m:
        assert m.delete_all(user_id="dana") == 2
        assert leftovers(m.aio.store, NONCE) == [] and pending_intents(tmp_path / "new") == []
    with sqlite3.connect(tmp_path / "new" / "store.db") as db:
        assert db.execute("SELECT root FROM view_roots").fetchall() == [(view_root_id(tmp_path / "new"),)]


def test_building_a_graph_for_a_scope_without_records_drops_the_old_one(mem):
    from memfrontier.strategies.automem.pipeline import AutoMem

    store = mem.aio.store
    frank = Scope(user_id="frank")
    g = open_graph("ladybug", store.view_dir(GRAPH_VIEW), frank)
    g.replace(graph_from_notes([_note("Frank hid the key under the mat.", "f-1", "s1")], frank.key()))
    g.close()
    assert state_dir(store.view_dir(GRAPH_VIEW), frank).exists()
    strat = AutoMem()
    asyncio.run(strat.build(mem.aio.env, frank))  # no records: no model call, and no graph left
    assert not state_dir(store.view_dir(GRAPH_VIEW), frank).exists()
    strat.close()


def _one_record_store(root: Path, embedder) -> Path:
    """A SQLite store at ``root`` holding record ``r-1`` of (u, r) and a graph folder for its scope
    and for the covering scope (u); returns the graph view folder."""
    with open_store(root, embedder) as s:
        s.add(
            [
                Record(
                    id="r-1",
                    scope=Scope(user_id="u", run_id="r"),
                    session_id="s1",
                    speaker="user",
                    text=f"Remember this: {SECRET}.",
                )
            ]
        )
        graphs = s.view_dir(GRAPH_VIEW)
    for sc in (Scope(user_id="u", run_id="r"), Scope(user_id="u")):
        state_dir(graphs, sc).mkdir(parents=True)
        (state_dir(graphs, sc) / "notes.json").write_text(SECRET)
    state_dir(graphs, Scope(user_id="v")).mkdir()  # another user's graph stays
    return graphs


def test_a_delete_in_a_process_that_never_imported_the_graph_package_removes_its_graphs(tmp_path, embedder):
    """A CLI-like process (a fresh interpreter that imports the store only) deletes a record: the
    graph folders of the scopes covering it go, though no graph purger is registered there."""
    import subprocess
    import sys

    graphs = _one_record_store(tmp_path / "store", embedder)
    code = (
        "import sys\n"
        "from memfrontier.core.types import Scope\n"
        "from memfrontier.store.sqlite import SQLiteStore\n"
        "class E:\n"
        f"    model_id, dim = {embedder.model_id!r}, {embedder.dim}\n"
        "    def count_tokens(self, text): return len(text.split())\n"
        "s = SQLiteStore(sys.argv[1], E())\n"
        "assert s.delete('r-1', Scope(user_id='u', run_id='r'))\n"
        "s.close()\n"
        "assert 'memfrontier.strategies.automem.graph' not in sys.modules, 'the graph package was imported'\n"
        "print('deleted')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "deleted"
    assert sorted(p.name for p in graphs.iterdir()) == [state_dir(graphs, Scope(user_id="v")).name]
    assert files_containing(tmp_path / "store", NONCE) == []
    assert pending_intents(tmp_path / "store") == []


def test_a_registered_purger_for_a_server_side_view_is_called_on_delete(tmp_path, embedder):
    """A view kept on a server (a Neo4j graph) registers a purger: every delete calls it with its
    folder and the deleted records, the whole-scope delete and the covering scopes."""
    calls = []
    register_view_purger("fake-server", lambda folder, purge: calls.append((folder, purge)) or 3)
    try:
        with open_store(tmp_path / "store", embedder) as s:
            s.add(
                [
                    Record(id="r-1", scope=Scope(user_id="u", run_id="r"), session_id="s1", speaker="user", text="a"),
                    Record(id="r-2", scope=Scope(user_id="u", run_id="r"), session_id="s1", speaker="user", text="b"),
                ]
            )
            assert s.delete("r-1", Scope(user_id="u", run_id="r"))
            assert s.delete_all(Scope(user_id="u")) == 1
    finally:
        unregister_view_purger("fake-server")
    u, r, ur = Scope(user_id="u"), Scope(run_id="r"), Scope(user_id="u", run_id="r")
    covering = {g.key(): g for g in (u, r, ur)}
    assert [c[0] for c in calls] == [tmp_path / "store" / "fake-server"] * 2
    assert [c[1] for c in calls] == [
        Purge(deleted=((ur, ("r-1",)),), whole=None, covering=covering),
        Purge(deleted=((ur, ("r-2",)),), whole=u, covering=covering),
    ]
    assert "fake-server" not in view_purgers()


def test_a_view_needing_an_unregistered_purger_holds_the_delete_until_a_process_has_it(tmp_path, embedder):
    """A view folder that declared its purger (``require_view_purger``) is never skipped: without the
    purger the intent stays pending for the root (its per-scope entries are removed already), and the
    first use of the views in a process with the purger finishes it."""
    ur = Scope(user_id="u", run_id="r")
    calls = []
    with open_store(tmp_path / "store", embedder) as s:
        s.add([Record(id="r-1", scope=ur, session_id="s1", speaker="user", text="a")])
        remote = s.view_dir("remote")
        require_view_purger(remote, "remote")
        (remote / ur.slug()).mkdir()
        assert s.delete("r-1", ur)
        assert not (remote / ur.slug()).exists()
        assert len(pending_intents(tmp_path / "store")) == 1
        register_view_purger("remote", lambda folder, purge: calls.append(sorted(purge.covering)) or 0)
        try:
            assert s.view_dir("remote") == remote
        finally:
            unregister_view_purger("remote")
    assert calls == [sorted(g.key() for g in covering_scopes(ur))]
    assert pending_intents(tmp_path / "store") == []


def test_the_graph_package_registers_its_purger(tmp_path):
    assert view_purgers()[GRAPH_VIEW] is purge_graph_view
    ur = Scope(user_id="u", run_id="r")
    for sc in (ur, Scope(user_id="v")):
        (tmp_path / sc.slug()).mkdir()
    purge = Purge(deleted=((ur, ("r-1",)),), whole=None, covering={g.key(): g for g in covering_scopes(ur)})
    assert purge_graph_view(tmp_path, purge) == 1
    assert [p.name for p in tmp_path.iterdir()] == [Scope(user_id="v").slug()]


def test_a_neo4j_graph_opened_through_a_view_folder_is_purged_on_its_server(tmp_path, monkeypatch):
    """Opening a Neo4j graph through the graph view folder declares the graph purger there; the
    purger then empties the namespaces of the covering scopes on the server (a fake driver here:
    no Neo4j server in the tests)."""
    from memfrontier.core.purgers import required_purgers
    from memfrontier.strategies.automem.graph import NEO4J_MARK, neo4j_store

    replaced = []

    class FakeNeo4j:
        kind = "neo4j"

        def __init__(self, ns):
            self.ns = ns

        def replace(self, data):
            replaced.append((self.ns, data.counts()))

        def close(self):
            pass

    monkeypatch.setattr(neo4j_store, "Neo4jGraph", FakeNeo4j)
    ur = Scope(user_id="u", run_id="r")
    open_graph("neo4j", tmp_path, ur).close()
    assert required_purgers(tmp_path) == {GRAPH_VIEW} and (tmp_path / NEO4J_MARK).exists()
    purge = Purge(deleted=((ur, ("r-1",)),), whole=None, covering={g.key(): g for g in covering_scopes(ur)})
    assert purge_graph_view(tmp_path, purge) == 3
    empty = {"Memory": 0, "Speaker": 0, "Topic": 0, "SAID_BY": 0, "OF_TOPIC": 0, "FOLLOWS": 0}
    assert sorted(replaced) == sorted((g.key(), empty) for g in covering_scopes(ur))


def test_covering_scopes():
    assert covering_scopes(Scope(user_id="u", run_id="r")) == [
        Scope(user_id="u"),
        Scope(run_id="r"),
        Scope(user_id="u", run_id="r"),
    ]
    assert len(covering_scopes(Scope(user_id="u", agent_id="a", run_id="r"))) == 7
    assert covering_scopes(Scope()) == []


# -- item 5: one Memory shared by threads --------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "per_thread"), [("sqlite", 5), ("postgres", 5), pytest.param("sqlite", 50, marks=pytest.mark.slow)]
)
def test_ten_threads_adding_on_one_memory_store_everything(mem, per_thread):
    """10 threads on one ``Memory``; 10 x 50 on SQLite only (slow): the facade's event
    loop under load is the same for both stores, whose own locking the 10 x 5 case reaches."""
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        for i in range(per_thread):
            try:
                mem.add([f"thread {t} note {i}"], user_id=f"u{t % 3}", session_id=f"t{t}-{i}")
            except BaseException as e:  # noqa: BLE001 - every failure is counted
                errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(10)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []  # was: 450 of 500 calls raised "This event loop is already running"
    assert mem.aio.store.count()["records"] == 10 * per_thread  # 500 for 10 x 50
    assert mem.aio.store.count(Scope(user_id="u0"))["records"] == 4 * per_thread  # threads 0, 3, 6, 9


def test_one_writer_and_three_searchers_lose_nothing(mem):
    errors: list[BaseException] = []
    searches = [0, 0, 0]
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(50):
                mem.add([f"entry {i} about gardening"], user_id="w", session_id=f"s{i}")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    def searcher(n: int) -> None:
        try:
            while not done.is_set():
                hits = mem.search("gardening", user_id="w", k=3)
                assert all(h.chunk.scope.user_id == "w" for h in hits)
                searches[n] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=searcher, args=(n,)) for n in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert mem.aio.store.count(Scope(user_id="w"))["records"] == 50
    assert all(n > 0 for n in searches)
    assert len(mem.search("gardening", user_id="w", k=100)) == 50


def test_a_closed_memory_refuses_calls(location, embedder):
    m = Memory.open(location(), embedder=embedder)
    m.add(["hello there"], user_id="u")
    m.close()
    m.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        m.search("hello", user_id="u")


def test_a_strategy_built_bank_forgets_a_deleted_user(mem):
    """MemPilot's own build (offline compressor: no model call) and its own open bank object."""
    _populate(mem)
    strat = strategy_class("mempilot")(compressor=OfflineCompressor(rate=1.0))  # a runtime object: the constructor
    env = mem.aio.env
    asyncio.run(mem.aio.construct(strat, DANA))
    bank = strat.bank(env)
    assert "quokka7731" in hybrid_search(bank, "secret code", DANA, MEMPILOT_BANK, 1)[0].item.text
    mem.delete_all(user_id="dana")
    assert hybrid_search(bank, "secret code", DANA, MEMPILOT_BANK, 5) == []  # the strategy's cached bank too
    asyncio.run(mem.aio.construct(strat, DANA))  # a rebuild has nothing to bring back
    assert bank.items(DANA, "compressed") == []
    assert leftovers(mem.aio.store, NONCE) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_automem_graph_built_by_the_model_is_dropped_with_its_records(mem):
    """AutoMEM's real build (the embedded model writes the notes), then delete_all: the graph, its
    notes cache and build meta go, a rebuild makes no call, and the text is nowhere on disk.
    On SQLite only: the graph folders are purged by the same code for both stores (checked on
    PostgreSQL above without a model call), and a model build is the slow part."""
    from memfrontier.core.ledger import Ledger
    from memfrontier.strategies.automem.pipeline import AutoMem

    mem.add(
        [f"Remember this: {SECRET}.", "I keep it in the blue notebook."],
        user_id="dana",
        session_id="s1",
        timestamp="2024-05-01T10:00:00",
    )
    strat = AutoMem()
    ledger = asyncio.run(mem.aio.construct(strat, DANA))
    assert [c.role for c in ledger.calls] == ["indexer"]
    root = mem.aio.store.path
    assert (state_dir(root / GRAPH_VIEW, DANA) / "graph.lbug").exists()
    mem.delete_all(user_id="dana")
    assert not state_dir(root / GRAPH_VIEW, DANA).exists()
    assert asyncio.run(mem.aio.construct(strat, DANA, Ledger())).calls == []
    assert files_containing(root, NONCE) == []
    strat.close()

"""The PostgreSQL store survives a lost connection: an administrator's ``pg_terminate_backend``, a
connection cut in the middle of a transaction or of its COMMIT, and a real restart of the embedded
server under load (the REST service over the same store: ``tests/test_server.py``). Every call
finds a new connection (the pool's), reads and adds run once more (an add is idempotent: nothing
is stored twice), a delete runs again only when its COMMIT was not sent, else it says its outcome
is unknown (:class:`~memfrontier.core.errors.StoreUnavailableError`)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import psycopg
import pytest

from memfrontier.core.errors import StoreError, StoreUnavailableError
from memfrontier.core.types import Record, Scope
from memfrontier.store.embedded_pg import terminate_sessions
from memfrontier.store.postgres import PostgresStore

A = Scope(user_id="alice")


def turn(i: int, text: str, session: str = "s1", scope: Scope = A) -> Record:
    return Record(id=f"{session}:{i}", scope=scope, session_id=session, speaker="alice", text=text)


HISTORY = [
    turn(1, "I go hiking in the Alps every summer."),
    turn(2, "My sister lives in Quito."),
    turn(3, "I bake rye bread on Sundays.", session="s2"),
]


def test_every_call_finds_a_new_connection_after_its_sessions_are_terminated(pg_database, tmp_path, minilm):
    """Each member, called after an administrator ended every session of the store: it answers
    (was: StoreError, 503 over REST, on every call until the process restarted)."""
    dsn = pg_database("term")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "term")
    s.add(HISTORY)
    calls = {
        "search_dense": lambda: [c.record_ids for c, _ in s.search_dense("mountain walks in summer", A, 1)],
        "search_bm25": lambda: [c.record_ids for c, _ in s.search_bm25("rye bread", A, 2)],
        "get": lambda: [r.text for r in s.get(["s1:2"], A)],
        "records": lambda: len(s.records(A)),
        "chunks": lambda: len(s.chunks(A)),
        "count": lambda: s.count(A)["records"],
        "schema_version": lambda: s.schema_version() > 0,
        "add": lambda: s.add([turn(4, "I collect old maps.", session="s3")]).added,
        "add again": lambda: s.add([turn(4, "I collect old maps.", session="s3")]).skipped,
        "view_dir": lambda: s.view_dir("probe").is_dir(),
        "delete": lambda: s.delete("s3:4", A),
        "complete_purges": lambda: s.complete_purges(),
        "delete_all": lambda: s.delete_all(A),
    }
    got = {}
    for name, call in calls.items():
        # the pool refills in the background after a drop: end its sessions once it has settled (a
        # connection still being made when they are ended would be handed out dead, and dropped again)
        s._pool.wait(timeout=30)
        assert terminate_sessions(dsn) >= 1, name
        got[name] = call()
    assert got == {
        "search_dense": [["s1:1", "s1:2"]],
        "search_bm25": [["s2:3"]],
        "get": ["My sister lives in Quito."],
        "records": 3,
        "chunks": 2,
        "count": 3,
        "schema_version": True,
        "add": ["s3:4"],
        "add again": ["s3:4"],
        "view_dir": True,
        "delete": True,
        "complete_purges": 0,
        "delete_all": 3,
    }
    assert s.count() == {"records": 0, "chunks": 0, "vectors": 0}
    s.close()
    with pytest.raises(StoreError, match="closed"):  # a closed store stays closed
        s.count(A)


def test_a_connection_cut_inside_a_transaction_runs_the_call_again(pg_database, tmp_path, minilm, monkeypatch):
    """The session ends while an add re-chunks (inside its write transaction, its records and
    their vectors written) and while a delete holds its scope lock: nothing was committed, so each
    runs again on a new connection; the add stores each record and chunk once, without encoding its
    records again (the vectors encoded before the transaction are reused), the delete reports what
    it deleted. (The records are encoded before the write transaction: a cut there, as this test
    made while a chunk was encoded inside it, meets no transaction.)"""
    dsn = pg_database("mid")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "mid")
    cut = []
    rechunk = s._rechunk

    def cutting_rechunk(c, sessions, known=None):
        if not cut:
            cut.append(terminate_sessions(dsn))
        return rechunk(c, sessions, known)

    monkeypatch.setattr(s, "_rechunk", cutting_rechunk)
    res = s.add(HISTORY)
    assert cut == [1] and res.added == ["s1:1", "s1:2", "s2:3"] and res.skipped == []
    assert res.records_embedded == 3  # each record encoded once, over both attempts
    assert s.count() == {"records": 3, "chunks": 2, "vectors": 2}

    guard = s._guard

    def cutting_guard(c, keys):
        if len(cut) == 1:
            cut.append(terminate_sessions(dsn))
        guard(c, keys)

    monkeypatch.setattr(s, "_guard", cutting_guard)
    assert s.delete_all(A) == 3 and len(cut) == 2
    assert s.count() == {"records": 0, "chunks": 0, "vectors": 0}
    s.close()


@contextmanager
def commit_replies_lost():
    """While open, the first top-level transaction that wrote (it holds a transaction id) commits on
    the server and then loses its connection before the client hears back: the commit took
    effect, the client sees a dropped connection."""
    real = psycopg.Connection.transaction
    armed = [True]

    @contextmanager
    def transaction(self, *args, **kwargs):
        top = self.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with real(self, *args, **kwargs) as tx:
            yield tx
            wrote = top and self.execute("SELECT pg_current_xact_id_if_assigned() IS NOT NULL").fetchone()[0]
        if wrote and armed:
            armed.clear()
            self.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    psycopg.Connection.transaction = transaction
    try:
        yield armed
    finally:
        psycopg.Connection.transaction = real


def test_a_commit_whose_reply_is_lost_is_not_doubled_and_a_delete_says_its_outcome_is_unknown(
    pg_database, tmp_path, minilm
):
    """The connection drops after the server committed: the add runs again, finds its records
    stored with the same content and reports them added (nothing doubled); a delete is not run
    again (it would report 0) but raises StoreUnavailableError saying its outcome is unknown."""
    dsn = pg_database("commit")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "commit")
    with commit_replies_lost() as armed:
        res = s.add(HISTORY)
    assert not armed and res.added == ["s1:1", "s1:2", "s2:3"] and res.skipped == []
    assert res.chunks_built == 2 and res.chunks_embedded == 2
    assert s.count() == {"records": 3, "chunks": 2, "vectors": 2}
    with commit_replies_lost() as armed, pytest.raises(StoreUnavailableError, match="outcome is unknown"):
        s.delete("s1:2", A)
    assert not armed and s.get(["s1:2"], A) == []  # it had taken effect
    assert s.delete("s1:2", A) is False  # made again: nothing left to delete
    s.close()


def test_a_commit_cut_at_the_server_is_run_again_by_an_add_and_reported_by_a_delete(pg_database, tmp_path, minilm):
    """The server ends the session during COMMIT (a deferred trigger terminates its own backend, once:
    a sequence is not rolled back), so nothing was committed: the add runs again and stores its
    records once; the delete, whose outcome the client cannot know, raises StoreUnavailableError,
    and the record is still there for the delete made again."""
    dsn = pg_database("cut")
    s = PostgresStore(dsn, minilm, directory=tmp_path / "cut")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE SEQUENCE cuts")
        admin.execute(
            "CREATE FUNCTION cut_once() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF nextval('cuts') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); END IF; "
            "RETURN NULL; END $$"
        )
        admin.execute(
            "CREATE CONSTRAINT TRIGGER cut AFTER INSERT OR DELETE ON records DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION cut_once()"
        )
        res = s.add(HISTORY)
        assert admin.execute("SELECT last_value FROM cuts").fetchone()[0] > 1  # the first COMMIT was cut
        assert res.added == ["s1:1", "s1:2", "s2:3"] and s.count() == {"records": 3, "chunks": 2, "vectors": 2}
        admin.execute("ALTER SEQUENCE cuts RESTART")
        with pytest.raises(StoreUnavailableError, match="outcome is unknown"):
            s.delete("s1:2", A)
        assert [r.id for r in s.get(["s1:2"], A)] == ["s1:2"]  # the cut COMMIT did not take effect
        assert s.delete("s1:2", A) is True
    s.close()


class Load:
    """``workers`` threads calling the store until stopped: each adds a new record (acknowledged
    once ``add`` returned) or searches, in turn; every call's start, end and error is kept."""

    def __init__(self, store: PostgresStore, workers: int = 3):
        self.store = store
        self.calls: list[tuple[float, float, str | None]] = []  # (start, end, error type or None)
        self.acked: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w,)) for w in range(workers)]

    def _run(self, w: int) -> None:
        i = 0
        while not self._stop.is_set():
            t0, err = time.monotonic(), None
            try:
                if i % 2 == 0:
                    self.store.add([turn(i, f"Worker {w} note {i} about tram lines.", session=f"w{w}")])
                    self.acked.append(f"w{w}:{i}")
                else:
                    self.store.search_bm25("tram lines", A, 5)
                    self.store.search_dense("tram lines", A, 5)
            except Exception as e:  # noqa: BLE001 - recorded
                err = type(e).__name__
            self.calls.append((t0, time.monotonic(), err))
            i += 1

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def errors(self, started_after: float = 0.0) -> list[str]:
        return [e for t0, _, e in self.calls if e is not None and t0 >= started_after]


@pytest.mark.slow
def test_a_restart_of_the_server_under_load_loses_no_acknowledged_add(restartable_pg, tmp_path, minilm):
    """Three threads add and search while the embedded server restarts (fast shutdown: every session
    ends, transactions in flight roll back). Within the store's wait (30 s here, for a busy
    machine): no call fails. With a 1 s wait and 3 s down: calls in the outage fail with
    StoreUnavailableError only, none started once the server is back, and every acknowledged add
    is stored, once."""
    url = restartable_pg.url
    s = PostgresStore(url, minilm, directory=tmp_path / "v", connect_timeout_s=30)
    with Load(s) as load:
        time.sleep(1.5)
        restartable_pg.restart()
        back = time.monotonic()
        time.sleep(2)
    assert load.errors() == [] and sum(1 for t0, _, _ in load.calls if t0 > back) > 0
    stored = {r.id for r in s.records(A)}
    assert set(load.acked) <= stored and s.count(A)["records"] == len(stored)
    s.close()

    s = PostgresStore(url, minilm, directory=tmp_path / "v", connect_timeout_s=1)
    with Load(s) as load:
        time.sleep(1.0)
        restartable_pg.restart(down_s=3)
        back = time.monotonic()
        time.sleep(3)
    assert load.errors(started_after=back + 1.5) == [] and sum(1 for t0, _, _ in load.calls if t0 > back + 1.5) > 0
    assert set(load.errors()) == {"StoreUnavailableError"}, "a 3 s outage outlasts a 1 s wait"
    stored = {r.id for r in s.records(A)}
    assert set(load.acked) <= stored and s.count(A)["records"] == len(stored)
    s.close()

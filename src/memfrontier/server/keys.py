"""API keys, usage totals and in-flight slots of the REST service's tenants, shared by every
server process: :class:`KeyStore` (the interface and the logic), two backends.

- :class:`PostgresKeyStore`: tables in the store's own PostgreSQL database, in the schema
  ``memfrontier_service`` (``schema_version``, ``api_keys``, ``usage``, ``tenants``), versioned like
  the store's (:data:`PG_MIGRATIONS`, applied on open under an advisory lock; a newer schema is
  refused). The default of ``memfrontier serve``.
- :class:`SQLiteKeyStore`: one SQLite file (WAL, ``busy_timeout``; schema version in its ``meta``
  table), beside a SQLite store.

Keys. An API key is ``mf_<key_id>_<secret>``: ``key_id`` (12 hex) is the public handle used to
list and revoke it, ``secret`` is 32 random bytes (``secrets.token_urlsafe``) and only its SHA-256
is stored. A salted slow hash (bcrypt, argon2) protects low-entropy passwords; a 256-bit random
secret needs none, and the lookup stays one indexed read. Verification compares digests in
constant time (``hmac.compare_digest``). A revoked key is refused by every server process on its
next request (each request reads the key row).

In-flight slots (:meth:`KeyStore.acquire` / :meth:`KeyStore.release`): every key store is also
the tenants' in-flight slots, locks that die with their holder (:mod:`memfrontier.server.slots`:
advisory locks on the PostgreSQL key store's session, ``flock`` files beside the SQLite key file).

The PostgreSQL key store survives a dropped connection (a restarted server, an administrator's
``pg_terminate_backend``): a statement or transaction that finds its session dead reconnects
once and runs again, and the slots the dead session held (its advisory locks died with it) are
dropped from this object's held slots; a transaction already under way when the session dies is
not replayed (its error is reported; the next call reconnects). A dropped session that cannot be
replaced (the server down or restarting) raises :class:`~memfrontier.core.errors.StoreUnavailableError`
(the REST service's 503 with ``Retry-After``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from pydantic import BaseModel

from ..core.errors import StoreError, StoreUnavailableError
from ..core.extras import require_extra
from ..core.files import private_dir, private_file
from ..core.ledger import USAGE_FIELDS, Usage
from ..store.postgres import is_postgres_url, redact_url
from ..store.postgres_schema import apply_migrations, schema_version
from ..store.purge import with_placeholder
from .slots import InFlightSlots, SlotFiles, free_advisory_slot, try_advisory_slot
from .tenants import check_tenant

log = logging.getLogger(__name__)

KEY_RE = re.compile(r"^mf_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
#: The SQLite key file's schema version (``meta.schema_version``).
KEYS_SCHEMA_VERSION = 1
#: The PostgreSQL schema (namespace) that holds the key tables in the store's database.
PG_SCHEMA = "memfrontier_service"
_PG_MIGRATION_LOCK = 0x6D666B73  # advisory lock key held while the key tables are checked / migrated
_USAGE_COLS = ", ".join(f"{f} double precision NOT NULL DEFAULT 0" for f in USAGE_FIELDS)
#: Every schema version of the PostgreSQL key tables and the statements that reach it.
PG_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE api_keys (key_id text PRIMARY KEY, tenant text NOT NULL, secret_sha256 text NOT NULL,
        created_s double precision NOT NULL, revoked_s double precision)""",
        "CREATE INDEX api_keys_tenant ON api_keys (tenant)",
        f"CREATE TABLE usage (tenant text NOT NULL, stage text NOT NULL, {_USAGE_COLS}, PRIMARY KEY (tenant, stage))",
        "CREATE TABLE tenants (id serial PRIMARY KEY, tenant text NOT NULL UNIQUE)",
    ]
}


class KeyInfo(BaseModel):
    """A key as listed (never its secret): handle, tenant, creation and revocation times (unix s)."""

    key_id: str
    tenant: str
    created_s: float
    revoked_s: float | None = None


class KeyStore(InFlightSlots, ABC):
    """API keys, per-tenant usage totals and in-flight slots (see the module docstring).

    SQL is written once, with ``?`` placeholders; a backend supplies the connection (``_tx``,
    ``_read``) and the slot lock (``_try_slot``, ``_free_slot``, :class:`~memfrontier.server.slots.InFlightSlots`).
    Every method is thread-safe.

    Raises ValueError for an invalid tenant name, :class:`~memfrontier.core.errors.StoreError` when
    the database cannot be read or written; :meth:`authenticate` returns None (never raises on the
    key itself) for a missing, malformed, unknown or revoked key.
    """

    #: Where the keys live (a file path, or the database URL without its password).
    location: str
    _placeholder = "?"

    # -- what a backend supplies ------------------------------------------------------------
    @abstractmethod
    def _tx(self):
        """A context manager: one write transaction, yielding an object with ``execute(sql, params)``."""

    @abstractmethod
    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        """The rows of one read statement."""

    @abstractmethod
    def _close(self) -> None:
        """Close the connections (the slots they hold are released)."""

    def _sql(self, sql: str) -> str:
        return with_placeholder(sql, self._placeholder)

    # -- keys -------------------------------------------------------------------------------
    def create(self, tenant: str) -> tuple[str, str]:
        """A new key for ``tenant``: ``(key_id, key)``. The key is shown once; only its hash is kept."""
        check_tenant(tenant)
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        with self._tx() as c:
            c.execute(
                self._sql("INSERT INTO api_keys (key_id, tenant, secret_sha256, created_s) VALUES (?, ?, ?, ?)"),
                (key_id, tenant, hashlib.sha256(secret.encode()).hexdigest(), time.time()),
            )
        return key_id, f"mf_{key_id}_{secret}"

    def revoke(self, key_id: str) -> bool:
        """Revoke the key ``key_id``; False when no active key has that id. Then the slot state of
        every tenant left without an active key is dropped (:meth:`_retire_slots`)."""
        with self._tx() as c:
            cur = c.execute(
                self._sql("UPDATE api_keys SET revoked_s = ? WHERE key_id = ? AND revoked_s IS NULL"),
                (time.time(), key_id),
            )
            revoked = cur.rowcount == 1
        if revoked:
            active = {r[0] for r in self._read("SELECT DISTINCT tenant FROM api_keys WHERE revoked_s IS NULL")}
            self._retire_slots(active)
        return revoked

    def _retire_slots(self, active: set[str]) -> None:
        """Drop what the slots of tenants outside ``active`` (those with no active key) left behind;
        nothing by default (an advisory lock leaves nothing)."""

    def list(self, tenant: str | None = None) -> list[KeyInfo]:
        """Keys (active and revoked), oldest first; only ``tenant``'s when given."""
        sql = "SELECT key_id, tenant, created_s, revoked_s FROM api_keys"
        rows = self._read(
            self._sql(sql + (" WHERE tenant = ?" if tenant else "") + " ORDER BY created_s, key_id"),
            (tenant,) if tenant else (),
        )
        return [KeyInfo(key_id=r[0], tenant=r[1], created_s=r[2], revoked_s=r[3]) for r in rows]

    def authenticate(self, key: str | None) -> str | None:
        """The tenant of an active ``key``, else None."""
        m = KEY_RE.match(key or "")
        if m is None:
            return None
        rows = self._read(
            self._sql("SELECT tenant, secret_sha256 FROM api_keys WHERE key_id = ? AND revoked_s IS NULL"),
            (m.group(1),),
        )
        if not rows:
            return None
        digest = hashlib.sha256(m.group(2).encode()).hexdigest()
        return rows[0][0] if hmac.compare_digest(digest, rows[0][1]) else None

    # -- usage ------------------------------------------------------------------------------
    def record_usage(self, tenant: str, usage: Usage) -> None:
        """Add an answer's usage (by stage) to the tenant's totals, in one transaction."""
        sets = ", ".join(f"{f} = usage.{f} + excluded.{f}" for f in USAGE_FIELDS)
        sql = self._sql(
            f"INSERT INTO usage (tenant, stage, {', '.join(USAGE_FIELDS)}) "
            f"VALUES (?, ?, {', '.join('?' * len(USAGE_FIELDS))}) "
            f"ON CONFLICT (tenant, stage) DO UPDATE SET {sets}"
        )
        with self._tx() as c:
            for stage, u in sorted(usage.by_stage.items()):
                c.execute(sql, (tenant, stage, *(float(getattr(u, f)) for f in USAGE_FIELDS)))

    def usage(self, tenant: str) -> dict[str, dict[str, float]]:
        """The tenant's totals by stage: ``{stage: {calls, input_tokens, ..., usd, proxy_s, wall_s}}``
        (tokens and calls as integers, USD in dollars, seconds)."""
        rows = self._read(
            self._sql(f"SELECT stage, {', '.join(USAGE_FIELDS)} FROM usage WHERE tenant = ? ORDER BY stage"), (tenant,)
        )
        return {
            stage: {f: (v if f in ("usd", "proxy_s", "wall_s") else int(v)) for f, v in zip(USAGE_FIELDS, vals)}
            for stage, *vals in rows
        }

    # -- in-flight slots: acquire / release / held (InFlightSlots) ----------------------------
    def close(self) -> None:
        """Release every slot and close the connections (the key store is not used afterwards)."""
        with self._slot_lock:
            self._close()
            self._held.clear()


class SQLiteKeyStore(KeyStore):
    """The keys in one SQLite file at ``path`` (created when missing), slots beside it in
    ``<path>.slots/``. Raises StoreError for a file of another schema version."""

    def __init__(self, path: str | os.PathLike, busy_timeout_s: float = 30.0):
        super().__init__()
        self.path = Path(path)
        self.location = str(self.path)
        private_file(private_dir(self.path.parent) / self.path.name)  # 0700 folder, 0600 keys.db (and -wal/-shm)
        self.slot_dir = self.path.with_name(self.path.name + ".slots")
        self._busy_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's connection, closed by close()
        self._all_lock = threading.Lock()
        self._slot_files = SlotFiles(self.slot_dir)
        with self._tx() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) != KEYS_SCHEMA_VERSION:
                raise StoreError(f"{self.path}: key store schema {row[0]} is not {KEYS_SCHEMA_VERSION}")
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(KEYS_SCHEMA_VERSION),))
            conn.execute("""CREATE TABLE IF NOT EXISTS api_keys (
                key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, secret_sha256 TEXT NOT NULL,
                created_s REAL NOT NULL, revoked_s REAL)""")
            cols = ", ".join(f"{f} REAL NOT NULL DEFAULT 0" for f in USAGE_FIELDS)
            conn.execute(f"""CREATE TABLE IF NOT EXISTS usage (
                tenant TEXT NOT NULL, stage TEXT NOT NULL, {cols}, PRIMARY KEY (tenant, stage))""")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, timeout=self._busy_ms / 1000, check_same_thread=False
                )  # used by its own thread only; closed by close()
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            except sqlite3.Error as e:
                raise StoreError(f"key store {self.path}: {e}") from e
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"key store {self.path}: {e}") from e

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"key store {self.path}: {e}") from e

    def _try_slot(self, tenant: str, index: int) -> int | None:
        return self._slot_files.take(tenant, index)

    def _free_slot(self, tenant: str, index: int, handle: int) -> None:
        self._slot_files.free(handle)

    def _retire_slots(self, active: set[str]) -> None:
        """Delete the slot files of tenants outside ``active`` (:meth:`SlotFiles.retire`: a file
        held now stays for a later revocation)."""
        self._slot_files.retire(active)

    def _close(self) -> None:
        for fd in self._held.values():
            self._slot_files.free(fd)
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


class PostgresKeyStore(KeyStore):
    """The keys in the PostgreSQL database at ``dsn`` (the store's own), schema :data:`PG_SCHEMA`,
    through one connection (autocommit; writes in transactions), opened again when it drops (see
    the module docstring). The role needs the right to create a schema in that database on first
    open.

    Raises:
        StoreError: the server cannot be reached, or the key tables' schema version is newer than
            this memfrontier's (:data:`PG_MIGRATIONS`).
    """

    _placeholder = "%s"

    def __init__(self, dsn: str, connect_timeout_s: float = 10.0):
        require_extra("postgres", "psycopg", feature="a PostgreSQL key store")
        import psycopg

        super().__init__()
        self._psycopg = psycopg
        self._dsn = dsn
        self._connect_timeout = max(1, int(connect_timeout_s))
        self.location = redact_url(dsn)
        self._lock = threading.RLock()
        self._tenant_ids: dict[str, int] = {}
        self._session = 0  # incremented on each (re)connection; a slot's handle is the session that took it
        self._closed = False
        self._conn = self._connect()
        try:
            with self._tx() as c:
                c.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_MIGRATION_LOCK,))
                c.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
                apply_migrations(c, PG_MIGRATIONS, lock=_PG_MIGRATION_LOCK, what=f"key tables of {self.location}")
        except BaseException:
            self._conn.close()
            raise

    def _connect(self):
        """A new session, every statement naming the key tables (``search_path``)."""
        try:
            conn = self._psycopg.connect(self._dsn, autocommit=True, connect_timeout=self._connect_timeout)
        except self._psycopg.Error as e:
            raise StoreUnavailableError(f"cannot connect to key database {self.location}: {e}") from e
        try:
            conn.execute(f"SET search_path TO {PG_SCHEMA}")
        except self._psycopg.Error as e:
            conn.close()
            raise StoreError(f"key database {self.location}: {e}") from e
        self._session += 1
        return conn

    def _failed(self, e: Exception) -> StoreError:
        """The error of a call that psycopg's ``e`` ended: :class:`StoreUnavailableError` when the
        session died with it."""
        kind = StoreUnavailableError if self._dead(e) else StoreError
        return kind(f"key database {self.location}: {e}")

    def _dead(self, e: Exception) -> bool:
        """Whether ``e`` ended the session (not a statement error): a connection-class error
        (OperationalError, InterfaceError) after which the connection is closed or broken."""
        return isinstance(e, (self._psycopg.OperationalError, self._psycopg.InterfaceError)) and (
            self._conn.closed or self._conn.broken
        )

    def _reconnect(self) -> None:
        """Replace a dead session: the slots it held are gone with it (PostgreSQL dropped its
        advisory locks), so they leave :attr:`_held`."""
        if self._closed:
            raise StoreError(f"key store {self.location} is closed")
        self._conn.close()
        self._conn = self._connect()
        self._forget_slots(lambda session: session != self._session)

    def _retrying(self, step):
        """``step(connection)``; when it finds the session dead, once more on a new one."""
        try:
            return step(self._conn)
        except self._psycopg.Error as e:
            if not self._dead(e):
                raise
            log.warning("key database %s: the connection dropped (%s); reconnecting", self.location, e)
            self._reconnect()
            return step(self._conn)

    def schema_version(self) -> int:
        """The version of the key tables (see :data:`PG_MIGRATIONS`)."""
        with self._tx() as c:
            return schema_version(c)

    @contextmanager
    def _tx(self):
        """One transaction. Its ``BEGIN`` finding the session dead reconnects and begins again; a
        session dying later fails the transaction (never replayed: it may have committed), and
        the next call reconnects."""
        with self._lock:
            if self._closed:
                raise StoreError(f"key store {self.location} is closed")
            try:
                with ExitStack() as stack:

                    def begin(conn):
                        stack.enter_context(conn.transaction())
                        return conn

                    yield self._retrying(begin)
            except self._psycopg.Error as e:
                raise self._failed(e) from e

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            if self._closed:
                raise StoreError(f"key store {self.location} is closed")
            try:
                return self._retrying(lambda conn: conn.execute(sql, params).fetchall())
            except self._psycopg.Error as e:
                raise self._failed(e) from e

    def _tenant_id(self, tenant: str) -> int:
        tid = self._tenant_ids.get(tenant)
        if tid is None:
            with self._tx() as c:
                c.execute("INSERT INTO tenants (tenant) VALUES (%s) ON CONFLICT (tenant) DO NOTHING", (tenant,))
                tid = c.execute("SELECT id FROM tenants WHERE tenant = %s", (tenant,)).fetchone()[0]
            self._tenant_ids[tenant] = tid
        return tid

    def _try_slot(self, tenant: str, index: int) -> int | None:
        tid = self._tenant_id(tenant)
        with self._lock:  # the session that answers is the one holding the lock
            return self._session if try_advisory_slot(self._read, tid, index) else None

    def _free_slot(self, tenant: str, index: int, handle: int) -> None:
        with self._lock:
            if handle == self._session:  # a lock of a dead session died with it
                free_advisory_slot(self._read, self._tenant_id(tenant), index)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            try:  # free the slots now: the server drops a closed session's locks only as its backend exits
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            except self._psycopg.Error:
                pass  # a dead session holds nothing
            self._conn.close()


def open_key_store(location: str | os.PathLike) -> KeyStore:
    """The key store at ``location``: a ``postgres://`` / ``postgresql://`` URL
    (:class:`PostgresKeyStore`, in that database) or a file path (:class:`SQLiteKeyStore`)."""
    if is_postgres_url(location):
        return PostgresKeyStore(str(location))
    return SQLiteKeyStore(location)


__all__ = [
    "KEY_RE",
    "KeyInfo",
    "KeyStore",
    "PG_MIGRATIONS",
    "PG_SCHEMA",
    "PostgresKeyStore",
    "SQLiteKeyStore",
    "USAGE_FIELDS",
    "open_key_store",
]

"""Tenants of the REST service: API keys (stored hashed), the scope confinement, usage totals.

A tenant is a name (``^[a-z0-9][a-z0-9_-]{0,62}$``). An API key is ``mf_<key_id>_<secret>``:
``key_id`` (12 hex) is the public handle used to list and revoke it, ``secret`` is 32 random bytes
(``secrets.token_urlsafe``) and only its SHA-256 is stored. A salted slow hash (bcrypt, argon2)
protects low-entropy passwords; a 256-bit random secret needs none, and the lookup stays one
indexed read. Verification compares digests in constant time (``hmac.compare_digest``).

Keys and usage live in one SQLite file (WAL, ``busy_timeout``), so several server processes
(uvicorn workers) share them; a revoked key is refused by every worker on its next request.

Confinement: every scope id a request names is stored as ``<tenant>/<id>``
(:func:`tenant_scope`). The tenant name contains no ``/``, so the encoding is injective (split at
the first ``/``) and no id a request can send reaches another tenant's records: a request's
ids all carry its own tenant's prefix, and a store scope field matches only equal strings.
:func:`client_scope` strips the prefix on the way out.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel

from ..core.ledger import Usage
from ..core.types import Scope

TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
KEY_RE = re.compile(r"^mf_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
KEYS_SCHEMA_VERSION = 1
#: Usage counters kept per tenant and stage (the names of :class:`~memfrontier.core.ledger.StageUsage`).
USAGE_FIELDS = ("calls", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens", "usd",
                "unpriced_calls", "proxy_s", "wall_s")


def check_tenant(tenant: str) -> str:
    """``tenant`` when it is a valid tenant name; ValueError naming the rule otherwise."""
    if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
        raise ValueError(f"tenant must match {TENANT_RE.pattern} (lower-case letters, digits, '_' and '-'), got {tenant!r}")
    return tenant


def tenant_scope(tenant: str, user_id: str | None, agent_id: str | None, run_id: str | None) -> Scope:
    """The store scope of a request of ``tenant``: each given id becomes ``<tenant>/<id>``, absent
    ids stay ``None``. Raises ValueError when no id is given (a request never reads every scope)."""
    check_tenant(tenant)
    ids = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}
    if all(v is None for v in ids.values()):
        raise ValueError("give a scope: at least one of user_id, agent_id, run_id")
    return Scope(**{k: None if v is None else f"{tenant}/{v}" for k, v in ids.items()})


def client_scope(tenant: str, scope: Scope) -> Scope:
    """The inverse of :func:`tenant_scope` for a stored scope of ``tenant``. Raises ValueError for
    an id outside the tenant (a confinement bug: never returned to a client)."""
    prefix = f"{tenant}/"
    out = {}
    for k in ("user_id", "agent_id", "run_id"):
        v = getattr(scope, k)
        if v is not None and not v.startswith(prefix):
            raise ValueError(f"stored {k} is outside tenant {tenant!r}")
        out[k] = None if v is None else v[len(prefix):]
    return Scope(**out)


class KeyInfo(BaseModel):
    """A key as listed (never its secret): handle, tenant, creation and revocation times (unix s)."""

    key_id: str
    tenant: str
    created_s: float
    revoked_s: float | None = None


class KeyStore:
    """API keys and per-tenant usage totals in one SQLite file (created when missing).

    Raises ValueError for an invalid tenant name; :meth:`authenticate` returns None (never raises)
    for a missing, malformed, unknown or revoked key.
    """

    def __init__(self, path: str | Path, busy_timeout_s: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_ms = int(busy_timeout_s * 1000)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's connection, closed by close()
        self._all_lock = threading.Lock()
        with self._tx() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) != KEYS_SCHEMA_VERSION:
                raise ValueError(f"{self.path}: key store schema {row[0]} is not {KEYS_SCHEMA_VERSION}")
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
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_ms / 1000,
                                   check_same_thread=False)  # used by its own thread only; closed by close()
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def _tx(self):
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def create(self, tenant: str) -> tuple[str, str]:
        """A new key for ``tenant``: ``(key_id, key)``. The key is shown once; only its hash is kept."""
        check_tenant(tenant)
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        with self._tx() as conn:
            conn.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?, NULL)",
                         (key_id, tenant, hashlib.sha256(secret.encode()).hexdigest(), time.time()))
        return key_id, f"mf_{key_id}_{secret}"

    def revoke(self, key_id: str) -> bool:
        """Revoke the key ``key_id``; False when no active key has that id."""
        with self._tx() as conn:
            cur = conn.execute("UPDATE api_keys SET revoked_s = ? WHERE key_id = ? AND revoked_s IS NULL",
                               (time.time(), key_id))
            return cur.rowcount == 1

    def list(self, tenant: str | None = None) -> list[KeyInfo]:
        """Keys (active and revoked), oldest first; only ``tenant``'s when given."""
        sql = "SELECT key_id, tenant, created_s, revoked_s FROM api_keys"
        rows = self._conn().execute(sql + (" WHERE tenant = ?" if tenant else "") + " ORDER BY created_s, key_id",
                                    (tenant,) if tenant else ()).fetchall()
        return [KeyInfo(key_id=r[0], tenant=r[1], created_s=r[2], revoked_s=r[3]) for r in rows]

    def authenticate(self, key: str | None) -> str | None:
        """The tenant of an active ``key``, else None."""
        m = KEY_RE.match(key or "")
        if m is None:
            return None
        row = self._conn().execute("SELECT tenant, secret_sha256 FROM api_keys WHERE key_id = ? AND revoked_s IS NULL",
                                   (m.group(1),)).fetchone()
        if row is None:
            return None
        digest = hashlib.sha256(m.group(2).encode()).hexdigest()
        return row[0] if hmac.compare_digest(digest, row[1]) else None

    def record_usage(self, tenant: str, usage: Usage) -> None:
        """Add an answer's usage (by stage) to the tenant's totals, in one transaction."""
        with self._tx() as conn:
            for stage, u in usage.by_stage.items():
                values = [float(getattr(u, f)) for f in USAGE_FIELDS]
                sets = ", ".join(f"{f} = {f} + excluded.{f}" for f in USAGE_FIELDS)
                conn.execute(f"INSERT INTO usage (tenant, stage, {', '.join(USAGE_FIELDS)}) "
                             f"VALUES (?, ?, {', '.join('?' * len(USAGE_FIELDS))}) "
                             f"ON CONFLICT (tenant, stage) DO UPDATE SET {sets}", (tenant, stage, *values))

    def usage(self, tenant: str) -> dict[str, dict[str, float]]:
        """The tenant's totals by stage: ``{stage: {calls, input_tokens, ..., usd, proxy_s, wall_s}}``
        (tokens and calls as integers, USD in dollars, seconds)."""
        rows = self._conn().execute(f"SELECT stage, {', '.join(USAGE_FIELDS)} FROM usage WHERE tenant = ? ORDER BY stage",
                                    (tenant,)).fetchall()
        out = {}
        for stage, *vals in rows:
            out[stage] = {f: (v if f in ("usd", "proxy_s", "wall_s") else int(v)) for f, v in zip(USAGE_FIELDS, vals)}
        return out

    def close(self) -> None:
        """Close every thread's connection (the store is not used afterwards)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

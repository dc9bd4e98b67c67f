"""Deleting records reaches every view derived from them.

A delete in the store (:meth:`~memfrontier.store.sqlite.SQLiteStore.delete` /
``delete_all``) commits, in the same SQLite transaction as the records' removal, a *purge intent*:
``{"scope": <delete_all scope or null>, "records": [[<record scope>, [ids...]], ...]}``.
:func:`purge_views` carries it out on the files of the store directory:

* banks (``banks/*.db``): items built from a deleted record, items inside a deleted scope, and
  the done marks and traces of every scope that covers a deleted record (see
  :func:`~memfrontier.store.bank.purge_bank`);
* graph indexes (``graph/<scope>/``): the whole folder (database, notes cache, build meta) of
  every scope that covers a deleted record, so the next build starts from the remaining records.

A scope G *covers* a record scope R when every id G sets equals R's (the records a search or a
build for G reads include R's). The scopes covering R are the non-empty subsets of R's set ids:
at most 7, enumerated by :func:`covering_scopes`. Everything here is idempotent: an intent
interrupted half way is simply run again.

Views kept on a server (the Neo4j graph backend) are not reached from here.

View roots. View files are local: every store object has a *view root* (the SQLite store's
directory; a PostgreSQL store's ``directory``, which differs between processes sharing one
database, e.g. ``memfrontier serve``'s ``DATA_DIR/views`` and the CLI's default). An intent is
complete only when every view root has carried it out, which the store's database records (the
same tables in both stores, :data:`LOG_TABLES`): ``view_roots`` holds each root that holds view
files (``<host>:<absolute path>``, registered once its folder exists) and ``purges_applied`` the
(intent, root) pairs done. :func:`apply_pending` is what a store runs on open, after each of its
deletes and whenever its views are reached (``view_dir``) while :func:`purges_due`: it
carries out the intents its root has not applied, records them, and drops the intents that every
registered root has applied. A root that no longer exists is dropped from the registry by a
process on its host (it holds nothing to purge); a root on another host is finished only by a
process there. A view object kept open in a process sees another process's delete when that
process next reaches its views through the store.
"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from itertools import combinations
from pathlib import Path

from ..core.types import Scope
from .bank import purge_bank

_FIELDS = ("user_id", "agent_id", "run_id")

#: The registry of view roots and the intents each has applied, beside ``pending_purges`` (the same
#: statements in both stores' schemas).
LOG_TABLES = [
    "CREATE TABLE IF NOT EXISTS view_roots (root text PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS purges_applied (seq bigint NOT NULL, root text NOT NULL, PRIMARY KEY (seq, root))",
]
_NOT_APPLIED = "NOT EXISTS (SELECT 1 FROM purges_applied a WHERE a.seq = pending_purges.seq AND a.root = ?)"
#: ``tx()``: a transaction on the store's database, yielding an object with ``execute(sql, params)``.
Transaction = Callable[[], AbstractContextManager]


def covering_scopes(scope: Scope) -> list[Scope]:
    """Every scope that covers ``scope``: one per non-empty subset of its set ids (at most 7)."""
    set_fields = [f for f in _FIELDS if getattr(scope, f) is not None]
    return [Scope(**{f: getattr(scope, f) for f in combo})
            for n in range(1, len(set_fields) + 1) for combo in combinations(set_fields, n)]


def purge_views(root: str | Path, intent: dict) -> dict[str, int]:
    """Carry out one purge intent on the store directory ``root``; returns what was removed
    (``bank_items``, ``graphs``). Raises StoreError when a bank file cannot be written."""
    # the graph folders' layout belongs to the graph package (same floor; lazy: graph imports store)
    from ..graph import GRAPH_VIEW, state_dir

    root = Path(root)
    whole = Scope(**intent["scope"]) if intent.get("scope") else None
    deleted = [(Scope(**sc), list(ids)) for sc, ids in intent.get("records", [])]
    covering = {g.key(): g for sc, _ in deleted for g in covering_scopes(sc)}
    keys = set(covering)
    out = {"bank_items": 0, "graphs": 0}
    banks = root / "banks"
    if banks.is_dir():
        for f in sorted(banks.glob("*.db")):
            out["bank_items"] += purge_bank(f, deleted, whole, keys)
    for key in sorted(keys):
        folder = state_dir(root / GRAPH_VIEW, covering[key])
        if folder is not None and folder.exists():
            shutil.rmtree(folder)
            out["graphs"] += 1
    return out


def view_root_id(folder: str | Path) -> str:
    """The registry name of the view root ``folder``: ``<host name>:<absolute path>``."""
    return f"{socket.gethostname()}:{Path(folder).resolve()}"


def with_placeholder(sql: str, ph: str) -> str:
    """``sql`` written with ``?`` placeholders, in the driver's style ``ph`` (``?`` for sqlite3,
    ``%s`` for psycopg). The statements passed here hold no literal ``?``."""
    return sql if ph == "?" else sql.replace("?", ph)


def purges_due(folder: str | Path, tx: Transaction, ph: str = "?") -> bool:
    """Whether the view root ``folder`` must run :func:`apply_pending`: it is not registered, or an
    intent waits for it (one read; ``ph``: the driver's placeholder, ``?`` or ``%s``)."""
    root = view_root_id(folder)
    with tx() as c:
        registered, waiting = c.execute(with_placeholder(
            f"SELECT EXISTS (SELECT 1 FROM view_roots WHERE root = ?), "
            f"EXISTS (SELECT 1 FROM pending_purges WHERE {_NOT_APPLIED})", ph), (root, root)).fetchone()
    return not registered or bool(waiting)


def apply_pending(folder: str | Path, tx: Transaction, ph: str = "?") -> int:
    """Carry out, on the view root ``folder``, every pending intent it has not applied yet (oldest
    first, :func:`purge_views`), registering the root first when its folder exists, and record each
    one; then drop the registered roots of this host whose folder is gone and the intents that
    every registered root has applied. Idempotent (an interruption leaves the intent to be carried
    out again). Returns the intents carried out here.

    Raises StoreError when a bank file cannot be written, or as ``tx`` raises."""
    root, applied = view_root_id(folder), 0
    if Path(folder).is_dir():  # a root is registered only once its folder exists (see purges_due)
        with tx() as c:
            c.execute(with_placeholder("INSERT INTO view_roots (root) VALUES (?) ON CONFLICT (root) DO NOTHING", ph), (root,))
            pending = c.execute(with_placeholder(f"SELECT seq, intent_json FROM pending_purges WHERE {_NOT_APPLIED} ORDER BY seq",
                                     ph), (root,)).fetchall()
        for seq, intent_json in pending:
            purge_views(folder, json.loads(intent_json))
            with tx() as c:
                c.execute(with_placeholder("INSERT INTO purges_applied (seq, root) VALUES (?, ?) ON CONFLICT (seq, root) DO NOTHING",
                               ph), (seq, root))
            applied += 1
    host = socket.gethostname()
    with tx() as c:
        for (other,) in c.execute("SELECT root FROM view_roots").fetchall():
            other_host, _, path = other.partition(":")
            if other_host == host and not Path(path).is_dir():
                c.execute(with_placeholder("DELETE FROM view_roots WHERE root = ?", ph), (other,))
                c.execute(with_placeholder("DELETE FROM purges_applied WHERE root = ?", ph), (other,))
        c.execute("DELETE FROM pending_purges WHERE NOT EXISTS (SELECT 1 FROM view_roots r WHERE NOT EXISTS "
                  "(SELECT 1 FROM purges_applied a WHERE a.seq = pending_purges.seq AND a.root = r.root))")
        c.execute("DELETE FROM purges_applied WHERE seq NOT IN (SELECT seq FROM pending_purges)")
    return applied


__all__ = ["LOG_TABLES", "apply_pending", "covering_scopes", "purge_views", "purges_due", "view_root_id", "with_placeholder"]

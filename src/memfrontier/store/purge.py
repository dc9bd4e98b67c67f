"""Deleting records reaches every view derived from them.

A delete in the store (:meth:`~memfrontier.store.sqlite.SQLiteStore.delete` /
``delete_all``) commits, in the same transaction as the records' removal, a *purge intent*:
``{"scope": <delete_all scope or null>, "records": [[<record scope>, [ids...]], ...]}``.
:func:`purge_views` carries it out on a view root (the folder holding the view folders) as a
:class:`~memfrontier.core.purgers.Purge`, in three steps that hold in any process:

1. every view folder of the root loses its entries named :meth:`Scope.slug` of a scope covering a
   deleted record (the view-folder contract of :meth:`MemoryStore.view_dir`; e.g. the graph
   index's per-scope folders, whose database, notes cache and build meta go together);
2. every purger registered with :func:`~memfrontier.core.purgers.register_view_purger` runs on its
   folder: the memory banks' (:mod:`memfrontier.store.bank`, imported here so that every store
   process has it) and those of the view packages the process imported
   (``memfrontier.strategies.automem.graph``: a graph kept on a Neo4j server);
3. a view folder that declared a purger this process has not registered
   (:func:`~memfrontier.core.purgers.require_view_purger`) defers the intent for this root
   (:class:`~memfrontier.core.purgers.PurgeDeferred`): it stays pending, and a process with the
   purger carries it out when it next reaches the root's views (``view_dir``), before reading them.

The store never imports a view package: views register into the ground-floor registry, and what a
process without them must know to purge (step 1, step 3) is data the views leave in their folders.

A scope G *covers* a record scope R when every id G sets equals R's (the records a search or a
build for G reads include R's). The scopes covering R are the non-empty subsets of R's set ids:
at most 7, enumerated by :func:`covering_scopes`. Everything here is idempotent: an intent
interrupted half way is simply run again.

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
import logging
import shutil
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from itertools import combinations
from pathlib import Path

from ..core.purgers import Purge, PurgeDeferred, required_purgers, view_purgers
from ..core.types import Scope
from . import bank  # noqa: F401  (registers the memory banks' purger in every store process)

log = logging.getLogger(__name__)

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
    return [
        Scope(**{f: getattr(scope, f) for f in combo})
        for n in range(1, len(set_fields) + 1)
        for combo in combinations(set_fields, n)
    ]


def purge_of(intent: dict) -> Purge:
    """The :class:`~memfrontier.core.purgers.Purge` of a purge intent (see the module docstring)."""
    deleted = tuple((Scope(**sc), tuple(ids)) for sc, ids in intent.get("records", []))
    covering = {g.key(): g for sc, _ in deleted for g in covering_scopes(sc)}
    whole = Scope(**intent["scope"]) if intent.get("scope") else None
    return Purge(deleted=deleted, whole=whole, covering=dict(sorted(covering.items())))


def remove_scope_entries(folder: Path, purge: Purge) -> int:
    """Remove from the view folder ``folder`` the entries (files or folders) named
    :meth:`Scope.slug` of a scope in ``purge.covering``; returns how many."""
    removed = 0
    for scope in purge.covering.values():
        entry = folder / scope.slug()
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()
        else:
            continue
        removed += 1
    return removed


def purge_views(root: str | Path, intent: dict) -> dict[str, int]:
    """Carry out one purge intent on the view root ``root`` (the three steps of the module
    docstring); returns what was removed, by view name.

    Raises:
        PurgeDeferred: a view folder of ``root`` requires a purger not registered in this process
            (after everything else was done).
        StoreError: a view cannot be written (e.g. a bank file), as a purger raises it.
    """
    root = Path(root)
    purge = purge_of(intent)
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
    out: dict[str, int] = {}
    for folder in folders:
        out[folder.name] = remove_scope_entries(folder, purge)
    purgers = view_purgers()
    for name, purger in sorted(purgers.items()):
        out[name] = out.get(name, 0) + purger(root / name, purge)
    missing = sorted({n for folder in folders for n in required_purgers(folder)} - set(purgers))
    if missing:
        raise PurgeDeferred(missing)
    return out


_WARNED: set[tuple[str, tuple[str, ...]]] = set()


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
        registered, waiting = c.execute(
            with_placeholder(
                f"SELECT EXISTS (SELECT 1 FROM view_roots WHERE root = ?), "
                f"EXISTS (SELECT 1 FROM pending_purges WHERE {_NOT_APPLIED})",
                ph,
            ),
            (root, root),
        ).fetchone()
    return not registered or bool(waiting)


def apply_pending(folder: str | Path, tx: Transaction, ph: str = "?") -> int:
    """Carry out, on the view root ``folder``, every pending intent it has not applied yet (oldest
    first, :func:`purge_views`), registering the root first when its folder exists, and record each
    one; then drop the registered roots of this host whose folder is gone and the intents that
    every registered root has applied. Idempotent (an interruption leaves the intent to be carried
    out again). An intent deferred here (:class:`~memfrontier.core.purgers.PurgeDeferred`) is not
    recorded: it stays pending for this root, with a warning once per process. Returns the intents
    carried out here.

    Raises StoreError when a bank file cannot be written, or as ``tx`` raises."""
    root, applied = view_root_id(folder), 0
    if Path(folder).is_dir():  # a root is registered only once its folder exists (see purges_due)
        with tx() as c:
            c.execute(
                with_placeholder("INSERT INTO view_roots (root) VALUES (?) ON CONFLICT (root) DO NOTHING", ph), (root,)
            )
            pending = c.execute(
                with_placeholder(f"SELECT seq, intent_json FROM pending_purges WHERE {_NOT_APPLIED} ORDER BY seq", ph),
                (root,),
            ).fetchall()
        for seq, intent_json in pending:
            try:
                purge_views(folder, json.loads(intent_json))
            except PurgeDeferred as e:  # left pending here until a process with the purgers runs it
                if (root, tuple(e.missing)) not in _WARNED:
                    _WARNED.add((root, tuple(e.missing)))
                    log.warning(
                        "deleted records are not yet purged from the views of %s: they need %s; a "
                        "process that has them finishes the purge when it reaches these views",
                        root,
                        e,
                    )
                continue
            with tx() as c:
                c.execute(
                    with_placeholder(
                        "INSERT INTO purges_applied (seq, root) VALUES (?, ?) ON CONFLICT (seq, root) DO NOTHING", ph
                    ),
                    (seq, root),
                )
            applied += 1
    host = socket.gethostname()
    with tx() as c:
        for (other,) in c.execute("SELECT root FROM view_roots").fetchall():
            other_host, _, path = other.partition(":")
            if other_host == host and not Path(path).is_dir():
                c.execute(with_placeholder("DELETE FROM view_roots WHERE root = ?", ph), (other,))
                c.execute(with_placeholder("DELETE FROM purges_applied WHERE root = ?", ph), (other,))
        c.execute(
            "DELETE FROM pending_purges WHERE NOT EXISTS (SELECT 1 FROM view_roots r WHERE NOT EXISTS "
            "(SELECT 1 FROM purges_applied a WHERE a.seq = pending_purges.seq AND a.root = r.root))"
        )
        c.execute("DELETE FROM purges_applied WHERE seq NOT IN (SELECT seq FROM pending_purges)")
    return applied


__all__ = [
    "LOG_TABLES",
    "apply_pending",
    "covering_scopes",
    "purge_of",
    "purge_views",
    "remove_scope_entries",
    "purges_due",
    "view_root_id",
    "with_placeholder",
]

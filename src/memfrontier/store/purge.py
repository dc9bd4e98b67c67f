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
"""

from __future__ import annotations

import shutil
from itertools import combinations
from pathlib import Path

from ..core.types import Scope
from .bank import purge_bank

_FIELDS = ("user_id", "agent_id", "run_id")


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


__all__ = ["covering_scopes", "purge_views"]

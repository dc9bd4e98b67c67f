"""The turn view: one search unit per record (a chat turn), beside the store's ~256-token chunks.

A chunk packs about ten LoCoMo turns, so a reader handed the top chunks reads mostly turns that
do not answer the question. The turn view indexes each record on its own, in a
:class:`~memfrontier.store.bank.MemoryBank` named :data:`BANK_NAME` among the store's views
(``<store>/banks/turns.db``), searched with the raw-turn recipe
(:data:`~memfrontier.retrieve.recipes.TURNS_RRF`) by the shared hybrid search.

Each item: ``kind`` :data:`KIND`; ``text`` = :meth:`Record.render` (speaker, text, image captions,
as in a chunk); ``timestamp`` = the record's day time in its session
(:func:`~memfrontier.core.timeutil.day_times`, as a chunk's: the session's time when the session
is one day); ``source_ids`` = ``[record id]``; ``meta`` = ``{"session_id", "position"}`` (the
record's 0-based place in its session, chronological). Item ids derive from the scope, the record
id and the rendered text, so rebuilding adds nothing and a changed record gets a new item.
Building needs no model call and, on a store that keeps record vectors (both stores), no encode:
an item's text is exactly its record's :meth:`Record.render` (the default style, the text the
store embeds), so its vector is the record's, read from the store
(:meth:`~memfrontier.store.base.MemoryStore.record_vectors`); only a record the store holds no
vector for yet (a store being migrated) is encoded by the bank. Construction cost in USD is zero.

:func:`turn_view` gives every strategy reading one store the same :class:`TurnView`: one bank (one
copy of its in-memory indexes) and one record of which store generation each scope's items are in
line with, whichever configurations (``rag-turns``, ``rag-turns-rr``, ``auto``'s members) ask.
"""

from __future__ import annotations

import hashlib
import threading
import weakref

import numpy as np

from ..core.timeutil import day_times
from ..core.types import Record, Scope
from ..store.bank import BankItem, MemoryBank

BANK_NAME = "turns"
KIND = "turn"


def open_turn_bank(store) -> MemoryBank:
    """The turn bank among ``store``'s views (``store.view_dir("banks") / "turns.db"``).

    Raises:
        StoreError: the store has no directory, or the bank was built with another embedding model.
    """
    return MemoryBank.for_store(store, BANK_NAME)


class TurnView:
    """The turn view of one store: its bank and, per scope, the store's write counter
    (:meth:`~memfrontier.store.base.MemoryStore.scope_generation`) its items are in line with.
    Thread-safe: one sync at a time; a scope whose records did not change costs one counter read."""

    def __init__(self, store):
        self.bank = open_turn_bank(store)
        self._lock = threading.Lock()
        self._synced: dict[str, int] = {}  # scope key -> scope generation the items are in line with

    def current(self, store, scope: Scope) -> MemoryBank:
        """The bank, first brought in line with ``store``'s records of ``scope`` (:func:`build_turns`:
        new turns embedded, changed or deleted ones gone) when the store was written in that scope
        since it last was."""
        gen = store.scope_generation(scope)
        key = scope.key()
        if self._synced.get(key) == gen:
            return self.bank
        with self._lock:
            if self._synced.get(key) != gen:
                build_turns(self.bank, store, scope)
                self._synced[key] = gen
        return self.bank


_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_VIEWS_LOCK = threading.Lock()


def turn_view(store) -> TurnView:
    """The :class:`TurnView` of ``store``, one per store object while it lives (opened on first use).

    Raises:
        StoreError: as :func:`open_turn_bank`.
    """
    with _VIEWS_LOCK:
        view = _VIEWS.get(store)
        if view is None:
            view = _VIEWS[store] = TurnView(store)
        return view


def turn_item_id(record: Record, position: int, day_ts: str | None) -> str:
    """The turn item id of ``record`` at ``position`` in its session, dated ``day_ts``: ``"t-"`` + 24
    hex digits of sha256(scope key, record id, position, day time, rendered text)."""
    h = hashlib.sha256()
    for part in (record.scope.key(), record.id, str(position), day_ts or "", record.render()):
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    return "t-" + h.hexdigest()[:24]


def turn_items(records: list[Record]) -> list[BankItem]:
    """One :data:`KIND` item per record, sessions keeping the records' order (see the module docstring)."""
    sessions: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        sessions.setdefault((r.scope.key(), r.session_id), []).append(r)
    out = []
    for recs in sessions.values():
        for pos, (r, day_ts) in enumerate(zip(recs, day_times([r.timestamp for r in recs]))):
            out.append(
                BankItem(
                    id=turn_item_id(r, pos, day_ts),
                    kind=KIND,
                    scope=r.scope,
                    text=r.render(),
                    timestamp=day_ts,
                    source_ids=[r.id],
                    meta={"session_id": r.session_id, "position": pos},
                )
            )
    return out


def stored_vectors(store, items: list[BankItem]) -> dict[str, np.ndarray]:
    """The store's record vectors of turn ``items`` (item id -> float32 ``(dim,)``), read per exact
    scope (:meth:`~memfrontier.store.base.MemoryStore.record_vectors`). An item's text is its
    record's :meth:`Record.render` (:func:`turn_items`), the text the store embedded, so the vector
    is the one the bank would encode. The items of a scope with a record that has no stored vector
    (a store without record vectors, one being migrated, a record deleted since it was read) are
    left out: the bank encodes them."""
    reader = getattr(store, "record_vectors", None)
    if reader is None:
        return {}
    by_scope: dict[str, list[BankItem]] = {}
    for it in items:
        by_scope.setdefault(it.scope.key(), []).append(it)
    out: dict[str, np.ndarray] = {}
    for group in by_scope.values():
        try:
            vecs = reader(group[0].scope, [it.source_ids[0] for it in group])
        except KeyError:
            continue
        out.update(zip([it.id for it in group], vecs))
    return out


def build_turns(bank: MemoryBank, store, scope: Scope) -> dict[str, int]:
    """Bring the turn items of ``scope`` in line with the store's records: items of new or changed
    records added (with the store's record vectors, :func:`stored_vectors`: nothing encoded when
    it has them all), items of records gone removed, the rest kept; one :meth:`MemoryBank.apply`.
    Returns ``{"added", "removed", "kept", "encoded"}`` (``encoded``: added items the bank had to
    embed itself)."""
    want = {it.id: it for it in turn_items(store.records(scope)) if it.text.strip()}
    have = {it.id for it in bank.items(scope, KIND)}
    stale = sorted(have - set(want))
    todo = [it for i, it in want.items() if i not in have]
    given = stored_vectors(store, todo) if todo else {}
    if todo or stale:
        bank.apply(upsert=todo, delete_ids=stale, vectors=given)
    return {
        "added": len(todo),
        "removed": len(stale),
        "kept": len(have) - len(stale),
        "encoded": len(todo) - len(given),
    }


__all__ = [
    "BANK_NAME",
    "KIND",
    "TurnView",
    "build_turns",
    "open_turn_bank",
    "stored_vectors",
    "turn_item_id",
    "turn_items",
    "turn_view",
]

"""The turn view: one search unit per record (a chat turn), beside the store's ~256-token chunks.

A chunk packs about ten LoCoMo turns, so a reader handed the top chunks reads mostly turns that
do not answer the question. The turn view indexes each record on its own, in a
:class:`~memfrontier.store.bank.MemoryBank` named :data:`BANK_NAME` among the store's views
(``<store>/banks/turns.db``), searched with the raw-turn recipe
(:data:`~memfrontier.retrieve.recipes.TURNS_RRF`) by the shared hybrid search.

Each item: ``kind`` :data:`KIND`; ``text`` = :meth:`Record.render` (speaker, text, image captions,
as in a chunk); ``timestamp`` = the session's time (the earliest record timestamp of the session,
as a chunk's); ``source_ids`` = ``[record id]``; ``meta`` = ``{"session_id", "position"}`` (the
record's 0-based place in its session, chronological). Item ids derive from the scope, the record
id and the rendered text, so rebuilding adds nothing and a changed record gets a new item.
Building needs no model call: only the embedder (construction cost in USD is zero).
"""

from __future__ import annotations

import hashlib

from ..core.timeutil import instant_key
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


def turn_item_id(record: Record, position: int, session_ts: str | None) -> str:
    """The turn item id of ``record`` at ``position`` in a session of time ``session_ts``: ``"t-"`` +
    24 hex digits of sha256(scope key, record id, position, session time, rendered text)."""
    h = hashlib.sha256()
    for part in (record.scope.key(), record.id, str(position), session_ts or "", record.render()):
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
        session_ts = min((r.timestamp for r in recs if r.timestamp is not None), key=instant_key, default=None)
        for pos, r in enumerate(recs):
            out.append(
                BankItem(
                    id=turn_item_id(r, pos, session_ts),
                    kind=KIND,
                    scope=r.scope,
                    text=r.render(),
                    timestamp=session_ts,
                    source_ids=[r.id],
                    meta={"session_id": r.session_id, "position": pos},
                )
            )
    return out


def build_turns(bank: MemoryBank, store, scope: Scope) -> dict[str, int]:
    """Bring the turn items of ``scope`` in line with the store's records: items of new or changed
    records added (embedded), items of records gone removed, the rest kept; one
    :meth:`MemoryBank.apply`. Returns ``{"added", "removed", "kept"}``."""
    want = {it.id: it for it in turn_items(store.records(scope)) if it.text.strip()}
    have = {it.id for it in bank.items(scope, KIND)}
    stale = sorted(have - set(want))
    todo = [it for i, it in want.items() if i not in have]
    if todo or stale:
        bank.apply(upsert=todo, delete_ids=stale)
    return {"added": len(todo), "removed": len(stale), "kept": len(have) - len(stale)}


__all__ = ["BANK_NAME", "KIND", "build_turns", "open_turn_bank", "turn_item_id", "turn_items"]

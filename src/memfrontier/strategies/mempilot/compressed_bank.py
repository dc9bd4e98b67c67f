"""MemPilot's compressed memory bank M: query-agnostic items with their own dense index.

The bank is a :class:`~memfrontier.store.bank.MemoryBank` named :data:`BANK_NAME` inside the
store's directory (``<store>/banks/mempilot.db``): its own SQLite file and its own L2-normalised
MiniLM vectors, searched by exact cosine over the in-scope items, independent of the raw view's
index in the store (MemPilot App. A.4: separate dense indexes for the two views). Search is
dense only: ``hybrid_search(bank, query, scope, MEMPILOT_BANK, k)``, the hit score being the
cosine.

Each item has ``kind`` ``compressed`` or ``imported`` (:data:`KINDS`; the two are kept apart and a
search reads one of them), ``source_ids`` = the raw record ids it came from, ``timestamp`` = the
session time, and ``meta`` = ``{"chunk_id", "source", "image_ids"}`` (``source`` is
``compress:<compressor name>`` or ``import:<file name>``; ``chunk_id`` is None for imports;
``image_ids`` are the image ids the text mentions). Items come from :func:`build_from_store` (one
item per raw chunk, compressed with a :class:`~memfrontier.strategies.mempilot.compress.Compressor`; idempotent,
rebuilt only for changed chunks) or from :func:`import_jsonl` (another memory system's output,
MemPilot Sec. 4.6 "memory-bank compatibility").
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ...core.jsonio import read_jsonl_objects
from ...core.types import Scope
from ...store.bank import BankItem, MemoryBank
from .compress import Compressor, compressed_views

BANK_NAME = "mempilot"
KINDS: tuple[str, ...] = ("compressed", "imported")


def open_bank(store) -> MemoryBank:
    """MemPilot's bank among ``store``'s views (``store.view_dir("banks") / "mempilot.db"``).

    Raises:
        StoreError: the store has no directory, or the bank was built with another embedding model.
    """
    return MemoryBank.for_store(store, BANK_NAME)


def build_from_store(bank: MemoryBank, store, scope: Scope, compressor: Compressor) -> dict[str, int]:
    """Compress every raw chunk of ``scope`` into one ``compressed`` item (MemPilot App. A.4).

    Items of chunks that no longer exist (or were built by another compressor) are removed;
    existing items (same chunk, same compressor) are kept; additions and removals are one
    :meth:`MemoryBank.apply`. The session date is prefixed verbatim (``date: YYYY-MM-DD``), like
    the image ids. Returns ``{"added", "removed", "kept"}``.
    """
    chunks = store.chunks(scope)
    source = f"compress:{compressor.name}"
    want = {("b-" + hashlib.sha256(f"{ch.id}\x1f{source}".encode()).hexdigest()[:24]): ch for ch in chunks}
    have = {it.id for it in bank.items(scope, "compressed")}
    stale = sorted(have - set(want))
    todo = [(i, ch) for i, ch in want.items() if i not in have]
    items: list[BankItem] = []
    if todo:
        recs = {(r.scope, r.id): r for r in store.get([rid for _, ch in todo for rid in ch.record_ids], scope)}
        groups = [[recs[(ch.scope, rid)] for rid in ch.record_ids if (ch.scope, rid) in recs] for _, ch in todo]
        texts = compressed_views(groups, compressor)
        for (iid, ch), recs_of, text in zip(todo, groups, texts):
            if ch.timestamp:  # the session date is metadata, kept verbatim like image ids
                text = f"date: {ch.timestamp[:10]}\n{text}"
            items.append(
                BankItem(
                    id=iid,
                    kind="compressed",
                    scope=ch.scope,
                    text=text,
                    timestamp=ch.timestamp,
                    source_ids=list(ch.record_ids),
                    meta={
                        "chunk_id": ch.id,
                        "source": source,
                        "image_ids": [im.id for r in recs_of for im in r.images],
                    },
                )
            )
    if items or stale:
        bank.apply(items, stale)
    return {"added": len(items), "removed": len(stale), "kept": len(have) - len(stale)}


def import_jsonl(bank: MemoryBank, path: str | Path, scope: Scope | None = None, *, only_scope: bool = False) -> int:
    """Replace the imported items of each scope found in ``path`` with the file's; returns how many.
    Imported items are searched with ``kind="imported"``; the compressed items stay as they are.

    Each line is a JSON object with a non-empty string ``text`` and optionally ``id``,
    ``user_id`` / ``agent_id`` / ``run_id`` (else ``scope``'s), ``record_ids``, ``image_ids``,
    ``timestamp``. With ``only_scope``, lines of other scopes are skipped (lines without ids
    belong to ``scope``). The whole file is checked first: a bad line raises ValueError naming
    ``file:line`` and nothing is written. FileNotFoundError when the file is missing.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no bank file {p}")
    base = scope or Scope()
    items: list[BankItem] = []
    for n, obj in read_jsonl_objects(p):
        if not isinstance(obj.get("text"), str) or not obj["text"].strip():
            raise ValueError(f"{p}:{n}: each line must be a JSON object with a non-empty string 'text'")
        sc = Scope(
            **{
                k: (str(obj[k]) if obj.get(k) is not None else getattr(base, k))
                for k in ("user_id", "agent_id", "run_id")
            }
        )
        if sc == Scope():
            raise ValueError(f"{p}:{n}: no scope: give user_id/agent_id/run_id in the line or a default scope")
        if only_scope and sc != base:
            continue
        for k in ("record_ids", "image_ids"):
            if k in obj and not (isinstance(obj[k], list) and all(isinstance(x, str) for x in obj[k])):
                raise ValueError(f"{p}:{n}: {k} must be a list of strings")
        iid = str(
            obj.get("id") or "i-" + hashlib.sha256(f"{sc.key()}\x1f{n}\x1f{obj['text']}".encode()).hexdigest()[:24]
        )
        items.append(
            BankItem(
                id=iid,
                kind="imported",
                scope=sc,
                text=obj["text"].strip(),
                timestamp=obj.get("timestamp"),
                source_ids=obj.get("record_ids", []),
                meta={"chunk_id": None, "source": f"import:{p.name}", "image_ids": obj.get("image_ids", [])},
            )
        )
    scopes = {it.scope.key(): it.scope for it in items}
    old = sorted({it.id for sc in scopes.values() for it in bank.items(sc, "imported")})
    bank.apply(items, old)
    return len(items)


__all__ = ["BANK_NAME", "KINDS", "build_from_store", "import_jsonl", "open_bank"]

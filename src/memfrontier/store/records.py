"""What both stores (SQLite, PostgreSQL) do the same way with records, apart from SQL: the
records row layout, checking an ``add`` batch, a scope's rows in a table keyed by the scope key
(:func:`scope_key_where`), conflicts, an ``add``'s result, embedding and token counting through the
store's embedder, a chunk's vector derived from its records' (:func:`chunk_vector`), the embedder-mismatch message, view folders, and the purge intent a delete
writes (:mod:`.purge` carries it out)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..core.errors import RecordConflictError, StoreError
from ..core.files import private_dir
from ..core.text import check_id, clean_text, require_non_blank
from ..core.types import ImageRef, Record, Scope
from .base import AddProgress, AddResult

#: The columns of the ``records`` table, in the order :func:`record_row` gives their values (both stores).
RECORD_COLUMNS = (
    "id, kind, scope_key, user_id, agent_id, run_id, scope_json, session_id, speaker, role, timestamp, text, "
    "images_json, step_index, action, observation, meta_json, n_tokens"
)


def record_row(r: Record, scope_key: str, n_tokens: int) -> tuple:
    """The values of :data:`RECORD_COLUMNS` for record ``r``: the row both stores insert."""
    return (
        r.id,
        r.kind,
        scope_key,
        r.scope.user_id,
        r.scope.agent_id,
        r.scope.run_id,
        r.scope.model_dump_json(),
        r.session_id,
        r.speaker,
        r.role,
        r.timestamp,
        r.text,
        json.dumps([im.model_dump() for im in r.images], ensure_ascii=False),
        r.step_index,
        r.action,
        r.observation,
        json.dumps(r.meta, ensure_ascii=False),
        n_tokens,
    )


def row_to_record(row) -> Record:
    """A ``records`` row in the stores' column order (seq, id, kind, scope_json, session_id, speaker,
    role, timestamp, text, images_json, step_index, action, observation, meta_json, n_tokens)."""
    (
        _seq,
        rid,
        kind,
        scope_json,
        session_id,
        speaker,
        role,
        ts,
        text,
        images_json,
        step_index,
        action,
        observation,
        meta_json,
        _n,
    ) = row
    return Record(
        id=rid,
        kind=kind,
        scope=Scope(**json.loads(scope_json)),
        session_id=session_id,
        speaker=speaker,
        role=role,
        timestamp=ts,
        text=text,
        images=[ImageRef(**im) for im in json.loads(images_json)],
        step_index=step_index,
        action=action,
        observation=observation,
        meta=json.loads(meta_json),
    )


def is_empty(r: Record) -> bool:
    """No text, images, action or observation: nothing a retriever or reader could see."""
    return not r.text.strip() and not r.images and not (r.action or r.observation)


def check_conflicts(uniq: dict[tuple[str, str], Record], present: dict[tuple[str, str], Record]) -> None:
    """Raise :class:`RecordConflictError` when a (scope key, id) of ``uniq`` is in ``present`` with
    other content (a record is never overwritten silently)."""
    clash = [r.id for k, r in uniq.items() if k in present and present[k] != r]
    if clash:
        raise RecordConflictError(
            f"record id(s) {clash[:5]!r}{' ...' if len(clash) > 5 else ''} already exist in this scope with other "
            f"content; a record is never overwritten silently: delete it first or give the new one another id "
            f"(nothing of this batch was written)"
        )


#: Longest scope key (:meth:`Scope.key() <memfrontier.core.types.Scope.key>`, UTF-8 bytes) and
#: longest record id or session id (UTF-8 bytes) a store accepts. They are btree keys in the
#: PostgreSQL store (``records (scope_key, id)``, ``(scope_key, session_id)``; the scope columns of
#: every BM25 posting), whose entries must stay
#: under 2704 bytes; both stores refuse the same records. A key is the scope's three ids JSON-encoded
#: with non-ASCII characters escaped (``\uXXXX``, 6 bytes, 12 outside the BMP): three ASCII ids of
#: 300 characters fit.
MAX_KEY_BYTES = 1024
MAX_ID_BYTES = 1024


def _check_sizes(r: Record) -> None:
    """ValueError naming the field and the limit when ``r``'s scope key, id or session id is too long."""
    n_key = len(r.scope.key().encode("utf-8"))
    if n_key > MAX_KEY_BYTES:
        raise ValueError(
            f"record {r.id[:80]!r}: its scope key (user_id, agent_id, run_id JSON-encoded, non-ASCII "
            f"escaped as \\uXXXX) is {n_key} bytes, over the limit of {MAX_KEY_BYTES} bytes; use shorter "
            f"scope ids (nothing of this batch was written)"
        )
    for field, value in (("id", r.id), ("session_id", r.session_id)):
        n = len(value.encode("utf-8"))
        if n > MAX_ID_BYTES:
            raise ValueError(
                f"record {r.id[:80]!r}: its {field} is {n} bytes (UTF-8), over the limit of "
                f"{MAX_ID_BYTES} bytes (nothing of this batch was written)"
            )


def _check_fields(r: Record) -> None:
    """ValueError naming the field when a string of ``r`` cannot be stored alike by both stores: an id,
    scope id or session id holding NUL (U+0000) or a lone surrogate, or a blank id, session id or
    role, or NUL in a text field. :class:`Record`'s validators refuse or replace these; this catches
    a record changed after it was made (``r.text = ...`` is not validated)."""
    where = f"record {r.id[:80]!r}: its"
    check_id(r.id, f"{where} id")
    check_id(r.session_id, f"{where} session_id")
    require_non_blank(r.role, f"{where} role")
    for field in ("user_id", "agent_id", "run_id"):
        value = getattr(r.scope, field)
        if value is not None:
            check_id(value, f"{where} {field}")
    texts = [("text", r.text), ("speaker", r.speaker), ("role", r.role), ("timestamp", r.timestamp)]
    texts += [("action", r.action), ("observation", r.observation)]
    for field, value in texts + [("image caption", im.caption) for im in r.images]:
        if value is not None and clean_text(value) != value:
            raise ValueError(
                f"{where} {field} holds a NUL, a lone surrogate or text not in NFC (set it through Record)"
            )


def lookup_ids(ids: list[str], what: str = "record id") -> list[str]:
    """``ids`` of a lookup (get, delete) unchanged; ValueError naming ``what`` for one holding NUL
    (U+0000) or a lone surrogate, which no stored id holds (:func:`~memfrontier.core.text.check_id`),
    so both stores answer it the same."""
    return [check_id(i, what, blank_ok=True) for i in ids]


def checked_batch(records) -> tuple[list[Record], dict[tuple[str, str], Record]]:
    """``(records, {(scope key, id): first record})`` of an ``add`` batch, checked before any write.

    Raises:
        TypeError: an element is not a :class:`Record`.
        ValueError: a record is empty (see :func:`is_empty`), its scope key, id or session id is
            longer than :data:`MAX_KEY_BYTES` / :data:`MAX_ID_BYTES` bytes (UTF-8), or a field cannot
            be stored alike by both stores (:func:`_check_fields`); the message names the field.
        RecordConflictError: one (scope, id) twice in the batch with different content.
    """
    records = list(records)
    for r in records:
        if not isinstance(r, Record):
            raise TypeError(f"add() takes Record objects, got {type(r).__name__}")
        if is_empty(r):
            raise ValueError(f"record {r.id!r} has empty text and no images; nothing of this batch was written")
        _check_fields(r)
        _check_sizes(r)
    uniq: dict[tuple[str, str], Record] = {}
    twice = []
    for r in records:
        first = uniq.setdefault((r.scope.key(), r.id), r)
        if first != r:
            twice.append(r.id)
    if twice:
        raise RecordConflictError(
            f"record id(s) {twice[:5]!r}{' ...' if len(twice) > 5 else ''} appear twice in this batch with "
            f"different content; give each record its own id (nothing of this batch was written)"
        )
    return records, uniq


def add_result(
    records: list[Record],
    uniq: dict[tuple[str, str], Record],
    added_keys: set[tuple[str, str]],
    built: int,
    embedded: int,
    records_embedded: int = 0,
) -> AddResult:
    """The :class:`~memfrontier.store.base.AddResult` of an ``add`` of ``records`` (``uniq``: the
    first record per (scope key, id), :func:`checked_batch`) that inserted ``added_keys``: added ids
    in batch order; skipped ids, those already stored and then each repeat of a (scope, id) inside
    the batch; ``built`` chunks (re)built, ``embedded`` chunk vectors written (derived) and
    ``records_embedded`` record texts encoded."""
    skipped = [r.id for k, r in uniq.items() if k not in added_keys]
    seen: set[tuple[str, str]] = set()
    for r in records:  # repeated (scope, id) pairs inside the batch count as skipped too
        k = (r.scope.key(), r.id)
        if k in seen:
            skipped.append(r.id)
        seen.add(k)
    return AddResult(
        added=[r.id for k, r in uniq.items() if k in added_keys],
        skipped=skipped,
        chunks_built=built,
        chunks_embedded=embedded,
        records_embedded=records_embedded,
    )


def encode(embedder, texts: list[str], on_batch: Callable[[list[int]], None] | None = None) -> np.ndarray:
    """float32 ``(len(texts), dim)`` vectors; raises StoreError when the embedder returns another shape.

    Without ``on_batch``: one ``embedder.encode`` call. With it: texts are encoded in slices of
    the embedder's ``batch_size`` (64 if it has none), longest first, so each slice is one of the
    batches the embedder would have made of the whole list itself (sentence-transformers sorts by
    length, longest first); after each slice ``on_batch(positions)`` gets the positions in
    ``texts`` just encoded. The vectors are returned in ``texts`` order either way."""
    dim = int(embedder.dim)
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    if on_batch is None:
        return _encoded(embedder, list(texts), dim)
    size = max(1, int(getattr(embedder, "batch_size", 64)))
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vecs = np.empty((len(texts), dim), dtype=np.float32)
    for start in range(0, len(order), size):
        part = order[start : start + size]
        vecs[part] = _encoded(embedder, [texts[i] for i in part], dim)
        on_batch(part)
    return vecs


def _encoded(embedder, texts: list[str], dim: int) -> np.ndarray:
    vecs = np.asarray(embedder.encode(texts), dtype=np.float32)
    if vecs.shape != (len(texts), dim):
        raise StoreError(f"embedder {embedder.model_id!r} returned shape {vecs.shape}, expected {(len(texts), dim)}")
    return vecs


def encode_texts(embedder, texts: list[str], progress: AddProgress | None = None) -> np.ndarray:
    """Vectors of ``texts`` (:func:`encode`), float32 ``(len(texts), dim)``, reporting
    ``progress(texts done, texts total)`` once before the first batch and after each one (the
    embedder's own batches, longest first); with ``progress`` None, one encode call and no report.
    An ``add`` passes the rendered records it inserts (:meth:`Record.render`): one text per record."""
    if progress is None or not texts:
        return encode(embedder, texts)
    total, done = len(texts), 0
    progress(0, total)

    def on_batch(positions: list[int]) -> None:
        nonlocal done
        done += len(positions)
        progress(done, total)

    return encode(embedder, texts, on_batch)


# -- chunk vectors derived from record vectors -------------------------------------------------
#
# Each record is embedded once, when it is added (the embedding of ``Record.render()``, the text a
# chunk joins); a chunk's vector is derived from its records' vectors, never encoded, so adding a
# turn to a session's open chunk costs one encode of that turn instead of the whole chunk's again.
# Source: docs/architecture.md ("Vectors") and the lab note in docs/changelog.md ("chunk vectors derived from their turns' vectors": on LoCoMo, evidence
# recall of rag-k4 / rag-k8 / rag-turns-rr held within 0.01 of the encoded chunk vectors).

#: What ``meta`` records (key ``chunk_vectors``) once every chunk vector of a store is
#: :func:`chunk_vector` of its records' vectors (both stores); a store without it is migrated on open.
CHUNK_VECTORS = "record-mean-v1"


def token_window(embedder) -> int:
    """Word pieces of a text the embedder reads, special tokens excluded: its ``max_seq_length``
    less [CLS] and [SEP] (254 for all-MiniLM-L6-v2, which reads 256); 254 for an embedder that
    does not say."""
    return max(1, int(getattr(embedder, "max_seq_length", 256)) - 2)


def chunk_vector(vectors: np.ndarray, n_tokens, window: int) -> np.ndarray:
    """A chunk's vector from its records' vectors: the L2-normalised, token-weighted mean.

    Args:
        vectors: float32 ``(k, dim)``, ``k >= 1``: the records' unit vectors, in chunk order.
        n_tokens: ``k`` ints, each record's retriever tokens (``count_tokens(render())``, the
            ``n_tokens`` a store keeps). A record weighs ``min(max(n, 1), window)``: the encoder
            read at most ``window`` of its word pieces (:func:`token_window`).
        window: the encoder's window in word pieces (254 for all-MiniLM-L6-v2).

    Returns:
        float32 ``(dim,)`` of unit length; for one record (a chunk of one record, e.g. one that
        alone exceeds the window) its own vector, unchanged. A zero mean (opposite vectors) is
        returned as is (cosine 0 with any query).

    Raises:
        ValueError: no vectors, or ``len(n_tokens) != k``.

    Source: docs/architecture.md ("Vectors") and the changelog's lab note (see the comment above); equal
    weights per token of what the encoder read, which is what mean pooling over one encoding of
    the joined text would weigh, bar the attention across records.
    """
    vecs = np.asarray(vectors, dtype=np.float32)
    if vecs.ndim != 2 or len(vecs) == 0 or len(vecs) != len(n_tokens):
        raise ValueError(f"chunk_vector takes k >= 1 vectors and k token counts, got {vecs.shape} and {len(n_tokens)}")
    if len(vecs) == 1:
        return vecs[0].copy()
    w = np.clip(np.asarray(n_tokens, dtype=np.float64), 1, max(1, int(window)))
    mean = (w[:, None] * vecs.astype(np.float64)).sum(axis=0)
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm > 0 else mean).astype(np.float32)


def vector_blob(v: np.ndarray) -> bytes:
    """A vector as both stores keep a record's: float32 little-endian bytes."""
    return np.asarray(v, dtype="<f4").tobytes()


def blob_vector(blob: bytes, dim: int, what: str) -> np.ndarray:
    """The float32 ``(dim,)`` vector of :func:`vector_blob`'s bytes; StoreError naming ``what``
    when the length is not ``dim`` floats (another model's vector)."""
    if blob is None or len(blob) != 4 * int(dim):
        raise StoreError(f"{what} has no vector of dim {dim}; reopen the store with reembed=True")
    return np.frombuffer(bytes(blob), dtype="<f4").astype(np.float32)


def count_tokens_many(embedder, texts: list[str]) -> list[int]:
    """Retriever tokens of each text (the embedder's batch counter when it has one)."""
    batch = getattr(embedder, "count_tokens_batch", None)
    if batch is not None and texts:
        return [int(n) for n in batch(texts)]
    return [int(embedder.count_tokens(t)) for t in texts]


def embedding_mismatch(store_name: str, meta: dict[str, str], embedder) -> str | None:
    """The message when the store's recorded embedding model or dimension differs from ``embedder``; else None."""
    mid, dim = meta.get("embedding_model_id"), meta.get("embedding_dim")
    if mid is None or (mid == embedder.model_id and int(dim) == int(embedder.dim)):
        return None
    return (
        f"store {store_name} was built with embedding model {mid!r} (dim {dim}), but the configured "
        f"embedder is {embedder.model_id!r} (dim {embedder.dim}); open it with the same "
        f"model, or with reembed=True to re-embed every record (and derive every chunk's vector again)"
    )


class Presence:
    """Whether a file or folder a handle opened is still the one at its path: its (device, inode)
    is remembered (:meth:`remember`) and compared before each write (:meth:`check`), so a write
    through a handle whose store directory was removed (or replaced) fails instead of being
    acknowledged and lost."""

    def __init__(self, path: Path, what: str):
        self.path, self.what = Path(path), what
        self._id: tuple[int, int] | None = None

    def remember(self) -> None:
        """Record the identity of what is at the path now (nothing when absent)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        self._id = (st.st_dev, st.st_ino)

    @property
    def known(self) -> bool:
        return self._id is not None

    def check(self) -> None:
        """Raises StoreError when the remembered file is no longer at the path (removed, or
        replaced by another); nothing when none was remembered."""
        if self._id is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreError(
                f"{self.what} {self.path} is gone (removed since it was opened); nothing was written"
            ) from None
        if (st.st_dev, st.st_ino) != self._id:
            raise StoreError(f"{self.what} {self.path} was replaced since it was opened; nothing was written")


def view_folder(directory: Path, name: str) -> Path:
    """``directory / name``, created if missing (0700, :func:`private_dir`). Raises ValueError unless ``name`` is ``[A-Za-z0-9_-]+``."""
    if not name or not all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in name):
        raise ValueError(f"view name must match [A-Za-z0-9_-]+, got {name!r}")
    return private_dir(Path(directory) / name)


def purge_intent(rows, whole: Scope | None) -> str:
    """The JSON purge intent of a delete: the deleted ``(record id, scope key, session id,
    scope_json)`` rows grouped by scope, and ``whole`` (the scope of a ``delete_all``) or None."""
    by_scope: dict[str, list[str]] = {}
    for rid, _key, _sid, scope_json in rows:
        by_scope.setdefault(scope_json, []).append(rid)
    intent = {
        "scope": whole.model_dump() if whole is not None else None,
        "records": [[json.loads(sj), sorted(ids)] for sj, ids in sorted(by_scope.items())],
    }
    return json.dumps(intent, ensure_ascii=False)


def scope_key_where(scope: Scope) -> tuple[str, list]:
    """``(SQL condition, params)`` selecting, in SQLite, the rows of a table keyed by ``scope_key``
    (:meth:`~memfrontier.core.types.Scope.key`, the JSON array ``[user, agent, run]``) inside a
    search ``scope`` (``None`` fields match anything; ``TRUE`` when every field is ``None``): the
    key itself when every id is set (one indexed read), a range of an index on ``scope_key`` when
    the user id is (the keys that start ``["<user>",``: the user id is closed by its quote, so no
    other user's keys fall in it), and ``json_extract`` of the other ids set."""
    if None not in (scope.user_id, scope.agent_id, scope.run_id):
        return "scope_key = ?", [scope.key()]
    conds, params = [], []
    if scope.user_id is not None:
        lo = json.dumps([scope.user_id], ensure_ascii=True)[:-1] + ","
        conds.append("scope_key >= ? AND scope_key < ?")
        params += [lo, lo[:-1] + chr(ord(",") + 1)]
    for i, v in ((1, scope.agent_id), (2, scope.run_id)):
        if v is not None:
            conds.append(f"json_extract(scope_key, '$[{i}]') = ?")
            params.append(v)
    return " AND ".join(conds) or "TRUE", params

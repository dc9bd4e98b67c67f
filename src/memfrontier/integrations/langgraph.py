"""A LangGraph store whose items live in a memfrontier memory (``pip install 'memfrontier[langgraph]'``).

>>> from memfrontier import Memory
>>> from memfrontier.integrations.langgraph import MemfrontierStore
>>> store = MemfrontierStore(Memory.open("mem/"))                                 # doctest: +SKIP
>>> graph = builder.compile(checkpointer=InMemorySaver(), store=store)            # doctest: +SKIP

:class:`MemfrontierStore` implements ``langgraph.store.base.BaseStore`` (``batch`` / ``abatch`` over
``GetOp``, ``PutOp``, ``SearchOp``, ``ListNamespacesOp``) on the facade's verbs only (``add``,
``search``, ``records``, ``delete``); every item is one :class:`~memfrontier.core.types.Record`, so
what a graph stores is also what ``Memory.search`` / ``recall`` / ``ask`` read for that scope.

**Namespace -> scope.** A namespace is ``(KIND, ID, *rest)``:

=================================  ==========================================================
``("users", ID, *rest)``           ``user_id=ID``
``("agents", ID, *rest)``          ``agent_id=ID``
``("runs", ID, *rest)``            ``run_id=ID``
item ``key`` in ``(KIND, ID,       record id and session id :func:`item_id`: the JSON array
*rest)``                           ``[*rest, key]`` (ASCII, no spaces), e.g. ``["prefs","theme"]``
the value, the namespace, the      ``Record.meta["langgraph"]``: ``namespace`` (list), ``key``,
times                              ``value`` (JSON), ``indexed``, ``fields``, ``created_at`` and
                                   ``updated_at`` (ISO-8601, UTC)
=================================  ==========================================================

Any other namespace (``("memories",)``, ``("users",)``, ``("teams", "x")``) is refused with
:class:`InvalidNamespaceError` (a ValueError) naming this mapping; so is a search or a namespace
listing whose prefix does not name a scope (``("users",)``, ``()``, a ``"*"`` in its first two
labels): the scope is a security boundary, and there is no listing across tenants. Record ids are
unique per scope, so the id holds the rest of the namespace as well as the key (JSON: injective,
and always a valid identifier); it is also the record's session, so each item is its own chunk and
a search scores items one by one (a session of several items would be packed into shared ~256-token
chunks that score together). An item's record is read back only from its exact scope (a user's
records under some agent or run id, added by other means, are never items).

**Text.** What is embedded and BM25-indexed (the record's ``text``): the value's fields named by the
put's ``index`` (a list of LangGraph paths: ``"text"``, ``"a.b"``, ``"l[*].c"``; ``"$"`` is the whole
value), else those of the store's ``index={"fields": [...]}``, each field's text on its own line;
with no fields named, the value's ``"text"`` or else ``"content"`` field when it is a non-blank
string, else the whole value as compact JSON with sorted keys. ``index=False`` (or fields that hold
no text): the item is stored under the placeholder text :data:`UNINDEXED_TEXT` (its value is never
embedded) and a search with a query never returns it; ``get``, a search without a query and
``list_namespaces`` do.

**Put** of an existing key deletes its record, then adds the new one: two steps, not one
transaction (a failure between them loses the item; ``created_at`` is kept from the old one). A
value of None deletes. **Search** with a query runs the facade's ``search`` over the scope and maps
each hit's chunk to its records under the prefix that pass the filter, scored by the hit's fused
(RRF) score, best first; it asks for ``k = max(10, 2 * (offset + limit))`` hits and, while fewer
than ``offset + limit`` items passed and the search returned all ``k`` asked for, asks again with
``k`` four times larger. Without a query: the scope's items under the prefix that pass the filter,
latest ``updated_at`` first, ``score`` None. Filters: ``{field: value}`` (equality; a dict value
matches the nested fields it names) and ``{field: {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": value}}``
(ordering compares two numbers or two strings, else does not match; a missing field matches only
``$ne``). The search asks the facade not to fold near-duplicates (``fold=False``): two items whose
texts repeat each other are two items.

A search without a query and a namespace listing read every record of the scope (``records``).
TTL is not supported (``supports_ttl`` is False: a put with a ``ttl`` raises NotImplementedError).
``batch`` checks every op before it runs the first, then runs them in order; it needs a
:class:`~memfrontier.api.Memory` (given an :class:`~memfrontier.api.AsyncMemory`, use ``abatch`` and
the ``a*`` methods).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from ..api import AsyncMemory, Memory
from ..core.extras import require_extra
from ..core.text import check_id
from ..core.timeutil import canonical_timestamp, utc_now
from ..core.types import Record, Scope

require_extra("langgraph", "langgraph.store", feature="memfrontier.integrations.langgraph")

from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
)

try:  # recent langgraph-checkpoint releases check the labels of an op given to batch directly
    from langgraph.store.base import validate_op_namespace
except ImportError:  # older: the BaseStore methods check them; items are keyed by JSON, so any label is safe

    def validate_op_namespace(op) -> None:
        return None


#: A namespace's first label -> the scope field its second label fills.
NAMESPACE_KINDS: dict[str, str] = {"users": "user_id", "agents": "agent_id", "runs": "run_id"}
#: The ``Record.meta`` key that holds an item (its namespace, key, value and times).
META_KEY = "langgraph"
#: The text of an item put with ``index=False`` (or whose index fields hold no text).
UNINDEXED_TEXT = "(LangGraph item, not indexed)"
#: The filter operators a search accepts.
FILTER_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")

_MAPPING = (
    "a memfrontier namespace is (KIND, ID, *rest) with KIND 'users' (user_id=ID), 'agents' (agent_id=ID) "
    "or 'runs' (run_id=ID)"
)
_MISSING = object()


def namespace_scope(namespace, what: str = "namespace") -> tuple[Scope, tuple[str, ...]]:
    """``(scope, rest)`` of ``namespace`` = ``(KIND, ID, *rest)`` (see the module docstring): the
    :class:`~memfrontier.core.types.Scope` with the one id ``KIND`` names, and the labels after ``ID``.
    Raises InvalidNamespaceError (a ValueError) naming ``what`` and the mapping for any other shape,
    and for an ``ID`` that is no identifier (blank, a NUL)."""
    if not isinstance(namespace, (tuple, list)) or not all(isinstance(label, str) for label in namespace):
        raise InvalidNamespaceError(f"{what} must be a tuple of strings, got {namespace!r}; {_MAPPING}")
    ns = tuple(namespace)
    if len(ns) < 2 or ns[0] not in NAMESPACE_KINDS:
        raise InvalidNamespaceError(f"{what} {ns!r} names no scope: {_MAPPING}")
    field = NAMESPACE_KINDS[ns[0]]
    try:
        scope_id = check_id(ns[1], f"{what}[1] ({field})")
    except ValueError as e:
        raise InvalidNamespaceError(f"{e}; {_MAPPING}") from None
    return Scope(**{field: scope_id}), ns[2:]


def item_id(namespace, key: str) -> str:
    """The record id (and session id) of item ``key`` in ``namespace``: the JSON array of the labels
    after the scope's and the key, ASCII, without spaces (``("users", "ana", "prefs")``, ``"theme"``
    -> ``["prefs","theme"]``). Injective for a scope; raises as :func:`namespace_scope`, and
    ValueError for a ``key`` that is not a string."""
    _, rest = namespace_scope(namespace)
    return _item_id(rest, _checked_key(key))


def _item_id(rest: tuple[str, ...], key: str) -> str:
    return json.dumps([*rest, key], ensure_ascii=True, separators=(",", ":"))


def _checked_key(key) -> str:
    if not isinstance(key, str):
        raise ValueError(f"key must be a string, got {type(key).__name__}")
    return key


def _scope_kwargs(scope: Scope) -> dict[str, str]:
    return {f: v for f, v in scope.model_dump().items() if v is not None}


def _prefix_scope(prefix, what: str) -> tuple[Scope, tuple[str, ...]]:
    """The scope a search or listing ``prefix`` names (its first two labels, no wildcard there)."""
    if isinstance(prefix, (tuple, list)) and len(prefix) >= 2 and "*" in tuple(prefix[:2]):
        raise InvalidNamespaceError(
            f"{what} {tuple(prefix)!r} has a wildcard where the scope is named: there is no listing across "
            f"scopes; {_MAPPING}"
        )
    return namespace_scope(prefix, what)


def _compact_json(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _json_value(value, what: str):
    """``value`` as plain JSON (a tuple becomes a list); ValueError naming ``what`` when it cannot be
    stored (not JSON, NaN, a lone surrogate)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        raise ValueError(f"{what} must be JSON (dicts, lists, strings, finite numbers, booleans, None): {e}") from None
    return json.loads(text)


def _checked_fields(fields, what: str) -> list[str]:
    if not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) and f.strip() for f in fields):
        raise ValueError(f"{what} must be a list of field paths (non-blank strings), got {fields!r}")
    return list(fields)


def _checked_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _checked_filter(flt) -> dict | None:
    """The search filter as plain JSON; ValueError naming an unknown operator or a bad shape."""
    if flt is None:
        return None
    if not isinstance(flt, Mapping) or not all(isinstance(k, str) for k in flt):
        raise ValueError(f"filter must be a dict of field names to conditions, got {flt!r}")
    flt = _json_value(dict(flt), "filter")

    def check(cond, where: str) -> None:
        if not isinstance(cond, dict):
            return
        ops = [k for k in cond if k.startswith("$")]
        if ops and len(ops) != len(cond):
            raise ValueError(f"filter {where}: operators ($...) and field names may not be mixed")
        for k, v in cond.items():
            if ops and k not in FILTER_OPERATORS:
                raise ValueError(f"filter {where}: unknown operator {k!r} (use {', '.join(FILTER_OPERATORS)})")
            if not ops:
                check(v, f"{where}.{k}")

    for k, v in flt.items():
        check(v, repr(k))
    return flt


def _same(a, b) -> bool:
    """JSON equality: a boolean equals only a boolean, numbers compare by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _compare(actual, op: str, operand) -> bool:
    if op == "$ne":
        return actual is _MISSING or not _same(actual, operand)
    if actual is _MISSING:
        return False
    if op == "$eq":
        return _same(actual, operand)
    if not ((_number(actual) and _number(operand)) or (isinstance(actual, str) and isinstance(operand, str))):
        return False
    if op == "$gt":
        return actual > operand
    if op == "$gte":
        return actual >= operand
    if op == "$lt":
        return actual < operand
    return actual <= operand


def _matches(actual, cond) -> bool:
    if isinstance(cond, dict):
        if cond and all(k.startswith("$") for k in cond):
            return all(_compare(actual, op, operand) for op, operand in cond.items())
        return isinstance(actual, dict) and all(_matches(actual.get(k, _MISSING), v) for k, v in cond.items())
    return actual is not _MISSING and _same(actual, cond)


def _passes(value: dict, flt: dict | None) -> bool:
    return flt is None or all(_matches(value.get(k, _MISSING), cond) for k, cond in flt.items())


def _label_match(labels: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return all(p == "*" or p == label for label, p in zip(labels, pattern))


def _namespace_matches(ns: tuple[str, ...], conditions) -> bool:
    for cond in conditions:
        path = tuple(cond.path)
        if len(ns) < len(path):
            return False
        if cond.match_type == "prefix":
            ok = _label_match(ns[: len(path)], path)
        else:
            ok = _label_match(ns[len(ns) - len(path) :], path)
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class _Stored:
    """An item as its record holds it."""

    namespace: tuple[str, ...]
    key: str
    value: dict
    created_at: datetime
    updated_at: datetime
    indexed: bool

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None) -> SearchItem:
        return SearchItem(self.namespace, self.key, self.value, self.created_at, self.updated_at, score=score)


def _stored(record: Record, scope: Scope) -> _Stored | None:
    """The item ``record`` holds when it is one of this adapter's items of exactly ``scope``."""
    m = record.meta.get(META_KEY)
    if record.scope != scope or not isinstance(m, dict):
        return None
    try:
        ns, key = tuple(m["namespace"]), m["key"]
        own_scope, rest = namespace_scope(ns)
        if own_scope != scope or record.id != _item_id(rest, key) or record.session_id != record.id:
            return None
        return _Stored(
            namespace=ns,
            key=key,
            value=m["value"],
            created_at=datetime.fromisoformat(m["created_at"]),
            updated_at=datetime.fromisoformat(m["updated_at"]),
            indexed=bool(m["indexed"]),
        )
    except (KeyError, TypeError, ValueError):  # not written by this adapter
        return None


def _rest_of_session(session_id: str) -> tuple[str, ...] | None:
    """The labels after the scope's of the item whose session (record id) is ``session_id``, or
    None when it is no item's."""
    try:
        parts = json.loads(session_id)
    except ValueError:
        return None
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        return None
    return tuple(parts[:-1])


class _Call(NamedTuple):
    """One facade call an op's plan asks for: ``getattr(memory, verb)(*args, **kwargs)``."""

    verb: str
    args: tuple
    kwargs: dict


_Plan = Generator[_Call, Any, Result]


class MemfrontierStore(BaseStore):
    """A LangGraph ``BaseStore`` over a memfrontier memory (see the module docstring for the
    namespace -> scope mapping, the item text, the search and its limits).

    Args:
        memory: a :class:`~memfrontier.api.Memory` (``batch`` runs on it, ``abatch`` on its ``aio``)
            or an :class:`~memfrontier.api.AsyncMemory` (``abatch`` only: ``batch`` raises
            RuntimeError). The store does not close it.
        index: ``{"fields": [path, ...]}``: the value fields indexed when a put names none (LangGraph
            paths; ``["$"]``: the whole value); None: the ``text`` / ``content`` field or the whole
            value. memfrontier embeds with the memory's own embedder, so ``dims`` and ``embed`` are
            refused (ValueError), as is any other key.

    Raises:
        ValueError: ``memory`` is neither, or ``index`` is malformed.
    """

    supports_ttl = False

    def __init__(self, memory: Memory | AsyncMemory, *, index: Mapping | None = None):
        if isinstance(memory, Memory):
            self._sync, self._aio = memory, memory.aio
        elif isinstance(memory, AsyncMemory):
            self._sync, self._aio = None, memory
        else:
            raise ValueError(f"memory must be a memfrontier Memory or AsyncMemory, got {type(memory).__name__}")
        self.fields: list[str] | None = None
        if index is not None:
            if not isinstance(index, Mapping) or set(index) - {"fields"}:
                raise ValueError(
                    f"index must be {{'fields': [path, ...]}} (memfrontier embeds with the memory's own "
                    f"embedder: no 'dims' nor 'embed'), got {index!r}"
                )
            if index.get("fields") is not None:
                self.fields = _checked_fields(index["fields"], "index['fields']")

    # -- BaseStore -----------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` on the sync facade, in order, each op checked before the first runs; the
        results in the ops' order (an :class:`Item` or None, a list of :class:`SearchItem`, a list
        of namespaces, None for a put). Raises RuntimeError when the store was given an
        AsyncMemory, ValueError (InvalidNamespaceError) for a bad op, NotImplementedError for a
        ``ttl``."""
        if self._sync is None:
            raise RuntimeError(
                "this MemfrontierStore was given an AsyncMemory: use abatch and the a* methods (aget, aput, "
                "asearch; a graph's ainvoke / astream), or give it a Memory, which serves both"
            )
        plans = [self._plan(op) for op in ops]
        return [_drive(self._sync, plan) for plan in plans]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` on the async facade (a Memory's ``aio``, or the AsyncMemory given)."""
        plans = [self._plan(op) for op in ops]
        return [await _adrive(self._aio, plan) for plan in plans]

    # -- plans: what each op asks of the facade -------------------------------------------------

    def _plan(self, op: Op) -> _Plan:
        """The checked op as a plan: a generator that yields the facade calls it needs (each sent
        back its result) and returns the op's result."""
        if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
            raise ValueError(
                f"unknown store op {type(op).__name__}: expected GetOp, PutOp, SearchOp or ListNamespacesOp"
            )
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            scope, rest = namespace_scope(op.namespace)
            return self._get(scope, _item_id(rest, _checked_key(op.key)))
        if isinstance(op, PutOp):
            return self._put_plan(op)
        if isinstance(op, SearchOp):
            return self._search_plan(op)
        return self._list_plan(op)

    def _get(self, scope: Scope, rid: str) -> _Plan:
        found = yield from _read_item(scope, rid)
        return None if found is None else found.item()

    def _put_plan(self, op: PutOp) -> _Plan:
        if op.ttl is not None:
            raise NotImplementedError(f"TTL is not supported by {type(self).__name__}: put with ttl=None")
        ns = tuple(op.namespace)
        scope, rest = namespace_scope(ns)
        key = _checked_key(op.key)
        rid = _item_id(rest, key)
        if op.value is None:
            return self._delete(scope, rid)
        if not isinstance(op.value, Mapping):
            raise ValueError(f"value must be a dict (or None to delete), got {type(op.value).__name__}")
        value = _json_value(dict(op.value), "value")
        if op.index is not None and op.index is not False:
            fields: list[str] | None = _checked_fields(op.index, "index")
        elif op.index is None:
            fields = self.fields
        else:
            fields = None
        text = None if op.index is False else self._text(value, fields)
        return self._put(scope, ns, key, rid, value, text, fields)

    def _text(self, value: dict, fields: list[str] | None) -> str | None:
        """The text indexed for ``value`` (None: nothing to index)."""
        if fields is None:
            for name in ("text", "content"):
                if isinstance(value.get(name), str) and value[name].strip():
                    return value[name]
            return _compact_json(value)
        parts: list[str] = []
        for path in fields:
            parts.extend([_compact_json(value)] if path == "$" else get_text_at_path(value, path))
        text = "\n".join(p for p in parts if p.strip())
        return text or None

    def _put(self, scope, ns, key, rid, value, text, fields) -> _Plan:
        old = yield from _read_item(scope, rid)
        now = canonical_timestamp(utc_now())
        if old is not None:
            yield _Call("delete", (rid,), _scope_kwargs(scope))
        meta = {
            "namespace": list(ns),
            "key": key,
            "value": value,
            "indexed": text is not None,
            "fields": fields,
            "created_at": old.created_at.isoformat() if old is not None else now,
            "updated_at": now,
        }
        record = Record(
            id=rid,
            session_id=rid,
            role="user",
            timestamp=now,
            text=text if text is not None else UNINDEXED_TEXT,
            meta={META_KEY: meta},
        )
        yield _Call("add", ([record],), {**_scope_kwargs(scope), "session_id": rid})
        return None

    def _delete(self, scope: Scope, rid: str) -> _Plan:
        if (yield from _read_item(scope, rid)) is not None:
            yield _Call("delete", (rid,), _scope_kwargs(scope))
        return None

    def _search_plan(self, op: SearchOp) -> _Plan:
        scope, rest = _prefix_scope(op.namespace_prefix, "namespace_prefix")
        flt = _checked_filter(op.filter)
        limit = _checked_count("limit", op.limit, 0)
        offset = _checked_count("offset", op.offset, 0)
        if op.query is not None and not isinstance(op.query, str):
            raise ValueError(f"query must be a string or None, got {type(op.query).__name__}")
        if op.query and op.query.strip():
            return self._query_search(scope, rest, op.query, flt, limit, offset)
        return self._list_search(scope, rest, flt, limit, offset)

    def _list_search(self, scope, rest, flt, limit, offset) -> _Plan:
        records = yield _Call("records", (), _scope_kwargs(scope))
        items = [
            s
            for r in reversed(records)  # latest added first among equal updated_at
            if (s := _stored(r, scope)) is not None and s.namespace[2 : 2 + len(rest)] == rest and _passes(s.value, flt)
        ]
        items.sort(key=lambda s: s.updated_at, reverse=True)
        return [s.search_item(None) for s in items[offset : offset + limit]]

    def _query_search(self, scope, rest, query, flt, limit, offset) -> _Plan:
        need = offset + limit
        if limit == 0:
            return []
        k = max(10, 2 * need)
        sessions: dict[str, dict[str, _Stored]] = {}  # session id -> its items by record id
        while True:
            hits = yield _Call("search", (query,), {**_scope_kwargs(scope), "k": k, "fold": False})
            found: list[tuple[_Stored, float]] = []
            seen: set[str] = set()
            for hit in hits:
                chunk = hit.chunk
                labels = _rest_of_session(chunk.session_id)
                if chunk.scope != scope or labels is None or labels[: len(rest)] != rest:
                    continue
                if chunk.session_id not in sessions:
                    recs = yield _Call("records", (), {**_scope_kwargs(scope), "session_id": chunk.session_id})
                    sessions[chunk.session_id] = {r.id: s for r in recs if (s := _stored(r, scope)) is not None}
                for rid in chunk.record_ids:
                    s = sessions[chunk.session_id].get(rid)
                    if s is None or rid in seen or not s.indexed or not _passes(s.value, flt):
                        continue
                    seen.add(rid)
                    found.append((s, hit.score))
            if len(found) >= need or len(hits) < k:
                return [s.search_item(score) for s, score in found[offset:need]]
            k *= 4

    def _list_plan(self, op: ListNamespacesOp) -> _Plan:
        conditions = tuple(op.match_conditions or ())
        for cond in conditions:
            if cond.match_type not in ("prefix", "suffix"):
                raise ValueError(f"match_type must be 'prefix' or 'suffix', got {cond.match_type!r}")
        prefixes = [c for c in conditions if c.match_type == "prefix"]
        if not prefixes:
            raise InvalidNamespaceError(
                f"list_namespaces needs a prefix that names a scope, (KIND, ID, ...): there is no listing "
                f"across scopes; {_MAPPING}"
            )
        scope, _ = _prefix_scope(prefixes[0].path, "prefix")
        for cond in prefixes[1:]:
            _prefix_scope(cond.path, "prefix")
        max_depth = None if op.max_depth is None else _checked_count("max_depth", op.max_depth, 1)
        limit = _checked_count("limit", op.limit, 0)
        offset = _checked_count("offset", op.offset, 0)
        return self._list(scope, conditions, max_depth, limit, offset)

    def _list(self, scope, conditions, max_depth, limit, offset) -> _Plan:
        records = yield _Call("records", (), _scope_kwargs(scope))
        namespaces = {
            s.namespace[:max_depth] if max_depth is not None else s.namespace
            for r in records
            if (s := _stored(r, scope)) is not None and _namespace_matches(s.namespace, conditions)
        }
        return sorted(namespaces)[offset : offset + limit]


def _read_item(scope: Scope, rid: str) -> Generator[_Call, Any, _Stored | None]:
    """The item whose record id is ``rid`` in exactly ``scope``, or None."""
    records = yield _Call("records", (), {**_scope_kwargs(scope), "session_id": rid})
    for r in records:
        if r.id == rid and (s := _stored(r, scope)) is not None:
            return s
    return None


def _drive(memory: Memory, plan: _Plan) -> Result:
    """Run ``plan`` on the sync facade."""
    result = None
    try:
        while True:
            call = plan.send(result)
            result = getattr(memory, call.verb)(*call.args, **call.kwargs)
    except StopIteration as done:
        return done.value


async def _adrive(memory: AsyncMemory, plan: _Plan) -> Result:
    """Run ``plan`` on the async facade."""
    result = None
    try:
        while True:
            call = plan.send(result)
            result = await getattr(memory, call.verb)(*call.args, **call.kwargs)
    except StopIteration as done:
        return done.value


__all__ = [
    "FILTER_OPERATORS",
    "META_KEY",
    "NAMESPACE_KINDS",
    "UNINDEXED_TEXT",
    "MemfrontierStore",
    "item_id",
    "namespace_scope",
]

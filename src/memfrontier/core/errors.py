"""The errors every floor raises and reports: the store's (:class:`StoreError` and its kinds, raised
by the stores, the memory banks and the graph index), and :func:`explain_validation`, a pydantic
error as one line for a person (what crosses the CLI or MCP boundary names each field, what was
given and what is wanted, without pydantic's multi-line layout and documentation links)."""

from __future__ import annotations

from pydantic import ValidationError


class StoreError(RuntimeError):
    """The store cannot be opened or written (corrupt files, locked beyond the timeout...)."""


class StoreUnavailableError(StoreError):
    """The store's database cannot be reached now: its server is restarting or down, or the
    connection dropped and no new one came within the store's wait. Nothing is wrong with the
    data: the call may be made again later (the REST service answers 503 with ``Retry-After``).
    When the connection dropped while a delete was committing, the message says that its outcome
    is unknown (a delete made again then finds nothing to delete)."""


class RecordConflictError(ValueError):
    """A record id already stored in the same scope (or repeated in one batch) with other content.
    Ids are unique per scope; a stored record is never overwritten nor skipped silently."""


class EmbeddingMismatchError(StoreError):
    """The store was built with another embedding model or dimension than the one now configured."""


def explain_validation(what: str, e: ValidationError, unknown: str = "unknown field") -> str:
    """``"2 validation errors for WHAT: limit: Input should be greater than 0 (got -1); ..."``.

    ``what`` names the thing validated (a tool, a spec file, a run's options). Fields are dotted
    paths (``configurations.0.label``); pydantic's own checks add the value given, a validator's
    message (``value_error``) is kept as written (it names the value); a field the model forbids
    is called ``unknown`` (e.g. "unknown parameter" for a tool's arguments)."""
    parts = []
    for err in e.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "input"
        if err["type"] == "extra_forbidden":
            parts.append(f"{loc}: {unknown}")
        elif err["type"] == "value_error":  # our own validators' messages name the value
            parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
        else:
            parts.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    n = len(parts)
    return f"{n} validation error{'s' if n > 1 else ''} for {what}: " + "; ".join(parts)


class ArtifactError(ValueError):
    """A file the memory loads to work (a strategy router, the turn reranker, a BudgetMem router
    checkpoint, model weights) that cannot be used: unreadable, of another version, or made for
    another embedder. Whoever configured the file fixes it; a service answers its callers 500
    without the file's path (:mod:`memfrontier.server.rest`)."""


class EmptyScopeError(ValueError):
    """A question asked of a scope that holds no records: the answer would come from no memory (a
    confident invented answer, billed to the caller). Add records first, or check the scope ids."""


def empty_scope_message() -> str:
    """The one message of :class:`EmptyScopeError` (it names no id: a service's scopes carry its
    tenant's prefix, which its callers do not write)."""
    return (
        "no records in this scope: the answer would come from no memory; add some first "
        "(Memory.add, POST /v1/memories, `memfrontier ingest`) or check the scope ids"
    )

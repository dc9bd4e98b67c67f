"""The rules every surface of the facade shares (Python, CLI, REST, MCP): the scope a call runs
in, what a question or query must be, the refusal messages, and the build-progress hook."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from ..core.errors import explain_validation
from ..core.text import clean_text, require_non_blank
from ..core.types import Scope, missing_scope_message
from ..strategies import BuildProgress, Strategy

#: What a refused build tells its caller (Python, CLI, REST or MCP) to do: there is no per-call
#: override, as ``eval --allow-fallbacks`` is for a run.
BUILD_ADVICE = (
    "What was built is kept; build it with a stronger model, or open the memory with a higher "
    "fallback_threshold to accept it."
)


def asked_name(strategy: str | Strategy) -> str:
    """The name an answer or build report carries: the one asked for (a named configuration's own),
    or a strategy object's ``name``."""
    return strategy if isinstance(strategy, str) else strategy.name


def unbuilt_view_message(view: str) -> str:
    """The one message of a question refused because ``view`` (a strategy's ``view_name``, e.g. "automem
    memory view") of the scope was never built."""
    return (
        f"the {view} of this scope was never built, so the answer would come from no "
        f'evidence; ask again with build=True (REST "build": true, MCP build: true, CLI --build) to '
        f"build it first"
    )


def scope_of(user_id, agent_id, run_id) -> Scope:
    """The scope of the ids; a ValueError naming the id that is not one (empty or blank, which no
    stored record may have; too long...)."""
    for name, value in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
        if isinstance(value, str):
            require_non_blank(value, name)
    try:
        return Scope(user_id=user_id, agent_id=agent_id, run_id=run_id)
    except ValidationError as e:
        raise ValueError(explain_validation("the scope", e)) from None


def ambiguous_record_message(what: str, record_id: str, n: int) -> str:
    """The refusal of a ``get`` or ``delete`` whose id ``n`` records hold in scopes inside the one
    given (ids are unique per scope; ``None`` scope fields match any): it names no scope, so a
    service's tenant prefixes never show."""
    return (
        f"{what}: record id {record_id!r} is held by {n} records in scopes inside this one (the same "
        "ids under other agent_id or run_id values): give the record's agent_id and run_id as it was added"
    )


def text_asked(name: str, text) -> str:
    """``text`` (a question or a query) cleaned as stored text is (:func:`~memfrontier.core.text.clean_text`);
    a ValueError naming ``name`` when it is not a string or holds nothing to look for."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string, got {type(text).__name__}")
    text = clean_text(text)
    if not text.strip():
        raise ValueError(f"{name} is empty: there is nothing to look for")
    return text


def positive_int(name: str, value) -> int:
    """``value`` when it is an int >= 1 (not a bool); else ValueError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def scope_for_read(what: str, user_id, agent_id, run_id, all_scopes: bool) -> Scope:
    """The scope a read (``what``: "search", "ask") runs in: at least one id, or ``all_scopes=True``
    and no id. Raises ValueError otherwise (the message names the missing parameters)."""
    scope = scope_of(user_id, agent_id, run_id)
    if all_scopes:
        if scope != Scope():
            raise ValueError(
                f"{what}: all_scopes=True reads every scope; do not combine it with user_id/agent_id/run_id"
            )
        return scope
    if scope == Scope():
        raise ValueError(
            missing_scope_message(what, "reading every tenant's records is a separate opt-in: all_scopes=True")
        )
    return scope


def scope_for_add(user_id, agent_id, run_id) -> Scope:
    """The scope records are added under (no id given: records that carry their own). Raises
    ValueError as :func:`scope_of`."""
    return scope_of(user_id, agent_id, run_id)


def scope_for_write(what: str, user_id, agent_id, run_id) -> Scope:
    """The scope of a delete or a view build: at least one id. Raises ValueError otherwise."""
    scope = scope_of(user_id, agent_id, run_id)
    if scope == Scope():
        raise ValueError(missing_scope_message(what))
    return scope


_BUILD_PROGRESS: contextvars.ContextVar[BuildProgress | None] = contextvars.ContextVar("build_progress", default=None)


def current_build_progress() -> BuildProgress | None:
    """The progress callback :func:`build_progress` set for this context (None: none)."""
    return _BUILD_PROGRESS.get()


@contextmanager
def build_progress(callback: BuildProgress | None) -> Iterator[None]:
    """Within this block (this thread or task and what it starts), every build the facade runs
    (:meth:`AsyncMemory.build`, ``ask(build=True)``) reports ``callback(done, total, unit)`` after
    each step of a construction made of steps. Progress is a concern of the caller's display,
    not an argument of the memory's methods, so :class:`Memory`, :class:`AsyncMemory` and the
    REST clients keep the same signatures."""
    token = _BUILD_PROGRESS.set(callback)
    try:
        yield
    finally:
        _BUILD_PROGRESS.reset(token)

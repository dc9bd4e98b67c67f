"""Observers of answered questions: a hook the facade calls once per question, answered or refused,
with the question's ledger, so an integration (a tracer: :mod:`memfrontier.integrations.otel`) sees
every model call without the facade importing it. Observers run in the task that asked, after the
answer, inside the caller's context (a tracer parents its spans on the caller's current span); one
that raises is logged and never breaks the answer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .ledger import Ledger
from .types import Budget, Scope

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AskRecord:
    """One question as the facade ran it. ``strategy``: the name asked for (a named configuration's
    own); ``config``: the strategy's configuration (None for a strategy object without one; its
    :meth:`config_hash` names it); ``budget``: the effective budget (the caller's
    made stricter by the configuration's); ``started_unix_s`` / ``ended_unix_s``: UNIX seconds;
    ``answer``: the answer's text, None when ``error`` (the exception that ended it) is set."""

    question: str
    scope: Scope
    strategy: str
    config: Any
    budget: Budget
    ledger: Ledger
    started_unix_s: float
    ended_unix_s: float
    answer: str | None = None
    error: BaseException | None = None

    def config_hash(self) -> str | None:
        """The configuration's hash (:meth:`~memfrontier.strategies.config.StrategyConfig.config_hash`);
        None without a config, or for one holding runtime objects that have no JSON form."""
        try:
            return self.config.config_hash() if self.config is not None else None
        except Exception:  # e.g. a client object among the options
            return None


AskObserver = Callable[[AskRecord], None]
_observers: list[AskObserver] = []
_lock = threading.Lock()


def add_ask_observer(observer: AskObserver) -> None:
    """Call ``observer(record)`` after every question (once per observer, however often added)."""
    with _lock:
        if observer not in _observers:
            _observers.append(observer)


def remove_ask_observer(observer: AskObserver) -> None:
    """Stop calling ``observer`` (no error when it was not added)."""
    with _lock:
        if observer in _observers:
            _observers.remove(observer)


def observed() -> bool:
    """Whether any observer is registered (the facade builds no record otherwise)."""
    return bool(_observers)


def notify_asked(record: AskRecord) -> None:
    """Hand ``record`` to every observer; an observer's exception is logged, not raised."""
    with _lock:
        observers = list(_observers)
    for observer in observers:
        try:
            observer(record)
        except Exception:  # an observer must never break a question
            log.exception("ask observer %r failed", observer)


__all__ = ["AskObserver", "AskRecord", "add_ask_observer", "notify_asked", "observed", "remove_ask_observer"]

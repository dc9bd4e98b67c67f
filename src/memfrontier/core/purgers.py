"""The hooks that carry a delete into the views derived from the deleted records.

A view (the memory banks, the graph index...) registers a :data:`ViewPurger` under its view name
with :func:`register_view_purger`; on every delete the store calls each registered purger with
the view's folder (``<view root>/<name>``, which may not exist) and the :class:`Purge`
(:mod:`memfrontier.store.purge` runs them). The registry sits on the ground floor so that the
store and the views above it (AutoMEM's ``graph``) reach it without the store importing them.

A process calls only the purgers of the packages it imported. What makes a delete complete in
every process is the contract of the store's view folders plus one declaration:

* entries of a view folder named :meth:`Scope.slug` belong to that scope: the store removes those
  of every scope covering a deleted record itself, purger or not;
* a view that keeps anything else whose purge needs its own code (a bank file shared by scopes,
  a graph on a server) declares it next to its files with :func:`require_view_purger`; a purge on
  a view root holding such a folder whose purger is not registered in the running process is
  *deferred* (:class:`PurgeDeferred`): the delete stays pending for that root until a process
  with the purger reaches the root's views, which it does before it reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .files import open_private, private_dir
from .types import Scope

#: The file of a view folder listing, one per line, the purgers its files need (:func:`require_view_purger`).
REQUIRED_FILE = ".purgers"


@dataclass(frozen=True)
class Purge:
    """One delete as a view sees it.

    ``deleted``: ``(record scope, record ids)`` pairs of the deleted records; ``whole``: the scope of
    a ``delete_all`` (None for deletes by id); ``covering``: every scope that covers a deleted
    record's scope (a search or build for one of them read the deleted records), by scope key.
    """

    deleted: tuple[tuple[Scope, tuple[str, ...]], ...]
    whole: Scope | None
    covering: dict[str, Scope]


#: ``purger(folder, purge) -> things removed``: carries ``purge`` out on one view's files in
#: ``folder`` (``<view root>/<view name>``, possibly missing) or on its server. Idempotent; raises
#: :class:`~memfrontier.core.errors.StoreError` when the view cannot be written.
ViewPurger = Callable[[Path, Purge], int]

_PURGERS: dict[str, ViewPurger] = {}


class PurgeDeferred(Exception):
    """A view root holds view folders whose required purgers (``missing``, names) are not
    registered in this process: the purge is left pending for that root."""

    def __init__(self, missing: list[str]):
        super().__init__(f"view purgers not registered in this process: {', '.join(missing)}")
        self.missing = missing


def register_view_purger(view: str, purger: ViewPurger) -> None:
    """Call ``purger`` on every delete with the folder ``<view root>/<view>``; a second
    registration under the same name replaces the first."""
    _PURGERS[view] = purger


def unregister_view_purger(view: str) -> None:
    """Forget the purger of ``view`` (nothing if none)."""
    _PURGERS.pop(view, None)


def view_purgers() -> dict[str, ViewPurger]:
    """The registered purgers, by view name (a copy)."""
    return dict(_PURGERS)


def require_view_purger(folder: str | Path, view: str) -> None:
    """Declare that the files of the view folder ``folder`` are purged only by the purger
    registered as ``view`` (idempotent; creates ``folder``)."""
    folder = Path(folder)
    if view in required_purgers(folder):
        return
    private_dir(folder)
    with open_private(folder / REQUIRED_FILE, "a", encoding="utf-8") as f:
        f.write(view + "\n")


def required_purgers(folder: str | Path) -> set[str]:
    """The purger names the view folder ``folder`` declared (:func:`require_view_purger`)."""
    try:
        text = (Path(folder) / REQUIRED_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return set()
    return {line.strip() for line in text.splitlines() if line.strip()}


__all__ = [
    "REQUIRED_FILE",
    "Purge",
    "PurgeDeferred",
    "ViewPurger",
    "register_view_purger",
    "require_view_purger",
    "required_purgers",
    "unregister_view_purger",
    "view_purgers",
]

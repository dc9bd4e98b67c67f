"""In-flight slots of the REST service's tenants, shared by every server process.

A tenant has ``limit`` numbered slots, shared by every process that opens the same key store; a
request holds one while it runs, and a request finding none free gets 429. A slot is a lock that
the operating system or the database drops by itself when its holder dies, so a killed worker's
slots are free at once, with no lease to expire and no clock involved:

- PostgreSQL (:func:`try_advisory_slot`): a session-level advisory lock
  ``pg_try_advisory_lock(tenant id, slot)`` taken on the key store's connection (the tenant id is
  the tenant's row in ``tenants``). PostgreSQL releases a session's advisory locks when its
  connection ends, including when the process is killed.
- SQLite (:class:`SlotFiles`): an exclusive ``flock`` on the file ``<key file>.slots/<tenant>.<slot>``
  (one open file per held slot); the kernel releases it when the file is closed or the process
  dies. A tenant's slot files are deleted when its last active key is revoked
  (:meth:`SlotFiles.retire`), under one rule that keeps a slot held by one holder at a time: a
  file is unlinked only by a process that holds its lock, so a file some request holds (in any
  process) is never deleted (it stays until a later revocation finds it free); and a lock taken
  counts only when the path still names the locked file (same inode) after locking, so an
  acquirer that opened a file just unlinked drops it and opens the path again.

Both locks are re-entrant for their holder (one connection, resp. nothing stops a process from
opening the file twice), so each :class:`InFlightSlots` also keeps the slots it holds and never
asks for them again.
"""

from __future__ import annotations

import fcntl
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.files import private_dir
from .tenants import check_tenant


@dataclass(frozen=True)
class Slot:
    """One in-flight slot held by this process: ``index`` in ``0 .. limit-1`` of ``tenant``."""

    tenant: str
    index: int


class InFlightSlots(ABC):
    """The slots this object holds and how it takes more; a backend supplies the lock
    (``_try_slot``, ``_free_slot``). Thread-safe."""

    def __init__(self) -> None:
        self._slot_lock = threading.Lock()
        self._held: dict[tuple[str, int], object] = {}

    @abstractmethod
    def _try_slot(self, tenant: str, index: int) -> object | None:
        """Take slot ``index`` of ``tenant`` without waiting: a handle, or None when another holds it."""

    @abstractmethod
    def _free_slot(self, tenant: str, index: int, handle: object) -> None:
        """Release a slot taken by :meth:`_try_slot`."""

    def acquire(self, tenant: str, limit: int) -> Slot | None:
        """Take a free one of ``tenant``'s ``limit`` in-flight slots (shared with every process that
        opened the same key store), or None when all are held. Release it with :meth:`release`.
        Raises ValueError for an invalid tenant name or ``limit < 1``."""
        check_tenant(tenant)
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        with self._slot_lock:
            for index in range(limit):
                if (tenant, index) in self._held:
                    continue
                handle = self._try_slot(tenant, index)
                if handle is not None:
                    self._held[(tenant, index)] = handle
                    return Slot(tenant, index)
        return None

    def release(self, slot: Slot) -> None:
        """Free a slot taken by :meth:`acquire` (nothing when it is not held)."""
        with self._slot_lock:
            handle = self._held.pop((slot.tenant, slot.index), None)
            if handle is not None:
                self._free_slot(slot.tenant, slot.index, handle)

    def held(self) -> list[Slot]:
        """The slots this object holds now."""
        with self._slot_lock:
            return [Slot(t, i) for t, i in sorted(self._held)]

    def _forget_slots(self, lost: Callable[[object], bool]) -> None:
        """Drop from the held slots those whose handle is ``lost`` (their lock is gone already)."""
        for key, handle in list(self._held.items()):
            if lost(handle):
                self._held.pop(key, None)


_UNLINKED = object()  # lock_file: the file was unlinked (or replaced) while it was being locked


def lock_file(path: Path, *, create: bool):
    """Take the exclusive ``flock`` of the file at ``path`` without waiting: its open descriptor;
    None when another holds it (or, without ``create``, when no file is there); :data:`_UNLINKED`
    when the locked file is no longer the one ``path`` names (a holder unlinked it meanwhile: open
    the path again)."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        same = os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        same = False
    if not same:
        os.close(fd)
        return _UNLINKED
    return fd


class SlotFiles:
    """The ``flock`` slot files ``<folder>/<tenant>.<index>`` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def take(self, tenant: str, index: int) -> int | None:
        """Lock slot ``index`` of ``tenant``: the locked descriptor, or None when another holds it."""
        private_dir(self.folder)
        path = self.folder / f"{tenant}.{index}"
        while True:
            fd = lock_file(path, create=True)
            if fd is not _UNLINKED:
                return fd

    @staticmethod
    def free(fd: int) -> None:
        """Release a slot taken by :meth:`take` (closing the descriptor drops the lock)."""
        os.close(fd)

    def retire(self, active: set[str]) -> None:
        """Delete the slot files of tenants outside ``active``, each only while holding its lock; a
        file held now stays for a later call."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.iterdir()):
            if path.name.rpartition(".")[0] in active:
                continue
            fd = lock_file(path, create=False)
            if fd is None or fd is _UNLINKED:
                continue
            try:
                path.unlink()
            finally:
                os.close(fd)


#: ``read(sql, params) -> rows`` on the key store's session (the one that holds the locks).
Read = Callable[[str, tuple], list[tuple]]


def try_advisory_slot(read: Read, tenant_id: int, index: int) -> bool:
    """Take the session-level advisory lock of slot ``index`` of the tenant ``tenant_id`` without
    waiting; whether it was free."""
    return bool(read("SELECT pg_try_advisory_lock(%s::int4, %s::int4)", (tenant_id, index))[0][0])


def free_advisory_slot(read: Read, tenant_id: int, index: int) -> None:
    """Release the advisory lock taken by :func:`try_advisory_slot` on this session."""
    read("SELECT pg_advisory_unlock(%s::int4, %s::int4)", (tenant_id, index))


__all__ = ["InFlightSlots", "Slot", "SlotFiles", "free_advisory_slot", "lock_file", "try_advisory_slot"]

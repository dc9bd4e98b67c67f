"""Files at rest are private: every folder the package creates is 0700 and every file 0600,
whatever the process umask (a umask of 022 would otherwise leave user text, API key hashes and
usage readable by every account of the machine). Existing folders and files keep their mode."""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
"""Mode of a folder the package creates: owner only."""
FILE_MODE = 0o600
"""Mode of a file the package creates: owner read and write only."""


def private_dir(path: str | os.PathLike) -> Path:
    """Create the folder ``path`` and its missing parents, each :data:`DIR_MODE` whatever the umask;
    an existing folder is left as it is. Returns ``path`` as a Path. Raises OSError as ``mkdir`` does
    (a file in the way, no permission)."""
    path = Path(path)
    missing = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for p in reversed(missing):
        try:
            p.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not p.is_dir():
                raise
            continue  # made by another process meanwhile: its mode is its maker's
        os.chmod(p, DIR_MODE)  # mkdir's mode is masked by the umask
    return path


def private_file(path: str | os.PathLike) -> Path:
    """Create the empty file ``path`` (:data:`FILE_MODE`) if it is missing, so a database then opened
    there (SQLite gives its ``-wal`` / ``-shm`` files the same mode) is private whatever the umask;
    an existing file is left as it is. Its folder must exist. Returns ``path`` as a Path."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass
    return Path(path)


def open_private(path: str | os.PathLike, mode: str = "w", **kw):
    """``open(path, mode, **kw)`` for writing (``"w"``, ``"a"``, ``"a+b"``...), the file created
    :data:`FILE_MODE` when missing (an existing one keeps its mode)."""
    private_file(path)
    return open(path, mode, **kw)

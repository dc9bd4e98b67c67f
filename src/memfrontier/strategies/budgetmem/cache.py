"""Module output cache: keyed by (question text, module, tier, sha256 of the module input).

BudgetMem training replays the same questions for several epochs; a module executed at a given
tier on the same input gives the same output (greedy decoding, deterministic rules), so its
output is cached and the model call is not repeated. The input hash is salted with everything
else that decides the output (tiering strategy, model ids, prompt version, module parameters).

An entry also keeps what producing it cost (USD, tokens, calls) and which tiers failed on the
way, so a cache hit can report the cost the tier *would* have had (the router's cost reward,
BudgetMem Eq. 7) without writing calls that did not happen to the ledger.

In memory by default; with ``path`` the cache is loaded from and :meth:`ModuleCache.save` d to a
JSON file (atomic replace).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from ...core.files import open_private, private_dir

CACHE_FORMAT = "memfrontier.budgetmem.module_cache"
CACHE_VERSION = 1


def input_hash(payload: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``payload``."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ModuleCache:
    """A dict of cache entries (JSON-able dicts) with optional JSON persistence.

    Args:
        path: JSON file to load from (if it exists) and to :meth:`save` to; None = memory only.
        autosave: save after every :meth:`put` (simple, slow for big caches; default off).

    Raises ValueError when ``path`` exists but is not a cache file of this format.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, autosave: bool = False):
        self.path = Path(path) if path is not None else None
        self.autosave = autosave
        self._entries: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise ValueError(f"module cache {self.path} is unreadable: {e}") from e
            if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or data.get("version") != CACHE_VERSION:
                raise ValueError(f"{self.path} is not a {CACHE_FORMAT} v{CACHE_VERSION} file")
            self._entries = dict(data.get("entries") or {})

    @staticmethod
    def key(question: str, module: str, tier: str, in_hash: str) -> str:
        return json.dumps([question, module, tier, in_hash], ensure_ascii=False)

    def get(self, key: str) -> dict | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
            return entry

    def put(self, key: str, entry: dict) -> None:
        with self._lock:
            self._entries[key] = entry
        if self.autosave:
            self.save()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the cache as JSON (``path`` or the constructor's); returns the path written."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("this module cache has no path; pass one to save()")
        private_dir(target.parent)
        with self._lock:
            payload = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": dict(self._entries)}
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open_private(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(payload, ensure_ascii=False))
        os.replace(tmp, target)
        return target

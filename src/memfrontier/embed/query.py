"""Query embeddings, cached per embedder: one question is encoded once, however many readers
(the store's dense search, a bank, the ``auto`` router's features) ask for its vector.

The cache holds the last :data:`CACHE_SIZE` query texts of each embedder object (least recently
used dropped first) and goes with the embedder. Cached vectors are read-only.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np

#: Query texts remembered per embedder.
CACHE_SIZE = 256

_LOCK = threading.Lock()
_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def encode_query(embedder, query: str) -> np.ndarray:
    """The embedding of ``query`` by ``embedder`` (anything with ``encode(list[str])``): float32
    ``(dim,)``, read-only; the embedder's own normalisation. Raises what ``embedder.encode`` raises."""
    try:
        with _LOCK:
            cache = _CACHES.setdefault(embedder, OrderedDict())
    except TypeError:  # an embedder that cannot be weakly referenced is not cached
        cache = None
    if cache is not None:
        with _LOCK:
            hit = cache.get(query)
            if hit is not None:
                cache.move_to_end(query)
                return hit
    vec = np.asarray(embedder.encode([query]), dtype=np.float32)[0]
    vec.flags.writeable = False
    if cache is not None:
        with _LOCK:
            cache[query] = vec
            if len(cache) > CACHE_SIZE:
                cache.popitem(last=False)
    return vec


__all__ = ["CACHE_SIZE", "encode_query"]

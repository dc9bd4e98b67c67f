"""The ``Memory`` facade (mem0-like): open a store, add history, search it, ask questions.

>>> from memfrontier import Memory
>>> with Memory.open("./mem") as m:                                    # doctest: +SKIP
...     m.add([{"role": "user", "content": "I moved to Lisbon in May."}], user_id="ana")
...     ans = m.ask("Where does Ana live?", user_id="ana", strategy="rag")
...     ans.text, ans.usage.query.usd

Sync facade over the async core (:class:`AsyncMemory`); use the async class inside a running loop.
One :class:`Memory` may be shared by many threads (as an HTTP client is).

Scopes are a security boundary. Every ``search`` / ``ask`` / ``delete`` / ``delete_all`` names at
least one of ``user_id``, ``agent_id``, ``run_id`` (as in mem0), else ``ValueError``; searching or
asking over every tenant's records is a separate, explicit opt-in: ``all_scopes=True``. Record ids
are unique per scope: ``delete(record_id, user_id=...)`` can only reach the caller's own record.
"""

from .memory import STRATEGY_CACHE_SIZE, AsyncMemory
from .models import Answer, BuildReport, Recall
from .rules import (
    BUILD_ADVICE,
    ambiguous_record_message,
    build_progress,
    scope_for_add,
    scope_for_read,
    scope_for_write,
    unbuilt_view_message,
)
from .sync import Memory

__all__ = [
    "BUILD_ADVICE",
    "STRATEGY_CACHE_SIZE",
    "Answer",
    "AsyncMemory",
    "BuildReport",
    "Memory",
    "Recall",
    "ambiguous_record_message",
    "build_progress",
    "scope_for_add",
    "scope_for_read",
    "scope_for_write",
    "unbuilt_view_message",
]

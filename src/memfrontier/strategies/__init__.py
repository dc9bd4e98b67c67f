"""Strategies: f_mem(q, memory) -> m_q. ``get_strategy(name, **options)`` builds one by name."""

from __future__ import annotations

from .automem.pipeline import AutoMem
from .base import MemoryEnv, Query, Strategy
from .budgetmem import BudgetMem
from .longctx import LongContext
from .memorycpt.pipeline import MemoryCPT
from .mempilot import MemPilot
from .oracle import Oracle
from .rag import Rag

STRATEGIES = {"longctx": LongContext, "rag": Rag, "oracle": Oracle, "budgetmem": BudgetMem,
              "memorycpt": MemoryCPT, "mempilot": MemPilot, "automem": AutoMem}


def get_strategy(name: str, **options) -> Strategy:
    """Raises ValueError for an unknown name, listing the known ones."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(sorted(STRATEGIES))}") from None
    return cls(**options)


__all__ = ["MemoryEnv", "Query", "Strategy", "get_strategy", "STRATEGIES"]

"""BudgetMem (arXiv 2602.06025): runtime memory extraction with per-module budget tiers.

:class:`BudgetMem` is the strategy; :class:`BudgetMemModules` (:mod:`.engine`) runs the five
modules (:mod:`.modules`) behind one budget-tier interface ``run(query, module_input, tier)``; :mod:`.tiering` holds the three
tiering strategies, :mod:`.prompts` the versioned prompts, :mod:`.cache` the module output cache.
"""

from .cache import ModuleCache
from .config import MODULES, BudgetMemConfig
from .engine import BudgetMemModules
from .modules import EXTRACTORS, ModuleResult, SummaryInput
from .pipeline import BudgetMem
from .prompts import PROMPT_VERSION
from .tiering import (
    TIERS,
    CapacityTiering,
    ImplementationTiering,
    ModuleOutputError,
    ReasoningTiering,
    Tiering,
    make_tiering,
)

__all__ = [
    "EXTRACTORS",
    "MODULES",
    "PROMPT_VERSION",
    "TIERS",
    "BudgetMem",
    "BudgetMemConfig",
    "BudgetMemModules",
    "CapacityTiering",
    "ImplementationTiering",
    "ModuleCache",
    "ModuleOutputError",
    "ModuleResult",
    "ReasoningTiering",
    "SummaryInput",
    "Tiering",
    "make_tiering",
]

"""Strategies: f_mem(q, memory) -> m_q. ``get_strategy(name, config=... or **options)`` builds one
by name from its pydantic config (:mod:`.config`; one ``<Name>Config`` per strategy)."""

from __future__ import annotations

from typing import Any

from .automem.config import AutoMEMConfig
from .automem.pipeline import AutoMem
from .base import MemoryEnv, Query, Strategy, ViewNotBuiltError, view_built
from .budgetmem import BudgetMem
from .budgetmem.config import BudgetMemConfig
from .config import StrategyConfig, StrategyConfigError
from .longctx import LongContext, LongContextConfig
from .memorycpt.config import MemoryCPTConfig
from .memorycpt.pipeline import MemoryCPT
from .mempilot import MemPilot
from .mempilot.config import MemPilotConfig
from .oracle import Oracle, OracleConfig
from .rag import Rag, RagConfig

STRATEGIES = {"longctx": LongContext, "rag": Rag, "oracle": Oracle, "budgetmem": BudgetMem,
              "memorycpt": MemoryCPT, "mempilot": MemPilot, "automem": AutoMem}
#: Strategies whose memory view is built offline (``build``) before questions can be answered.
BUILT_VIEWS = ("memorycpt", "mempilot", "automem")


def strategy_class(name: str) -> type:
    """Raises ValueError for an unknown name, listing the known ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(sorted(STRATEGIES))}") from None


def strategy_config(name: str, config: StrategyConfig | dict[str, Any] | None = None, /,
                    **options: Any) -> StrategyConfig:
    """The validated config of strategy ``name`` from a config, a dict of options and/or keywords.

    Raises:
        ValueError: unknown strategy; :class:`StrategyConfigError` (a ValueError) for options the
            config rejects (the message names the key and the allowed values), or a config of
            another strategy.
    """
    cls = strategy_class(name).config_class
    if isinstance(config, StrategyConfig):
        if not isinstance(config, cls):
            raise StrategyConfigError(f"strategy {name}: got a {type(config).__name__}, expected {cls.__name__}")
        if not options:
            return config
        config = config.model_dump(exclude_unset=True)
    return cls.from_options({**(config or {}), **options})


def get_strategy(name: str, config: StrategyConfig | dict[str, Any] | None = None, /, **options: Any) -> Strategy:
    """The strategy ``name`` built from its config (see :func:`strategy_config`); the instance
    carries it as ``.config``. Raises ValueError (unknown name, rejected options)."""
    cfg = strategy_config(name, config, **options)
    strategy = strategy_class(name)(**cfg.options())
    strategy.config = cfg
    return strategy


__all__ = ["MemoryEnv", "Query", "Strategy", "StrategyConfig", "StrategyConfigError", "ViewNotBuiltError",
           "get_strategy", "strategy_class", "strategy_config", "view_built", "STRATEGIES", "BUILT_VIEWS",
           "AutoMEMConfig", "BudgetMemConfig", "LongContextConfig", "MemoryCPTConfig", "MemPilotConfig",
           "OracleConfig", "RagConfig"]

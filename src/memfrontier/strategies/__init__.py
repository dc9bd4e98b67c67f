"""Strategies: f_mem(q, memory) -> m_q. ``get_strategy(name, config=... or **options)`` builds one
by name from its pydantic config (:mod:`.config`; one ``<Name>Config`` per strategy): every strategy
is ``Cls(config, *, runtime objects)`` and reads its options from ``self.config``.

The registry names the strategies without importing them: a strategy's package (and its
dependencies) is imported the first time its class or config is asked for, so listing the names
(e.g. for ``--help``) stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any

from .base import (
    BuildProgress,
    MemoryEnv,
    Query,
    Strategy,
    StrategyBase,
    ViewNotBuiltError,
    effective_budget,
    resolve_preference,
    view_built,
)
from .config import StrategyConfig, StrategyConfigError
from .named import NAMED_CONFIGURATIONS, resolve_named

#: name -> (module under this package, class); the one list of strategies.
_CLASSES: dict[str, tuple[str, str]] = {
    "longctx": ("longctx", "LongContext"),
    "rag": ("rag", "Rag"),
    "oracle": ("oracle", "Oracle"),
    "budgetmem": ("budgetmem.pipeline", "BudgetMem"),
    "memorycpt": ("memorycpt.pipeline", "MemoryCPT"),
    "mempilot": ("mempilot.pipeline", "MemPilot"),
    "automem": ("automem.pipeline", "AutoMem"),
    "auto": ("auto.pipeline", "Auto"),
}
#: Config classes importable from this package (class name -> module).
_CONFIGS: dict[str, str] = {
    "LongContextConfig": "longctx",
    "RagConfig": "rag",
    "OracleConfig": "oracle",
    "BudgetMemConfig": "budgetmem.config",
    "MemoryCPTConfig": "memorycpt.config",
    "MemPilotConfig": "mempilot.config",
    "AutoMEMConfig": "automem.config",
    "AutoConfig": "auto.config",
}
#: Strategies whose memory view is built offline (``build``) before questions can be answered
#: (``auto``: the views of the configurations it routes to).
BUILT_VIEWS = ("memorycpt", "mempilot", "automem", "auto")


class _Registry(Mapping):
    """``STRATEGIES[name]`` -> the strategy class (imported on first access)."""

    def __getitem__(self, name: str) -> type:
        module, cls = _CLASSES[name]
        return getattr(import_module(f"{__name__}.{module}"), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_CLASSES)

    def __len__(self) -> int:
        return len(_CLASSES)


STRATEGIES: Mapping[str, type] = _Registry()


def __getattr__(name: str):  # the config classes, imported on first use (PEP 562)
    if name in _CONFIGS:
        return getattr(import_module(f"{__name__}.{_CONFIGS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Every name a strategy can be asked for by: the strategies, then the named configurations.
STRATEGY_NAMES: tuple[str, ...] = (*_CLASSES, *NAMED_CONFIGURATIONS)


def check_strategy_name(name: object) -> str:
    """``name`` when it names a strategy or a named configuration (:data:`STRATEGY_NAMES`); else the
    one ValueError every surface gives (Python, CLI, REST, MCP), listing the known names."""
    if not isinstance(name, str) or name not in STRATEGY_NAMES:
        raise ValueError(
            f"unknown strategy {name!r}; available: {', '.join([*sorted(_CLASSES), *NAMED_CONFIGURATIONS])}"
        )
    return name


def strategy_class(name: str) -> type:
    """The class of strategy ``name`` (a named configuration's: its strategy's). Raises ValueError
    for an unknown name (:func:`check_strategy_name`)."""
    return STRATEGIES[resolve_named(check_strategy_name(name))[0]]


def strategy_config(
    name: str, config: StrategyConfig | dict[str, Any] | None = None, /, **options: Any
) -> StrategyConfig:
    """The validated config of strategy ``name`` from a config, a dict of options and/or keywords
    (keywords override). A named configuration (:data:`NAMED_CONFIGURATIONS`) is its strategy's
    config with its options, under those given.

    Raises:
        ValueError: unknown strategy; :class:`StrategyConfigError` (a ValueError) for options the
            config rejects (the message names the key and the allowed values), or a config of
            another strategy.
    """
    cls = strategy_class(name).config_class
    if isinstance(config, StrategyConfig):
        if not isinstance(config, cls):
            raise StrategyConfigError(f"strategy {name}: got a {type(config).__name__}, expected {cls.__name__}")
        if not options and name not in NAMED_CONFIGURATIONS:
            return config
        config = config.model_dump(exclude_unset=True)
    elif config is not None and not isinstance(config, Mapping):
        raise StrategyConfigError(
            f"strategy {name}: options must be a mapping of names to values, got {type(config).__name__}"
        )
    if name not in NAMED_CONFIGURATIONS:
        return cls.from_options({**(config or {}), **options})
    strategy, own = NAMED_CONFIGURATIONS[name]
    try:
        return cls.from_options(resolve_named(name, {**(config or {}), **options})[1])
    except StrategyConfigError as e:  # named as asked, with the options the name stands for
        said = ", ".join(f"{k}={v}" for k, v in own.items())
        raise StrategyConfigError(
            f"strategy {name} ({strategy} with {said}): {str(e).removeprefix(f'strategy {strategy}: ')}"
        ) from None


def get_strategy(name: str, config: StrategyConfig | dict[str, Any] | None = None, /, **options: Any) -> Strategy:
    """The strategy ``name`` built from its config (see :func:`strategy_config`): ``Cls(config)``,
    which carries it as ``.config``. Raises ValueError (unknown name, rejected options)."""
    return strategy_class(name)(strategy_config(name, config, **options))


__all__ = [
    "BuildProgress",
    "MemoryEnv",
    "Query",
    "Strategy",
    "StrategyBase",
    "StrategyConfig",
    "StrategyConfigError",
    "ViewNotBuiltError",
    "effective_budget",
    "get_strategy",
    "resolve_preference",
    "strategy_class",
    "strategy_config",
    "resolve_named",
    "view_built",
    "NAMED_CONFIGURATIONS",
    "STRATEGIES",
    "STRATEGY_NAMES",
    "check_strategy_name",
    "BUILT_VIEWS",
    *_CONFIGS,
]

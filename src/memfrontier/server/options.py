"""The one policy of the strategy options a remote caller (a REST tenant, an MCP client) may set.

A request reaches only the models, endpoints, files and caches the server's operator configured
(``memfrontier serve`` / ``memfrontier mcp`` flags). Each config field is decided once, here, from
its metadata (:func:`~memfrontier.strategies.config.operator_only`,
:func:`~memfrontier.strategies.config.operator_values`):

* a field marked :func:`~memfrontier.strategies.config.operator_only` (a router, an adapter, a
  pool or bank file, a model spec ``*_llm``, a ``base_url``, free-form tiering options) is refused;
* a choice marked :func:`~memfrontier.strategies.config.operator_values` is refused for those
  values (BudgetMem ``tiering=capacity`` builds its own models; MemPilot ``compressor=auto`` /
  ``llmlingua2`` load LLMLingua-2; AutoMEM ``graph=neo4j`` writes to the environment's server)
  and accepted for the others;
* an unmarked field follows its type: values only (numbers, flags, choices, and models and
  containers of them) are accepted, a free string, path or free-form dict is refused;
* a field marked ``{"remote": True}`` is accepted whatever its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..strategies import strategy_class
from ..strategies.config import REMOTE_KEY, REMOTE_REFUSED_KEY

__all__ = ["RemotePolicy", "check_remote_options", "remote_policy"]


@dataclass(frozen=True)
class RemotePolicy:
    """How the service treats one config field: ``settable`` (a remote caller may give it at all),
    ``refused`` (the values of a settable choice it may not choose) and ``marked`` (decided by the
    field's metadata, not by its type)."""

    settable: bool
    refused: tuple[Any, ...] = ()
    marked: bool = False


def _value_only(tp) -> bool:
    """Whether an option's type holds values only (numbers, flags, choices, and models and
    containers of them), never a free string: no path, model spec, URL or free-form dict."""
    origin = get_origin(tp)
    if tp in (int, float, bool, type(None)) or origin is Literal:
        return True
    if origin is Annotated:
        return _value_only(get_args(tp)[0])
    if origin in (Union, UnionType, tuple, list, dict):
        return all(_value_only(a) for a in get_args(tp) if a is not Ellipsis)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return all(_value_only(f.annotation) for f in tp.model_fields.values())
    return False


def remote_policy(field: FieldInfo) -> RemotePolicy:
    """The service's decision on one config field (see the module docstring): its mark when it has
    one, else its type's."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    refused = tuple(extra.get(REMOTE_REFUSED_KEY) or ())
    if REMOTE_KEY in extra:
        return RemotePolicy(settable=bool(extra[REMOTE_KEY]), refused=refused, marked=True)
    return RemotePolicy(settable=_value_only(field.annotation), refused=refused, marked=bool(refused))


def _chosen(value: Any) -> list[Any]:
    """The values a given option chooses: itself, or each item of a list."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_remote_options(strategy: str, options: dict[str, Any] | None) -> None:
    """Refuse (ValueError naming the option) a strategy option a remote caller may not set or a value
    it may not choose (see the module docstring); nothing is validated, read or built before.
    ``strategy`` is a registered name (ValueError otherwise); unknown option names are left to the
    strategy's config, which refuses them."""
    config = strategy_class(strategy).config_class
    for key, value in (options or {}).items():
        field = config.model_fields.get(key)
        if field is None:
            continue
        policy = remote_policy(field)
        if not policy.settable:
            raise ValueError(
                f"strategy_options.{key}: not settable over the service (it names a file, a model, an "
                f"endpoint or a cache, which only the server's operator chooses)"
            )
        bad = [v for v in _chosen(value) if any(v == r and type(v) is type(r) for r in policy.refused)]
        if bad:
            others = [v for v in config.allowed(key) if v not in policy.refused]
            raise ValueError(
                f"strategy_options.{key}={bad[0]!r}: not settable over the service (this value "
                f"selects a model, an endpoint, a file or a cache the server's operator did not "
                f"configure); choose one of: {', '.join(map(str, others))}"
            )

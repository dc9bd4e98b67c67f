"""The one policy of the strategy options a remote caller (a REST tenant, an MCP client) may set:
values only (numbers, flags, choices). An option that names a file (a router, an adapter, a pool or
bank file), a model or an endpoint (``*_llm``, ``base_url``), or holds free-form settings chooses
what the server reads, runs or calls, so it belongs to the operator (``memfrontier serve`` /
``memfrontier mcp`` flags)."""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from ..strategies import strategy_class

__all__ = ["check_remote_options"]


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


def check_remote_options(strategy: str, options: dict[str, Any] | None) -> None:
    """Refuse (ValueError naming the option) a strategy option a remote caller may not set (see the
    module docstring). ``strategy`` is a registered name (KeyError otherwise); unknown option
    names are left to the strategy's config, which refuses them."""
    fields = strategy_class(strategy).config_class.model_fields
    for key in options or {}:
        field = fields.get(key)
        if field is not None and not _value_only(field.annotation):
            raise ValueError(f"strategy_options.{key}: not settable over the service (it names a file, a model or "
                             f"an endpoint, which only the server's operator chooses)")

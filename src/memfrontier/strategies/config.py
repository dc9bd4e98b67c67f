"""The base of every strategy's config (TRL's pattern: one pydantic ``Config`` per algorithm).

A config holds a strategy's serialisable options, each field documented (type, default, unit, the
paper's section or equation). It is the one source of them: a strategy is built as
``Cls(config, *, runtime objects)`` and reads ``self.config``; the config validates, the
strategy does not check again. Configs are
frozen, reject unknown keys (``extra="forbid"``) and take numbers and switches strictly (:data:`Int` /
:data:`Float`: ``k=2.5``, ``k="2"`` or ``k=True`` is an error, not 2 or 1; :data:`Bool`:
``rerank="yes"`` or ``rerank=1`` is an error, not True); paths and choices may be
given as strings (JSON, YAML, ``--set``). :meth:`StrategyConfig.from_options` turns a ``ValidationError`` into a
:class:`StrategyConfigError` whose message names the key and, for a choice, the allowed values.

``memfrontier eval --set key=value`` / ``--strategy-config FILE`` and ``memfrontier config NAME``
read these classes; ``summary.json`` records the config and its :meth:`~StrategyConfig.config_hash`.

A field that selects a model, an endpoint, a file or a cache carries the service's mark in its
metadata (``json_schema_extra``): :func:`operator_only` for the whole field, :func:`operator_values`
for the values of a choice that do. The service (``memfrontier serve`` / ``mcp``) reads the marks
(:func:`memfrontier.server.options.check_remote_options`): a remote caller sets values only, and
never reaches a model, endpoint, file or cache its operator did not configure.
"""

from __future__ import annotations

import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError

from ..core.types import Budget

#: Field types for numbers: a bool, a string or (for Int) a fractional float is rejected.
Int = StrictInt
Float = StrictFloat
#: Field type for a switch: only ``true`` / ``false`` (a string such as "no" or a number is rejected;
#: ``--set key=false`` is read as YAML, so it is a bool).
Bool = StrictBool


#: The metadata keys of the service's option policy (see the module docstring).
REMOTE_KEY = "remote"
REMOTE_REFUSED_KEY = "remote_refused"


def operator_only() -> dict[str, Any]:
    """``json_schema_extra`` of a field only the service's operator sets (it names or selects a
    model, an endpoint, a file or a cache): a remote caller giving it is refused."""
    return {REMOTE_KEY: False}


def operator_values(*values: Any) -> dict[str, Any]:
    """``json_schema_extra`` of a choice some of whose ``values`` select a model, an endpoint, a
    file or a cache the operator did not configure: a remote caller may choose the others only."""
    return {REMOTE_REFUSED_KEY: list(values)}


class StrategyConfigError(ValueError):
    """Options that the strategy's config rejects (unknown key, wrong type, value outside the
    allowed ones). The message names the strategy, the key and what is allowed."""


class StrategyConfig(BaseModel):
    """Options of one strategy. Subclasses set :attr:`strategy` (the registry name). A number option
    is finite: NaN or infinity (which JSON bodies may spell ``NaN`` / ``Infinity``) is refused by name."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    strategy: ClassVar[str] = ""

    @classmethod
    def from_options(
        cls, options: dict[str, Any] | None = None, /, *, labels: dict[str, str] | None = None, **more: Any
    ) -> "StrategyConfig":
        """Validate ``options`` (Python or JSON values: paths and choices may be strings).
        ``labels`` names a key in error messages (e.g. ``{"tiers": "--tiers"}`` for a CLI flag).

        Raises:
            StrategyConfigError: naming each bad key with what it accepts.
        """
        data = {**(options or {}), **more}
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise StrategyConfigError(cls._explain(e, labels or {})) from None

    @classmethod
    def _explain(cls, e: ValidationError, labels: dict[str, str]) -> str:
        by_key: dict[str, list[dict]] = {}
        for err in e.errors():
            by_key.setdefault(str(err["loc"][0]) if err["loc"] else "", []).append(err)
        parts = []
        for key, errs in by_key.items():
            first = errs[0]
            if first["type"] == "extra_forbidden":
                if len(first["loc"]) > 1:  # inside a nested option (e.g. limits, budget)
                    parts.append(f"unknown key {'.'.join(map(str, first['loc']))!r}")
                else:
                    parts.append(f"unknown key {key!r}; keys: {', '.join(cls.model_fields) or '(none)'}")
                continue
            allowed = cls.allowed(key)
            given = first.get("input")
            if first["type"] == "missing" and key in cls.model_fields:
                parts.append(f"{labels.get(key, key)} is required: {cls.model_fields[key].description or 'no default'}")
                continue
            if not key:
                parts.append(first["msg"].removeprefix("Value error, "))
            elif allowed and (isinstance(given, str) or all(x["type"] == "literal_error" for x in errs)):
                name = cls.model_fields[key].title or labels.get(key, key)
                parts.append(f"unknown {name} {given!r}; choose one of: {', '.join(map(str, allowed))}")
            else:  # a union reports one error per member: the one that is not a choice explains best
                first = next((x for x in errs if x["type"] != "literal_error"), first)
                given = first.get("input")
                sub = ".".join(str(p) for p in first["loc"][1:] if "[" not in str(p) and not str(p)[:1].isupper())
                where = labels.get(key, key) + (f".{sub}" if sub else "")
                msg = first["msg"].removeprefix("Value error, ")
                parts.append(f"{where}={given!r}: {msg}" if not isinstance(given, dict) else f"{where}: {msg}")
        return f"strategy {cls.strategy}: " + "; ".join(parts)

    @classmethod
    def allowed(cls, key: str) -> tuple[Any, ...]:
        """The values a ``Literal``-typed field accepts (``()`` for free-form fields)."""
        field = cls.model_fields.get(key)
        return _literal_values(field.annotation) if field is not None else ()

    @classmethod
    def parse_assignment(cls, text: str) -> tuple[tuple[str, ...], Any]:
        """``"key=value"`` (``--set``) as ``(key path, value)``, by :func:`parse_assignment`.

        Raises:
            StrategyConfigError: no ``=``, or a key the config does not have (the keys are listed).
        """
        try:
            return parse_assignment(cls, text)
        except ValueError as e:
            raise StrategyConfigError(f"strategy {cls.strategy}: {e}") from None

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """One row per field: ``name``, ``type``, ``required``, ``default`` (None when required) and
        ``doc`` (for ``--help`` and ``memfrontier config``); the strategy's own fields first, those
        every budgeted config shares (:class:`BudgetedConfig`) after them."""
        rows = []
        shared = set(BudgetedConfig.model_fields) if issubclass(cls, BudgetedConfig) else set()
        ordered = sorted(cls.model_fields.items(), key=lambda kv: kv[0] in shared)  # stable: own order kept
        for name, f in ordered:
            rows.append(
                {
                    "name": name,
                    "type": _type_name(f.annotation),
                    "required": f.is_required(),
                    "default": None if f.is_required() else f.get_default(call_default_factory=True),
                    "doc": f.description or "",
                }
            )
        return rows

    def as_json(self) -> dict[str, Any]:
        """Every field (defaults included) as JSON values, the form recorded in ``summary.json``."""
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """sha256 (hex, first 16 characters) of the strategy name and :meth:`as_json` as canonical
        JSON; equal for equal effective options however they were given."""
        text = json.dumps({"strategy": self.strategy, **self.as_json()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class BudgetedConfig(StrategyConfig):
    """A strategy config with hard caps of its own (``auto``, ``mempilot``). A question runs under
    the caller's budget made stricter, cap by cap, by these
    (:func:`memfrontier.strategies.base.effective_budget`), in the strategy's work and in the
    answer call alike."""

    budget: Budget | None = Field(
        None,
        description="Hard caps {max_usd, max_tokens, max_proxy_s} per question (USD, tokens, latency-proxy "
        "seconds), combined with the caller's (the tighter cap wins) for the strategy's calls and the answer's.",
    )


def parse_assignment(model: type[BaseModel], text: str) -> tuple[tuple[str, ...], Any]:
    """``"key=value"`` (``--set``, for a strategy's config or a trainer's) as ``(key path, value)``
    for ``model``'s fields. The key may use ``-`` for ``_`` and dots for a nested field
    (``budget.max_usd=0.01``); the value is read as YAML (``3``, ``2.5``, ``true``, ``null``,
    ``[dense]``, ``{quality: 1, cost: 2}``), except that a number or boolean given to a text-only
    field stays text (``rollout_key=7``). Raises ValueError: no ``=``, or a key ``model`` does not
    have (its keys are listed)."""
    import yaml

    key, sep, raw = text.partition("=")
    path = tuple(p.strip().replace("-", "_") for p in key.split("."))
    if not sep or not all(path):
        raise ValueError(f"--set takes KEY=VALUE, got {text!r}")
    field = model.model_fields.get(path[0])
    if field is None:
        raise ValueError(f"unknown key {path[0]!r}; keys: {', '.join(model.model_fields) or '(none)'}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    if (
        len(path) == 1
        and isinstance(value, (bool, int, float))
        and not _accepts_scalar(field.annotation, value)
        and {str, Path} & set(_leaves(field.annotation))
    ):
        value = raw
    return path, value


def _literal_values(tp) -> tuple[Any, ...]:
    if typing.get_origin(tp) is typing.Literal:
        return typing.get_args(tp)
    out: tuple[Any, ...] = ()
    for arg in typing.get_args(tp):
        if typing.get_origin(arg) is typing.Literal:
            out += typing.get_args(arg)
    return out


def _leaves(tp) -> tuple:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _leaves(typing.get_args(tp)[0])
    if origin is typing.Union or isinstance(tp, types.UnionType):
        return tuple(x for a in typing.get_args(tp) for x in _leaves(a))
    if origin is typing.Literal:
        return tuple(type(v) for v in typing.get_args(tp))
    return (tp,)


def _accepts_scalar(tp, value) -> bool:
    """Whether a field of type ``tp`` takes ``value``'s Python type (bool, int or float) as such."""
    leaves = {origin if (origin := typing.get_origin(t)) else t for t in _leaves(tp)}
    if isinstance(value, bool):
        return bool in leaves
    if isinstance(value, int):
        return bool(leaves & {int, float})
    return float in leaves


def _type_name(tp) -> str:
    """A short readable type: ``int``, ``'low' | 'mid'``, ``path | None``, ``list of 'dense' | 'bm25'``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(v) for v in args)
    if origin is typing.Union or isinstance(tp, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (tuple, list):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "map" if not args else f"map {_type_name(args[0])} -> {_type_name(args[1])}"
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and issubclass(tp, Path):
        return "path"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "map {" + ", ".join(tp.model_fields) + "}"
    return getattr(tp, "__name__", str(tp))

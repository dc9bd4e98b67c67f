"""The base of every strategy's config (TRL's pattern: one pydantic ``Config`` per algorithm).

A config holds a strategy's serialisable options, each field documented (type, default, unit, the
paper's section or equation). Defaults equal the strategy constructor's defaults. Configs are
frozen, reject unknown keys (``extra="forbid"``) and take numbers strictly (:data:`Int` /
:data:`Float`: ``k=2.5``, ``k="2"`` or ``k=True`` is an error, not 2 or 1); paths and choices may be
given as strings (JSON, YAML, ``--set``). :meth:`StrategyConfig.from_options` turns a ``ValidationError`` into a
:class:`StrategyConfigError` whose message names the key and, for a choice, the allowed values.

``memfrontier eval --set key=value`` / ``--strategy-config FILE`` and ``memfrontier config NAME``
read these classes; ``summary.json`` records the config and its :meth:`~StrategyConfig.config_hash`.
"""

from __future__ import annotations

import hashlib
import json
import typing
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, ValidationError

#: Field types for numbers: a bool, a string or (for Int) a fractional float is rejected.
Int = StrictInt
Float = StrictFloat


class StrategyConfigError(ValueError):
    """Options that the strategy's config rejects (unknown key, wrong type, value outside the
    allowed ones). The message names the strategy, the key and what is allowed."""


class StrategyConfig(BaseModel):
    """Options of one strategy. Subclasses set :attr:`strategy` (the registry name)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    strategy: ClassVar[str] = ""

    @classmethod
    def from_options(cls, options: dict[str, Any] | None = None, /, **more: Any) -> "StrategyConfig":
        """Validate ``options`` (Python or JSON values: paths and enum values may be strings).

        Raises:
            StrategyConfigError: naming each bad key with what it accepts.
        """
        data = {**(options or {}), **more}
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise StrategyConfigError(cls._explain(e)) from None

    @classmethod
    def _explain(cls, e: ValidationError) -> str:
        by_key: dict[str, list[dict]] = {}
        for err in e.errors():
            by_key.setdefault(str(err["loc"][0]) if err["loc"] else "", []).append(err)
        parts = []
        for key, errs in by_key.items():
            first = errs[0]
            if first["type"] == "extra_forbidden":
                parts.append(f"unknown key {key!r}; keys: {', '.join(cls.model_fields) or '(none)'}")
                continue
            allowed = cls.allowed(key)
            given = first.get("input")
            if not key:
                parts.append(first["msg"].removeprefix("Value error, "))
            elif allowed and (isinstance(given, str) or all(x["type"] == "literal_error" for x in errs)):
                parts.append(f"{key}={given!r} is not allowed; choose one of: {', '.join(map(str, allowed))}")
            else:
                sub = ".".join(str(p) for p in first["loc"][1:] if not str(p).startswith(("literal[", "dict[")))
                where = f"{key}.{sub}" if sub else key
                msg = first["msg"].removeprefix("Value error, ")
                parts.append(f"{where}={given!r}: {msg}" if not isinstance(given, dict) else f"{where}: {msg}")
        return f"strategy {cls.strategy}: " + "; ".join(parts)

    @classmethod
    def allowed(cls, key: str) -> tuple[Any, ...]:
        """The values a ``Literal``-typed field accepts (``()`` for free-form fields)."""
        field = cls.model_fields.get(key)
        return _literal_values(field.annotation) if field is not None else ()

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """One row per field: ``name``, ``type``, ``default`` and ``doc`` (for ``--help`` and
        ``memfrontier config``)."""
        rows = []
        for name, f in cls.model_fields.items():
            rows.append({"name": name, "type": _type_name(f.annotation),
                         "default": None if f.is_required() else f.get_default(call_default_factory=True),
                         "doc": f.description or ""})
        return rows

    def options(self) -> dict[str, Any]:
        """The constructor keyword arguments (Python values; paths as ``str``)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.model_dump().items()}

    def as_json(self) -> dict[str, Any]:
        """Every field (defaults included) as JSON values, the form recorded in ``summary.json``."""
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """sha256 (hex, first 16 characters) of the strategy name and :meth:`as_json` as canonical
        JSON; equal for equal effective options however they were given."""
        text = json.dumps({"strategy": self.strategy, **self.as_json()}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _literal_values(tp) -> tuple[Any, ...]:
    if typing.get_origin(tp) is typing.Literal:
        return typing.get_args(tp)
    out: tuple[Any, ...] = ()
    for arg in typing.get_args(tp):
        if typing.get_origin(arg) is typing.Literal:
            out += typing.get_args(arg)
    return out


def _type_name(tp) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(repr(v) for v in typing.get_args(tp))
    text = getattr(tp, "__name__", None) if typing.get_origin(tp) is None else None
    return text or str(tp).replace("typing.", "").replace("pathlib.", "")

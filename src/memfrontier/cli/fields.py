"""Command-line options as data: blocks of parameters (the run block, the strategy options, a
trainer config's fields) that typer builds from a signature (:func:`params_of`), added to a command
by the command class it is declared with (``@app.command(cls=with_blocks(...))``); the command reads
each block's values from its context (:func:`block`, :func:`given`).

:func:`model_options` generates the options of a pydantic model, one per field, in the style of
TRL's ``HfArgumentParser``: the flag is the field's name (``--batch-questions``; a field may name
another with ``json_schema_extra={"flag": "--lambda"}``), the help is the field's description and
its default. ``bool``: a flag ``--x`` when the default is False, ``--x/--no-x`` when it is True;
``int``, ``float``, ``str``, ``Path``, ``Literal`` (as text), optional or not: one value;
``list[scalar]``: the flag repeated; anything else (a mapping, a preset name or weights): one value
read as YAML. Types and bounds are checked by the model itself.

:func:`model_values` gathers the model's input from (in increasing precedence) a ``--config`` file,
the options given on the command line and ``--set KEY=VALUE`` (nested keys with dots); fields given
nowhere keep the model's default, so a default lives only on the model and a field is declared once.
"""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any, Literal, Optional

import typer
from pydantic import BaseModel
from typer.core import TyperCommand

from ..strategies.config import parse_assignment

#: ``ctx.meta`` key under which :class:`BlockCommand` leaves each block's values.
META_KEY = "memfrontier.blocks"


def params_of(fn) -> list:
    """The parameters typer builds for ``fn``'s signature (its parameters' defaults are
    ``typer.Option(...)``): typer's own parameter objects, ready to add to another command."""
    one = typer.Typer(add_completion=False)
    one.command()(fn)
    return list(typer.main.get_command(one).params)


class BlockCommand(TyperCommand):
    """A typer command with extra blocks of parameters (class attribute ``blocks``: name -> list of
    :func:`params_of` parameters), appended after the command's own. The values of a block are taken
    out of the command's parameters and left, as ``{param name: value}``, in ``ctx.meta``; the
    command reads them with :func:`block` (and which were given with :func:`given`)."""

    blocks: dict[str, list] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for params in self.blocks.values():
            self.params.extend(params)

    def invoke(self, ctx):
        meta = ctx.meta.setdefault(META_KEY, {})
        for name, params in self.blocks.items():
            meta[name + ".given"] = {
                p.name
                for p in params
                if getattr(ctx.get_parameter_source(p.name), "name", "") in ("COMMANDLINE", "ENVIRONMENT")
            }
            meta[name] = {p.name: ctx.params.pop(p.name) for p in params}
        return super().invoke(ctx)


def with_blocks(**blocks: list) -> type[BlockCommand]:
    """The command class of a command with these parameter blocks (``cls=`` of ``app.command``)."""
    return type("BlockCommand", (BlockCommand,), {"blocks": blocks})


def block(ctx: typer.Context, name: str) -> dict[str, Any]:
    """The values of block ``name`` of the running command, by parameter name."""
    return dict(ctx.meta[META_KEY][name])


def given(ctx: typer.Context, name: str) -> set[str]:
    """The parameters of block ``name`` given on the command line (or by environment variable)."""
    return set(ctx.meta[META_KEY][name + ".given"])


# --- options of a pydantic model --------------------------------------------------------------
SCALARS = (bool, int, float, str, Path)


def _unwrap_optional(tp):
    """The type without ``None``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _cli_type(tp) -> tuple[Any, bool]:
    """(annotation typer reads, whether the value is YAML to parse) for a field's annotation."""
    tp = _unwrap_optional(tp)
    if typing.get_origin(tp) is Literal:
        return str, False
    if typing.get_origin(tp) is list and len(typing.get_args(tp)) == 1 and typing.get_args(tp)[0] in SCALARS:
        return list[typing.get_args(tp)[0]], False
    if tp in SCALARS:
        return tp, False
    return str, True


def _yaml_value(value: str | None):
    import yaml

    if value is None:
        return None
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _shown(default):
    """A default as the help shows it: paths as written (``runs/sft``, not ``PosixPath(...)``)."""
    if isinstance(default, Path):
        return default.as_posix()
    if isinstance(default, (list, tuple)) and default and all(isinstance(d, Path) for d in default):
        return ", ".join(d.as_posix() for d in default)
    return default


def _set_example(model) -> str:
    """A ``--set`` example that fits ``model``: its first nested field's first key when it has one,
    else its first field with a number, flag or text default (``--set preference.quality=1``,
    ``--set epochs=8``)."""
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and sub.model_fields:
            key, inner = next(iter(sub.model_fields.items()))
            return f"--set {name}.{key}={_example_value(inner)}"
    scalar = [
        (n, f)
        for n, f in model.model_fields.items()
        if isinstance(f.get_default(call_default_factory=True), (bool, int, float, str))
    ]
    name, field = scalar[0] if scalar else next(iter(model.model_fields.items()))
    return f"--set {name}={_example_value(field)}"


def _example_value(field) -> str:
    default = field.get_default(call_default_factory=True)
    if isinstance(default, bool):
        return "true" if not default else "false"
    if isinstance(default, (int, float, str)) and default != "":
        return str(default)
    return "VALUE"


def model_options(model) -> list:
    """The parameters of pydantic ``model``'s fields (see the module docstring), plus ``--config
    FILE`` and ``--set KEY=VALUE``. Every option's default is None ("not given"): the model's
    default applies, and the help shows it. Built by typer from a generated signature (one
    parameter per field), so they render and parse as any typer option."""
    params: list[inspect.Parameter] = []
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flag = extra.get("flag", "--" + name.replace("_", "-"))
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        doc = (field.description or "").rstrip(".")
        tp, yaml_value = _cli_type(field.annotation)
        if yaml_value:
            doc += " (YAML)"
        if field.is_required():
            help_ = f"{doc}. Required."
        elif default is not None:
            help_ = f"{doc}. Default: {_shown(default)}."
        else:
            help_ = f"{doc}."
        if tp is bool:
            decl = flag if default is False else f"{flag}/--no-{flag[2:]}"
        else:
            decl = flag
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Optional[tp],
                default=typer.Option(
                    None, decl, help=help_, show_default=False, metavar="YAML" if yaml_value else None
                ),
            )
        )
    params.append(
        inspect.Parameter(
            "config_file",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Optional[Path],
            default=typer.Option(
                None,
                "--config",
                metavar="FILE",
                help=(
                    "A YAML or JSON file of these options (keys: the field names); the options "
                    "above and --set override it."
                ),
            ),
        )
    )
    params.append(
        inspect.Parameter(
            "set_options",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Optional[list[str]],
            default=typer.Option(
                None,
                "--set",
                metavar="KEY=VALUE",
                help=(
                    "Any field, nested ones too (repeatable; value read as YAML, nested keys with "
                    f"dots), e.g. {_set_example(model)}."
                ),
            ),
        )
    )

    def fields():  # a signature only: typer builds the parameters from it
        pass

    fields.__signature__ = inspect.Signature(params)
    fields.__annotations__ = {p.name: p.annotation for p in params}
    return params_of(fields)


def put(options: dict, path: tuple[str, ...], value) -> None:
    """Set ``options[path[0]][path[1]]... = value``, creating (copies of) the nested mappings."""
    for part in path[:-1]:
        nested = options.get(part)
        options[part] = nested = dict(nested) if isinstance(nested, dict) else {}
        options = nested
    options[path[-1]] = value


def read_mapping(path: Path, flag: str = "--config") -> dict:
    """A YAML/JSON file holding a mapping (empty file: ``{}``); FileNotFoundError / ValueError."""
    import yaml

    if not Path(path).is_file():
        raise FileNotFoundError(f"{flag} {path}: no such file")
    try:
        data = yaml.safe_load(Path(path).read_text("utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"{flag} {path}: not YAML/JSON ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{flag} {path}: expected a mapping of options, got {type(data).__name__}")
    return data


def model_values(model, values: dict[str, Any], given_names: set[str]) -> dict[str, Any]:
    """The field values of ``model`` from a :func:`model_options` block: the ``--config`` file's, then the options
    given on the command line, then ``--set``; fields given nowhere are left out (their default
    applies). Raises FileNotFoundError / ValueError for a bad file or assignment."""
    out: dict[str, Any] = {}
    if values.get("config_file") is not None:
        out.update(read_mapping(values["config_file"]))
    for name, value in values.items():
        if name in ("config_file", "set_options") or name not in given_names:
            continue
        if isinstance(value, tuple):
            value = list(value)
        if _cli_type(model.model_fields[name].annotation)[1]:
            value = _yaml_value(value)
        out[name] = value
    for text in values.get("set_options") or ():
        put(out, *parse_assignment(model, text))
    return out

"""The frontier's list of configurations: a YAML file of ``{label, strategy, options, requires}``
entries (a default one ships next to this module as ``default.yaml``). ``strategy`` may be a named
configuration (:mod:`memfrontier.strategies.named`), read as its strategy and options.

``requires`` lists what a configuration needs besides the run's options: a file path (a trained
router checkpoint) or ``model:NAME``, an embedded model of the registry
(:data:`memfrontier.llm.local_models.LOCAL_MODELS`, e.g. ``model:qwen2.5-1.5b``). A configuration
with an unmet requirement is reported as not run, with what is missing and, for a model, the
command that installs it (:meth:`FrontierConfig.unmet`) - never run with something else.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import explain_validation
from ..llm.local_models import INSTALL_HINT, is_installed, resolve_local
from ..strategies.named import resolve_named

DEFAULT_SPEC = Path(__file__).with_name("default.yaml")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Prefix of a ``requires`` entry that names an embedded model instead of a file.
MODEL_REQUIREMENT = "model:"


class FrontierConfig(BaseModel):
    """One configuration: a strategy with its options, under a label that names its output folder."""

    model_config = ConfigDict(extra="forbid")
    label: str
    strategy: str
    options: dict = Field(default_factory=dict)
    #: files (a trained router) and ``model:NAME`` embedded models the configuration needs;
    #: an unmet one marks it "not run"
    requires: list[str] = Field(default_factory=list)

    @field_validator("label")
    @classmethod
    def _label_is_a_folder_name(cls, v: str) -> str:
        if not _LABEL.match(v):
            raise ValueError(f"label {v!r} must be 1-64 characters of letters, digits, '.', '_' or '-'")
        return v

    @model_validator(mode="after")
    def _named_configuration(self):
        """``strategy: rag-turns-rr`` (a named configuration) is that strategy with its options,
        under those given: the run is the one that spells them out."""
        self.strategy, self.options = resolve_named(self.strategy, self.options)
        return self

    @field_validator("requires")
    @classmethod
    def _registered_models(cls, v: list[str]) -> list[str]:
        for r in v:
            if r.startswith(MODEL_REQUIREMENT):
                resolve_local(r[len(MODEL_REQUIREMENT) :])  # ValueError naming the known models
        return v

    def unmet(self) -> str | None:
        """Why the configuration cannot run here, or None: ``"missing PATH, ..."`` for absent files,
        ``"model(s) NAME, ... not installed; install with: make bench-model (...)"`` for embedded
        models that are not installed (both joined by ``"; "``)."""
        files = [r for r in self.requires if not r.startswith(MODEL_REQUIREMENT) and not Path(r).exists()]
        models = [
            r[len(MODEL_REQUIREMENT) :]
            for r in self.requires
            if r.startswith(MODEL_REQUIREMENT) and not is_installed(r[len(MODEL_REQUIREMENT) :])
        ]
        why = []
        if files:
            why.append(f"missing {', '.join(files)}")
        if models:
            why.append(
                f"model{'s' if len(models) > 1 else ''} {', '.join(models)} not installed; install with: {INSTALL_HINT}"
            )
        return "; ".join(why) or None

    def family(self) -> str:
        """The strategy family a plot colours by (``rag-k4`` and ``rag`` are both ``rag``)."""
        return self.strategy


class FrontierSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "frontier"
    configurations: list[FrontierConfig]

    @field_validator("configurations")
    @classmethod
    def _unique_labels(cls, v: list[FrontierConfig]) -> list[FrontierConfig]:
        seen: set[str] = set()
        for c in v:
            if c.label in seen:
                raise ValueError(f"label {c.label!r} appears twice")
            seen.add(c.label)
        if not v:
            raise ValueError("a frontier needs at least one configuration")
        return v

    def select(self, labels: list[str] | None) -> list[FrontierConfig]:
        """The configurations named in ``labels``, in that order (all when None); raises
        ValueError for an unknown or repeated label, or an empty list."""
        if labels is None:
            return list(self.configurations)
        if not labels:
            raise ValueError("no configuration named (an empty --only)")
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ValueError(f"configuration(s) named twice: {', '.join(twice)}")
        known = {c.label: c for c in self.configurations}
        unknown = [x for x in labels if x not in known]
        if unknown:
            raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; the spec has {', '.join(known)}")
        return [known[x] for x in labels]


def load_spec(path: str | Path | None = None) -> FrontierSpec:
    """Read a spec file (YAML or JSON); the shipped default when ``path`` is None.

    Raises ValueError naming the file and the problem for an unreadable file (missing, not UTF-8,
    not YAML) or an invalid spec (one line per field, see :func:`explain_validation`).
    """
    p = Path(path) if path is not None else DEFAULT_SPEC
    try:
        raw = yaml.safe_load(p.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read frontier spec {p}: {e}") from e
    try:
        return FrontierSpec.model_validate(raw)
    except ValidationError as e:
        raise ValueError(explain_validation(f"frontier spec {p}", e)) from None

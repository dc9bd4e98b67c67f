"""The strategy-router file: a versioned JSON document (no pickle, no code) holding, per
configuration, one linear model per target with its calibration, plus the feature spec, the
objective scales and the training provenance. Written by ``memfrontier train strategy-router``
(:mod:`memfrontier.train.strategy_router`), read by the ``auto`` strategy.

Layout (``format`` = :data:`ROUTER_FORMAT`, ``version`` = :data:`ROUTER_VERSION`)::

    features        {version, embedding_model, embedding_dim, scalars}   see :mod:`.features`
    scales          {f1, usd, proxy_s}   objective scales of the decision (:class:`.decision.Scales`)
    configurations  [{label, strategy, options, models: {f1, usd, proxy_s, tokens}}]
    provenance      where the training records came from (frontier, split, models, seed, commit...)
    validation      the held-out validation report (per configuration MAE, regret per preference)

A target's model is ``y = coef . x + intercept`` on the raw feature vector x (the standardisation
used in training is folded into ``coef``/``intercept``; ridge regression). F1 then goes through its
isotonic calibration (``calibration``: piecewise-linear through the points (x_i, y_i), constant
beyond the ends) and is clipped to [0, 1]; USD, seconds and tokens are clipped at 0, and their upper
bound adds ``upper_margin`` (a high quantile of the out-of-fold residuals).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...core.errors import ArtifactError
from ...core.jsonio import write_json_atomic
from .decision import Prediction, Scales
from .features import FEATURE_VERSION, SCALAR_FEATURES

ROUTER_FORMAT = "memfrontier.strategy-router"
#: The file version this code reads and writes; another version is refused (retrain).
ROUTER_VERSION = 1
#: Predicted per configuration and question: F1, USD, latency-proxy seconds, query tokens.
TARGETS = ("f1", "usd", "proxy_s", "tokens")
#: The targets a budget caps (each has an upper bound).
RESOURCES = ("usd", "proxy_s", "tokens")


class RouterFileError(ArtifactError):
    """A router file that cannot be used: not JSON, another format or version, inconsistent
    shapes, or features this code does not compute. The message names the file and the problem."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Calibration(_Model):
    """Isotonic calibration as its breakpoints: ``y = interp(raw, x, y)``; ``x`` non-decreasing."""

    x: list[float] = Field(min_length=1)
    y: list[float] = Field(min_length=1)

    @model_validator(mode="after")
    def _shape(self):
        if len(self.x) != len(self.y):
            raise ValueError("calibration x and y differ in length")
        if any(b < a for a, b in zip(self.x, self.x[1:])):
            raise ValueError("calibration x must be non-decreasing")
        return self


class TargetModel(_Model):
    """One target's linear model on the raw feature vector (ridge regression, scaling folded in)."""

    coef: list[float]
    intercept: float
    alpha: float | None = Field(None, description="Ridge penalty chosen in training (recorded).")
    calibration: Calibration | None = None
    upper_margin: float = Field(0.0, ge=0.0, description="Added to the prediction for its upper bound.")


class RouterConfiguration(_Model):
    """A configuration the router can choose: the strategy and options it runs with, and its models."""

    label: str = Field(min_length=1)
    strategy: str
    options: dict = Field(default_factory=dict)
    models: dict[str, TargetModel]

    @field_validator("models")
    @classmethod
    def _every_target(cls, v: dict) -> dict:
        if set(v) != set(TARGETS):
            raise ValueError(f"models must be exactly {', '.join(TARGETS)}; got {', '.join(sorted(v))}")
        return v


class FeatureSpec(_Model):
    version: int
    embedding_model: str
    embedding_dim: int = Field(ge=1)
    scalars: list[str]

    @property
    def dim(self) -> int:
        return self.embedding_dim + len(self.scalars)


class ScaleSpec(_Model):
    f1: float = Field(gt=0)
    usd: float = Field(gt=0)
    proxy_s: float = Field(gt=0)


class RouterFile(_Model):
    """The whole file (see the module docstring)."""

    format: str = ROUTER_FORMAT
    version: int = ROUTER_VERSION
    features: FeatureSpec
    scales: ScaleSpec
    configurations: list[RouterConfiguration] = Field(min_length=1)
    provenance: dict = Field(default_factory=dict)
    validation: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self):
        labels = [c.label for c in self.configurations]
        if len(set(labels)) != len(labels):
            raise ValueError(f"configuration labels repeat: {labels}")
        for c in self.configurations:
            if c.strategy == "auto":
                raise ValueError(f"configuration {c.label}: a router cannot route to another router")
            for t, m in c.models.items():
                if len(m.coef) != self.features.dim:
                    raise ValueError(
                        f"configuration {c.label}, target {t}: {len(m.coef)} coefficients for "
                        f"{self.features.dim} features"
                    )
        return self


def read_router_file(path: str | Path) -> RouterFile:
    """Parse and check a router file.

    Raises:
        FileNotFoundError: no such file.
        RouterFileError: not JSON, not a router file, another version, another feature definition,
            or inconsistent contents.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"no router file {p} (train one with `memfrontier train strategy-router --from FRONTIER_DIR`)"
        )
    try:
        raw = json.loads(p.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RouterFileError(f"{p} is not a readable router file: {e}") from None
    if not isinstance(raw, dict) or raw.get("format") != ROUTER_FORMAT:
        raise RouterFileError(f"{p} is not a memfrontier strategy-router file (format {ROUTER_FORMAT!r})")
    if raw.get("version") != ROUTER_VERSION:
        raise RouterFileError(
            f"{p}: router file version {raw.get('version')!r}, this code reads version {ROUTER_VERSION}; "
            f"retrain it with `memfrontier train strategy-router`"
        )
    try:
        rf = RouterFile.model_validate(raw)
    except ValidationError as e:
        raise RouterFileError(f"{p}: invalid router file: {e}") from None
    if rf.features.version != FEATURE_VERSION or tuple(rf.features.scalars) != SCALAR_FEATURES:
        raise RouterFileError(
            f"{p}: fit on feature version {rf.features.version} ({', '.join(rf.features.scalars)}); "
            f"this code computes version {FEATURE_VERSION}; retrain it"
        )
    return rf


def write_router_file(rf: RouterFile, path: str | Path) -> Path:
    """Write ``rf`` as JSON, atomically (parent folders created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(p, rf.model_dump(mode="json"))
    return p


class Router:
    """A router file compiled for prediction: one matrix product per question.

    ``predict(x)`` takes one feature vector (shape ``(features.dim,)``) and returns a
    :class:`Prediction` per configuration, in file order; ``predict_many(X)`` takes ``(n, dim)``
    and returns ``{target: (n, K)}`` arrays (calibrated and clipped) plus ``{resource}_high``.
    """

    def __init__(self, file: RouterFile, sha256: str | None = None):
        self.file = file
        self.sha256 = sha256
        self.labels = [c.label for c in file.configurations]
        self.scales = Scales(file.scales.f1, file.scales.usd, file.scales.proxy_s)
        k, d = len(self.labels), file.features.dim
        self._w = np.zeros((len(TARGETS), k, d))
        self._b = np.zeros((len(TARGETS), k))
        self._margin = np.zeros((len(TARGETS), k))
        self._calib: list[tuple[np.ndarray, np.ndarray] | None] = []
        for j, c in enumerate(file.configurations):
            for t, name in enumerate(TARGETS):
                m = c.models[name]
                self._w[t, j] = m.coef
                self._b[t, j] = m.intercept
                self._margin[t, j] = m.upper_margin
            cal = c.models["f1"].calibration
            self._calib.append(None if cal is None else (np.asarray(cal.x), np.asarray(cal.y)))
        self._w_flat = self._w.reshape(len(TARGETS) * k, d)
        self._b_flat = self._b.reshape(-1)

    @classmethod
    def load(cls, path: str | Path) -> "Router":
        """:func:`read_router_file` plus the file's sha256 (recorded with every decision)."""
        rf = read_router_file(path)
        return cls(rf, hashlib.sha256(Path(path).read_bytes()).hexdigest())

    @property
    def dim(self) -> int:
        return self.file.features.dim

    def predict_many(self, x: np.ndarray) -> dict[str, np.ndarray]:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"features must have shape (n, {self.dim}), got {x.shape}")
        k = len(self.labels)
        raw = (x @ self._w_flat.T + self._b_flat).reshape(x.shape[0], len(TARGETS), k)
        out: dict[str, np.ndarray] = {}
        f1 = raw[:, 0, :].copy()
        for j, cal in enumerate(self._calib):
            if cal is not None:
                f1[:, j] = np.interp(f1[:, j], cal[0], cal[1])
        out["f1"] = np.clip(f1, 0.0, 1.0)
        for t, name in enumerate(TARGETS[1:], start=1):
            out[name] = np.maximum(raw[:, t, :], 0.0)
            out[f"{name}_high"] = out[name] + self._margin[t]
        return out

    def predict(self, x: np.ndarray) -> list[Prediction]:
        return as_predictions(self.labels, self.predict_many(np.asarray(x, dtype=np.float64)[None, :]), 0)

    def configuration(self, label: str) -> RouterConfiguration:
        return self.file.configurations[self.labels.index(label)]


def as_predictions(labels: Sequence[str], row: dict[str, np.ndarray], i: int) -> list[Prediction]:
    """Row ``i`` of :meth:`Router.predict_many`'s output as :class:`Prediction` objects."""
    keys = ("f1", "usd", "proxy_s", "tokens", "usd_high", "proxy_s_high", "tokens_high")
    return [Prediction(label, *(float(row[k][i, j]) for k in keys)) for j, label in enumerate(labels)]


__all__ = [
    "RESOURCES",
    "ROUTER_FORMAT",
    "ROUTER_VERSION",
    "TARGETS",
    "Calibration",
    "FeatureSpec",
    "Router",
    "RouterConfiguration",
    "RouterFile",
    "RouterFileError",
    "ScaleSpec",
    "TargetModel",
    "as_predictions",
    "read_router_file",
    "write_router_file",
]

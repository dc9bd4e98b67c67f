"""Strategy-router files written by hand: every model an intercept plus named scalar-feature
coefficients (the embedding's weights zero), so what the router predicts is known exactly."""

from __future__ import annotations

from pathlib import Path

from memfrontier.embed.minilm import MINILM_MODEL_ID
from memfrontier.strategies.auto.features import FEATURE_VERSION, SCALAR_FEATURES
from memfrontier.strategies.auto.router import (
    TARGETS,
    FeatureSpec,
    RouterConfiguration,
    RouterFile,
    ScaleSpec,
    TargetModel,
    write_router_file,
)

DIM = 384


def target(intercept: float, margin: float = 0.0, **coef: float) -> TargetModel:
    """``intercept + sum(coef[name] * feature[name])`` over scalar features named in ``coef``."""
    w = [0.0] * (DIM + len(SCALAR_FEATURES))
    for name, v in coef.items():
        w[DIM + SCALAR_FEATURES.index(name)] = v
    return TargetModel(coef=w, intercept=intercept, upper_margin=margin)


def config(label: str, strategy: str, options: dict | None = None, **models: TargetModel) -> RouterConfiguration:
    """A configuration whose unnamed targets predict 0."""
    return RouterConfiguration(
        label=label, strategy=strategy, options=options or {}, models={t: models.get(t, target(0.0)) for t in TARGETS}
    )


def write_router(
    path: Path, *configs: RouterConfiguration, scales: tuple[float, float, float] = (1.0, 1e-4, 1.0)
) -> Path:
    rf = RouterFile(
        features=FeatureSpec(
            version=FEATURE_VERSION, embedding_model=MINILM_MODEL_ID, embedding_dim=DIM, scalars=list(SCALAR_FEATURES)
        ),
        scales=ScaleSpec(f1=scales[0], usd=scales[1], proxy_s=scales[2]),
        configurations=list(configs),
        provenance={"written_by": "tests"},
    )
    return write_router_file(rf, path)

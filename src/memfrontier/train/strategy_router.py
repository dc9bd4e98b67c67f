"""Train the ``auto`` strategy's router from a frontier run's per-question records.

Protocol (``memfrontier train strategy-router --from FRONTIER_DIR``):

* records: ``FRONTIER_DIR/configs/<label>/predictions.jsonl`` of every finished configuration
  (``summary.json`` present), one row per question with its F1, USD, latency-proxy seconds and
  query tokens. Left out, each with the reason in the report: the gold-evidence anchor
  (``oracle``, not deployable), ``auto`` runs, runs refused for fallbacks, runs with unpriced calls.
  At least two configurations must remain.
* never the test split: a run of split ``test`` or any LoCoMo row of conv-49 / conv-50 raises
  :class:`TestSplitError`;
* questions: those every kept configuration answered (LoCoMo category 5, scored apart as
  abstention, left out); a category-balanced validation share (``val_share``, round-robin over
  categories with ``seed``: :func:`~memfrontier.eval.runner.stratified_sample`) is held out;
* features: :func:`~memfrontier.strategies.auto.features.feature_vector` with the frontier's store
  (MiniLM query embedding, scope size); ``views_built`` is 1.0, since the frontier built each
  configuration's views before asking its questions;
* per configuration and target (F1, USD, proxy seconds, tokens): ridge regression on standardised
  features (scikit-learn ``RidgeCV``, penalty chosen by leave-one-out among :data:`ALPHAS`; below
  :data:`MIN_CV` training questions a fixed penalty :data:`FALLBACK_ALPHA`). F1 is calibrated by
  isotonic regression fit on 5-fold out-of-fold predictions; each resource's upper bound adds the
  :data:`UPPER_QUANTILE` quantile of its out-of-fold residuals;
* objective scales of the decision: the standard deviation of F1, USD and proxy seconds over the
  training records (all configurations);
* validation (held-out questions, through the written model): per configuration the mean absolute
  error of F1, USD, seconds and tokens; per preference preset the router's regret against the
  per-question oracle choice (the configuration of highest realised utility), beside the best
  single configuration's.

Outputs: the router file (:mod:`memfrontier.strategies.auto.router`) and, next to it,
``<name>.validation.json`` and ``<name>.validation.md``.

Its length (over 500 lines) is one trainer's protocol: records, the test-split guard, features,
the fit and its validation report.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.extras import require_extra
from ..core.jsonio import read_jsonl_objects, write_json_atomic, write_text_atomic
from ..core.provenance import provenance
from ..core.types import Preference, Question, Scope
from ..eval.datasets.locomo import TEST_CONVERSATIONS
from ..eval.datasets.sampling import stratified_sample
from ..eval.metrics import LOCOMO_EXCLUDED
from ..strategies.auto.decision import decide, utility
from ..strategies.auto.features import (
    FEATURE_VERSION,
    SCALAR_FEATURES,
    ScopeStats,
    feature_vector,
    scope_stats,
)
from ..strategies.auto.router import (
    TARGETS,
    Calibration,
    FeatureSpec,
    Router,
    RouterConfiguration,
    RouterFile,
    ScaleSpec,
    TargetModel,
    as_predictions,
    write_router_file,
)
from .configs import StrategyRouterConfig

#: Ridge penalties RidgeCV chooses among (leave-one-out).
ALPHAS = tuple(float(a) for a in np.logspace(-2, 4, 13))
#: Fewer training questions than this: no penalty search, ``FALLBACK_ALPHA``.
MIN_CV = 10
FALLBACK_ALPHA = 10.0
#: Quantile of the out-of-fold residuals added to a resource prediction for its upper bound.
UPPER_QUANTILE = 0.9
FOLDS = 5
#: The fewest questions a configuration needs for a measurement; fewer is trained, with a note.
MIN_QUESTIONS = 150
#: Strategies that read gold information: never a configuration to route to.
ANCHORS = frozenset({"oracle"})
PRESETS = ("perf", "balanced", "cost")


class TestSplitError(ValueError):
    """Training records that come from the test split (a split ``test`` run, LoCoMo conv-49/conv-50)."""

    __test__ = False  # not a pytest class


@dataclass
class ConfigRecords:
    """One frontier configuration's run: its label, strategy, options, summary and rows by question id."""

    label: str
    strategy: str
    options: dict
    summary: dict
    rows: dict[str, dict]


def _spec_order(frontier_dir: Path) -> list[str]:
    report = frontier_dir / "frontier.json"
    if report.is_file():
        try:
            return [c["label"] for c in json.loads(report.read_text("utf-8")).get("spec", {}).get("configurations", [])]
        except (ValueError, KeyError, TypeError):
            return []
    return []


def read_frontier(frontier_dir: str | Path, labels: list[str] | None = None) -> tuple[list[ConfigRecords], list[str]]:
    """The configurations of a frontier folder usable as training records, and notes on those left
    out (see the module docstring). ``labels``: exactly these configurations (an unusable one is an
    error, not a note).

    Raises:
        FileNotFoundError: no ``configs/`` folder.
        TestSplitError: a run on the test split.
        ValueError: an unknown or unusable label, or fewer than two usable configurations.
    """
    root = Path(frontier_dir)
    configs_dir = root / "configs"
    if not configs_dir.is_dir():
        raise FileNotFoundError(
            f"{root} is not a frontier output folder (no configs/); run `memfrontier frontier` first"
        )
    found = sorted(p.name for p in configs_dir.iterdir() if p.is_dir())
    order = [x for x in _spec_order(root) if x in found] + [x for x in found if x not in _spec_order(root)]
    if labels:
        if unknown := [x for x in labels if x not in found]:
            raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; {root} has {', '.join(found)}")
        order = list(labels)
    kept, notes = [], []
    for label in order:
        why, rec = _usable(configs_dir / label, label)
        if why is not None:
            if labels:
                raise ValueError(f"configuration {label} cannot train a router: {why}")
            notes.append(f"{label}: left out ({why})")
            continue
        kept.append(rec)
    if len(kept) < 2:
        raise ValueError(
            f"a router needs at least two configurations to choose from; {root} has "
            f"{len(kept)} usable ({'; '.join(notes) or 'none finished'})"
        )
    return kept, notes


def _usable(run_dir: Path, label: str) -> tuple[str | None, ConfigRecords | None]:
    if not (run_dir / "summary.json").is_file():
        return "not finished: no summary.json", None
    summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
    cfg = summary.get("config", {})
    strategy = cfg.get("strategy", "")
    rows = {obj["id"]: obj for _, obj in read_jsonl_objects(run_dir / "predictions.jsonl")}
    _refuse_test_split(label, cfg, rows)
    if strategy in ANCHORS:
        return f"{strategy} reads the gold evidence: an anchor, not a configuration to route to", None
    if strategy == "auto":
        return "a router's own run", None
    if exceeded := summary.get("fallbacks", {}).get("exceeded"):
        return f"model calls failed or fell back above the threshold in {', '.join(exceeded)}", None
    if any(r.get("unpriced_calls") for r in rows.values()):
        return "unpriced model calls: its USD is unknown", None
    return None, ConfigRecords(label, strategy, dict(cfg.get("strategy_options") or {}), summary, rows)


def _refuse_test_split(label: str, cfg: dict, rows: dict[str, dict]) -> None:
    """Raise :class:`TestSplitError` for a run of split ``test`` or LoCoMo rows of its test conversations."""
    why = None
    if cfg.get("split") == "test":
        why = "ran on the test split (split 'test')"
    elif cfg.get("dataset", "locomo") == "locomo" and (
        bad := sorted({r.get("conversation_id") for r in rows.values()} & set(TEST_CONVERSATIONS))
    ):
        why = f"answered questions of {', '.join(bad)}, LoCoMo's test split"
    if why:
        raise TestSplitError(
            f"configuration {label} {why}: a router is never trained on the test split "
            f"(run the training frontier with --split train)"
        )


def with_question_text(rows: dict[str, dict], run_config: dict) -> dict[str, dict]:
    """``rows`` (id -> prediction row), each with its ``question`` text: an exported run
    (:mod:`memfrontier.frontier.export`) keeps ids and scores, not the benchmark's text, so a row
    without it gets it from the run's dataset (``run_config``: the summary's ``config``: its data
    file or data root, else the default data folder, ``MEMFRONTIER_DATA``). The data is read only
    when a row lacks its text. Raises DatasetError (data missing) or ValueError naming a question
    id the data does not hold (another data file than the run's)."""
    missing = {i for i, r in rows.items() if not isinstance(r.get("question"), str)}
    if not missing:
        return rows
    from ..eval.datasets import load_dataset

    convs = load_dataset(
        run_config.get("dataset", "locomo"),
        run_config.get("split"),
        data_root=run_config.get("data_root"),
        data_file=run_config.get("data_file"),
    )
    text = {q.id: q.question for c in convs for q in c.questions}
    if unknown := sorted(i for i in missing if i not in text):
        raise ValueError(
            f"{len(unknown)} exported question id(s) are not in the run's data ({unknown[0]}, ...): "
            "the router needs the data file the frontier ran on (MEMFRONTIER_DATA names its folder)"
        )
    return {i: r if i not in missing else {**r, "question": text[i]} for i, r in rows.items()}


def targets(row: dict) -> dict[str, float]:
    """A prediction row's training targets: F1, USD, latency-proxy seconds and query tokens."""
    q = row.get("usage", {}).get("by_stage", {}).get("query", {})
    return {
        "f1": float(row["f1"]),
        "usd": float(row.get("usd") or 0.0),
        "proxy_s": float(row.get("proxy_s") or 0.0),
        "tokens": float(q.get("input_tokens", 0) + q.get("output_tokens", 0)),
    }


def split_questions(rows: dict[str, dict], val_share: float, seed: int) -> tuple[list[str], list[str]]:
    """(training ids, validation ids): ``round(val_share * n)`` questions (at least one) held out,
    category-balanced (round-robin over categories, shuffled with ``seed``). Raises ValueError for
    a share outside (0, 1) or when fewer than 3 questions would be left to train on."""
    if not 0.0 < val_share < 1.0:
        raise ValueError(f"val_share must be in (0, 1), got {val_share}")
    qs = [
        Question(
            id=i,
            conversation_id=r["conversation_id"],
            question=r["question"],
            answer=r.get("gold"),
            category=str(r["category"]),
        )
        for i, r in sorted(rows.items())
    ]
    n_val = max(1, round(val_share * len(qs)))
    if len(qs) - n_val < 3:
        raise ValueError(
            f"{len(qs)} questions shared by every configuration: too few to hold out {n_val} for "
            f"validation and train on at least 3"
        )
    val = {q.id for q in stratified_sample(qs, n_val, seed)}
    return [q.id for q in qs if q.id not in val], sorted(val)


def _regressor(n: int):
    require_extra("train", "sklearn", feature="train strategy-router")
    from sklearn.linear_model import Ridge, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS) if n >= MIN_CV else Ridge(alpha=FALLBACK_ALPHA))


def fit_target(x: np.ndarray, y: np.ndarray, *, calibrate: bool, seed: int) -> TargetModel:
    """One target's ridge model on ``x`` (n, dim) -> ``y`` (n,), standardisation folded into the
    coefficients; with ``calibrate`` (F1) the isotonic calibration of its out-of-fold predictions,
    else (a resource) the :data:`UPPER_QUANTILE` quantile of the out-of-fold residuals as upper margin."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.model_selection import KFold, cross_val_predict

    n = len(y)
    folds = KFold(n_splits=min(FOLDS, n), shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # constant features (views_built) have zero variance: scaled by 1
        warnings.simplefilter("ignore", RuntimeWarning)
        oof = cross_val_predict(_regressor(n - n // min(FOLDS, n)), x, y, cv=folds)
        model = _regressor(n).fit(x, y)
    scaler, ridge = model[0], model[1]
    coef = ridge.coef_ / scaler.scale_
    intercept = float(ridge.intercept_ - coef @ scaler.mean_)
    alpha = float(ridge.alpha_ if hasattr(ridge, "alpha_") else ridge.alpha)
    if calibrate:
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(oof, y)
        return TargetModel(
            coef=coef.tolist(),
            intercept=intercept,
            alpha=alpha,
            calibration=Calibration(x=iso.X_thresholds_.tolist(), y=iso.y_thresholds_.tolist()),
        )
    margin = max(0.0, float(np.quantile(y - oof, UPPER_QUANTILE)))
    return TargetModel(coef=coef.tolist(), intercept=intercept, alpha=alpha, upper_margin=margin)


def _scale(values: np.ndarray) -> float:
    s = float(np.std(values, ddof=1)) if values.size > 1 else 0.0
    return s if s > 0 and math.isfinite(s) else 1.0


def _features(rows: dict[str, dict], ids: list[str], store, embedder) -> np.ndarray:
    from ..store.open import open_store
    from ..store.postgres import is_postgres_url
    from ..store.sqlite_schema import DB_NAME

    if not is_postgres_url(store) and not (Path(store) / DB_NAME).is_file():  # read, never created here
        raise FileNotFoundError(
            f"the frontier's store {store} is missing (the scope sizes are read from it); "
            f"pass --store with the store the frontier ran on"
        )
    opened = open_store(store, embedder)
    try:
        stats: dict[str, ScopeStats] = {}
        for i in ids:
            conv = rows[i]["conversation_id"]
            if conv not in stats:
                stats[conv] = scope_stats(opened, Scope(user_id=conv))
                if stats[conv].records == 0:
                    raise ValueError(
                        f"the store {store} holds no record of {conv}; pass --store with the store the frontier ran on"
                    )
        emb = np.asarray(embedder.encode([rows[i]["question"] for i in ids]), dtype=np.float64)
    finally:
        opened.close()
    return np.stack(
        [feature_vector(e, rows[i]["question"], stats[rows[i]["conversation_id"]], 1.0) for e, i in zip(emb, ids)]
    )


def _target_matrix(configs: list[ConfigRecords], ids: list[str]) -> dict[str, np.ndarray]:
    """{target: (n, K)} realised values."""
    out = {t: np.zeros((len(ids), len(configs))) for t in TARGETS}
    for j, c in enumerate(configs):
        for n, i in enumerate(ids):
            for t, v in targets(c.rows[i]).items():
                out[t][n, j] = v
    return out


def validate(router: Router, x: np.ndarray, y: dict[str, np.ndarray], ids: list[str]) -> dict:
    """The validation report of ``router`` on held-out features ``x`` (n, dim) and realised targets
    ``y`` ({target: (n, K)}, columns in the router's order). See the module docstring."""
    pred = router.predict_many(x)
    labels = router.labels
    per_config = {}
    for j, label in enumerate(labels):
        per_config[label] = {
            **{f"mae_{t}": float(np.mean(np.abs(pred[t][:, j] - y[t][:, j]))) for t in TARGETS},
            **{f"mean_{t}": float(np.mean(y[t][:, j])) for t in TARGETS},
            **{f"mean_predicted_{t}": float(np.mean(pred[t][:, j])) for t in TARGETS},
        }
    presets = {}
    for name in PRESETS:
        pref = Preference.preset(name)
        u = utility(y["f1"], y["usd"], y["proxy_s"], pref, router.scales)  # (n, K) realised utilities
        chosen = np.array(
            [
                labels.index(decide(as_predictions(labels, pred, i), pref, None, router.scales).label)
                for i in range(len(ids))
            ]
        )
        best = _argmax_cheapest(u, y["usd"], y["proxy_s"])
        rows = np.arange(len(ids))
        single = int(np.argmax(u.mean(axis=0)))
        presets[name] = {
            "preference": pref.model_dump(),
            "regret": float(np.mean(u[rows, best] - u[rows, chosen])),
            "regret_best_single": float(np.mean(u[rows, best] - u[:, single])),
            "best_single": labels[single],
            "router": {t: float(np.mean(y[t][rows, chosen])) for t in ("f1", "usd", "proxy_s")},
            "oracle": {t: float(np.mean(y[t][rows, best])) for t in ("f1", "usd", "proxy_s")},
            "agreement_with_oracle": float(np.mean(chosen == best)),
            "chosen": {labels[k]: int(v) for k, v in sorted(Counter(chosen.tolist()).items())},
        }
    return {"questions": len(ids), "question_ids": ids, "per_configuration": per_config, "presets": presets}


def _argmax_cheapest(u: np.ndarray, usd: np.ndarray, proxy_s: np.ndarray) -> np.ndarray:
    """Per row, the column of highest ``u``; ties to lower USD, then seconds, then the first column."""
    out = []
    for i in range(u.shape[0]):
        out.append(min(range(u.shape[1]), key=lambda j: (-u[i, j], usd[i, j], proxy_s[i, j], j)))
    return np.array(out, dtype=int)


def train_strategy_router(config: StrategyRouterConfig, *, embedder=None) -> dict:
    """Fit, validate and write a router from ``config.frontier_dir`` to ``config.out`` (see the module
    docstring; :class:`~memfrontier.train.configs.StrategyRouterConfig`).

    ``config.only``: the labels to route among (an item may list several, comma-separated);
    ``config.store``: the store the frontier ran on (default: the one its runs recorded, else
    ``FRONTIER_DIR/store``); ``embedder``: the query embedder (default MiniLM, as the store's).
    Returns ``{"router": path, "validation_json": path, "validation_md": path, "report": ...}``.

    Raises FileNotFoundError (no frontier / store), :class:`TestSplitError`, ValueError (too few
    configurations or questions).
    """
    frontier_dir, out, val_share, seed = Path(config.frontier_dir), Path(config.out), config.val_share, config.seed
    labels = [x.strip() for item in config.only for x in item.split(",") if x.strip()] if config.only else None
    store = config.store
    configs, notes = read_frontier(frontier_dir, labels)
    dataset = configs[0].summary.get("config", {}).get("dataset", "locomo")
    shared = set.intersection(*(set(c.rows) for c in configs))
    rows = {
        i: configs[0].rows[i]
        for i in shared
        if not (dataset == "locomo" and str(configs[0].rows[i].get("category")) in LOCOMO_EXCLUDED)
    }
    rows = with_question_text(rows, configs[0].summary.get("config", {}))
    train_ids, val_ids = split_questions(rows, val_share, seed)
    if len(rows) < MIN_QUESTIONS:
        notes.append(f"{len(rows)} questions: fewer than the {MIN_QUESTIONS} a measurement needs")
    if embedder is None:
        from ..embed.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    store = store or configs[0].summary.get("config", {}).get("store") or frontier_dir / "store"
    x_all = _features(rows, train_ids + val_ids, store, embedder)
    x_train, x_val = x_all[: len(train_ids)], x_all[len(train_ids) :]
    y_train, y_val = _target_matrix(configs, train_ids), _target_matrix(configs, val_ids)
    models = []
    for j, c in enumerate(configs):
        fitted = {t: fit_target(x_train, y_train[t][:, j], calibrate=(t == "f1"), seed=seed) for t in TARGETS}
        models.append(RouterConfiguration(label=c.label, strategy=c.strategy, options=c.options, models=fitted))
    import sklearn

    rf = RouterFile(
        features=FeatureSpec(
            version=FEATURE_VERSION,
            embedding_model=embedder.model_id,
            embedding_dim=embedder.dim,
            scalars=list(SCALAR_FEATURES),
        ),
        scales=ScaleSpec(**{t: _scale(y_train[t]) for t in ("f1", "usd", "proxy_s")}),
        configurations=models,
        provenance=provenance(
            frontier_dir=str(frontier_dir.resolve()),
            store=str(store),
            dataset=dataset,
            split=configs[0].summary.get("config", {}).get("split"),
            conversations=sorted({rows[i]["conversation_id"] for i in rows}),
            questions={
                "train": len(train_ids),
                "validation": len(val_ids),
                "categories": dict(sorted(Counter(str(rows[i]["category"]) for i in rows).items())),
            },
            val_share=val_share,
            seed=seed,
            sklearn_version=sklearn.__version__,
            numpy_version=np.__version__,
            configurations={
                c.label: {
                    k: c.summary.get("provenance", {}).get(k)
                    for k in (
                        "answer_model",
                        "memory_model",
                        "price_book_version",
                        "data_sha256",
                        "strategy_config_hash",
                        "commit",
                    )
                }
                for c in configs
            },
            notes=notes,
        ),
    )
    report = validate(Router(rf), x_val, y_val, val_ids)
    report["notes"] = notes
    rf = rf.model_copy(update={"validation": report})
    write_router_file(rf, out)
    vjson, vmd = out.with_suffix(".validation.json"), out.with_suffix(".validation.md")
    write_json_atomic(vjson, report)
    write_text_atomic(vmd, render_validation(report, out))
    return {"router": out, "validation_json": vjson, "validation_md": vmd, "report": report}


def render_validation(report: dict, router_path: Path | str = "router") -> str:
    """The validation report as Markdown: per configuration MAE, per preset regret."""
    lines = [
        f"# strategy router validation ({router_path})",
        "",
        f"{report['questions']} held-out questions (category-balanced).",
        "",
        "| configuration | MAE F1 | MAE USD×1e4 | MAE proxy s | MAE tokens | mean F1 | mean USD×1e4 | mean proxy s |",
        "|" + "---|" * 8,
    ]
    for label, m in report["per_configuration"].items():
        lines.append(
            f"| {label} | {m['mae_f1']:.3f} | {m['mae_usd'] * 1e4:.4f} | {m['mae_proxy_s']:.2f} | "
            f"{m['mae_tokens']:.0f} | {m['mean_f1']:.3f} | {m['mean_usd'] * 1e4:.4f} | {m['mean_proxy_s']:.2f} |"
        )
    lines += [
        "",
        "| preference | regret (router) | regret (best single: config) | router F1 / USD×1e4 / s | "
        "oracle-choice F1 / USD×1e4 / s | agreement | chosen |",
        "|" + "---|" * 7,
    ]
    for name, p in report["presets"].items():
        r, o = p["router"], p["oracle"]
        lines.append(
            f"| {name} | {p['regret']:.3f} | {p['regret_best_single']:.3f} ({p['best_single']}) | "
            f"{r['f1']:.3f} / {r['usd'] * 1e4:.4f} / {r['proxy_s']:.2f} | "
            f"{o['f1']:.3f} / {o['usd'] * 1e4:.4f} / {o['proxy_s']:.2f} | {p['agreement_with_oracle']:.2f} | "
            + ", ".join(f"{k} {v}" for k, v in p["chosen"].items())
            + " |"
        )
    lines += [
        "",
        "Regret: mean over questions of the realised utility of the per-question oracle choice minus that "
        "of the choice (utility = λ_Q·F1/s_F1 − λ_C·USD/s_USD − λ_L·s/s_L, scales from the training records).",
    ]
    lines += [f"- {n}" for n in report.get("notes", [])]
    return "\n".join(lines) + "\n"


__all__ = [
    "ANCHORS",
    "ConfigRecords",
    "TestSplitError",
    "fit_target",
    "read_frontier",
    "render_validation",
    "split_questions",
    "targets",
    "train_strategy_router",
    "validate",
]

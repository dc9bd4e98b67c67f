"""Benchmark of the embedded SQLiteStore on LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0).

Prints, in one run:

(a) ingest: wall seconds of ``SQLiteStore.add`` of every record of the largest LoCoMo
    conversation (by characters) into a fresh store, against raw
    ``SentenceTransformer.encode`` (same model object, batch 64, normalised) of the very chunk
    texts the store built. overhead ratio = add seconds / raw encode seconds (goal <= 1.15x).
    Median over ``--repeats`` alternated runs, the model warmed up first.
(b) hybrid search latency (dense + bm25 fused by RRF k=60, k=10) over ``--queries`` QA questions
    of that conversation: p50 / p95 / mean milliseconds, warm (the first, cold search, which loads
    the vector matrix and builds the BM25 index, is reported separately), on
      - 1x: the conversation alone, searched in its scope;
      - 20x: the records replicated under ``--replicas`` user ids (ids prefixed), searched in one
        scope and across all scopes.
    The per-retriever latencies (dense only, bm25 only) are printed too.
(c) a sanity check of retrieval quality: share of gold evidence turns (categories 1-4) inside
    the top-k chunks, per retriever, on the 1x store.
(d) writes at scale (``--scale-records``, default 100,000 synthetic records), with a fast stand-in
    embedder (a hash-seeded unit vector per text, so the figures are the store's own cost):
    interleaved "add one record, then hybrid-search that record's scope" (k=10), on
      - ``--users`` users x (records / users) records each (default 1,000 x 100), and
      - one user x all the records;
    p50 / p95 of the search right after each add, and warm search p50 (the same search again),
    next to the full-rebuild path measured in the same run on the same store (what every first
    search after a write cost before per-scope partitions: every vector reloaded from SQLite plus
    one bm25s index rebuilt over every chunk's text). Goal: p50 after an add <= 50 ms.

Usage::

    .venv/bin/python benchmarks/bench_store.py [--data-root ../shared/data] [--repeats 3]
    .venv/bin/python benchmarks/bench_store.py --only-scale [--scale-records 100000] [--interleaved 40]

``--data-root`` defaults to ``$MEMFRONTIER_DATA`` if set, else ``../shared/data`` relative to the
current directory. Only CPU is used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import zlib
from datetime import datetime
from pathlib import Path

import bm25s
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing

from memfrontier.core.types import ImageRef, Record, Scope  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
from memfrontier.retrieve.hybrid import hybrid_search  # noqa: E402
from memfrontier.retrieve.recipes import DENSE_ONLY, HYBRID_RRF, chunk_recipe  # noqa: E402
from memfrontier.store.bm25 import bm25_terms  # noqa: E402
from memfrontier.store.sqlite import SQLiteStore  # noqa: E402


def default_data_root() -> Path:
    env = os.environ.get("MEMFRONTIER_DATA")
    return Path(env) if env else Path.cwd() / ".." / "shared" / "data"


def parse_locomo_time(s: str) -> str | None:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00' (None if unparseable)."""
    try:
        return datetime.strptime(s.strip(), "%I:%M %p on %d %B, %Y").isoformat()
    except ValueError:
        return None


def conversation_records(sample: dict, user_id: str, id_prefix: str = "") -> list[Record]:
    conv = sample["conversation"]
    out: list[Record] = []
    n = 1
    while f"session_{n}" in conv:
        ts = parse_locomo_time(conv.get(f"session_{n}_date_time", ""))
        for turn in conv[f"session_{n}"]:
            images = []
            if turn.get("blip_caption"):
                images = [ImageRef(id=f"{turn['dia_id']}:img", caption=turn["blip_caption"])]
            out.append(
                Record(
                    id=f"{id_prefix}{sample['sample_id']}:{turn['dia_id']}",
                    scope=Scope(user_id=user_id),
                    session_id=f"session_{n}",
                    speaker=turn["speaker"],
                    timestamp=ts,
                    text=turn.get("text", ""),
                    images=images,
                )
            )
        n += 1
    return [r for r in out if r.text.strip() or r.images]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def latency_row(store: SQLiteStore, queries: list[str], scope: Scope, retrievers: tuple[str, ...], k: int) -> dict:
    recipe = chunk_recipe(retrievers)
    t0 = time.perf_counter()
    hybrid_search(store, queries[0], scope, recipe, k)
    cold = time.perf_counter() - t0
    ms = []
    for q in queries:
        t0 = time.perf_counter()
        hybrid_search(store, q, scope, recipe, k)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"cold_ms": cold * 1000, "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "mean_ms": statistics.fmean(ms)}


def evidence_recall(store: SQLiteStore, sample: dict, scope: Scope, k: int) -> dict:
    """Share of gold evidence turns (LoCoMo ``evidence`` dia_ids) found in the top-k chunks."""
    qas = [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
    out: dict = {"n": len(qas)}
    for retr in [("dense", "bm25"), ("dense",), ("bm25",)]:
        found = total = 0
        for qa in qas:
            got = {
                rid
                for h in hybrid_search(store, qa["question"], scope, chunk_recipe(retr), k)
                for rid in h.chunk.record_ids
            }
            ev = {f"{sample['sample_id']}:{e.strip()}" for e in qa["evidence"]}
            found += len(ev & got)
            total += len(ev)
        out["+".join(retr)] = found / max(total, 1)
    return out


class HashEmbedder:
    """A fast stand-in embedder for (d): a unit vector seeded by the text's CRC-32 (same text, same
    vector), 384 dimensions like MiniLM; tokens counted as whitespace words + 2."""

    model_id = "bench/hash-unit-384"
    dim = 384

    def encode(self, texts):
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(zlib.crc32(t.encode("utf-8", "replace"))).standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2


_SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sha", "vel", "dor", "pi", "nam", "qua", "bex", "ti", "zor", "mel", "an"]


def synthetic_vocab(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def synthetic_text(rng: random.Random, vocab: list[str]) -> str:
    """About 12 words, Zipf-like word frequencies (low ranks common)."""
    n = rng.randint(8, 16)
    return " ".join(vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)] for _ in range(n)) + "."


def fill(
    store: SQLiteStore, users: int, per_user: int, per_session: int, rng: random.Random, vocab: list[str]
) -> float:
    """Add ``users x per_user`` records (sessions of ``per_session``), one add() per session; seconds."""
    t0 = time.perf_counter()
    for u in range(users):
        scope = Scope(user_id=f"user{u:04d}")
        for s0 in range(0, per_user, per_session):
            store.add(
                [
                    Record(
                        id=f"u{u}-{i}",
                        scope=scope,
                        session_id=f"s{s0 // per_session}",
                        speaker="Ann",
                        timestamp=f"2024-01-{1 + (s0 // per_session) % 28:02d}T10:00:00",
                        text=synthetic_text(rng, vocab),
                    )
                    for i in range(s0, min(s0 + per_session, per_user))
                ]
            )
    return time.perf_counter() - t0


def interleaved(
    store: SQLiteStore,
    users: int,
    per_user: int,
    per_session: int,
    rounds: int,
    rng: random.Random,
    vocab: list[str],
    k: int,
    tag: str = "",
) -> dict:
    """``rounds`` x (add one record to a random user's last session; search that user; search again);
    p50 / p95 ms of the search right after the add, warm p50 (the search again), p50 of the add.
    ``tag`` goes into the added records' ids (a store measured again needs new ids to be written to)."""
    after, warm, adds = [], [], []
    for j in range(rounds):
        u = rng.randrange(users)
        scope = Scope(user_id=f"user{u:04d}")
        last = (per_user - 1) // per_session
        rec = Record(
            id=f"new{tag}-{u}-{j}",
            scope=scope,
            session_id=f"s{last}",
            speaker="Ann",
            timestamp=f"2024-01-{1 + last % 28:02d}T10:00:00",
            text=synthetic_text(rng, vocab),
        )
        t0 = time.perf_counter()
        store.add([rec])
        adds.append((time.perf_counter() - t0) * 1000)
        q = " ".join(rng.choice(vocab[:300]) for _ in range(4))
        t0 = time.perf_counter()
        hybrid_search(store, q, scope, HYBRID_RRF, k)
        after.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        hybrid_search(store, q, scope, HYBRID_RRF, k)
        warm.append((time.perf_counter() - t0) * 1000)
    return {
        "after_p50": pct(after, 50),
        "after_p95": pct(after, 95),
        "warm_p50": pct(warm, 50),
        "add_p50": pct(adds, 50),
    }


def full_rebuild_ms(store: SQLiteStore, scope: Scope, repeats: int, k: int) -> tuple[float, float]:
    """The old path's cost in this run, median ms: (every vector reloaded from SQLite + the search,
    one BM25 index built over every chunk's text from scratch)."""
    reload_ms, bm25_ms = [], []
    texts = [c.text for c in store.chunks(Scope())]
    for _ in range(repeats):
        store.drop_caches()
        t0 = time.perf_counter()
        hybrid_search(store, "kalo mi", scope, DENSE_ONLY, k)  # every partition's vectors loaded from SQLite
        reload_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()  # the old path: bm25s re-indexing every chunk (scores bake in N, df, avgdl)
        bm25s.BM25(k1=1.5, b=0.75, method="lucene").index([bm25_terms(t) or [""] for t in texts], show_progress=False)
        bm25_ms.append((time.perf_counter() - t0) * 1000)
    return statistics.median(reload_ms), statistics.median(bm25_ms)


def scale(args) -> None:
    n = args.scale_records
    vocab = synthetic_vocab(5000)
    print(
        f"\n## (d) writes at scale: {n} records per store, stand-in embedder {HashEmbedder.model_id}, k={args.k}, "
        f"{args.interleaved} interleaved add-one/search rounds, full-rebuild path x{args.baseline_repeats}"
    )
    print(
        f"{'store':<22}{'chunks':>8}{'ingest s':>10}{'after-add p50':>15}{'p95':>8}{'warm p50':>10}"
        f"{'full rebuild':>14}{'(reload + bm25)':>18}{'p50 gain':>10}"
    )
    layouts = [
        (f"{args.users} users x {n // args.users}", args.users, n // args.users, 20),
        (f"1 user x {n}", 1, n, 100),
    ]
    for label, users, per_user, per_session in layouts:
        rng = random.Random(11)
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(Path(tmp) / "scale", HashEmbedder())
            ingest = fill(store, users, per_user, per_session, rng, vocab)
            n_chunks = store.count()["chunks"]
            hybrid_search(store, "kalo", Scope(user_id="user0000"), HYBRID_RRF, args.k)  # load once (cold)
            m = interleaved(store, users, per_user, per_session, args.interleaved, rng, vocab, args.k)
            reload_ms, bm25_ms = full_rebuild_ms(store, Scope(user_id="user0000"), args.baseline_repeats, args.k)
            store.close()
        old = reload_ms + bm25_ms
        print(
            f"{label:<22}{n_chunks:>8}{ingest:>10.1f}{m['after_p50']:>12.1f} ms{m['after_p95']:>8.1f}{m['warm_p50']:>10.2f}"
            f"{old:>11.0f} ms{f'({reload_ms:.0f} + {bm25_ms:.0f})':>18}{old / m['after_p50']:>9.0f}x",
            flush=True,
        )
    print(
        "after-add: the hybrid search right after adding one record to the searched scope (that scope's chunks, "
        "vectors and BM25 postings patched in memory by the add); warm: the same search again; full rebuild: the old "
        "path's first search after any write (every vector reloaded + one bm25s index over every chunk), same store, "
        "same run."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", type=Path, default=None, help="folder holding locomo/locomo10.json")
    ap.add_argument("--repeats", type=int, default=3, help="ingest repeats (median reported)")
    ap.add_argument("--queries", type=int, default=100, help="number of QA questions used as queries")
    ap.add_argument("--replicas", type=int, default=20, help="user ids the conversation is replicated under")
    ap.add_argument("--k", type=int, default=10, help="hits per search")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    ap.add_argument("--only-scale", action="store_true", help="run only (d), the writes-at-scale benchmark")
    ap.add_argument("--scale-records", type=int, default=100_000, help="(d): records in each store")
    ap.add_argument("--users", type=int, default=1000, help="(d): users of the many-users store")
    ap.add_argument("--interleaved", type=int, default=40, help="(d): add-one/search rounds per store")
    ap.add_argument("--baseline-repeats", type=int, default=3, help="(d): full-rebuild path repetitions")
    args = ap.parse_args(argv)
    if args.only_scale:
        scale(args)
        return 0

    root = args.data_root or default_data_root()
    path = root / "locomo" / "locomo10.json"
    if not path.exists():
        print(f"LoCoMo not found at {path}; pass --data-root or set MEMFRONTIER_DATA", file=sys.stderr)
        return 2
    data = json.loads(path.read_text())

    def size(s):
        return sum(len(r.render()) for r in conversation_records(s, "x"))

    sample = max(data, key=size)
    recs = conversation_records(sample, user_id=sample["sample_id"])
    queries = [qa["question"] for qa in sample["qa"]][: args.queries]
    import torch

    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    try:
        load = "load avg %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = ""
    print(
        f"# memfrontier store benchmark  ({platform.machine()}, {os.cpu_count()} cpus, torch threads {torch.get_num_threads()}, {load})"
    )
    print(
        f"conversation: {sample['sample_id']} (largest by characters): {len(recs)} records, "
        f"{len({r.session_id for r in recs})} sessions, {len(queries)} queries"
    )

    emb = MiniLMEmbedder()
    model = emb.model
    model.encode(["warm up"] * 64, batch_size=64)

    # ---- (a) ingest vs raw encode --------------------------------------------------------
    add_s, raw_s, chunk_texts, n_chunks = [], [], None, 0
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            store = SQLiteStore(Path(tmp) / f"ingest{rep}", emb)
            t0 = time.perf_counter()
            res = store.add(recs)
            add_s.append(time.perf_counter() - t0)
            if chunk_texts is None:
                chunk_texts = [c.text for c in store.chunks(Scope())]
                n_chunks = len(chunk_texts)
                toks = [c.n_tokens for c in store.chunks(Scope())]
                assert res.chunks_embedded == n_chunks
            store.close()
            t0 = time.perf_counter()
            model.encode(
                chunk_texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
            )
            raw_s.append(time.perf_counter() - t0)
    a, r = statistics.median(add_s), statistics.median(raw_s)
    print("\n## (a) ingest (median of %d)" % args.repeats)
    print(f"chunks: {n_chunks}, tokens/chunk mean {statistics.fmean(toks):.0f} max {max(toks)}")
    print(f"{'path':<34}{'seconds':>9}{'records/s':>11}{'chunks/s':>10}")
    print(f"{'SQLiteStore.add (all records)':<34}{a:>9.2f}{len(recs) / a:>11.1f}{n_chunks / a:>10.1f}")
    print(f"{'SentenceTransformer.encode (raw)':<34}{r:>9.2f}{len(recs) / r:>11.1f}{n_chunks / r:>10.1f}")
    print(
        f"overhead ratio add/raw: {a / r:.3f}x (goal <= 1.15x)   runs add={['%.2f' % x for x in add_s]} raw={['%.2f' % x for x in raw_s]}"
    )

    # ---- (b) search latency --------------------------------------------------------------
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "one", emb)
        store.add(recs)
        scope = Scope(user_id=sample["sample_id"])
        for retr in [("dense", "bm25"), ("dense",), ("bm25",)]:
            rows.append(("1x, own scope", n_chunks, "+".join(retr), latency_row(store, queries, scope, retr, args.k)))
        recall = evidence_recall(store, sample, scope, args.k)
        store.close()

        big = SQLiteStore(Path(tmp) / "many", emb)
        t0 = time.perf_counter()
        for j in range(args.replicas):
            big.add(conversation_records(sample, user_id=f"user{j:02d}", id_prefix=f"u{j:02d}:"))
        big_s = time.perf_counter() - t0
        n_big = big.count()["chunks"]
        print(
            f"\n{args.replicas}x store: {n_big} chunks, {args.replicas * len(recs)} records, ingested in {big_s:.1f} s "
            f"({n_big / big_s:.1f} chunks/s)"
        )
        for label, sc in [
            (f"{args.replicas}x, one scope", Scope(user_id="user07")),
            (f"{args.replicas}x, all scopes", Scope()),
        ]:
            for retr in [("dense", "bm25"), ("dense",), ("bm25",)]:
                rows.append((label, n_big, "+".join(retr), latency_row(big, queries, sc, retr, args.k)))
        db_bytes = sum(p.stat().st_size for p in big.path.glob("store.db*"))
        big.close()

    print(
        f"\n## (b) search latency, k={args.k}, {len(queries)} queries (ms; cold = first search: loads vectors, builds BM25)"
    )
    print(f"{'store':<20}{'chunks':>7}  {'retrievers':<11}{'p50':>8}{'p95':>8}{'mean':>8}{'cold':>9}")
    for label, n, retr, m in rows:
        print(
            f"{label:<20}{n:>7}  {retr:<11}{m['p50_ms']:>8.1f}{m['p95_ms']:>8.1f}{m['mean_ms']:>8.1f}{m['cold_ms']:>9.1f}"
        )
    print(
        f"\n## (c) sanity: gold-evidence recall@{args.k} chunks on {sample['sample_id']} (categories 1-4, "
        f"{recall['n']} questions): share of evidence turns inside the top-{args.k} chunks"
    )
    print("   " + "   ".join(f"{name}: {v:.3f}" for name, v in recall.items() if name != "n"))
    print(f"\n{args.replicas}x store on disk: store.db* {db_bytes / 1e6:.1f} MB")
    scale(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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

Usage::

    .venv/bin/python benchmarks/bench_store.py [--data-root ../shared/data] [--repeats 3]

``--data-root`` defaults to ``$MEMFRONTIER_DATA`` if set, else ``../shared/data`` relative to the
current directory. Only CPU is used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing

from memfrontier.core.types import ImageRef, Record, Scope  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
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
    t0 = time.perf_counter()
    store.search(queries[0], scope, k=k, retrievers=retrievers)
    cold = time.perf_counter() - t0
    ms = []
    for q in queries:
        t0 = time.perf_counter()
        store.search(q, scope, k=k, retrievers=retrievers)
        ms.append((time.perf_counter() - t0) * 1000)
    return {"cold_ms": cold * 1000, "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "mean_ms": statistics.fmean(ms)}


def evidence_recall(store: SQLiteStore, sample: dict, scope: Scope, k: int) -> dict:
    """Share of gold evidence turns (LoCoMo ``evidence`` dia_ids) found in the top-k chunks."""
    qas = [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
    out: dict = {"n": len(qas)}
    for retr in [("dense", "bm25"), ("dense",), ("bm25",)]:
        found = total = 0
        for qa in qas:
            got = {rid for h in store.search(qa["question"], scope, k=k, retrievers=retr) for rid in h.chunk.record_ids}
            ev = {f"{sample['sample_id']}:{e.strip()}" for e in qa["evidence"]}
            found += len(ev & got)
            total += len(ev)
        out["+".join(retr)] = found / max(total, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", type=Path, default=None, help="folder holding locomo/locomo10.json")
    ap.add_argument("--repeats", type=int, default=3, help="ingest repeats (median reported)")
    ap.add_argument("--queries", type=int, default=100, help="number of QA questions used as queries")
    ap.add_argument("--replicas", type=int, default=20, help="user ids the conversation is replicated under")
    ap.add_argument("--k", type=int, default=10, help="hits per search")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    args = ap.parse_args(argv)

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
    print(f"# memfrontier store benchmark  ({platform.machine()}, {os.cpu_count()} cpus, torch threads {torch.get_num_threads()}, {load})")
    print(f"conversation: {sample['sample_id']} (largest by characters): {len(recs)} records, "
          f"{len({r.session_id for r in recs})} sessions, {len(queries)} queries")

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
            model.encode(chunk_texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
            raw_s.append(time.perf_counter() - t0)
    a, r = statistics.median(add_s), statistics.median(raw_s)
    print("\n## (a) ingest (median of %d)" % args.repeats)
    print(f"chunks: {n_chunks}, tokens/chunk mean {statistics.fmean(toks):.0f} max {max(toks)}")
    print(f"{'path':<34}{'seconds':>9}{'records/s':>11}{'chunks/s':>10}")
    print(f"{'SQLiteStore.add (all records)':<34}{a:>9.2f}{len(recs) / a:>11.1f}{n_chunks / a:>10.1f}")
    print(f"{'SentenceTransformer.encode (raw)':<34}{r:>9.2f}{len(recs) / r:>11.1f}{n_chunks / r:>10.1f}")
    print(f"overhead ratio add/raw: {a / r:.3f}x (goal <= 1.15x)   runs add={['%.2f' % x for x in add_s]} raw={['%.2f' % x for x in raw_s]}")

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
        print(f"\n{args.replicas}x store: {n_big} chunks, {args.replicas * len(recs)} records, ingested in {big_s:.1f} s "
              f"({n_big / big_s:.1f} chunks/s)")
        for label, sc in [(f"{args.replicas}x, one scope", Scope(user_id="user07")), (f"{args.replicas}x, all scopes", Scope())]:
            for retr in [("dense", "bm25"), ("dense",), ("bm25",)]:
                rows.append((label, n_big, "+".join(retr), latency_row(big, queries, sc, retr, args.k)))
        bm25_dir = big.path / "bm25"
        bm25_bytes = sum(p.stat().st_size for p in bm25_dir.rglob("*") if p.is_file())
        db_bytes = sum(p.stat().st_size for p in big.path.glob("store.db*"))
        big.close()

    print(f"\n## (b) search latency, k={args.k}, {len(queries)} queries (ms; cold = first search: loads vectors, builds BM25)")
    print(f"{'store':<20}{'chunks':>7}  {'retrievers':<11}{'p50':>8}{'p95':>8}{'mean':>8}{'cold':>9}")
    for label, n, retr, m in rows:
        print(f"{label:<20}{n:>7}  {retr:<11}{m['p50_ms']:>8.1f}{m['p95_ms']:>8.1f}{m['mean_ms']:>8.1f}{m['cold_ms']:>9.1f}")
    print(f"\n## (c) sanity: gold-evidence recall@{args.k} chunks on {sample['sample_id']} (categories 1-4, "
          f"{recall['n']} questions): share of evidence turns inside the top-{args.k} chunks")
    print("   " + "   ".join(f"{name}: {v:.3f}" for name, v in recall.items() if name != "n"))
    print(f"\n{args.replicas}x store on disk: store.db* {db_bytes / 1e6:.1f} MB, bm25/ {bm25_bytes / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

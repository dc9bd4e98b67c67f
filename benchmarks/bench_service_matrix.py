"""The REST service's latency and throughput by scope size, clients, verb, store and workers: a
table a user can hold against their own measurements.

For each store (``--stores``: ``pg``, the embedded PostgreSQL server serve starts by default;
``sqlite``, a SQLite store directory) and worker count (``--workers``), a fresh ``memfrontier
serve`` is started with a stub answerer (an OpenAI-compatible server on loopback that answers at
once: an ``ask`` measures the context work only). One scope (user ``m0``) is filled through the
REST ``add`` (batches of ``--fill-batch`` messages) up to each size of ``--records`` in turn, the
fill timed (records/s: the service's bulk ingest); then, for each client count of ``--clients``,
each verb of ``--verbs`` runs alone for ``--seconds``: that many ``AsyncMemoryClient`` s in a
loop, ``add`` (one message, a new id), ``search`` (k=5) or ``ask`` (strategy ``rag``). Printed and
written to ``--out`` (``service_matrix.json``, with provenance, and ``service_matrix.md``):
requests/s, p50 / p95 latency (ms) and errors per cell.

    .venv/bin/python benchmarks/bench_service_matrix.py                      # the full matrix
    .venv/bin/python benchmarks/bench_service_matrix.py --records 1000 10000 --stores pg --workers 2

The embedder is the service's (``$MEMFRONTIER_EMBED_PRECISION``, ``$MEMFRONTIER_CPU_WORKERS``
pass through to it). Every figure is measured in this run; on a shared machine compare rows of
one run, and note the load average printed at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bench_overhead import stub  # noqa: E402
from bench_service import WORDS, free_port, kill, pct, start  # noqa: E402

from memfrontier.client import AsyncMemoryClient  # noqa: E402
from memfrontier.core.jsonio import write_json_atomic  # noqa: E402
from memfrontier.core.provenance import provenance  # noqa: E402
from memfrontier.server.data import service_data  # noqa: E402
from memfrontier.server.keys import open_key_store  # noqa: E402

USER = "m0"


def note(rng: random.Random, n: int) -> str:
    return f"Note {n}: " + " ".join(rng.choice(WORDS) for _ in range(12))


async def fill(url: str, key: str, have: int, want: int, batch: int) -> float:
    """Add records ``have``..``want`` to the scope; returns wall seconds."""
    rng = random.Random(have)
    t0 = time.perf_counter()
    async with AsyncMemoryClient(url, key, timeout_s=600) as m:
        for start_ in range(have, want, batch):
            msgs = [{"content": note(rng, n), "id": f"fill-{n}"} for n in range(start_, min(want, start_ + batch))]
            await m.add(msgs, user_id=USER, session_id=f"fill-{start_ // 1000}")
    return time.perf_counter() - t0


async def cell(url: str, key: str, verb: str, clients: int, seconds: float, tag: str) -> dict:
    lat: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    async def client(i: int):
        rng = random.Random(f"{tag}-{i}")
        async with AsyncMemoryClient(url, key, timeout_s=120) as m:
            n = 0
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    if verb == "add":
                        await m.add(
                            [{"content": note(rng, n), "id": f"{tag}-{i}-{n}"}], user_id=USER, session_id=f"{tag}-{i}"
                        )
                    elif verb == "search":
                        await m.search(" ".join(rng.choice(WORDS) for _ in range(3)), user_id=USER, k=5)
                    else:
                        await m.ask("what about the " + rng.choice(WORDS) + "?", user_id=USER, strategy="rag")
                    lat.append(time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 - counted, the cell goes on
                    errors.append(f"{type(e).__name__}: {e}"[:200])
                n += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    return {
        "requests_per_s": len(lat) / wall,
        "p50_ms": pct(lat, 50) * 1e3,
        "p95_ms": pct(lat, 95) * 1e3,
        "n": len(lat),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:2],
    }


def render(rows: list[dict]) -> str:
    out = [
        "| store | workers | records | clients | verb | req/s | p50 ms | p95 ms | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["verb"] == "fill":
            out.append(
                f"| {r['store']} | {r['workers']} | {r['records']} | 1 | fill ({r['added']} records) | "
                f"{r['requests_per_s']:.0f} records/s | | | |"
            )
            continue
        out.append(
            f"| {r['store']} | {r['workers']} | {r['records']} | {r['clients']} | {r['verb']} | "
            f"{r['requests_per_s']:.1f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['errors']} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, nargs="+", default=[1000, 10000, 100000], help="scope sizes, ascending")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--verbs", nargs="+", default=["add", "search", "ask"], choices=["add", "search", "ask"])
    ap.add_argument("--stores", nargs="+", default=["pg", "sqlite"], choices=["pg", "sqlite"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=5.0, help="per cell")
    ap.add_argument("--fill-batch", type=int, default=250, help="messages per add while filling")
    ap.add_argument("--out", type=Path, default=Path("results/service-matrix"))
    args = ap.parse_args()
    if args.records != sorted(args.records):
        ap.error("--records must be ascending (the scope grows from one size to the next)")
    print(f"# load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cpus", flush=True)
    rows: list[dict] = []
    prov = provenance(
        seed=0,
        models={
            "embedder_precision": os.environ.get("MEMFRONTIER_EMBED_PRECISION", "float32"),
            "answerer": "stub (OpenAI-compatible, answers at once)",
        },
    )

    def save() -> None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out / "service_matrix.json", {"provenance": prov, "argv": sys.argv[1:], "rows": rows})
        (args.out / "service_matrix.md").write_text(render(rows) + "\n", "utf-8")

    with stub(0.0) as (llm_url, _log):
        for store_kind in args.stores:
            for workers in args.workers:
                with tempfile.TemporaryDirectory(prefix="bench-matrix-") as tmp:
                    data = Path(tmp)
                    store = str(data / "sqlite-store") if store_kind == "sqlite" else None
                    with service_data(data, store) as where:
                        ks = open_key_store(where.keys)
                        key = ks.create("bench")[1]
                        ks.close()
                    port = free_port()
                    url = f"http://127.0.0.1:{port}"
                    extra = ["--llm", "openai:stub", "--base-url", llm_url, "--allow-unpriced"]
                    proc = start(data, port, workers, store, extra)
                    try:
                        have = 0
                        for size in args.records:
                            wall = asyncio.run(fill(url, key, have, size, args.fill_batch))
                            base = dict(store=store_kind, workers=workers, records=size)
                            rows.append(
                                base | {"verb": "fill", "added": size - have, "requests_per_s": (size - have) / wall}
                            )
                            print(
                                f"{store_kind} x{workers}: filled to {size} ({(size - have) / wall:.0f} records/s)",
                                flush=True,
                            )
                            have = size
                            for clients in args.clients:
                                for verb in args.verbs:
                                    tag = f"{store_kind}{workers}-{size}-{clients}-{verb}"
                                    r = asyncio.run(cell(url, key, verb, clients, args.seconds, tag))
                                    rows.append(base | {"clients": clients, "verb": verb} | r)
                                    print(
                                        f"  {size:>6} records {clients:>2} clients {verb:6s} {r['requests_per_s']:7.1f} req/s "
                                        f"p50 {r['p50_ms']:6.0f} ms p95 {r['p95_ms']:6.0f} ms errors {r['errors']}",
                                        flush=True,
                                    )
                                    save()
                    finally:
                        kill(proc, signal.SIGTERM)
    print(render(rows))


if __name__ == "__main__":
    main()

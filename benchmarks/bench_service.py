"""Load, crash and isolation figures of ``memfrontier serve`` on loopback.

Starts the real service (``python -m memfrontier.cli serve``, a subprocess with ``--workers``
uvicorn workers) on a fresh data directory and prints:

(a) load: for each client count in ``--clients`` (default 8,16,32), that many concurrent
    ``AsyncMemoryClient`` s run a mix of ``add`` (one message, a fresh client id, share
    ``--add-share``) and ``search`` (k=5) for ``--seconds``: requests/s, p50/p95 latency of each
    verb (ms), errors (goal 0), and after the run the acknowledged adds vs the ones present
    (``get`` of each acknowledged id; goal equal) and a re-add of every acknowledged message
    (must add nothing: no duplicates, ingest idempotent).
(b) kill -9: the load runs for ``--kill-after`` seconds with 16 clients, then the server's
    process group gets SIGKILL; the service is restarted on the same data directory: acknowledged
    adds missing (goal 0), re-adds that add something (goal 0), a search answering (the store
    readable). With the default store the embedded PostgreSQL server runs in its own session, so
    it outlives the kill and the restart joins it.

Every figure is a count or a latency measured in this run; nothing is compared with a stored
number. The store is serve's default (the embedded PostgreSQL server of the data directory)
unless ``--store`` names another (a SQLite directory or a ``postgresql://`` URL); the key is
created where that service keeps its keys (:func:`memfrontier.server.data.service_data`).

Usage::

    .venv/bin/python benchmarks/bench_service.py [--clients 8,16,32] [--seconds 8] [--workers 2]
        [--add-share 0.3] [--kill-after 4] [--store URL_OR_DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx

from memfrontier.client import AsyncMemoryClient
from memfrontier.server.data import service_data
from memfrontier.server.keys import open_key_store

WORDS = (
    "garden lemon basil Lisbon Quito guitar marathon salsa violin kitten hiking chess novel "
    "pottery cycling sushi harbour museum tram ferry"
).split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data_dir: Path, port: int, workers: int, store: str | None, extra: list[str] = ()) -> subprocess.Popen:
    """``memfrontier serve`` on ``data_dir`` (``extra``: more serve options), once it answers /healthz.
    Its log goes to ``data_dir/serve.log`` (a pipe nobody reads would block the server once full)."""
    argv = (
        [
            sys.executable,
            "-m",
            "memfrontier.cli",
            "serve",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--max-in-flight",
            "64",
        ]
        + (["--store", store] if store else [])
        + list(extra)
    )
    log = data_dir / "serve.log"
    with open(log, "ab") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("serve exited: " + log.read_text("utf-8", "replace")[-2000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("serve did not answer /healthz in 180 s")


def kill(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    """Signal the server's own process group (it was started in a new session) and reap it."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait(30)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def load(
    url: str,
    key: str,
    n_clients: int,
    seconds: float,
    add_share: float,
    tag: str,
    seed: int,
    stop: asyncio.Event | None = None,
):
    """Run the mix for ``seconds`` (or until ``stop`` is set); returns (acknowledged {(user, id): text},
    latencies by verb (s), errors, wall s)."""
    acked: dict[tuple[str, str], str] = {}
    lat: dict[str, list[float]] = {"add": [], "search": []}
    errors: list[str] = []
    deadline = time.perf_counter() + seconds
    stop = stop or asyncio.Event()

    async def worker(i: int):
        rng = random.Random(seed * 1000 + i)
        user = f"u{i % 4}"
        async with AsyncMemoryClient(url, key, timeout_s=60) as m:
            n = 0
            while time.perf_counter() < deadline and not stop.is_set():
                t0 = time.perf_counter()
                try:
                    if rng.random() < add_share:
                        rid = f"{tag}-c{i}-{n}"
                        text = f"Note {n} of client {i}: " + " ".join(rng.choice(WORDS) for _ in range(12))
                        await m.add([{"content": text, "id": rid}], user_id=user, session_id=f"{tag}-c{i}")
                        acked[(user, rid)] = text
                        lat["add"].append(time.perf_counter() - t0)
                        n += 1
                    else:
                        await m.search(" ".join(rng.choice(WORDS) for _ in range(3)), user_id=user, k=5)
                        lat["search"].append(time.perf_counter() - t0)
                except Exception as e:  # counted, the run goes on
                    errors.append(f"{type(e).__name__}: {e}"[:200])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(n_clients)))
    return acked, lat, errors, time.perf_counter() - t0


async def verify(url: str, key: str, acked: dict[tuple[str, str], str], tag: str) -> tuple[int, int]:
    """(acknowledged adds missing, re-adds that added something)."""
    sem = asyncio.Semaphore(16)
    missing = readded = 0
    async with AsyncMemoryClient(url, key, timeout_s=120) as m:

        async def one(user: str, rid: str, text: str):
            nonlocal missing, readded
            async with sem:
                rec = await m.get(rid, user_id=user)
                if rec is None or rec.text != text:
                    missing += 1
                session = rid.rsplit("-", 1)[0]
                res = await m.add([{"content": text, "id": rid}], user_id=user, session_id=session)
                readded += len(res.added)

        await asyncio.gather(*(one(u, r, t) for (u, r), t in acked.items()))
    return missing, readded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="8,16,32")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--add-share", type=float, default=0.3)
    ap.add_argument("--kill-after", type=float, default=4.0)
    ap.add_argument("--store", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        data = Path(tmp)
        with service_data(data, args.store) as where:
            ks = open_key_store(where.keys)
            key = ks.create("bench")[1]
            ks.close()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start(data, port, args.workers, args.store)
        print(f"(a) load, {args.workers} worker(s), add share {args.add_share}, {args.seconds:g} s per row")
        print(
            f"{'clients':>7} {'req/s':>7} {'add p50':>8} {'add p95':>8} {'srch p50':>8} {'srch p95':>8} "
            f"{'errors':>6} {'acked':>6} {'present':>7} {'re-added':>8}"
        )
        try:
            for n in (int(x) for x in args.clients.split(",")):
                tag = f"load{n}"
                acked, lat, errors, wall = asyncio.run(load(url, key, n, args.seconds, args.add_share, tag, args.seed))
                missing, readded = asyncio.run(verify(url, key, acked, tag))
                reqs = len(lat["add"]) + len(lat["search"])
                ms = {v: (pct(x, 50) * 1e3, pct(x, 95) * 1e3) for v, x in lat.items()}
                print(
                    f"{n:>7} {reqs / wall:>7.1f} {ms['add'][0]:>8.0f} {ms['add'][1]:>8.0f} {ms['search'][0]:>8.0f} "
                    f"{ms['search'][1]:>8.0f} {len(errors):>6} {len(acked):>6} {len(acked) - missing:>7} {readded:>8}"
                )
                for e in sorted(set(errors))[:3]:
                    print("   error:", e)
        finally:
            kill(proc, signal.SIGTERM)

        print(f"\n(b) kill -9 after {args.kill_after:g} s of load (16 clients), restart on the same data")
        proc = start(data, port, args.workers, args.store)

        async def until_killed():
            stop = asyncio.Event()
            task = asyncio.create_task(load(url, key, 16, 600, args.add_share, "crash", args.seed + 1, stop))
            await asyncio.sleep(args.kill_after)
            await asyncio.to_thread(kill, proc)
            stop.set()  # requests in flight at the kill fail; none is retried
            return await task

        acked, _, errors, _ = asyncio.run(until_killed())
        proc = start(data, port, args.workers, args.store)
        try:
            missing, readded = asyncio.run(verify(url, key, acked, "crash"))

            async def readable():
                async with AsyncMemoryClient(url, key) as m:
                    return len(await m.search("garden", user_id="u0", k=5))

            hits = asyncio.run(readable())
        finally:
            kill(proc, signal.SIGTERM)
        print(
            f"acknowledged adds {len(acked)}, missing after restart {missing} (goal 0), re-adds that added "
            f"{readded} (goal 0), requests failed by the kill {len(errors)}, search after restart: {hits} hits"
        )


if __name__ == "__main__":
    main()

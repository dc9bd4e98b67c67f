"""Our own cost around the model: per-question overhead of ``eval`` against a stub model with a
fixed latency, quiet and beside a synthetic CPU load, the CLI's start-to-answer time, and the
per-query encode time by embedder backend and thread count.

The stub is an OpenAI-compatible HTTP server (``/v1/models``, ``/v1/chat/completions``) started
by this script on 127.0.0.1 in a subprocess; every completion answers "stub answer" with fixed
usage tokens after ``--latency`` seconds. The load is two ``while True: pass`` processes.

Per eval run it reports: start-up (process start to the stub's first request: imports, store,
model load, build), questions/s once running (questions / (last answer - first request)), the
ideal running time (model calls x latency / concurrency) and the ratio measured/ideal, and the
per-question overhead outside model calls, p50/p95 = the row's ``wall_s`` minus the wall of its
own model calls (``usage.query.wall_s``; under concurrency this includes waiting for the loop).

    python benchmarks/bench_overhead.py                      # short default run (a few minutes)
    python benchmarks/bench_overhead.py --limit 64 --concurrency 1 16 32 --latency 1
    python benchmarks/bench_overhead.py --only threads cli   # sections: threads eval cli

Skipped here: memorycpt (needs a built store with trained adapters), auto (a trained router),
REST mixed load (``benchmarks/bench_service.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


# --- the stub model server (runs in a subprocess: --serve-stub) --------------------------------
def serve_stub(port: int, latency: float, log: str) -> None:
    lock = threading.Lock()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})

        def do_POST(self):
            t0 = time.time()
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(latency)
            self._send(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": int(t0),
                    "model": "stub",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "stub answer"},
                        }
                    ],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103},
                }
            )
            with lock, open(log, "a") as f:
                f.write(f"{t0} {time.time()}\n")

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


@contextlib.contextmanager
def stub(latency: float):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile(prefix="stub", suffix=".log", delete=False).name
    p = subprocess.Popen([PY, __file__, "--serve-stub", str(port), str(latency), log])
    try:
        import urllib.request

        for _ in range(100):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        p.kill()
        p.wait()


@contextlib.contextmanager
def cpu_load(on: bool):
    procs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(2)] if on else []
    try:
        time.sleep(0.3 if on else 0)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def _read_log(log):
    rows = [tuple(map(float, line.split())) for line in Path(log).read_text().splitlines() if line.strip()]
    Path(log).write_text("")
    return rows


# --- sections --------------------------------------------------------------------------------
def bench_threads(loads) -> list[str]:
    """Per-query and 128-sentence encode times by backend (ONNX Runtime, the default; torch) and
    intra-op thread count (ONNX Runtime: per session; torch: process-wide)."""
    sys.path.insert(0, str(ROOT / "src"))
    from memfrontier.core.threads import passive_omp_wait

    passive_omp_wait()
    import torch

    from memfrontier.embed.minilm import MiniLMEmbedder

    embedders = {("onnx", n): MiniLMEmbedder(backend="onnx", num_threads=n) for n in (1, 2)}
    embedders[("torch", 1)] = embedders[("torch", 2)] = MiniLMEmbedder(backend="torch")
    for e in embedders.values():
        e.encode(["warm"])
    texts = [f"a sentence about topic {i} with a few more words to fill it out" for i in range(128)]
    out = []
    for loaded in loads:
        with cpu_load(loaded):
            for (backend, n), e in embedders.items():
                if backend == "torch":
                    torch.set_num_threads(n)
                e.encode(["warm up"])
                ts = []
                for i in range(15):
                    t = time.perf_counter()
                    e.encode([f"what did Alice say about trip {i}?"])
                    ts.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                e.encode(texts)
                b = (time.perf_counter() - t) * 1000
                out.append(
                    f"{'loaded' if loaded else 'quiet':7} {backend:5} threads {n}: query p50 {statistics.median(ts):7.1f} ms "
                    f"p95 {_pct(ts, 0.95):7.1f} ms | 128-sentence batch {b:7.0f} ms"
                )
    return out


def run_eval(strategy, base_url, log, store, out, limit, conc, latency, dataset):
    t0 = time.time()
    cmd = [
        PY,
        "-m",
        "memfrontier.cli",
        "eval",
        "--strategy",
        strategy,
        "--dataset",
        dataset,
        "--limit",
        str(limit),
        "--out",
        str(out),
        "--store",
        str(store),
        "--llm",
        "openai:stub",
        "--base-url",
        base_url,
        "--allow-unpriced",
        "--concurrency",
        str(conc),
    ]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    t1 = time.time()
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout)[-400:]}
    calls = _read_log(log)
    preds = [json.loads(x) for x in (Path(out) / "predictions.jsonl").read_text().splitlines() if x.strip()]
    over = [(p["wall_s"] - p["usage"]["by_stage"].get("query", {}).get("wall_s", 0.0)) * 1000 for p in preds]
    first = min(c[0] for c in calls) if calls else t1
    last = max(c[1] for c in calls) if calls else t1
    running = max(last - first, 1e-9)
    ideal = len(calls) * latency / max(1, min(conc, len(preds)))  # no more in flight than questions
    return {
        "n": len(preds),
        "calls": len(calls),
        "startup_s": first - t0,
        "running_s": running,
        "total_s": t1 - t0,
        "qps": len(preds) / running,
        "ideal_s": ideal,
        "ratio": running / ideal if ideal else float("nan"),
        "over_p50": _pct(over, 0.5),
        "over_p95": _pct(over, 0.95),
    }


def bench_eval(args, loads) -> list[str]:
    lines = [
        f"{'load':7} {'strategy':8} {'conc':>4} {'n':>3} {'start s':>7} {'run s':>6} {'ideal s':>7} {'ratio':>5} "
        f"{'q/s':>5} {'over p50 ms':>11} {'p95 ms':>7}"
    ]
    with tempfile.TemporaryDirectory() as tmp, stub(args.latency) as (url, log):
        store = Path(tmp) / "store"
        for strategy in args.strategies:
            # first run ingests the questions' conversations into the store: reported as build
            r = run_eval(
                strategy,
                url,
                log,
                store,
                Path(tmp) / f"warm-{strategy}",
                args.limit,
                max(args.concurrency),
                args.latency,
                args.dataset,
            )
            lines.append(
                f"(build: {strategy} first run, ingest included: {r.get('total_s', float('nan')):.1f} s {r.get('error', '')})"
            )
            for loaded in loads:
                with cpu_load(loaded):
                    for c in args.concurrency:
                        r = run_eval(
                            strategy,
                            url,
                            log,
                            store,
                            Path(tmp) / f"{strategy}-{loaded}-{c}",
                            args.limit,
                            c,
                            args.latency,
                            args.dataset,
                        )
                        if "error" in r:
                            lines.append(f"{strategy} c={c}: failed: {r['error']}")
                            continue
                        lines.append(
                            f"{'loaded' if loaded else 'quiet':7} {strategy:8} {c:>4} {r['n']:>3} {r['startup_s']:7.1f} "
                            f"{r['running_s']:6.1f} {r['ideal_s']:7.1f} {r['ratio']:5.2f} {r['qps']:5.1f} "
                            f"{r['over_p50']:11.0f} {r['over_p95']:7.0f}"
                        )
    return lines


MESSAGES = [
    {"role": "user", "content": "I moved to Lisbon in March 2023 and started a job at a bakery.", "speaker": "Alice"},
    {"role": "user", "content": "My sister Maria visits in June; I bake sourdough every morning.", "speaker": "Alice"},
    {"role": "user", "content": "I adopted a cat called Pixel last week.", "speaker": "Alice"},
]


def bench_cli(args, loads) -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory() as tmp, stub(args.latency) as (url, _log):
        f = Path(tmp) / "m.jsonl"
        f.write_text("".join(json.dumps(m) + "\n" for m in MESSAGES))
        store = str(Path(tmp) / "store")
        cli = [PY, "-m", "memfrontier.cli"]
        cmds = {
            "ingest --file (3 lines)": cli + ["ingest", "--store", store, "--file", str(f), "--user-id", "alice"],
            "search": cli + ["search", "where does Alice live", "--store", store, "--user-id", "alice", "--k", "2"],
            # the same search with the torch embedder (sentence-transformers): the baseline of this run
            "search (torch embedder)": ["env", "MEMFRONTIER_EMBED_BACKEND=torch"]
            + cli
            + ["search", "where does Alice live", "--store", store, "--user-id", "alice", "--k", "2"],
            "ask (stub model)": cli
            + [
                "ask",
                "where does Alice live",
                "--store",
                store,
                "--user-id",
                "alice",
                "--llm",
                "openai:stub",
                "--base-url",
                url,
                "--allow-unpriced",
            ],
        }
        subprocess.run(cmds["ingest --file (3 lines)"], env=ENV, capture_output=True)  # the store exists: warm
        imp = subprocess.run(
            [PY, "-c", "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"],
            env=ENV,
            capture_output=True,
            text=True,
        )
        for loaded in loads:
            with cpu_load(loaded):
                for name, cmd in cmds.items():
                    t = time.perf_counter()
                    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
                    dt = time.perf_counter() - t
                    note = "" if r.returncode == 0 else f"  (exit {r.returncode}: {r.stderr.strip()[-160:]})"
                    extra = f" (incl. {args.latency:.1f} s model)" if name.startswith("ask") else ""
                    lines.append(f"{'loaded' if loaded else 'quiet':7} {name:25} {dt:6.2f} s{extra}{note}")
        lines.append(f"(import torch alone: {float(imp.stdout or 'nan'):.2f} s)")
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-stub":
        serve_stub(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=0.5, help="stub model latency, seconds")
    ap.add_argument("--limit", type=int, default=16, help="questions per eval run")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--strategies", nargs="+", default=["rag"])
    ap.add_argument("--dataset", default="locomo")
    ap.add_argument("--only", nargs="+", default=["threads", "eval", "cli"], choices=["threads", "eval", "cli"])
    ap.add_argument("--no-load", action="store_true", help="quiet runs only (no synthetic CPU load)")
    args = ap.parse_args()
    loads = [False] if args.no_load else [False, True]
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (other work on the machine counts as 'quiet')")
    if "threads" in args.only:
        print("\n== per-query encode by backend and intra-op threads (OMP_WAIT_POLICY=PASSIVE) ==")
        print("\n".join(bench_threads(loads)))
    if "cli" in args.only:
        print("\n== CLI start-to-answer (warm store, fresh process) ==")
        print("\n".join(bench_cli(args, loads)))
    if "eval" in args.only:
        print(f"\n== eval against the stub ({args.latency} s per call, {args.limit} questions of {args.dataset}) ==")
        print("\n".join(bench_eval(args, loads)))


if __name__ == "__main__":
    main()

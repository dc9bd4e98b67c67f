"""Ingest of a LongMemEval_S question and the build of its view, against the embedder's raw
batched encode of the same turns in the same run (the goal: <= 10 s on two cores, quiet).

The question is the S file's (``longmemeval/longmemeval_s_dev.json.gz``) ``--question``-th item
(default 0, the first: 51 sessions, 514 turns), written alone as a LongMemEval-format JSON file in
a temporary folder. Without the S file, ``--source oracle`` builds an S-shaped question from the
oracle file (one seeded question's evidence sessions plus seeded sessions of other questions, up to
``--sessions``, by date). Measured:

- raw encode: ``MiniLMEmbedder.encode`` (the store's embedder, its own runtime and batch size) of
  the question's turns as the store renders them (:meth:`Record.render`), once each, after a
  warm-up: the least any ingest that embeds each turn once can cost;
- ingest: what ``memfrontier eval --dataset longmemeval --data-file FILE --strategy STRATEGY``
  does for one conversation: load the file (:func:`memfrontier.eval.datasets.load_dataset`), open
  the run's memory (:func:`memfrontier.eval.tasks.open_run`) on a fresh SQLite store directory,
  and :func:`memfrontier.eval.tasks.construct` (the store's ``add`` with a progress callback as eval
  passes one, then the strategy's build: ``rag-turns-rr`` builds the turn view, ``rag`` nothing).

Every ``MiniLMEmbedder.encode`` call of the process is timed and its texts counted, so the ingest
reports the seconds outside the encoder (file load, records, token counts, chunking, SQLite, the
view's bank) and the texts it encoded per turn (1.0: each turn encoded once; before record vectors,
an ingest encoded its chunks and the turn view encoded every turn again). The raw encode and the
ingest alternate ``--repeats`` times (raw first on odd rounds); medians are reported with
ratio = ingest / raw. Then the same file is ingested again into the last store (a new
``open_run``, as a resumed eval does): it must add no record and encode nothing. Only the CPU is
used; on a machine shared with other jobs the absolute times are noisy, the ratio less so (both
sides see the same load), and the CPU seconds of this process less still.

Usage::

    .venv/bin/python benchmarks/bench_ingest_longmemeval.py [--question 0] [--strategy rag-turns-rr] [--repeats 3]

``--data-root`` defaults to ``$MEMFRONTIER_DATA``, else ``../shared/data``. The script imports the
checkout's ``src``; copied elsewhere it imports whatever ``PYTHONPATH`` names (to measure another
checkout in the same sitting).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if (HERE.parent / "src" / "memfrontier").is_dir():
    sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing

import memfrontier  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
from memfrontier.eval import datasets  # noqa: E402
from memfrontier.eval.config import EvalConfig  # noqa: E402
from memfrontier.eval.datasets.longmemeval import parse_lme_datetime  # noqa: E402
from memfrontier.eval.tasks import construct, open_run  # noqa: E402

S_FILE = "longmemeval/longmemeval_s_dev.json.gz"


def default_data_root() -> Path:
    env = os.environ.get("MEMFRONTIER_DATA")
    return Path(env) if env else Path.cwd() / ".." / "shared" / "data"


def s_shaped_question(oracle: list[dict], sessions: int, seed: int) -> dict:
    """One LongMemEval item whose haystack has ``sessions`` sessions: a seeded question's own
    (evidence) sessions plus seeded draws of other questions' sessions, by date."""
    rng = random.Random(seed)
    target = rng.choice(oracle)
    own = set(target["haystack_session_ids"])
    pool = [
        (sid, date, turns)
        for item in oracle
        if item is not target
        for sid, date, turns in zip(item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"])
        if sid not in own
    ]
    rng.shuffle(pool)
    picked, seen = [], set()
    for sid, date, turns in pool:  # a session shared by several oracle questions is drawn once
        if len(picked) + len(own) >= sessions:
            break
        if sid not in seen:
            seen.add(sid)
            picked.append((sid, date, [{"role": t["role"], "content": t["content"]} for t in turns]))
    haystack = list(zip(target["haystack_session_ids"], target["haystack_dates"], target["haystack_sessions"])) + picked
    haystack.sort(key=lambda s: parse_lme_datetime(s[1]) or "")
    return {
        **target,
        "haystack_dates": [s[1] for s in haystack],
        "haystack_session_ids": [s[0] for s in haystack],
        "haystack_sessions": [s[2] for s in haystack],
    }


class EncodeMeter:
    """Times every ``MiniLMEmbedder.encode`` call of the process and counts its texts."""

    def __init__(self) -> None:
        self.seconds, self.texts = 0.0, 0
        self._encode = MiniLMEmbedder.encode
        meter = self

        def timed(self_, texts):
            t0 = time.perf_counter()
            try:
                return meter._encode(self_, texts)
            finally:
                meter.seconds += time.perf_counter() - t0
                meter.texts += len(texts)

        MiniLMEmbedder.encode = timed

    def reset(self) -> None:
        self.seconds, self.texts = 0.0, 0


def ingest_once(data_file: Path, store: Path, out: Path, strategy: str) -> tuple[float, dict, int]:
    """eval's ingest of the file's one conversation into ``store`` and the strategy's build, with a
    progress callback as eval passes one: (seconds, construction entry, ``embed`` progress reports)."""
    t0 = time.perf_counter()
    cfg = EvalConfig(dataset="longmemeval", split="all", data_file=data_file, strategy=strategy, store=store, out=out)
    (conv,) = datasets.load_dataset(cfg.dataset, cfg.split, data_file=cfg.data_file)
    mem, _judge, strat = open_run(cfg)
    events: list[str] = []
    try:
        entry = asyncio.run(construct(mem, strat, conv, lambda event, **info: events.append(event)))
    finally:
        mem.close()
    return time.perf_counter() - t0, entry, events.count("embed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", type=Path, default=None, help="folder holding longmemeval/")
    ap.add_argument(
        "--source", choices=("s", "oracle"), default="s", help="the S file's question, or one built from the oracle"
    )
    ap.add_argument("--question", type=int, default=0, help="index of the S file's question (default 0: the first)")
    ap.add_argument("--sessions", type=int, default=50, help="--source oracle: haystack sessions (S: 38-58)")
    ap.add_argument("--seed", type=int, default=13, help="--source oracle: seed of the question and the draws")
    ap.add_argument("--strategy", default="rag-turns-rr", help="the configuration whose view is built (rag: none)")
    ap.add_argument("--repeats", type=int, default=3, help="alternated raw / ingest rounds (medians reported)")
    args = ap.parse_args(argv)

    root = args.data_root or default_data_root()
    if args.source == "s":
        path = root / S_FILE
        if not path.is_file():
            print(f"LongMemEval_S not found at {path}; pass --data-root, or --source oracle", file=sys.stderr)
            return 2
        with gzip.open(path, "rt", encoding="utf-8") as f:
            item = json.load(f)[args.question]
        what = f"question {args.question} of {path.name}"
    else:
        path = root / datasets.DATASET_FILES["longmemeval"]
        if not path.is_file():
            print(f"LongMemEval oracle not found at {path}; pass --data-root", file=sys.stderr)
            return 2
        item = s_shaped_question(json.loads(path.read_text("utf-8")), args.sessions, args.seed)
        what = f"an S-shaped question built from {path.name} (seed {args.seed})"
    try:
        load = "load avg %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = ""
    print(
        f"# LongMemEval_S ingest + {args.strategy} view ({platform.machine()}, {os.cpu_count()} cpus, {load}); "
        f"memfrontier from {Path(memfrontier.__file__).parent}"
    )

    emb = MiniLMEmbedder()
    meter = EncodeMeter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_file = tmp / "longmemeval_s_question.json"
        data_file.write_text(json.dumps([item], ensure_ascii=False), "utf-8")
        (conv,) = datasets.load_dataset("longmemeval", "all", data_file=data_file)
        texts = [r.render() for r in conv.records]
        counts = [emb.count_tokens(t) for t in texts]
        window = 254
        read = sum(min(n, window) for n in counts)
        print(
            f"{what} ({item['question_id']}, {item['question_type']}): {len(item['haystack_sessions'])} sessions, "
            f"{len(texts)} turns, {sum(counts)} word pieces ({read} read by the encoder: "
            f"{sum(n > window for n in counts)} turns over its {window}-piece window are truncated)"
        )
        emb.encode(texts[: emb.batch_size])  # warm-up: the runtime loaded, its first batch run
        meter.reset()

        raw_s, raw_cpu, ing_s, ing_cpu, inside, encoded = [], [], [], [], [], []

        def raw() -> None:
            c0, t0 = time.process_time(), time.perf_counter()
            emb.encode(texts)
            raw_s.append(time.perf_counter() - t0)
            raw_cpu.append(time.process_time() - c0)

        for rep in range(args.repeats):
            if rep % 2 == 0:
                raw()
            meter.reset()
            c0 = time.process_time()
            s, entry, reports = ingest_once(data_file, tmp / f"store{rep}", tmp / "out", args.strategy)
            ing_cpu.append(time.process_time() - c0)
            ing_s.append(s)
            inside.append(meter.seconds)
            encoded.append(meter.texts)
            if rep % 2 == 1:
                raw()
            assert entry["records_added"] == len(texts), entry
            print(
                f"round {rep + 1}: raw encode {raw_s[-1]:.2f} s (CPU {raw_cpu[-1]:.1f} s), ingest {s:.2f} s "
                f"(CPU {ing_cpu[-1]:.1f} s; {reports} progress reports; {encoded[-1]} texts encoded = "
                f"{encoded[-1] / len(texts):.2f} per turn; {s - inside[-1]:.2f} s outside the encoder), "
                f"ratio {s / raw_s[-1]:.3f}",
                flush=True,
            )
        meter.reset()
        again_s, again, _ = ingest_once(data_file, tmp / f"store{args.repeats - 1}", tmp / "out", args.strategy)
        again_texts = meter.texts

    r, i = statistics.median(raw_s), statistics.median(ing_s)
    print(f"\n{'path':<52}{'median s':>10}{'turns/s':>10}{'pieces/s':>10}")
    print(f"{'raw encode (MiniLMEmbedder.encode of the turns)':<52}{r:>10.2f}{len(texts) / r:>10.1f}{read / r:>10.0f}")
    label = f"ingest + {args.strategy} view (load, open_run, construct)"
    print(f"{label:<52}{i:>10.2f}{len(texts) / i:>10.1f}{read / i:>10.0f}")
    rest = statistics.median([a - b for a, b in zip(ing_s, inside)])
    print(
        f"ingest time outside MiniLMEmbedder.encode: median {rest:.2f} s; texts encoded per turn: "
        f"{statistics.median(encoded) / len(texts):.2f}"
    )
    ratios = [a / b for a, b in zip(ing_s, raw_s)]
    print(
        f"ratio ingest / raw encode: {i / r:.3f}x of medians, {statistics.median(ratios):.3f}x median of rounds; "
        f"rounds {', '.join(f'{x:.3f}' for x in ratios)}"
    )
    print(
        f"CPU seconds of this process (all threads): raw {statistics.median(raw_cpu):.1f}, ingest "
        f"{statistics.median(ing_cpu):.1f}, ratio of medians {statistics.median(ing_cpu) / statistics.median(raw_cpu):.3f}x"
    )
    ok = again["records_added"] == 0 and again["chunks_embedded"] == 0 and again_texts <= 1
    print(
        f"re-ingest of the same file into the same store: +{again['records_added']} records, "
        f"{again['chunks_embedded']} chunks embedded, {again_texts} texts encoded (the warm-up search's query), "
        f"{again_s:.2f} s ({again_s / r:.3f}x raw encode) -> {'adds nothing' if ok else 'NOT IDEMPOTENT'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

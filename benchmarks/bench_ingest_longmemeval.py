"""Ingest of a LongMemEval-S-sized question against raw encoding of the same chunks (goal <= 1.15x).

The official LongMemEval S file (about 50 haystack sessions, ~500 turns per question) is not
available offline, so this builds an **S-shaped question from the oracle file**
(``longmemeval/longmemeval_oracle.json``): one question (drawn with ``--seed``) keeps its own
evidence sessions, and sessions of other questions, drawn with the same seed, fill its haystack
up to ``--sessions`` sessions (default 50). Distractor sessions lose their ``has_answer`` flags
(as in S, only evidence turns carry them) and the haystack is sorted by date, as in S. The
question is written as a LongMemEval-format JSON file in a temporary folder, then measured:

- raw encode: ``SentenceTransformer.encode`` of exactly the chunk texts the store embeds, the
  embedder's own way (the same model object, batch size ``MiniLMEmbedder.batch_size``,
  normalised), the model warmed up first;
- ingest: what ``memfrontier eval --dataset longmemeval --data-file FILE --strategy rag`` does
  for one conversation: load the file (:func:`memfrontier.eval.datasets.load_dataset`), open the
  run's memory (:func:`memfrontier.eval.runner.open_run`) on a fresh SQLite store directory, and
  :func:`memfrontier.eval.runner.construct` (ingest + the rag build, which builds nothing), with
  a progress callback as eval passes one (so the chunks are embedded batch by batch, reported).

The two alternate ``--repeats`` times (raw first on odd rounds, ingest first on even ones), each
ingest into a new store directory; medians are reported, with ratio = ingest / raw (goal
<= 1.15). Then the same file is ingested again into the last store (a new ``open_run``, as a
resumed eval does): it must add no record, embed no chunk and take a small fraction of the raw
encode time. Only the CPU is used; on a machine shared with other jobs the absolute times are
noisy, the ratio less so (both sides see the same load). Two figures move less with the load:
the ingest's seconds outside ``SentenceTransformer.encode`` (file load, records, token counts,
chunking, SQLite; timed by wrapping the model's ``encode``) and the CPU seconds of this process.

Usage::

    .venv/bin/python benchmarks/bench_ingest_longmemeval.py [--sessions 50] [--seed 13] [--repeats 3] [--torch-threads N]

``--data-root`` defaults to ``$MEMFRONTIER_DATA``, else ``../shared/data``.
"""

from __future__ import annotations

import argparse
import asyncio
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
sys.path.insert(0, str(HERE.parent / "src"))  # runnable from a checkout without installing

from memfrontier.core.types import Scope  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
from memfrontier.eval import datasets  # noqa: E402
from memfrontier.eval.config import EvalConfig  # noqa: E402
from memfrontier.eval.datasets.longmemeval import parse_lme_datetime  # noqa: E402
from memfrontier.eval.tasks import construct, open_run  # noqa: E402


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


def ingest_once(data_file: Path, store: Path, out: Path) -> tuple[float, dict, int]:
    """eval's ingest of the file's one conversation into ``store``, with a progress callback as
    eval passes one: (seconds, construction entry, ``embed`` progress reports)."""
    t0 = time.perf_counter()
    cfg = EvalConfig(dataset="longmemeval", split="all", data_file=data_file, strategy="rag", store=store, out=out)
    (conv,) = datasets.load_dataset(cfg.dataset, cfg.split, data_file=cfg.data_file)
    mem, _judge, strategy = open_run(cfg)
    events: list[str] = []
    try:
        entry = asyncio.run(construct(mem, strategy, conv, lambda event, **info: events.append(event)))
    finally:
        mem.close()
    return time.perf_counter() - t0, entry, events.count("embed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", type=Path, default=None, help="folder holding longmemeval/longmemeval_oracle.json")
    ap.add_argument("--sessions", type=int, default=50, help="haystack sessions of the built question (S: 38-58)")
    ap.add_argument("--seed", type=int, default=13, help="seed of the question and of the distractor draws")
    ap.add_argument("--repeats", type=int, default=3, help="alternated raw / ingest rounds (medians reported)")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    args = ap.parse_args(argv)

    path = (args.data_root or default_data_root()) / datasets.DATASET_FILES["longmemeval"]
    if not path.is_file():
        print(f"LongMemEval oracle not found at {path}; pass --data-root or set MEMFRONTIER_DATA", file=sys.stderr)
        return 2
    item = s_shaped_question(json.loads(path.read_text("utf-8")), args.sessions, args.seed)
    n_turns = sum(len(s) for s in item["haystack_sessions"])

    import torch

    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    try:
        load = "load avg %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = ""
    print(
        f"# LongMemEval-S-shaped ingest benchmark ({platform.machine()}, {os.cpu_count()} cpus, "
        f"torch threads {torch.get_num_threads()}, {load})"
    )
    print(
        f"question {item['question_id']} ({item['question_type']}) from {path.name}, seed {args.seed}: "
        f"{len(item['answer_session_ids'])} evidence session(s) + {len(item['haystack_sessions']) - len(item['answer_session_ids'])} "
        f"sessions drawn from other oracle questions = {len(item['haystack_sessions'])} sessions, {n_turns} turns "
        f"(S-shaped, built from the oracle file: the S file is not available offline)"
    )

    emb = MiniLMEmbedder()
    model = emb.model
    st_encode = model.encode
    st_encode(["warm up"] * emb.batch_size, batch_size=emb.batch_size)
    inside = [0.0]  # seconds the ingest spent inside SentenceTransformer.encode (same model object)

    def timed_encode(*a, **kw):
        t0 = time.perf_counter()
        try:
            return st_encode(*a, **kw)
        finally:
            inside[0] += time.perf_counter() - t0

    model.encode = timed_encode  # this process's cached model: the store's embedder calls it

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_file = tmp / "longmemeval_s_shaped.json"
        data_file.write_text(json.dumps([item], ensure_ascii=False), "utf-8")
        _, first, _ = ingest_once(data_file, tmp / "store-warm", tmp / "out")  # warm-up; gives the chunk texts
        mem = open_run(EvalConfig(dataset="longmemeval", split="all", store=tmp / "store-warm", out=tmp / "out"))[0]
        chunks = mem.store.chunks(Scope(user_id=item["question_id"]))
        mem.close()
        texts = [c.text for c in chunks]
        assert first["chunks_embedded"] == len(texts), (first["chunks_embedded"], len(texts))
        toks = [c.n_tokens for c in chunks]
        print(
            f"records {first['records']}, chunks {len(texts)} (tokens/chunk mean {statistics.fmean(toks):.0f}, "
            f"max {max(toks)}; {sum(t > 254 for t in toks)} over the encoder's 254-token window, truncated by it)"
        )

        def raw() -> None:
            c0, t0 = time.process_time(), time.perf_counter()
            st_encode(
                texts,
                batch_size=emb.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            raw_s.append(time.perf_counter() - t0)
            raw_cpu.append(time.process_time() - c0)

        raw_s, ing_s, rest_s, raw_cpu, ing_cpu = [], [], [], [], []
        for rep in range(args.repeats):
            store = tmp / f"store{rep}"  # a fresh store directory every round
            if rep % 2 == 0:
                raw()
            inside[0] = 0.0
            c0 = time.process_time()
            s, entry, reports = ingest_once(data_file, store, tmp / "out")
            ing_cpu.append(time.process_time() - c0)
            ing_s.append(s)
            rest_s.append(s - inside[0])
            if rep % 2 == 1:
                raw()
            assert entry["records_added"] == first["records"] and entry["chunks_embedded"] == len(texts), entry
            print(
                f"round {rep + 1}: raw encode {raw_s[-1]:.2f} s (CPU {raw_cpu[-1]:.1f} s), ingest {ing_s[-1]:.2f} s "
                f"(CPU {ing_cpu[-1]:.1f} s; {reports} progress reports; {rest_s[-1]:.2f} s outside the encoder), "
                f"ratio {ing_s[-1] / raw_s[-1]:.3f}",
                flush=True,
            )

        again_s, again, _ = ingest_once(data_file, tmp / f"store{args.repeats - 1}", tmp / "out")

    r, i = statistics.median(raw_s), statistics.median(ing_s)
    print(f"\n{'path':<44}{'median s':>10}{'turns/s':>10}{'chunks/s':>10}")
    print(f"{'raw encode (SentenceTransformer.encode)':<44}{r:>10.2f}{n_turns / r:>10.1f}{len(texts) / r:>10.1f}")
    print(f"{'ingest (load + open_run + construct, rag)':<44}{i:>10.2f}{n_turns / i:>10.1f}{len(texts) / i:>10.1f}")
    print(
        f"ingest time outside SentenceTransformer.encode (file load, records, token counts, chunking, SQLite): "
        f"median {statistics.median(rest_s):.2f} s = {statistics.median(rest_s) / r:.3f}x the raw encode"
    )
    ratios = [a / b for a, b in zip(ing_s, raw_s)]
    print(
        f"ratio ingest / raw encode: {i / r:.3f}x of medians, {statistics.median(ratios):.3f}x median of rounds "
        f"(goal <= 1.15x); rounds {', '.join(f'{x:.3f}' for x in ratios)}"
    )
    print(
        f"CPU seconds of this process (all threads; less sensitive to other jobs than wall time): raw "
        f"{statistics.median(raw_cpu):.1f}, ingest {statistics.median(ing_cpu):.1f}, ratio of medians "
        f"{statistics.median(ing_cpu) / statistics.median(raw_cpu):.3f}x"
    )
    ok = again["records_added"] == 0 and again["chunks_embedded"] == 0
    print(
        f"re-ingest of the same file into the same store: +{again['records_added']} records, "
        f"{again['chunks_embedded']} chunks embedded, {again_s:.2f} s ({again_s / r:.3f}x raw encode) "
        f"-> {'adds nothing' if ok else 'NOT IDEMPOTENT'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Fit the latency profile of each embedded model and compare it with the price book's.

The latency proxy of a call is ``base_s + in_s_per_token * n_in + out_s_per_token * n_out``
(MemPilot Eq. 15-17); the price book (``core/prices/v1.yaml``) holds one profile per model. This
script measures it on this machine: per model, one warm-up call (loads the model; not fitted),
then ``--calls`` calls over a design of prompt sizes (about 50 to 3000 tokens) and output caps (8
to 96 tokens), and a least-squares fit of the wall seconds on ``[1, n_in, n_out]``.

Every call's prompt opens with its own nonce, so no call may reuse the KV cache of the one before:
the shared prefix (at most the chat template's opening tokens) is checked to be below one decode
batch (:func:`memfrontier.llm.embedded.reusable_prefix` is 0) and the reply's ``cached_tokens`` to
be 0; a call that breaks either is refused. Prefill and decode are therefore both measured in full.

Prints, per model: each call as it runs, the fitted profile next to the book's with the ratio
fit / book per coefficient, and the calls' total wall time against the book's and the fit's
prediction. Results depend on the CPU and on its load (printed): fit on an idle machine.

Usage::

    .venv/bin/python benchmarks/bench_local_latency.py [--models qwen2.5-0.5b,qwen2.5-1.5b] [--calls 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time

import numpy as np

from memfrontier.core.pricebook import PriceBook
from memfrontier.llm import make_llm
from memfrontier.llm.embedded import load_llama, reusable_prefix
from memfrontier.llm.local_models import LOCAL_MODELS, ModelNotInstalledError, require_installed

#: (prompt tokens, output cap) of the measured calls, in order; varied in both so the fit is
#: determined from the first three on.
DESIGN = [(50, 8), (1600, 8), (50, 64), (400, 32), (3000, 8), (800, 96), (200, 48), (2400, 24)]
VOCAB = (
    "Evan and Sam talked about painting classes, a new car, the lake trip, healthy food, a kayak, "
    "the gym, Jasper, a family dinner, old photos, the office and a birthday party"
).split()


def prompt_text(llm, n_in: int, seed: int) -> str:
    """About ``n_in`` tokens of shuffled words (one correction pass on the model's own count)."""
    rng = random.Random(seed)
    n_words = max(4, n_in)
    for _ in range(2):
        words = [rng.choice(VOCAB) for _ in range(n_words)]
        text = " ".join(words)
        n = llm.count_tokens(text)
        if abs(n - n_in) <= max(8, n_in // 20):
            break
        n_words = max(4, int(n_words * n_in / max(n, 1)))
    return text


def messages(nonce: str, body: str) -> list[dict]:
    return [
        {"role": "system", "content": f"{nonce}. Continue the notes without stopping."},
        {"role": "user", "content": f"{body}\nWrite at least 300 more words of notes like these."},
    ]


def prompt_tokens(llm, msgs) -> tuple[list[int], int]:
    """The tokens the embedded client decodes for ``msgs`` and the model's decode batch size."""
    llama, _ = load_llama(llm.model_path, llm.n_ctx, n_threads=llm.n_threads)
    text = llm.render(msgs)
    return llama.tokenize(text.encode("utf-8"), add_bos=not llm.chat_template, special=llm.chat_template), llama.n_batch


async def measure(name: str, n_calls: int, threads: int | None) -> dict | None:
    try:
        require_installed(name)
    except ModelNotInstalledError as e:
        print(f"[{name}] skipped: {e}", flush=True)
        return None
    llm = make_llm(f"local:{name}", n_threads=threads)
    t0 = time.perf_counter()
    await llm.complete(messages("warm-up", "notes"), max_tokens=4)
    print(f"[{name}] loaded and warmed up in {time.perf_counter() - t0:.1f} s ({llm.n_threads} threads)", flush=True)
    rows, previous = [], []
    for i in range(n_calls):
        n_in, n_out = DESIGN[i % len(DESIGN)]
        nonce = f"Call {i} {random.Random(i).getrandbits(40):x}"
        msgs = messages(nonce, prompt_text(llm, n_in, seed=1000 * i + n_in))
        tokens, n_batch = prompt_tokens(llm, msgs)
        reuse = reusable_prefix(previous, tokens, n_batch)
        if reuse:
            raise SystemExit(f"[{name}] call {i} could reuse {reuse} cached tokens; prompts must differ earlier")
        t = time.perf_counter()
        c = await llm.complete(msgs, max_tokens=n_out, temperature=0.0)
        wall = time.perf_counter() - t
        if c.cached_tokens:
            raise SystemExit(f"[{name}] call {i} reports {c.cached_tokens} cached tokens")
        previous = tokens
        rows.append((c.input_tokens, c.output_tokens, wall))
        print(
            f"[{name}] call {i + 1}/{n_calls}: in={c.input_tokens:5d} out={c.output_tokens:3d} wall={wall:6.2f} s",
            flush=True,
        )
    return {"model": name, "model_id": llm.model_id, "rows": rows}


def fit(rows: list[tuple[int, int, float]]) -> np.ndarray:
    """Least-squares ``[base_s, in_s_per_token, out_s_per_token]``; raises SystemExit when the
    design does not determine all three."""
    a = np.array([[1.0, n_in, n_out] for n_in, n_out, _ in rows])
    if np.linalg.matrix_rank(a) < 3:
        raise SystemExit("the calls do not determine a 3-coefficient fit (vary the prompt and output sizes)")
    coef, *_ = np.linalg.lstsq(a, np.array([r[2] for r in rows]), rcond=None)
    return coef


def report(result: dict, book: PriceBook) -> None:
    coef = fit(result["rows"])
    profile = book.get(result["model_id"]).latency
    names = ("base_s", "in_s_per_token", "out_s_per_token")
    booked = [getattr(profile, n) for n in names] if profile is not None else [None] * 3
    print(f"\n{result['model']} ({result['model_id']}), {len(result['rows'])} calls")
    print(f"  {'coefficient':16s} {'fit':>10s} {'book':>10s} {'fit/book':>9s}")
    for n, f, b in zip(names, coef, booked):
        ratio = f"{f / b:9.2f}" if b else "        -"
        print(f"  {n:16s} {f:10.3e} {b if b is not None else float('nan'):10.3e} {ratio}")
    measured = sum(r[2] for r in result["rows"])
    fitted = sum(coef @ [1.0, r[0], r[1]] for r in result["rows"])
    line = f"  total wall of the calls: measured {measured:.2f} s, fit {fitted:.2f} s"
    if profile is not None:
        predicted = sum(profile.seconds(r[0], r[1]) for r in result["rows"])
        line += f", book {predicted:.2f} s (measured/book {measured / predicted:.2f})"
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models",
        default=",".join(LOCAL_MODELS),
        help="comma-separated registry names (default: every model; not installed ones are skipped)",
    )
    ap.add_argument("--calls", type=int, default=7, help=f"measured calls per model, 3-{len(DESIGN)} (default 7)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    args = ap.parse_args(argv)
    if not 3 <= args.calls <= len(DESIGN):
        ap.error(f"--calls must be in 3..{len(DESIGN)}")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOCAL_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(LOCAL_MODELS)}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} cores, load average {load:.2f}; price book {PriceBook.load().version}", flush=True)
    book = PriceBook.load()
    for name in names:
        result = asyncio.run(measure(name, args.calls, args.threads))
        if result is not None:
            report(result, book)
    return 0


if __name__ == "__main__":
    sys.exit(main())

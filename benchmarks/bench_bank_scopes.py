"""What a scope's first read from a memory bank costs when the bank holds many tenants.

A service reads many tenants' scopes through one bank file (a strategy's view: MemoryCPT's
memories, the turn view). The first read of a (scope, kind) loads its items, embeddings and, on a
BM25 search, its index (:meth:`~memfrontier.store.bank.MemoryBank.items`). The bank selects the
scope's rows in SQL (``store.records.scope_key_where``: a range of the ``scope_key`` index for a user);
before, it read every row of the kind and kept those of the scope in Python, so a first read cost
what reading the whole bank costs. Measured in the same run:

* ``whole-bank``: a first read of every scope at once (``Scope()``), what each first read cost before;
* ``one-user``: a first read of one user's scope (its cache dropped before each read);
* ``cached``: a repeated read of the same scope (the bank's cache).

The bank holds ``--tenants`` users with ``--items`` items each, embedded by a hashing embedder (the
vectors' values do not matter here, and MiniLM would spend minutes embedding them). Prints p50 /
p95 ms and ratios over ``one-user``.

2026-12-04, beside a 1.5B answerer run on both cores, 2,000 tenants x 30 items (60,000 rows):
one-user 0.34 ms p50, whole-bank 1,242 ms (3,676x), cached 0.01 ms.

    python benchmarks/bench_bank_scopes.py                       # about a minute
    python benchmarks/bench_bank_scopes.py --tenants 500 --items 20
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memfrontier.core.types import Scope  # noqa: E402
from memfrontier.store.bank import BankItem, MemoryBank  # noqa: E402


class HashEmbedder:
    """Unit vectors from a text's sha256 (deterministic, no model): enough to fill a bank."""

    model_id = "bench-hash"
    dim = 384

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def timed(fn, n: int) -> list[float]:
    ms = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ms.append(1e3 * (time.perf_counter() - t0))
    return ms


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", type=int, default=2000, help="users in the bank")
    ap.add_argument("--items", type=int, default=30, help="items per user")
    ap.add_argument("--reads", type=int, default=30, help="reads per setting")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bank = MemoryBank(Path(tmp) / "bank.db", HashEmbedder())
        t0 = time.perf_counter()
        for u in range(args.tenants):
            scope = Scope(user_id=f"user-{u}")
            bank.apply(
                [
                    BankItem(id=f"u{u}-{i}", kind="fact", scope=scope, text=f"user {u} fact {i}")
                    for i in range(args.items)
                ]
            )
        print(f"bank: {args.tenants} tenants x {args.items} items in {time.perf_counter() - t0:.1f} s")
        users = [Scope(user_id=f"user-{u}") for u in range(0, args.tenants, max(1, args.tenants // args.reads))]

        def cold(scope: Scope):
            bank._cache.clear()
            return bank.items(scope, "fact")

        settings = {
            "whole-bank": timed(lambda: cold(Scope()), max(3, args.reads // 5)),
            "one-user": [],
            "cached": [],
        }
        for sc in users[: args.reads]:
            settings["one-user"] += timed(lambda sc=sc: cold(sc), 1)
            assert len(bank.items(sc, "fact")) == args.items
            settings["cached"] += timed(lambda sc=sc: bank.items(sc, "fact"), 1)
        bank.close()
    ref = statistics.median(settings["one-user"])
    for name, ms in settings.items():
        print(
            f"{name:11s} p50 {pct(ms, 0.5):8.2f} ms  p95 {pct(ms, 0.95):8.2f} ms  {pct(ms, 0.5) / ref:7.2f}x one-user"
        )


if __name__ == "__main__":
    main()

"""What keeping rag's turn view in line with the store costs a query (``Rag.current_turn_bank``).

Each query of the turn configuration first compares the scope's write counter
(``MemoryStore.scope_generation``) and re-reads the scope's records only when it moved. Measured on
one LoCoMo test conversation (its questions as queries, ``rag-turns``' options), the context step
of each query (sync, search, context building; no model call) in four settings, in the same run:

* ``quiet``: nothing is written between queries (the reference);
* ``other-scope``: another user's record is written before each query (a busy multi-tenant
  store): the counter of the queried scope does not move, nothing is re-read;
* ``re-read``: each query re-reads the scope's records, as when any write anywhere invalidated
  every scope's turn view (SQLite's store-wide counter did) or at every query (PostgreSQL before
  schema 8 had no counter);
* ``same-scope``: a record of the queried scope is written before each query (re-read and one new
  turn embedded);
* ``new-strategy``: each query runs on a strategy built for it (another configuration reading the
  same store): before the turn view was shared per store (``views.turns.turn_view``) each strategy
  opened, re-read and indexed its own copy; now it reads the store's one.

Prints p50 / p95 ms and each setting's p50 over ``quiet``'s. Beside a 1.5B answerer run on one of
two cores (2026-12-03), conv-49, 40 queries: SQLite quiet 11.4 ms p50, other-scope 11.6 (1.02x),
re-read 30.9 (2.71x), same-scope 61.8; PostgreSQL (embedded server) 18.6, 19.0 (1.02x), 37.4 (2.02x),
71.2. 2026-12-04, SQLite, 40 queries: beside a 1.5B answerer run quiet 12.0 ms, new-strategy 67.4
(5.63x); with the answerer paused 12.5 and 67.4 (5.39x). Once the turn view was shared per store
(same day, beside a 1.5B run): quiet 12.2 ms, new-strategy 17.0 (1.39x; its token-count cache starts
cold).

    python benchmarks/bench_turn_sync.py                       # SQLite, about a minute
    python benchmarks/bench_turn_sync.py --store postgresql://localhost/mf   # an empty database
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memfrontier.core.types import Budget, Record, Scope  # noqa: E402
from memfrontier.embed.minilm import MiniLMEmbedder  # noqa: E402
from memfrontier.embed.query import _CACHES  # noqa: E402
from memfrontier.eval.datasets import DATASET_FILES, data_root  # noqa: E402
from memfrontier.eval.datasets.locomo import load_locomo  # noqa: E402
from memfrontier.frontier.spec import load_spec  # noqa: E402
from memfrontier.store.open import open_store  # noqa: E402
from memfrontier.strategies import get_strategy  # noqa: E402
from memfrontier.strategies.base import MemoryEnv, Query  # noqa: E402
from memfrontier.views.turns import turn_view  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversation", default="conv-49", help="LoCoMo conversation (default: a test one)")
    ap.add_argument("--queries", type=int, default=60, help="questions asked per setting")
    ap.add_argument("--store", help="store location (default: a temporary SQLite folder)")
    args = ap.parse_args()
    conv = next(c for c in load_locomo(data_root() / DATASET_FILES["locomo"]) if c.id == args.conversation)
    questions = [q.question for q in conv.questions][: args.queries]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(args.store or Path(tmp) / "store", MiniLMEmbedder())
        store.add(conv.records)
        scope = conv.records[0].scope
        options = next(c.options for c in load_spec().configurations if c.label == "rag-turns")
        rag = get_strategy("rag", options)
        env = MemoryEnv(store=store, llm=None, answer_llm=None)
        asyncio.run(rag.build(env, scope))
        n = [0]

        def write(to: Scope) -> None:
            n[0] += 1
            store.add([Record(id=f"bench-{n[0]}", scope=to, session_id="bench", speaker="X", text=f"Note {n[0]}.")])

        kept = lambda: rag  # noqa: E731
        settings = {  # what happens before each query (not timed), and the strategy that answers it
            "quiet": (lambda: None, kept),
            "other-scope": (lambda: write(Scope(user_id="bench-other-tenant")), kept),
            "re-read": (turn_view(store)._synced.clear, kept),  # the query then re-reads the scope's records
            "same-scope": (lambda: write(scope), kept),
            "new-strategy": (lambda: None, lambda: get_strategy("rag", options)),
        }
        rows = {}
        for q in questions[:5]:  # warm-up: thread pools, tokenizer, page cache
            asyncio.run(rag.context(Query(text=q, scope=scope), env, None, Budget()))
        for name, (step, strategy) in settings.items():
            times = []
            for q in questions:
                step()
                answering = strategy()
                _CACHES.clear()  # each query embeds its text (no vector left by the setting before)
                t = time.perf_counter()
                asyncio.run(answering.context(Query(text=q, scope=scope), env, None, Budget()))
                times.append((time.perf_counter() - t) * 1e3)
            rows[name] = (statistics.median(times), statistics.quantiles(times, n=20)[-1])
        store.close()
    print(
        f"{args.conversation}: {len(conv.records)} records, {len(questions)} queries per setting ({type(store).__name__})"
    )
    base = rows["quiet"][0]
    for name, (p50, p95) in rows.items():
        print(f"  {name:12s} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  p50 vs quiet {p50 / base:4.2f}x")


if __name__ == "__main__":
    main()

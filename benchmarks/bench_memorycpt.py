"""MemoryCPT construction and online cost on a LoCoMo test conversation, embedded model.

1. Construction (QAD) of the first ``--sessions`` sessions of conv-49 (0 = all), twice into fresh
   stores: with ``--concurrency`` calls in flight and with 1. Prints calls, tokens and wall
   seconds per session and the sequential / concurrent wall ratio. The embedded model runs one
   call at a time, so the ratio is about 1 here; against a server that batches requests it is not.
2. Online cost: for the questions answerable from the built sessions, ``memorycpt`` (RRF + Fine
   Summary), ``longctx`` and ``rag`` over the same store answer each question; prints measured
   tokens per question (all roles), USD x 1e4 per question at the embedded price and at the
   paper's prices (summarizer = Qwen2.5-7B, answerer = Qwen3-14B), and the ratios against rag
   and longctx measured in this run.

    .venv/bin/python benchmarks/bench_memorycpt.py [--sessions 2] [--questions 8] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from memfrontier.api import AsyncMemory
from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Scope
from memfrontier.eval.datasets import load_dataset
from memfrontier.strategies import get_strategy
from memfrontier.strategies.memorycpt.pipeline import MemoryCPT
from memfrontier.train.qar import answerable, first_sessions


def paper_usd(ledger: Ledger, book: PriceBook) -> float:
    """USD of the ledger's query calls at MemoryCPT's prices: summarizer as the 7B, the rest as the 14B QA model."""
    summ, qa = book.for_role("memorycpt.summarizer"), book.for_role("memorycpt.answerer")
    return sum((summ if c.role == "summarizer" else qa).usd(c.input_tokens, c.output_tokens) for c in ledger.calls)


async def build_once(records, scope, concurrency: int, root: Path) -> dict:
    mem = AsyncMemory.open(root)
    mem.store.add(records)
    strat = MemoryCPT(concurrency=concurrency)
    t0 = time.perf_counter()
    ledger = await mem.build(strat, scope)
    wall = time.perf_counter() - t0
    u = ledger.usage().construction
    bank = strat.bank(mem.env)
    out = {
        "wall_s": wall,
        "calls": u.calls,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "usd": u.usd,
        "episodes": bank.count(scope, "episode"),
        "facts": bank.count(scope, "fact"),
        "rejected": sum(v for k, v in ledger.events.items() if "op_rejected" in k),
        "mem": mem,
        "strategy": strat,
    }
    return out


async def main(args) -> None:
    (conv,) = [c for c in load_dataset("locomo", "test", data_root=args.data_root) if c.id == args.conversation]
    records = first_sessions(conv.records, args.sessions)
    n_sessions = len({r.session_id for r in records})
    scope = Scope(user_id=conv.id)
    book = PriceBook.load()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{conv.id}: {n_sessions} sessions, {len(records)} turns")
        conc = await build_once(records, scope, args.concurrency, Path(tmp) / "conc")
        seq = await build_once(records, scope, 1, Path(tmp) / "seq")
        for name, r in ((f"concurrency {args.concurrency}", conc), ("sequential", seq)):
            print(
                f"  {name:>14}: {r['calls']} calls ({r['calls'] / n_sessions:.1f}/session), "
                f"{r['input_tokens']} in + {r['output_tokens']} out tokens, {r['wall_s']:.1f} s "
                f"({r['wall_s'] / n_sessions:.1f} s/session), {r['episodes']} episodes, {r['facts']} facts, "
                f"{r['rejected']} rejected ops"
            )
        print(f"  wall ratio sequential / concurrent: {seq['wall_s'] / conc['wall_s']:.2f}x")
        seq["mem"].close()

        mem, cpt = conc["mem"], conc["strategy"]
        questions = answerable(conv.questions, {r.id for r in records})[: args.questions]
        print(f"online: {len(questions)} questions answerable from these sessions")
        rows = {}
        for name, strat in (("memorycpt", cpt), ("rag", get_strategy("rag")), ("longctx", get_strategy("longctx"))):
            toks, usd, usd_paper = [], [], []
            for q in questions:
                ledger = Ledger()
                with use_ledger(ledger, "query"):
                    await mem.ask(q.question, user_id=conv.id, strategy=strat, ledger=ledger)
                u = ledger.usage().query
                toks.append(u.input_tokens + u.output_tokens)
                usd.append(u.usd)
                usd_paper.append(paper_usd(ledger, book))
            rows[name] = {
                "tokens": statistics.mean(toks),
                "usd": statistics.mean(usd),
                "usd_paper": statistics.mean(usd_paper),
            }
        for name, r in rows.items():
            print(
                f"  {name:>9}: {r['tokens']:8.1f} tokens/q  USD×1e4/q {r['usd'] * 1e4:.4f} (embedded)  "
                f"{r['usd_paper'] * 1e4:.4f} (paper prices)  vs rag {r['usd_paper'] / rows['rag']['usd_paper']:.2f}x  "
                f"vs longctx {r['usd_paper'] / rows['longctx']['usd_paper']:.2f}x"
            )
        mem.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conversation", default="conv-49")
    p.add_argument("--sessions", type=int, default=2, help="sessions to build (0 = the whole conversation)")
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--data-root", default=None)
    asyncio.run(main(p.parse_args()))

"""Mean prompt tokens and USD per question of each strategy on the LoCoMo test split.

For every test question (314) each strategy builds its context and the answerer's prompt is
counted in the embedded model's tokenizer; USD is priced for the embedded model and, for
comparison with the papers, for Qwen3-14B (MemoryCPT's QA model). The output is taken at the
answerer's 32-token cap. ``--answer N`` also answers N questions per strategy with the embedded
model and reports measured tokens, USD and wall seconds. Ratios are against ``longctx`` measured
in the same run.

    .venv/bin/python benchmarks/bench_strategies.py [--data-root DIR] [--answer 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from memfrontier.api import AsyncMemory
from memfrontier.core.ledger import Ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Budget, Preference, Scope
from memfrontier.eval.datasets import load_dataset
from memfrontier.strategies import Query, get_strategy

STRATEGIES = ("longctx", "rag", "oracle")


async def main(args) -> None:
    convs = load_dataset("locomo", "test", data_root=args.data_root)
    book = PriceBook.load()
    paper_qa = book.get("qwen3-14b")
    with tempfile.TemporaryDirectory() as tmp:
        mem = AsyncMemory.open(Path(tmp) / "store")
        t0 = time.perf_counter()
        for c in convs:
            mem.store.add(c.records)
        print(f"ingested {sum(len(c.records) for c in convs)} records in {time.perf_counter() - t0:.1f}s")
        ans = mem.answerer
        rows = {}
        for name in STRATEGIES:
            strat = get_strategy(name)
            toks, t_ctx = [], time.perf_counter()
            for c in convs:
                for q in c.questions:
                    query = Query(text=q.question, scope=Scope(user_id=c.id), gold_evidence_ids=q.evidence_ids)
                    ctx = await strat.context(query, mem.env, Preference(), Budget())
                    toks.append(ans.llm.count_tokens(ans.prompt(q.question, ans.fit(q.question, ctx, Budget()))))
            ctx_s = (time.perf_counter() - t_ctx) / len(toks)
            out = ans.max_answer_tokens
            rows[name] = {
                "prompt_tokens": statistics.mean(toks),
                "usd_embedded": statistics.mean(ans.llm.price.usd(t, out) for t in toks),
                "usd_qwen3_14b": statistics.mean(paper_qa.usd(t, out) for t in toks),
                "context_ms": ctx_s * 1000,
            }
            if args.answer:
                qs = [(c, q) for c in convs for q in c.questions][: args.answer]
                measured = []
                for c, q in qs:
                    a = await mem.ask(
                        q.question, user_id=c.id, strategy=strat, gold_evidence_ids=q.evidence_ids, ledger=Ledger()
                    )
                    measured.append(
                        (a.usage.query.input_tokens, a.usage.query.output_tokens, a.usage.query.usd, a.wall_s)
                    )
                rows[name].update(
                    measured_in=statistics.mean(m[0] for m in measured),
                    measured_out=statistics.mean(m[1] for m in measured),
                    measured_usd=statistics.mean(m[2] for m in measured),
                    measured_wall_s=statistics.mean(m[3] for m in measured),
                )
        mem.close()
    base = rows["longctx"]
    print(f"\nLoCoMo test split, {len(toks)} questions; output at the {ans.max_answer_tokens}-token cap")
    print(
        f"{'strategy':10} {'prompt tok/q':>12} {'x longctx':>9} {'USDx1e4 gemma':>14} {'USDx1e4 qwen3-14b':>18} {'ctx ms/q':>9}"
    )
    for name, r in rows.items():
        print(
            f"{name:10} {r['prompt_tokens']:12.0f} {r['prompt_tokens'] / base['prompt_tokens']:9.3f} "
            f"{r['usd_embedded'] * 1e4:14.4f} {r['usd_qwen3_14b'] * 1e4:18.4f} {r['context_ms']:9.1f}"
        )
    if args.answer:
        print(f"\nmeasured with the embedded model on the first {args.answer} questions")
        print(f"{'strategy':10} {'in tok':>8} {'out tok':>8} {'USDx1e4':>9} {'wall s/q':>9}")
        for name, r in rows.items():
            print(
                f"{name:10} {r['measured_in']:8.0f} {r['measured_out']:8.1f} {r['measured_usd'] * 1e4:9.4f} {r['measured_wall_s']:9.2f}"
            )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", type=Path, default=None)
    ap.add_argument("--answer", type=int, default=5, help="questions per strategy to answer for real (0 = none)")
    asyncio.run(main(ap.parse_args()))

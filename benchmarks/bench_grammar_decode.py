"""Greedy decoding under a grammar on the embedded model: llama-cpp-python's chain (the grammar
matched against every candidate) against the checked sampler of ``memfrontier.llm.llama_sampling``
(the grammar asked about the argmax only), on the same prompts, in the same run.

For each prompt and constraint (a JSON schema of BudgetMem's shape, a bounded integer array, the
answerer's single-line grammar) both samplers decode greedily from an empty cache; the script
checks that they give the same tokens and prints ms per generated token for each, the ratio, and
how many tokens needed the grammar mask (rejected argmax).

    .venv/bin/python benchmarks/bench_grammar_decode.py [--max-tokens 48] [--repeats 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import time

from memfrontier.llm.embedded import (
    _grammar,
    _single_line_grammar,
    default_model_path,
    load_llama,
    render_prompt,
)
from memfrontier.llm.llama_sampling import GreedyGrammarSampler

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {
            "type": "array",
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "subject": {"type": "string"},
                    "relation": {"type": "string"},
                    "object": {"type": "string"},
                },
                "required": ["subject", "relation", "object"],
            },
        }
    },
    "required": ["answer"],
}
PROMPTS = [
    (
        "relations",
        [
            {"role": "system", "content": "Extract (subject, relation, object) triples as JSON."},
            {
                "role": "user",
                "content": "Evan bought a blue Prius in May 2023. Sam adopted a beagle named "
                "Max. Evan drove to Canada with his family.",
            },
        ],
        SCHEMA,
    ),
    (
        "ints",
        [{"role": "user", "content": "Count from one to twenty as a JSON array of integers."}],
        {"type": "array", "items": {"type": "integer"}, "maxItems": 8},
    ),
    (
        "line",
        [
            {"role": "user", "content": "Evan: I bought a blue Prius.\n\nQuestion: What car did Evan buy?"},
            {"role": "assistant", "content": "Answer:"},
        ],
        None,
    ),
]


def decode(llm, prompt: str, grammar, max_tokens: int) -> tuple[str, int, float]:
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True)
    llm.reset()  # an empty cache for both samplers
    t0 = time.perf_counter()
    out = llm.create_completion(
        tokens, max_tokens=max_tokens, temperature=0.0, top_k=1, top_p=1.0, repeat_penalty=1.15, grammar=grammar
    )
    return out["choices"][0]["text"], int(out["usage"]["completion_tokens"]), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    llm, _ = load_llama(default_model_path(), 8192)
    checked_init = llm._init_sampler
    chain_init = functools.partial(type(llm)._init_sampler, llm)
    totals = {"chain": [0.0, 0], "checked": [0.0, 0]}
    print(f"{'case':>10} {'tokens':>6} {'chain ms/tok':>13} {'checked ms/tok':>15} {'ratio':>6} {'masked':>7}")
    for name, msgs, schema in PROMPTS:
        grammar = _grammar(json.dumps(schema)) if schema is not None else _single_line_grammar()
        prompt = render_prompt(msgs)
        runs = {}
        for _ in range(args.repeats):
            for label, init in (("chain", chain_init), ("checked", checked_init)):
                llm._init_sampler = init
                text, n, secs = decode(llm, prompt, grammar, args.max_tokens)
                masked = llm._sampler.resamples if isinstance(llm._sampler, GreedyGrammarSampler) else None
                prev = runs.setdefault(label, (text, n, [], masked))
                if (text, n) != prev[:2]:
                    raise SystemExit(f"{name}/{label}: repeat decoded {text!r}, first {prev[0]!r}")
                prev[2].append(secs)
        llm._init_sampler = checked_init
        if runs["chain"][:2] != runs["checked"][:2]:
            raise SystemExit(f"{name}: chain {runs['chain'][0]!r} != checked {runs['checked'][0]!r}")
        n = runs["chain"][1]
        ms = {k: 1000 * min(v[2]) / max(n, 1) for k, v in runs.items()}
        for k in totals:
            totals[k][0] += min(runs[k][2])
            totals[k][1] += n
        print(
            f"{name:>10} {n:>6} {ms['chain']:>13.1f} {ms['checked']:>15.1f} {ms['chain'] / ms['checked']:>5.2f}x "
            f"{runs['checked'][3]:>7}"
        )
    c, k = (1000 * t / max(n, 1) for t, n in totals.values())
    print(f"{'all':>10} {totals['chain'][1]:>6} {c:>13.1f} {k:>15.1f} {c / k:>5.2f}x   (same tokens in every case)")


if __name__ == "__main__":
    main()

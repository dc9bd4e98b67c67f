"""AutoMEM's graph indexer: what its notes are made of, with the current prompt and with the v3
prompt (kept here as the baseline), on the same windows.

The first ``--sessions`` sessions of LoCoMo conversations or LongMemEval questions
(``--dataset``, ``--conversation`` ids, comma-separated) are cut into the indexer's windows
(:func:`~memfrontier.strategies.automem.graph_notes.make_windows`, 20 turns), and each window goes to the
indexer twice, one prompt after the other: v3 (one worked example with two named people) and the
current one (:data:`~memfrontier.strategies.automem.graph_notes.PROMPT_VERSION`). Every note returned is
classified: ungrounded (fewer than half its words in the window), a copy of the window's turns
(:func:`~memfrontier.views.copies.copies_turns`), an echo of the example's people, or a note. A
window left without notes falls back to one note per turn. Prints, per prompt, the notes of each
class and the windows that would fall back.

    .venv/bin/python benchmarks/bench_indexer_notes.py --llm local:qwen2.5-1.5b [--sessions 4]
    .venv/bin/python benchmarks/bench_indexer_notes.py --dataset longmemeval --conversation ID,ID"""

from __future__ import annotations

import asyncio
import collections
import tempfile
import time
from pathlib import Path

from prompt_bench import conversation_turns, parse_args
from pydantic import ValidationError

from memfrontier.api import AsyncMemory
from memfrontier.llm.parsing import parse_json
from memfrontier.strategies.automem import graph_notes as G
from memfrontier.views.copies import copies_turns, names_absent_people

# The indexer's instruction of automem-indexer-v3 (one worked example, two named people), the baseline.
_A, _B = G.EXAMPLE_NAMES
V3_INSTRUCTION = (
    "You write compact memory notes from an excerpt of a history: what the people did, decided, "
    "planned, felt or told about themselves, retold in the third person. Write one note per "
    'distinct fact, event or plan: "text" is one sentence in your own words that keeps names, dates, '
    "places and numbers exactly (never a quote of a message); "
    '"speakers" are the people who said it; "topic" is one or two lower-case words. '
    f"At most {G.MAX_NOTES} notes, together covering what matters in the whole excerpt. Reply with JSON only.\n"
    "Example. Excerpt:\n"
    f'[1] {_A} said, "My bike chain snapped yesterday, so I walked the last two miles home."\n'
    f'[2] {_B} said, "Ouch! Want me to come over on Saturday and help you fix it?"\n'
    f'JSON: {{"notes": [{{"text": "{_A}\'s bike chain snapped and she walked the last two miles home.", '
    f'"speakers": ["{_A}"], "topic": "bike"}}, {{"text": "{_B} offered to come over on Saturday to help '
    f'{_A} fix her bike.", "speakers": ["{_B}"], "topic": "plans"}}]}}'
)

PROMPTS = {"automem-indexer-v3": V3_INSTRUCTION, G.PROMPT_VERSION: G.INDEXER_INSTRUCTION}


def classify(text: str, w: G.Window) -> collections.Counter:
    """The classes of the notes in one reply (``unparsable`` when it has none to classify)."""
    c = collections.Counter()
    parsed = parse_json(text, expect="object")
    try:
        notes = G.NotesOut.model_validate(parsed.value).notes[: G.MAX_NOTES] if parsed.ok else None
    except ValidationError:
        notes = None
    if not notes:
        c["unparsable"] += 1
        return c
    turns = [r.text or r.render() for r in w.records]
    for n in notes:
        if not G.grounded(n.text, w):
            c["ungrounded"] += 1
        elif copies_turns(n.text, turns):
            c["copy"] += 1
        elif names_absent_people(n.text, G.EXAMPLE_NAMES, turns):
            c["example echo"] += 1
        else:
            c["note"] += 1
    return c


async def main(args) -> None:
    conv_ids, records = conversation_turns(args)
    windows = G.make_windows(records, 20)
    print(f"{conv_ids}: first {args.sessions} sessions -> {len(windows)} windows", flush=True)
    totals = {name: collections.Counter() for name in PROMPTS}
    fallback = collections.Counter()
    seconds = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        mem = AsyncMemory.open(Path(tmp) / "mem", llm=args.llm, allow_unpriced=True)
        for i, w in enumerate(windows, 1):
            messages = G.window_prompt(w)
            row = []
            for name, instruction in PROMPTS.items():
                t0 = time.perf_counter()
                out = await mem.env.llm.complete(
                    [{"role": "system", "content": instruction}, messages[1]],
                    role="indexer",
                    max_tokens=G.MAX_TOKENS,
                    temperature=0.0,
                    json_schema=G.NOTES_SCHEMA,
                )
                seconds[name] += time.perf_counter() - t0
                c = classify(out.text, w)
                totals[name] += c
                fallback[name] += c["note"] == 0
                row.append(f"{name} {dict(c)}")
            print(f"window {i}/{len(windows)} ({len(w.records)} turns): " + "; ".join(row), flush=True)
        mem.close()
    print()
    print(
        f"{'prompt':<22}{'notes':>7}{'copies':>8}{'echoes':>8}{'ungrounded':>12}{'unparsable':>12}"
        f"{'windows falling back':>22}{'s/call':>8}"
    )
    for name, c in totals.items():
        print(
            f"{name:<22}{c['note']:>7}{c['copy']:>8}{c['example echo']:>8}{c['ungrounded']:>12}{c['unparsable']:>12}"
            f"{fallback[name]:>16}/{len(windows):<5}{seconds[name] / len(windows):>8.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main(parse_args(__doc__, "indexer model")))

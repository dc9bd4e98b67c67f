"""MemoryCPT's episode generator: how often the validator accepts the model's first try, with the
current prompt and with the v1 prompt (kept here as the baseline), on the same episodes.

The first ``--sessions`` sessions of a LoCoMo conversation are segmented by the construction's own
segmenter (one call per 80-turn window; a window under 3 turns is one episode without a topic),
then every episode's turns go to the episode generator twice, one prompt after the other: v1 (no
worked example, "Episode topic: (none)" when the segmenter gave no topic, 450 output tokens) and
the current one (:data:`~memfrontier.strategies.memorycpt.construction.prompts.PROMPT_VERSION`). Each output is
checked by :func:`~memfrontier.strategies.memorycpt.construction.ops.validate_episode` against the episode's turns,
as the construction does (the construction then retries a refused output once). Prints the
accepted share of each prompt and the reasons of the refusals.

    .venv/bin/python benchmarks/bench_qad_episode.py --llm local:qwen2.5-1.5b [--sessions 4]
"""

from __future__ import annotations

import asyncio
import collections
import json
import tempfile
import time
from pathlib import Path

from prompt_bench import conversation_turns, parse_args

from memfrontier.api import AsyncMemory
from memfrontier.llm.parsing import parse_json
from memfrontier.strategies.memorycpt.construction import prompts as P
from memfrontier.strategies.memorycpt.construction.episodic import EpisodicBuilder, render_turn
from memfrontier.strategies.memorycpt.construction.ops import OperationError, validate_episode

# The episode generator's prompt of memorycpt-qad-v1, the baseline.
V1_SYSTEM = (
    "You write episodic memories. Given the messages of one episode, write:\n"
    "- title: 10 to 20 specific, searchable words naming who did what;\n"
    "- content: a third-person narrative of the episode: who, when, what happened, decisions, feelings "
    "and plans, with names and concrete details; convert relative times (yesterday, last week) to "
    "absolute dates using the message dates;\n"
    "- timestamp: when the episode happened, ISO format (YYYY-MM-DDTHH:MM), taken from the message "
    "dates, never from today's date.\n"
    'Reply with JSON: {"reasoning": ..., "title": ..., "content": ..., "timestamp": ...}.'
)


def v1_messages(topic: str, lines: list[str]) -> tuple[list[dict], int]:
    user = f"Episode topic: {topic or '(none)'}\nMessages:\n" + "\n".join(lines) + "\n\nJSON:"
    return P.messages(V1_SYSTEM, user), 450


def current_messages(topic: str, lines: list[str]) -> tuple[list[dict], int]:
    return P.messages(P.EPISODE_SYSTEM, P.episode_user(topic, lines)), 800


PROMPTS = {"v1": v1_messages, P.PROMPT_VERSION: current_messages}


def verdict(text: str, first_ts: str | None, turns: list[str]) -> str:
    """ "accepted", or why the construction would refuse the output."""
    parsed = parse_json(text, expect="object")
    if not parsed.ok or parsed.truncated:
        return "unparsable or truncated"
    obj = dict(parsed.value)
    obj.pop("reasoning", None)
    try:
        validate_episode(obj, first_ts, turns)
    except OperationError as e:
        return e.reason or str(e).split(":")[0]
    return "accepted"


async def main(args) -> None:
    conv_ids, records = conversation_turns(args)
    sessions: dict[str, list] = {}
    for r in records:
        sessions.setdefault(r.session_id, []).append(r)
    with tempfile.TemporaryDirectory() as tmp:
        mem = AsyncMemory.open(Path(tmp) / "mem", llm=args.llm, allow_unpriced=True)
        builder = EpisodicBuilder(mem.env.llm, bank=None, keep_traces=False)
        episodes = []  # (topic, records)
        t0 = time.perf_counter()
        for recs in sessions.values():
            for i in range(0, len(recs), P.MAX_SEGMENT_TURNS):
                window = recs[i : i + P.MAX_SEGMENT_TURNS]
                for seg in await builder._segment(records[0].scope, window):
                    episodes.append((seg.topic, [window[j - 1] for j in seg.indices]))
        print(
            f"{conv_ids}: {len(sessions)} sessions, {len(records)} turns -> {len(episodes)} episodes "
            f"({sum(1 for t, _ in episodes if not t)} without a topic), segmented in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        results: dict[str, collections.Counter] = {name: collections.Counter() for name in PROMPTS}
        seconds = collections.Counter()
        for n, (topic, recs) in enumerate(episodes, 1):
            lines = [render_turn(r) for r in recs]
            turns = [r.text for r in recs]
            first_ts = next((r.timestamp for r in recs if r.timestamp), None)
            row = []
            for name, make in PROMPTS.items():
                messages, max_tokens = make(topic, lines)
                t0 = time.perf_counter()
                out = await mem.env.llm.complete(
                    messages,
                    role="episode_generator",
                    max_tokens=max_tokens,
                    temperature=0.0,
                    json_schema=P.EPISODE_SCHEMA,
                )
                seconds[name] += time.perf_counter() - t0
                v = verdict(out.text, first_ts, turns)
                results[name][v] += 1
                row.append(f"{name} {v}")
            print(
                f"episode {n}/{len(episodes)} ({len(recs)} turns, topic {topic[:30]!r}): " + "; ".join(row), flush=True
            )
        mem.close()
    print()
    print(f"{'prompt':<22}{'accepted':>10}{'share':>8}{'s/call':>8}  refusals")
    for name, c in results.items():
        total = sum(c.values())
        refused = {k: v for k, v in c.items() if k != "accepted"}
        print(
            f"{name:<22}{c['accepted']:>6}/{total:<3}{c['accepted'] / total:>8.2f}{seconds[name] / total:>8.1f}  "
            f"{json.dumps(refused)}"
        )


if __name__ == "__main__":
    asyncio.run(main(parse_args(__doc__, "construction model")))

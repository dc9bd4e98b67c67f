"""What checking input at the boundary costs: records validated (timestamp normalised to UTC,
text made valid Unicode) against records built without validation, in the same run.

The workload is LoCoMo's 10 conversations (5,882 turns) when the data is present, else 5,000
synthetic turns. Three passes, each timed ``--repeat`` times (best kept):

- baseline: a pydantic model with Record's fields and none of its validators (what ``Record``
  cost before the boundary checks);
- validated: ``Record(...)`` (what loaders, the API and the store do);
- messages: :func:`memfrontier.core.messages.messages_to_records` from chat dicts (``Memory.add``).

Prints microseconds per record and the ratio to the baseline. Ordering by instant is timed the
same way: ``sorted(key=instant_key)`` against a plain string sort of the canonical timestamps.

Usage::

    .venv/bin/python benchmarks/bench_ingest_checks.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

from pydantic import create_model

from memfrontier.core.messages import messages_to_records
from memfrontier.core.timeutil import instant_key
from memfrontier.core.types import Record, Scope


def _workload() -> list[dict]:
    try:
        from memfrontier.eval.datasets import load_dataset

        recs = [r for c in load_dataset("locomo") for r in c.records]
        source = "LoCoMo (10 conversations)"
    except Exception:  # noqa: BLE001 - no data on this machine: synthetic turns instead
        recs = [
            Record(
                id=f"r{i}",
                session_id=f"s{i // 20}",
                speaker="Ana",
                timestamp=f"2023-05-{1 + i % 28:02d}T10:00:00",
                text=f"turn {i}: I moved to Lisbon in May and I like green tea.",
            )
            for i in range(5000)
        ]
        source = "synthetic"
    print(f"workload: {len(recs)} records from {source}")
    naive = [r.timestamp.replace("+00:00", "") if r.timestamp else None for r in recs]  # as loaders produce them
    return [
        dict(id=r.id, scope=r.scope, session_id=r.session_id, speaker=r.speaker, role=r.role, timestamp=ts, text=r.text)
        for r, ts in zip(recs, naive)
    ]


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = _workload()
    n = len(rows)
    msgs = [
        {"role": r["role"], "content": r["text"], "speaker": r["speaker"], "timestamp": r["timestamp"]} for r in rows
    ]
    unchecked = create_model("Unchecked", **{k: (f.annotation, f) for k, f in Record.model_fields.items()})
    base = _best(lambda: [unchecked(**r) for r in rows], args.repeat)
    checked = _best(lambda: [Record(**r) for r in rows], args.repeat)
    via_msgs = _best(
        lambda: messages_to_records(msgs, scope=Scope(user_id="u"), session_id="s", timestamp=None), args.repeat
    )
    print(f"{'pass':<12}{'us/record':>12}{'x baseline':>12}")
    for name, t in (("baseline", base), ("validated", checked), ("messages", via_msgs)):
        print(f"{name:<12}{1e6 * t / n:>12.2f}{t / base:>12.1f}")
    stamps = [Record(**r).timestamp for r in rows]
    plain = _best(lambda: sorted(stamps, key=lambda s: s or ""), args.repeat)
    by_instant = _best(lambda: sorted(stamps, key=instant_key), args.repeat)
    print(
        f"sort {n} timestamps: string {1e3 * plain:.2f} ms, by instant {1e3 * by_instant:.2f} ms "
        f"({by_instant / plain:.1f}x)"
    )


if __name__ == "__main__":
    main()

"""Build one scope's graph index from its records (AutoMEM, arXiv 2606.04315, Sec. 5).

records -> windows -> notes (one ``indexer`` call per window, :mod:`.notes`) -> deduplicated
Speaker / Topic names (:mod:`.dedup`) -> :class:`~memfrontier.strategies.automem.graph.backend.GraphData` ->
backend. Runs in a strategy's ``build`` (ledger stage ``construction``).

Idempotent and resumable: the notes of every window are cached in ``<state dir>/notes.json``
keyed by (prompt version, model, the window's records), written after each window, so an
interrupted build pays only for the windows it had not finished; ``<state dir>/meta.json``
records what the graph was built from, and a build whose inputs match it makes no call and
writes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.files import private_dir
from ...core.jsonio import write_json_atomic
from ...core.ledger import current_ledger, sum_usage_records
from ...core.timeutil import instant_key
from ...core.types import Record
from ...llm.metered import MeteredLLM
from .graph.backend import GraphBackend, GraphData
from .graph.dedup import dedup_names, normalize_name
from .graph.schema import SCHEMA_VERSION
from .graph_notes import PROMPT_VERSION, Note, make_windows, summarize_window

NOTES_FILE = "notes.json"
META_FILE = "meta.json"


@dataclass
class GraphBuild:
    """What a build did: windows, model calls made, windows served from the cache, whether the
    graph was already up to date (``skipped``), and the node/edge counts written."""

    windows: int = 0
    calls: int = 0
    cached_windows: int = 0
    skipped: bool = False
    counts: dict | None = None


def records_digest(records: list[Record]) -> str:
    """sha256 over the records' ids and rendered texts, in order."""
    h = hashlib.sha256()
    for r in records:
        h.update(f"{r.id}\x1f{r.render()}\x1f{r.timestamp or ''}\x1e".encode())
    return h.hexdigest()


def _in_time_order(notes: list[Note]) -> list[Note]:
    keys, last = [], instant_key(None)
    for n in notes:
        key = instant_key(n.time)
        last = key if key[0] else last
        keys.append(last)
    return [notes[i] for i in sorted(range(len(notes)), key=keys.__getitem__)]


def graph_from_notes(
    notes: list[Note], ns: str, *, embed: Callable[[list[str]], np.ndarray] | None = None
) -> GraphData:
    """Notes -> nodes and edges.

    Notes are put in time order first, by instant (:func:`memfrontier.core.timeutil.instant_key`),
    so ``pos`` and FOLLOWS follow real time even when timestamps carry different UTC offsets; the
    sort is stable and a note without a time stays right after the note before it (a trajectory
    step after its predecessor). Memory ``m<pos>`` per note; Speaker / Topic per deduplicated name (ids ``s:<normalised>`` /
    ``t:<normalised>``); SAID_BY per (note, speaker), OF_TOPIC per note with a topic, FOLLOWS from
    each note to the next. Topic names are stored lower-case; ``embed`` adds embedding similarity
    to the topic dedup.
    """
    notes = _in_time_order(notes)
    spk = dedup_names([s for n in notes for s in n.speakers])
    top = dedup_names([n.topic for n in notes if n.topic], embed=embed)
    data = GraphData()
    speakers: dict[str, str] = {}
    topics: dict[str, str] = {}
    for pos, n in enumerate(notes):
        mid = f"m{pos}"
        data.memories.append(
            {
                "id": mid,
                "ns": ns,
                "text": n.text,
                "time": n.time or "",
                "session": n.session,
                "pos": pos,
                "step": n.step,
                "action": n.action or "",
                "record_ids": list(n.record_ids),
                "source": n.source,
            }
        )
        for s in dict.fromkeys(spk.get(s, s) for s in n.speakers):
            key = normalize_name(s)
            if not key:
                continue
            if key not in speakers:
                speakers[key] = f"s:{key}"
                data.speakers.append({"id": f"s:{key}", "ns": ns, "name": s})
            data.said_by.append((mid, speakers[key]))
        if n.topic:
            name = top.get(n.topic, n.topic).lower()
            key = normalize_name(name)
            if key:
                if key not in topics:
                    topics[key] = f"t:{key}"
                    data.topics.append({"id": f"t:{key}", "ns": ns, "name": name})
                data.of_topic.append((mid, topics[key]))
        if pos:
            data.follows.append((f"m{pos - 1}", mid))
    return data


class GraphIndexer:
    """Builds graph indexes with ``llm`` (role ``indexer``).

    Args:
        llm: the metered memory-side model.
        window_turns: records per window (one call each).
        concurrency: windows in flight at once (the embedded model runs one at a time anyway).
        embed: optional ``texts -> (n, d)`` L2-normalised vectors for topic dedup.
    """

    def __init__(
        self,
        llm: MeteredLLM,
        *,
        window_turns: int = 20,
        concurrency: int = 4,
        embed: Callable[[list[str]], np.ndarray] | None = None,
    ):
        if window_turns < 1:
            raise ValueError(f"window_turns must be >= 1, got {window_turns}")
        self.llm = llm
        self.window_turns = window_turns
        self.concurrency = max(1, concurrency)
        self.embed = embed

    def _meta(self, records: list[Record], ns: str) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "prompt": PROMPT_VERSION,
            "model": self.llm.model_id,
            "window_turns": self.window_turns,
            "ns": ns,
            "records_sha256": records_digest(records),
        }

    async def build(
        self,
        records: list[Record],
        backend: GraphBackend,
        ns: str,
        state_dir: str | Path | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ) -> GraphBuild:
        """Build (or confirm up to date) the graph of ``records`` in ``backend``.

        ``state_dir`` holds the notes cache and build meta (None: no cache, always rebuilt).
        ``progress(done, total, "windows")`` is called before the first window (``done`` 0) and
        after each window (cached ones included).
        Raises GraphError when the backend cannot be written; model failures (LLMError) propagate.
        """
        meta = self._meta(records, ns)
        state = Path(state_dir) if state_dir is not None else None
        if state is not None and (state / META_FILE).is_file():
            try:
                old = json.loads((state / META_FILE).read_text("utf-8"))
            except (OSError, ValueError):
                old = {}
            if {k: old.get(k) for k in meta} == meta:
                return GraphBuild(skipped=True, counts=old.get("counts"))
        cache = _read_cache(state)
        windows = make_windows(records, self.window_turns)
        report = GraphBuild(windows=len(windows))
        results: list[list[Note] | None] = [None] * len(windows)
        sem = asyncio.Semaphore(self.concurrency)
        finished = 0

        async def one(i: int) -> None:
            nonlocal finished
            await window(i)
            finished += 1
            if progress is not None:
                progress(finished, len(windows), "windows")

        async def window(i: int) -> None:
            w = windows[i]
            key = w.key(self.llm.model_id)
            if key in cache:
                results[i] = [Note(**d) for d in _notes_of(cache[key])]
                report.cached_windows += 1
                return
            ledger = current_ledger()
            async with sem:
                with ledger.span(f"automem.window.{key}") if ledger is not None else nullcontext() as span:
                    notes = await summarize_window(self.llm, w)
            if not w.is_step:
                report.calls += 1
            results[i] = notes
            cache[key] = {
                "notes": [n.to_json() for n in notes],
                "usage": span.record_json() if span is not None else None,
            }
            if state is not None and not w.is_step:
                private_dir(state)
                write_json_atomic(state / NOTES_FILE, cache)

        if progress is not None:
            progress(0, len(windows), "windows")
        tasks = [asyncio.ensure_future(one(i)) for i in range(len(windows))]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # a failed window or a stopped build: no window goes on calling the model
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        notes = [n for group in results for n in (group or [])]
        data = graph_from_notes(notes, ns, embed=self.embed)
        await asyncio.to_thread(backend.replace, data)
        report.counts = data.counts()
        if state is not None:
            private_dir(state)
            live = {w.key(self.llm.model_id) for w in windows}
            write_json_atomic(state / NOTES_FILE, {k: v for k, v in cache.items() if k in live})
            write_json_atomic(state / META_FILE, {**meta, "counts": report.counts, "windows": len(windows)})
        return report

    def stored_usage(self, records: list[Record], state_dir: str | Path | None) -> dict:
        """What the indexer calls of ``records``' windows cost, over every run that built them: the
        usage recorded with each window in the notes cache (calls, tokens, USD, proxy and wall
        seconds; summed, as if the windows ran one after another; ``calls_by_role`` and ``events``
        added up, ``fallbacks`` records concatenated: a window stored before fallbacks were records
        gives one per ``indexer.fallback`` event it counted), plus ``windows_without_usage``, the windows whose
        notes are cached without their cost (built before costs were recorded; their cost is missing
        from the sums), and ``windows_without_events``, those cached without their events (built
        before events were recorded; their fallbacks are missing). Steps make no call and cost nothing."""
        cache = _read_cache(Path(state_dir) if state_dir is not None else None)
        usages = []
        for w in make_windows(records, self.window_turns):
            if not w.is_step:
                entry = cache.get(w.key(self.llm.model_id))
                usages.append(entry.get("usage") if isinstance(entry, dict) else None)
        return {
            "windows_without_usage": usages.count(None),
            "windows_without_events": sum(1 for u in usages if not isinstance((u or {}).get("events"), dict)),
            "fallbacks": [],
            **sum_usage_records(_with_fallback_records(u) for u in usages if isinstance(u, dict)),
        }


#: The event a window stored before fallbacks were typed records counted when its reply was unusable.
_LEGACY_FALLBACK = "indexer.fallback"


def _with_fallback_records(usage: dict) -> dict:
    """A window's stored usage with its ``fallbacks`` records: as stored, or, for a window stored
    before they were records, one per ``indexer.fallback`` event it counted (as
    :func:`~.graph_notes.summarize_window` records them now)."""
    events = usage.get("events")
    if isinstance(usage.get("fallbacks"), list) or not isinstance(events, dict):
        return usage
    n = int(events.get(_LEGACY_FALLBACK, 0))
    return {
        **usage,
        "fallbacks": [{"role": "indexer", "module": "indexer", "tier": None, "reason": "unparsable", "step": 0}] * n,
    }


def _read_cache(state: Path | None) -> dict:
    """The notes cache of a build state folder: window key -> ``{"notes": [...], "usage": {...}}``
    (a bare list of notes: written before window costs were recorded); {} when absent or unreadable."""
    if state is None or not (state / NOTES_FILE).is_file():
        return {}
    try:
        cache = json.loads((state / NOTES_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _notes_of(entry) -> list[dict]:
    """The notes of a cache entry, either format."""
    return entry["notes"] if isinstance(entry, dict) else entry

"""Offline construction of episodic and semantic memory (MemoryCPT QAD, the Nemori roles).

Per session of a scope, in time order:

1. **BatchSegmenter** (role ``segmenter``, temperature 0.2): the session's turns, in windows of at
   most 80, are grouped into episodes (indices + topic). A window shorter than the segment
   minimum is one episode without a call.
2. **EpisodeGenerator** (``episode_generator``): per segment, title + third-person narrative +
   ISO timestamp; relative dates are then resolved against the segment's session time
   (:func:`memfrontier.strategies.memorycpt.construction.dates.resolve_relative_dates`), never the wall clock.
3. **EpisodeMerger** (``episode_merger``): the top-5 stored episodes with cosine > 0.85 are the
   candidates; one call decides merge-or-new and writes the merged episode. The merged episode
   replaces its target in one transaction.
4. **SemanticExtractor** (``semantic_predictor`` + ``semantic_extractor``), prediction-correction:
   with related facts (top-10 by cosine), predict the episode from its title and those facts, then
   extract only the durable facts the prediction missed; with none, extract directly.

Independent calls (segmentation of a session's windows, generation of its episodes) run
concurrently, bounded by ``concurrency``; merging and extraction read what earlier episodes
wrote, so they run in order. Every call is metered under the current ledger stage (``Memory.build``
sets ``construction``) and kept as a trace (prompt, rationale, JSON) for SFT export.

Bad output: unparseable JSON, unknown indices or targets, empty or truncated output, or content
that fails :func:`memfrontier.strategies.memorycpt.construction.ops.content_problem` (too short, bare punctuation, an
instruction echo, a verbatim copy of the source turns; also counted by reason as
``memorycpt.content_rejected.<role>.<reason>``) -> the operation (for facts: the single fact) is
rejected and counted (``memorycpt.op_rejected.<role>``), the call is retried once,
then a safe fallback applies; a model that fails outright (``LLMError``: unreachable, unloadable)
ends the build with that error and leaves the session unmarked, so nothing half-built is reused.
Fallbacks: (one segment for the window; an episode made of the turns
themselves; "new" instead of merge; no facts). Nothing stored is deleted except a merge target,
in the same transaction that writes the merged episode. A session is marked done with its last
write, so re-running adds nothing and an interrupted build resumes at the first unfinished session.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

from ....core.ledger import count_event, current_ledger, record_fallback
from ....core.timeutil import instant_key
from ....core.types import Record, Scope
from ....llm.base import LLMError
from ....llm.metered import MeteredLLM
from ....llm.parsing import parse_or_count, strip_think
from ....store.bank import BankItem, MemoryBank, Trace
from . import prompts as P
from .dates import parse_timestamp, resolve_relative_dates
from .ops import (
    CONTENT_REASONS,
    EpisodeDraft,
    OperationError,
    Segment,
    normalise_fact,
    validate_episode,
    validate_facts,
    validate_merge,
    validate_segments,
)

EPISODE, FACT = "episode", "fact"


def _event(name: str, n: int = 1) -> None:
    count_event(f"memorycpt.{name}", n)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:20]


def render_turn(r: Record) -> str:
    """``[YYYY-MM-DD HH:MM] speaker: text`` (image captions included), the line every role reads."""
    ts = parse_timestamp(r.timestamp)
    when = ts.strftime("%Y-%m-%d %H:%M") if ts else "unknown time"
    body = r.render()
    if r.speaker and body.startswith(f'{r.speaker} said, "'):
        body = body[len(r.speaker) + 8 : -1]
    return f"[{when}] {r.speaker or r.role}: {body}"


@dataclass
class BuildReport:
    """What one ``build`` did: sessions processed/skipped, items written, calls by role."""

    sessions_built: int = 0
    sessions_skipped: int = 0
    episodes_added: int = 0
    episodes_merged: int = 0
    facts_added: int = 0
    calls: dict[str, int] = field(default_factory=dict)


@dataclass
class _Episode:
    draft: EpisodeDraft
    source_ids: list[str]
    lines: list[str]
    topic: str
    turns: list[str] = field(default_factory=list)  # the source turns' texts (the content check's copy test)
    speakers: list[str] = field(default_factory=list)  # the source turns' speakers (named without echoing the example)


class EpisodicBuilder:
    """Builds a scope's episodic and semantic memories into ``bank`` with ``llm``.

    Args:
        llm: the construction model (base, or base + merged LoRA-A), metered.
        bank: where episodes (kind ``episode``) and facts (kind ``fact``) go.
        concurrency: at most this many calls in flight.
        min_segment_turns: windows shorter than this are one episode without a segmenter call.
        merge_top_k / merge_min_cosine: EpisodeMerger candidates (5, 0.85).
        related_facts: facts the SemanticExtractor's prediction reads (10).
        keep_traces: store every call's trace in the bank for SFT export.
    """

    prompt_version = P.PROMPT_VERSION

    def __init__(
        self,
        llm: MeteredLLM,
        bank: MemoryBank,
        *,
        concurrency: int = 4,
        min_segment_turns: int = 3,
        merge_top_k: int = 5,
        merge_min_cosine: float = 0.85,
        related_facts: int = 10,
        keep_traces: bool = True,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.llm = llm
        self.bank = bank
        self.concurrency = concurrency
        self.min_segment_turns = min_segment_turns
        self.merge_top_k = merge_top_k
        self.merge_min_cosine = merge_min_cosine
        self.related_facts = related_facts
        self.keep_traces = keep_traces
        self._sem = asyncio.Semaphore(concurrency)
        self._traces: list[tuple[Scope, Trace]] = []
        self._llm_errors: list[str] = []
        self._report = BuildReport()

    # -- one validated JSON call ------------------------------------------------------------

    async def _call(
        self,
        scope: Scope,
        role: str,
        messages: list[dict],
        *,
        schema: dict | None,
        max_tokens: int,
        temperature: float,
        validate: Callable[[object], object],
    ) -> object | None:
        """Call ``role``, parse, validate; retry once; None after two failures (counted). A refused
        reply is retried with the reason in the prompt (:func:`P.retry_messages`), at
        ``temperature + 0.3``; traces record ``messages``, the prompt the accepted reply answers."""
        refused: str | None = None  # why the first try was refused
        for attempt in range(2):
            temp = temperature if attempt == 0 else temperature + 0.3
            sent = P.retry_messages(messages, refused) if refused is not None else messages
            refused = None
            try:
                async with self._sem:
                    out = await self.llm.complete(
                        sent, role=role, max_tokens=max_tokens, temperature=temp, json_schema=schema
                    )
            except LLMError as e:
                _event(f"llm_error.{role}")
                self._llm_errors.append(f"{role}: {e}")
                continue
            self._report.calls[role] = self._report.calls.get(role, 0) + 1
            think, _ = strip_think(out.text)
            if schema is None:  # free text (the prediction step)
                text = strip_think(out.text)[1].strip()
                self._trace(scope, role, messages, think, {"text": text}, bool(text))
                if text:
                    return text
                _event(f"op_rejected.{role}")
                refused = "too_few_words"
                continue
            res = parse_or_count(out.text, f"parse_error.{role}", expect="object")
            if not res.ok or res.truncated:
                self._trace(scope, role, messages, think, None, False)
                _event(f"op_rejected.{role}")
                refused = "unparsable"
                continue
            obj = dict(res.value)
            rationale = think or (obj.get("reasoning") if isinstance(obj.get("reasoning"), str) else "")
            obj.pop("reasoning", None)
            try:
                value = validate(obj)
            except OperationError as e:
                self._trace(scope, role, messages, rationale, obj, False)
                _event(f"op_rejected.{role}")
                if e.reason is not None:
                    _event(f"content_rejected.{role}.{e.reason}")
                refused = e.reason or str(e)
                continue
            self._trace(scope, role, messages, rationale, obj, True)
            return value
        record_fallback(role=role, module=role, reason=refused or "llm_error")
        return None

    def _trace(self, scope: Scope, role: str, messages: list[dict], rationale: str, output, accepted: bool) -> None:
        if self.keep_traces:
            self._traces.append(
                (
                    scope,
                    Trace(
                        role=role,
                        model_id=self.llm.model_id,
                        prompt_version=self.prompt_version,
                        messages=messages,
                        rationale=rationale.strip(),
                        output=output,
                        accepted=accepted,
                    ),
                )
            )

    def _take_traces(self) -> list[tuple[Scope, Trace]]:
        out, self._traces = self._traces, []
        return out

    # -- roles ------------------------------------------------------------------------------

    async def _segment(self, scope: Scope, window: list[Record]) -> list[Segment]:
        if len(window) < self.min_segment_turns:
            return [Segment(list(range(1, len(window) + 1)), "", from_model=False)]
        lines = [render_turn(r) for r in window]
        rejected: list[str] = []

        def validate(obj):
            segs, rej = validate_segments(obj, len(window))
            rejected.extend(rej)
            return segs

        segs = await self._call(
            scope,
            "segmenter",
            P.messages(P.SEGMENTER_SYSTEM, P.segmenter_user(lines)),
            schema=P.SEGMENTER_SCHEMA,
            max_tokens=60 + 12 * len(window),
            temperature=0.2,
            validate=validate,
        )
        if rejected:
            _event("op_rejected.segmenter", len(rejected))
        if segs is None:
            return [Segment(list(range(1, len(window) + 1)), "", from_model=False)]
        return segs

    async def _episode(self, scope: Scope, window: list[Record], seg: Segment) -> _Episode:
        recs = [window[i - 1] for i in seg.indices]
        lines = [render_turn(r) for r in recs]
        first_ts = next((r.timestamp for r in recs if r.timestamp), None)
        speakers = sorted({r.speaker for r in recs if r.speaker})
        got = await self._call(
            scope,
            "episode_generator",
            P.messages(P.EPISODE_SYSTEM, P.episode_user(seg.topic, lines)),
            schema=P.EPISODE_SCHEMA,
            max_tokens=800,
            temperature=0.0,
            validate=lambda obj: validate_episode(obj, first_ts, [r.text for r in recs], speakers),
        )
        if got is None:  # fallback: the turns themselves, so nothing is lost
            title = seg.topic or f"Conversation between {' and '.join(speakers) or 'the user'}"
            draft = EpisodeDraft(title, " ".join(r.render() for r in recs), first_ts)
        else:
            draft, fixed = got
            if fixed:
                _event("timestamp_fixed")
        draft.content = resolve_relative_dates(draft.content, first_ts)
        return _Episode(draft, [r.id for r in recs], lines, seg.topic, [r.text for r in recs], speakers)

    async def _store_episode(self, scope: Scope, ep: _Episode) -> BankItem:
        """Merge-or-new (EpisodeMerger), then write. Returns the stored episode."""
        item = BankItem(
            id="ep-" + _digest(scope.key(), *sorted(ep.source_ids)),
            kind=EPISODE,
            scope=scope,
            title=ep.draft.title,
            text=ep.draft.content,
            timestamp=ep.draft.timestamp,
            source_ids=ep.source_ids,
            meta={"topic": ep.topic},
        )
        vec = self.bank.embedder.encode([item.render()])[0]
        cands = self.bank.similar(
            vec, scope, EPISODE, self.merge_top_k, min_cosine=self.merge_min_cosine, exclude={item.id}
        )
        if cands:
            listed = [(c.title, c.text, c.timestamp) for c, _ in cands]
            decision = await self._call(
                scope,
                "episode_merger",
                P.messages(P.MERGER_SYSTEM, P.merger_user(item.title, item.text, item.timestamp, listed)),
                schema=P.MERGER_SCHEMA,
                max_tokens=700,
                temperature=0.0,
                validate=lambda obj: validate_merge(obj, len(cands), item.timestamp, ep.turns, ep.speakers),
            )
            if decision is not None and decision.merge:
                target = cands[decision.target - 1][0]
                sources = list(dict.fromkeys(target.source_ids + item.source_ids))
                times = sorted(
                    (t for t in (target.timestamp, item.timestamp, decision.draft.timestamp) if t), key=instant_key
                )
                merged = BankItem(
                    id="ep-" + _digest(scope.key(), *sorted(sources)),
                    kind=EPISODE,
                    scope=scope,
                    title=decision.draft.title,
                    text=resolve_relative_dates(decision.draft.content, item.timestamp),
                    timestamp=times[0] if times else None,
                    source_ids=sources,
                    meta={"topic": target.meta.get("topic", ""), "merged_from": [target.id, item.id]},
                )
                self.bank.apply([merged], [target.id])
                self._report.episodes_merged += 1
                return merged
        self.bank.apply([item])
        self._report.episodes_added += 1
        return item

    async def _extract_facts(self, scope: Scope, ep: _Episode, item: BankItem) -> list[BankItem]:
        vec = self.bank.embedder.encode([item.render()])[0]
        related = [f.text for f, _ in self.bank.similar(vec, scope, FACT, self.related_facts)]
        existing = {normalise_fact(f.text) for f in self.bank.items(scope, FACT)}
        if related:
            prediction = await self._call(
                scope,
                "semantic_predictor",
                P.messages(P.PREDICT_SYSTEM, P.predict_user(item.title, related)),
                schema=None,
                max_tokens=200,
                temperature=0.0,
                validate=lambda x: x,
            )
            msgs = P.messages(P.EXTRACT_SYSTEM, P.extract_user(ep.lines, prediction or "(no prediction)"))
        else:
            msgs = P.messages(P.EXTRACT_DIRECT_SYSTEM, P.extract_direct_user(item.title, item.text))
        ops = await self._call(
            scope,
            "semantic_extractor",
            msgs,
            schema=P.FACTS_SCHEMA,
            max_tokens=400,
            temperature=0.0,
            validate=lambda obj: validate_facts(obj, existing, ep.turns),
        )
        if ops is None:
            return []
        if ops.rejected:
            _event("op_rejected.semantic_extractor", len(ops.rejected))
            for reason in ops.rejected:
                if reason in CONTENT_REASONS:
                    _event(f"content_rejected.semantic_extractor.{reason}")
        return [
            BankItem(
                id="fact-" + _digest(scope.key(), normalise_fact(f)),
                kind=FACT,
                scope=scope,
                text=f,
                timestamp=item.timestamp,
                source_ids=list(ep.source_ids),
                meta={"episode_id": item.id},
            )
            for f in ops.facts
        ]

    # -- driver -----------------------------------------------------------------------------

    @staticmethod
    def session_unit(session_id: str, records: list[Record]) -> str:
        """The resumability key of a session: its id and the hash of its record ids."""
        return f"session:{session_id}:{_digest(*[r.id for r in records])}"

    async def build(
        self,
        scope: Scope,
        records: list[Record],
        on_session: Callable[[str | None, int, int], Awaitable[None] | None] | None = None,
    ) -> BuildReport:
        """Build memories for ``records`` (one scope, chronological). Returns what was done.

        ``on_session(session_id, done, total)`` is called once before the first session
        (``session_id`` None, ``done`` 0) and after each session (for progress bars).
        """
        self._report = BuildReport()
        sessions: dict[str, list[Record]] = {}
        for r in records:
            sessions.setdefault(r.session_id, []).append(r)
        total = len(sessions)
        if on_session is not None:
            res = on_session(None, 0, total)
            if asyncio.iscoroutine(res):
                await res
        for n, (sid, recs) in enumerate(sessions.items(), 1):
            unit = self.session_unit(sid, recs)
            if self.bank.is_done(scope, unit):
                self._report.sessions_skipped += 1
            else:
                await self._build_session(scope, recs, unit)
                self._report.sessions_built += 1
            if on_session is not None:
                res = on_session(sid, n, total)
                if asyncio.iscoroutine(res):
                    await res
        return self._report

    async def _build_session(self, scope: Scope, recs: list[Record], unit: str) -> None:
        """Build one session and mark it done with its record (:meth:`LedgerSpan.record_json`: calls,
        tokens, USD, seconds, calls by role, events such as rejections and fallbacks), so a build
        resumed over several runs still reports every session's failures."""
        ledger = current_ledger()
        with ledger.span(f"memorycpt.session.{unit}") if ledger is not None else nullcontext() as span:
            await self._build_session_calls(scope, recs)
        usage = span.record_json() if span is not None else {}  # no ledger: nothing metered
        self.bank.apply(done=[(scope, unit, usage)], traces=self._take_traces())

    async def _build_session_calls(self, scope: Scope, recs: list[Record]) -> None:
        windows = [recs[i : i + P.MAX_SEGMENT_TURNS] for i in range(0, len(recs), P.MAX_SEGMENT_TURNS)]
        ledger = current_ledger()
        with ledger.parallel() if ledger is not None else nullcontext():
            segmented = await asyncio.gather(*(self._segment(scope, w) for w in windows))
        jobs = [(w, s) for w, segs in zip(windows, segmented) for s in segs]
        with ledger.parallel() if ledger is not None else nullcontext():
            episodes = await asyncio.gather(*(self._episode(scope, w, s) for w, s in jobs))
        episodes.sort(key=lambda e: (instant_key(e.draft.timestamp), e.source_ids[0]))
        for ep in episodes:
            item = await self._store_episode(scope, ep)
            facts = await self._extract_facts(scope, ep, item)
            if facts:
                self.bank.apply(facts)
                self._report.facts_added += len(facts)
        if self._llm_errors:  # the model failed, not its output: keep the session unfinished and stop
            errors, self._llm_errors = self._llm_errors, []
            self.bank.apply(traces=self._take_traces())
            raise LLMError(
                f"construction model {self.llm.model_id!r} failed {len(errors)} call(s) in session "
                f"{recs[0].session_id!r} (first: {errors[0]}); the session stays unbuilt and is retried next run"
            )

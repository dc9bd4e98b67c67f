"""The five BudgetMem modules behind one budget-tier interface (BudgetMem Sec. 4.1, Eq. 3-6).

``await module.run(query, module_input, tier) -> module_output`` with the same contract at
Low, Mid and High:

=========  ======================================  ===========================================
module     input                                   output
=========  ======================================  ===========================================
filter     ``list[Chunk]`` (retrieved, rank order)  ``list[Chunk]``: at most ``module_topk``,
                                                   never empty for a non-empty input (Eq. 4)
entity     ``list[Chunk]`` (filtered)               ``list[str]`` relations, at most
temporal                                            ``max_relations`` (Eq. 5)
topic
summary    :class:`SummaryInput` (chunks + the      ``str``, the extracted memory m (Eq. 6)
           three relation lists)
=========  ======================================  ===========================================

A module only supplies its per-tier ingredients - ``rules`` (Low of implementation tiering),
``learned`` (Mid: MiniLM embedding-based selection; no relation-extraction model ships on PyPI
that we may install, so Mid ranks the pattern candidates by embedding similarity to the query),
``prompt_body`` / ``answer_schema`` / ``from_llm`` (LLM tiers) and ``finalize`` (the contract).
The engine (:class:`~.engine.BudgetMemModules`, a :class:`ModuleRuntime`) runs them for every
module the same way: cache lookup, the tiering strategy (:mod:`.tiering`), fallback to the next
lower tier on an unusable output (counted as ``fallback.<module>.<tier>`` on the ledger; below
Low, the rules), the contract check, cost attribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...core.render import human_date
from ...core.types import Chunk
from . import prompts, rules
from .tiering import ModuleOutputError

EXTRACTORS: tuple[str, ...] = ("entity", "temporal", "topic")
#: ``tier_used`` of the rules floor below Low (LLM tierings whose Low tier failed too).
FLOOR = "rules"


@dataclass(frozen=True)
class SummaryInput:
    """What the summary module reads: the filtered chunks and the three relation lists (Eq. 6;
    the raw chunks too, so the High summary can quote evidence the extractors missed)."""

    chunks: list[Chunk]
    entity: list[str] = field(default_factory=list)
    temporal: list[str] = field(default_factory=list)
    topic: list[str] = field(default_factory=list)


@dataclass
class ModuleResult:
    """One module execution: output plus how it was produced.

    ``tier``: the tier asked for; ``tier_used``: the tier whose output this is (lower after a
    fallback, ``"rules"`` for the floor); ``fallbacks``: tiers that failed, in order; ``events``:
    the ledger events this execution counted (``fallback.*`` and ``output_rejected.*``, why,
    per fallen-back tier; ``filter.empty.*``); ``usd``,
    ``calls``, ``input_tokens``, ``output_tokens``, ``wall_s``: what producing it cost (replayed
    from the cache entry on a hit, where no call is made).
    """

    module: str
    tier: str
    tier_used: str
    output: Any
    fallbacks: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    cached: bool = False
    usd: float = 0.0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0


def memories_block(chunks: list[Chunk]) -> str:
    """Numbered, dated chunks as the LLM tiers see them."""
    out = []
    for i, ch in enumerate(chunks, 1):
        day = human_date(ch.timestamp)
        out.append(f"[{i}] ({day}) {ch.text}" if day else f"[{i}] {ch.text}")
    return "\n".join(out)


def _chunk_key(chunks: list[Chunk]) -> list:
    return [[c.id, c.timestamp, c.text] for c in chunks]


def _str_list(value: Any, limit: int, module: str) -> list[str]:
    """LLM ``answer`` -> a clean list of relation strings (stripped, non-empty, unique, capped)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ModuleOutputError(f"{module}: expected a list of strings, got {type(value).__name__}", "not_a_list")
    out: list[str] = []
    for v in value:
        s = (v if isinstance(v, str) else str(v)).strip()
        if s and s not in out:
            out.append(s[: 2 * prompts.RELATION_MAX_CHARS])
    return out[:limit]


class ModuleRuntime(Protocol):
    """What a module reads from the engine that runs it (:class:`~.engine.BudgetMemModules`)."""

    module_topk: int
    max_relations: int
    mid_threshold: float
    mid_min_sim: float

    def embed(self, texts: list[str]) -> np.ndarray: ...

    async def run_traced(self, module: Module, query: str, module_input: Any, tier: str) -> ModuleResult: ...


# ============================================================================ modules
class Module:
    """Base of the five modules. ``run`` is the budget-tier interface; subclasses fill in the
    per-tier ingredients (see the module docstring)."""

    name: str = ""

    def __init__(self, runtime: ModuleRuntime):
        self.rt = runtime

    async def run(self, query: str, module_input: Any, tier: str) -> Any:
        """BudgetMem Sec. 4.1 budget-tier interface: the module output at ``tier``."""
        return (await self.rt.run_traced(self, query, module_input, tier)).output

    # --- ingredients ------------------------------------------------------------------------
    def rules(self, query: str, module_input: Any) -> Any:
        raise NotImplementedError

    def learned(self, query: str, module_input: Any) -> Any:
        raise NotImplementedError

    def prompt_body(self, query: str, module_input: Any) -> str:
        return f"Memories:\n{memories_block(module_input)}\n\nQuestion: {query}"

    def answer_schema(self, module_input: Any) -> dict:
        return prompts.answer_schema(self.name, max_relations=self.rt.max_relations)

    def max_tokens(self, style: str, module_input: Any) -> int:
        return prompts.max_tokens(self.name, style)

    def from_llm(self, value: Any, module_input: Any) -> Any:
        raise NotImplementedError

    def finalize(self, output: Any, module_input: Any, tier: str, events: list[str]) -> Any:
        """Enforce the output contract (raises ModuleOutputError when it cannot be met); append
        the names of notable repairs to ``events`` (the runner counts them on the ledger)."""
        return output

    def input_texts(self, module_input: Any) -> list[str]:
        """Texts whose mean embedding is the router's view of the input (BudgetMem Sec. 4.3)."""
        return [c.text for c in module_input]

    def input_key(self, module_input: Any) -> Any:
        return _chunk_key(module_input)

    # --- cache (de)serialisation ---------------------------------------------------------------
    def encode(self, output: Any) -> Any:
        return output

    def decode(self, data: Any, module_input: Any) -> Any:
        return data


class FilterModule(Module):
    """M_fil (Eq. 4): keep the chunks that matter for the query, at most ``module_topk``.

    Low: keyword overlap |q & c| / |q| > 0. Mid: 0.7 cosine (MiniLM) + 0.3 overlap >= threshold
    (0.3). High: the LLM scores every chunk 0-10; chunks scored >= 1 are kept. Every tier sorts
    by its score (ties: retrieval order). An empty result passes the top retrieved chunks on
    (event ``filter.empty.<tier>``).
    """

    name = "filter"

    def _top(self, scored: list[tuple[float, int, Chunk]]) -> list[Chunk]:
        scored.sort(key=lambda t: (-t[0], t[1]))
        return [c for _, _, c in scored[: self.rt.module_topk]]

    def rules(self, query, chunks):
        q = set(rules.keywords(query))
        scored = [(rules.overlap(q, c.text), i, c) for i, c in enumerate(chunks)]
        return self._top([t for t in scored if t[0] > 0])

    def learned(self, query, chunks):
        if not chunks:
            return []
        q = set(rules.keywords(query))
        cos = self.rt.embed([c.text for c in chunks]) @ self.rt.embed([query])[0]
        scored = [(0.7 * float(cos[i]) + 0.3 * rules.overlap(q, c.text), i, c) for i, c in enumerate(chunks)]
        return self._top([t for t in scored if t[0] >= self.rt.mid_threshold])

    def answer_schema(self, chunks):
        return prompts.answer_schema("filter", n_chunks=len(chunks))

    def max_tokens(self, style, chunks):
        return prompts.max_tokens("filter", style, n_chunks=len(chunks))

    def from_llm(self, value, chunks):
        if not isinstance(value, list) or len(value) < len(chunks):
            raise ModuleOutputError(f"filter: expected {len(chunks)} scores, got {value!r:.80}", "wrong_count")
        scores = []
        for v in value[: len(chunks)]:
            try:
                scores.append(min(10.0, max(0.0, float(v))))
            except (TypeError, ValueError):
                raise ModuleOutputError(f"filter: score {v!r:.40} is not a number", "not_a_number") from None
        return self._top([(s, i, c) for i, (s, c) in enumerate(zip(scores, chunks)) if s >= 1])

    def finalize(self, output, chunks, tier, events):
        ids = {c.id for c in chunks}
        if any(c.id not in ids for c in output):
            raise ModuleOutputError("filter: output holds a chunk that was not in its input", "unknown_chunk")
        if not output and chunks:
            events.append(f"filter.empty.{tier}")
            output = list(chunks[: self.rt.module_topk])
        return output[: self.rt.module_topk]

    def encode(self, output):
        return [c.id for c in output]

    def decode(self, data, chunks):
        by_id = {c.id: c for c in chunks}
        return [by_id[i] for i in data]


class ExtractionModule(Module):
    """Shared contract of M_ent, M_tmp, M_top (Eq. 5): chunks in, relation strings out.

    Subclasses give ``candidates(chunks) -> [(relation, context text, prior)]``; Low ranks them
    by keyword overlap with the query (then text order), Mid by MiniLM cosine with the query
    (mean of the relation's and its context's similarity, plus ``prior``) and keeps those at or
    above ``mid_min_sim``. High asks the LLM for a JSON list.
    """

    def candidates(self, chunks: list[Chunk]) -> list[tuple[str, str, float]]:
        raise NotImplementedError

    def mid_candidates(self, chunks: list[Chunk]) -> list[tuple[str, str, float]]:
        return self.candidates(chunks)

    def _unique(self, ranked: list[str]) -> list[str]:
        out: list[str] = []
        for r in ranked:
            if r not in out:
                out.append(r)
            if len(out) >= self.rt.max_relations:
                break
        return out

    def rules(self, query, chunks):
        q = set(rules.keywords(query))
        cands = self.candidates(chunks)
        scored = sorted(range(len(cands)), key=lambda i: (-rules.overlap(q, cands[i][0] + " " + cands[i][1]), i))
        return self._unique([cands[i][0] for i in scored])

    def learned(self, query, chunks):
        cands = self.mid_candidates(chunks)
        if not cands:
            return []
        qv = self.rt.embed([query])[0]
        rel = self.rt.embed([c[0] for c in cands]) @ qv
        ctx = self.rt.embed([c[1] for c in cands]) @ qv
        score = 0.5 * (rel + ctx) + np.array([c[2] for c in cands], dtype=np.float32)
        order = [i for i in np.argsort(-score, kind="stable") if score[i] >= self.rt.mid_min_sim]
        return self._unique([cands[i][0] for i in order])

    def from_llm(self, value, chunks):
        return _str_list(value, self.rt.max_relations, self.name)

    def finalize(self, output, chunks, tier, events):
        if not isinstance(output, list) or not all(isinstance(s, str) for s in output):
            raise ModuleOutputError(f"{self.name}: output must be a list of strings", "not_a_list")
        return output[: self.rt.max_relations]


class EntityModule(ExtractionModule):
    """M_ent: ``"A - relation - B (YYYY-MM-DD)"`` from first-person statements, possessives,
    statements about named entities and name mentions (:func:`rules.entity_relations`)."""

    name = "entity"

    def candidates(self, chunks):
        us = rules.units(chunks)
        speakers = frozenset(u.speaker for u in us if u.speaker)
        return [(r, u.text, 0.0) for u in us for r in rules.entity_relations(u, speakers)]


class TemporalModule(ExtractionModule):
    """M_tmp: ``"YYYY-MM-DD: speaker: sentence"`` with relative times ("yesterday", "last
    Friday", "two weeks ago") resolved against the chunk's session date (regex + dateparser).
    Low lists the sentences with a temporal cue; Mid also ranks cue-less turns, dated by their
    session (a small prior of 0.1 favours turns with a cue)."""

    name = "temporal"

    def candidates(self, chunks):
        return [(fact, u.text, 0.0) for u in rules.units(chunks) for fact, _ in rules.temporal_facts(u)]

    def mid_candidates(self, chunks):
        cands = []
        for u in rules.units(chunks):
            facts = rules.temporal_facts(u)
            cands.extend((f, u.text, 0.1) for f, _ in facts)
            if not facts:
                cands.append((rules.dated(u), u.text, 0.0))
        return cands


class TopicModule(ExtractionModule):
    """M_top: per chunk, ``"YYYY-MM-DD: topics: a, b, c"`` (most frequent content words) and
    ``"YYYY-MM-DD: topic shift: a -> b"`` between the chunk's halves (Low); Mid picks per chunk
    the turn nearest the chunk centroid (its main topic) and the turn nearest the query, and
    reports the main topic and the move to the query's topic."""

    name = "topic"

    def candidates(self, chunks):
        out = []
        for ci, ch in enumerate(chunks):
            us = rules.units([ch])
            if not us:
                continue
            day = rules.iso_day(us[0].when)
            names = {w.lower() for u in us for w in u.speaker.split()}
            kws = rules.top_keywords([u.body for u in us], 3, names)
            if kws:
                out.append((f"{day}: topics: {', '.join(kws)}", ch.text, 0.0))
            if len(us) >= 4:
                half = len(us) // 2
                a = rules.top_keywords([u.body for u in us[:half]], 1, names)
                b = rules.top_keywords([u.body for u in us[half:]], 1, names)
                if a and b and a != b:
                    out.append((f"{day}: topic shift: {a[0]} -> {b[0]}", ch.text, 0.0))
        return out

    def learned(self, query, chunks):
        qv = self.rt.embed([query])[0]
        scored: list[tuple[float, str]] = []
        for ch in chunks:
            us = rules.units([ch])
            if not us:
                continue
            names = {w.lower() for u in us for w in u.speaker.split()}
            emb = self.rt.embed([u.text for u in us])
            centroid = emb.mean(axis=0)
            main = us[int(np.argmax(emb @ centroid))]
            sims = emb @ qv
            focus_i = int(np.argmax(sims))
            focus = us[focus_i]
            day = rules.iso_day(main.when)
            kw_main = ", ".join(rules.top_keywords([main.body], 2, names)) or "chat"
            scored.append((float(sims.mean()), f"{day}: main topic: {kw_main} ({_short(main.text)})"))
            kw_focus = ", ".join(rules.top_keywords([focus.body], 2, names)) or "chat"
            if focus is not main and kw_focus != kw_main:
                scored.append((float(sims[focus_i]), f"{day}: {kw_main} -> {kw_focus} ({_short(focus.text)})"))
        scored.sort(key=lambda t: -t[0])
        return self._unique([s for sim, s in scored if sim >= self.rt.mid_min_sim] or [s for _, s in scored[:1]])


def _short(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


class SummaryModule(Module):
    """M_sum (Eq. 6): the extracted memory m the answerer reads.

    Low: concatenation (relation sections, then the dated chunks). Mid: extractive - the turns
    and relations most similar to the query (MiniLM), turns in their original order. High: the
    LLM writes a note from the relations *and* the raw chunks.
    """

    name = "summary"
    SECTIONS = (("entity", "Entity relations"), ("temporal", "Time facts"), ("topic", "Topics"))
    MID_TURNS = 12
    MID_RELATIONS = 4

    def _sections(self, inp: SummaryInput, lists: dict[str, list[str]] | None = None) -> list[str]:
        out = []
        for key, title in self.SECTIONS:
            items = (lists or {}).get(key, getattr(inp, key))
            if items:
                out.append(f"{title}:\n" + "\n".join(f"- {s}" for s in items))
        return out

    def rules(self, query, inp):
        dated = "\n".join(f"({human_date(c.timestamp)}) {c.text}" if c.timestamp else c.text for c in inp.chunks)
        parts = self._sections(inp) + ([f"Memories:\n{dated}"] if dated else [])
        return "\n\n".join(parts)

    def learned(self, query, inp):
        qv = self.rt.embed([query])[0]
        us = rules.units(inp.chunks)
        parts = []
        if us:
            sims = self.rt.embed([u.text for u in us]) @ qv
            keep = sorted(np.argsort(-sims, kind="stable")[: self.MID_TURNS])
            lines = [f"({human_date(us[i].when.isoformat()) if us[i].when else 'undated'}) {us[i].text}" for i in keep]
            parts.append("Relevant excerpts:\n" + "\n".join(lines))
        lists = {}
        for key, _ in self.SECTIONS:
            items = getattr(inp, key)
            if items:
                sims = self.rt.embed(items) @ qv
                lists[key] = [items[i] for i in np.argsort(-sims, kind="stable")[: self.MID_RELATIONS]]
        return "\n\n".join(self._sections(inp, lists) + parts)

    def prompt_body(self, query, inp):
        rel = "\n\n".join(self._sections(inp)) or "(none)"
        return f"Memories:\n{memories_block(inp.chunks)}\n\nExtracted relations:\n{rel}\n\nQuestion: {query}"

    def answer_schema(self, inp):
        return prompts.answer_schema("summary")

    def from_llm(self, value, inp):
        if isinstance(value, list):
            value = "\n".join(str(v) for v in value)
        if not isinstance(value, str) or not value.strip():
            raise ModuleOutputError("summary: empty summary", "empty")
        return value.strip()

    def finalize(self, output, inp, tier, events):
        if not isinstance(output, str):
            raise ModuleOutputError("summary: output must be a string", "not_a_string")
        return output

    def input_texts(self, inp):
        joined = ["\n".join(lst) for lst in (inp.entity, inp.temporal, inp.topic) if lst]
        return joined or [c.text for c in inp.chunks]

    def input_key(self, inp):
        return {"chunks": _chunk_key(inp.chunks), "entity": inp.entity, "temporal": inp.temporal, "topic": inp.topic}


MODULE_CLASSES: dict[str, type[Module]] = {
    "filter": FilterModule,
    "entity": EntityModule,
    "temporal": TemporalModule,
    "topic": TopicModule,
    "summary": SummaryModule,
}

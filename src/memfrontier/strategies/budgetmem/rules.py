"""Rules and patterns behind BudgetMem's Low tiers and the candidates its Mid tiers rank
(BudgetMem Sec. 4.2, "Low uses lightweight rule-based or pattern-based processing").

Pure text processing, no model: keyword sets (stop words dropped, Porter stems), the turns
("units") of a chunk, temporal cues found by regex and resolved against the chunk's session
date (:func:`memfrontier.core.timeutil.read_date`), pattern-based entity relations and topic keywords.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache

from ...core.timeutil import read_date
from ...core.types import Chunk


# ------------------------------------------------------------------------------------ keywords
def _words(block: str) -> frozenset[str]:
    return frozenset(block.split())


STOPWORDS = _words("""
a about above after again against all also am an and any are aren't as at be because been before
being below between both but by can can't could couldn't did didn't do does doesn't doing don't
down during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's
her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it
it's its itself just let's me more most mustn't my myself no nor not of off on once only or other
ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some
such than that that's the their theirs them themselves then there there's these they they'd
they'll they're they've this those through to too under until up very was wasn't we we'd we'll
we're we've were weren't what what's when when's where where's which while who who's whom why
why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
yeah yes oh wow hey hi hello thanks thank really so much lot lots got get gets getting go going
gone went like well great good awesome cool nice sure definitely totally glad happy said say
says know think thing things time something anything everything one also even still
did does do kind sort way much many pretty always never ever maybe though
""")

#: Conversational words that are poor topic labels (topic keywords only).
TOPIC_STOPWORDS = STOPWORDS | _words("""
hear heard last first next happening happen happened find found keep kept back look looks looked
amazing awesome excited exciting take took easy love loved appreciate hopefully fun new old try
tried want wanted need needed make made see saw seen feel felt help sorry wait come came give gave
tell told talk talked ask asked check cant can't let lets guess mean means sounds sound stuff
today yesterday tomorrow week weekend month year day days night morning always part real
right wonderful fantastic incredible beautiful totally super glad hope hoping enjoy enjoyed
catch care start started doing done able thing things lot little bit place places
shared image photo picture since soon
""")

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
_PORTER = None


@lru_cache(maxsize=100_000)
def stem(word: str) -> str:
    """Porter stem of a lower-case word (nltk), possessive ``'s`` dropped."""
    global _PORTER
    word = word.removesuffix("'s")
    if not word.isalpha():
        return word
    if _PORTER is None:
        from ...core.stemming import porter_stemmer

        _PORTER = porter_stemmer()
    return _PORTER.stem(word)


def keywords(text: str) -> list[str]:
    """Content words of ``text`` in order: lower-cased, stop words dropped, stemmed."""
    out = []
    for w in _WORD.findall(text.lower()):
        w = w.strip("'-")
        if len(w) > 1 and w not in STOPWORDS:
            out.append(stem(w))
    return out


def overlap(query_terms: set[str], text: str) -> float:
    """Keyword overlap |q & c| / |q| (BudgetMem released Low filter); 0 when the query has none."""
    if not query_terms:
        return 0.0
    return len(query_terms & set(keywords(text))) / len(query_terms)


# ------------------------------------------------------------------------------------ units
@dataclass(frozen=True)
class Unit:
    """One turn of a chunk: speaker, body, the chunk's session time, position and record id."""

    speaker: str
    body: str
    when: datetime | None
    chunk_index: int
    record_id: str | None

    @property
    def text(self) -> str:
        return f"{self.speaker}: {self.body}" if self.speaker else self.body


_SAID = re.compile(r'^(.{1,60}?) said, "(.*)"$', re.DOTALL)


def parse_time(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts)
    except ValueError:
        return None


def iso_day(when: datetime | None) -> str:
    return when.date().isoformat() if when else "undated"


def units(chunks: list[Chunk]) -> list[Unit]:
    """The turns of ``chunks`` (one per line; ``Speaker said, "..."`` split into speaker / body)."""
    out = []
    for ci, ch in enumerate(chunks):
        lines = [ln for ln in ch.text.split("\n") if ln.strip()]
        ids = ch.record_ids if len(ch.record_ids) == len(lines) else [None] * len(lines)
        when = parse_time(ch.timestamp)
        for ln, rid in zip(lines, ids):
            m = _SAID.match(ln.strip())
            speaker, body = (m.group(1), m.group(2)) if m else ("", ln.strip())
            out.append(Unit(speaker, body.strip(), when, ci, rid))
    return out


_SENT = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if s.strip()]


# ------------------------------------------------------------------------------------ temporal
_NUM = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|a couple of|couple of|few|several|\d+)"
_UNIT = r"(?:days?|weeks?|months?|years?|weekends?)"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_TEMPORAL_PATTERNS = [
    r"\b(?:yesterday|today|tonight|tomorrow|last night|this morning|this afternoon|this evening)\b",
    rf"\b(?:last|next|this|past)\s+(?:week|weekend|month|year|summer|winter|spring|fall|autumn|night|{_WEEKDAY})\b",
    rf"\b{_NUM}\s+{_UNIT}\s+(?:ago|before|later|earlier)\b",
    rf"\bin\s+{_NUM}\s+{_UNIT}\b",
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b(?:,?\s+\d{{4}})?",
    rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}})?",
    rf"\b{_MONTH}\s+\d{{4}}\b",
    r"\b(?:in|since|from|until|by)\s+(?:19|20)\d{2}\b",
    rf"\bon\s+{_WEEKDAY}s?\b",
    r"\b(?:recently|the other day|a while ago|a while back|lately|these days)\b",
]
TEMPORAL_RE = re.compile("|".join(f"(?:{p})" for p in _TEMPORAL_PATTERNS), re.IGNORECASE)


def temporal_cues(text: str) -> list[str]:
    """Temporal expressions in ``text`` (regex), in order, without overlaps."""
    return [m.group(0).strip() for m in TEMPORAL_RE.finditer(text)]


def _saturday_on_or_before(d: date) -> date:
    return d - timedelta(days=(d.weekday() - 5) % 7)


def resolve_temporal(cue: str, base: datetime | None) -> str | None:
    """Resolve a temporal expression against ``base`` (the session time) to an absolute date.

    Day precision -> ``YYYY-MM-DD``; week -> ``week of YYYY-MM-DD``; weekend -> ``weekend of
    YYYY-MM-DD`` (its Saturday); month -> ``YYYY-MM``; year -> ``YYYY``. None when ``base`` is
    None or the expression cannot be resolved ("recently", "the other day").
    """
    if base is None:
        return None
    c = re.sub(r"\s+", " ", cue.strip().lower())
    c = re.sub(r"^(?:on|in|since|from|until|by) ", "", c)
    if c in ("last weekend", "past weekend"):
        sat = _saturday_on_or_before(base.date() - timedelta(days=1))
        if base.date().weekday() >= 5:  # said during a weekend: the one before
            sat -= timedelta(days=7)
        return f"weekend of {sat.isoformat()}"
    if c == "this weekend":
        d = base.date()
        sat = d + timedelta(days=(5 - d.weekday()) % 7) if d.weekday() < 5 else _saturday_on_or_before(d)
        return f"weekend of {sat.isoformat()}"
    c = re.sub(r"^this (morning|afternoon|evening)$", "today", c)
    c = re.sub(r"^past (week|month|year)$", r"last \1", c)
    c = re.sub(r"\b(a couple of|couple of)\b", "two", c)
    c = re.sub(r"\b(\d{1,2})(st|nd|rd|th)\b", r"\1", c)
    read = read_date(c, base)
    if read is None:
        return None
    d, period = read
    if period == "year":
        return f"{d.year:04d}"
    if period == "month":
        return f"{d.year:04d}-{d.month:02d}"
    if period == "week":
        return f"week of {d.date().isoformat()}"
    return d.date().isoformat()


def temporal_facts(unit: Unit) -> list[tuple[str, str]]:
    """``(fact, cue)`` for every temporal cue in ``unit``: ``"<resolved>: <speaker>: <sentence>"``;
    an unresolvable cue keeps the session day: ``"<day> (said; '<cue>'): ..."``."""
    out = []
    for sent in sentences(unit.body):
        for cue in temporal_cues(sent):
            when = resolve_temporal(cue, unit.when)
            who = f"{unit.speaker}: " if unit.speaker else ""
            head = when if when else f"{iso_day(unit.when)} (said; '{cue}')"
            out.append((f"{head}: {who}{sent}", cue))
    return out


def dated(unit: Unit) -> str:
    """``unit`` with its session day, for evidence without a temporal cue."""
    return f"{iso_day(unit.when)} (said): {unit.text}"


# ------------------------------------------------------------------------------------ entities
_CAP = re.compile(r"\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)\b")
_NOT_NAMES = _words("""I I'm I've I'd I'll Hey Hi Hello Wow Yeah Yes No Oh Thanks Thank The That This It
What When Where Why How Who Which And But So Sounds Sure Great Good Awesome Cool Nice Really Well
Haha Totally Definitely Absolutely Congrats Congratulations Anyway Also Glad Just Let Me My We You
They He She There Here Not Ok Okay Aw Aww Omg Love Take Keep Thats Mine Our Your Have Has Had Do Did
Is Are Was Were Been Be Can Could Would Should Will Maybe Agreed Exactly Right True Same Happy Hope""")
_ADVERBS = r"(?:just|recently|finally|also|really|actually|already|even|still|totally|always|never|often|usually|sometimes|all|both|last|first|ever|once|got to|started to)"
_SKIP_VERBS = _words("""think guess know mean wonder can could will would should do did don't didn't am
was were are is be been 'm m 'll 'd 've have to gonna wanna feel hope bet agree""")
_FIRST_PERSON = re.compile(rf"\b(?:I|I've|we|We|we've)\s+(?:{_ADVERBS}\s+)*+([a-z]+)\s+((?:[\w'-]+\s+){{0,5}}[\w'-]+)")
_POSSESSIVE = re.compile(r"\b[Mm]y\s+((?:new|old|little|best|younger|older|first)\s+)?([a-z]+)(?:,?\s+([A-Z][a-z]+))?")
_THIRD_PERSON = re.compile(
    r"\b([A-Z][a-z]+)\s+(is|was|has|had|got|went|bought|lives|lived|works|worked|moved|started|loves|likes)\s+"
    r"((?:[\w'-]+\s+){0,5}[\w'-]+)"
)


_SENTENCE_START = re.compile(r'(?:^|[.!?]["\']?\s+|["(\[]\s*)$')


def proper_nouns(text: str) -> list[str]:
    """Capitalised word runs that look like names. A one-word run at a sentence start counts only
    when the word is also capitalised mid-sentence in ``text`` (else it is just a first word)."""
    mid_sentence = {m.group(1) for m in _CAP.finditer(text) if not _SENTENCE_START.search(text[: m.start()])}
    mid_words = {w for run in mid_sentence for w in run.split()}
    out = []
    for m in _CAP.finditer(text):
        words = [w for w in m.group(1).split() if w not in _NOT_NAMES]
        if len(words) == 1 and _SENTENCE_START.search(text[: m.start()]) and words[0] not in mid_words:
            continue
        if words:
            name = " ".join(words)
            if name not in out:
                out.append(name)
    return out


def _cut(phrase: str) -> str:
    """An object phrase cut at a conjunction / relative clause."""
    return re.split(r"\s+(?:and|but|because|so|when|which|that|who|if|since|while)\s+", phrase, maxsplit=1)[0].strip()


def entity_relations(unit: Unit, speakers: frozenset[str] = frozenset()) -> list[str]:
    """Pattern-based ``"A - relation - B (day)"`` strings from one turn: first-person statements
    (``I``/``we`` -> the speaker), possessives (``my dog Max``), third-person statements about a
    named entity, and mentions of other names (not of ``speakers``, who mostly greet each other)."""
    day = iso_day(unit.when)
    who = unit.speaker or "speaker"
    rels: list[str] = []

    def add(a: str, r: str, b: str) -> None:
        s = f"{a} - {r} - {b} ({day})"
        if b and s not in rels:
            rels.append(s)

    for m in _FIRST_PERSON.finditer(unit.body):
        verb, obj = m.group(1), _cut(m.group(2))
        if verb not in _SKIP_VERBS and obj:
            add(who, verb, obj)
    for m in _POSSESSIVE.finditer(unit.body):
        adj, noun, name = (m.group(1) or ""), m.group(2), m.group(3)
        if noun in STOPWORDS:
            continue
        if name and name not in _NOT_NAMES:
            add(who, f"has {adj}{noun}".strip(), name)
        else:
            add(who, "has", f"{adj}{noun}")
    for m in _THIRD_PERSON.finditer(unit.body):
        if m.group(1) not in _NOT_NAMES:
            add(m.group(1), m.group(2), _cut(m.group(3)))
    for name in proper_nouns(unit.body):
        if (
            name != unit.speaker
            and name not in speakers
            and not any(f" {name}" in r or r.startswith(name) for r in rels)
        ):
            add(who, "mentions", name)
    return rels


# ------------------------------------------------------------------------------------ topics
def top_keywords(texts: list[str], n: int = 3, exclude: set[str] | None = None) -> list[str]:
    """The ``n`` most frequent content words of ``texts`` (surface forms, >= 4 letters), ties by
    first occurrence; ``exclude`` holds lower-case words to skip (e.g. speaker names)."""
    exclude = exclude or set()
    counts: Counter[str] = Counter()
    surface: dict[str, str] = {}
    for t in texts:
        for w in _WORD.findall(t.lower()):
            w = w.strip("'-")
            if len(w) < 4 or w in TOPIC_STOPWORDS or w in exclude or not w.isalpha():
                continue
            s = stem(w)
            counts[s] += 1
            surface.setdefault(s, w)
    order = {s: i for i, s in enumerate(surface)}
    ranked = sorted(counts, key=lambda s: (-counts[s], order[s]))
    return [surface[s] for s in ranked[:n]]

"""Write-time summary notes, the raw material of the graph index (AutoMEM, arXiv 2606.04315,
Sec. 5: "a Cypher graph built from LightMem's write-time summary index").

Records are cut into *windows*: consecutive chat turns / paragraphs of one session, at most
``window_turns`` of them. Each window costs exactly one model call (role ``indexer``) that
returns JSON ``{"notes": [{"text", "speakers", "topic"}]}`` (at most :data:`MAX_NOTES` notes,
bounded strings; the embedded model decodes under the schema's grammar). Time, session and
record ids come from the records, never from the model. The reply is validated (:class:`NoteOut`;
a note that reaches the schema's :data:`NOTE_MAX_CHARS` was cut there by the grammar, often
mid-word and with a stray token, so its last word is dropped); a reply that does not parse or
validate is counted (``parse_error.indexer``) and the window falls back to one note per record
(``source="fallback"``, recorded as a fallback of role ``indexer``), so nothing in the history is lost from
the index.

A note must be grounded in its window: it has at least :data:`MIN_CONTENT_WORDS` content words
(3+ letters) and at least :data:`GROUNDING_MIN` of them occur in the window's text, else it is
dropped (counted as ``indexer.ungrounded_note``; a small model otherwise writes fluent notes about
things nobody said). A note that copies a turn of its window
(:func:`~memfrontier.views.copies.copies_turns`) is dropped too (``indexer.copied_note``), as is
one naming a person of the prompt's example whom the window does not name
(``indexer.example_echo``); a window left without notes falls back as above. The 1.5B bench model
returned "Sam said, '...'" for most notes before the prompt carried a worked example (v3), and
quoted LongMemEval's long user/assistant turns in 5 of 53 windows until a second example showed a
user and an AI assistant (v4). Note speakers are the model's names matched to the window's real
speakers (normalised exact or difflib ratio >= 0.85); when none matches, the speaker whose turns
share the most words with the note.

Trajectory steps are not summarised: each step is its own note carrying its step index and
action verbatim (the storage failure the paper diagnoses is exactly a summary dropping them);
its topic is the action's verb.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, ValidationError, field_validator

from ...core.ledger import count_event, record_fallback
from ...core.render import human_date
from ...core.timeutil import calendar_day
from ...core.types import Record
from ...llm.metered import MeteredLLM
from ...llm.parsing import parse_or_count
from ...views.copies import copies_turns, names_absent_people
from .graph.dedup import name_similarity, normalize_name

PROMPT_VERSION = "automem-indexer-v4"
MAX_NOTES = 4
NOTE_MAX_CHARS = 160
TOPIC_MAX_CHARS = 30
SPEAKER_MAX_CHARS = 40
MAX_TOKENS = 320
#: Characters of one record shown to the indexer (longer records are cut).
RECORD_MAX_CHARS = 600
FALLBACK_MAX_CHARS = 200
#: Share of a note's content words that must occur in its window, and the fewest content words
#: a note needs ("Evan said" is no note).
GROUNDING_MIN = 0.5
MIN_CONTENT_WORDS = 3

#: The people of the indexer's worked example; a note naming one whom its window does not name
#: wrote the example into the index (dropped, counted ``indexer.example_echo``).
EXAMPLE_NAMES = ("Priyanka", "Tomasz")
_A, _B = EXAMPLE_NAMES
INDEXER_INSTRUCTION = (
    "You write compact memory notes from an excerpt of a history: what the people did, decided, "
    "planned, felt or told about themselves, retold in the third person. Write one note per "
    'distinct fact, event or plan: "text" is one sentence in your own words that keeps names, dates, '
    "places and numbers exactly (never a quote of a message); "
    '"speakers" are the people who said it; "topic" is one or two lower-case words. '
    f"At most {MAX_NOTES} notes, together covering what matters in the whole excerpt. "
    "In a chat between a user and an AI assistant, write what the user did, owns, plans or likes, "
    'and the assistant\'s specific suggestions, each note starting with "The user" or "The assistant" '
    '(never "user said"). Reply with JSON only.\n'
    "Example 1. Excerpt:\n"
    f'[1] {_A} said, "My bike chain snapped yesterday, so I walked the last two miles home."\n'
    f'[2] {_B} said, "Ouch! Want me to come over on Saturday and help you fix it?"\n'
    f'JSON: {{"notes": [{{"text": "{_A}\'s bike chain snapped and she walked the last two miles home.", '
    f'"speakers": ["{_A}"], "topic": "bike"}}, {{"text": "{_B} offered to come over on Saturday to help '
    f'{_A} fix her bike.", "speakers": ["{_B}"], "topic": "plans"}}]}}\n'
    "Example 2. Excerpt:\n"
    '[1] user said, "Can you suggest a gift for my sister? She turns 30 in May and just took up pottery."\n'
    '[2] assistant said, "Happy early birthday to her! For a new potter, a set of clay tools or a class '
    'voucher at a local studio would be a thoughtful gift."\n'
    'JSON: {"notes": [{"text": "The user\'s sister turns 30 in May and recently took up pottery.", '
    '"speakers": ["user"], "topic": "family"}, {"text": "The assistant suggested clay tools or a studio '
    'class voucher as a gift for the user\'s sister.", "speakers": ["assistant"], "topic": "gift"}]}'
)

NOTES_SCHEMA = {
    "type": "object",
    "properties": {
        "notes": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_NOTES,
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": NOTE_MAX_CHARS},
                    "speakers": {
                        "type": "array",
                        "maxItems": 2,
                        "items": {"type": "string", "maxLength": SPEAKER_MAX_CHARS},
                    },
                    "topic": {"type": "string", "maxLength": TOPIC_MAX_CHARS},
                },
                "required": ["text", "speakers", "topic"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["notes"],
    "additionalProperties": False,
}


class NoteOut(BaseModel):
    """One note as the model must return it."""

    text: str = Field(min_length=1)
    speakers: list[str] = Field(default_factory=list)
    topic: str = ""

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("empty note text")
        if len(v) >= NOTE_MAX_CHARS:  # cut at the schema's limit, mid-word: drop the partial word
            head = v[:NOTE_MAX_CHARS]
            v = head.rsplit(" ", 1)[0].rstrip(" ,;:-") if " " in head else head
        return v

    @field_validator("speakers", mode="before")
    @classmethod
    def _speakers(cls, v):
        if isinstance(v, str):
            v = [v]
        return [str(s).strip() for s in (v or []) if str(s).strip()][:4]

    @field_validator("topic", mode="before")
    @classmethod
    def _topic(cls, v):
        return " ".join(str(v or "").lower().split())[: TOPIC_MAX_CHARS * 2]


class NotesOut(BaseModel):
    notes: list[NoteOut] = Field(min_length=1)


@dataclass
class Note:
    """A note ready for the graph: the model's text/speakers/topic plus time, session, the record
    ids it covers, and for trajectory steps the step index and action."""

    text: str
    speakers: list[str]
    topic: str
    time: str
    session: str
    record_ids: list[str]
    step: int = -1
    action: str = ""
    source: str = "model"

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Window:
    """Consecutive records of one session summarised by one call (or one trajectory step)."""

    records: list[Record]
    is_step: bool = False
    speakers: list[str] = field(default_factory=list)

    def key(self, model_id: str) -> str:
        """Cache key: prompt version, model and the records' ids and texts."""
        h = hashlib.sha256()
        h.update(f"{PROMPT_VERSION}\x1f{model_id}\x1f".encode())
        for r in self.records:
            h.update(f"{r.id}\x1f{r.render()}\x1e".encode())
        return h.hexdigest()[:24]


def _new_day(cur: list[Record], r: Record) -> bool:
    """Whether dated ``r`` is of another calendar day than the window's first dated record (a window
    is dated by its first record: a session written over several days is cut where the day changes)."""
    first = next((x.timestamp for x in cur if x.timestamp), None)
    return bool(first and r.timestamp) and calendar_day(first) != calendar_day(r.timestamp)


def make_windows(records: list[Record], window_turns: int) -> list[Window]:
    """Cut chronological ``records`` into windows: each trajectory step alone; other records in
    runs of one session and one calendar day, at most ``window_turns`` long. Raises ValueError for
    ``window_turns < 1``."""
    if window_turns < 1:
        raise ValueError(f"window_turns must be >= 1, got {window_turns}")
    out: list[Window] = []
    cur: list[Record] = []

    def flush():
        if cur:
            spk = list(dict.fromkeys(r.speaker for r in cur if r.speaker))
            out.append(Window(list(cur), speakers=spk))
            cur.clear()

    for r in records:
        if r.kind == "step":
            flush()
            out.append(Window([r], is_step=True, speakers=[r.speaker] if r.speaker else []))
            continue
        if cur and (cur[-1].session_id != r.session_id or len(cur) >= window_turns or _new_day(cur, r)):
            flush()
        cur.append(r)
    flush()
    return out


def window_prompt(w: Window) -> list[dict]:
    """The indexer's messages for one window: instruction, then the dated excerpt."""

    first = w.records[0]
    day = human_date(first.timestamp)
    head = f"Excerpt from {first.session_id}" + (f", {day}" if day else "") + ":"
    lines = [head]
    for i, r in enumerate(w.records, 1):
        text = r.render()
        lines.append(f"[{i}] {text[:RECORD_MAX_CHARS]}")
    return [
        {"role": "system", "content": INDEXER_INSTRUCTION},
        {"role": "user", "content": "\n".join(lines) + "\n\nJSON:"},
    ]


_WORDS = re.compile(r"\w+")


def _best_speaker(text: str, w: Window) -> list[str]:
    """The window speaker whose turns share the most words with ``text`` (none when no overlap)."""
    words = _content_words(text)
    best, best_n = None, 0
    for r in w.records:
        n = len(words & _content_words(r.text))
        if r.speaker and n > best_n:
            best, best_n = r.speaker, n
    return [best] if best else []


def match_speakers(names: list[str], w: Window, text: str) -> list[str]:
    """The window speakers that ``names`` refer to (normalised exact, or difflib ratio >= 0.85);
    when none does, :func:`_best_speaker`. Unmatched names are counted (``indexer.unknown_speaker``)."""
    out: list[str] = []
    unknown = 0
    for n in names:
        hit = next((s for s in w.speakers if normalize_name(s) == normalize_name(n)), None)
        if hit is None:
            scored = [(name_similarity(n, s), s) for s in w.speakers]
            sim, s = max(scored, default=(0.0, None))
            hit = s if sim >= 0.85 else None
        if hit is None:
            unknown += 1
        elif hit not in out:
            out.append(hit)
    if unknown:
        count_event("indexer.unknown_speaker", unknown)
    return out or _best_speaker(text, w)


def _verb(action: str) -> str:
    m = re.match(r"\s*([A-Za-z_]+)", action or "")
    return m.group(1).lower() if m else ""


def step_note(r: Record) -> Note:
    """A trajectory step as a note: its rendered text, step index and action kept verbatim."""
    return Note(
        text=r.render()[: NOTE_MAX_CHARS * 4],
        speakers=[r.speaker] if r.speaker else [],
        topic=_verb(r.action or ""),
        time=r.timestamp or "",
        session=r.session_id,
        record_ids=[r.id],
        step=r.step_index if r.step_index is not None else -1,
        action=r.action or "",
        source="step",
    )


def fallback_notes(w: Window) -> list[Note]:
    """One note per record (its text cut to :data:`FALLBACK_MAX_CHARS`), used when the model fails."""
    return [
        Note(
            text=(r.text or r.render())[:FALLBACK_MAX_CHARS],
            speakers=[r.speaker] if r.speaker else [],
            topic="",
            time=r.timestamp or "",
            session=r.session_id,
            record_ids=[r.id],
            source="fallback",
        )
        for r in w.records
    ]


def _content_words(text: str) -> set[str]:
    return {t.lower() for t in _WORDS.findall(text) if len(t) >= 3}


def grounded(note_text: str, w: Window) -> bool:
    """True when the note has >= :data:`MIN_CONTENT_WORDS` content words and >= :data:`GROUNDING_MIN`
    of them occur in the window."""
    words = _content_words(note_text)
    if len(words) < MIN_CONTENT_WORDS:
        return False
    window = set().union(*(_content_words(r.render()) for r in w.records))
    return len(words & window) / len(words) >= GROUNDING_MIN


def notes_from_reply(text: str, w: Window) -> list[Note] | None:
    """Validated, grounded notes from the indexer's raw reply, or None (counted) when it does not
    parse or validate or no note is kept (:func:`read_reply`, whose reason this drops)."""
    return read_reply(text, w)[0]


#: Why no note of a reply was kept, as the window's fallback record names it: the reply did not
#: parse (``unparsable``) or validate (``invalid``: no note is one), or every note was refused, by
#: the rejection most of them met: too few of its words in the window
#: (``ungrounded``), a copy of the window's turns (``copied_turns``), or the prompt's example people
#: (``example_echo``).
REJECTIONS = ("unparsable", "invalid", "ungrounded", "copied_turns", "example_echo")


def read_reply(text: str, w: Window) -> tuple[list[Note] | None, str | None]:
    """``(notes, None)`` from the indexer's raw reply: validated, grounded notes with matched
    speakers; or ``(None, reason)`` (one of :data:`REJECTIONS`) when none is kept. Counts
    ``parse_error.indexer`` (via :func:`parse_or_count`), ``invalid_output.indexer`` and, per
    refused note, ``indexer.ungrounded_note``, ``indexer.copied_note`` or ``indexer.example_echo``."""
    res = parse_or_count(text, "parse_error.indexer", expect="object")
    if not res.ok:
        return None, "unparsable"
    try:
        out = NotesOut.model_validate(res.value)
    except ValidationError:
        count_event("invalid_output.indexer")
        return None, "invalid"
    first = w.records[0]
    rids = [r.id for r in w.records]
    turns = [r.text or r.render() for r in w.records]
    rendered = [r.render() for r in w.records]  # with the speakers' names: a speaker is no echo
    kept, refused = [], []
    for n in out.notes[:MAX_NOTES]:
        if not grounded(n.text, w):
            count_event("indexer.ungrounded_note")
            refused.append("ungrounded")
        elif copies_turns(n.text, turns):
            count_event("indexer.copied_note")
            refused.append("copied_turns")
        elif names_absent_people(n.text, EXAMPLE_NAMES, rendered):
            count_event("indexer.example_echo")
            refused.append("example_echo")
        else:
            kept.append(n)
    if not kept:
        return None, max(REJECTIONS[2:], key=refused.count)  # NotesOut holds one note at least
    return [
        Note(
            text=n.text,
            speakers=match_speakers(n.speakers, w, n.text),
            topic=n.topic,
            time=first.timestamp or "",
            session=first.session_id,
            record_ids=rids,
        )
        for n in kept
    ], None


async def summarize_window(llm: MeteredLLM, w: Window) -> list[Note]:
    """Notes of one window: one ``indexer`` call for turns/paragraphs, none for a step."""
    if w.is_step:
        return [step_note(w.records[0])]
    out = await llm.complete(
        window_prompt(w), role="indexer", max_tokens=MAX_TOKENS, temperature=0.0, json_schema=NOTES_SCHEMA
    )
    notes, reason = read_reply(out.text, w)
    if notes is None:
        record_fallback(role="indexer", module="indexer", reason=reason)
        return fallback_notes(w)
    return notes

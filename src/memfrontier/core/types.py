"""Core data types shared by every layer: records, chunks, questions, contexts, answers.

Names follow the glossary in DESIGN.md. All models are pydantic v2 and JSON-serialisable.
Every number that leaves the library carries its unit in its name (``_usd``, ``_tokens``, ``_s``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from .text import check_id, clean_text, require_non_blank
from .timeutil import canonical_timestamp

RecordKind = Literal["turn", "paragraph", "step"]
#: How :meth:`Record.render` frames the speaker: ``Ana said, "text"`` or ``Ana: text``.
TurnStyle = Literal["said", "colon"]


class ImageRef(BaseModel):
    """An image attached to a record: id, caption and an optional local path (images may be absent)."""

    model_config = ConfigDict(frozen=True)
    id: str
    caption: str = ""
    path: str | None = None

    @field_validator("caption")
    @classmethod
    def _valid_unicode(cls, v: str) -> str:
        return clean_text(v)


def missing_scope_message(what: str, hint: str = "") -> str:
    """The one refusal of ``what`` (a call, a flag: ``"search"``, ``"--file"``) made without a scope
    id, on every path (Python, CLI, REST, MCP, the store); ``hint`` adds why or what else is
    possible."""
    return f"{what} needs a scope: give user_id, agent_id or run_id" + (f" ({hint})" if hint else "")


class Scope(BaseModel):
    """Who a record belongs to. ``None`` on a search means "any"; on a record it means "unset".

    An id is ``None`` (absent) or a non-empty string: ``""`` is rejected with a ``ValueError``
    (it would otherwise be a second spelling of "absent", and an empty scope on a search matches
    every tenant), and so is an id holding NUL (U+0000) or a lone surrogate
    (:func:`~memfrontier.core.text.check_id`). Any other string is allowed, separators included.
    """

    model_config = ConfigDict(frozen=True)
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None

    @field_validator("user_id", "agent_id", "run_id")
    @classmethod
    def _non_empty(cls, v, info):
        if v is not None and v == "":
            raise ValueError(f"{info.field_name} must be a non-empty string or None (absent), got ''")
        return v if v is None else check_id(v, info.field_name, blank_ok=True)

    def key(self) -> str:
        """The scope's canonical encoding: the JSON array ``[user_id, agent_id, run_id]``
        (``null`` for an absent id, ASCII-escaped), e.g. ``["x|y",null,null]``. Injective: two
        scopes have the same key only if all three ids are equal. Used wherever a scope becomes
        a row key (records, chunks, bank items, per-scope search partitions)."""
        return json.dumps([self.user_id, self.agent_id, self.run_id], ensure_ascii=True, separators=(",", ":"))

    def slug(self) -> str:
        """A file-name-safe, injective name for the scope: a readable part (``u-<user>.a-<agent>.r-<run>``,
        characters outside ``[A-Za-z0-9_-]`` replaced by ``_``, each id cut to 24 characters; ``any``
        when no id is set) plus ``-`` and the first 16 hex digits of sha256(:meth:`key`). The hash
        makes it injective (the readable part alone is not: ``x|y`` and ``x_y`` read the same)."""
        parts = [
            f"{tag}-{_SLUG_RE.sub('_', v)[:24]}"
            for tag, v in (("u", self.user_id), ("a", self.agent_id), ("r", self.run_id))
            if v is not None
        ]
        digest = hashlib.sha256(self.key().encode("ascii")).hexdigest()[:16]
        return f"{'.'.join(parts) or 'any'}-{digest}"

    def matches(self, other: "Scope") -> bool:
        """Whether the record scope ``other`` is inside this search scope (``None`` here matches any)."""
        return all(
            v is None or getattr(other, f) == v
            for f, v in (("user_id", self.user_id), ("agent_id", self.agent_id), ("run_id", self.run_id))
        )


_SLUG_RE = re.compile(r"[^A-Za-z0-9_-]")


class Record(BaseModel):
    """One atomic unit of history: a chat turn, a document paragraph or a trajectory step.

    ``id`` is stable: loaders derive it from the dataset (``conv-49:D1:3``), and
    :func:`record_id` derives one from content for ad-hoc messages, so re-adding the same
    record is a no-op. ``timestamp`` (session time for chat turns) is stored in the canonical
    aware-UTC form of :func:`memfrontier.core.timeutil.canonical_timestamp` (naive = UTC); a value
    that is not a complete date raises ValueError, and so does an empty or blank one (no timestamp
    is None). ``id`` and ``session_id`` are identifiers: an empty or blank one, or one holding NUL
    (U+0000) or a lone surrogate, raises ValueError (:func:`memfrontier.core.text.check_id`).
    In the text fields NUL and lone surrogates become U+FFFD (:func:`memfrontier.core.text.clean_text`);
    ``role`` may not be empty or blank.
    """

    id: str
    kind: RecordKind = "turn"
    scope: Scope = Field(default_factory=Scope)
    session_id: str = "default"
    speaker: str = ""
    role: str = "user"
    timestamp: str | None = None
    text: str
    images: list[ImageRef] = Field(default_factory=list)
    # trajectory steps
    step_index: int | None = None
    action: str | None = None
    observation: str | None = None
    meta: dict = Field(default_factory=dict)

    @field_validator("timestamp", mode="before")
    @classmethod
    def _canonical_timestamp(cls, v):
        return canonical_timestamp(v)

    @field_validator("id", "session_id")
    @classmethod
    def _identifier(cls, v, info):
        return check_id(v, info.field_name)

    @field_validator("text", "speaker", "role", "action", "observation")
    @classmethod
    def _valid_unicode(cls, v, info):
        v = v if v is None else clean_text(v)
        return require_non_blank(v, "role") if info.field_name == "role" else v

    def render(self, style: TurnStyle = "said") -> str:
        """The text a retriever and a reader see: speaker, text, image captions (LoCoMo style).
        ``style``: ``said`` (``Ana said, "text [shared image: caption]"``, what the stores index) or
        ``colon`` (``Ana: text [image: caption]``, the same turn in fewer tokens)."""
        body = self.text.strip()
        if self.kind == "step":
            parts = [f"step {self.step_index}" if self.step_index is not None else "step"]
            if self.action:
                parts.append(f"action: {self.action}")
            if self.observation:
                parts.append(f"observation: {self.observation}")
            if body:
                parts.append(body)
            body = "; ".join(parts)
        caps = [im.caption.strip() for im in self.images if im.caption.strip()]
        if caps:
            shown = f"[{'image' if style == 'colon' else 'shared image'}: {'; '.join(caps)}]"
            body = f"{body} {shown}" if body else shown
        if not self.speaker:
            return body
        return f"{self.speaker}: {body}" if style == "colon" else f'{self.speaker} said, "{body}"'


def record_id(scope: Scope, session_id: str, position: int, speaker: str, text: str, timestamp: str | None) -> str:
    """Deterministic content-derived id for a record added without one (idempotent ingest)."""
    h = hashlib.sha256(
        "\x1f".join([scope.key(), session_id, str(position), speaker, timestamp or "", text]).encode("utf-8")
    )
    return "r-" + h.hexdigest()[:20]


class Chunk(BaseModel):
    """Records of one session packed to about 256 retriever tokens; a record is never split."""

    id: str
    scope: Scope
    session_id: str
    timestamp: str | None
    text: str
    record_ids: list[str]
    n_tokens: int


class Hit(BaseModel):
    """A search result: a chunk plus its fused score and per-retriever ranks (1-based)."""

    chunk: Chunk
    score: float
    ranks: dict[str, int] = Field(default_factory=dict)
    #: ids of the near-duplicate chunks folded into this one, which is their latest
    #: (:mod:`memfrontier.retrieve.fold`); empty when none was folded or the search did not fold
    folded: list[str] = Field(default_factory=list)


class Question(BaseModel):
    """A benchmark question with its gold answer and, where the dataset has them, gold evidence ids."""

    id: str
    conversation_id: str
    question: str
    answer: str | None  # None for LoCoMo category 5 (only an adversarial answer exists)
    category: str  # "1".."5" for LoCoMo, question_type for LongMemEval, type for HotpotQA
    evidence_ids: list[str] = Field(default_factory=list)
    question_date: str | None = None
    adversarial_answer: str | None = None
    abstention: bool = False
    meta: dict = Field(default_factory=dict)

    @field_validator("answer", mode="before")
    @classmethod
    def _str_answer(cls, v):
        return None if v is None else clean_text(str(v))

    @field_validator("question")
    @classmethod
    def _valid_unicode(cls, v: str) -> str:
        return clean_text(v)


class Conversation(BaseModel):
    """One history (a LoCoMo conversation, a LongMemEval haystack, a HotpotQA context) and its questions."""

    id: str
    records: list[Record]
    questions: list[Question]
    meta: dict = Field(default_factory=dict)


class Context(BaseModel):
    """What a strategy hands the answerer: m_q (text) and the record ids it was built from."""

    text: str
    evidence_ids: list[str] = Field(default_factory=list)
    meta: dict = Field(default_factory=dict)


#: The named preferences (MemPilot Sec. 4.4): quality only, quality with cost and latency, cost first.
PresetName = Literal["perf", "balanced", "cost"]
PRESETS: tuple[str, ...] = get_args(PresetName)


def _finite_non_negative(v, info):
    """``v`` unchanged when it is None or a finite number >= 0; else ValueError naming the field."""
    if v is not None and (isinstance(v, bool) or not math.isfinite(v) or v < 0):
        raise ValueError(f"{info.field_name} must be a finite number >= 0, got {v!r}")
    return v


class Preference(BaseModel):
    """lambda = (lambda_Q, lambda_C, lambda_L), MemPilot's preference weights (Eq. 9-10): the
    weights of quality, cost (USD) and latency (proxy seconds) in a utility. Presets
    (:meth:`preset`): perf, balanced, cost.

    The paper fixes only lambda_Q = 1 and names the three regimes; the cost and latency weights of
    ``balanced`` (0.5, 0.5) and ``cost`` (1.0, 0.25) are this project's choice, not the paper's.

    Each weight is a finite number >= 0 (an int is taken as a float); NaN, infinity, a negative
    number, a bool or an unknown key raises ValueError naming the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    quality: StrictFloat = 1.0
    cost: StrictFloat = 0.0
    latency: StrictFloat = 0.0

    _finite = field_validator("quality", "cost", "latency")(_finite_non_negative)

    @classmethod
    def preset(cls, name: str) -> "Preference":
        """The preset ``name`` (:data:`PresetName`). Raises ValueError for another name."""
        presets = {
            "perf": cls(quality=1.0, cost=0.0, latency=0.0),
            "balanced": cls(quality=1.0, cost=0.5, latency=0.5),
            "cost": cls(quality=1.0, cost=1.0, latency=0.25),
        }
        if name not in presets:
            raise ValueError(f"unknown preference preset {name!r}; choose one of {sorted(presets)}")
        return presets[name]

    @classmethod
    def of(cls, spec: "PreferenceSpec | dict | None") -> "Preference | None":
        """A Preference from a :data:`PreferenceSpec` (a preset name or a Preference) or a dict of
        weights; None stays None. Raises ValueError for an unknown preset or invalid weights."""
        if spec is None or isinstance(spec, Preference):
            return spec
        if isinstance(spec, str):
            return cls.preset(spec)
        return cls.model_validate(spec)


#: A preference as a config gives it: a preset name or explicit weights.
PreferenceSpec = PresetName | Preference


class Budget(BaseModel):
    """Optional hard caps per query that a strategy must honour (None = no cap): ``max_usd`` (USD),
    ``max_tokens`` (input + output tokens), ``max_proxy_s`` (latency proxy seconds, MemPilot Eq. 15-19).

    Each cap is None or a finite number >= 0; NaN, infinity, a negative number, a bool or an
    unknown key raises ValueError naming the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_usd: StrictFloat | None = None
    max_tokens: StrictInt | None = None
    max_proxy_s: StrictFloat | None = None

    _finite = field_validator("max_usd", "max_tokens", "max_proxy_s")(_finite_non_negative)

    @classmethod
    def of(cls, spec: "Budget | Mapping | None") -> "Budget":
        """A Budget from a Budget, a mapping of its caps (``{"max_usd": 1e-4}``, as REST sends
        one) or None (no cap). Raises ValueError for anything else, naming its type, and for a
        cap refused as above."""
        if spec is None:
            return cls()
        if isinstance(spec, Budget):
            return spec
        if isinstance(spec, Mapping):
            return cls.model_validate(dict(spec))
        raise ValueError(
            f"budget must be a Budget or a mapping of max_usd / max_tokens / max_proxy_s, not {type(spec).__name__}"
        )

    def stricter(self, other: "Budget | None") -> "Budget":
        """The field-wise tighter of this budget and ``other`` (None = no cap; ``other`` None: self)."""
        if other is None:
            return self

        def low(x, y):
            return y if x is None else x if y is None else min(x, y)

        return Budget(
            max_usd=low(self.max_usd, other.max_usd),
            max_tokens=low(self.max_tokens, other.max_tokens),
            max_proxy_s=low(self.max_proxy_s, other.max_proxy_s),
        )

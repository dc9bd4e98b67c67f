"""What the facade returns: an :class:`Answer`, a :class:`Recall` and a :class:`BuildReport`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..core.ledger import StageUsage, Usage


class BuildReport(BaseModel):
    """What building a strategy's view of a scope did: its construction ``usage`` (the model calls
    of this build: calls, tokens, USD, latency proxy, their wall seconds), ``wall_s`` (the build's
    own seconds, embedding included) and its ``fallbacks``: the error and
    fallback shares per role of the view's construction
    (:func:`~memfrontier.core.fallbacks.fallback_report`; over every build of the view when the
    view records its construction, else this build's)."""

    strategy: str  # as Answer.strategy
    usage: StageUsage
    fallbacks: dict
    wall_s: float = 0.0


class Answer(BaseModel):
    """An answer with the context's evidence record ids and its usage by stage
    (tokens, USD, latency proxy seconds, wall seconds). ``strategy`` is the name asked for (a
    named configuration's own, e.g. ``rag-turns-rr``), or the strategy object's ``name``."""

    text: str
    evidence_ids: list[str] = Field(default_factory=list)
    context: str = ""
    strategy: str
    usage: Usage
    wall_s: float
    meta: dict = Field(default_factory=dict)
    build: BuildReport | None = None  # the view's build, when ``ask(build=True)`` built it first
    #: when the question was asked (ISO, UTC): the caller's ``question_date``, or the time ``ask`` ran
    #: when none was given; None for an undated question (:meth:`AsyncMemory.answer` without one)
    question_date: str | None = None


class Recall(BaseModel):
    """What a strategy retrieves for a question, with no answer call: the context m_q the answerer
    would read (``context``, cut to ``max_context_tokens`` when asked: whole lines from the top,
    ``truncated`` then True), the evidence record ids it was built from (all of them, also when
    cut), ``usage`` by stage (a retrieval that calls a model, such as MemPilot's or AutoMEM's,
    costs tokens and USD), ``wall_s`` (seconds), the name asked for (``strategy``), the question's
    date used and the view's build report when ``build=True`` built it."""

    context: str
    evidence_ids: list[str] = Field(default_factory=list)
    strategy: str
    usage: Usage
    wall_s: float
    truncated: bool = False
    question_date: str | None = None
    build: BuildReport | None = None

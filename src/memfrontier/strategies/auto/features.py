"""The router's features: what is known about a question before any model call.

One feature vector per (question, scope), float64, shape ``(embedding_dim + 7,)``:

- the question's MiniLM embedding (the store's embedder, L2-normalised, ``embedding_dim`` = 384);
- ``question_words_log``: log(1 + words in the question);
- ``temporal_cue`` / ``multi_hop_cue`` / ``inference_cue``: 1.0 when the question matches the
  cue's pattern (:data:`CUES`), else 0.0 (LoCoMo's temporal, multi-hop and open-domain
  inference question categories, Maharana et al. 2024);
- ``scope_records_log`` / ``scope_sessions_log``: log(1 + records / sessions stored in the scope);
- ``views_built``: the share of the router's configurations whose offline view of the scope is
  built (1.0 when every one is, or none needs one).

Training (:mod:`memfrontier.train.strategy_router`) and the ``auto`` strategy build the vector with
the same function, :func:`feature_vector`; the router file records :data:`FEATURE_VERSION` and the
names, and a router made for another version or embedding model is refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ...core.types import Scope

#: Bumped whenever a feature's definition changes (a router file records the version it was fit on).
FEATURE_VERSION = 1
#: The scalar features after the embedding, in vector order.
SCALAR_FEATURES = (
    "question_words_log",
    "temporal_cue",
    "multi_hop_cue",
    "inference_cue",
    "scope_records_log",
    "scope_sessions_log",
    "views_built",
)
#: Cue patterns (case-insensitive, whole words) of LoCoMo's question kinds.
CUES: dict[str, re.Pattern] = {
    "temporal_cue": re.compile(
        r"\b(when|what (year|month|day|date|time)|how long|before|after|ago|since|until|during|first|last|"
        r"recent(ly)?|earlier|later|yesterday|weeks?|months?|years?|dates?)\b",
        re.IGNORECASE,
    ),
    "multi_hop_cue": re.compile(
        r"\b(both|in common|how many|(kinds?|types?|sorts?) of|activities|things|hobbies|books|events|places|"
        r"ways|items|has|have)\b",
        re.IGNORECASE,
    ),
    "inference_cue": re.compile(r"\b(would|likely|might|could|probably|considered?|think|if)\b", re.IGNORECASE),
}


@dataclass(frozen=True)
class ScopeStats:
    """Size of a scope's history: records and distinct sessions stored."""

    records: int
    sessions: int


def scope_stats(store, scope: Scope) -> ScopeStats:
    """Records and sessions of ``scope`` in ``store`` (reads the scope's records once)."""
    recs = store.records(scope)
    return ScopeStats(records=len(recs), sessions=len({r.session_id for r in recs}))


def question_features(text: str) -> list[float]:
    """``[question_words_log, temporal_cue, multi_hop_cue, inference_cue]`` of a question."""
    return [math.log1p(len(text.split())), *(1.0 if p.search(text) else 0.0 for p in CUES.values())]


def feature_vector(embedding: np.ndarray, text: str, stats: ScopeStats, views_built: float) -> np.ndarray:
    """The router's input: ``embedding`` (shape ``(dim,)``) then :data:`SCALAR_FEATURES`, float64.

    Raises ValueError for an embedding that is not one vector or a ``views_built`` outside [0, 1].
    """
    emb = np.asarray(embedding, dtype=np.float64)
    if emb.ndim != 1:
        raise ValueError(f"embedding must have shape (dim,), got {emb.shape}")
    if not 0.0 <= views_built <= 1.0:
        raise ValueError(f"views_built is a share in [0, 1], got {views_built}")
    scalars = [*question_features(text), math.log1p(stats.records), math.log1p(stats.sessions), float(views_built)]
    return np.concatenate([emb, np.asarray(scalars, dtype=np.float64)])


__all__ = [
    "CUES",
    "FEATURE_VERSION",
    "SCALAR_FEATURES",
    "ScopeStats",
    "feature_vector",
    "question_features",
    "scope_stats",
]

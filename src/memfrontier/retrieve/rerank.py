"""A learned reranker of turn hits: re-orders the candidates of the turn view's hybrid search by how
likely each turn is to be evidence for the question.

No extra model runs at query time: every feature comes from what the search already has (the query
embedding, the turns' stored embeddings, BM25, the fused and chunk ranks), so reranking 64 turns
costs a few milliseconds of numpy. The model is a small two-layer network (one hidden layer of
``hidden`` ReLU units plus a linear term), trained on the gold evidence of the LoCoMo, LongMemEval
(oracle) and LongMemEval_S training pools by ``memfrontier train turn-reranker``
(:mod:`memfrontier.train.turn_reranker`) and shipped as :data:`DEFAULT_RERANKER`, a versioned JSON
document (no pickle, no code). ``rag`` uses it when asked (``rerank: true``; the named
configuration ``rag-turns-rr``).

Per candidate turn ``t`` of query ``q`` (scores over the turns of the scope):

* scalars (:data:`SCALAR_FEATURES`): the fused rank ``r`` as ``1/(5+r)`` and ``log r``; the cosine
  ``cos(q, t)`` and the log of its dense rank; BM25 divided by the query's best BM25 in the scope,
  the log of its BM25 rank (``log 999`` when it has no term in common) and whether it has one; the
  log of its chunk rank (the ``chunk`` retriever's, ``log 999`` when absent); the best cosine and
  the best normalised BM25 of its two neighbouring turns in the session; the best cosine of its
  session and ``cos`` minus that; the log of its length in embedder tokens; whether it shares an
  image; the question's first word, one-hot over :data:`QUESTION_WORDS`;
* the element-wise product ``q * t`` of the two unit embeddings (``dim`` values; their sum is the
  cosine), which lets the model weigh the dimensions of a match by the kind of question.

``score = w_o . relu(W_v (q*t) + W_s z + b_h) + w_l . z + b_o`` with ``z = (x - mean) / std`` the
standardised scalars; a higher score ranks first. The file's layout is :class:`RerankerFile`.

It declines to rerank what it was not trained on: the file keeps each scalar's least and greatest
value over its training candidates, and when more than :data:`DECLINE_SHARE` of a question's
candidates have a scalar outside that range, the fused order is kept (event ``rerank.declined``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.errors import ArtifactError
from ..core.jsonio import write_json_atomic
from ..core.ledger import count_event
from ..core.types import Scope
from ..store.bank import BankHit, MemoryBank

RERANKER_FORMAT = "memfrontier.turn-reranker"
#: The file version this code reads and writes; another is refused (retrain).
RERANKER_VERSION = 2
#: The shipped reranker (trained on the LoCoMo, LongMemEval and LongMemEval_S training pools).
DEFAULT_RERANKER = Path(__file__).with_name("turn_reranker.json")
#: The reranker declines a question (keeps the fused order) when more than this share of its
#: candidates have a scalar outside the range seen in training (:meth:`TurnReranker.declines`).
DECLINE_SHARE = 0.25
#: A rank a retriever did not give (no BM25 term in common, no chunk among the chunk retriever's).
ABSENT_RANK = 999
#: First words of a question, one-hot (any other word: all zero).
QUESTION_WORDS = (
    "when", "what", "who", "where", "how", "why", "which", "did", "does", "is", "would", "do", "was", "has",
    "have", "are",
)  # fmt: skip
SCALAR_FEATURES = (
    "fused_inv",
    "fused_log_rank",
    "cos",
    "dense_log_rank",
    "bm25_norm",
    "bm25_log_rank",
    "chunk_log_rank",
    "neighbour_cos",
    "neighbour_bm25",
    "session_cos",
    "cos_below_session",
    "log_tokens",
    "image",
    "has_bm25",
) + tuple(f"q_{w}" for w in QUESTION_WORDS)


class RerankerFileError(ArtifactError):
    """A reranker file that cannot be used: not JSON, another format or version, shapes that do not
    agree, or features this code does not compute. The message names the file and the problem."""


class RerankerFile(BaseModel):
    """The reranker document. Weights: ``w_v`` ``(hidden, dim)``, ``w_s`` ``(hidden, n_scalars)``,
    ``b_h`` ``(hidden,)``, ``w_o`` ``(hidden,)``, ``w_l`` ``(n_scalars,)``, ``b_o``; ``mean`` and
    ``std`` ``(n_scalars,)`` standardise the scalars; ``low`` and ``high`` ``(n_scalars,)``: each
    scalar's least and greatest value over the training candidates. ``provenance``: what it was
    trained on; ``validation``: its leave-one-conversation-out report."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = RERANKER_FORMAT
    version: int = RERANKER_VERSION
    embedding_model: str
    scalars: list[str]
    mean: list[float]
    std: list[float]
    low: list[float]
    high: list[float]
    w_v: list[list[float]]
    w_s: list[list[float]]
    b_h: list[float]
    w_o: list[float]
    w_l: list[float]
    b_o: float
    provenance: dict = Field(default_factory=dict)
    validation: dict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> "RerankerFile":
        if self.format != RERANKER_FORMAT or self.version != RERANKER_VERSION:
            raise ValueError(
                f"format {self.format!r} v{self.version}, this code reads {RERANKER_FORMAT!r} v{RERANKER_VERSION}"
            )
        if list(self.scalars) != list(SCALAR_FEATURES):
            raise ValueError(
                f"scalar features {self.scalars} are not the ones this code computes ({list(SCALAR_FEATURES)})"
            )
        n, h = len(self.scalars), len(self.b_h)
        shapes = {
            "mean": (len(self.mean), n),
            "std": (len(self.std), n),
            "low": (len(self.low), n),
            "high": (len(self.high), n),
            "w_l": (len(self.w_l), n),
            "w_o": (len(self.w_o), h),
            "w_v rows": (len(self.w_v), h),
            "w_s rows": (len(self.w_s), h),
        }
        bad = [f"{k} has {got}, expected {want}" for k, (got, want) in shapes.items() if got != want]
        if len({len(r) for r in self.w_v}) > 1 or any(len(r) != n for r in self.w_s):
            bad.append("ragged weight rows")
        if bad:
            raise ValueError("; ".join(bad))
        if any(s <= 0 for s in self.std):
            raise ValueError("std must be positive")
        if any(lo > hi for lo, hi in zip(self.low, self.high)):
            raise ValueError("low must not exceed high")
        return self


def read_reranker_file(path: str | Path) -> RerankerFile:
    """The reranker document at ``path``. Raises :class:`RerankerFileError` naming the file."""
    p = Path(path)
    try:
        return RerankerFile.model_validate(json.loads(p.read_text("utf-8")))
    except FileNotFoundError as e:
        raise RerankerFileError(f"{p}: no reranker file (train one with `memfrontier train turn-reranker`)") from e
    except (ValueError, ValidationError) as e:
        raise RerankerFileError(f"{p}: not a usable reranker file: {e}") from e


def write_reranker_file(rf: RerankerFile, path: str | Path) -> Path:
    """Write ``rf`` as JSON, atomically; returns the path."""
    p = Path(path)
    write_json_atomic(p, rf.model_dump(mode="json"))
    return p


def turn_features(
    bank: MemoryBank,
    scope: Scope,
    kind: str,
    question: str,
    hits: list[BankHit],
    query_vector: np.ndarray,
    bm25: dict[str, float],
    count_tokens,
) -> tuple[np.ndarray, np.ndarray]:
    """The features of ``hits`` (in their fused order), see the module docstring.

    Args:
        question: the query text (its first word is a feature).
        bank, scope, kind: where the hits come from (every score is over the items of ``kind`` in ``scope``).
        hits: the hybrid search's hits, best first; ``ranks["chunk"]`` is read when present.
        query_vector: the query's unit embedding, ``(dim,)``.
        bm25: item id -> BM25 score for the scope's items with a term in common with the query.
        count_tokens: the embedder's token count of a text.

    Returns:
        ``(scalars, products)``: float32 ``(len(hits), len(SCALAR_FEATURES))`` and ``(len(hits), dim)``.
    """
    items, matrix = bank.vectors(scope, kind)
    dim = matrix.shape[1] if matrix.ndim == 2 else len(query_vector)
    if not hits:
        return np.zeros((0, len(SCALAR_FEATURES)), np.float32), np.zeros((0, dim), np.float32)
    q = np.asarray(query_vector, dtype=np.float32)
    cos = matrix @ q
    row = {it.id: i for i, it in enumerate(items)}
    dense_rank = np.empty(len(items), dtype=np.int64)
    dense_rank[np.lexsort((np.arange(len(items)), -cos))] = np.arange(1, len(items) + 1)
    best_bm25 = max(bm25.values(), default=0.0)
    bm25_rank = {i: r for r, i in enumerate(sorted(bm25, key=lambda i: (-bm25[i], row.get(i, 0))), 1)}
    norm = (lambda i: bm25.get(i, 0.0) / best_bm25) if best_bm25 > 0 else (lambda i: 0.0)
    at = {(it.meta.get("session_id"), it.meta.get("position")): it.id for it in items}
    session_cos: dict = {}
    for i, it in enumerate(items):
        s = it.meta.get("session_id")
        session_cos[s] = max(session_cos.get(s, -1.0), float(cos[i]))
    onehot = question_onehot(question)
    scalars, rows = [], []
    for r, h in enumerate(hits, 1):
        it = h.item
        i = row[it.id]
        s, pos = it.meta.get("session_id"), it.meta.get("position")
        near = [at.get((s, pos + d)) for d in (-1, 1)] if isinstance(pos, int) else []
        near = [n for n in near if n is not None]
        text = it.render()
        c = float(cos[i])
        scalars.append(
            [
                1.0 / (5 + r),
                math.log(r),
                c,
                math.log(int(dense_rank[i])),
                norm(it.id),
                math.log(bm25_rank.get(it.id, ABSENT_RANK)),
                math.log(h.ranks.get("chunk", ABSENT_RANK)),
                max((float(cos[row[n]]) for n in near), default=0.0),
                max((norm(n) for n in near), default=0.0),
                session_cos[s],
                c - session_cos[s],
                math.log(max(1, count_tokens(text))),
                float("[shared image:" in text),
                float(it.id in bm25),
                *onehot,
            ]
        )
        rows.append(i)
    return np.asarray(scalars, dtype=np.float32), matrix[rows] * q[None, :]


def hit_features(
    bank: MemoryBank, scope: Scope, kind: str, question: str, hits: list[BankHit], count_tokens
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`turn_features` of ``hits`` with the query's embedding and its BM25 scores over every
    item of ``kind`` in ``scope`` read from ``bank`` (what the reranker and its trainer score)."""
    qv = bank.encode_query(question)
    bm25 = {it.id: s for it, s in bank.search_bm25(question, scope, None, kind=kind)}
    return turn_features(bank, scope, kind, question, hits, qv, bm25, count_tokens)


def question_onehot(question: str) -> list[float]:
    """The question's first word (lower case, letters only) one-hot over :data:`QUESTION_WORDS`."""
    words = question.strip().split()
    first = "".join(ch for ch in words[0].lower() if ch.isalpha()) if words else ""
    return [float(first == w) for w in QUESTION_WORDS]


class TurnReranker:
    """A loaded reranker file (:class:`RerankerFile`): scores and re-orders turn hits.

    ``sha256``: the file's digest (provenance)."""

    def __init__(self, file: RerankerFile, sha256: str | None = None):
        self.file = file
        self.sha256 = sha256
        self._mean = np.asarray(file.mean, dtype=np.float32)
        self._std = np.asarray(file.std, dtype=np.float32)
        self._w_v = np.asarray(file.w_v, dtype=np.float32)
        self._w_s = np.asarray(file.w_s, dtype=np.float32)
        self._b_h = np.asarray(file.b_h, dtype=np.float32)
        self._w_o = np.asarray(file.w_o, dtype=np.float32)
        self._w_l = np.asarray(file.w_l, dtype=np.float32)
        # float32 features compared with ranges rounded to 6 digits: a hair of slack either side
        low, high = np.asarray(file.low, np.float64), np.asarray(file.high, np.float64)
        slack = 1e-5 * np.maximum(np.abs(low), np.abs(high)) + 1e-6
        self._low, self._high = low - slack, high + slack

    @classmethod
    def load(cls, path: str | Path = DEFAULT_RERANKER) -> "TurnReranker":
        """Read ``path`` (default: the shipped reranker). Raises :class:`RerankerFileError`."""
        rf = read_reranker_file(path)
        return cls(rf, hashlib.sha256(Path(path).read_bytes()).hexdigest())

    def score(self, scalars: np.ndarray, products: np.ndarray) -> np.ndarray:
        """Scores ``(n,)`` (higher first) of ``n`` candidates' features (:func:`turn_features`).
        Raises ValueError when the shapes are not the file's."""
        if scalars.shape[1:] != self._mean.shape or products.shape[1:] != self._w_v.shape[1:]:
            raise ValueError(
                f"features of shape {scalars.shape[1:]} / {products.shape[1:]} do not fit the reranker "
                f"({self._mean.shape} / {self._w_v.shape[1:]})"
            )
        z = (scalars - self._mean) / self._std
        h = np.maximum(products @ self._w_v.T + z @ self._w_s.T + self._b_h, 0.0)
        return h @ self._w_o + z @ self._w_l + self.file.b_o

    def outside(self, scalars: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: whether each of ``n`` candidates has a scalar (``(n, n_scalars)``) outside
        the range the reranker saw in training (``low``/``high``)."""
        x = np.asarray(scalars, np.float64)
        return ((x < self._low) | (x > self._high)).any(axis=1)

    def declines(self, scalars: np.ndarray) -> bool:
        """Whether to keep the fused order for candidates with these scalars: more than
        :data:`DECLINE_SHARE` of them are :meth:`outside` the training range."""
        return len(scalars) > 0 and float(self.outside(scalars).mean()) > DECLINE_SHARE

    def rerank(
        self, bank: MemoryBank, scope: Scope, kind: str, question: str, hits: list[BankHit], count_tokens
    ) -> list[BankHit]:
        """``hits`` re-ordered by score, best first (ties: the fused order); each hit's ``score``
        becomes the reranker's. When it :meth:`declines` the candidates, ``hits`` as they are
        (counted, event ``rerank.declined``). Raises :class:`RerankerFileError` when the bank's
        embedding model is not the one the reranker was trained on."""
        if not hits:
            return []
        if bank.embedder.model_id != self.file.embedding_model:
            raise RerankerFileError(
                f"the reranker was trained on {self.file.embedding_model} embeddings, the bank holds {bank.embedder.model_id}"
            )
        scalars, products = hit_features(bank, scope, kind, question, hits, count_tokens)
        if self.declines(scalars):
            count_event("rerank.declined")
            return list(hits)
        scores = self.score(scalars, products)
        order = sorted(range(len(hits)), key=lambda i: (-float(scores[i]), i))
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


@functools.lru_cache(maxsize=1)
def load_reranker() -> TurnReranker:
    """The shipped reranker (:data:`DEFAULT_RERANKER`), loaded once per process. Raises
    RerankerFileError when the file is missing or does not match this version's features."""
    return TurnReranker.load(DEFAULT_RERANKER)


__all__ = [
    "DECLINE_SHARE",
    "DEFAULT_RERANKER",
    "QUESTION_WORDS",
    "SCALAR_FEATURES",
    "RerankerFile",
    "RerankerFileError",
    "TurnReranker",
    "hit_features",
    "load_reranker",
    "question_onehot",
    "read_reranker_file",
    "turn_features",
    "write_reranker_file",
]

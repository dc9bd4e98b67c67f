"""BM25 for the stores and the memory banks: the tokenizer and a ``bm25s`` index over one partition.

Scoring: ``bm25s`` Okapi BM25 with k1=1.5, b=0.75 and Lucene's non-negative IDF
(``method="lucene"``: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), Robertson's tf saturation
tf / (tf + k1 (1 - b + b dl / avgdl))), so terms in more than half the documents of a small
partition still score >= 0. N, df and avgdl are those of the documents the index was built over:
the stores build one index per scope (see :mod:`memfrontier.store.sqlite`), so one tenant's text
never changes another tenant's statistics.

Terms (:func:`bm25_terms`): lower-case, :func:`bm25_split`, English stopwords (bm25s' list,
dropped before stemming), Porter stems (nltk) for ASCII alphabetic words. Terms are computed once
per document and kept by the caller (:class:`TermCache`), so rebuilding an index after a write
does not re-tokenise unchanged documents.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np

BM25_K1 = 1.5
BM25_B = 0.75
BM25_METHOD = "lucene"

# Han (incl. extensions and compatibility), kana, bopomofo, CJK radicals, iteration marks.
_CJK = (
    "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3040-\u30ff\u3100-\u312f\u31a0-\u31bf\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
)
# Pictographs, dingbats, misc symbols, arrows-ish blocks used as emoji.
_EMOJI = "\U0001f000-\U0001faff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\u3030\u303d\u3297\u3299"
_EMOJI_MODIFIERS = frozenset(chr(c) for c in range(0x1F3FB, 0x1F400))  # skin tones
_SPLIT_RE = re.compile(f"([{_CJK}]+)|([{_EMOJI}])|([^\\W{_CJK}]+)")


@lru_cache(maxsize=200_000)
def _fold(word: str) -> str:
    """Strip accents when the result is plain ASCII (café -> cafe, việt -> viet); else keep."""
    if word.isascii():
        return word
    stripped = "".join(ch for ch in unicodedata.normalize("NFKD", word) if not unicodedata.combining(ch))
    stripped = unicodedata.normalize("NFC", stripped)
    return stripped if stripped.isascii() else word


def bm25_split(text: str) -> list[str]:
    """Split text into BM25 words (before stopwords and stemming).

    - NFKC normalisation and ``casefold`` (full-width forms, ligatures, ß -> ss);
    - words (letters/digits, any script but CJK) of >= 2 characters, or all-digit words of any
      length; accents folded when the folded word is ASCII;
    - CJK runs (no spaces between words) -> every character and every adjacent pair;
    - each emoji code point (skin-tone modifiers dropped) -> its own term.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[str] = []
    for cjk, emoji, word in _SPLIT_RE.findall(text):
        if word:
            if len(word) >= 2 or word.isdigit():
                out.append(_fold(word))
        elif cjk:
            out.extend(cjk)
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        elif emoji and emoji not in _EMOJI_MODIFIERS:
            out.append(emoji)
    return out


_PORTER = None


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    """Porter stem (nltk) for ASCII alphabetic words; other terms unchanged."""
    global _PORTER
    if not (word.isascii() and word.isalpha()):
        return word
    if _PORTER is None:
        from nltk.stem.porter import PorterStemmer

        _PORTER = PorterStemmer()
    return _PORTER.stem(word)


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def bm25_terms(text: str) -> list[str]:
    """The BM25 terms of ``text`` in order (repeats kept): split, stopwords dropped, stemmed."""
    stop = _stopwords()
    return [_stem(w) for w in bm25_split(text.lower()) if w not in stop]


class TermCache:
    """Terms per document id, so an index rebuild tokenises only documents it has not seen (a
    document whose text changed under the same id is tokenised again)."""

    def __init__(self) -> None:
        self._terms: dict[str, tuple[str, list[str]]] = {}

    def get(self, ids: list[str], texts: list[str]) -> list[list[str]]:
        """Term lists aligned with ``ids`` (computed for ids not seen or whose text changed)."""
        out = []
        for i, t in zip(ids, texts):
            hit = self._terms.get(i)
            if hit is None or hit[0] != t:
                hit = self._terms[i] = (t, bm25_terms(t))
            out.append(hit[1])
        return out

    def discard(self, ids) -> None:
        """Forget ``ids`` (documents removed from every index)."""
        for i in ids:
            self._terms.pop(i, None)


class BM25Index:
    """A bm25s index over documents given as term lists, positionally aligned with their order.

    ``scores(query)`` -> float32 array ``(n_docs,)`` of BM25 scores (>= 0), or ``None`` when the
    query has no indexed term (empty, only stopwords, or only unseen words).
    """

    def __init__(self, model, n_docs: int):
        self.model = model
        self.n_docs = n_docs

    @classmethod
    def build(cls, docs: list[list[str]]) -> "BM25Index":
        """Index ``docs`` (term lists, e.g. from :func:`bm25_terms`); an empty list gives an
        index that matches nothing."""
        import bm25s

        if not any(docs):
            return cls(None, len(docs))
        model = bm25s.BM25(k1=BM25_K1, b=BM25_B, method=BM25_METHOD)
        model.index([d if d else [""] for d in docs], show_progress=False)
        return cls(model, len(docs))

    def scores(self, query: str) -> np.ndarray | None:
        if self.model is None or not query.strip():
            return None
        vocab = self.model.vocab_dict
        q_ids = [vocab[t] for t in bm25_terms(query) if t in vocab and t != ""]
        if not q_ids:
            return None
        return np.asarray(self.model.get_scores_from_ids(q_ids), dtype=np.float32)


__all__ = ["BM25Index", "TermCache", "bm25_split", "bm25_terms", "BM25_K1", "BM25_B", "BM25_METHOD"]

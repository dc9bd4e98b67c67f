"""BM25 for the stores and the memory banks: the tokenizer and an index that follows writes.

Scoring is Okapi BM25 as ``bm25s`` computes it with ``method="lucene"`` (k1=1.5, b=0.75):
idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)) (Lucene's non-negative IDF, so terms in more than
half the documents of a small scope still score >= 0) and Robertson's tf saturation
tf / (tf + k1 (1 - b + b dl / avgdl)); an empty document counts as length 1, like bm25s' empty
token. N, df and avgdl are those of the documents in the index *now*: the stores keep one index per
scope (see :mod:`memfrontier.store.sqlite`), so one tenant's text never changes another tenant's
statistics.

Unlike a bm25s index, whose stored scores bake in N, df and avgdl (adding one document means
re-indexing every document), :class:`BM25Index` keeps postings (term -> {document: tf}) and
document lengths, and computes the statistics at query time: adding or removing a document costs
O(its distinct terms), and the scores equal those of bm25s re-indexed over the current documents
(checked against bm25s in the tests). bm25s provides the stopword list.

Terms (:func:`bm25_terms`): lower-case, :func:`bm25_split`, English stopwords (bm25s' list,
dropped before stemming), Porter stems (nltk) for ASCII alphabetic words. Terms are computed once
per document text (:class:`TermCache`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np

BM25_K1 = 1.5
BM25_B = 0.75

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
        from ..core.stemming import porter_stemmer

        _PORTER = porter_stemmer()
    return _PORTER.stem(word)


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    """bm25s' English stopword list. ``bm25s/stopwords.py`` is plain lists; importing it through
    the package would run ``bm25s/__init__`` (scipy.sparse and more: ~0.3 s of a CLI search), so
    the file is loaded on its own when the package is where it should be."""
    import importlib.util

    spec = importlib.util.find_spec("bm25s")  # locates the package without importing it
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / "stopwords.py" if locations else None
    if path is not None and path.is_file():
        file_spec = importlib.util.spec_from_file_location("memfrontier.store._bm25s_stopwords", path)
        module = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
        if isinstance(getattr(module, "STOPWORDS_EN", None), (list, tuple, set, frozenset)):
            return frozenset(module.STOPWORDS_EN)
    from bm25s.stopwords import STOPWORDS_EN  # pragma: no cover - another layout

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
    """Lucene-variant Okapi BM25 over documents (id -> term list) that can be added and removed.

    ``match(query)`` -> ``(ids, scores)``: the documents with a score > 0 (every document holding
    at least one query term) and their float64 scores, in insertion order; ``None`` when the query
    has no indexed term (empty, only stopwords, or only unseen words).
    """

    def __init__(self) -> None:
        self._ids: list[str | None] = []  # slot -> document id (None: removed)
        self._slot: dict[str, int] = {}
        self._len: list[int] = []  # slot -> document length (terms, >= 1)
        self._terms: list[tuple[str, ...]] = []  # slot -> distinct terms (to remove the document)
        self._post: dict[str, dict[int, int]] = {}  # term -> {slot: tf}
        self._total = 0
        self._len_arr: np.ndarray | None = None

    @classmethod
    def build(cls, ids: list[str], docs: list[list[str]]) -> "BM25Index":
        """An index of ``docs`` (term lists, e.g. from :func:`bm25_terms`) under ``ids``."""
        idx = cls()
        for i, d in zip(ids, docs):
            idx.add(i, d)
        return idx

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._slot

    def add(self, doc_id: str, terms: list[str]) -> None:
        """Index a document (a repeated id replaces the earlier document)."""
        if doc_id in self._slot:
            self.remove(doc_id)
        slot = len(self._ids)
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        for t, tf in counts.items():
            self._post.setdefault(t, {})[slot] = tf
        n = max(len(terms), 1)
        self._ids.append(doc_id)
        self._slot[doc_id] = slot
        self._len.append(n)
        self._terms.append(tuple(counts))
        self._total += n
        if self._len_arr is not None:  # grown, not rebuilt: the first search after a write stays O(query)
            self._len_arr = np.append(self._len_arr, float(n))

    def remove(self, doc_id: str) -> None:
        """Forget a document (unknown ids are ignored)."""
        slot = self._slot.pop(doc_id, None)
        if slot is None:
            return
        for t in self._terms[slot]:
            post = self._post[t]
            del post[slot]
            if not post:
                del self._post[t]
        self._total -= self._len[slot]
        self._ids[slot] = None
        self._terms[slot] = ()  # the slot's length stays in _len / _len_arr: it has no postings left
        if len(self._ids) > 64 and len(self._slot) < len(self._ids) // 2:
            self._compact()

    def _compact(self) -> None:
        live = [(i, s) for i, s in enumerate(self._ids) if s is not None]
        remap = {old: new for new, (old, _) in enumerate(live)}
        self._post = {t: {remap[s]: tf for s, tf in post.items()} for t, post in self._post.items()}
        self._ids = [d for _, d in live]
        self._slot = {d: n for n, d in enumerate(self._ids)}
        self._len = [self._len[old] for old, _ in live]
        self._terms = [self._terms[old] for old, _ in live]
        self._len_arr = None

    def match(self, query: str) -> tuple[list[str], np.ndarray] | None:
        if not self._slot or not query.strip():
            return None
        q = [t for t in bm25_terms(query) if t in self._post]
        if not q:
            return None
        if self._len_arr is None:
            self._len_arr = np.asarray(self._len, dtype=np.float64)
        n_docs = len(self._slot)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self._len_arr / (self._total / n_docs))
        scores = np.zeros(len(self._ids), dtype=np.float64)
        for t in q:  # a repeated query term counts again, as in bm25s
            post = self._post[t]
            slots = np.fromiter(post.keys(), dtype=np.int64, count=len(post))
            tf = np.fromiter(post.values(), dtype=np.float64, count=len(post))
            idf = math.log(1 + (n_docs - len(post) + 0.5) / (len(post) + 0.5))
            scores[slots] += idf * tf / (tf + norm[slots])
        hit = np.flatnonzero(scores > 0)
        return [self._ids[i] for i in hit], scores[hit]


__all__ = ["BM25Index", "TermCache", "bm25_split", "bm25_terms", "BM25_K1", "BM25_B"]

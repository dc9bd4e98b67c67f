"""Entity and topic name deduplication for the graph index: normalised exact match first, then
similarity (AutoMEM, arXiv 2606.04315, Sec. 5; the released code leaves the graph builder out, see
``reference/released-code-notes.md`` 4.3).

:func:`normalize_name` folds case, width and accents and drops punctuation ("Évan!" -> "evan").
:func:`dedup_names` then clusters names greedily, most frequent first: a name joins the first
cluster whose key is its normalised form, else the most similar cluster when the similarity
reaches the threshold, else starts a new cluster. Similarity is difflib's ratio of the
normalised strings (2·matches / total length, in [0, 1]), or the cosine of embedding vectors when
an ``embed`` function is given (the larger of the two counts). Each cluster's canonical name is
its most frequent surface form (first seen on ties).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from difflib import SequenceMatcher

import numpy as np

__all__ = ["normalize_name", "name_similarity", "dedup_names"]

_PUNCT = re.compile(r"[^\w\s]+", re.UNICODE)
_SPACE = re.compile(r"\s+")

#: Default thresholds: string ratio (difflib) and embedding cosine.
STRING_THRESHOLD = 0.85
EMBED_THRESHOLD = 0.88


def normalize_name(name: str) -> str:
    """NFKC, casefold, accents stripped, punctuation dropped, whitespace collapsed.

    ``normalize_name("  Évan  O'Neil! ")`` -> ``"evan oneil"``; ``""`` for a name with no letters
    or digits.
    """
    s = unicodedata.normalize("NFKC", name or "").casefold()
    s = "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))
    s = _PUNCT.sub("", s)
    return _SPACE.sub(" ", s).strip()


def name_similarity(a: str, b: str) -> float:
    """difflib ``SequenceMatcher(None, a, b).ratio()`` of the normalised names, in [0, 1]."""
    return SequenceMatcher(None, normalize_name(a), normalize_name(b)).ratio()


def dedup_names(
    names: Iterable[str],
    *,
    threshold: float = STRING_THRESHOLD,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    embed_threshold: float = EMBED_THRESHOLD,
) -> dict[str, str]:
    """Map every surface name in ``names`` (repeats count as frequency) to its canonical name.

    Names that normalise to "" map to themselves stripped and never merge. ``embed`` maps a list
    of strings to an ``(n, d)`` array of L2-normalised vectors (e.g. MiniLM's ``encode``).
    """
    names = [n for n in names if isinstance(n, str)]
    freq = Counter(n.strip() for n in names if n.strip())
    order = {n: i for i, n in reversed(list(enumerate(n.strip() for n in names)))}
    ranked = sorted(freq, key=lambda n: (-freq[n], order[n]))
    keys = {n: normalize_name(n) for n in ranked}
    vecs: dict[str, np.ndarray] = {}
    if embed is not None:
        distinct = sorted({k for k in keys.values() if k})
        if distinct:
            mat = np.asarray(embed(distinct), dtype=np.float32)
            vecs = dict(zip(distinct, mat, strict=True))

    clusters: list[dict] = []  # {"key": normalised key, "members": [surface names]}
    by_key: dict[str, dict] = {}
    for name in ranked:
        key = keys[name]
        if not key:
            clusters.append({"key": key, "members": [name]})
            continue
        hit = by_key.get(key)
        if hit is None:
            best, best_sim = None, 0.0
            for c in clusters:
                if not c["key"]:
                    continue
                ratio = SequenceMatcher(None, key, c["key"]).ratio()
                cos = float(vecs[key] @ vecs[c["key"]]) if key in vecs and c["key"] in vecs else 0.0
                ok = ratio >= threshold or cos >= embed_threshold
                sim = max(ratio, cos)
                if ok and sim > best_sim:
                    best, best_sim = c, sim
            hit = best
        if hit is None:
            hit = {"key": key, "members": []}
            clusters.append(hit)
        hit["members"].append(name)
        by_key.setdefault(key, hit)

    mapping: dict[str, str] = {}
    for c in clusters:
        canonical = c["members"][0]  # ranked order: most frequent, then first seen
        for m in c["members"]:
            mapping[m] = canonical
    for n in names:  # unstripped spellings map too
        if n.strip() in mapping:
            mapping[n] = mapping[n.strip()]
        elif n not in mapping:
            mapping[n] = n.strip()
    return mapping

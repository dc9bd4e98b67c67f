"""Query-agnostic compression for MemPilot's compressed memory bank (MemPilot Sec. 4.2, App. A.4).

The paper compresses every raw chunk with LLMLingua-2
(``microsoft/llmlingua-2-bert-base-multilingual-cased-meetingbank``) at rate 0.4, token-level
only, force-keeping ``\\n``, ``:``, ``?`` and digits; dialogue text and each image caption are
compressed separately and image ids are kept verbatim; an empty result becomes a placeholder.

Two compressors share that contract (:class:`Compressor`):

* :class:`LLMLingua2Compressor` — the paper's, through the ``llmlingua`` package, used only when the
  package *and* the model are available locally (no download is attempted);
* :class:`OfflineCompressor` — the documented offline stand-in used otherwise. It keeps about
  ``rate`` of the words of a text: first every forced word (one containing a digit, ``:`` or
  ``?``; newlines are kept as structure and do not count), then the highest-scoring other words,
  in their original order. A word's score is its inverse document frequency over the batch being
  compressed, ``ln(1 + N / (1 + df))`` with ``N`` texts and ``df`` the texts containing it
  (lower-cased, punctuation stripped), plus 0.5 for a capitalised word (names); stopwords
  (bm25s' English list) and punctuation-only words score 0 and are dropped first. Ties go to
  the longer word, then the earlier one. Deterministic and query-agnostic.

:func:`compressed_view` builds one bank item's text from the records of a raw chunk.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Protocol, runtime_checkable

from ...core.types import Record

DEFAULT_RATE = 0.4
PLACEHOLDER = "[content omitted by compressor]"
LLMLINGUA2_MODEL = "microsoft/llmlingua-2-bert-base-multilingual-cased-meetingbank"
FORCE_TOKENS = ("\n", ":", "?")

_TOKEN_RE = re.compile(r"\n|[^\S\n]*([^\s]+)")
_WORD_KEY_RE = re.compile(r"[^\w]+", re.UNICODE)


@runtime_checkable
class Compressor(Protocol):
    """Compresses texts query-agnostically. ``name`` identifies the method and its settings (it is
    stored with each bank item, so a bank built with another compressor is rebuilt)."""

    name: str

    def compress_many(self, texts: list[str]) -> list[str]:
        """One compressed text per input, never empty (:data:`PLACEHOLDER` instead)."""
        ...


def _tokens(text: str) -> list[str]:
    return [m.group(1) if m.group(1) is not None else "\n" for m in _TOKEN_RE.finditer(text)]


def _key(word: str) -> str:
    return _WORD_KEY_RE.sub("", word.lower())


def _forced(word: str) -> bool:
    return any(ch.isdigit() for ch in word) or ":" in word or "?" in word


def _join(tokens: list[str]) -> str:
    lines, cur = [], []
    for t in tokens:
        if t == "\n":
            lines.append(" ".join(cur))
            cur = []
        else:
            cur.append(t)
    lines.append(" ".join(cur))
    return "\n".join(line for line in lines if line.strip()).strip()


class OfflineCompressor:
    """The offline stand-in for LLMLingua-2 (see the module docstring for the algorithm).

    Args:
        rate: fraction of words kept, in (0, 1]; default 0.4 (MemPilot). Raises ValueError otherwise.
    """

    def __init__(self, rate: float = DEFAULT_RATE):
        if not 0 < rate <= 1:
            raise ValueError(f"rate must be in (0, 1], got {rate}")
        self.rate = float(rate)
        self.name = f"offline-idf-v1@{self.rate:g}"
        from bm25s.stopwords import STOPWORDS_EN_PLUS

        self._stop = frozenset(STOPWORDS_EN_PLUS)

    def compress_many(self, texts: list[str]) -> list[str]:
        docs = [_tokens(t or "") for t in texts]
        df = Counter(k for d in docs for k in {_key(w) for w in d if w != "\n"})
        n = max(len(docs), 1)
        return [self._compress(d, df, n) for d in docs]

    def compress(self, text: str) -> str:
        return self.compress_many([text])[0]

    def _score(self, word: str, df: Counter, n: int) -> float:
        k = _key(word)
        if not k or k in self._stop:
            return 0.0
        return math.log(1 + n / (1 + df[k])) + (0.5 if word[:1].isupper() else 0.0)

    def _compress(self, tokens: list[str], df: Counter, n: int) -> str:
        words = [i for i, t in enumerate(tokens) if t != "\n"]
        if not words:
            return PLACEHOLDER
        budget = max(1, math.ceil(self.rate * len(words)))
        keep = {i for i in words if _forced(tokens[i])}
        rest = [(self._score(tokens[i], df, n), len(tokens[i]), -i, i) for i in words if i not in keep]
        rest = [r for r in rest if r[0] > 0]
        rest.sort(reverse=True)
        keep.update(r[3] for r in rest[: max(budget - len(keep), 0)])
        out = _join([t for i, t in enumerate(tokens) if t == "\n" or i in keep])
        return out or PLACEHOLDER


def llmlingua2_available(model: str = LLMLINGUA2_MODEL) -> bool:
    """True when the ``llmlingua`` package imports and ``model`` is in the local Hugging Face cache."""
    try:
        import llmlingua  # noqa: F401
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    hit = try_to_load_from_cache(model, "config.json")
    return isinstance(hit, str)


class LLMLingua2Compressor:
    """LLMLingua-2 with MemPilot's settings (rate 0.4, token-level filter only, force tokens
    ``\\n : ?``, digits reserved, chunk end tokens ``.`` and ``\\n``). Loads the model from the local
    cache only; raises RuntimeError when it is not there (see :func:`llmlingua2_available`)."""

    def __init__(self, rate: float = DEFAULT_RATE, model: str = LLMLINGUA2_MODEL, device: str = "cpu"):
        if not llmlingua2_available(model):
            raise RuntimeError(f"LLMLingua-2 needs the llmlingua package and {model} in the local Hugging Face cache")
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from llmlingua import PromptCompressor

        self.rate = float(rate)
        self.name = f"llmlingua2@{self.rate:g}"
        self._pc = PromptCompressor(model_name=model, use_llmlingua2=True, device_map=device)

    def compress_many(self, texts: list[str]) -> list[str]:
        out = []
        for t in texts:
            if not (t or "").strip():
                out.append(PLACEHOLDER)
                continue
            res = self._pc.compress_prompt(
                t,
                rate=self.rate,
                force_tokens=list(FORCE_TOKENS),
                force_reserve_digit=True,
                drop_consecutive=True,
                chunk_end_tokens=[".", "\n"],
                use_context_level_filter=False,
            )
            out.append((res.get("compressed_prompt") or "").strip() or PLACEHOLDER)
        return out


def make_compressor(kind: str = "auto", rate: float = DEFAULT_RATE) -> Compressor:
    """``"auto"`` (LLMLingua-2 when available locally, else offline), ``"llmlingua2"`` or ``"offline"``.
    Raises ValueError for an unknown kind, RuntimeError when ``llmlingua2`` is asked for but unavailable."""
    if kind == "offline":
        return OfflineCompressor(rate)
    if kind == "llmlingua2":
        return LLMLingua2Compressor(rate)
    if kind == "auto":
        return LLMLingua2Compressor(rate) if llmlingua2_available() else OfflineCompressor(rate)
    raise ValueError(f"unknown compressor {kind!r}; choose auto, llmlingua2 or offline")


def _dialogue(r: Record) -> str:
    """The record's text without image captions (captions are compressed on their own)."""
    body = r.text.strip()
    if r.kind == "step":
        body = "; ".join(
            p
            for p in (r.action and f"action: {r.action}", r.observation and f"observation: {r.observation}", body)
            if p
        )
    return f"{r.speaker}: {body}" if r.speaker and body else body


def compressed_views(chunks: list[list[Record]], compressor: Compressor) -> list[str]:
    """Bank texts of several raw chunks (each a list of records), compressed in one batch.

    Per chunk: the dialogue text (records' ``speaker: text`` lines) compressed as one text, then
    for each image ``image_id: <id>`` verbatim and ``image_caption: <caption compressed on its
    own>``. Never empty: a chunk whose parts all compress to nothing gives :data:`PLACEHOLDER`.
    """
    dialog = ["\n".join(t for t in (_dialogue(r) for r in recs) if t) for recs in chunks]
    images = [[im for r in recs for im in r.images] for recs in chunks]
    captions = [im.caption for ims in images for im in ims if im.caption.strip()]
    comp_dialog = compressor.compress_many(dialog) if dialog else []
    comp_caps = iter(compressor.compress_many(captions) if captions else [])
    out = []
    for text, d, ims in zip(dialog, comp_dialog, images):
        lines = [d] if text.strip() else []
        for im in ims:
            lines.append(f"image_id: {im.id}")
            if im.caption.strip():
                lines.append(f"image_caption: {next(comp_caps)}")
        out.append("\n".join(lines) or PLACEHOLDER)
    return out


__all__ = [
    "DEFAULT_RATE",
    "LLMLINGUA2_MODEL",
    "PLACEHOLDER",
    "Compressor",
    "LLMLingua2Compressor",
    "OfflineCompressor",
    "compressed_views",
    "llmlingua2_available",
    "make_compressor",
]

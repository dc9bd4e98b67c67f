"""MemPilot's dual-view memory at query time (MemPilot Sec. 3.1, App. A.4).

* the compressed bank M (a :class:`~memfrontier.store.bank.MemoryBank`, see
  :mod:`memfrontier.strategies.mempilot.compressed_bank`; its own dense index): RETRIEVE returns its texts only;
* the raw history H: the store's turn-atomic ~256-token chunks, searched by the store's dense
  index; CURATE renders their records with ids, speaker, time, image ids and captions, and can
  attach the image files that exist.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...core.render import human_date
from ...core.types import ImageRef, Record, Scope
from ...retrieve.hybrid import hybrid_search
from ...store.bank import BankItem, MemoryBank
from .compressed_bank import KINDS
from .recipes import MEMPILOT_BANK, MEMPILOT_RAW

MAX_IMAGE_BYTES = 4 * 1024 * 1024  # released tool: images <= 4 MB
_QUESTION_IMAGE_RE = re.compile(r"\(Question image: (.*)\)\s*$", re.DOTALL)


@dataclass
class RawEvidence:
    """Raw items for one CURATE call: rendered text, the record ids and images they carry."""

    text: str
    record_ids: list[str] = field(default_factory=list)
    images: list[ImageRef] = field(default_factory=list)


def question_image_caption(question: str) -> str | None:
    """The caption a loader appended as ``(Question image: ...)`` (Mem-Gallery), or None."""
    m = _QUESTION_IMAGE_RE.search(question or "")
    return m.group(1).strip() if m else None


def render_record(r: Record) -> str:
    """``- id=<id> speaker=<s> time=<date>: <text>`` plus an ``image_id`` / ``image_caption`` line per image."""
    head = f"- id={r.id} speaker={r.speaker or '-'} time={human_date(r.timestamp) or '-'}: {r.text.strip()}"
    lines = [head]
    for im in r.images:
        lines.append(f"  image_id: {im.id}; image_caption: {im.caption.strip() or '-'}")
    return "\n".join(lines)


class DualView:
    """Both views of one store. ``bank_kind`` selects the bank's compressed or imported items.
    Raises ValueError for another ``bank_kind``."""

    def __init__(self, store, bank: MemoryBank, bank_kind: str = "compressed"):
        if bank_kind not in KINDS:
            raise ValueError(f"unknown bank kind {bank_kind!r}; choose {' or '.join(KINDS)}")
        self.store = store
        self.bank = bank
        self.bank_kind = bank_kind
        self.bank_recipe = MEMPILOT_BANK.model_copy(update={"kind": bank_kind})

    def retrieve(self, query: str, scope: Scope, k: int) -> list[BankItem]:
        """RETRIEVE: the top-``k`` bank items (dense cosine over the bank's own index; ties: earlier
        item first). An empty query or ``k <= 0`` gives []."""
        return [h.item for h in hybrid_search(self.bank, query, scope, self.bank_recipe, k)]

    def raw(self, query: str, scope: Scope, k: int) -> RawEvidence:
        """CURATE's evidence: the top-``k`` raw chunks (the store's dense index), their records rendered
        in chunk order. ``k == 0`` gives no items (the question image alone)."""
        if k <= 0:
            return RawEvidence("")
        hits = hybrid_search(self.store, query, scope, MEMPILOT_RAW, k)
        by_key = {
            (r.scope, r.id): r for h in hits for r in self.store.get(h.chunk.record_ids, h.chunk.scope)
        }  # ids are unique per scope
        keys = dict.fromkeys((h.chunk.scope, rid) for h in hits for rid in h.chunk.record_ids)
        recs = [by_key[k] for k in keys if k in by_key]
        return RawEvidence(
            "\n".join(render_record(r) for r in recs), [r.id for r in recs], [im for r in recs for im in r.images]
        )


def image_part(im: ImageRef) -> tuple[dict | None, str | None]:
    """An OpenAI ``image_url`` content part (base64 data URL) for ``im``, or ``(None, reason)`` when the
    file is missing, unreadable or larger than 4 MB."""
    if not im.path:
        return None, "no file"
    p = Path(im.path)
    if not p.is_file():
        return None, "missing file"
    try:
        data = p.read_bytes()
    except OSError as e:
        return None, f"unreadable ({e.strerror})"
    if len(data) > MAX_IMAGE_BYTES:
        return None, "larger than 4 MB"
    mime = mimetypes.guess_type(p.name)[0] or "image/jpeg"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}, None


__all__ = ["DualView", "RawEvidence", "image_part", "question_image_caption", "render_record"]

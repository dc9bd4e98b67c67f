"""``read``: full records by id (AutoMEM, arXiv 2606.04315, Sec. 5; no model inside).

Ids resolve through the scope's corpus (exact, or a unique suffix such as ``D3:7``), so a record
of another scope reads exactly like one that does not exist: "no record with id ... in this
memory". The ledger still tells the two apart (events ``not_found`` / ``out_of_scope``). Each
record is cut to ``read_record_chars``, the whole to ``read_max_chars``.
"""

from __future__ import annotations

from ..corpus import ScopedCorpus
from ..observation import Observation
from .limits import ToolLimits


def read(corpus: ScopedCorpus, ids: list[str], limits: ToolLimits | None = None) -> Observation:
    """Records ``ids`` of ``corpus`` in the order asked (duplicates once)."""
    lim = limits or ToolLimits()
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i.strip() for i in ids):
        return Observation.failure("read", "bad_args", "give one or more record ids")
    if len(ids) > lim.read_max_ids:
        return Observation.failure("read", "bad_args", f"{len(ids)} ids; read at most {lim.read_max_ids} at once")
    found, missing, events = [], [], []
    for rid in dict.fromkeys(i.strip() for i in ids):
        r = corpus.resolve(rid)
        if r is None:
            missing.append(rid)
            events.append("out_of_scope" if corpus.in_other_scope(rid) else "not_found")
        elif r not in found:
            found.append(r)
    miss = f"no record with id {', '.join(repr(m) for m in missing)} in this memory" if missing else ""
    if not found:
        return Observation.failure("read", "not_found", miss, events=events)
    lines, used, shown, truncated = [], 0, [], False
    for r in found:
        line = corpus.line(r, lim.read_record_chars)
        truncated = truncated or line.endswith(" ...")
        if used + len(line) > lim.read_max_chars and shown:
            lines.append(f"... {len(found) - len(shown)} more records cut at {lim.read_max_chars} characters")
            truncated = True
            break
        lines.append(line)
        shown.append(r.id)
        used += len(line) + 1
    if miss:
        lines.append(f"({miss})")
    return Observation(tool="read", text="\n".join(lines), record_ids=shown, events=events, truncated=truncated)

"""The raw records of one scope as the tools see them, and the corpus catalog the planner reads.

Scope isolation lives here: a :class:`ScopedCorpus` holds only ``store.records(scope)``, and
every tool (``rg``, ``read``, ``dump``, the evidence of ``index_query``) resolves ids through it,
so a record outside the scope cannot be shown, whatever id a planner or a client asks for.
"""

from __future__ import annotations

from ...core.render import human_date
from ...core.types import Record, Scope, missing_scope_message
from ...store.base import MemoryStore

#: Sessions listed in the catalog (first and last halves when there are more).
CATALOG_SESSIONS = 40


def _day(ts: str | None) -> str | None:

    return human_date(ts)


class ScopedCorpus:
    """Records of ``scope`` in chronological order, with id lookup and rendering.

    ``records`` is read once at construction (a snapshot for one question). ``scope`` names at
    least one id, unless ``all_scopes=True`` (every tenant's records; ValueError otherwise).
    """

    def __init__(self, store: MemoryStore, scope: Scope, *, all_scopes: bool = False):
        if (scope == Scope()) != all_scopes:
            raise ValueError(
                missing_scope_message("a corpus", "every tenant's records only with all_scopes=True and no id")
            )
        self.store = store
        self.scope = scope
        self.records: list[Record] = store.records(scope)
        self.by_id: dict[str, Record] = {r.id: r for r in self.records}
        self._suffix: dict[str, list[str]] | None = None
        self._tokens: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.records)

    # --- ids -------------------------------------------------------------------------------
    def resolve(self, rid: str) -> Record | None:
        """The record with id ``rid`` in this scope; also accepts a unique id suffix after a
        ``:`` (``D3:7`` for ``conv-49:D3:7``). None when absent or ambiguous."""
        rid = (rid or "").strip()
        if rid in self.by_id:
            return self.by_id[rid]
        if self._suffix is None:  # built whole, then published: tools may run in parallel threads
            suffix: dict[str, list[str]] = {}
            for r in self.records:
                parts = r.id.split(":")
                for i in range(1, len(parts)):
                    suffix.setdefault(":".join(parts[i:]), []).append(r.id)
            self._suffix = suffix
        hits = self._suffix.get(rid, [])
        return self.by_id[hits[0]] if len(hits) == 1 else None

    def in_other_scope(self, rid: str) -> bool:
        """True when ``rid`` exists in the store but not in this scope (for ledger counts only;
        tools never reveal it to the caller)."""
        return rid not in self.by_id and bool(self.store.get([rid], Scope()))

    # --- rendering -------------------------------------------------------------------------
    @staticmethod
    def body(r: Record) -> str:
        """The searchable text of a record: ``(date) render()``."""
        day = _day(r.timestamp)
        return f"({day}) {r.render()}" if day else r.render()

    def line(self, r: Record, max_chars: int | None = None) -> str:
        """``<id> <body>`` cut to ``max_chars`` characters of body."""
        body = self.body(r)
        if max_chars is not None and len(body) > max_chars:
            body = body[:max_chars] + " ..."
        return f"{r.id} {body}"

    def tokens(self, llm) -> int:
        """Tokens of the whole history in ``llm``'s tokenizer (cached per model)."""
        if llm.model_id not in self._tokens:
            self._tokens[llm.model_id] = llm.count_tokens("\n".join(self.line(r) for r in self.records))
        return self._tokens[llm.model_id]

    def catalog(self) -> str:
        """A short, question-independent description of the corpus: size, time span, speakers, id
        format and one line per session (id range, date, records). Stable for a given scope, so
        it belongs to the cached prompt prefix."""
        if not self.records:
            return "Memory catalog: empty (no records in this scope)."
        sessions: dict[str, list[Record]] = {}
        for r in self.records:
            sessions.setdefault(r.session_id, []).append(r)
        speakers = list(dict.fromkeys(r.speaker for r in self.records if r.speaker))
        kinds = sorted({r.kind for r in self.records})
        dated = [r.timestamp for r in self.records if r.timestamp]
        span = f", {_day(min(dated))} to {_day(max(dated))}" if dated else ""
        lines = [
            f"Memory catalog: {len(self.records)} records ({', '.join(kinds)}) in {len(sessions)} sessions{span}.",
            f"Speakers: {', '.join(speakers[:12])}{' ...' if len(speakers) > 12 else ''}.",
            f"Record ids look like {self.records[0].id}.",
        ]
        items = list(sessions.items())
        if len(items) > CATALOG_SESSIONS:
            half = CATALOG_SESSIONS // 2
            items = items[:half] + [("...", [])] + items[-half:]
        for sid, recs in items:
            if not recs:
                lines.append("...")
                continue
            day = _day(recs[0].timestamp)
            steps = [r.step_index for r in recs if r.step_index is not None]
            extra = f", steps {min(steps)}-{max(steps)}" if steps else ""
            lines.append(f"{sid}{f' ({day})' if day else ''}: {len(recs)} records {recs[0].id} .. {recs[-1].id}{extra}")
        return "\n".join(lines)

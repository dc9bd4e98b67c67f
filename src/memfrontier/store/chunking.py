"""Raw chunks: records of one session packed greedily to about ``max_tokens`` retriever tokens.

Rules (DESIGN.md glossary, "chunk"):
- records are grouped by (scope, session_id); groups keep the order in which they first appear
  and records keep their input order inside a group; a chunk never holds dated records of two
  calendar days (a session written over several days is cut where the day changes);
- each record is rendered with :meth:`Record.render` and never split; consecutive records are
  packed while the chunk's token count stays <= ``max_tokens``; a record that alone exceeds
  ``max_tokens`` becomes its own chunk (the embedder will truncate it; BM25 sees all of it);
- chunk text = the rendered records joined by ``"\\n"``;
- chunk timestamp = the day's time (:func:`memfrontier.core.timeutil.day_times`): the earliest
  record timestamp of the session on its records' day, by instant; for a chunk of undated records,
  the session's earliest (so a one-day session's chunks all carry the session's time);
- chunk id = ``"c-"`` + the first 24 hex digits of sha256(scope key, session id, record ids,
  text): rebuilding the same session from the same records yields the same ids, so a store can
  reuse vectors of unchanged chunks;
- ``n_tokens`` = sum of the records' token counts (``count_tokens(render())``). For WordPiece
  (MiniLM) tokenizers, which split on whitespace first, this equals ``count_tokens(chunk.text)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from ..core.timeutil import day_times, instant_key
from ..core.types import Chunk, Record, Scope


def chunk_id(scope: Scope, session_id: str, record_ids: list[str], text: str) -> str:
    """Deterministic chunk id from (scope key, session id, record ids, text)."""
    h = hashlib.sha256()
    for part in (scope.key(), session_id, *record_ids):
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    h.update(b"\x1e")
    h.update(text.encode("utf-8"))
    return "c-" + h.hexdigest()[:24]


def chunk_records(
    records: list[Record],
    count_tokens: Callable[[str], int],
    max_tokens: int = 256,
) -> list[Chunk]:
    """Pack ``records`` into turn-atomic chunks of at most ``max_tokens`` tokens.

    Args:
        records: records in the order they should appear (chronological within a session).
        count_tokens: the retriever's token counter (e.g. ``MiniLMEmbedder.count_tokens``).
        max_tokens: token budget per chunk (retriever tokens, special tokens excluded).

    Returns:
        chunks, session by session (sessions in order of first appearance), each with
        ``n_tokens <= max_tokens`` unless it holds a single oversized record.

    Raises:
        ValueError: ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r.scope.key(), r.session_id), []).append(r)

    out: list[Chunk] = []
    for recs in groups.values():
        scope, session_id = recs[0].scope, recs[0].session_id
        days = day_times([r.timestamp for r in recs])
        rendered = [r.render() for r in recs]
        counts = [int(count_tokens(t)) for t in rendered]

        cur_ids: list[str] = []
        cur_texts: list[str] = []
        cur_tokens = 0
        cur_day: str | None = None  # the day time of the chunk's dated records
        session_ts = min((r.timestamp for r in recs if r.timestamp is not None), key=instant_key, default=None)

        def flush() -> None:
            if not cur_ids:
                return
            text = "\n".join(cur_texts)
            out.append(
                Chunk(
                    id=chunk_id(scope, session_id, cur_ids, text),
                    scope=scope,
                    session_id=session_id,
                    timestamp=cur_day or session_ts,
                    text=text,
                    record_ids=list(cur_ids),
                    n_tokens=cur_tokens,
                )
            )

        for r, text, n, day in zip(recs, rendered, counts, days):
            day = day if r.timestamp is not None else None
            if cur_ids and (cur_tokens + n > max_tokens or (day and cur_day and day != cur_day)):
                flush()
                cur_ids, cur_texts, cur_tokens, cur_day = [], [], 0, None
            cur_ids.append(r.id)
            cur_texts.append(text)
            cur_tokens += n
            cur_day = cur_day or day
            if cur_tokens > max_tokens:  # oversized single record: its own chunk
                flush()
                cur_ids, cur_texts, cur_tokens, cur_day = [], [], 0, None
        flush()
    return out

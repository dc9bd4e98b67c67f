"""``index_query``: one read-only Cypher query against the scope's graph index (AutoMEM, arXiv
2606.04315, Sec. 5; no model inside).

The guard (:func:`memfrontier.strategies.automem.graph.guard.check_read_only`) rejects writes before the database
sees them (``rejected``); the backend caps rows (``index_max_rows``) and time
(``index_timeout_s``; ``timeout``); a query the database cannot run is an ``error`` observation
with the database's message; a scope without a graph is ``no_index``. Rows render as
``col1 | col2`` lines (nodes as ``Label{prop: value}`` without ``ns``), the first
``index_render_rows`` rows, cut to ``index_max_chars``. Record ids found in the cells of the
rendered rows (e.g. a note's ``record_ids``) that belong to the scope become the observation's
evidence.
"""

from __future__ import annotations

import json
from typing import Any

from ..corpus import ScopedCorpus
from ..graph.backend import GraphBackend, GraphQueryError
from ..graph.guard import CypherRejected
from ..observation import Observation
from .limits import ToolLimits

_HIDDEN = ("ns", "record_ids", "_LABEL", "_NODES", "_RELS")


def _cell(v: Any, max_chars: int) -> str:
    if isinstance(v, dict):
        label = v.get("_LABEL", "")
        if "_NODES" in v:
            s = " -> ".join(_cell(n, max_chars) for n in v["_NODES"])
        else:
            props = ", ".join(
                f"{k}: {json.dumps(x, ensure_ascii=False, default=str)}"
                for k, x in v.items()
                if k not in _HIDDEN and x not in (None, "", [])
            )
            s = f"{label}{{{props}}}"
    elif isinstance(v, str):
        s = v
    else:
        s = json.dumps(v, ensure_ascii=False, default=str)
    return s if len(s) <= max_chars else s[:max_chars] + "..."


def _ids_in(v: Any, corpus: ScopedCorpus, out: list[str]) -> None:
    if isinstance(v, str):
        r = corpus.by_id.get(v)
        if r is not None and r.id not in out:
            out.append(r.id)
    elif isinstance(v, list):
        for x in v:
            _ids_in(x, corpus, out)
    elif isinstance(v, dict):
        for x in v.values():
            _ids_in(x, corpus, out)


def index_query(
    graph: GraphBackend | None, cypher: str, corpus: ScopedCorpus, limits: ToolLimits | None = None
) -> Observation:
    """Run ``cypher`` on ``graph``; see the module doc for the output and the errors."""
    lim = limits or ToolLimits()
    if not isinstance(cypher, str) or not cypher.strip():
        return Observation.failure("index_query", "bad_args", "give a Cypher query")
    if graph is None:
        return Observation.failure("index_query", "no_index", "there is no graph index for this memory; use rg or read")
    try:
        res = graph.query(cypher, max_rows=lim.index_max_rows, timeout_s=lim.index_timeout_s)
    except CypherRejected as e:
        return Observation.failure("index_query", "rejected", f"query rejected: {e}")
    except GraphQueryError as e:
        if e.kind == "timeout":
            return Observation.failure(
                "index_query", "timeout", f"query ran past {lim.index_timeout_s:g} s and was stopped"
            )
        return Observation.failure("index_query", "error", f"the graph could not run the query: {str(e)[:300]}")
    ids: list[str] = []
    n = len(res.rows)
    head = f"{n}{'+' if res.truncated else ''} row{'s' if n != 1 else ''}; columns: {' | '.join(res.columns)}"
    lines, used, truncated = [head], len(head), res.truncated
    for i, row in enumerate(res.rows):
        if i >= lim.index_render_rows:
            lines.append(f"... {n - i} more rows")
            truncated = True
            break
        line = " | ".join(_cell(v, lim.index_cell_chars) for v in row)
        if used + len(line) + 1 > lim.index_max_chars:
            lines.append(f"... {n - i} more rows cut at {lim.index_max_chars} characters")
            truncated = True
            break
        lines.append(line)
        used += len(line) + 1
        _ids_in(row, corpus, ids)
    return Observation(tool="index_query", text="\n".join(lines), record_ids=ids, truncated=truncated)

"""The AutoMEM graph index (arXiv 2606.04315, Sec. 5): Memory / Speaker / Topic nodes with SAID_BY,
OF_TOPIC and FOLLOWS edges, built from write-time summary notes and queried with read-only Cypher.

:func:`open_graph` opens one scope's graph on a backend: ``"ladybug"`` (embedded, files in the
store's directory) or ``"neo4j"`` (a server, see :mod:`.neo4j_store`).
"""

from __future__ import annotations

from pathlib import Path

from .backend import GraphBackend, GraphData, GraphError, GraphQueryError, QueryRows
from .guard import CypherRejected, check_read_only
from .schema import SCHEMA_HINT

BACKENDS = ("ladybug", "neo4j")


def state_dir(store_path: str | Path | None, scope_key: str) -> Path | None:
    """The folder of one scope's graph files (notes cache, build meta, Ladybug database) inside
    the store directory, or None for a store without a directory."""
    if store_path is None:
        return None
    from .ladybug_store import scope_dir

    return scope_dir(store_path, scope_key)


def open_graph(kind: str, store_path: str | Path | None, scope_key: str, *, read_only: bool = False) -> GraphBackend:
    """One scope's graph. ``ladybug`` needs a store directory (raises GraphError without one);
    ``neo4j`` reads its server from the environment (see :mod:`.neo4j_store`). Raises ValueError
    for an unknown ``kind``."""
    if kind == "ladybug":
        folder = state_dir(store_path, scope_key)
        if folder is None:
            raise GraphError("the ladybug graph backend needs a store with a directory")
        from .ladybug_store import LadybugGraph

        return LadybugGraph(folder, read_only=read_only)
    if kind == "neo4j":
        from .neo4j_store import Neo4jGraph

        return Neo4jGraph(scope_key)
    raise ValueError(f"unknown graph backend {kind!r}; choose one of {BACKENDS}")


__all__ = [
    "BACKENDS",
    "CypherRejected",
    "GraphBackend",
    "GraphData",
    "GraphError",
    "GraphQueryError",
    "QueryRows",
    "SCHEMA_HINT",
    "check_read_only",
    "open_graph",
    "state_dir",
]

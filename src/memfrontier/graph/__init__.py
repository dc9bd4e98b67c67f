"""The AutoMEM graph index (arXiv 2606.04315, Sec. 5): Memory / Speaker / Topic nodes with SAID_BY,
OF_TOPIC and FOLLOWS edges, built from write-time summary notes and queried with read-only Cypher.

:func:`open_graph` opens one scope's graph on a backend: ``"ladybug"`` (embedded, files in the
store's ``graph`` view folder, one per scope) or ``"neo4j"`` (a server, see :mod:`.neo4j_store`).
"""

from __future__ import annotations

from pathlib import Path

from ..core.types import Scope
from .backend import GraphBackend, GraphData, GraphError, GraphQueryError, QueryRows
from .guard import CypherRejected, check_read_only
from .schema import SCHEMA_HINT

BACKENDS = ("ladybug", "neo4j")
GRAPH_VIEW = "graph"  # the store view folder of the embedded backend


def state_dir(root: str | Path | None, scope: Scope) -> Path | None:
    """The folder of one scope's graph files (notes cache, build meta, Ladybug database):
    ``root / scope.slug()``, where ``root`` is the store's graph view folder
    (``store.view_dir(GRAPH_VIEW)``); None for ``root=None`` (no local files)."""
    if root is None:
        return None
    return Path(root) / scope.slug()


def open_graph(kind: str, root: str | Path | None, scope: Scope, *, read_only: bool = False) -> GraphBackend:
    """One scope's graph. ``ladybug`` keeps it in ``state_dir(root, scope)`` (raises GraphError for
    ``root=None``); ``neo4j`` reads its server from the environment (see :mod:`.neo4j_store`) and
    tells scopes apart by ``scope.key()``. Raises ValueError for an unknown ``kind``."""
    if kind == "ladybug":
        folder = state_dir(root, scope)
        if folder is None:
            raise GraphError("the ladybug graph backend needs a store with local view files")
        from .ladybug_store import LadybugGraph

        return LadybugGraph(folder, read_only=read_only)
    if kind == "neo4j":
        from .neo4j_store import Neo4jGraph

        return Neo4jGraph(scope.key())
    raise ValueError(f"unknown graph backend {kind!r}; choose one of {BACKENDS}")


def graph_exists(kind: str, root: str | Path | None, scope: Scope) -> bool:
    """Whether ``scope`` has a built graph on backend ``kind`` (nothing is created)."""
    if kind == "ladybug" and root is None:
        return False
    g = open_graph(kind, root, scope, read_only=True)
    try:
        return g.exists()
    finally:
        g.close()


__all__ = [
    "BACKENDS",
    "GRAPH_VIEW",
    "CypherRejected",
    "GraphBackend",
    "GraphData",
    "GraphError",
    "GraphQueryError",
    "QueryRows",
    "SCHEMA_HINT",
    "check_read_only",
    "graph_exists",
    "open_graph",
    "state_dir",
]

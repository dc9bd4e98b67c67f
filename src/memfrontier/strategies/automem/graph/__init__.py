"""The AutoMEM graph index (arXiv 2606.04315, Sec. 5): Memory / Speaker / Topic nodes with SAID_BY,
OF_TOPIC and FOLLOWS edges, built from write-time summary notes and queried with read-only Cypher.

:func:`open_graph` opens one scope's graph on a backend: ``"ladybug"`` (embedded, files in the
store's ``graph`` view folder, one per scope) or ``"neo4j"`` (a server, see :mod:`.neo4j_store`).

Deletes: importing the package registers :func:`purge_graph_view` as the ``graph`` view purger
(:mod:`memfrontier.core.purgers`). A scope's local folder (``state_dir``) is named
:meth:`Scope.slug`, so the store removes it in any process; a view folder through which a Neo4j
graph was opened requires this purger, so a delete made by a process that never imported the
package is finished, on the server too, by the next process that reaches the graph's views.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ....core.purgers import Purge, register_view_purger, require_view_purger
from ....core.types import Scope
from .backend import GraphBackend, GraphData, GraphError, GraphQueryError, QueryRows
from .guard import CypherRejected, check_read_only
from .schema import SCHEMA_HINT

BACKENDS = ("ladybug", "neo4j")
GRAPH_VIEW = "graph"  # the store view folder of the embedded backend
#: The file in the graph view folder saying a Neo4j graph was opened through it.
NEO4J_MARK = ".neo4j"


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

        g = Neo4jGraph(scope.key())
        if root is not None:  # deletes through this view folder must reach the server
            require_view_purger(root, GRAPH_VIEW)
            (Path(root) / NEO4J_MARK).touch()
        return g
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


def purge_graph_view(folder: Path, purge: Purge) -> int:
    """The graph index's view purger: remove the local folder (database, notes cache, build meta)
    of every scope in ``purge.covering`` from the graph view folder ``folder``, and, when a Neo4j
    graph was opened through ``folder`` (:data:`NEO4J_MARK`), those scopes' nodes on the server.
    Returns the graphs removed. Raises GraphError when the Neo4j server cannot be reached."""
    removed = 0
    for scope in purge.covering.values():
        local = state_dir(folder, scope)
        if local is not None and local.exists():
            shutil.rmtree(local)
            removed += 1
    if (Path(folder) / NEO4J_MARK).exists():
        from .neo4j_store import Neo4jGraph

        for key in purge.covering:
            g = Neo4jGraph(key)
            try:
                g.replace(GraphData())
            finally:
                g.close()
            removed += 1
    return removed


register_view_purger(GRAPH_VIEW, purge_graph_view)


__all__ = [
    "BACKENDS",
    "GRAPH_VIEW",
    "CypherRejected",
    "GraphBackend",
    "GraphData",
    "GraphError",
    "GraphQueryError",
    "NEO4J_MARK",
    "QueryRows",
    "SCHEMA_HINT",
    "check_read_only",
    "graph_exists",
    "open_graph",
    "purge_graph_view",
    "state_dir",
]

"""The graph-index backend interface, the data written to it and the errors it raises.

Two backends implement :class:`GraphBackend` with the same Cypher (AutoMEM, arXiv 2606.04315,
Sec. 5): :class:`~memfrontier.strategies.automem.graph.ladybug_store.LadybugGraph` (embedded, the default; one
database file per scope inside the store's directory, so a query can only ever see its own
scope) and :class:`~memfrontier.strategies.automem.graph.neo4j_store.Neo4jGraph` (a Neo4j server through the
``neo4j`` driver; scopes share a database and are told apart by the ``ns`` property).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ....core.errors import StoreError


class GraphError(StoreError):
    """The graph database cannot be opened or written (a :class:`StoreError`: the graph index
    lives in the store's directory, and callers report it the same way)."""


class GraphQueryError(RuntimeError):
    """A read query failed in the database. ``kind``: ``"error"`` (does not parse, unknown
    label/property...) or ``"timeout"`` (ran past its time limit and was interrupted)."""

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind


@dataclass
class GraphData:
    """Everything one scope's graph holds. Node dicts carry the properties of
    :data:`~memfrontier.strategies.automem.graph.schema.NODE_PROPERTIES`; edges are ``(source id, target id)``."""

    memories: list[dict] = field(default_factory=list)
    speakers: list[dict] = field(default_factory=list)
    topics: list[dict] = field(default_factory=list)
    said_by: list[tuple[str, str]] = field(default_factory=list)
    of_topic: list[tuple[str, str]] = field(default_factory=list)
    follows: list[tuple[str, str]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "Memory": len(self.memories),
            "Speaker": len(self.speakers),
            "Topic": len(self.topics),
            "SAID_BY": len(self.said_by),
            "OF_TOPIC": len(self.of_topic),
            "FOLLOWS": len(self.follows),
        }


@dataclass
class QueryRows:
    """A read query's result: column names, at most ``max_rows`` rows, and whether more existed."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False


@runtime_checkable
class GraphBackend(Protocol):
    """One scope's graph index."""

    #: ``"ladybug"`` or ``"neo4j"``.
    kind: str

    def replace(self, data: GraphData) -> None:
        """Replace the scope's whole graph with ``data`` (idempotent). Raises GraphError."""
        ...

    def query(
        self, cypher: str, params: dict | None = None, *, max_rows: int = 50, timeout_s: float = 2.0
    ) -> QueryRows:
        """Run one read-only query (checked by :func:`~memfrontier.strategies.automem.graph.guard.check_read_only`
        first: raises :class:`~memfrontier.strategies.automem.graph.guard.CypherRejected` for writes). Raises
        :class:`GraphQueryError` when the database reports an error or the time limit passes."""
        ...

    def exists(self) -> bool:
        """Whether the scope's graph was built (without creating it)."""
        ...

    def counts(self) -> dict[str, int]:
        """Number of nodes per label and edges per type in the scope's graph."""
        ...

    def close(self) -> None: ...

"""The scale-out graph backend: a Neo4j server through the official ``neo4j`` driver.

The same schema and Cypher as the embedded backend. Scopes share one Neo4j database and are told
apart by the ``ns`` property (the scope key) on every node; node ids are prefixed with ``ns`` so
scopes never collide. Reads run in a read transaction (``execute_read``; the server refuses
writes) after the guard, with a server-side timeout. Isolation on a shared database is by ``ns``:
rows that carry a node or relationship of another namespace are dropped, but an aggregate over an
unlabelled, unfiltered pattern can still count other scopes' nodes; for hard multi-tenant
isolation give each tenant its own Neo4j database (``database=``).

Configured by :data:`URL_ENV` (e.g. ``bolt://127.0.0.1:7687``), :data:`USER_ENV` and
:data:`PASSWORD_ENV`. Tests of this backend run only when :data:`URL_ENV` is set.
"""

from __future__ import annotations

import os
from typing import Any

from .backend import GraphData, GraphError, GraphQueryError, QueryRows
from .guard import check_read_only
from .schema import EDGES, NODE_PROPERTIES

URL_ENV = "MEMFRONTIER_NEO4J_URL"
USER_ENV = "MEMFRONTIER_NEO4J_USER"
PASSWORD_ENV = "MEMFRONTIER_NEO4J_PASSWORD"


def _plain(value: Any, ns: str) -> tuple[Any, bool]:
    """(JSON-friendly value, belongs to ``ns``): nodes/relationships become property dicts."""
    try:
        from neo4j.graph import Node, Path, Relationship
    except ImportError:  # pragma: no cover - only reached with the driver present
        return value, True
    if isinstance(value, Node):
        props = dict(value)
        return {"_LABEL": next(iter(value.labels), ""), **props}, props.get("ns", ns) == ns
    if isinstance(value, Relationship):
        return {"_LABEL": value.type, **dict(value)}, all(n is None or dict(n).get("ns", ns) == ns for n in value.nodes)
    if isinstance(value, Path):
        parts = [_plain(n, ns) for n in value.nodes]
        return {"_NODES": [p for p, _ in parts]}, all(ok for _, ok in parts)
    if isinstance(value, list):
        parts = [_plain(v, ns) for v in value]
        return [p for p, _ in parts], all(ok for _, ok in parts)
    if isinstance(value, dict):
        parts = {k: _plain(v, ns) for k, v in value.items()}
        return {k: p for k, (p, _) in parts.items()}, all(ok for _, ok in parts.values())
    return value, True


class Neo4jGraph:
    """One scope (``ns``) of the graph in a Neo4j database.

    Args:
        ns: the scope key.
        url / user / password: the server (default from the environment variables above).
        database: the Neo4j database name (default: the server's default).
    Raises GraphError when the driver is not installed or no URL is configured.
    """

    kind = "neo4j"

    def __init__(
        self,
        ns: str,
        *,
        url: str | None = None,
        user: str | None = None,
        password: str | None = None,
        database: str | None = None,
    ):
        try:
            import neo4j
        except ImportError as e:
            raise GraphError("the neo4j backend needs the 'neo4j' extra: pip install 'memfrontier[neo4j]'") from e
        url = url or os.environ.get(URL_ENV)
        if not url:
            raise GraphError(f"no Neo4j server configured: set {URL_ENV} (e.g. bolt://127.0.0.1:7687)")
        user = user or os.environ.get(USER_ENV) or "neo4j"
        password = password or os.environ.get(PASSWORD_ENV) or ""
        self.ns = ns
        self.database = database
        self._driver = neo4j.GraphDatabase.driver(url, auth=(user, password) if password else None)

    def _session(self, read: bool):
        import neo4j

        return self._driver.session(
            database=self.database, default_access_mode=neo4j.READ_ACCESS if read else neo4j.WRITE_ACCESS
        )

    def replace(self, data: GraphData) -> None:
        """Delete the scope's nodes (``ns``) and write ``data``; ids get the ``ns|`` prefix."""
        ns = self.ns

        def pref(i: str) -> str:
            return f"{ns}|{i}"

        def write(tx):
            tx.run("MATCH (n {ns: $ns}) DETACH DELETE n", ns=ns)
            for label, rows in (("Memory", data.memories), ("Speaker", data.speakers), ("Topic", data.topics)):
                if rows:
                    props = ", ".join(f"{p}: r.{p}" for p in NODE_PROPERTIES[label])
                    tx.run(
                        f"UNWIND $rows AS r CREATE (n:{label} {{{props}}})",
                        rows=[
                            {**{p: row[p] for p in NODE_PROPERTIES[label]}, "id": pref(row["id"]), "ns": ns}
                            for row in rows
                        ],
                    )
            for rel, pairs in (("SAID_BY", data.said_by), ("OF_TOPIC", data.of_topic), ("FOLLOWS", data.follows)):
                if pairs:
                    src, dst = EDGES[rel]
                    tx.run(
                        f"UNWIND $rows AS r MATCH (a:{src} {{id: r.a}}), (b:{dst} {{id: r.b}}) "
                        f"CREATE (a)-[:{rel}]->(b)",
                        rows=[{"a": pref(a), "b": pref(b)} for a, b in pairs],
                    )

        try:
            with self._session(read=False) as s:
                s.execute_write(write)
        except Exception as e:  # the driver's errors have no common base we can rely on across versions
            raise GraphError(f"writing the Neo4j graph for {ns!r} failed: {e}") from e

    def query(
        self, cypher: str, params: dict | None = None, *, max_rows: int = 50, timeout_s: float = 2.0
    ) -> QueryRows:
        import neo4j

        q = check_read_only(cypher)
        ns = self.ns

        def read(tx):
            res = tx.run(neo4j.Query(q, timeout=timeout_s), {**(params or {}), "ns": ns})
            columns = list(res.keys())
            rows, truncated = [], False
            for rec in res:
                values = [_plain(v, ns) for v in rec.values()]
                if not all(ok for _, ok in values):
                    continue  # another scope's node: not this caller's to see
                if len(rows) >= max_rows:
                    truncated = True
                    break
                rows.append([v for v, _ in values])
            return QueryRows(columns=columns, rows=rows, truncated=truncated)

        try:
            with self._session(read=True) as s:
                return s.execute_read(read)
        except neo4j.exceptions.ClientError as e:
            kind = "timeout" if "Timeout" in (e.code or "") or "terminated" in str(e).lower() else "error"
            raise GraphQueryError(e.message or str(e), kind) from e
        except neo4j.exceptions.Neo4jError as e:
            raise GraphQueryError(str(e)) from e

    def exists(self) -> bool:
        """Whether the scope has a graph (any node with its ``ns``)."""
        return bool(self.query("MATCH (n {ns: $ns}) RETURN count(n) > 0").rows[0][0])

    def counts(self) -> dict[str, int]:
        out = {}
        for label in NODE_PROPERTIES:
            out[label] = self.query(f"MATCH (n:{label} {{ns: $ns}}) RETURN count(n)").rows[0][0]
        for rel, (src, dst) in EDGES.items():
            out[rel] = self.query(f"MATCH (:{src} {{ns: $ns}})-[e:{rel}]->(:{dst}) RETURN count(e)").rows[0][0]
        return out

    def close(self) -> None:
        self._driver.close()

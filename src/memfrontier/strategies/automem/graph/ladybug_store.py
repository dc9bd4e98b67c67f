"""The embedded graph backend: ``ladybug`` (the maintained Kuzu successor; Cypher, on disk).

One database file per scope, ``<store dir>/graph/<Scope.slug()>/graph.lbug``: a query opened for a
scope physically cannot read another scope's notes, whatever Cypher the planner writes. Reads run
inside ``BEGIN TRANSACTION READ ONLY`` after the guard (:mod:`memfrontier.strategies.automem.graph.guard`), with the
connection's query timeout set to the caller's limit (Ladybug interrupts the query: reported as
:class:`GraphQueryError` with ``kind="timeout"``). A ``Connection`` is not shared across threads
concurrently: every call holds the instance lock.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

from ....core.extras import require_extra
from ....core.files import private_dir, private_file
from .backend import GraphData, GraphError, GraphQueryError, QueryRows
from .guard import check_read_only
from .schema import EDGES, NODE_PROPERTIES, ladybug_ddl

#: Buffer pool per open database (bytes). Ladybug's default is ~80% of RAM.
BUFFER_POOL_BYTES = 64 * 1024 * 1024
#: Largest database (bytes): Ladybug reserves this much virtual address space per open database
#: (default 8 TiB, so a process could open only 15 scopes' graphs in the 128 TiB of a 47-bit address
#: space: the 16th failed with "Mmap for size 8796093022208 failed"). A scope's graph is KBs to MBs.
MAX_DB_BYTES = 4 * 1024**3
DB_FILE = "graph.lbug"


def _plain(value: Any) -> Any:
    """Ladybug values -> JSON-friendly Python: nodes/rels lose their internal ``_ID``/``_SRC``/``_DST``."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in ("_ID", "_SRC", "_DST")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class LadybugGraph:
    """One scope's graph in ``directory`` (created on the first write).

    Args:
        directory: the scope's folder (see :func:`memfrontier.strategies.automem.graph.state_dir`).
        read_only: open the database read-only (queries only; ``replace`` raises GraphError).
        threads: Ladybug worker threads per query.
    Raises GraphError when the database cannot be opened (e.g. locked by another writer).
    """

    kind = "ladybug"

    def __init__(self, directory: str | Path, *, read_only: bool = False, threads: int = 1):
        self.directory = Path(directory)
        self.read_only = read_only
        self.threads = threads
        self._lock = threading.RLock()
        self._db = None
        self._conn = None

    @property
    def path(self) -> Path:
        return self.directory / DB_FILE

    def exists(self) -> bool:
        """Whether the scope's database file exists (a graph was built)."""
        return self.path.exists()

    def _open(self):
        if self._conn is not None:
            return self._conn
        require_extra("graph", "ladybug", feature="AutoMEM's graph index")
        import ladybug

        if self.read_only and not self.exists():
            raise GraphError(f"no graph index at {self.path}")
        if not self.read_only:  # 0700 folders, a 0600 database file (its transient .wal stays inside the folder)
            private_file(private_dir(self.directory) / DB_FILE)
        try:
            self._db = ladybug.Database(
                str(self.path),
                buffer_pool_size=BUFFER_POOL_BYTES,
                max_db_size=MAX_DB_BYTES,
                max_num_threads=self.threads,
                read_only=self.read_only,
            )
            self._conn = ladybug.Connection(self._db, num_threads=self.threads)
            if not self.read_only:
                for stmt in ladybug_ddl():
                    self._conn.execute(stmt)
        except RuntimeError as e:
            self._close_handles()
            raise GraphError(f"cannot open graph {self.path}: {e}") from e
        return self._conn

    # --- writing ---------------------------------------------------------------------------
    def replace(self, data: GraphData) -> None:
        """Delete the scope's database file (other files in ``directory`` stay) and write ``data``
        into a fresh one."""
        if self.read_only:
            raise GraphError(f"graph {self.path} is open read-only")
        with self._lock:
            self._close_handles()
            for f in self.directory.glob(DB_FILE + "*"):  # the database file, its WAL and lock
                shutil.rmtree(f) if f.is_dir() else f.unlink()
            conn = self._open()
            try:
                for label, rows in (("Memory", data.memories), ("Speaker", data.speakers), ("Topic", data.topics)):
                    if rows:
                        props = ", ".join(f"{p}: r.{p}" for p in NODE_PROPERTIES[label])
                        conn.execute(
                            f"UNWIND $rows AS r CREATE (n:{label} {{{props}}})",
                            {"rows": [{p: row[p] for p in NODE_PROPERTIES[label]} for row in rows]},
                        )
                for rel, pairs in (("SAID_BY", data.said_by), ("OF_TOPIC", data.of_topic), ("FOLLOWS", data.follows)):
                    if pairs:
                        src, dst = EDGES[rel]
                        conn.execute(
                            f"UNWIND $rows AS r MATCH (a:{src} {{id: r.a}}), (b:{dst} {{id: r.b}}) "
                            f"CREATE (a)-[:{rel}]->(b)",
                            {"rows": [{"a": a, "b": b} for a, b in pairs]},
                        )
            except RuntimeError as e:
                raise GraphError(f"writing graph {self.path} failed: {e}") from e

    # --- reading ---------------------------------------------------------------------------
    def query(
        self, cypher: str, params: dict | None = None, *, max_rows: int = 50, timeout_s: float = 2.0
    ) -> QueryRows:
        q = check_read_only(cypher)
        with self._lock:
            conn = self._open()
            conn.set_query_timeout(max(1, int(timeout_s * 1000)))
            conn.execute("BEGIN TRANSACTION READ ONLY")
            try:
                res = conn.execute(q, params or {})
                columns = list(res.get_column_names())
                rows: list[list[Any]] = []
                truncated = False
                while res.has_next():
                    if len(rows) >= max_rows:
                        truncated = True
                        break
                    rows.append([_plain(v) for v in res.get_next()])
                res.close()
            except RuntimeError as e:
                msg = str(e).strip()
                raise GraphQueryError(msg, "timeout" if msg.startswith("Interrupted") else "error") from e
            finally:
                try:
                    conn.execute("COMMIT")
                except RuntimeError:  # the failed query already ended the transaction
                    pass
        return QueryRows(columns=columns, rows=rows, truncated=truncated)

    def counts(self) -> dict[str, int]:
        out = {}
        for label in NODE_PROPERTIES:
            out[label] = self.query(f"MATCH (n:{label}) RETURN count(n)").rows[0][0]
        for rel, (src, dst) in EDGES.items():
            out[rel] = self.query(f"MATCH (:{src})-[e:{rel}]->(:{dst}) RETURN count(e)").rows[0][0]
        return out

    # --- lifecycle -------------------------------------------------------------------------
    def _close_handles(self) -> None:
        for h in (self._conn, self._db):
            if h is not None:
                try:
                    h.close()
                except Exception:  # best effort: the handle may already be closed
                    pass
        self._conn = self._db = None

    def close(self) -> None:
        with self._lock:
            self._close_handles()

    def __repr__(self) -> str:
        return f"LadybugGraph({str(self.path)!r}, read_only={self.read_only})"

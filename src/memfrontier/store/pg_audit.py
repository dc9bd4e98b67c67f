"""An erasure audit of a PostgreSQL database: which columns still hold a given text in a live row
(for tests and the reliability benchmark, not for a request path)."""

from __future__ import annotations

from ..core.errors import StoreError
from ..core.extras import require_extra
from .postgres import redact_url


def columns_holding(dsn: str, needle: str) -> list[str]:
    """An erasure audit: ``<schema>.<table>.<column>`` of every column, in every table of the
    database outside the system catalogs (the store's, and the service's keys and usage), that has
    a live row whose value cast to text contains ``needle`` (text, JSON, ``text[]`` record ids,
    ``tsvector`` lexemes alike); sorted. A full scan of every column: for audits and tests, not
    for a request path.

    What it cannot see: row versions already deleted but not yet reclaimed by VACUUM, and the
    write-ahead log; those belong to the server's data directory (shared by all its databases),
    erased by the operator's VACUUM FULL and WAL retention, not by the store.

    Raises:
        StoreError: the database cannot be reached or read (the message names it without password).
    """
    require_extra("postgres", "psycopg", feature="the PostgreSQL audit")
    import psycopg
    from psycopg import sql

    found = []
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            cols = conn.execute(
                "SELECT c.table_schema, c.table_name, c.column_name FROM information_schema.columns c "
                "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
                "WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ('pg_catalog', 'information_schema') "
                "ORDER BY 1, 2, 3"
            ).fetchall()
            for schema, table, column in cols:
                q = sql.SQL("SELECT EXISTS (SELECT 1 FROM {}.{} WHERE strpos({}::text, %s) > 0)").format(
                    sql.Identifier(schema), sql.Identifier(table), sql.Identifier(column)
                )
                if conn.execute(q, (needle,)).fetchone()[0]:
                    found.append(f"{schema}.{table}.{column}")
    except psycopg.Error as e:
        raise StoreError(f"store database {redact_url(dsn)}: {e}") from e
    return found


__all__ = ["columns_holding"]

"""The read-only Cypher guard: a query that could write never reaches the database.

AutoMEM (arXiv 2606.04315, Sec. 5) lets the planner write Cypher against the graph index
(``index_query``). Planner text is untrusted, so :func:`check_read_only` rejects, *before* any
database sees it, every query that contains a clause or keyword that can change data or the
database: ``CREATE``, ``MERGE``, ``SET``, ``DELETE`` / ``DETACH``, ``REMOVE``, ``DROP``,
``ALTER``, ``LOAD`` (``LOAD CSV`` / ``LOAD FROM``), ``COPY``, ``FOREACH``, ``INSTALL``,
``ATTACH``, ``IMPORT`` / ``EXPORT``, ``CHECKPOINT``, transaction control (``BEGIN``, ``COMMIT``,
``ROLLBACK``), ``USE``, and ``CALL`` of any procedure outside a small allowlist of read-only
catalog procedures (write procedures such as ``apoc.create.*`` or ``db.createLabel`` are
therefore rejected). Several statements (``a; b``) are rejected too, and so is ``range()``
with an integer literal above :data:`MAX_RANGE` (Ladybug builds the list before its timeout can
stop the query).

Keywords are matched on the query with comments, string literals and back-quoted identifiers
blanked out, so ``WHERE m.text CONTAINS 'set up'`` passes while ``SET m.x = 1`` does not; a word
after a ``.`` (a property name) is not a keyword. The backends add a second layer (Ladybug runs
the query in a read-only transaction, Neo4j in a read session), so the guard is the first of
two locks, not the only one.
"""

from __future__ import annotations

import re

__all__ = ["CypherRejected", "check_read_only", "strip_literals", "WRITE_KEYWORDS", "READ_PROCEDURES"]

#: Clause keywords that write data, change the schema or touch files/transactions.
WRITE_KEYWORDS = frozenset(
    {
        "CREATE",
        "MERGE",
        "SET",
        "DELETE",
        "DETACH",
        "REMOVE",
        "DROP",
        "ALTER",
        "LOAD",
        "COPY",
        "FOREACH",
        "INSTALL",
        "ATTACH",
        "IMPORT",
        "EXPORT",
        "CHECKPOINT",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "USE",
        "TERMINATE",
        "GRANT",
        "REVOKE",
        "DENY",
    }
)

#: Procedures a query may ``CALL``: catalog reads of Ladybug and Neo4j (lower-cased names).
READ_PROCEDURES = frozenset(
    {
        "show_tables",
        "table_info",
        "show_connection",
        "db.labels",
        "db.relationshiptypes",
        "db.propertykeys",
        "db.schema.visualization",
        "db.schema.nodetypeproperties",
        "db.schema.reltypeproperties",
    }
)

#: Clauses a read query may start with.
_FIRST_WORDS = frozenset({"MATCH", "OPTIONAL", "WITH", "UNWIND", "RETURN", "CALL"})

MAX_QUERY_CHARS = 2000
#: Largest integer literal allowed inside ``range(...)``: Ladybug materialises the list before
#: its query timeout can interrupt anything (``range(1, 2000000000)`` ran for minutes).
MAX_RANGE = 100_000

_RANGE = re.compile(r"\brange\s*\(", re.IGNORECASE)
_INT = re.compile(r"\d+")

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class CypherRejected(ValueError):
    """The query is not a single read-only Cypher query (the message says why)."""


def strip_literals(query: str) -> str:
    """``query`` with ``//`` and ``/* */`` comments, ``'...'`` / ``"..."`` strings (backslash
    escapes) and ```...``` identifiers replaced by spaces of the same length (positions kept).

    Raises :class:`CypherRejected` for an unterminated string, identifier or block comment.
    """
    out = list(query)
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and query[j] != ch:
                j += 2 if query[j] == "\\" and ch != "`" else 1
            if j >= n:
                raise CypherRejected(f"unterminated {'identifier' if ch == '`' else 'string'} starting at offset {i}")
            for k in range(i + 1, j):
                out[k] = " "
            i = j + 1
        elif query.startswith("//", i):
            j = query.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            if j < 0:
                raise CypherRejected(f"unterminated comment starting at offset {i}")
            for k in range(i, j + 2):
                out[k] = " "
            i = j + 2
        else:
            i += 1
    return "".join(out)


def check_read_only(query: str) -> str:
    """Return ``query`` stripped (and without one trailing ``;``) if it is a single read-only
    Cypher query; raise :class:`CypherRejected` naming the offending keyword otherwise.

    Rules: non-empty, at most :data:`MAX_QUERY_CHARS` characters, one statement, starts with
    ``MATCH`` / ``OPTIONAL MATCH`` / ``WITH`` / ``UNWIND`` / ``RETURN`` / ``CALL``, contains
    ``RETURN`` (or is a ``CALL`` of an allowed procedure), no :data:`WRITE_KEYWORDS`, and every
    ``CALL`` names a procedure in :data:`READ_PROCEDURES` (``CALL { subquery }`` is allowed; its
    body is checked by the same rules). Parsing errors inside an accepted query are left to the
    database, which reports them as errors.
    """
    if not isinstance(query, str) or not query.strip():
        raise CypherRejected("empty query")
    q = query.strip()
    if len(q) > MAX_QUERY_CHARS:
        raise CypherRejected(f"query is {len(q)} characters, over the {MAX_QUERY_CHARS} limit")
    bare = strip_literals(q)
    if bare.rstrip().endswith(";"):
        cut = bare.rstrip().rfind(";")
        q, bare = q[:cut].rstrip(), bare[:cut].rstrip()
    if ";" in bare:
        raise CypherRejected("several statements: send one query at a time")
    words = [(m.group(0), m.start()) for m in _WORD.finditer(bare)]
    if not words:
        raise CypherRejected("no Cypher clause found")
    for word, start in words:
        if start > 0 and bare[start - 1] == ".":  # a property name (m.set), not a clause
            continue
        if "." not in word and word.upper() in WRITE_KEYWORDS:
            raise CypherRejected(f"{word.upper()} can write; index queries are read-only")
    first = words[0][0].upper()
    if first not in _FIRST_WORDS:
        raise CypherRejected(
            f"a read query starts with MATCH, OPTIONAL MATCH, WITH, UNWIND, RETURN or CALL, not {words[0][0]!r}"
        )
    for i, (word, start) in enumerate(words):
        if word.upper() != "CALL":
            continue
        rest = bare[start + 4 :].lstrip()
        if rest.startswith("{"):
            continue  # a subquery: its clauses are checked as part of this query
        proc = words[i + 1][0].lower() if i + 1 < len(words) else ""
        if proc not in READ_PROCEDURES:
            raise CypherRejected(
                f"CALL {proc or '?'} is not an allowed read-only procedure "
                f"(allowed: {', '.join(sorted(READ_PROCEDURES))})"
            )
    for m in _RANGE.finditer(bare):
        depth, j = 1, m.end()
        while j < len(bare) and depth:
            depth += {"(": 1, ")": -1}.get(bare[j], 0)
            j += 1
        if any(int(x) > MAX_RANGE for x in _INT.findall(bare[m.end() : j])):
            raise CypherRejected(f"range() with bounds above {MAX_RANGE} is not allowed")
    upper = {w.upper() for w, _ in words}
    if "RETURN" not in upper and first != "CALL":
        raise CypherRejected("a read query must RETURN something")
    return q

"""The graph index schema (AutoMEM, arXiv 2606.04315, Sec. 5: a Cypher graph built from write-time
summary notes with edges SAID_BY, OF_TOPIC, FOLLOWS) and the short hint the planner sees.

Nodes
    ``Memory``  one note: ``id``, ``ns`` (scope key), ``text``, ``time`` (ISO-8601 or ""),
                ``session``, ``pos`` (0-based rank in time order), ``step`` (trajectory step
                index, -1 for chat/document notes), ``action`` (trajectory action or ""),
                ``record_ids`` (the raw records the note covers), ``source`` (``model`` |
                ``fallback`` | ``step``)
    ``Speaker`` ``id``, ``ns``, ``name`` (deduplicated display name)
    ``Topic``   ``id``, ``ns``, ``name`` (deduplicated, lower-case)
Edges
    ``(Memory)-[:SAID_BY]->(Speaker)``, ``(Memory)-[:OF_TOPIC]->(Topic)``,
    ``(Memory)-[:FOLLOWS]->(Memory)`` from each note to the next one in time order.

``step`` is -1 rather than NULL for non-steps so that ``ORDER BY m.step`` and comparisons behave
the same on Ladybug and Neo4j.
"""

from __future__ import annotations

SCHEMA_VERSION = "automem-graph-v1"

NODE_PROPERTIES: dict[str, dict[str, str]] = {
    "Memory": {
        "id": "STRING",
        "ns": "STRING",
        "text": "STRING",
        "time": "STRING",
        "session": "STRING",
        "pos": "INT64",
        "step": "INT64",
        "action": "STRING",
        "record_ids": "STRING[]",
        "source": "STRING",
    },
    "Speaker": {"id": "STRING", "ns": "STRING", "name": "STRING"},
    "Topic": {"id": "STRING", "ns": "STRING", "name": "STRING"},
}
EDGES: dict[str, tuple[str, str]] = {
    "SAID_BY": ("Memory", "Speaker"),
    "OF_TOPIC": ("Memory", "Topic"),
    "FOLLOWS": ("Memory", "Memory"),
}


def ladybug_ddl() -> list[str]:
    """``CREATE NODE/REL TABLE IF NOT EXISTS`` statements for Ladybug (``id`` is the primary key)."""
    stmts = []
    for label, props in NODE_PROPERTIES.items():
        cols = ", ".join(f"{name} {typ}" for name, typ in props.items())
        stmts.append(f"CREATE NODE TABLE IF NOT EXISTS {label}({cols}, PRIMARY KEY(id))")
    for rel, (src, dst) in EDGES.items():
        stmts.append(f"CREATE REL TABLE IF NOT EXISTS {rel}(FROM {src} TO {dst})")
    return stmts


SCHEMA_HINT = (
    "Graph index (Cypher, read-only):\n"
    "(:Memory {id, text, time, session, pos, step, action, record_ids})  one note per window of turns, "
    "or one per trajectory step (step >= 0, action = what the agent did; step = -1 otherwise)\n"
    "(:Memory)-[:SAID_BY]->(:Speaker {name})\n"
    "(:Memory)-[:OF_TOPIC]->(:Topic {name})  topic in lower case; for steps the action verb "
    "(click, scroll, search, back...)\n"
    "(:Memory)-[:FOLLOWS]->(:Memory)  next note in time order (pos + 1)\n"
    "Examples: MATCH (m:Memory)-[:SAID_BY]->(s:Speaker {name: 'Evan'}) WHERE m.text CONTAINS 'Canada' "
    "RETURN m.time, m.text LIMIT 10 | MATCH (m:Memory)-[:OF_TOPIC]->(t:Topic {name: 'scroll'}) "
    "RETURN count(m) | MATCH (m:Memory) WHERE m.step >= 0 RETURN m.step, m.action ORDER BY m.step"
)

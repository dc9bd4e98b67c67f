"""Planner actions: the four-tool menu of AutoMEM (arXiv 2606.04315, Algorithm 1,
``A = {rg, read, dump, index_query}``), their JSON shape and the validation of planner output.

A loop plan is ``{"action": A}`` and a single-pass plan ``{"actions": [A, ...]}``, where ``A`` is
one of four tool objects (``anyOf``), each with only its own fields and non-empty required
arguments::

    {"tool": "rg", "patterns": ["Canada"], "ignore_case": true}
    {"tool": "read", "ids": ["conv-49:D3:7"]}
    {"tool": "dump", "ids": []}                       (empty: the whole history)
    {"tool": "index_query", "cypher": "MATCH (m:Memory) RETURN m.text LIMIT 5"}

The root is an object (what OpenAI's strict ``response_format`` requires); arrays and strings are
bounded so the embedded model, decoding under the schema's llama.cpp grammar, cannot loop.
:func:`parse_action` turns a parsed value into an :class:`Action` or into an error
:class:`~memfrontier.strategies.automem.observation.Observation` (``bad_action`` / ``unknown_tool``) that the
planner sees on its next turn; it also accepts the flat form (every field in one object).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .observation import Observation

TOOLS: tuple[str, ...] = ("rg", "read", "dump", "index_query")
#: Tools of the single-pass variant (no dump: it would be a second answer call).
SINGLE_PASS_TOOLS: tuple[str, ...] = ("rg", "read", "index_query")

MAX_PATTERNS = 4
PATTERN_MAX_CHARS = 80
MAX_IDS = 8
ID_MAX_CHARS = 60
CYPHER_MAX_CHARS = 400
MAX_PARALLEL_ACTIONS = 4


def _obj(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _strings(max_items: int, max_chars: int, min_items: int = 0) -> dict:
    out = {"type": "array", "maxItems": max_items, "items": {"type": "string", "minLength": 1, "maxLength": max_chars}}
    if min_items:
        out["minItems"] = min_items
    return out


TOOL_SCHEMAS: dict[str, dict] = {
    "rg": _obj(
        {
            "tool": {"type": "string", "enum": ["rg"]},
            "patterns": _strings(MAX_PATTERNS, PATTERN_MAX_CHARS, 1),
            "ignore_case": {"type": "boolean"},
        }
    ),
    "read": _obj({"tool": {"type": "string", "enum": ["read"]}, "ids": _strings(MAX_IDS, ID_MAX_CHARS, 1)}),
    "dump": _obj({"tool": {"type": "string", "enum": ["dump"]}, "ids": _strings(MAX_IDS * 4, ID_MAX_CHARS)}),
    "index_query": _obj(
        {
            "tool": {"type": "string", "enum": ["index_query"]},
            "cypher": {"type": "string", "minLength": 8, "maxLength": CYPHER_MAX_CHARS},
        }
    ),
}


def action_schema(tools: tuple[str, ...]) -> dict:
    """JSON schema of one action object: ``anyOf`` the tool objects of ``tools``."""
    return {"anyOf": [TOOL_SCHEMAS[t] for t in tools]}


ACTION_SCHEMA = _obj({"action": action_schema(TOOLS)})
PARALLEL_SCHEMA = _obj(
    {
        "actions": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_PARALLEL_ACTIONS,
            "items": action_schema(SINGLE_PASS_TOOLS),
        }
    }
)


@dataclass
class Action:
    """One validated tool call."""

    tool: str
    patterns: list[str] = field(default_factory=list)
    ignore_case: bool = True
    ids: list[str] = field(default_factory=list)
    cypher: str = ""

    def to_dict(self) -> dict:
        """Only the fields the tool uses (what the trace records)."""
        if self.tool == "rg":
            return {"tool": "rg", "patterns": self.patterns, "ignore_case": self.ignore_case}
        if self.tool in ("read", "dump"):
            return {"tool": self.tool, "ids": self.ids}
        return {"tool": self.tool, "cypher": self.cypher}


def _str_list(v: Any) -> list[str] | None:
    """A list of non-empty strings from a list or a single string; None when of another type."""
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, (str, int)) for x in v):
        return None
    return [str(x) for x in v if str(x).strip()]


def parse_action(value: Any, allowed: tuple[str, ...] = TOOLS) -> Action | Observation:
    """Validate one planner action.

    ``value`` is the tool object, or a plan ``{"action": {...}}`` holding it. Returns an
    :class:`Action`, or an error :class:`Observation` with ``tool="planner"`` and
    error ``bad_action`` (not an object, missing/ill-typed fields, a tool without its argument)
    or ``unknown_tool`` (a tool name outside ``allowed``).
    """
    if isinstance(value, dict) and isinstance(value.get("action"), dict) and "tool" not in value:
        value = value["action"]
    if not isinstance(value, dict):
        return Observation.failure(
            "planner", "bad_action", f"the plan must be one JSON object with a 'tool', got {type(value).__name__}"
        )
    tool = value.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        return Observation.failure("planner", "bad_action", "the action has no 'tool'")
    tool = tool.strip()
    if tool not in allowed:
        return Observation.failure(
            "planner", "unknown_tool", f"unknown tool {tool!r}; the tools are {', '.join(allowed)}"
        )
    patterns, ids = _str_list(value.get("patterns")), _str_list(value.get("ids"))
    if patterns is None or ids is None:
        return Observation.failure("planner", "bad_action", "'patterns' and 'ids' must be lists of strings")
    cypher = value.get("cypher") or ""
    if not isinstance(cypher, str):
        return Observation.failure("planner", "bad_action", "'cypher' must be a string")
    ignore_case = value.get("ignore_case", True)
    if not isinstance(ignore_case, bool):
        ignore_case = str(ignore_case).lower() not in ("false", "0", "no")
    if tool == "rg" and not patterns:
        return Observation.failure("planner", "bad_action", "rg needs at least one pattern in 'patterns'")
    if tool == "read" and not ids:
        return Observation.failure("planner", "bad_action", "read needs record ids in 'ids'")
    if tool == "index_query" and not cypher.strip():
        return Observation.failure("planner", "bad_action", "index_query needs a Cypher query in 'cypher'")
    return Action(tool=tool, patterns=patterns, ignore_case=ignore_case, ids=ids, cypher=cypher.strip())

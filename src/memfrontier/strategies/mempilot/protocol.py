"""MemPilot's action protocol: the two tools, their argument rules, and parsing of policy output.

Pure text processing, shared by the orchestrator (to execute actions) and the format gate
(:func:`memfrontier.strategies.mempilot.accounting.format_gate`, MemPilot Eq. 20), so both judge a tool
call by the same rules.

Actions (MemPilot Eq. 6, Sec. 3.2; Hermes-style tags as in the released agent loop):

* ``<tool_call>{"name": "retrieve_memory", "arguments": {"retrieval_query": str, "evidence_count": int}}</tool_call>``
  RETRIEVE over the compressed bank (evidence_count >= 1; at most :data:`MAX_EVIDENCE` are used).
* ``<tool_call>{"name": "runtime_memory", "arguments": {"retrieval_query": str, "evidence_count": int,
  "instruction": str, "model": str, "include_images": bool}}</tool_call>``
  CURATE: raw chunks + instruction delegated to a pool model (evidence_count 0 = question image only).
* ``<answer>...</answer>``: the final answer (exactly one, at the very end of the last turn).

A policy served with constrained decoding emits a JSON *decision* instead (see
:func:`decision_schema`); :func:`render_decision` turns it into the canonical tagged text above,
so the transcript and the gate are the same for every backend.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

RETRIEVE = "retrieve_memory"
CURATE = "runtime_memory"
TOOL_NAMES = (RETRIEVE, CURATE)
MAX_PARALLEL = 2  # concurrent tool calls per turn, one latency stage (Eq. 18)
MAX_EVIDENCE = 5  # items retrieved per call (Table 5)
MAX_TEXT_CHARS = 512  # retrieval_query / instruction length limit (released tool schema)

REQUIRED = {
    RETRIEVE: ("retrieval_query", "evidence_count"),
    CURATE: ("retrieval_query", "evidence_count", "instruction", "model", "include_images"),
}

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL | re.IGNORECASE)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TAGS = ("tool_call", "answer")


@dataclass
class ToolCall:
    """One parsed tool call. ``error`` is None when it is executable; ``args`` are normalised
    (``evidence_count`` clamped to :data:`MAX_EVIDENCE`, ``clamped`` then True)."""

    raw: str
    name: str | None = None
    args: dict = field(default_factory=dict)
    error: str | None = None
    clamped: bool = False


@dataclass
class Decision:
    """One policy turn: its canonical text, the tool calls in it and the answer (if any)."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    error: str | None = None  # the turn could not be read as an action at all


def tag_balance_errors(text: str) -> list[str]:
    """Opening/closing counts of ``<tool_call>`` and ``<answer>`` that differ (MemPilot Eq. 20 gate)."""
    errs = []
    for tag in _TAGS:
        n_open = len(re.findall(rf"<{tag}>", text, re.IGNORECASE))
        n_close = len(re.findall(rf"</{tag}>", text, re.IGNORECASE))
        if n_open != n_close:
            errs.append(f"unbalanced <{tag}> tags ({n_open} open, {n_close} close)")
    return errs


def validate_call(name: Any, args: Any, model_ids: set[str] | frozenset[str]) -> tuple[dict, str | None, bool]:
    """Check one call's name and arguments. Returns ``(normalised args, error or None, clamped)``.

    Errors (each invalidates the trajectory, Eq. 20): unknown tool, arguments not an object,
    a missing required field, a wrong type, an empty or over-long (> 512 chars) query or
    instruction, ``<answer>`` inside a query or instruction, evidence_count < 1 (retrieve) or < 0
    (curate), a model id not in the pool. ``evidence_count`` above 5 is clamped, not an error.
    """
    if name not in TOOL_NAMES:
        return {}, f"unknown tool {name!r}; use one of {', '.join(TOOL_NAMES)}", False
    if not isinstance(args, dict):
        return {}, f"{name}: arguments must be a JSON object", False
    missing = [k for k in REQUIRED[name] if k not in args]
    if missing:
        return {}, f"{name}: missing required argument(s) {', '.join(missing)}", False
    out = {k: args[k] for k in REQUIRED[name]}
    text_fields = ("retrieval_query", "instruction") if name == CURATE else ("retrieval_query",)
    for k in text_fields:
        v = out[k]
        if not isinstance(v, str) or not v.strip():
            return {}, f"{name}: {k} must be a non-empty string", False
        if len(v) > MAX_TEXT_CHARS:
            return {}, f"{name}: {k} is {len(v)} characters; the limit is {MAX_TEXT_CHARS}", False
        if re.search(r"</?answer>", v, re.IGNORECASE):
            return {}, f"{name}: {k} must not contain an <answer> tag", False
        out[k] = v.strip()
    n = out["evidence_count"]
    if isinstance(n, bool) or not isinstance(n, int):
        return {}, f"{name}: evidence_count must be an integer", False
    low = 1 if name == RETRIEVE else 0
    if n < low:
        return {}, f"{name}: evidence_count must be >= {low}", False
    clamped = n > MAX_EVIDENCE
    out["evidence_count"] = min(n, MAX_EVIDENCE)
    if name == CURATE:
        if not isinstance(out["include_images"], bool):
            return {}, f"{name}: include_images must be true or false", False
        if out["model"] not in model_ids:
            return {}, f"{name}: unknown model {out['model']!r}; choose one of the model cards' ids", False
    return out, None, clamped


def parse_tool_call(raw: str, model_ids: set[str] | frozenset[str]) -> ToolCall:
    """Parse the JSON inside one ``<tool_call>`` block (strict JSON: the gate requires it parseable)."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return ToolCall(raw=raw, error=f"tool call is not valid JSON ({e.msg if hasattr(e, 'msg') else e})")
    if not isinstance(obj, dict):
        return ToolCall(raw=raw, error="tool call must be a JSON object with 'name' and 'arguments'")
    args, err, clamped = validate_call(obj.get("name"), obj.get("arguments"), model_ids)
    return ToolCall(
        raw=raw,
        name=obj.get("name") if isinstance(obj.get("name"), str) else None,
        args=args,
        error=err,
        clamped=clamped,
    )


def parse_turn(text: str, model_ids: set[str] | frozenset[str]) -> Decision:
    """Read one policy turn in tagged form: its tool calls and/or its answer (last block wins)."""
    calls = [parse_tool_call(m.group(1).strip(), model_ids) for m in _TOOL_CALL_RE.finditer(text)]
    answers = [m.group(1).strip() for m in _ANSWER_RE.finditer(text)]
    answer = answers[-1] if answers else None
    err = None
    if not calls and answer is None:
        err = "no <tool_call> and no <answer> found"
    return Decision(text=text, calls=calls, answer=answer, error=err)


def render_call(name: str, args: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>"


def render_decision(obj: Any) -> str | None:
    """Canonical tagged text of a JSON decision (``{"tool_calls": [...]}`` or ``{"answer": str}``),
    or None when ``obj`` has neither shape."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("tool_calls"), list) and obj["tool_calls"]:
        parts = []
        for c in obj["tool_calls"]:
            if not isinstance(c, dict):
                return None
            parts.append(render_call(c.get("name"), c.get("arguments")))
        return "\n".join(parts)
    if isinstance(obj.get("answer"), str):
        return f"<answer>{obj['answer'].strip()}</answer>"
    return None


def _plain(max_chars: int) -> dict:
    """A one-line string of 1..max_chars characters without angle brackets, quotes or backslashes, so a
    constrained policy cannot emit tags inside its arguments (llama.cpp honours ``pattern`` over min/maxLength, so the
    bound is in the pattern)."""
    # no quote or backslash either: llama.cpp's pattern rule does not apply JSON string escaping
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_chars,
        "pattern": '^[^<>"\\\\\\n\\r\\t]{1,' + str(max_chars) + "}$",
    }


def _call_schema(name: str, model_ids: list[str]) -> dict:
    props: dict[str, Any] = {
        "retrieval_query": _plain(160),
        "evidence_count": {"enum": list(range(1 if name == RETRIEVE else 0, MAX_EVIDENCE + 1))},
    }
    if name == CURATE:
        props["instruction"] = _plain(200)
        props["model"] = {"enum": list(model_ids)}
        props["include_images"] = {"type": "boolean"}
    return {
        "type": "object",
        "properties": {
            "name": {"const": name},
            "arguments": {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            },
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def decision_schema(
    model_ids: list[str],
    tool_order: list[str],
    *,
    allow_tools: bool = True,
    allow_answer: bool = True,
    answer_chars: int = 200,
) -> dict:
    """JSON schema of one policy turn for constrained decoding (llama.cpp grammar / response_format).

    ``tool_order`` and ``model_ids`` are used in the given order (the caller permutes them per
    rollout). ``allow_tools=False``: only ``{"answer": str}`` (last round, or a hard budget
    reached); ``allow_answer=False``: only ``{"tool_calls": [...]}`` (e.g. a first turn that must
    consult memory). String lengths are bounded so a small model cannot loop forever. Raises
    ValueError when both are False.
    """
    if not (allow_tools or allow_answer):
        raise ValueError("a turn must allow tool calls, an answer, or both")
    answer = {
        "type": "object",
        "properties": {"answer": _plain(answer_chars)},
        "required": ["answer"],
        "additionalProperties": False,
    }
    if not allow_tools:
        return answer
    calls = {
        "type": "object",
        "properties": {
            "tool_calls": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_PARALLEL,
                "items": {"anyOf": [_call_schema(n, model_ids) for n in tool_order]},
            }
        },
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    return {"anyOf": [calls, answer]} if allow_answer else calls


def tool_specs(model_ids: list[str], tool_order: list[str]) -> list[dict]:
    """OpenAI-style function definitions of the two tools (model enum in the given order)."""
    specs = {
        RETRIEVE: {
            "name": RETRIEVE,
            "description": "Fast, free search of the compressed memory bank. Returns compressed memory texts "
            "only (lossy; no images).",
            "parameters": {
                "type": "object",
                "properties": {
                    "retrieval_query": {"type": "string", "description": "what to search for (<= 512 chars)"},
                    "evidence_count": {"type": "integer", "minimum": 1, "maximum": MAX_EVIDENCE},
                },
                "required": list(REQUIRED[RETRIEVE]),
            },
        },
        CURATE: {
            "name": CURATE,
            "description": "Retrieve full raw memory chunks and have a pool model process them with your "
            "instruction; costs money and time. Only vision models can look at images, and only "
            "with include_images=true.",
            "parameters": {
                "type": "object",
                "properties": {
                    "retrieval_query": {"type": "string", "description": "what to search for (not shown to the model)"},
                    "evidence_count": {"type": "integer", "minimum": 0, "maximum": MAX_EVIDENCE},
                    "instruction": {"type": "string", "description": "what the model should extract (<= 512 chars)"},
                    "model": {"type": "string", "enum": list(model_ids)},
                    "include_images": {"type": "boolean"},
                },
                "required": list(REQUIRED[CURATE]),
            },
        },
    }
    return [{"type": "function", "function": specs[n]} for n in tool_order]


__all__ = [
    "CURATE",
    "MAX_EVIDENCE",
    "MAX_PARALLEL",
    "MAX_TEXT_CHARS",
    "REQUIRED",
    "RETRIEVE",
    "TOOL_NAMES",
    "Decision",
    "ToolCall",
    "decision_schema",
    "parse_tool_call",
    "parse_turn",
    "render_call",
    "render_decision",
    "tag_balance_errors",
    "tool_specs",
    "validate_call",
]

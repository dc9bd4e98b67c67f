"""MemPilot's prompts, versioned (intent of MemPilot App. F.1-F.2 and the released prompts; our wording).

The policy prompt states the task, the two tools (in the rollout's permuted order), the model
cards (opaque ids, modalities, parameter count; permuted), the answer rule and two additions for
small or untrained policies: one line naming the preference weights, and format examples built
from the question itself (the 270M model copies its examples verbatim).
The delegate prompt holds only the instruction, question-image descriptions and the retrieved raw
items; the retrieval query is never forwarded (App. F.2).
"""

from __future__ import annotations

import json

from ...core.types import Preference
from .protocol import MAX_EVIDENCE, MAX_PARALLEL, MAX_TEXT_CHARS

PROMPT_VERSION = "mempilot-v1"

POLICY_SYSTEM = """You are a runtime-memory agent. Answer the user's question using the conversation memory, which you can only reach through tools.
Work step by step: decide what evidence is still missing, then call a tool for the next unresolved part. Use up to {max_parallel} calls in one turn only for independent parts. Then answer.

Tools:
{tools}

Model cards (for runtime_memory):
{cards}

Rules:
- retrieve_memory is fast and free but lossy (compressed text, no images). runtime_memory reads full raw memory with a model you choose; it costs money and time, more for larger models. Only image-capable models can look at images, and only with include_images=true.
- retrieval_query says what to search for; instruction says what the model should extract (at most {max_chars} characters each, never an answer tag). evidence_count is 1 to {max_evidence}.
- {preference}
- Reply with exactly one JSON action per turn, either tool calls or the final answer. For this question, for example:
{{"tool_calls": [{{"name": "retrieve_memory", "arguments": {{"retrieval_query": {example_query}, "evidence_count": 3}}}}]}}
{{"tool_calls": [{{"name": "runtime_memory", "arguments": {{"retrieval_query": {example_query}, "evidence_count": 2, "instruction": {example_instruction}, "model": "{example_model}", "include_images": false}}}}]}}
{{"answer": "<the answer in a few words>"}}
The final answer is short (a few words), based only on the memory you retrieved."""

POLICY_SYSTEM_TEXT_MODE_SUFFIX = """
Write tool calls as <tool_call>{"name": ..., "arguments": {...}}</tool_call> and end with exactly one <answer>...</answer>."""

DELEGATE_SYSTEM = (
    "You are a memory-processing assistant. Follow the instruction using only the memory items given. "
    "Report every finding the items support, with names, dates and numbers as written, then say what "
    "remains unresolved. Add nothing the items do not support. Do not write an answer tag."
)

DELEGATE_USER = """Instruction: {instruction}
{question_image}
Memory items:
{items}
{images}
Findings:"""

ANSWER_NOW = "Stop using tools now and give your final answer."


def preference_line(p: Preference) -> str:
    """One line naming lambda = (lambda_Q, lambda_C, lambda_L) for an untrained policy (MemPilot Sec. 3.3)."""
    if p.cost <= 0 and p.latency <= 0:
        return "Preference: answer quality only; cost and latency do not matter."
    return (
        f"Preference weights: quality {p.quality:g}, cost {p.cost:g}, latency {p.latency:g}. "
        "The higher the cost and latency weights, the more you should prefer retrieve_memory, fewer calls, "
        "fewer evidence items and smaller models."
    )


def _example_query(question: str) -> str:
    """The question's first line, cut to 120 characters: the examples' query (a tiny untrained policy
    copies its examples, so they are built from the question rather than from another topic)."""
    first = (question.strip().splitlines() or [""])[0].strip()
    return first[:120].rstrip()


def policy_system(
    tool_specs: list[dict], cards: list[str], preference: Preference, question: str, *, text_mode: bool
) -> str:
    tools = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tool_specs)
    example = cards[0].split(":")[0].lstrip("- ").strip() if cards else "model_id"
    query = _example_query(question)
    out = POLICY_SYSTEM.format(
        tools=tools,
        cards="\n".join(cards),
        max_parallel=MAX_PARALLEL,
        max_chars=MAX_TEXT_CHARS,
        max_evidence=MAX_EVIDENCE,
        preference=preference_line(preference),
        example_model=example,
        example_query=json.dumps(query, ensure_ascii=False),
        example_instruction=json.dumps(f"Find what the memory says about: {query}"[:200], ensure_ascii=False),
    )
    return out + (POLICY_SYSTEM_TEXT_MODE_SUFFIX if text_mode else "")


def policy_user(question: str) -> str:
    return f"Question: {question}"


def tool_response(blocks: list[str]) -> str:
    """One observation message holding every result of a round (observed jointly)."""
    return "\n".join(f"<tool_response>\n{b}\n</tool_response>" for b in blocks)


def delegate_user(instruction: str, items: str, images: str, question_image: str) -> str:
    return DELEGATE_USER.format(
        instruction=instruction, items=items or "(no items retrieved)", images=images, question_image=question_image
    )


__all__ = [
    "ANSWER_NOW",
    "DELEGATE_SYSTEM",
    "PROMPT_VERSION",
    "delegate_user",
    "policy_system",
    "policy_user",
    "preference_line",
    "tool_response",
]

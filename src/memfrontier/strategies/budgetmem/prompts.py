"""BudgetMem prompts: one instruction per module, three inference styles, JSON output schemas.

Our own wording of the module intents of BudgetMem (arXiv 2602.06025) Sec. 4.1 / App. A.5:
filter (score each retrieved chunk 0-10), entity / temporal / topic (a list of relation strings
that matter for the query) and summary (a note that integrates the relations *and the raw
chunks*; the released code fed the High summary only the relations, see
``reference/released-code-notes.md`` 1.10).

Styles realise the reasoning tiers of Sec. 4.2 ("Low: direct; Mid: CoT-style; High:
multi-step/reflection-style") inside *one* schema-constrained call, so they work with grammar
decoding on the embedded base model and with strict ``json_schema`` on hosted models:

* ``direct``  -> ``{"answer": A}``
* ``cot``     -> ``{"reasoning": str, "answer": A}``
* ``reflect`` -> ``{"plan": str, "draft": A, "reflection": str, "answer": A}`` (plan, act, reflect)

``A`` is the module's answer schema (:func:`answer_schema`). Every root is an object with all
properties required and no extras (what OpenAI's strict mode demands); arrays and strings are
bounded (``maxItems`` / ``maxLength``) so a small model cannot loop until ``max_tokens``.
Bump :data:`PROMPT_VERSION` whenever any text or schema here changes (it salts the module cache).
"""

from __future__ import annotations

from typing import Literal

PROMPT_VERSION = "budgetmem-v1"

Style = Literal["direct", "cot", "reflect"]
STYLES: tuple[str, ...] = ("direct", "cot", "reflect")

#: Max characters of one relation string / of a summary / of a reasoning field.
RELATION_MAX_CHARS = 120
SUMMARY_MAX_CHARS = 600
REASONING_MAX_CHARS = 240

INSTRUCTIONS: dict[str, str] = {
    "filter": (
        "You judge retrieved memories. For each memory, rate from 0 to 10 how useful it is for "
        "answering the question: 0 = unrelated, 5 = related background, 10 = states the answer. "
        "Give exactly one score per memory, in the order the memories are listed."
    ),
    "entity": (
        "You extract entity relations. From the memories, list the facts that link concrete "
        "entities (people, places, objects, organisations, pets) and that matter for the question. "
        'Write each as "Entity A - relation - Entity B (detail)". Use only what the memories state.'
    ),
    "temporal": (
        "You extract time facts. From the memories, list when things happened, how long they took "
        "and what came before or after, as far as it matters for the question. Resolve relative "
        "times (yesterday, last week) against the memory's date and write each as "
        '"YYYY-MM-DD: event".'
    ),
    "topic": (
        "You extract topics. From the memories, list the topics discussed that relate to the "
        'question and how the conversation moves between them. Write each as "Topic: detail" or '
        '"Topic A -> Topic B".'
    ),
    "summary": (
        "You write a memory note for someone who must answer the question. Combine the extracted "
        "relations with the raw memories. Keep names, dates and numbers exactly as written. Do not "
        "answer the question yourself: state the facts that are available for it."
    ),
}

STYLE_HINTS: dict[str, str] = {
    "direct": 'Reply with JSON only: {"answer": ...}.',
    "cot": (
        'Think step by step: first write your reasoning in "reasoning", then the result in '
        '"answer". Reply with JSON only.'
    ),
    "reflect": (
        'Work in three steps. "plan": what to look for. "draft": a first result. "reflection": '
        "check the draft against the memories, fix mistakes and drop unsupported items. Then give "
        'the final result in "answer". Reply with JSON only.'
    ),
}

#: Output token caps per style (the reflect style writes the result twice).
MAX_TOKENS: dict[str, int] = {"direct": 256, "cot": 352, "reflect": 512}


def _bounded_str(max_chars: int) -> dict:
    return {"type": "string", "maxLength": max_chars}


def answer_schema(module: str, *, n_chunks: int = 0, max_relations: int = 10) -> dict:
    """The JSON schema of one module's result ``A``.

    filter: ``n_chunks`` integers in 0..10 (exactly one per chunk); entity / temporal / topic: at
    most ``max_relations`` strings; summary: one string.
    """
    if module == "filter":
        return {
            "type": "array",
            "items": {"type": "integer", "enum": list(range(11))},
            "minItems": n_chunks,
            "maxItems": n_chunks,
        }
    if module in ("entity", "temporal", "topic"):
        return {"type": "array", "items": _bounded_str(RELATION_MAX_CHARS), "maxItems": max_relations}
    if module == "summary":
        return _bounded_str(SUMMARY_MAX_CHARS)
    raise ValueError(f"unknown BudgetMem module {module!r}")


def output_schema(style: str, answer: dict) -> dict:
    """Wrap a module's answer schema ``answer`` in the object of ``style`` (see module doc)."""
    if style == "direct":
        props = {"answer": answer}
    elif style == "cot":
        props = {"reasoning": _bounded_str(REASONING_MAX_CHARS), "answer": answer}
    elif style == "reflect":
        props = {
            "plan": _bounded_str(REASONING_MAX_CHARS),
            "draft": answer,
            "reflection": _bounded_str(REASONING_MAX_CHARS),
            "answer": answer,
        }
    else:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {STYLES}")
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def messages(module: str, style: str, body: str) -> list[dict]:
    """Chat messages of one module call: instruction + style hint, then the input ``body``."""
    if module not in INSTRUCTIONS:
        raise ValueError(f"unknown BudgetMem module {module!r}")
    if style not in STYLE_HINTS:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {STYLES}")
    return [
        {"role": "system", "content": f"{INSTRUCTIONS[module]}\n{STYLE_HINTS[style]}"},
        {"role": "user", "content": body},
    ]


def max_tokens(module: str, style: str, n_chunks: int = 0) -> int:
    """Output cap of one call. The filter needs ~3 tokens a score (twice under ``reflect``)."""
    if module == "filter":
        per = 6 * n_chunks + 16
        extra = {"direct": 0, "cot": 96, "reflect": 160}[style]
        return per * (2 if style == "reflect" else 1) + extra
    return MAX_TOKENS[style]

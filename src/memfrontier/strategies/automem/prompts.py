"""AutoMEM prompts, versioned, in one place (AutoMEM, arXiv 2606.04315, Sec. 5, "KV-cache-friendly
chat layout").

Every planner / judge call has the same layout, most stable part first, so that consecutive calls
of one question share a long prefix (a prefix cache serves it) and calls of different questions
on the same memory share the first two blocks:

1. the stable instruction block (system message, identical for every call and role);
2. the corpus catalog and the graph-schema hint (identical for every call on one scope);
3. the per-question part: question, question date, the trace so far;
4. the role's task line (planner / judge / single-pass planner), last.

``dump`` calls go to the answer model with their own short prompt. Bump :data:`PROMPT_VERSION`
whenever any text or schema here or in :mod:`.actions` changes.
"""

from __future__ import annotations

import json
import re

PROMPT_VERSION = "automem-v1"

SYSTEM = (
    "You are the memory agent. You answer a question about a long history (conversations, documents "
    "or an agent's trajectory) by calling memory tools, one step at a time. Each action is a JSON "
    'object with a "tool" and that tool\'s fields:\n'
    "- rg (fields patterns, ignore_case): regular expressions over the raw records. Returns how many "
    "records match and the best matching lines with record id and date. Use short patterns: the key "
    "words of the question.\n"
    "- read (field ids): the full records with these ids, taken from earlier observations.\n"
    "- dump (field ids): send those records, or the whole history when it is short (no ids), to the "
    "answer model, which answers and cites evidence. Costly: use it last.\n"
    "- index_query (field cypher): one read-only Cypher query on the graph index described below.\n"
    "As planner: choose the next action that finds the missing evidence; never repeat an action "
    "already in the trace. As judge: decide whether the trace already holds the facts that answer "
    "the question; if not, say what is missing."
)

PLANNER_TASK = 'Task (planner): give the next action as JSON {{"action": {{...}}}}, for example {example}.'
JUDGE_TASK = (
    "Task (judge): is the evidence in the trace sufficient to answer the question? Reply with "
    'JSON {"sufficient": true or false, "missing": "what is still needed"}.'
)
SINGLE_PASS_TASK = (
    "Task (planner, single pass): give up to 4 actions (rg, read or index_query; no dump) "
    "that together find the evidence; they run in parallel. Reply with JSON "
    '{{"actions": [...]}}, for example {example}.'
)

#: Words never offered as key terms (question words, auxiliaries, pronouns, fillers).
_STOP = frozenset(
    """a an the and or but of to in on at by for with from about into over after before
during since until what which who whom whose when where why how is are was were be been being do does did
has have had having can could will would shall should may might must i you he she it we they me him her us
them my your his its our their this that these those there here not no yes any some many much more most
ever also just than then so very one ones kind sort type""".split()
)
_TERM = re.compile(r"[A-Za-z][A-Za-z0-9'-]*[A-Za-z0-9]|\d+")
MAX_KEY_TERMS = 4

JUDGE_MISSING_CHARS = 160
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"sufficient": {"type": "boolean"}, "missing": {"type": "string", "maxLength": JUDGE_MISSING_CHARS}},
    "required": ["sufficient", "missing"],
    "additionalProperties": False,
}

DUMP_INSTRUCTION = (
    "Answer the question using only the records below. Cite the ids of the records that support "
    'the answer. If the records do not contain the answer, answer "Not mentioned". Reply with JSON '
    '{"answer": "...", "evidence": ["<record id>", ...]}.'
)
DUMP_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 200},
        "evidence": {"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 60}},
    },
    "required": ["answer", "evidence"],
    "additionalProperties": False,
}

#: Output caps (tokens) per role.
PLANNER_MAX_TOKENS = 160
SINGLE_PASS_MAX_TOKENS = 480
JUDGE_MAX_TOKENS = 80


def key_terms(question: str, k: int = MAX_KEY_TERMS) -> list[str]:
    """Up to ``k`` content words of ``question`` for the planner's example action: capitalised
    words (names) first, then the others, in question order, without stopwords or repeats
    (``"How many Prius has Evan owned?"`` -> ``["Prius", "Evan", "owned"]``). DCI-Lite's rg
    likewise expands the planner's queries with the question's terms (released-code notes 4.2)."""
    words = [w.strip("'-") for w in _TERM.findall(question or "")]
    words = [w[:-2] if w.lower().endswith("'s") else w for w in words]
    seen, caps, rest = set(), [], []
    for i, w in enumerate(words):
        lw = w.lower()
        if lw in _STOP or lw in seen or len(w) < 3 and not w.isdigit():
            continue
        seen.add(lw)
        (caps if w[0].isupper() and i > 0 else rest).append(w)
    return (caps + rest)[:k]


def example_actions(question: str) -> tuple[str, str]:
    """(loop example, single-pass example) built from the question's key terms: the end of the
    prompt, so the stable prefix is untouched."""
    terms = key_terms(question) or ["memory"]
    rg = {"tool": "rg", "patterns": terms, "ignore_case": True}
    probe = terms[0].replace("'", "")
    iq = {
        "tool": "index_query",
        "cypher": f"MATCH (m:Memory) WHERE lower(m.text) CONTAINS '{probe.lower()}' RETURN m.time, m.text LIMIT 10",
    }
    return json.dumps({"action": rg}), json.dumps({"actions": [rg, iq]})


def planner_task(question: str) -> str:
    return PLANNER_TASK.format(example=example_actions(question)[0])


def single_pass_task(question: str) -> str:
    return SINGLE_PASS_TASK.format(example=example_actions(question)[1])


def context_block(catalog: str, schema_hint: str | None) -> str:
    """Block 2: the catalog, then the schema hint when a graph index exists."""
    return catalog if not schema_hint else f"{catalog}\n\n{schema_hint}"


def question_block(question: str, question_date: str | None, trace_text: str) -> str:
    """Block 3: the question, its date and the trace."""
    when = f"\nAsked on: {question_date}" if question_date else ""
    return f"Question: {question}{when}\n\nTrace:\n{trace_text or '(empty: no action yet)'}"


def agent_messages(context: str, question_part: str, task: str) -> list[dict]:
    """The chat messages of a planner / judge call: [system: instructions], [user: block 2
    (``context``), block 3 (``question_part``, see :func:`question_block`), the task line]."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{context}\n\n{question_part}\n\n{task}"},
    ]


def dump_messages(corpus_text: str, question: str) -> list[dict]:
    """The messages of a ``dump`` call."""
    return [
        {"role": "system", "content": DUMP_INSTRUCTION},
        {"role": "user", "content": f"Records:\n{corpus_text}\n\nQuestion: {question}\n\nJSON:"},
    ]

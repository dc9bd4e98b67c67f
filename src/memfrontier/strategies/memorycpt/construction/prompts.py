"""Prompts and output schemas of the four construction roles (MemoryCPT QAD, after Nemori).

Each prompt puts its stable instruction block first (a cacheable prefix) and the per-call material
last. Every role answers with one JSON object whose first field, ``reasoning``, is the teacher's
short rationale (kept as the ``<think>`` part of the SFT target); a reasoning model's own
``<think>`` block is used instead when it has one. Schemas bound every array (``maxItems``) so a
small model under a grammar cannot loop until ``max_tokens``; strings are bounded by the call's
``max_tokens`` only (a ``maxLength`` makes llama.cpp's grammar explode; a small ``minLength`` keeps
a title or content from being empty).
"""

from __future__ import annotations

PROMPT_VERSION = "memorycpt-qad-v4"
MAX_SEGMENT_TURNS = 80  # BatchSegmenter window (Nemori splits longer batches into 80s)

_REASONING = {"type": "string"}

SEGMENTER_SYSTEM = (
    "You split a conversation into episodes: coherent stretches about one topic or goal.\n"
    "Start a new episode when the topic changes, when the speaker's intent changes, when a long time "
    "passes between messages, or at an explicit transition. When in doubt, split. Typical episodes "
    "have 2 to 15 messages. Every message number must appear in exactly one episode.\n"
    'Reply with JSON: {"reasoning": short explanation, "episodes": [{"indices": [message numbers], '
    '"topic": short topic}]}.'
)
SEGMENTER_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": _REASONING,
        "episodes": {
            "type": "array",
            "maxItems": 40,
            "items": {
                "type": "object",
                "properties": {
                    "indices": {"type": "array", "items": {"type": "integer"}, "maxItems": MAX_SEGMENT_TURNS},
                    "topic": {"type": "string"},
                },
                "required": ["indices", "topic"],
            },
        },
    },
    "required": ["reasoning", "episodes"],
}

#: The people of the episode generator's worked example. The authors' released prompt carries one
#: example; without it the 1.5B bench model copied the messages instead of retelling them (accepted
#: on the first try: 7 of 32 windows of LoCoMo conv-49 without an example, 31 of 32 with one). The
#: names are unusual on purpose: a memory naming one of them when its source turns do not echoes
#: the example (:func:`~memfrontier.strategies.memorycpt.construction.ops.validate_episode` refuses it).
#: qad-v4 adds a second example, a user and an AI assistant: under v3 the model echoed the first
#: example into a LongMemEval chat ("user asked Priyanka ...; Tomasz offered to come over this weekend
#: to help her fix it") and into LoCoMo episodes ("Evan offered to come over this weekend to help her
#: fix it"), 4 fallbacks in 57 LoCoMo episode prompts (7%) after 11 sessions; with the second example
#: the 3 prompts that had fallen back and 11 others were accepted on the first try. No 5-word
#: sequence of it occurs in a LoCoMo or LongMemEval turn, so the echo check cannot refuse real content
#: for it (tested).
EXAMPLE_NAMES = ("Priyanka", "Tomasz")
_A, _B = EXAMPLE_NAMES
#: The days of the two worked examples: an episode of another day that gives one of them took the
#: example's date (seen under qad-v4: "On March 12, 2024 the user asked ..." for messages of May 28,
#: 2023); refused like a name of the example.
EXAMPLE_DATES = ("2024-03-12", "2024-02-07")
EPISODE_SYSTEM = (
    "You write episodic memories: short third-person accounts of what happened in a stretch of "
    "conversation, in your own words. Given the messages of one episode, write:\n"
    "- title: 10 to 20 specific, searchable words naming who did what;\n"
    "- content: a third-person narrative of the episode: who, when, what happened, decisions, feelings "
    "and plans, with names and concrete details; convert relative times (yesterday, last week) to "
    "absolute dates using the message dates. Never copy the messages: retell them;\n"
    "- timestamp: when the episode happened, ISO format (YYYY-MM-DDTHH:MM), taken from the message "
    "dates, never from today's date.\n"
    "Every episode gets a title and a content, however short it is: a greeting or a goodbye is an "
    "episode too.\n"
    "Example. Messages:\n"
    f"[2024-03-12 18:05] {_A}: My bike chain snapped on the way home yesterday, so I walked the last two miles.\n"
    f"[2024-03-12 18:06] {_B}: Ouch! Want me to come over this weekend and help you fix it?\n"
    f'JSON: {{"reasoning": "{_A} reports a broken bike chain; {_B} offers help.", "title": "{_A}\'s bike '
    f'chain snapped on her way home and {_B} offers to help fix it", "content": "On March 12, 2024 '
    f"{_A} told {_B} that her bike chain had snapped on her way home the day before (March 11, 2024) "
    f"and that she walked the last two miles. {_B} offered to come over that weekend to help her fix "
    'it.", "timestamp": "2024-03-12T18:05"}\n'
    "Second example. Messages:\n"
    "[2024-02-07 10:02] user: Can you suggest a gift for my sister? She turns 30 in May and just took up pottery.\n"
    "[2024-02-07 10:03] assistant: A set of clay sculpting tools, or a voucher for a beginners' wheel class at a "
    "local studio.\n"
    'JSON: {"reasoning": "The user wants a birthday gift for a sister who took up pottery; the assistant gives '
    'two ideas.", "title": "Birthday gift ideas for the user\'s sister, a new potter turning 30", "content": '
    '"On February 7, 2024 the user, whose sister turns 30 in May and recently took up pottery, asked for a gift '
    "idea; the assistant proposed clay sculpting tools or a voucher for a beginners' wheel class.\", "
    '"timestamp": "2024-02-07T10:02"}\n'
    'Reply with JSON: {"reasoning": ..., "title": ..., "content": ..., "timestamp": ...}.'
)
#: Title and content cannot be empty under the grammar (qad-v3: told why its reply was refused, the
#: 1.5B bench model answered a retry with {"title": "", "content": ""}).
EPISODE_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": _REASONING,
        "title": {"type": "string", "minLength": 3},
        "content": {"type": "string", "minLength": 20},
        "timestamp": {"type": "string"},
    },
    "required": ["reasoning", "title", "content", "timestamp"],
}

MERGER_SYSTEM = (
    "You maintain episodic memory. A new episode arrived; similar stored episodes are listed by "
    "number. Merge only when the new episode continues the same event in the same session and close in "
    "time (more than an hour apart: do not merge). If you merge, write the combined episode: all details "
    "of both, in time order, no repetition, with the earlier timestamp.\n"
    'Reply with JSON: {"reasoning": ..., "decision": "new"} or {"reasoning": ..., "decision": '
    '"merge", "target": number of the stored episode to merge with, "title": ..., "content": ..., '
    '"timestamp": ...}.'
)
#: Two shapes (qad-v3): "new" carries nothing else, "merge" a non-empty title and content, so a merge
#: without content cannot be decoded under the grammar (with one flat schema and "empty strings for
#: new", the 1.5B bench model answered {"decision": "merge", "content": ""} in 2 of its first 5
#: LoCoMo merger calls).
MERGER_SCHEMA = {
    "type": "object",
    "anyOf": [
        {"properties": {"reasoning": _REASONING, "decision": {"const": "new"}}, "required": ["reasoning", "decision"]},
        {
            "properties": {
                "reasoning": _REASONING,
                "decision": {"const": "merge"},
                "target": {"type": "integer"},
                "title": {"type": "string", "minLength": 3},
                "content": {"type": "string", "minLength": 20},
                "timestamp": {"type": "string"},
            },
            "required": ["reasoning", "decision", "target", "title", "content", "timestamp"],
        },
    ],
}

PREDICT_SYSTEM = (
    "You know some facts about the people in a conversation. From an episode's title and these "
    "facts only, predict what the episode says: its substance, not its style. Reply with the "
    "predicted content as plain text, a few sentences."
)

_FACT_RULES = (
    "Keep only facts that are durable (still true in six months), specific, useful later and "
    "self-contained (names, no pronouns): identity, preferences, skills, relationships, goals, "
    "beliefs, habits, possessions, important events. Skip greetings, passing moods and small talk. "
    "One atomic statement per fact, present tense.\n"
    'Reply with JSON: {"reasoning": ..., "facts": [statements]}; an empty list when nothing qualifies.'
)
EXTRACT_SYSTEM = (
    "You update a knowledge base from conversations. You get an episode's original messages and a "
    "prediction of its content made from existing knowledge. Extract only knowledge the prediction "
    "missed or got wrong.\n" + _FACT_RULES
)
EXTRACT_DIRECT_SYSTEM = "You build a knowledge base from conversations. Extract facts from the episode.\n" + _FACT_RULES
FACTS_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": _REASONING,
        "facts": {"type": "array", "maxItems": 10, "items": {"type": "string"}},
    },
    "required": ["reasoning", "facts"],
}


def segmenter_user(lines: list[str]) -> str:
    """``lines``: rendered messages, numbered from 1 in the prompt."""
    body = "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))
    return f"Messages:\n{body}\n\nJSON:"


def episode_user(topic: str, lines: list[str]) -> str:
    """``topic``: the segmenter's topic of the episode, "" when there is none (then no topic line:
    a placeholder such as "(none)" made a small model answer that there was nothing to write)."""
    head = f"Episode topic: {topic}\n" if topic else ""
    return head + "Messages:\n" + "\n".join(lines) + "\n\nJSON:"


def merger_user(
    new_title: str, new_content: str, new_ts: str | None, candidates: list[tuple[str, str, str | None]]
) -> str:
    listed = "\n".join(f"{i}. [{ts or 'unknown time'}] {t}: {c}" for i, (t, c, ts) in enumerate(candidates, 1))
    return (
        f"Stored episodes:\n{listed}\n\nNew episode:\n[{new_ts or 'unknown time'}] {new_title}: {new_content}\n\nJSON:"
    )


def predict_user(title: str, facts: list[str]) -> str:
    return "Known facts:\n" + "\n".join(f"- {f}" for f in facts) + f"\n\nEpisode title: {title}\n\nPredicted content:"


def extract_user(lines: list[str], prediction: str) -> str:
    return "Original messages:\n" + "\n".join(lines) + f"\n\nPrediction:\n{prediction}\n\nJSON:"


def extract_direct_user(title: str, content: str) -> str:
    return f"Episode: {title}\n{content}\n\nJSON:"


#: What the model is told when its reply was refused, by reason. qad-v3 resent the prompt followed
#: by the refused reply and the reason; the 1.5B model then repeated the refused reply word for word
#: in 4 of the 6 retries of its first 11 LoCoMo sessions. qad-v4 does not show the refused reply: the
#: reason goes into the prompt itself, just before its closing label (v2 resent the same prompt at a
#: higher temperature, and the model mostly repeated its mistake).
_TOO_SHORT = "(A first reply to this was refused as too short: give a complete answer.)"
RETRY_HINTS = {
    "unparsable": "(A first reply to this was not one complete JSON object: reply with a short JSON object only.)",
    "copied_turn": "(A first reply to this was refused because it copied the messages word for word: retell them "
    "in your own words.)",
    "instruction_echo": "(A first reply to this was refused because it repeated the instructions or an example: "
    "write only about these messages and the people in them.)",
    "too_few_words": _TOO_SHORT,
    "bare_punctuation": _TOO_SHORT,
}


def retry_messages(messages: list[dict], reason: str) -> list[dict]:
    """``messages`` with why a first reply was refused (:data:`RETRY_HINTS` for a known reason, else
    the refusal's own message) added to the last message, before its closing label (``JSON:``,
    ``Predicted content:``) when it ends with one; the refused reply itself is not shown."""
    hint = RETRY_HINTS.get(reason) or f"(A first reply to this was refused: {reason}. Follow the rules.)"
    *head, last = messages
    body = last["content"].rstrip()
    label = body.rsplit("\n", 1)[-1]
    if len(label) < 40 and label.endswith(":") and "\n" in body:  # a closing label such as "JSON:"
        content = f"{body[: -len(label)]}{hint}\n{label}"
    else:
        content = f"{body}\n\n{hint}"
    return [*head, {**last, "content": content}]


def messages(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]

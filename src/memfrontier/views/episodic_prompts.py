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

PROMPT_VERSION = "memorycpt-qad-v3"
MAX_SEGMENT_TURNS = 80  # BatchSegmenter window (Nemori splits longer batches into 80s)

_REASONING = {"type": "string"}

SEGMENTER_SYSTEM = (
    "You split a conversation into episodes: coherent stretches about one topic or goal.\n"
    "Start a new episode when the topic changes, when the speaker's intent changes, when a long time "
    "passes between messages, or at an explicit transition. When in doubt, split. Typical episodes "
    "have 2 to 15 messages. Every message number must appear in exactly one episode.\n"
    "Reply with JSON: {\"reasoning\": short explanation, \"episodes\": [{\"indices\": [message numbers], "
    "\"topic\": short topic}]}."
)
SEGMENTER_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": _REASONING,
        "episodes": {"type": "array", "maxItems": 40, "items": {
            "type": "object",
            "properties": {"indices": {"type": "array", "items": {"type": "integer"}, "maxItems": MAX_SEGMENT_TURNS},
                           "topic": {"type": "string"}},
            "required": ["indices", "topic"]}},
    },
    "required": ["reasoning", "episodes"],
}

#: The people of the episode generator's worked example. The authors' released prompt carries one
#: example; without it the 1.5B bench model copied the messages instead of retelling them (accepted
#: on the first try: 7 of 32 windows of LoCoMo conv-49 without an example, 31 of 32 with one). The
#: names are unusual on purpose: a memory naming one of them when its source turns do not echoes
#: the example (:func:`~memfrontier.views.episodic_ops.validate_episode` refuses it).
EXAMPLE_NAMES = ("Priyanka", "Tomasz")
_A, _B = EXAMPLE_NAMES
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
    f"JSON: {{\"reasoning\": \"{_A} reports a broken bike chain; {_B} offers help.\", \"title\": \"{_A}'s bike "
    f"chain snapped on her way home and {_B} offers to help fix it\", \"content\": \"On March 12, 2024 "
    f"{_A} told {_B} that her bike chain had snapped on her way home the day before (March 11, 2024) "
    f"and that she walked the last two miles. {_B} offered to come over that weekend to help her fix "
    "it.\", \"timestamp\": \"2024-03-12T18:05\"}\n"
    "Reply with JSON: {\"reasoning\": ..., \"title\": ..., \"content\": ..., \"timestamp\": ...}."
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
    "Reply with JSON: {\"reasoning\": ..., \"decision\": \"new\"} or {\"reasoning\": ..., \"decision\": "
    "\"merge\", \"target\": number of the stored episode to merge with, \"title\": ..., \"content\": ..., "
    "\"timestamp\": ...}."
)
#: Two shapes (qad-v3): "new" carries nothing else, "merge" a non-empty title and content, so a merge
#: without content cannot be decoded under the grammar (with one flat schema and "empty strings for
#: new", the 1.5B bench model answered {"decision": "merge", "content": ""} in 2 of its first 5
#: LoCoMo merger calls).
MERGER_SCHEMA = {
    "type": "object",
    "anyOf": [
        {"properties": {"reasoning": _REASONING, "decision": {"const": "new"}},
         "required": ["reasoning", "decision"]},
        {"properties": {"reasoning": _REASONING, "decision": {"const": "merge"}, "target": {"type": "integer"},
                        "title": {"type": "string", "minLength": 3}, "content": {"type": "string", "minLength": 20},
                        "timestamp": {"type": "string"}},
         "required": ["reasoning", "decision", "target", "title", "content", "timestamp"]},
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
    "Reply with JSON: {\"reasoning\": ..., \"facts\": [statements]}; an empty list when nothing qualifies."
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


def merger_user(new_title: str, new_content: str, new_ts: str | None, candidates: list[tuple[str, str, str | None]]) -> str:
    listed = "\n".join(f"{i}. [{ts or 'unknown time'}] {t}: {c}" for i, (t, c, ts) in enumerate(candidates, 1))
    return (f"Stored episodes:\n{listed}\n\nNew episode:\n[{new_ts or 'unknown time'}] {new_title}: {new_content}\n\nJSON:")


def predict_user(title: str, facts: list[str]) -> str:
    return "Known facts:\n" + "\n".join(f"- {f}" for f in facts) + f"\n\nEpisode title: {title}\n\nPredicted content:"


def extract_user(lines: list[str], prediction: str) -> str:
    return "Original messages:\n" + "\n".join(lines) + f"\n\nPrediction:\n{prediction}\n\nJSON:"


def extract_direct_user(title: str, content: str) -> str:
    return f"Episode: {title}\n{content}\n\nJSON:"


#: What the model is told when its reply was refused, by reason (qad-v3: the retry used to resend
#: the same prompt at a higher temperature, and the 1.5B model mostly repeated its mistake).
_TOO_SHORT = "That reply was refused: it is too short. Reply again with a complete answer."
RETRY_HINTS = {
    "unparsable": "That reply was not one complete JSON object. Reply again with the JSON object only.",
    "copied_turn": "That reply was refused: it copies the messages word for word. Reply again, retelling "
                   "them in your own words.",
    "instruction_echo": "That reply was refused: it repeats the instructions or names a person of the "
                        "example who is not in these messages. Reply again about these messages only.",
    "too_few_words": _TOO_SHORT,
    "bare_punctuation": _TOO_SHORT,
}


def retry_messages(messages: list[dict], refused_reply: str, reason: str) -> list[dict]:
    """``messages`` followed by the refused reply (assistant) and why it was refused (user):
    :data:`RETRY_HINTS` for a known reason, else the refusal's own message."""
    hint = RETRY_HINTS.get(reason) or f"That reply was refused ({reason}). Reply again following the rules."
    return [*messages, {"role": "assistant", "content": refused_reply}, {"role": "user", "content": hint}]


def messages(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]

"""Chat messages as one completion prompt for a base model (no chat template): the layout the
embedded backend (:mod:`memfrontier.llm.embedded`), the Hugging Face backend, the MemPilot policy,
AutoMEM's prefix cache and the trainers all decode and train on. Pure text; imports no backend."""

from __future__ import annotations

from typing import Any

from .base import Message


def content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of an OpenAI content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def render_prompt(messages: list[Message]) -> str:
    """Render chat messages into one completion prompt for a base model (no chat template).

    Layout: every system / user / non-final assistant message's content, stripped, in order,
    separated by a blank line, then a blank line. A *trailing* assistant message is a prefix: its
    content is appended verbatim after that blank line (no separator after it), and the model
    continues it. Example: ``[system "S", user "U", assistant "A:"]`` -> ``"S\\n\\nU\\n\\nA:"``.
    """
    prefix = ""
    msgs = list(messages)
    if msgs and msgs[-1].get("role") == "assistant":
        prefix = content_text(msgs[-1].get("content"))
        msgs = msgs[:-1]
    blocks = [t.strip() for t in (content_text(m.get("content")) for m in msgs) if t.strip()]
    head = "\n\n".join(blocks)
    return f"{head}\n\n{prefix}" if head else prefix

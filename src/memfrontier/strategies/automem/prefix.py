"""Stable-prefix accounting for one question's calls (AutoMEM, arXiv 2606.04315, Sec. 5,
"KV-cache-friendly chat layout": the in-run prefix-cache hit rate).

For every call, the prompt is rendered as one string (the messages' contents joined by a blank
line, exactly what the embedded backend decodes, :func:`~memfrontier.llm.prompt_format.render_prompt`);
its *stable prefix* is the longest common prefix, in characters, with the previous call's prompt
of the same question, and its size in tokens is the token count of that prefix string (one token
more or less at the cut where two tokenizations diverge). The fraction of a call is
``prefix_tokens / prompt_tokens``; the question's fraction is the token-weighted mean over the
calls that have a previous call (None when there is only one call).
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from ...llm.prompt_format import render_prompt


class CallPrefix(BaseModel):
    """One call's prompt size, its stable prefix and (when the backend reports it) cached tokens."""

    role: str
    prompt_tokens: int
    stable_prefix_tokens: int = 0
    stable_prefix_fraction: float | None = None
    cached_tokens: int = 0


class PrefixMeter:
    """Measures the calls of one question in order."""

    def __init__(self) -> None:
        self._prev: str | None = None
        self.calls: list[CallPrefix] = []

    def measure(self, role: str, messages: list[dict], llm) -> CallPrefix:
        """Measure the prompt of the call about to be made with ``llm`` (which counts tokens)."""
        text = render_prompt(messages)
        n = llm.count_tokens(text)
        if self._prev is None:
            rec = CallPrefix(role=role, prompt_tokens=n)
        else:
            common = os.path.commonprefix([self._prev, text])
            k = min(n, llm.count_tokens(common)) if common else 0
            rec = CallPrefix(
                role=role, prompt_tokens=n, stable_prefix_tokens=k, stable_prefix_fraction=k / n if n else 0.0
            )
        self._prev = text
        self.calls.append(rec)
        return rec

    def fraction(self) -> float | None:
        """Token-weighted stable-prefix fraction over calls 2..n (None with fewer than two calls)."""
        later = [c for c in self.calls if c.stable_prefix_fraction is not None]
        total = sum(c.prompt_tokens for c in later)
        return sum(c.stable_prefix_tokens for c in later) / total if total else None

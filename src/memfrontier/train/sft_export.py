"""Teacher traces -> per-role ShareGPT JSONL for LoRA-A (MemoryCPT QAD, Eq. 8-9).

Each construction call kept in a bank (:class:`memfrontier.store.bank.Trace`) becomes one sample:
the prompt x (system + user turns) and the target ``<think>r</think>`` + the JSON output y
(rationale first, then the structured output, as the paper supervises both). Only accepted
operations are exported by default: a rejected output is not something to imitate. Accepted
outputs pass the construction content check again (:func:`filter_trace`): an episode whose title
or narrative fails it is dropped, a fact that fails it is removed from the target (and a sample
left with none of the facts it had is dropped), so traces kept before the check existed export
nothing the check refuses.

File layout: ``<out>/<role>.jsonl``, one object per line::

    {"role": "segmenter",
     "conversations": [{"from": "system", "value": ...}, {"from": "human", "value": ...},
                       {"from": "gpt", "value": "<think>...</think>\\n{...}"}],
     "meta": {"model_id": ..., "prompt_version": ...}}
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.files import private_dir
from ..core.jsonio import write_text_atomic
from ..store.bank import MemoryBank, Trace
from ..strategies.memorycpt.construction.ops import (
    MIN_CONTENT_WORDS,
    MIN_FACT_WORDS,
    MIN_TITLE_WORDS,
    content_problem,
    turn_texts,
)

_FROM = {"system": "system", "user": "human", "assistant": "gpt"}


def trace_target(t: Trace) -> str:
    """The SFT target of a trace: ``<think>rationale</think>`` then the output (JSON, or the text
    of a free-text role such as the semantic predictor)."""
    if isinstance(t.output, dict) and set(t.output) == {"text"}:
        body = str(t.output["text"])
    else:
        body = json.dumps(t.output, ensure_ascii=False)
    return f"<think>{t.rationale}</think>\n{body}"


def filter_trace(t: Trace) -> Trace | None:
    """``t`` with its output cut to what passes :func:`memfrontier.strategies.memorycpt.construction.ops.content_problem`
    (source turns read from its prompt), or None when nothing of it should be imitated: an
    episode (generator, or merger deciding ``merge``) with a bad title or content, or a
    semantic extractor whose facts were all refused. Other roles come back unchanged."""
    out = t.output
    if not isinstance(out, dict):
        return t
    turns = turn_texts("\n".join(str(m.get("content", "")) for m in t.messages if m.get("role") == "user"))
    if t.role == "episode_generator" or (t.role == "episode_merger" and out.get("decision") == "merge"):
        title, content = str(out.get("title", "")), str(out.get("content", ""))
        if (
            content_problem(title, min_words=MIN_TITLE_WORDS) is not None
            or content_problem(content, min_words=MIN_CONTENT_WORDS, turns=turns) is not None
        ):
            return None
        return t
    if t.role == "semantic_extractor" and isinstance(out.get("facts"), list):
        facts = out["facts"]
        kept = [
            f for f in facts if isinstance(f, str) and content_problem(f, min_words=MIN_FACT_WORDS, turns=turns) is None
        ]
        if len(kept) == len(facts):
            return t
        if not kept:
            return None
        return t.model_copy(update={"output": {**out, "facts": kept}})
    return t


def trace_to_sharegpt(t: Trace) -> dict:
    """One trace as a ShareGPT sample (see the module docstring)."""
    conv = [{"from": _FROM.get(m.get("role", "user"), "human"), "value": str(m.get("content", ""))} for m in t.messages]
    conv.append({"from": "gpt", "value": trace_target(t)})
    return {"role": t.role, "conversations": conv, "meta": {"model_id": t.model_id, "prompt_version": t.prompt_version}}


def export_sft(banks: list[Path], out: Path, embedder, *, include_rejected: bool = False) -> dict[str, int]:
    """Write ``out/<role>.jsonl`` from the traces of every bank file in ``banks``; returns samples
    per role. Files are written atomically. Raises FileNotFoundError for a missing bank file."""
    per_role: dict[str, list[str]] = {}
    for path in banks:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no memory bank at {path}")
        bank = MemoryBank(path, embedder)
        try:
            for t in bank.traces():
                if not t.accepted:
                    if include_rejected:
                        per_role.setdefault(t.role, []).append(json.dumps(trace_to_sharegpt(t), ensure_ascii=False))
                    continue
                kept = filter_trace(t)
                if kept is not None:
                    per_role.setdefault(t.role, []).append(json.dumps(trace_to_sharegpt(kept), ensure_ascii=False))
        finally:
            bank.close()
    out = private_dir(out)  # 0700: the traces hold the memories' text
    for role, lines in per_role.items():
        write_text_atomic(out / f"{role}.jsonl", "".join(line + "\n" for line in lines))
    return {role: len(lines) for role, lines in per_role.items()}

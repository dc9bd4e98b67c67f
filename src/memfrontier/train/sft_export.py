"""Teacher traces -> per-role ShareGPT JSONL for LoRA-A (MemoryCPT QAD, Eq. 8-9).

Each construction call kept in a bank (:class:`memfrontier.store.bank.Trace`) becomes one sample:
the prompt x (system + user turns) and the target ``<think>r</think>`` + the JSON output y
(rationale first, then the structured output, as the paper supervises both). Only accepted
operations are exported by default: a rejected output is not something to imitate.

File layout: ``<out>/<role>.jsonl``, one object per line::

    {"role": "segmenter",
     "conversations": [{"from": "system", "value": ...}, {"from": "human", "value": ...},
                       {"from": "gpt", "value": "<think>...</think>\\n{...}"}],
     "meta": {"model_id": ..., "prompt_version": ...}}
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.jsonio import write_text_atomic
from ..store.bank import MemoryBank, Trace

_FROM = {"system": "system", "user": "human", "assistant": "gpt"}


def trace_target(t: Trace) -> str:
    """The SFT target of a trace: ``<think>rationale</think>`` then the output (JSON, or the text
    of a free-text role such as the semantic predictor)."""
    if isinstance(t.output, dict) and set(t.output) == {"text"}:
        body = str(t.output["text"])
    else:
        body = json.dumps(t.output, ensure_ascii=False)
    return f"<think>{t.rationale}</think>\n{body}"


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
                if t.accepted or include_rejected:
                    per_role.setdefault(t.role, []).append(json.dumps(trace_to_sharegpt(t), ensure_ascii=False))
        finally:
            bank.close()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for role, lines in per_role.items():
        write_text_atomic(out / f"{role}.jsonl", "".join(line + "\n" for line in lines))
    return {role: len(lines) for role, lines in per_role.items()}

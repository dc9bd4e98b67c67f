"""MemPilot's format gate g(tau) (Eq. 20, arXiv 2610.06830), a pure function of a trajectory's
policy turns.

A trajectory's cost (Eq. 14, KV-prefix reuse) and latency proxy (Eq. 15-19) are what its calls
recorded: :class:`~memfrontier.llm.metered.MeteredLLM` charges each call (``new_input_tokens``:
only the appended tokens), :class:`~memfrontier.core.ledger.Ledger` sums them (calls of one
parallel stage count as their max). The rewards built on these live in
:mod:`memfrontier.train.mempilot_reward`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .protocol import CURATE, MAX_PARALLEL, RETRIEVE, parse_turn, tag_balance_errors

# ----------------------------------------------------------------------------- Eq. 20


@dataclass
class GateResult:
    """g(tau) of Eq. 20 with the reasons a trajectory failed it (empty when valid)."""

    valid: bool
    reasons: list[str] = field(default_factory=list)


def format_gate(segments: Sequence[str], model_ids: set[str] | frozenset[str], *, tool_errors: int = 0) -> GateResult:
    """The output-format contract of MemPilot Eq. 20 / App. A.1 over a trajectory's policy turns.

    Valid iff: every turn has balanced ``<tool_call>`` / ``<answer>`` tags; every turn but the last
    issues one or two (:data:`MAX_PARALLEL`) tool calls and no answer; every tool call is strict JSON with a known tool
    name, all required fields, valid types, lengths and model ids (see
    :func:`~memfrontier.strategies.mempilot.protocol.validate_call`); the last turn holds exactly
    one non-empty ``<answer>`` block with nothing after it and no tool call; at least one memory
    call (Retrieve or Curate) was made; and no tool failed while executing (``tool_errors``).
    """
    reasons: list[str] = []
    if not segments:
        return GateResult(False, ["empty trajectory"])
    n_memory_calls = 0
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        reasons += [f"turn {i + 1}: {e}" for e in tag_balance_errors(seg)]
        d = parse_turn(seg, model_ids)
        if len(d.calls) > MAX_PARALLEL:
            reasons.append(f"turn {i + 1}: {len(d.calls)} tool calls; at most {MAX_PARALLEL} per turn")
        for c in d.calls:
            if c.error:
                reasons.append(f"turn {i + 1}: {c.error}")
            elif c.name in (RETRIEVE, CURATE):
                n_memory_calls += 1
        n_answers = seg.lower().count("<answer>")
        if not last:
            if not d.calls:
                reasons.append(f"turn {i + 1}: no tool call before the final turn")
            if n_answers:
                reasons.append(f"turn {i + 1}: an answer before the final turn")
            continue
        if d.calls:
            reasons.append(f"turn {i + 1}: tool call in the final turn")
        if n_answers != 1:
            reasons.append(f"final turn has {n_answers} <answer> blocks, expected exactly 1")
        elif not (d.answer or "").strip():
            reasons.append("the final <answer> is empty")
        elif not seg.rstrip().lower().endswith("</answer>"):
            reasons.append("output after the final </answer>")
    if n_memory_calls == 0:
        reasons.append("no memory call (retrieve_memory or runtime_memory)")
    if tool_errors:
        reasons.append(f"{tool_errors} tool execution error(s)")
    return GateResult(not reasons, reasons)

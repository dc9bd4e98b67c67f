"""MemPilot's resource accounting at run time, as pure functions (arXiv 2610.06830).

- policy cost with ideal KV-prefix reuse + delegate cost ............ :func:`trajectory_cost_usd` (Eq. 14)
- latency proxy: policy segments + max per parallel stage, summed ... :func:`trajectory_latency_s` (Eq. 15-19)
- the format gate ................................................... :func:`format_gate` (Eq. 20)

Units: USD, seconds, tokens. The rewards and advantages built on these live in
:mod:`memfrontier.train.mempilot_reward`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...core.cost import trajectory_proxy_s
from ...core.pricebook import LatencyProfile, ModelPrice
from .protocol import CURATE, MAX_PARALLEL, RETRIEVE, parse_turn, tag_balance_errors

# ----------------------------------------------------------------------------- Eq. 14-19


@dataclass(frozen=True)
class PolicySegment:
    """One orchestrator generation as charged under ideal KV-prefix reuse (MemPilot App. A.1):
    ``input_tokens`` is the whole initial prompt for the first segment and only the newly
    appended environment tokens (tool observations) for later ones; ``output_tokens`` its output."""

    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ExternalCall:
    """One delegated model call. ``stage`` names its parallel stage (calls issued in one policy
    turn share it). ``exact_usd`` (the provider's reported cost) replaces the token estimate."""

    stage: str
    price: ModelPrice
    input_tokens: int
    output_tokens: int
    images: int = 0
    exact_usd: float | None = None


def kv_prefix_segments(prompt_tokens: int, output_tokens: Sequence[int], appended_tokens: Sequence[int]) -> list[PolicySegment]:
    """Charged segments of a trajectory (Eq. 14 accounting).

    ``prompt_tokens``: the initial prompt; ``output_tokens[t]``: what generation t produced;
    ``appended_tokens[t-1]``: environment tokens appended between generation t-1 and t (so
    ``len(appended_tokens) == len(output_tokens) - 1``). Raises ValueError on a length mismatch or a
    negative count.
    """
    if len(appended_tokens) != max(len(output_tokens) - 1, 0):
        raise ValueError(f"need one appended-token count between consecutive generations: "
                         f"{len(output_tokens)} generations, {len(appended_tokens)} counts")
    if prompt_tokens < 0 or any(n < 0 for n in output_tokens) or any(n < 0 for n in appended_tokens):
        raise ValueError("token counts must be >= 0")
    ins = [prompt_tokens, *appended_tokens][: len(output_tokens)]
    return [PolicySegment(int(i), int(o)) for i, o in zip(ins, output_tokens)]


def policy_cost_usd(segments: Sequence[PolicySegment], price: ModelPrice) -> float:
    """C_pi = 1e-6 * sum_s (p_in n_in_s + p_out n_out_s), USD (Eq. 14, first line)."""
    return 1e-6 * sum(price.input_usd_per_mtok * s.input_tokens + price.output_usd_per_mtok * s.output_tokens
                      for s in segments)


def external_cost_usd(calls: Sequence[ExternalCall]) -> float:
    """C_ext = sum over delegated calls of the provider's exact cost or 1e-6 (p_in n_in + p_out n_out), USD (Eq. 14)."""
    return sum(c.exact_usd if c.exact_usd is not None else c.price.usd(c.input_tokens, c.output_tokens) for c in calls)


def trajectory_cost_usd(segments: Sequence[PolicySegment], policy_price: ModelPrice, calls: Sequence[ExternalCall]) -> float:
    """C(tau) = C_pi + C_ext, USD (Eq. 8 / Eq. 14)."""
    return policy_cost_usd(segments, policy_price) + external_cost_usd(calls)


def call_latency_s(call: ExternalCall, fallback: LatencyProfile | None = None) -> float:
    """L_c = b + a_in n_in + a_out n_out + a_img n_img seconds for one delegated call (Eq. 17).
    Raises ValueError when the model has no latency profile and no ``fallback`` is given."""
    profile = call.price.latency or fallback
    if profile is None:
        raise ValueError("the delegated model has no latency profile and no fallback was given")
    return profile.seconds(call.input_tokens, call.output_tokens, call.images)


def trajectory_latency_s(segments: Sequence[PolicySegment], policy_profile: LatencyProfile,
                         calls: Sequence[ExternalCall], fallback: LatencyProfile | None = None) -> float:
    """L(tau) = sum_s L_pi,s (Eq. 15-16) + sum_t max_{c in stage t} L_c (Eq. 18), seconds (Eq. 19).

    Policy segments run one after another (each its own stage); calls sharing ``stage`` count
    as their maximum.
    """
    stages = [(f"policy-{i}", policy_profile.seconds(s.input_tokens, s.output_tokens)) for i, s in enumerate(segments)]
    stages += [(f"ext-{c.stage}", call_latency_s(c, fallback)) for c in calls]
    return trajectory_proxy_s(stages)


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

"""MemPilot accounting and rewards (Eq. 9-10, 12-20) with hand-computed values."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from fakes import ScriptedClient

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Preference
from memfrontier.llm.base import Completion
from memfrontier.llm.metered import MeteredLLM
from memfrontier.strategies.mempilot.accounting import format_gate
from memfrontier.strategies.mempilot.protocol import (
    decision_schema,
    parse_turn,
    render_decision,
    validate_call,
)
from memfrontier.train.mempilot_reward import (
    Rewards,
    decoupled_advantages,
    group_normalize,
    marginal_credit,
    task_reward,
)

BOOK = PriceBook.load()
POLICY_ID = "qwen3-4b-instruct-2507"  # 0.05 / 0.25 USD per Mtok; (0.332, 3e-6, 6.64e-3)
L8B_ID = "meta-llama/llama-3.1-8b-instruct"  # 0.05 / 0.08; (0.439, 3.6e-5, 4.99e-3)
L3B_ID = "meta-llama/llama-3.2-3b-instruct"  # 0.05 / 0.33; (1.231, 4.8e-5, 5.54e-3)
VL8B_ID = "qwen/qwen3-vl-8b-instruct"  # 0.117 / 0.455; (0.332, 3e-6, 6.64e-3, 0.225)
MODELS = {"model_5e1c", "model_b791"}


# ----------------------------------------------------------------------------- Eq. 14


def _metered(model_id: str, reply: Completion) -> MeteredLLM:
    """``model_id`` (priced by the book) answering ``reply`` with its reported token counts."""
    return MeteredLLM(ScriptedClient([reply], model_id=model_id), BOOK)


def _completion(model_id: str, n_in: int, n_out: int, images: int = 0, exact_usd: float | None = None) -> Completion:
    return Completion(
        text="ok", model_id=model_id, input_tokens=n_in, output_tokens=n_out, images=images, exact_usd=exact_usd
    )


MSG = [{"role": "user", "content": "x"}]


def _policy_turns(ledger: Ledger) -> None:
    """Three policy generations (50, 40, 20 tokens) over a 1000-token prompt with 300 then 200
    observation tokens appended: prompts of 1000, 1350 and 1590 tokens, of which only the newly
    appended part is charged (KV-prefix reuse, App. A.1)."""
    for prompt, new, out in ((1000, None, 50), (1350, 300, 40), (1590, 200, 20)):
        llm = _metered(POLICY_ID, _completion(POLICY_ID, prompt, out))
        asyncio.run(llm.complete(MSG, role="policy", new_input_tokens=new))


def test_kv_prefix_cost_three_turns():
    ledger = Ledger()
    with use_ledger(ledger, "query"):
        _policy_turns(ledger)
    policy = [c for c in ledger.calls if c.role == "policy"]
    assert [(c.input_tokens, c.cached_tokens, c.output_tokens) for c in policy] == [
        (1000, 0, 50),
        (1350, 1050, 40),
        (1590, 1390, 20),
    ]
    # C_pi = 1e-6 * (0.05 * (1000 + 300 + 200) + 0.25 * (50 + 40 + 20)) = 1e-6 * (75 + 27.5)
    assert sum(c.usd for c in policy) == pytest.approx(1.025e-4)
    # without prefix reuse the 2nd and 3rd prompts (1350 and 1590 tokens) would be charged in full
    naive = 1e-6 * (0.05 * (1000 + 1350 + 1590) + 0.25 * 110)
    assert sum(c.usd for c in policy) < naive
    with use_ledger(ledger, "query"):
        asyncio.run(_metered(L8B_ID, _completion(L8B_ID, 800, 100)).complete(MSG, role="delegate"))  # 4.8e-5
        # the provider's exact cost wins over the token estimate
        asyncio.run(_metered(L3B_ID, _completion(L3B_ID, 500, 50, exact_usd=1e-3)).complete(MSG, role="delegate"))
    # C(tau) = C_pi + C_ext (Eq. 8 / Eq. 14); 1e-6 * (0.05 * 800 + 0.08 * 100) = 4.8e-5
    assert ledger.usd() == pytest.approx(1.025e-4 + 4.8e-5 + 1e-3)


def test_kv_prefix_charges_nothing_below_zero_or_above_the_prompt():
    ledger = Ledger()
    with use_ledger(ledger, "query"):
        for new in (-5, 5000):  # clamped to [0, prompt]: 0 then all 1000 prompt tokens charged
            asyncio.run(
                _metered(POLICY_ID, _completion(POLICY_ID, 1000, 10)).complete(MSG, role="policy", new_input_tokens=new)
            )
    a, b = ledger.calls
    assert (a.cached_tokens, b.cached_tokens) == (1000, 0)
    assert a.usd == pytest.approx(1e-6 * 0.25 * 10) and b.usd == pytest.approx(1e-6 * (0.05 * 1000 + 0.25 * 10))


# ----------------------------------------------------------------------------- Eq. 15-19


def _delegates(ledger: Ledger, stages: list[list[tuple[str, int, int, int]]]) -> None:
    """Delegated calls (model, n_in, n_out, images), one parallel stage per inner list."""

    async def stage(calls):
        with ledger.parallel():
            await asyncio.gather(
                *(_metered(m, _completion(m, i, o, img)).complete(MSG, role="delegate") for m, i, o, img in calls)
            )

    for calls in stages:
        asyncio.run(stage(calls))


def test_latency_with_parallel_stage():
    # policy (Eq. 15-16): 0.332 + 3e-6 n_in + 6.64e-3 n_out, on the charged (appended) input only
    pol = (0.332 + 0.003 + 0.332) + (0.332 + 0.0009 + 0.2656) + (0.332 + 0.0006 + 0.1328)
    assert pol == pytest.approx(1.7309)
    calls = [
        (L8B_ID, 800, 100, 0),  # 0.439 + 0.0288 + 0.499 = 0.9668
        (VL8B_ID, 1000, 200, 2),  # 0.332 + 0.003 + 1.328 + 0.45 = 2.113 (max of stage 1)
        (L3B_ID, 500, 50, 0),
    ]  # 1.231 + 0.024 + 0.277 = 1.532
    ledger = Ledger()
    with use_ledger(ledger, "query"):
        _policy_turns(ledger)
        _delegates(ledger, [calls[:2], calls[2:]])
    assert sorted(round(c.proxy_s, 4) for c in ledger.calls if c.role == "delegate") == [0.9668, 1.532, 2.113]
    # Eq. 18-19: a stage counts as its slowest call; stages add
    assert ledger.proxy_s() == pytest.approx(1.7309 + 2.113 + 1.532)
    # sequential (each call its own stage) would add instead of max
    seq = Ledger()
    with use_ledger(seq, "query"):
        _policy_turns(seq)
        _delegates(seq, [[c] for c in calls])
    assert seq.proxy_s() == pytest.approx(1.7309 + 0.9668 + 2.113 + 1.532)


# ----------------------------------------------------------------------------- Eq. 20


def _call(name, **args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


RET = _call("retrieve_memory", retrieval_query="Lena dress options", evidence_count=3)
CUR = _call(
    "runtime_memory",
    retrieval_query="Lena dress",
    evidence_count=2,
    instruction="List the two dress types she considered",
    model="model_5e1c",
    include_images=False,
)


def test_format_gate_valid_trajectory():
    g = format_gate([RET + "\n" + CUR, "<answer>a red dress</answer>"], MODELS)
    assert g.valid and g.reasons == []
    assert task_reward(0.6, g.valid) == 0.6


@pytest.mark.parametrize(
    "segments, tool_errors, reason",
    [
        (["<answer>x</answer>"], 0, "no memory call"),
        ([RET, "<answer>x</answer><answer>y</answer>"], 0, "2 <answer> blocks"),
        ([RET, "<answer>x</answer> more"], 0, "output after"),
        ([RET, "<answer>  </answer>"], 0, "empty"),
        ([RET, "<answer>x"], 0, "unbalanced <answer>"),
        (
            [
                '<tool_call>{"name": "retrieve_memory", "arguments": {"retrieval_query": "q",}}</tool_call>',
                "<answer>x</answer>",
            ],
            0,
            "not valid JSON",
        ),
        (
            [
                _call(
                    "runtime_memory",
                    retrieval_query="q",
                    evidence_count=1,
                    instruction="i",
                    model="gpt-x",
                    include_images=False,
                ),
                "<answer>x</answer>",
            ],
            0,
            "unknown model",
        ),
        (
            [_call("retrieve_memory", retrieval_query="<answer>x</answer>", evidence_count=1), "<answer>x</answer>"],
            0,
            "must not contain an <answer>",
        ),
        (
            [
                _call(
                    "runtime_memory",
                    retrieval_query="q",
                    evidence_count=1,
                    instruction="i" * 513,
                    model="model_5e1c",
                    include_images=False,
                ),
                "<answer>x</answer>",
            ],
            0,
            "limit is 512",
        ),
        ([_call("retrieve_memory", retrieval_query="q"), "<answer>x</answer>"], 0, "missing required"),
        ([RET, "<answer>x</answer>"], 1, "tool execution error"),
        (["<answer>x</answer>", RET, "<answer>y</answer>"], 0, "answer before the final turn"),
        ([RET, RET + "<answer>x</answer>"], 0, "tool call in the final turn"),
        ([], 0, "empty trajectory"),
    ],
)
def test_format_gate_invalid(segments, tool_errors, reason):
    g = format_gate(segments, MODELS, tool_errors=tool_errors)
    assert not g.valid
    assert any(reason in r for r in g.reasons), g.reasons
    assert task_reward(0.9, g.valid) == -1.0


def test_validate_call_clamps_evidence_count():
    args, err, clamped = validate_call("retrieve_memory", {"retrieval_query": "q", "evidence_count": 9}, MODELS)
    assert err is None and clamped and args["evidence_count"] == 5
    _, err, _ = validate_call("retrieve_memory", {"retrieval_query": "q", "evidence_count": 0}, MODELS)
    assert "evidence_count must be >= 1" in err
    _, err, _ = validate_call(
        "runtime_memory",
        {
            "retrieval_query": "q",
            "evidence_count": 0,
            "instruction": "i",
            "model": "model_b791",
            "include_images": True,
        },
        MODELS,
    )
    assert err is None  # 0 = question image only


def test_render_and_parse_decision_roundtrip():
    text = render_decision(
        {"tool_calls": [{"name": "retrieve_memory", "arguments": {"retrieval_query": "q", "evidence_count": 2}}]}
    )
    d = parse_turn(text, MODELS)
    assert d.calls[0].name == "retrieve_memory" and d.calls[0].args == {"retrieval_query": "q", "evidence_count": 2}
    assert render_decision({"answer": " Paris "}) == "<answer>Paris</answer>"
    assert render_decision({"foo": 1}) is None
    schema = decision_schema(["model_b", "model_a"], ["runtime_memory", "retrieve_memory"])
    items = schema["anyOf"][0]["properties"]["tool_calls"]["items"]["anyOf"]
    assert [i["properties"]["name"]["const"] for i in items] == ["runtime_memory", "retrieve_memory"]
    assert items[0]["properties"]["arguments"]["properties"]["model"]["enum"] == ["model_b", "model_a"]
    assert decision_schema([], [], allow_tools=False)["required"] == ["answer"]


# ----------------------------------------------------------------------------- Eq. 9-10


def test_decoupled_advantages_group_of_four():
    group = [Rewards(1.0, 3.0, 2.0), Rewards(0.0, 1.0, 2.0), Rewards(0.5, 1.0, 4.0), Rewards(0.5, 3.0, 4.0)]
    # Eq. 9 (unbiased std): A^Q = [√6/2, -√6/2, 0, 0]; A^C (r = -cost) = [-√3/2, √3/2, √3/2, -√3/2];
    # A^L (r = -latency) = [√3/2, √3/2, -√3/2, -√3/2]
    s6, s3 = math.sqrt(6) / 2, math.sqrt(3) / 2
    assert group_normalize([1.0, 0.0, 0.5, 0.5]) == pytest.approx([s6, -s6, 0, 0], abs=1e-5)
    # Eq. 10, balanced lambda = (1, 0.5, 0.5): A_bar = [√6/2, -√6/2 + √3/2, 0, -√3/2] (mean 0)
    bar = [s6, -s6 + s3, 0.0, -s3]
    std = math.sqrt(sum(b * b for b in bar) / 3)  # 0.890446
    assert std == pytest.approx(0.890446, abs=1e-6)
    adv = decoupled_advantages([group], Preference.preset("balanced"))
    assert adv[0] == pytest.approx([b / std for b in bar], abs=1e-5)
    assert adv[0] == pytest.approx([1.375429, -0.402854, 0.0, -0.972575], abs=1e-5)
    # perf preference ignores cost and latency: A = A^Q normalised over the batch = A^Q / std(A^Q)
    perf = decoupled_advantages([group], Preference.preset("perf"))
    assert perf[0] == pytest.approx([s6 / 1.0, -s6, 0, 0], abs=1e-5)


def test_decoupled_advantages_mask_invalid_resources():
    # an invalid trajectory gets r_task = -1 and no resource advantage, and is left out of their stats
    g = [Rewards(1.0, 1.0, 1.0), Rewards(0.0, 3.0, 1.0), Rewards(0.7, 0.1, 0.1, valid=False), Rewards(0.0, 2.0, 3.0)]
    assert group_normalize([-1.0, -3.0, -0.1, -2.0], [True, True, False, True]) == pytest.approx(
        [1, -1, 0, 0], abs=1e-5
    )
    lat = group_normalize([-1.0, -1.0, -0.1, -3.0], [True, True, False, True])
    assert lat == pytest.approx([1 / math.sqrt(3), 1 / math.sqrt(3), 0, -2 / math.sqrt(3)], abs=1e-5)
    cost_only = Preference(quality=0.0, cost=1.0, latency=0.0)
    adv = decoupled_advantages([g], cost_only)[0]
    # A_bar = [1, -1, 0, 0] -> batch std sqrt(2/3)
    assert adv == pytest.approx([1 / math.sqrt(2 / 3), -1 / math.sqrt(2 / 3), 0, 0], abs=1e-5)
    q_only = decoupled_advantages([g], Preference.preset("perf"))[0]
    # r_task = [1, 0, -1, 0] -> A^Q = [√1.5, 0, -√1.5, 0], already unit std
    assert q_only == pytest.approx([math.sqrt(1.5), 0, -math.sqrt(1.5), 0], abs=1e-5)


def test_group_normalize_degenerate():
    assert group_normalize([0.3, 0.3, 0.3, 0.3]) == [0.0] * 4
    assert group_normalize([1.0, 2.0], [True, False]) == [0.0, 0.0]
    with pytest.raises(ValueError):
        group_normalize([1.0], [True, False])


# ----------------------------------------------------------------------------- Eq. 12-13


def test_marginal_credit_two_stages():
    # u_0 = 0 (no evidence), u_1 = 0.5 after stage 1, u_2 = 0.25 after stage 2; eta = 0.5
    adv = marginal_credit(10, 0.3, [(0, 4), (5, 8)], [0.0, 0.5, 0.25])
    assert adv == pytest.approx([0.55] * 4 + [0.3] + [0.175] * 3 + [0.3] * 2)


def test_marginal_credit_unchanged_cases():
    base = [0.3] * 6
    assert marginal_credit(6, 0.3, [(0, 2)], [0.0, 1.0], valid=False) == base
    assert marginal_credit(6, 0.3, [(0, 2)], [None, 1.0]) == base  # a probe failed
    assert marginal_credit(6, 0.3, [], [0.4]) == base  # no stage
    with pytest.raises(ValueError, match="probe scores"):
        marginal_credit(6, 0.3, [(0, 2)], [0.0])
    with pytest.raises(ValueError, match="outside"):
        marginal_credit(6, 0.3, [(4, 9)], [0.0, 1.0])

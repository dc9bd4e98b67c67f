"""MemPilot training: token advantages (Eq. 13), the clipped PG + KL loss (Eq. 11), schema-guided
decoding, the sweep report, the CLI flags, and (slow) a CPU smoke GRPO run whose adapter loads."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import torch
from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.core.types import Question
from memfrontier.strategies.mempilot.policy import Generation, HFPolicy, SchemaError
from memfrontier.strategies.mempilot.protocol import (
    decision_schema,
    parse_turn,
    render_decision,
)
from memfrontier.train.mempilot_reward import Rewards
from memfrontier.train.mempilot_trainer import Rollout, pg_token_loss, token_advantages

Q = Question(id="q", conversation_id="c", question="?", answer="x", category="1")


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _gen(n: int) -> Generation:
    return Generation([1, 2], list(range(n)), [True] * n)


def test_token_advantages_follow_stage_spans():
    r = Rollout(
        Q,
        [_gen(4), _gen(3), _gen(2)],
        stage_turns=[0, 1],
        rewards=Rewards(0.5, 1e-4, 2.0),
        gate_reasons=[],
        probes=[0.0, 0.5, 0.25],
        advantage=0.3,
    )
    # turn 0 launched stage 1 (+0.5 * 0.5), turn 1 stage 2 (+0.5 * -0.25), the answer turn keeps A
    assert token_advantages(r, 0.5) == pytest.approx([0.55] * 4 + [0.175] * 3 + [0.3] * 2)
    r.probes = []  # no probes (e.g. not run): unchanged
    assert token_advantages(r, 0.5) == pytest.approx([0.3] * 9)
    r.probes, r.rewards = [0.0, 0.5, 0.25], Rewards(0.5, 1e-4, 2.0, valid=False)
    assert token_advantages(r, 0.5) == pytest.approx([0.3] * 9)


def test_pg_token_loss_hand_values():
    lp = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.25]))
    old = torch.log(torch.tensor([0.5, 0.5 / 1.5, 0.5 / 1.5, 0.25]))  # ratios 1, 1.5, 1.5, 1
    ref = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.5]))  # ref / pi = 1, 1, 1, 2
    adv = torch.tensor([1.0, 1.0, -1.0, 0.0])
    loss, kl = pg_token_loss(lp, old, ref, adv, clip=0.2, beta=0.001)
    # -min(rho A, clip(rho) A): ratio 1 -> -1; 1.5 with A=1 -> clipped 1.2 -> -1.2; with A=-1 -> min(-1.5, -1.2) -> 1.5
    k3 = 2 - math.log(2) - 1  # exp(d) - d - 1 with d = ln 2
    assert kl.tolist() == pytest.approx([0, 0, 0, k3], abs=1e-6)
    assert loss.tolist() == pytest.approx([-1.0, -1.2, 1.5, 0.001 * k3], abs=1e-6)


def test_completion_logp_scores_each_completion_token_at_the_position_before_it():
    # A small Gemma 3 (the policy's architecture) with random weights: the log-probabilities read
    # from the last n + 1 positions only must be those of a full forward, position P - 1 + k for
    # completion token k, and carry gradient.
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from memfrontier.train.mempilot_trainer import _completion_logp

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=4,
        max_position_embeddings=64,
        initializer_range=0.5,
    )
    lm = Gemma3ForCausalLM(cfg).eval()
    g = Generation([1, 5, 9, 12, 30, 31, 40], [7, 3, 20], [True, False, True])
    got = _completion_logp(lm, g)
    full = torch.log_softmax(lm(input_ids=torch.tensor([g.prompt_ids + g.completion_ids])).logits[0].float(), -1)
    want = torch.stack([full[6, 7], full[7, 3], full[8, 20]])
    assert got.shape == (3,) and torch.allclose(got, want, atol=1e-5)
    assert float(want.detach().std()) > 0.01  # the positions differ: reading the wrong ones would show
    got.sum().backward()
    assert lm.lm_head.weight.grad is not None or lm.model.embed_tokens.weight.grad is not None


# ----------------------------------------------------------------------------- schema-guided decoding


class CharTokenizer:
    """A char-level tokenizer (ids 0..2 special) for control-flow tests of the decoder."""

    bos_token_id, eos_token_id, pad_token_id = 0, 1, 2
    all_special_ids = [0, 1, 2]
    chars = [chr(c) for c in range(32, 127)] + ["\n"]

    def __len__(self):
        return 3 + len(self.chars)

    def __call__(self, text, add_special_tokens=True):
        ids = [3 + self.chars.index(ch) for ch in text if ch in self.chars]
        return {"input_ids": ([self.bos_token_id] if add_special_tokens else []) + ids}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.chars[i - 3] for i in ids if i >= 3)

    def batch_decode(self, seqs):
        return [self.decode(s) for s in seqs]


class RandomLM(torch.nn.Module):
    """Random logits (seeded): every sampled token is arbitrary, so only the schema keeps the JSON valid."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.g = torch.Generator().manual_seed(7)
        self.generation_config = None

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, input_ids, cache=None, use_cache=True, logits_to_keep=1):
        class Out:
            pass

        o = Out()
        o.logits = torch.randn(1, input_ids.shape[1], self.vocab, generator=self.g)
        o.cache = None
        return o


def test_schema_guided_decoding_is_always_valid():
    tok = CharTokenizer()
    pol = HFPolicy(RandomLM(len(tok)), tok, seed=3)
    pol.recording = True
    models = ["model_a1", "model_b2"]
    schema = decision_schema(models, ["runtime_memory", "retrieve_memory"])
    for i in range(12):
        out = asyncio.run(
            pol.complete([{"role": "user", "content": "q"}], max_tokens=400, temperature=1.0, json_schema=schema)
        )
        obj = json.loads(out.text)
        d = parse_turn(render_decision(obj), set(models))
        assert (d.answer is not None) != bool(d.calls)
        assert all(c.error is None for c in d.calls), [c.error for c in d.calls]
        assert len(d.calls) <= 2
    g = pol.generations[-1]
    assert len(g.sampled) == len(g.completion_ids) and any(g.sampled) and not all(g.sampled)
    assert g.prompt_ids[0] == tok.bos_token_id
    # out of budget: the value is still closed (complete JSON), strings cut short
    short = asyncio.run(
        pol.complete([{"role": "user", "content": "q"}], max_tokens=5, temperature=1.0, json_schema=schema)
    )
    assert isinstance(json.loads(short.text), dict)
    ans = asyncio.run(
        pol.complete(
            [{"role": "user", "content": "q"}],
            max_tokens=60,
            temperature=0.0,
            json_schema=decision_schema([], [], allow_tools=False),
        )
    )
    assert set(json.loads(ans.text)) == {"answer"}
    with pytest.raises(SchemaError):
        asyncio.run(pol.complete([{"role": "user", "content": "q"}], json_schema={"type": "number"}))


# ----------------------------------------------------------------------------- sweep report


def _write_run(folder, rows):
    folder.mkdir(parents=True)
    with (folder / "predictions.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _row(f1, usd, proxy, routes, valid=True):
    return {
        "f1": f1,
        "usd": usd,
        "proxy_s": proxy,
        "gold": "red dress",
        "strategy_meta": {
            "rounds": 2,
            "routes": routes,
            "route_models": {r: "m-" + r for r in routes},
            "delegate_calls": len(routes),
            "image_accesses": 0,
            "image_requests": 1,
            "retrieve_calls": 1,
            "curate_calls": len(routes),
            "format_valid": valid,
            "policy_answer": "red",
        },
    }


def test_sweep_report_tables_and_pareto(tmp_path):
    from memfrontier.eval.sweeps.mempilot import (
        pareto_front,
        plan_mempilot_sweep,
        write_mempilot_report,
    )

    runs = plan_mempilot_sweep(["perf", "cost", {"quality": 1, "cost": 2, "latency": 0}], options={"pool": "local"})
    assert [r.name for r in runs] == ["pref_perf", "pref_cost", "pref_w_1_2_0"] and runs[1].order == 1.25
    _write_run(tmp_path / "pref_perf", [_row(0.6, 3e-4, 4.0, ["m1", "m1"]), _row(0.4, 1e-4, 2.0, ["m2"])])
    _write_run(tmp_path / "pref_cost", [_row(0.2, 1e-4, 1.0, []), _row(0.2, 1e-4, 1.0, ["m2"], valid=False)])
    results = [
        {"name": r.name, "label": r.label, "options": r.options, "out": str(tmp_path / r.name)} for r in runs[:2]
    ]
    written = write_mempilot_report(results, tmp_path, "locomo")
    md = (tmp_path / "sweep.md").read_text()
    # perf: F1 0.5, USD 2e-4 -> 2.0 x1e4, proxy 3 s, 1.5 delegate calls; routes m1 2/3, m2 1/3
    assert "| perf | untrained | 2 | 0.5000 | - | 2.0000 | 3.0000 | 1.5000 |" in md
    assert "| cost | untrained | 2 | 0.2000 | - | 1.0000 | 1.0000 | 0.5000 |" in md
    assert "| perf | 0.67 | 0.33 |" in md and "| cost | 0.00 | 1.00 |" in md
    assert (tmp_path / "model_share.csv").read_text().splitlines()[1] == "perf,0.6667,0.3333"
    assert written["pareto_cost"].stat().st_size > 0 and written["pareto_latency"].stat().st_size > 0
    pts = [{"x": 1, "y": 0.2}, {"x": 2, "y": 0.5}, {"x": 3, "y": 0.4}, {"x": 1, "y": 0.1}]
    assert pareto_front(pts, "x", "y") == [{"x": 1, "y": 0.2}, {"x": 2, "y": 0.5}]


# ----------------------------------------------------------------------------- CLI


def test_cli_mempilot_flags_are_checked():
    r = CliRunner().invoke(app, ["eval", "--strategy", "rag", "--set", "preference=cost"])
    assert r.exit_code == 2 and "unknown key 'preference'; keys: k, retrievers" in r.output
    r = CliRunner().invoke(app, ["eval", "--strategy", "mempilot", "--set", "preference=fast"])
    assert r.exit_code == 2 and "unknown preference preset" in r.output
    r = CliRunner().invoke(app, ["eval", "--strategy", "mempilot", "--set", "preference.quality=x"])
    assert r.exit_code == 2 and "preference" in r.output and "'x'" in r.output
    r = CliRunner().invoke(app, ["eval", "--strategy", "mempilot", "--set", "answer_mode=x"])
    assert r.exit_code == 2 and "unknown answer_mode 'x'" in r.output
    r = CliRunner().invoke(app, ["train", "orchestrator", "--preference", "fast"])
    assert r.exit_code == 2 and "unknown preference preset" in r.output


# ----------------------------------------------------------------------------- smoke GRPO (slow)


@pytest.mark.slow
@pytest.mark.data
def test_smoke_grpo_run_saves_an_adapter_the_strategy_loads(tmp_path):
    from memfrontier.strategies import get_strategy
    from memfrontier.train.mempilot_trainer import (
        OrchestratorGRPOConfig,
        train_orchestrator,
    )

    torch.set_num_threads(2)
    # smoke sizes: short observations and probes keep the prompts (and so every forward) short
    cfg = OrchestratorGRPOConfig(
        steps=1,
        group_size=2,
        max_rounds=2,
        sessions=1,
        policy_max_tokens=64,
        max_observation_tokens=64,
        probe_max_tokens=8,
        out=tmp_path / "orch",
        lr=1e-4,
    )
    summary = asyncio.run(train_orchestrator(cfg))
    adapter = tmp_path / "orch" / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    (row,) = [json.loads(x) for x in (tmp_path / "orch" / "train_log.jsonl").read_text().splitlines()]
    assert row["rollouts"] == 2 and row["sampled_tokens"] > 0 and len(row["advantages"]) == 2
    assert summary["lora_delta_l2"] > 0  # the update moved the LoRA weights
    strat = get_strategy("mempilot", adapter=adapter)
    policy = strat.policy(None)
    assert isinstance(policy, HFPolicy) and policy.model_id.endswith("+orch/adapter")
    out = asyncio.run(
        policy.complete(
            [{"role": "user", "content": "Question: what colour? Answer in JSON."}],
            max_tokens=24,
            json_schema=decision_schema([], [], allow_tools=False),
        )
    )
    assert set(json.loads(out.text)) == {"answer"}

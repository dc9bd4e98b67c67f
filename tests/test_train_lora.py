"""LoRA training for MemoryCPT: LoRA-A SFT (QAD, Eq. 9), LoRA-B GRPO (QAR, Eq. 13) and the
transformers backend that serves their outputs (HFLLM).

Fast tests cover the ShareGPT conversion and input validation, the reward adapter and the LoRA
delta norm. Slow tests load the packaged Gemma 3 270M GGUF through transformers ONCE (module
fixture, tens of seconds on two cores; trainers and adapters work on deep copies of it) and run real
smoke-scale training with TRL + PEFT on the CPU.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time

import pytest
import torch

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.eval.metrics import token_f1
from memfrontier.llm import ChatClient, make_llm
from memfrontier.llm.hf import HFLLM, default_model_id, load_causal_lm
from memfrontier.llm.local_models import MODEL_ID
from memfrontier.llm.prompt_format import render_prompt
from memfrontier.train.configs import QADConfig
from memfrontier.train.cost_reward import SummaryCostModel
from memfrontier.train.grpo import make_reward_func, prompt_text, train_grpo
from memfrontier.train.lora_common import lora_config, lora_delta_l2, lora_snapshot
from memfrontier.train.lora_sft import (
    SFTDataError,
    load_sharegpt,
    sharegpt_to_prompt_completion,
    split_train_val,
    tokenize_sample,
    train_lora_sft,
)


def run(coro):
    return asyncio.run(coro)


def seg_sample(i: int, *, system: bool = True, words: int = 0) -> dict:
    """A tiny BatchSegmenter-style ShareGPT sample (rationale then JSON)."""
    turns = f"[0] Alice: I adopted a dog named Max{i}.\n[1] Bob: Nice! What breed?\n[2] Alice: A beagle."
    if words:
        turns += " " + " ".join(f"filler{k}" for k in range(words))
    conv = [
        {"from": "human", "value": f"Turns:\n{turns}"},
        {
            "from": "gpt",
            "value": f"<think>All turns discuss the dog Max{i}.</think>\n"
            f'{{"segments": [{{"turns": [0, 1, 2], "topic": "dog Max{i}"}}]}}',
        },
    ]
    if system:
        conv.insert(0, {"from": "system", "value": "You group conversation turns by topic. Reply with JSON."})
    return {"role": "segmenter", "conversations": conv, "meta": {"i": i}}


def write_jsonl(path, objs, extra_lines=()):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs) + "".join(extra_lines), "utf-8")
    return path


# --- fast: ShareGPT conversion and validation -------------------------------------------------
def test_sharegpt_to_prompt_completion_uses_render_prompt():
    s = {
        "role": "segmenter",
        "conversations": [
            {"from": "system", "value": "S "},
            {"from": "human", "value": " U"},
            {"from": "gpt", "value": "<think>r</think>\n{}"},
        ],
    }
    assert sharegpt_to_prompt_completion(s) == {
        "prompt": "S\n\nU\n\n",
        "completion": "<think>r</think>\n{}",
        "role": "segmenter",
    }
    no_sys = {"conversations": [{"from": "human", "value": "U"}, {"from": "gpt", "value": "y"}]}
    assert sharegpt_to_prompt_completion(no_sys) == {"prompt": "U\n\n", "completion": "y", "role": ""}
    # an earlier gpt turn is part of the prompt, rendered as an assistant message
    multi = {
        "conversations": [
            {"from": "human", "value": "U1"},
            {"from": "gpt", "value": "A1"},
            {"from": "human", "value": "U2"},
            {"from": "gpt", "value": "A2"},
        ]
    }
    out = sharegpt_to_prompt_completion(multi)
    assert (
        out["prompt"]
        == "U1\n\nA1\n\nU2\n\n"
        == render_prompt(
            [
                {"role": "user", "content": "U1"},
                {"role": "assistant", "content": "A1"},
                {"role": "user", "content": "U2"},
            ]
        )
    )
    assert out["completion"] == "A2"


@pytest.mark.parametrize(
    "sample, reason",
    [
        ([1, 2], "expected a JSON object"),
        ({"conversations": []}, "non-empty list"),
        ({"conversations": [{"from": "bot", "value": "x"}]}, "'from' must be one of"),
        ({"conversations": [{"from": "human", "value": 3}]}, "'value' must be a string"),
        (
            {
                "conversations": [
                    {"from": "human", "value": "u"},
                    {"from": "system", "value": "s"},
                    {"from": "gpt", "value": "y"},
                ]
            },
            "system turn must come first",
        ),
        ({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "u"}]}, "last turn must be"),
        ({"conversations": [{"from": "human", "value": "u"}, {"from": "gpt", "value": "  "}]}, "target is empty"),
        ({"conversations": [{"from": "system", "value": "s"}, {"from": "gpt", "value": "y"}]}, "no 'human' turn"),
    ],
)
def test_sharegpt_validation_errors(sample, reason):
    with pytest.raises(SFTDataError, match=reason):
        sharegpt_to_prompt_completion(sample)


def test_load_sharegpt_names_file_and_line(tmp_path):
    good = write_jsonl(tmp_path / "a.jsonl", [seg_sample(0), seg_sample(1, system=False)], ["\n", "   \n"])
    rows = load_sharegpt([good])
    assert len(rows) == 2 and rows[0]["role"] == "segmenter"
    assert rows[1]["prompt"].startswith("Turns:\n[0] Alice: I adopted a dog named Max1.")
    bad_json = write_jsonl(tmp_path / "b.jsonl", [seg_sample(0)], ["\n", "{not json\n"])
    with pytest.raises(SFTDataError, match=r"b\.jsonl:3: not JSON"):
        load_sharegpt([good, bad_json])
    bad_sample = write_jsonl(tmp_path / "c.jsonl", [seg_sample(0), {"conversations": "x"}])
    with pytest.raises(SFTDataError, match=r"c\.jsonl:2: 'conversations' must be a non-empty list"):
        load_sharegpt([bad_sample])
    with pytest.raises(FileNotFoundError):
        load_sharegpt([tmp_path / "missing.jsonl"])


def test_split_train_val_sizes_and_determinism():
    items = list(range(6))
    train, val = split_train_val(items, 0.1, seed=13)
    assert len(val) == 1 and len(train) == 5 and sorted(train + val) == items  # round(0.6) = 1
    assert split_train_val(items, 0.1, seed=13) == (train, val)
    train, val = split_train_val(items, 0.5, seed=1)
    assert (len(train), len(val)) == (3, 3)
    assert split_train_val(items, 0.0, seed=1)[1] == []
    assert len(split_train_val([1, 2], 0.9, seed=1)[0]) == 1  # at least one training sample stays
    with pytest.raises(ValueError):
        split_train_val(items, 1.0, seed=1)
    with pytest.raises(ValueError):
        split_train_val([1], 0.1, seed=1)


# --- fast: GRPO wiring pieces -----------------------------------------------------------------
def test_prompt_text_accepts_messages_or_text():
    msgs = [{"role": "system", "content": "Summarize."}, {"role": "user", "content": "Q"}]
    assert prompt_text(msgs) == "Summarize.\n\nQ\n\n"
    assert prompt_text("raw prompt") == "raw prompt"
    for bad in (None, 3, [1], "  "):
        with pytest.raises(ValueError):
            prompt_text(bad)


def test_make_reward_func_passes_rows_and_checks_output():
    rows = [{"prompt": "p0", "answer": "a0"}, {"prompt": "p1", "answer": "a1"}]
    seen = []

    def reward_fn(completions, batch):
        seen.append((completions, batch))
        return [float(len(c)) for c in completions]

    f = make_reward_func(reward_fn, rows)
    out = f(prompts=["p1", "p1", "p0"], completions=["ab", "c", ""], row=[1, 1, 0], trainer_state=None)
    assert out == [2.0, 1.0, 0.0]
    assert seen == [(["ab", "c", ""], [rows[1], rows[1], rows[0]])]
    with pytest.raises(ValueError, match="returned 1 rewards for 2"):
        make_reward_func(lambda c, r: [1.0], rows)(prompts=["p", "p"], completions=["a", "b"], row=[0, 0])
    with pytest.raises(ValueError, match="non-finite"):
        make_reward_func(lambda c, r: [math.nan], rows)(prompts=["p"], completions=["a"], row=[0])
    with pytest.raises(ValueError, match="non-number"):
        make_reward_func(lambda c, r: ["x"], rows)(prompts=["p"], completions=["a"], row=[0])


def test_lora_delta_l2_is_the_frobenius_norm_of_the_change():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(torch.nn.Sequential(torch.nn.Linear(3, 2)), LoraConfig(r=2, target_modules=["0"]))
    snap = lora_snapshot(model)
    assert sorted(snap) == ["base_model.model.0.lora_A.default.weight", "base_model.model.0.lora_B.default.weight"]
    assert lora_delta_l2(model, snap) == 0.0
    with torch.no_grad():
        model.base_model.model[0].lora_B["default"].weight += torch.tensor([[3.0, 0.0], [0.0, 4.0]])
    assert lora_delta_l2(model, snap) == pytest.approx(5.0)  # sqrt(3^2 + 4^2)
    with pytest.raises(ValueError):
        lora_delta_l2(model, {})


def test_lora_config_targets_all_linear_layers():
    cfg = lora_config(16, 32, 0.05)
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, cfg.target_modules) == (16, 32, 0.05, "all-linear")
    for bad in ((0, 32, 0.0), (4, 0, 0.0), (4, 8, 1.0)):
        with pytest.raises(ValueError):
            lora_config(*bad)


def test_make_llm_hf_specs_are_lazy(tmp_path):
    llm = make_llm("hf")
    assert isinstance(llm, HFLLM) and isinstance(llm, ChatClient)
    assert llm.model_id == MODEL_ID and llm.context_tokens == 8192
    run_dir = tmp_path / "qad1" / "merged"
    run_dir.mkdir(parents=True)
    assert make_llm(f"hf:{run_dir}").model_id == "qad1/merged"
    assert make_llm("hf", adapter=tmp_path / "grpo" / "adapter").model_id == f"{MODEL_ID}+grpo/adapter"
    assert make_llm("hf", model_id="x", context_tokens=512).model_id == "x"
    assert default_model_id(str(tmp_path / "student"), str(tmp_path / "lora-b")) == "student+lora-b"
    with pytest.raises(ValueError):
        make_llm("hf", base_url="http://x")


def test_a_gguf_file_is_parsed_once_per_load(tmp_path):
    # transformers opens the GGUF once each for the tokenizer, the config and the weights; inside the
    # load they share one reader per file (a parse of the packaged model's vocabulary takes ~15 s)
    import gguf
    import numpy as np

    from memfrontier.llm.hf import _gguf_parsed_once

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    original = gguf.GGUFReader
    with _gguf_parsed_once():
        a, b = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert a is b and [t.name for t in a.tensors] == ["token_embd.weight"]
        assert a.fields["llama.block_count"].contents() == 1
    assert gguf.GGUFReader is original and gguf.GGUFReader(path) is not a


# --- slow: the real model ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def base():
    t0 = time.perf_counter()
    model, tok = load_causal_lm(None)
    print(f"\nGGUF load through transformers: {time.perf_counter() - t0:.1f}s")
    return model, tok


@pytest.mark.slow
def test_hf_backend_generates_with_exact_usage(base):
    _, tok = base
    llm = HFLLM()
    msgs = [
        {"role": "user", "content": "Alice adopted a beagle named Max."},
        {"role": "assistant", "content": "Question: What is the dog's name?\nAnswer:"},
    ]
    n_prompt = len(tok(render_prompt(msgs))["input_ids"])
    assert n_prompt == 1 + llm.count_tokens(render_prompt(msgs))  # BOS + text
    ledger = Ledger()
    with use_ledger(ledger):
        c = run(llm.complete(msgs, max_tokens=12))
        again = run(llm.complete(msgs, max_tokens=12))
        line = run(llm.complete(msgs, max_tokens=12, single_line=True))
        cut = run(llm.complete(msgs, max_tokens=12, stop=["Max"]))
        short = HFLLM(context_tokens=100)
        trunc = run(short.complete([{"role": "user", "content": "word " * 120}], max_tokens=20))
    assert c.text == again.text and c.text.strip()  # greedy is deterministic
    assert c.input_tokens == n_prompt and 1 <= c.output_tokens <= 12 and c.model_id == MODEL_ID
    assert line.text == line.text.strip() and "\n" not in line.text and line.text
    assert "Max" not in cut.text and cut.finish_reason == "stop"
    assert trunc.input_tokens == 100 - 20 and ledger.events.get("truncated_prompt") == 1


@pytest.mark.slow
def test_tokenize_sample_masks_the_prompt(base):
    _, tok = base
    prompt, completion = "S\n\nU\n\n", "<think>r</think>\n{}"
    row = tokenize_sample(tok, prompt, completion, cutoff_tokens=512)
    p_ids = tok(prompt)["input_ids"]  # what HFLLM feeds before it generates
    c_ids = tok(completion, add_special_tokens=False)["input_ids"]
    assert p_ids[0] == tok.bos_token_id
    assert row["input_ids"] == p_ids + c_ids + [tok.eos_token_id]
    assert row["labels"] == [-100] * len(p_ids) + c_ids + [tok.eos_token_id]
    n = len(row["input_ids"])
    assert tokenize_sample(tok, prompt, completion, cutoff_tokens=n) is not None
    assert tokenize_sample(tok, prompt, completion, cutoff_tokens=n - 1) is None


@pytest.mark.slow
def test_sft_smoke_trains_merges_and_serves(base, tmp_path):
    from safetensors.torch import load_file

    base_model, _ = base
    data = [
        write_jsonl(tmp_path / "segmenter.jsonl", [seg_sample(i) for i in range(4)]),
        write_jsonl(tmp_path / "episode.jsonl", [seg_sample(4, system=False), seg_sample(5), seg_sample(6, words=600)]),
    ]  # the last is > 512 tokens
    events = []
    t0 = time.perf_counter()
    res = train_lora_sft(
        QADConfig(
            data=data, out=tmp_path / "qad", max_steps=2, cutoff_tokens=512, rank=4, lora_alpha=8, eval_steps=1, seed=13
        ),
        on_progress=lambda ev, **kw: events.append((ev, kw)),
    )
    print(f"\nSFT: {res.seconds:.1f}s total ({time.perf_counter() - t0:.1f}s), {res.steps} steps")
    assert (res.n_train, res.n_val, res.n_too_long, res.steps) == (5, 1, 1, 2)
    log = [json.loads(line) for line in res.train_log.read_text().splitlines()]
    train_lines = [r for r in log if "loss" in r]
    evals = [r for r in log if "eval_loss" in r]
    assert [r["step"] for r in train_lines] == [1, 2] and all(math.isfinite(r["loss"]) for r in train_lines)
    assert [r["step"] for r in evals] == [1, 2]
    assert isinstance(res.best_val_loss, float) and math.isfinite(res.best_val_loss)
    best = min(evals, key=lambda r: r["eval_loss"])
    assert res.best_val_loss == pytest.approx(best["eval_loss"]) and res.best_step == best["step"]
    assert events[0] == ("start", {"n_train": 5, "n_val": 1, "n_too_long": 1, "steps": 2})
    assert events[-1][0] == "saved"
    assert not (tmp_path / "qad" / "checkpoints").exists()

    # the adapter moved (B starts at zero) and the merged weights are W + (alpha / r) B A
    lora = load_file(str(res.adapter_dir / "adapter_model.safetensors"))
    key = "base_model.model.model.layers.0.self_attn.q_proj"
    a, b = lora[f"{key}.lora_A.weight"], lora[f"{key}.lora_B.weight"]
    assert b.abs().sum() > 0
    llm = HFLLM(model=str(res.merged_dir))
    assert llm.model_id == "qad/merged"
    c = run(llm.complete([{"role": "user", "content": "Turns:\n[0] Bob: I run every morning."}], max_tokens=16))
    assert c.text.strip() and c.output_tokens >= 1
    merged, _ = load_causal_lm(str(res.merged_dir))  # the instance HFLLM just loaded
    w0 = base_model.model.layers[0].self_attn.q_proj.weight.detach()
    w1 = merged.model.layers[0].self_attn.q_proj.weight.detach()
    assert torch.allclose(w1 - w0, (8 / 4) * (b @ a), atol=1e-6)


@pytest.mark.slow
def test_grpo_smoke_updates_lora_b_and_serves(base, tmp_path):
    _, tok = base
    cost = SummaryCostModel(0.10, 0.10, 0.24)  # the paper's prices (MemoryCPT Eq. 19)
    calls = []

    def reward_fn(completions, rows):
        """MemoryCPT Eq. 16 with the completion scored directly against the reference."""
        out = [
            cost.reward(token_f1(c, r["answer"]), len(tok(c.strip(), add_special_tokens=False)["input_ids"]), 0)
            for c, r in zip(completions, rows)
        ]
        calls.append((list(completions), list(rows), out))
        return out

    prompts = [
        {
            "prompt": [
                {
                    "role": "user",
                    "content": "Alice adopted a beagle named Max in Paris.\n\nQuestion: What did Alice adopt?",
                },
                {"role": "assistant", "content": "Answer:"},
            ],
            "question": "What did Alice adopt?",
            "answer": "Alice adopted a beagle named Max in Paris",
            "id": "q1",
        }
    ]
    res = train_grpo(
        prompts, reward_fn, tmp_path / "grpo", max_steps=2, num_generations=4, max_completion_tokens=16, rank=4, alpha=8
    )
    log = [json.loads(line) for line in res.train_log.read_text().splitlines()]
    steps = [r for r in log if "reward" in r]
    print(
        f"\nGRPO: {res.seconds:.1f}s total, step_time {[round(r.get('step_time', 0), 1) for r in steps]}s, "
        f"rewards {res.reward_mean_by_step}, delta {res.lora_delta_l2:.3g}"
    )
    assert res.steps == 2 and [r["step"] for r in steps] == [1, 2] and len(calls) == 2
    for r, (completions, rows, rewards) in zip(steps, calls):
        assert len(completions) == 4 and rows == [prompts[0]] * 4  # extra keys reach the reward untouched
        assert all(len(tok(c, add_special_tokens=False)["input_ids"]) <= 16 for c in completions)
        assert r["reward_mean"] == r["reward"] == pytest.approx(statistics.fmean(rewards), abs=1e-6)
        assert r["reward_std"] == pytest.approx(statistics.stdev(rewards), abs=1e-6)
        assert math.isfinite(r["kl"]) and math.isfinite(r["loss"])
    assert steps[0]["kl"] == 0.0  # LoRA-B starts as the identity (B = 0): pi_phi = pi_ref at step 1
    assert res.reward_mean_by_step == [r["reward"] for r in steps]
    assert any(statistics.pstdev(rw) > 0 for _, _, rw in calls)  # some group had a learning signal
    assert res.lora_delta_l2 > 0

    llm = HFLLM(None, adapter=str(res.adapter_dir))
    assert llm.model_id == f"{MODEL_ID}+grpo/adapter"
    c = run(llm.complete(prompts[0]["prompt"], max_tokens=8))
    assert c.text.strip() and c.input_tokens == len(tok(prompt_text(prompts[0]["prompt"]))["input_ids"])

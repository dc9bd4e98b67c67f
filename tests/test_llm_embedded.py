"""The embedded LLM: real llama-cpp-python running the packaged Gemma 3 270M GGUF."""

from __future__ import annotations

import asyncio
import time

import pytest

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.llm import ChatClient, make_llm
from memfrontier.llm.embedded import MODEL_ID, EmbeddedLLM
from memfrontier.llm.metered import MeteredLLM
from memfrontier.llm.parsing import parse_json
from memfrontier.llm.prompt_format import render_prompt


def run(coro):
    return asyncio.run(coro)


# --- no model needed --------------------------------------------------------------------------
def test_render_prompt_layout():
    msgs = [
        {"role": "system", "content": "You extract facts."},
        {"role": "user", "content": "  Alice likes tea.  "},
        {"role": "assistant", "content": "Facts:"},
    ]
    assert render_prompt(msgs) == "You extract facts.\n\nAlice likes tea.\n\nFacts:"
    assert render_prompt(msgs[:2]) == "You extract facts.\n\nAlice likes tea.\n\n"
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert render_prompt([{"role": "user", "content": parts}]) == "look\n\n"


def test_prompt_users_do_not_load_the_llama_backend():
    # render_prompt's users import it from llm.prompt_format: the llama.cpp backend (and its
    # OMP_WAIT_POLICY side effect) stays unloaded
    import os
    import subprocess
    import sys

    mods = [
        "memfrontier.llm.hf",
        "memfrontier.strategies.mempilot.policy",
        "memfrontier.strategies.automem.prefix",
        "memfrontier.train.grpo",
        "memfrontier.train.lora_sft",
    ]
    code = (
        f"import importlib, os, sys; [importlib.import_module(m) for m in {mods!r}]; "
        "from memfrontier.core.provenance import provenance; "
        "print('memfrontier.llm.embedded' in sys.modules, os.environ.get('OMP_WAIT_POLICY'), "
        "'llama_cpp' in provenance())"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    # nor does provenance (no llama_cpp entry without an embedded model loaded)
    assert out.stdout.split() == ["False", "None", "False"], out.stderr


def test_make_llm_local_is_embedded_and_lazy():
    llm = make_llm("local", n_ctx=1024)
    assert isinstance(llm, EmbeddedLLM) and isinstance(llm, ChatClient)
    assert llm.model_id == MODEL_ID == "gemma-3-270m-q4_k_m"
    assert llm.context_tokens == 1024
    with pytest.raises(ValueError):
        make_llm("local", base_url="http://x")
    with pytest.raises(ValueError):
        make_llm("nonsense")


def test_model_id_is_priced():
    price = PriceBook.load().get(MODEL_ID)
    assert (price.input_usd_per_mtok, price.output_usd_per_mtok) == (0.01, 0.02)  # the book's nominal entry


# --- real model -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llm():
    client = EmbeddedLLM()  # default n_ctx 8192
    t0 = time.perf_counter()
    client.count_tokens("warm up")  # loads the model
    print(f"\nmodel load: {time.perf_counter() - t0:.2f}s")
    return client


@pytest.mark.slow
def test_count_tokens_exact(llm):
    assert llm.count_tokens("") == 0
    n = llm.count_tokens("The capital of France is Paris.")
    assert 5 <= n <= 10
    assert llm.count_tokens("word " * 100) >= 100


def test_provenance_records_the_llama_cpp_build_and_cpu_features_once_loaded(llm):
    """The same prompt can end in another greedy answer on another CPU (near-tied tokens, other
    SIMD kernels): a result file names the llama.cpp build and the CPU features it ran with."""
    import llama_cpp

    from memfrontier.core.provenance import provenance

    assert llm.count_tokens("x") > 0  # loads the model
    got = provenance()["llama_cpp"]
    assert got["version"] == llama_cpp.__version__
    assert "AVX" in got["system_info"] or "NEON" in got["system_info"]


@pytest.mark.slow
def test_short_completion_text_and_usage(llm):
    msgs = [{"role": "user", "content": "The capital of France is"}]
    t0 = time.perf_counter()
    c = run(llm.complete(msgs, max_tokens=20))
    print(f"20-token completion: {time.perf_counter() - t0:.2f}s -> {c.text!r}")
    assert c.model_id == MODEL_ID
    assert c.text.strip()
    # BOS + the rendered prompt's tokens, as llama.cpp reports them.
    assert c.input_tokens == llm.count_tokens(render_prompt(msgs)) + 1
    assert 1 <= c.output_tokens <= 20
    assert c.finish_reason in ("stop", "length")
    assert c.cached_tokens == 0 and c.reasoning_tokens == 0 and c.exact_usd is None
    # Greedy decoding is deterministic.
    again = run(llm.complete(msgs, max_tokens=20))
    assert again.text == c.text and again.output_tokens == c.output_tokens


@pytest.mark.slow
def test_stop_sequence(llm):
    c = run(llm.complete([{"role": "user", "content": "1, 2, 3, 4, 5,"}], max_tokens=30, stop=["8"]))
    assert "8" not in c.text
    assert c.output_tokens < 30


@pytest.mark.slow
def test_json_schema_constrained_output(llm):
    schema = {
        "type": "object",
        "properties": {
            "people": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3},
            "place": {"type": "string", "maxLength": 40},
        },
        "required": ["people", "place"],
    }
    msgs = [
        {"role": "system", "content": "Extract the people and the place from the text as JSON."},
        {"role": "user", "content": "Alice met Bob, Carol, Dave and Erin at the market in Lyon on Tuesday."},
    ]
    c = run(llm.complete(msgs, max_tokens=150, json_schema=schema))
    r = parse_json(c.text, expect="object")
    assert r.ok and not r.truncated, (c.text, r)
    assert set(r.value) == {"people", "place"}
    assert isinstance(r.value["people"], list) and len(r.value["people"]) <= 3
    assert all(isinstance(p, str) for p in r.value["people"])
    assert isinstance(r.value["place"], str)
    assert c.finish_reason == "stop" and c.output_tokens < 150


@pytest.mark.slow
def test_json_schema_array_is_bounded(llm):
    schema = {"type": "array", "items": {"type": "integer"}, "maxItems": 4}
    msgs = [{"role": "user", "content": "Count from one to twenty as a JSON array of integers."}]
    c = run(llm.complete(msgs, max_tokens=120, json_schema=schema))
    r = parse_json(c.text, expect="array")
    assert r.ok, (c.text, r)
    assert 0 <= len(r.value) <= 4 and all(isinstance(x, int) for x in r.value)


@pytest.mark.slow
def test_prompt_far_larger_than_context_is_truncated_and_counted():
    small = EmbeddedLLM(n_ctx=512)
    question = "\nQuestion: what colour is the sky? Answer:"
    msgs = [{"role": "user", "content": "filler text " * 3000 + question}]  # ~6000 tokens
    led = Ledger()
    with use_ledger(led):
        c = run(small.complete(msgs, max_tokens=16))
    assert led.events == {"truncated_prompt": 1}
    assert 512 - 16 - 2 <= c.input_tokens <= 512 - 16
    assert 1 <= c.output_tokens <= 16
    # No ledger: still no crash, nothing to count.
    c2 = run(small.complete(msgs, max_tokens=16))
    assert c2.input_tokens == c.input_tokens


@pytest.mark.slow
def test_metered_records_the_call(llm):
    metered = MeteredLLM(llm, PriceBook.load())
    led = Ledger()
    with use_ledger(led):
        c = run(metered.complete([{"role": "user", "content": "Hello, my name is"}], role="answer", max_tokens=8))
    assert len(led.calls) == 1
    call = led.calls[0]
    assert call.model_id == MODEL_ID and call.role == "answer"
    assert call.input_tokens == c.input_tokens > 0 and call.output_tokens == c.output_tokens > 0
    assert call.usd is not None and call.usd > 0 and not call.unpriced


@pytest.mark.slow
def test_concurrent_calls_are_serialised(llm):
    msgs = [{"role": "user", "content": "Once upon a time"}]

    async def both():
        return await asyncio.gather(llm.complete(msgs, max_tokens=10), llm.complete(msgs, max_tokens=10))

    a, b = run(both())
    assert a.text == b.text and a.output_tokens == b.output_tokens > 0


def test_reusable_prefix_stops_at_a_batch_boundary_below_the_last_prompt_token():
    from memfrontier.llm.embedded import reusable_prefix

    prev = list(range(1300))
    assert reusable_prefix(prev, prev[:1100] + [-1, -2], 512) == 1024  # common 1100 -> 2 whole batches
    assert reusable_prefix(prev, prev[:1000] + [-1], 512) == 512
    assert reusable_prefix(prev, prev[:500] + [-1], 512) == 0  # less than one batch: decode it all
    assert reusable_prefix(prev, prev[:1024], 512) == 512  # the same 1024 tokens: the last batch is decoded again
    assert reusable_prefix(prev, prev[:1025], 512) == 1024
    assert reusable_prefix([], prev, 512) == 0
    assert reusable_prefix(prev, [7] + prev[1:], 4) == 0
    assert reusable_prefix(prev, prev[:10] + [-1], 4) == 8
    with pytest.raises(ValueError, match="n_batch"):
        reusable_prefix(prev, prev, 0)


_TURNS = [
    "I started a keto diet this week and I already feel lighter.",
    "I bought a road bike and rode to the lake.",
    "My doctor told me to watch my blood pressure.",
    "We hiked Mount Tam with my cousin on Saturday.",
    "I write poems in the evening to relax.",
    "Work has been stressful, the project deadline moved.",
    "I adopted a grey cat named Smokey.",
    "We are planning a trip to Canada in August.",
] * 3


def _question(q: str) -> list[dict]:
    ctx = "\n".join(
        f'(2023-05-{d:02d}) {"Evan" if d % 2 else "Sam"} said, "{t}"' for d, t in enumerate(_TURNS, start=1)
    )
    return [
        {"role": "system", "content": "Answer from the conversation below in a few words."},
        {"role": "user", "content": ctx + "\nQuestion: " + q},
    ]


@pytest.mark.slow
def test_an_answer_does_not_depend_on_the_call_before_it(llm):
    # llama-cpp-python reuses a cached prefix at any position: this answer was "Answer: Evan started
    # his diet in 2019." after the greeting (a few tokens in common) and "Answer: 10/23/2023" after
    # the other 650-token question (all but its last line in common), as from an empty cache
    async def go():
        await llm.complete([{"role": "user", "content": "Say hello."}], max_tokens=4)  # nothing in common
        alone = (await llm.complete(_question("When did Evan start his diet?"), max_tokens=16)).text
        await llm.complete(_question("What did Sam buy?"), max_tokens=16)
        after = (await llm.complete(_question("When did Evan start his diet?"), max_tokens=16)).text
        return alone, after

    alone, after = asyncio.run(go())
    # the exact words depend on the llama.cpp build (CPU features); that they do not depend on the
    # call before is what is tested
    assert alone == after and alone.startswith("Answer:")


@pytest.mark.slow
def test_greedy_decoding_with_a_grammar_picks_the_tokens_of_llama_cpps_own_chain(llm, monkeypatch):
    # The grammar is checked on the argmax only (memfrontier.llm.llama_sampling); llama-cpp-python's
    # chain (penalties -> grammar over all 262k candidates -> greedy) must give the same tokens,
    # both when the argmax is accepted and when the grammar rejects it and the mask decides.
    import functools

    from memfrontier.llm.embedded import load_llama
    from memfrontier.llm.llama_sampling import GreedyGrammarSampler

    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "did": {"type": "string"}},
                    "required": ["name", "did"],
                },
            }
        },
        "required": ["items"],
    }
    cases = [
        (
            [
                {
                    "role": "user",
                    "content": "Alice adopted a beagle named Max. Bob sold his car.\n\n"
                    "List the people and what they did as JSON.",
                }
            ],
            {"json_schema": schema},
        ),
        (
            [{"role": "user", "content": "Count from one to twenty as a JSON array of integers."}],
            {"json_schema": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}},
        ),
        (
            [
                {"role": "user", "content": "Evan: I bought a blue Prius.\n\nQuestion: What car did Evan buy?"},
                {"role": "assistant", "content": "Answer:"},
            ],
            {"single_line": True},
        ),
    ]
    raw, _ = load_llama(llm.model_path, llm.n_ctx)
    checked, resamples = [], 0
    for msgs, kw in cases:
        c = run(llm.complete(msgs, max_tokens=16, **kw))
        assert isinstance(raw._sampler, GreedyGrammarSampler) and raw._sampler.checks == c.output_tokens + (
            c.finish_reason == "stop"
        )  # one check per token chosen, the end-of-text token included
        checked.append((c.text, c.output_tokens))
        resamples += raw._sampler.resamples
    assert resamples > 0, checked  # some argmax was rejected: the masked path ran too
    monkeypatch.setattr(raw, "_init_sampler", functools.partial(type(raw)._init_sampler, raw))
    chain = [(c.text, c.output_tokens) for c in (run(llm.complete(m, max_tokens=16, **kw)) for m, kw in cases)]
    assert not isinstance(raw._sampler, GreedyGrammarSampler)
    assert checked == chain, checked


def test_loading_the_model_prints_no_benign_llama_error(tmp_path):
    # llama.cpp announces Gemma 3's full-size sliding-window cache at error level on every load;
    # with verbose=False only real errors may reach stderr (a fresh process: the model loads there)
    import subprocess
    import sys

    code = "from memfrontier.llm.embedded import EmbeddedLLM; print(EmbeddedLLM().count_tokens('hello'))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1" and "llama_kv_cache" not in res.stderr and "SWA" not in res.stderr


@pytest.mark.slow
def test_a_cancelled_call_stops_decoding_and_never_returns_a_cut_completion(llm, monkeypatch):
    """Ctrl-C (or a cancelled question) cancels the awaiting task; the worker thread must stop at its
    next token rather than decode to max_tokens for nobody (the run's exit waits for it)."""
    from memfrontier.llm.base import LLMError

    model, lock = llm._model()
    finished = []
    original = model.create_completion

    def recording(*a, **kw):
        out = original(*a, **kw)
        finished.append(out["usage"]["completion_tokens"])
        return out

    monkeypatch.setattr(model, "create_completion", recording)
    # the grammar forbids stopping before 400 integers: uncancelled, this decodes all 1200 tokens
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 400}
    msgs = [{"role": "user", "content": "Count from one upwards as a JSON array of integers."}]

    async def cancel_midway():
        task = asyncio.ensure_future(llm.complete(msgs, max_tokens=1200, json_schema=schema))
        while not lock.locked():  # decoding has started
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_midway())
    for _ in range(600):  # the worker thread ends on its own (bounded wait, not a speed assertion)
        if finished:
            break
        time.sleep(0.1)
    assert finished and finished[0] < 1200
    # the model is free and answers normally afterwards
    assert run(llm.complete([{"role": "user", "content": "1, 2, 3,"}], max_tokens=3)).output_tokens >= 1
    # a call cancelled while it waited for the model never starts decoding
    import threading

    stop = threading.Event()
    stop.set()
    with pytest.raises(LLMError, match="cancelled before it started"):
        llm._complete_sync("1, 2, 3,", 5, 0.0, None, None, None, False, stop)
    assert len(finished) == 2  # the normal call above; nothing for the cancelled one

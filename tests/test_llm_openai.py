"""OpenAICompatLLM against real loopback servers.

* llama-cpp-python's OpenAI-compatible server running the packaged Gemma 3 270M (a subprocess,
  started through ``python -m memfrontier.llm.embedded``, which is ``llama_cpp.server`` plus the
  CPU workaround of :func:`memfrontier.llm.embedded.cpu_extra_buffers_ok`).
* a scripted stdlib ``http.server`` for the retry policy (429 / 503 / 400 / timeouts).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.llm import ChatClient, LLMError, LLMTimeoutError, make_llm
from memfrontier.llm.embedded import MODEL_ID, default_model_path
from memfrontier.llm.metered import MeteredLLM
from memfrontier.llm.openai_compat import (
    OpenAICompatLLM,
    parse_retry_after_s,
    structured_output_modes,
)
from memfrontier.llm.parsing import parse_json


def run(coro):
    return asyncio.run(coro)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# =============================================================================================
# Real server: llama-cpp-python serving the packaged GGUF
# =============================================================================================
@pytest.fixture(scope="module")
def llama_server():
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "memfrontier.llm.embedded",
        "--model",
        default_model_path(),
        "--model_alias",
        MODEL_ID,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        str(os.cpu_count() or 1),
        "--chat_format",
        "alpaca",  # a plain template that works for a base model
    ]
    log = open(os.devnull, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama server exited with {proc.returncode}: {' '.join(cmd)}")
            try:
                with urllib.request.urlopen(f"{base}/v1/models", timeout=2) as r:
                    if r.status == 200 and MODEL_ID in r.read().decode():
                        break
            except OSError:
                pass
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("llama server did not answer /v1/models within 120 s")
            time.sleep(0.25)
        print(f"\nllama server ready in {time.perf_counter() - t0:.2f}s on port {port}")
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
def test_real_server_completion_usage_counted(llama_server):
    llm = make_llm(f"openai:{MODEL_ID}", base_url=llama_server, timeout_s=120, max_retries=0)
    assert isinstance(llm, OpenAICompatLLM) and isinstance(llm, ChatClient)
    metered = MeteredLLM(llm, PriceBook.load())
    led = Ledger()
    with use_ledger(led):
        c = run(metered.complete([{"role": "user", "content": "Write one word: hello"}], role="answer", max_tokens=12))
    assert c.model_id == MODEL_ID
    assert isinstance(c.text, str) and c.text.strip()
    assert c.input_tokens > 5  # the alpaca-rendered prompt
    assert 1 <= c.output_tokens <= 12
    assert c.finish_reason in ("stop", "length")
    assert c.exact_usd is None and c.cached_tokens == 0
    assert led.events == {}  # usage came from the server, not estimated
    (call,) = led.calls
    assert (call.input_tokens, call.output_tokens) == (c.input_tokens, c.output_tokens)
    assert call.usd is not None and call.usd > 0


@pytest.mark.slow
def test_real_server_json_schema_honoured(llama_server):
    # llama-cpp-python's server takes the schema as {"type": "json_object", "schema": ...}.
    llm = OpenAICompatLLM(MODEL_ID, base_url=llama_server, timeout_s=120, max_retries=0, schema_format="json_object")
    schema = {
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}},
        "required": ["colors"],
    }
    c = run(
        llm.complete(
            [{"role": "user", "content": "List some colors of the rainbow as JSON."}], max_tokens=80, json_schema=schema
        )
    )
    r = parse_json(c.text, expect="object")
    assert r.ok and not r.truncated, c.text
    assert list(r.value) == ["colors"]
    assert isinstance(r.value["colors"], list) and len(r.value["colors"]) <= 3
    assert all(isinstance(x, str) for x in r.value["colors"])


@pytest.mark.slow
def test_real_server_rejects_fixed_json_schema_format_without_retry(llama_server):
    # The same server rejects OpenAI's {"type": "json_schema"} form (HTTP 500): with the mode
    # fixed, that is an error at once (no backoff, no other mode tried).
    llm = OpenAICompatLLM(
        MODEL_ID, base_url=llama_server, timeout_s=60, max_retries=3, backoff_base_s=5, schema_format="json_schema"
    )
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match="(?s)HTTP 500.*response_format") as ei:
        run(llm.complete([{"role": "user", "content": "x"}], max_tokens=4, json_schema={"type": "object"}))
    assert not isinstance(ei.value, LLMTimeoutError)
    assert time.perf_counter() - t0 < 5  # no backoff happened


@pytest.mark.slow
def test_real_server_auto_mode_falls_back_to_json_object_and_remembers(llama_server):
    # The default: json_schema is rejected (HTTP 500 naming response_format.type), the call is
    # re-sent as json_object with the schema, succeeds, and the endpoint keeps that mode.
    llm = OpenAICompatLLM(MODEL_ID, base_url=llama_server, timeout_s=120, max_retries=0)
    assert llm.structured_output_mode == "json_schema"
    schema = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 12}}, "required": ["word"]}
    led = Ledger()
    with use_ledger(led):
        c = run(
            MeteredLLM(llm, PriceBook.load()).complete(
                [{"role": "user", "content": "Give one English word as JSON."}],
                role="indexer",
                max_tokens=24,
                json_schema=schema,
            )
        )
    r = parse_json(c.text, expect="object")
    assert r.ok and isinstance(r.value.get("word"), str), c.text
    assert led.events == {"structured_output.json_object": 1}
    assert [call.error for call in led.calls] == [None]  # one metered call; the rejection cost nothing
    assert llm.structured_output_mode == "json_object"
    assert structured_output_modes()[f"{llama_server}|{MODEL_ID}"] == "json_object"
    again = OpenAICompatLLM(MODEL_ID, base_url=llama_server, timeout_s=120, max_retries=0)
    assert again.structured_output_mode == "json_object"  # a new client of the endpoint starts there


# =============================================================================================
# Scripted server for the retry policy
# =============================================================================================
def chat_json(text="hello", usage=None):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage if usage is not None else {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


class Stub:
    """A scripted OpenAI-compatible endpoint. ``script``: list of (status, headers, body, delay_s)
    consumed one per request (the last one repeats). ``requests``: (monotonic time, json body)."""

    def __init__(self):
        self.script: list[tuple[int, dict, object, float]] = []
        self.requests: list[tuple[float, dict]] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with stub.lock:
                    stub.requests.append((time.monotonic(), body))
                    i = min(len(stub.requests) - 1, len(stub.script) - 1)
                    status, headers, payload, delay = stub.script[i]
                if delay:
                    time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reset(self, *script):
        with self.lock:
            self.script = list(script)
            self.requests = []

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stub_server():
    s = Stub()
    yield s
    s.close()


@pytest.fixture
def stub(stub_server):
    stub_server.reset()
    return stub_server


def client(stub, **kw):
    kw.setdefault("timeout_s", 5)
    kw.setdefault("backoff_base_s", 0.05)
    return OpenAICompatLLM("stub-model", base_url=stub.base_url, api_key="test-key", **kw)


MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
ERR = {"error": {"message": "slow down", "type": "rate_limit"}}


def test_429_with_retry_after_is_retried_after_the_wait(stub):
    stub.reset((429, {"Retry-After": "1"}, ERR, 0), (200, {}, chat_json("ok"), 0))
    led = Ledger()
    with use_ledger(led):
        c = run(client(stub).complete(MSGS))
    assert c.text == "ok" and c.input_tokens == 11 and c.output_tokens == 3
    assert len(stub.requests) == 2
    waited = stub.requests[1][0] - stub.requests[0][0]
    assert 0.95 <= waited < 2.0
    assert led.events == {"llm_retry": 1}


def test_400_is_not_retried(stub):
    stub.reset((400, {}, {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}, 0))
    with pytest.raises(LLMError) as ei:
        run(client(stub, max_retries=3).complete(MSGS))
    assert not isinstance(ei.value, LLMTimeoutError)
    assert "HTTP 400" in str(ei.value) and "max_tokens is too large" in str(ei.value)
    assert len(stub.requests) == 1


@pytest.mark.parametrize("status", [401, 404, 422])
def test_other_4xx_are_not_retried(stub, status):
    stub.reset((status, {}, {"error": {"message": f"nope {status}"}}, 0))
    with pytest.raises(LLMError, match=f"HTTP {status}: nope {status}"):
        run(client(stub, max_retries=3).complete(MSGS))
    assert len(stub.requests) == 1


def test_503_then_success_uses_backoff(stub):
    stub.reset((503, {}, {"error": {"message": "overloaded"}}, 0), (200, {}, chat_json("fine"), 0))
    c = run(client(stub, backoff_base_s=0.2).complete(MSGS))
    assert c.text == "fine"
    assert len(stub.requests) == 2
    waited = stub.requests[1][0] - stub.requests[0][0]
    assert 0.19 <= waited < 1.0  # backoff_base_s * 2**0, plus at most 25 % jitter


def test_retries_exhausted_raise_llm_error(stub):
    stub.reset((429, {"Retry-After": "0"}, ERR, 0))
    with pytest.raises(LLMError, match="HTTP 429 after 3 attempt") as ei:
        run(client(stub, max_retries=2).complete(MSGS))
    assert not isinstance(ei.value, LLMTimeoutError)
    assert len(stub.requests) == 3


def test_retry_after_is_capped(stub):
    stub.reset((429, {"Retry-After": "3600"}, ERR, 0), (200, {}, chat_json(), 0))
    t0 = time.perf_counter()
    run(client(stub, max_retry_after_s=0.3).complete(MSGS))
    assert len(stub.requests) == 2
    assert 0.29 <= time.perf_counter() - t0 < 2.0


def test_timeout_raises_llm_timeout_error(stub):
    stub.reset((200, {}, chat_json(), 3.0))  # sleeps past the 0.5 s timeout on every attempt
    t0 = time.perf_counter()
    with pytest.raises(LLMTimeoutError, match="timed out after 2 attempt"):
        run(client(stub, timeout_s=0.5, max_retries=1).complete(MSGS))
    elapsed = time.perf_counter() - t0
    assert len(stub.requests) == 2
    assert 1.0 <= elapsed < 2.5


def test_connection_refused_is_retried_then_llm_error():
    port = free_port()  # nothing listens there
    llm = OpenAICompatLLM("m", base_url=f"http://127.0.0.1:{port}/v1", timeout_s=2, max_retries=2, backoff_base_s=0.01)
    with pytest.raises(LLMError, match=f"connection to http://127.0.0.1:{port}/v1 failed after 3 attempt") as ei:
        run(llm.complete(MSGS))
    assert not isinstance(ei.value, LLMTimeoutError)


def test_usage_details_not_double_counted_and_exact_cost(stub):
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 300,
        "total_tokens": 1300,
        "prompt_tokens_details": {"cached_tokens": 800},
        "completion_tokens_details": {"reasoning_tokens": 250},
        "cost": 0.00123,
    }
    stub.reset((200, {}, chat_json("x", usage), 0))
    c = run(client(stub, model_id="my-priced-id").complete(MSGS))
    assert c.model_id == "my-priced-id"
    assert (c.input_tokens, c.cached_tokens, c.output_tokens, c.reasoning_tokens) == (1000, 800, 300, 250)
    assert c.exact_usd == pytest.approx(0.00123)
    assert c.finish_reason == "stop"


def test_missing_usage_is_estimated_and_counted(stub):
    payload = chat_json("four chars")
    del payload["usage"]
    stub.reset((200, {}, payload, 0))
    led = Ledger()
    with use_ledger(led):
        c = run(client(stub).complete(MSGS))
    assert c.input_tokens == 2 + 1  # ceil(8/4) + ceil(2/4)
    assert c.output_tokens == 3  # ceil(10/4)
    assert led.events == {"usage_estimated": 1}


def test_request_shape_json_schema_and_options(stub):
    stub.reset((200, {}, chat_json('{"a": 1}'), 0))
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    run(client(stub).complete(MSGS, max_tokens=33, temperature=0.0, json_schema=schema, stop=["\n\n"]))
    body = stub.requests[0][1]
    assert body["model"] == "stub-model" and body["messages"] == MSGS
    assert body["max_tokens"] == 33 and body["temperature"] == 0.0 and body["stop"] == ["\n\n"]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    stub.reset((200, {}, chat_json(), 0))
    run(client(stub, schema_format="json_object").complete(MSGS, json_schema=schema))
    assert stub.requests[0][1]["response_format"] == {"type": "json_object", "schema": schema}
    stub.reset((200, {}, chat_json('{"a": 1}'), 0))
    run(client(stub, schema_format="prompt").complete(MSGS, json_schema=schema))
    assert "response_format" not in stub.requests[0][1] and len(stub.requests[0][1]["messages"]) == 3
    stub.reset((200, {}, chat_json(), 0))
    run(client(stub, schema_format="json_object").complete(MSGS, json_schema=schema))
    assert stub.requests[0][1]["response_format"] == {"type": "json_object", "schema": schema}
    stub.reset((200, {}, chat_json(), 0))
    run(client(stub).complete(MSGS))
    assert "response_format" not in stub.requests[0][1] and "stop" not in stub.requests[0][1]


REJECT_JSON_SCHEMA = (
    500,
    {},
    {
        "error": {
            "message": "1 validation error: response_format.type: Input should be 'text' or 'json_object'",
            "type": "internal_server_error",
        }
    },
    0,
)
REJECT_JSON_OBJECT = (400, {}, {"error": {"message": "response_format is not supported by this model"}}, 0)
SCHEMA_A = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_auto_mode_downgrades_to_json_object_once_per_endpoint(stub):
    stub.reset(REJECT_JSON_SCHEMA, (200, {}, chat_json('{"a": 1}'), 0))
    llm = OpenAICompatLLM("m-json-object", base_url=stub.base_url, api_key="k", timeout_s=5, backoff_base_s=0.05)
    led = Ledger()
    with use_ledger(led):
        c = run(llm.complete(MSGS, json_schema=SCHEMA_A))
    assert c.text == '{"a": 1}'
    sent = [b.get("response_format", {}).get("type") for _, b in stub.requests]
    assert sent == ["json_schema", "json_object"]
    assert stub.requests[1][1]["response_format"]["schema"] == SCHEMA_A
    assert led.events == {"structured_output.json_object": 1}  # a downgrade, not a retry
    assert llm.structured_output_mode == "json_object"
    assert structured_output_modes()[llm.endpoint] == "json_object"
    stub.reset((200, {}, chat_json('{"a": 2}'), 0))
    run(llm.complete(MSGS, json_schema=SCHEMA_A))
    assert [b["response_format"]["type"] for _, b in stub.requests] == ["json_object"]  # remembered
    stub.reset((200, {}, chat_json("plain"), 0))
    run(llm.complete(MSGS))  # no schema: no response_format whatever the mode
    assert "response_format" not in stub.requests[0][1]


def test_auto_mode_ends_in_prompt_json_parsed_by_the_project_parser(stub):
    stub.reset(
        REJECT_JSON_SCHEMA, REJECT_JSON_OBJECT, (200, {}, chat_json('Sure! Here it is:\n```json\n{"a": 3,}\n```'), 0)
    )
    llm = OpenAICompatLLM("m-prompt", base_url=stub.base_url, api_key="k", timeout_s=5, backoff_base_s=0.05)
    led = Ledger()
    with use_ledger(led):
        c = run(llm.complete(MSGS, json_schema=SCHEMA_A))
    assert c.text == '{"a": 3}'  # fenced, trailing comma: repaired by parse_json
    assert len(stub.requests) == 3
    last = stub.requests[2][1]
    assert "response_format" not in last
    assert last["messages"][:2] == MSGS and last["messages"][2]["role"] == "user"
    assert json.dumps(SCHEMA_A) in last["messages"][2]["content"]
    assert led.events == {"structured_output.json_object": 1, "structured_output.prompt": 1}
    assert llm.structured_output_mode == "prompt"
    # prose that holds no JSON is returned as is (the caller's parser counts the failure)
    stub.reset((200, {}, chat_json("I cannot do that."), 0))
    assert run(llm.complete(MSGS, json_schema=SCHEMA_A)).text == "I cannot do that."


def test_fixed_mode_and_unrelated_errors_are_not_downgraded(stub):
    stub.reset(REJECT_JSON_SCHEMA)
    fixed = OpenAICompatLLM("m-fixed", base_url=stub.base_url, api_key="k", timeout_s=5, schema_format="json_schema")
    with pytest.raises(LLMError, match="HTTP 500: 1 validation error: response_format.type"):
        run(fixed.complete(MSGS, json_schema=SCHEMA_A))
    assert len(stub.requests) == 1 and fixed.structured_output_mode == "json_schema"
    stub.reset((400, {}, {"error": {"message": "context length exceeded"}}, 0))
    auto = OpenAICompatLLM("m-other-400", base_url=stub.base_url, api_key="k", timeout_s=5)
    with pytest.raises(LLMError, match="HTTP 400: context length exceeded"):
        run(auto.complete(MSGS, json_schema=SCHEMA_A))
    assert len(stub.requests) == 1 and auto.structured_output_mode == "json_schema"
    stub.reset(REJECT_JSON_SCHEMA, REJECT_JSON_OBJECT, (400, {}, {"error": {"message": "response_format again"}}, 0))
    last = OpenAICompatLLM("m-all-rejected", base_url=stub.base_url, api_key="k", timeout_s=5)
    with pytest.raises(LLMError, match="HTTP 400: response_format again"):
        run(last.complete(MSGS, json_schema=SCHEMA_A))
    assert "response_format" not in stub.requests[2][1]  # prompt mode sent none: the error is the server's


def test_same_client_across_event_loops(stub):
    stub.reset((200, {}, chat_json("again"), 0))
    llm = client(stub)
    assert run(llm.complete(MSGS)).text == "again"
    assert run(llm.complete(MSGS)).text == "again"  # a fresh asyncio.run: new pool, no error
    assert len(stub.requests) == 2


def test_warm_readies_this_loops_client_without_a_completion(stub):
    stub.reset((200, {}, chat_json("warm"), 0))
    llm = client(stub)

    async def main():
        await llm.warm()  # this stub answers GET /models with an error: ignored
        made = llm._client()
        assert len(stub.requests) == 0  # no completion was sent
        assert (await llm.complete(MSGS)).text == "warm"
        return made is llm._client()

    assert run(main())
    assert len(stub.requests) == 1
    dead = OpenAICompatLLM("m", base_url=f"http://127.0.0.1:{free_port()}/v1", timeout_s=2)
    run(dead.warm(timeout_s=2))  # a dead endpoint: nothing raised (the first completion reports it)


# --- helpers without a server --------------------------------------------------------------------
def test_parse_retry_after():
    assert parse_retry_after_s({"retry-after": "7"}) == 7.0
    assert parse_retry_after_s({"retry-after": "120"}, cap_s=60) == 60.0
    assert parse_retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after_s({"retry-after": "soon"}) is None
    assert parse_retry_after_s({}) is None and parse_retry_after_s(None) is None
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after_s({"retry-after": future}) <= 30


def test_count_tokens_estimate_and_context():
    llm = OpenAICompatLLM("m", base_url="http://127.0.0.1:9/v1", context_tokens=4096)
    assert llm.count_tokens("") == 0
    assert llm.count_tokens("abcd") == 1 and llm.count_tokens("abcde") == 2
    assert llm.count_tokens("x" * 400) == 100
    assert llm.context_tokens == 4096
    assert OpenAICompatLLM("m").context_tokens == 32768


def test_make_llm_openai_spec():
    llm = make_llm("openai:qwen/qwen3-8b:free", base_url="http://127.0.0.1:9/v1", timeout_s=7)
    assert isinstance(llm, OpenAICompatLLM)
    assert llm.model == "qwen/qwen3-8b:free" and llm.model_id == "qwen/qwen3-8b:free"
    assert llm.timeout_s == 7.0
    with pytest.raises(ValueError):
        make_llm("openai:")
    with pytest.raises(ValueError):
        OpenAICompatLLM("m", schema_format="yaml")


@pytest.mark.parametrize("cost", [-2100.0, float("nan")])
def test_provider_figures_that_cannot_be_right_are_repriced_and_flagged(stub, cost):
    # cost -2100 (or NaN) and 500 cached of 100 prompt tokens: not summed, not a crash
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "total_tokens": 110,
        "prompt_tokens_details": {"cached_tokens": 500},
        "cost": cost,
    }
    stub.reset((200, {}, chat_json("x", usage), 0))
    led = Ledger()
    with use_ledger(led):
        run(MeteredLLM(client(stub, model_id="qwen3-14b"), PriceBook.load()).complete(MSGS, role="answerer"))
    (c,) = led.calls
    assert c.flags == ["cached_tokens_clamped", "provider_cost_rejected"] and not c.usd_exact
    assert (c.input_tokens, c.cached_tokens) == (100, 100)
    assert c.usd == pytest.approx(1e-6 * (0.10 * 100 + 0.24 * 10), rel=1e-12)  # qwen3-14b: 0.10 / 0.24 per 1M
    assert led.events == {"usage_repaired.cached_tokens_clamped": 1, "usage_repaired.provider_cost_rejected": 1}

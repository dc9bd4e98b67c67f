"""The benchmark scripts name only what the package has: every ``from memfrontier... import NAME``
in ``benchmarks/*.py`` resolves (a moved or renamed function breaks a benchmark at once, not the
next time someone runs it)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _unresolved(path: Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "memfrontier"):
            continue
        try:
            module = importlib.import_module(node.module)
        except ImportError as e:
            bad.append(f"{path.name}:{node.lineno} {node.module}: {e}")
            continue
        for alias in node.names:
            if hasattr(module, alias.name):
                continue
            try:
                importlib.import_module(f"{node.module}.{alias.name}")
            except ImportError:
                bad.append(f"{path.name}:{node.lineno} {node.module} has no {alias.name}")
    return bad


def test_every_benchmark_import_resolves():
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert len(scripts) >= 10
    bad = [b for p in scripts for b in _unresolved(p)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_missing_name(tmp_path):
    probe = tmp_path / "bench_probe.py"
    probe.write_text("from memfrontier.eval.runner import construct\nfrom memfrontier.eval.tasks import construct\n")
    assert _unresolved(probe) == ["bench_probe.py:1 memfrontier.eval.runner has no construct"]

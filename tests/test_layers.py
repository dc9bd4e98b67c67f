"""Imports flow one way (DESIGN.md): a module imports only from its own floor or the floors below.

core <- llm/embed <- store/graph <- views <- retrieve <- strategies (+ answerer) <- api/client
<- eval <- train <- sweeps/frontier, server, cli. Every import is checked, function-local (lazy)
ones included, by walking each module's syntax tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "memfrontier"

FLOORS = {
    "core": 0,
    "llm": 1, "embed": 1,
    "store": 2, "graph": 2,
    "views": 3,
    "retrieve": 4,
    "strategies": 5, "answerer": 5,
    "api": 6, "client": 6,
    "eval": 7,
    "train": 8,
    "sweeps": 9, "frontier": 9, "server": 9, "cli": 9, "__main__": 9,
}


def _room(parts: tuple[str, ...]) -> str | None:
    """``("strategies", "rag")`` -> ``"strategies"``; the package's own ``__init__`` -> None."""
    return parts[0] if parts else None


def _module_parts(path: Path) -> tuple[str, ...]:
    rel = path.relative_to(PKG).with_suffix("")
    parts = rel.parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, target module parts inside memfrontier) for every import of ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_parts(path)
    pkg = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                target = base + tuple(node.module.split(".")) if node.module else base
                if not node.module:  # "from . import x": each name may be a module
                    for a in node.names:
                        out.append((node.lineno, target + (a.name,)))
                    continue
                out.append((node.lineno, target))
            elif node.module and node.module.split(".")[0] == "memfrontier":
                out.append((node.lineno, tuple(node.module.split(".")[1:])))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "memfrontier":
                    out.append((node.lineno, tuple(a.name.split(".")[1:])))
    return out


def _violations() -> list[str]:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        here = _module_parts(path)
        src = _room(here)
        if src is None:  # memfrontier/__init__.py: the lazy public facade
            continue
        if src not in FLOORS:
            bad.append(f"{path.relative_to(PKG)}: room {src!r} has no floor in the data flow")
            continue
        for line, target in _imports(path):
            dst = _room(target)
            if dst is None:
                bad.append(f"{path.relative_to(PKG)}:{line} imports the package root")
                continue
            if dst not in FLOORS:
                bad.append(f"{path.relative_to(PKG)}:{line} imports unknown room {dst!r}")
                continue
            if FLOORS[dst] > FLOORS[src]:
                bad.append(f"{path.relative_to(PKG)}:{line} ({src}) imports {'.'.join(target)} ({dst}, a floor above)")
    return bad


def test_every_room_has_a_floor_and_imports_flow_down():
    bad = _violations()
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)


def test_the_walker_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: a function-local relative import two levels up is resolved and seen."""
    mod = PKG / "store" / "sqlite.py"
    found = {".".join(t) for _, t in _imports(mod)}
    assert "core.types" in found
    src = "def f():\n    from ..api import Memory\n"
    fake = PKG / "store" / "_probe_layers.py"
    try:
        fake.write_text(src)
        assert ("api",) in {t[:1] for _, t in _imports(fake)}
        assert any("api" in v and "_probe_layers" in v for v in _violations())
    finally:
        fake.unlink()


if __name__ == "__main__":  # pragma: no cover
    print("\n".join(_violations()) or "ok")

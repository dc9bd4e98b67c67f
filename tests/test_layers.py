"""Imports flow one way (DESIGN.md): a module imports only from the floors below its own.

core <- llm/embed <- store <- views <- retrieve <- strategies (+ answerer) <- api <- client/integrations
<- eval <- train <- frontier/server <- cli. Every import is checked, function-local (lazy) ones
included, by walking each module's syntax tree. Beside the floors:

* two rooms on one floor do not import each other (``llm`` and ``embed`` are siblings);
* a paper's package (``strategies/<paper>/``) imports no other paper, and the strategies' shared
  modules (``base``, ``config``, ``rag``...) import no paper;
* no two modules import each other, directly or through others (no cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "memfrontier"

FLOORS = {
    "core": 0,
    "llm": 1,
    "embed": 1,
    "store": 2,
    "views": 3,
    "retrieve": 4,
    "strategies": 5,
    "answerer": 5,
    "api": 6,
    "client": 7,
    "integrations": 7,
    "eval": 8,
    "train": 9,
    "frontier": 10,
    "server": 10,
    "cli": 11,
}
#: The packages under ``strategies/`` that hold one paper's (or the strategy router's) pipeline.
PAPERS = ("automem", "budgetmem", "memorycpt", "mempilot", "auto")


def _module_parts(path: Path, root: Path = PKG) -> tuple[str, ...]:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path, here: tuple[str, ...] | None = None) -> list[tuple[int, tuple[str, ...]]]:
    """(line, target module parts inside memfrontier) for every import of ``path``, a module whose
    dotted name under the package is ``here`` (default: read from its place under ``PKG``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_parts(path) if here is None else here
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


def _paper(parts: tuple[str, ...]) -> str | None:
    """``("strategies", "memorycpt", "pipeline")`` -> ``"memorycpt"``; None outside a paper."""
    return parts[1] if len(parts) > 1 and parts[0] == "strategies" and parts[1] in PAPERS else None


def _check(name: str, here: tuple[str, ...], imports: list[tuple[int, tuple[str, ...]]]) -> list[str]:
    bad = []
    src = here[0] if here else None
    if src is None:  # memfrontier/__init__.py: the lazy public facade
        return bad
    if src not in FLOORS:
        return [f"{name}: room {src!r} has no floor in the data flow"]
    for line, target in imports:
        dst = target[0] if target else None
        where = f"{name}:{line} ({src}) imports {'.'.join(target) or 'the package root'}"
        if dst is None:
            bad.append(f"{where}: the package root")
        elif dst not in FLOORS:
            bad.append(f"{where}: unknown room {dst!r}")
        elif FLOORS[dst] > FLOORS[src]:
            bad.append(f"{where} ({dst}, a floor above)")
        elif FLOORS[dst] == FLOORS[src] and dst != src:
            bad.append(f"{where} ({dst}, a sibling room on the same floor)")
        elif src == dst == "strategies":
            mine, theirs = _paper(here), _paper(target)
            if theirs is not None and mine != theirs:
                owner = f"paper {mine!r}" if mine else "a shared strategies module"
                bad.append(f"{where}: {owner} imports paper {theirs!r}")
    return bad


def _violations() -> list[str]:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        bad += _check(str(path.relative_to(PKG)), _module_parts(path), _imports(path))
    return bad


def _resolve(target: tuple[str, ...], modules: set[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The module a target names: itself, or the package holding a name imported from it."""
    while target and target not in modules:
        target = target[:-1]
    return target or None


def _cycles() -> list[list[str]]:
    """Strongly connected groups of two or more modules in the import graph (Tarjan)."""
    paths = {_module_parts(p): p for p in PKG.rglob("*.py") if _module_parts(p)}
    modules = set(paths)
    edges = {m: sorted({r for _, t in _imports(p) if (r := _resolve(t, modules)) and r != m}) for m, p in paths.items()}
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    out: list[list[str]] = []

    def visit(v):  # recursion depth is bounded by the module count (~200)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(".".join(w))
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return out


def _is_package_init_cycle(group: list[str]) -> bool:
    """A package whose ``__init__`` re-exports its submodules, which import helpers back from it,
    is one unit, not a cycle: every member is the package or inside it."""
    return any(all(g == p or g.startswith(p + ".") for g in group) for p in group)


def test_every_room_has_a_floor_and_imports_flow_down():
    bad = _violations()
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)


def test_no_module_imports_itself_through_others():
    cycles = [g for g in _cycles() if not _is_package_init_cycle(g)]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(g) for g in cycles)


def test_the_walker_sees_lazy_relative_sideways_and_cross_paper_imports(tmp_path):
    """The checker itself, on probes written to ``tmp_path`` (nothing is written under ``src/``)."""
    found = {".".join(t) for _, t in _imports(PKG / "store" / "sqlite.py")}
    assert "core.types" in found
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..api import Memory\n")
    up = _check("store/probe.py", ("store", "probe"), _imports(probe, ("store", "probe")))
    assert len(up) == 1 and "a floor above" in up[0]
    probe.write_text("from ..embed.minilm import MiniLMEmbedder\n")
    side = _check("llm/probe.py", ("llm", "probe"), _imports(probe, ("llm", "probe")))
    assert len(side) == 1 and "sibling room" in side[0]
    probe.write_text("from ..mempilot.config import MemPilotConfig\nfrom .config import AutoConfig\n")
    cross = _check(
        "strategies/auto/probe.py", ("strategies", "auto", "probe"), _imports(probe, ("strategies", "auto", "probe"))
    )
    assert len(cross) == 1 and "paper 'auto' imports paper 'mempilot'" in cross[0]
    probe.write_text("from .memorycpt.recipes import MEMORYCPT_EPISODIC\n")
    shared = _check("strategies/probe.py", ("strategies", "probe"), _imports(probe, ("strategies", "probe")))
    assert len(shared) == 1 and "a shared strategies module imports paper 'memorycpt'" in shared[0]


if __name__ == "__main__":  # pragma: no cover
    print("\n".join(_violations() + [" <-> ".join(g) for g in _cycles() if not _is_package_init_cycle(g)]) or "ok")

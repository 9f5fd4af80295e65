"""No import cycles in ``jupyter_gpuqueue/`` (DESIGN.md, "Layers": imports point down only).

Every ``import`` / ``from ... import`` of every module is read with ``ast`` — at module level, in
functions (lazy imports) and under ``if TYPE_CHECKING:`` alike, since a lazy import that closes a
cycle only hides it — and resolved to the module it names (``from .pkg import mod`` names the
module ``pkg.mod``, ``from .mod import name`` the module ``mod``). A package's ``__init__`` that
a submodule is imported through is not counted as imported by it (Python runs it first anyway);
a module that names its package explicitly (``from . import x``) is. The test fails with every
strongly connected component of the graph, each with one cycle spelled out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "jupyter_gpuqueue"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports anywhere in it."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in known else target)
    out.discard(name)
    return {m for m in out if m in known}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each as one cycle through
    all of its first module's reachable members, for the message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, comp) for comp in components]


def _one_cycle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A path ``a -> ... -> a`` inside the component (breadth first from its first module)."""
    members, start = set(comp), comp[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp  # pragma: no cover - a component always has a cycle


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles in jupyter_gpuqueue/:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_check_sees_cycles(tmp_path):
    """The check itself: a cycle through a lazy import in a function is found, a one-way chain
    is not."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import x\n")
    (pkg / "c.py").write_text("import os\nx = 1\n")
    assert cycles(import_graph(pkg)) == []
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    assert cycles(import_graph(pkg)) == [[f"{PACKAGE}.a", f"{PACKAGE}.sub.b", f"{PACKAGE}.c", f"{PACKAGE}.a"]]

"""No import circle anywhere in the package, lazy function-level imports included (issue 23).

A circle makes the import order matter and the modules impossible to understand one at a time:
``child/worker.py`` and ``template.py`` imported each other, and the kernel's job loop and the Ray
driver did, through a lazy import in a function. The graph here is built from every ``import``
statement of every module (at the top, in a function, under a condition), so a new circle fails
this test wherever the import sits.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kerasmagic

pytestmark = pytest.mark.unit

PACKAGE_ROOT = Path(kerasmagic.__file__).parent


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the package by its dotted name: its file, and whether it is a package."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        modules[".".join(parts)] = (path, is_package)
    return modules


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    """Module → the package's modules it imports (``from . import x`` counts as importing ``x``)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]) if node.level \
                    else node.module or ""
                base = base.rstrip(".")
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            graph[name].update(target for target in targets if target in modules and target != name)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle as a path that starts and ends at the same module (one per strongly connected set)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_path_through(graph, component) for component in components]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One circle inside a strongly connected set, by breadth-first search back to its first module."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for imported in sorted(graph[module] & component):
                if imported == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if imported not in came_from:
                    came_from[imported] = module
                    following.append(imported)
        frontier = following
    return sorted(component)


def test_the_package_has_no_import_circle():
    cycles = import_cycles(import_graph())
    assert not cycles, "import circles in kerasmagic:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_lazy_and_relative_imports_are_in_the_graph(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text("def later():\n    from ..a import name\n")
    (package / "c.py").write_text("import pkg.a\nfrom pkg import sub\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.a", "pkg.sub"}
    assert import_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]

"""Which names a cell reads from outside and which it assigns, from its ``ast`` alone.

A name is an input when the cell loads it before (in execution order) any store to it at the
top level, or when a function, class or comprehension in the cell reads it as a global. A
name is an output when the cell's top level binds it (assignment, ``for`` target, ``with
... as``, ``import``, ``def``, ``class``, ``except ... as``). Extra inputs cost only shipping
time; a missed one fails in the worker with a plain ``NameError``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class CellNames:
    """The free names a cell reads and the names it binds, each in first-seen order."""

    reads: list[str] = field(default_factory=list)
    assigns: list[str] = field(default_factory=list)


def _bound_in_scope(node: ast.AST) -> set[str]:
    """Names a function/class/comprehension binds locally (params, stores, imports, defs)."""
    bound: set[str] = set()
    declared_global: set[str] = set()
    args = getattr(node, "args", None)
    if isinstance(args, ast.arguments):
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                bound.add(arg.arg)
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            bound.add(child.id)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in child.names)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child is not node:
            bound.add(child.name)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            bound.add(child.name)
        elif isinstance(child, ast.Global):
            declared_global.update(child.names)
        elif isinstance(child, ast.arg):
            bound.add(child.arg)
    return bound - declared_global


def _free_loads(node: ast.AST) -> list[str]:
    bound = _bound_in_scope(node)
    seen: list[str] = []
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in bound:
            if child.id not in seen:
                seen.append(child.id)
    return seen


class _TopLevel(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names = CellNames()
        self._stored: set[str] = set()

    def _load(self, name: str) -> None:
        if name not in self._stored and name not in self.names.reads:
            self.names.reads.append(name)

    def _store(self, name: str) -> None:
        self._stored.add(name)
        if name not in self.names.assigns:
            self.names.assigns.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._load(node.id)
        else:
            self._store(node.id)

    # Execution order: the value is evaluated before the targets are bound.
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._load(node.target.id)  # `x += 1` reads x first
        self.visit(node.value)
        self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for statement in (*node.body, *node.orelse):
            self.visit(statement)

    visit_AsyncFor = visit_For

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._store((alias.asname or alias.name).split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._store(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._store(node.name)
        for statement in node.body:
            self.visit(statement)

    def _visit_scope(self, node: ast.AST, evaluated_now: list[ast.AST]) -> None:
        for expression in evaluated_now:  # decorators, defaults, bases: run at definition time
            self.visit(expression)
        for name in _free_loads(node):
            self._load(name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        self._visit_scope(node, [*node.decorator_list, *defaults])
        self._store(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_scope(node, [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)])
        self._store(node.name)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_scope(node, [*node.args.defaults])

    def _visit_comprehension(self, node: ast.AST) -> None:
        self._visit_scope(node, [])

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension


def analyse(code: str) -> CellNames:
    """The names ``code`` reads from outside and the names it binds at its top level.

    Raises:
        SyntaxError: the code does not parse.

    Example:
        >>> names = analyse("model = build(units)\\nhistory = model.fit(x, y)")
        >>> names.reads, names.assigns
        (['build', 'units', 'x', 'y'], ['model', 'history'])
    """
    visitor = _TopLevel()
    visitor.visit(ast.parse(code))
    return visitor.names

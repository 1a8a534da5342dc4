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


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _pattern_names(node: ast.AST) -> list[str]:
    """Names a ``match`` pattern binds: ``case [a, *rest]``, ``case {"k": v, **others}``, ``case P(x=x)``."""
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return [node.name] if node.name else []
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    return []


class _Scope:
    """One function/lambda/class/comprehension scope: what it binds, reads and declares global.

    Only this scope's own statements are walked; a nested scope is a child whose free names
    are resolved here (a name bound only in an inner function does not hide an outer read).
    """

    def __init__(self, node: ast.AST) -> None:
        self.node = node
        self.bound: set[str] = set()
        self.declared_global: set[str] = set()
        self.declared_nonlocal: set[str] = set()
        self.loads: list[str] = []
        self.children: list[_Scope] = []
        args = getattr(node, "args", None)
        if isinstance(args, ast.arguments):
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None:
                    self.bound.add(arg.arg)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body: list[ast.AST] = list(node.body)
        elif isinstance(node, ast.Lambda):
            body = [node.body]
        elif isinstance(node, ast.DictComp):
            body = [node.key, node.value, *self._comprehension_parts(node)]
        else:
            body = [node.elt, *self._comprehension_parts(node)]  # type: ignore[attr-defined]
        for child in body:
            self._walk(child)

    def _comprehension_parts(self, node: ast.AST) -> list[ast.AST]:
        parts: list[ast.AST] = []
        for index, generator in enumerate(node.generators):  # type: ignore[attr-defined]
            parts.append(generator.target)
            if index:  # the first iterable is evaluated in the enclosing scope (see free_names)
                parts.append(generator.iter)
            parts.extend(generator.ifs)
        return parts

    def _walk(self, node: ast.AST) -> None:
        if isinstance(node, _SCOPES):
            # What a definition evaluates where it stands, then its body as a scope of its own.
            for expression in evaluated_at_definition(node):
                self._walk(expression)
            if not isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
                self.bound.add(node.name)
            self.children.append(_Scope(node))
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if node.id not in self.loads:
                    self.loads.append(node.id)
            else:
                self.bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.bound.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.bound.add(node.name)
        elif isinstance(node, ast.Global):
            self.declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            self.declared_nonlocal.update(node.names)  # an enclosing function's name, not ours
        else:
            self.bound.update(_pattern_names(node))
        for child in ast.iter_child_nodes(node):
            self._walk(child)

    def free_names(self) -> list[tuple[str, bool]]:
        """Names this scope (and the scopes inside it) read from outside, in first-seen order,
        each with whether a ``global`` statement sends it past every enclosing function."""
        own_bound = self.bound - self.declared_global - self.declared_nonlocal
        free: list[tuple[str, bool]] = []

        def add(name: str, explicit: bool) -> None:
            if all(name != seen for seen, _ in free):
                free.append((name, explicit))

        for name in self.loads:
            if name in self.declared_global:
                add(name, True)
            elif name not in own_bound:
                add(name, False)
        for child in self.children:
            for name, explicit in child.free_names():
                # A class body's names are not visible to the functions inside it.
                if explicit or isinstance(self.node, ast.ClassDef) or name not in own_bound:
                    add(name, explicit)
        return free


def evaluated_at_definition(node: ast.AST) -> list[ast.AST]:
    """Parts of a def/lambda/class/comprehension that run where it stands, not in its body."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        expressions: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        if not isinstance(node, ast.Lambda):
            expressions = [*node.decorator_list, *expressions]
            # Annotations run at definition time too (without `from __future__ import annotations`).
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None and arg.annotation is not None:
                    expressions.append(arg.annotation)
            if node.returns is not None:
                expressions.append(node.returns)
        return expressions
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]
    if isinstance(node, _COMPREHENSIONS):
        return [node.generators[0].iter]
    return []


def _free_loads(node: ast.AST) -> list[str]:
    """The names a def/lambda/class/comprehension reads from the cell's globals.

    Example:
        >>> code = "def f():\\n    def g():\\n        x = 1\\n    return x + y"
        >>> _free_loads(ast.parse(code).body[0])
        ['x', 'y']
    """
    return [name for name, _ in _Scope(node).free_names()]


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

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
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

    def _visit_scope(self, node: ast.AST) -> None:
        for expression in evaluated_at_definition(node):  # decorators, defaults, bases, first iterable
            self.visit(expression)
        for name in _free_loads(node):
            self._load(name)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self._visit_scope(node)
        self._store(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        self._visit_scope(node)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

    # `match`: the subject, then each case's pattern (binding names), guard and body.
    def _visit_pattern(self, node: ast.AST) -> None:
        self.generic_visit(node)  # sub-patterns and the values/classes a pattern reads
        for name in _pattern_names(node):
            self._store(name)

    visit_MatchAs = visit_MatchStar = visit_MatchMapping = _visit_pattern


def uses_get_ipython(tree: ast.AST) -> bool:
    """Whether the code calls IPython (``get_ipython()``, which is what magics and ``!`` lines
    become after IPython's transforms); a mere mention in a string does not count.

    Example:
        >>> uses_get_ipython(ast.parse("get_ipython().run_line_magic('time', 'x = 1')"))
        True
        >>> uses_get_ipython(ast.parse("note = 'call get_ipython() in the kernel'"))
        False
    """
    return any(isinstance(node, ast.Name) and node.id == "get_ipython" and isinstance(node.ctx, ast.Load)
               for node in ast.walk(tree))


def analyse(code: str | ast.Module) -> CellNames:
    """The names ``code`` reads from outside and the names it binds at its top level.

    Raises:
        SyntaxError: the code does not parse.

    Example:
        >>> names = analyse("model = build(units)\\nhistory = model.fit(x, y)")
        >>> names.reads, names.assigns
        (['build', 'units', 'x', 'y'], ['model', 'history'])
    """
    visitor = _TopLevel()
    visitor.visit(ast.parse(code) if isinstance(code, str) else code)
    return visitor.names

"""``fresh_model()`` / ``%%fresh_model``: clean the session, then measure the block that follows."""

from __future__ import annotations

import ast
import difflib
import dis
import sys
import types
from collections.abc import Iterable
from typing import Any, Literal

from . import events
from .clean import CleanReport, clear_tf, trim_heap
from .errors import KerasMagicUsageError
from .holders import caller_globals, running_shell
from .measuring import CellMeasurement, measure
from .probes import process as process_probe
from .tables import Report, Section, format_bytes

__all__ = ['NOTE_MIN_TRACES', 'STACK_TRACE_BYTES', 'TRIM_NOTE_MIN_BYTES', 'FreshModelResult', 'assigned_names',
           'fresh_model', 'rebound_names', 'tf_stack_traces_note']


class FreshModelResult(Report):
    """The clean that ran before a block and the measurement of the block itself.

    Example:
        >>> from kerasmagic import fresh_model
        >>> with fresh_model(seed=0) as result:          # doctest: +SKIP
        ...     model = build_and_fit()
        >>> result.clean.models_freed, result.cell.rss_peak_above_start_bytes   # doctest: +SKIP
        (1, 52428800)
    """

    def __init__(self, clean: CleanReport, cell: CellMeasurement) -> None:
        self.clean = clean
        self.cell = cell
        self.hints: list[str] = []
        #: Names asked to be deleted that did not exist yet because the block creates them (its first run).
        self.not_yet: list[str] = []
        #: Stack traces TensorFlow took during the block that hold the block's code for good (see
        #: :func:`tf_stack_traces_note`); None when not counted (TensorFlow not imported, the block failed).
        self.tf_stack_traces: int | None = None
        #: RSS that the heap trim after the block handed back to the OS: what the block freed but glibc
        #: kept (None where there is no ``malloc_trim``). The cell's figures are read after it.
        self.heap_trimmed_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"clean": self.clean.to_dict(), "cell": self.cell.to_dict(), "hints": list(self.hints),
                "not_yet": list(self.not_yet), "tf_stack_traces": self.tf_stack_traces,
                "heap_trimmed_bytes": self.heap_trimmed_bytes}

    def _title(self) -> str:
        return f"kerasmagic: fresh model — {self.cell._title().removeprefix('kerasmagic: ')}"

    def _sections(self) -> list[Section]:
        before = Section("Clean before the cell")
        before.add(
            "freed",
            format_bytes(-self.clean.rss_freed_bytes, signed=True),
            f"RSS, in {self.clean.seconds:.2f} s; "
            + (f"{self.clean.models_freed} of {self.clean.models_tracked} models freed"
               + (f" ({self.clean.models_unreachable} of them held by nothing of the notebook)"
                  if self.clean.models_unreachable else "")
               if self.clean.models_tracked else "no model was alive"),
        )
        if self.clean.gpu_freed_bytes is not None:
            before.add("GPU freed", format_bytes(-self.clean.gpu_freed_bytes, signed=True),
                       "this process, NVML, all devices")
        if self.clean.registry is not None and self.clean.registry.purged:
            before.add("gradient registry", f"{self.clean.registry.purged} purged", "dead CustomGradient entries")
        before.notes.extend(f"dropped {item}" for item in self.clean.dropped)
        if self.not_yet:
            names = ", ".join(self.not_yet)
            before.notes.append(f"nothing to delete yet: {names} {'is' if len(self.not_yet) == 1 else 'are'} "
                                "created by this cell (its first run)")
        cell = self.cell._sections()
        # A sentence the cell's sections already give (why TF has no CPU figures) is said once.
        said = {note.removeprefix("n/a: ") for section in cell for note in section.notes}
        held = Section("Still held before the cell")
        held.notes.extend(item for item in self.clean.still_held if item not in said)
        after = Section("After the cell")
        if self.heap_trimmed_bytes is not None and self.heap_trimmed_bytes >= TRIM_NOTE_MIN_BYTES:
            after.add("heap returned", format_bytes(-self.heap_trimmed_bytes, signed=True),
                      "RSS: memory the cell freed that glibc kept, handed back to the OS (malloc_trim)")
        kept = Section("Kept by TensorFlow")
        note = tf_stack_traces_note(self.tf_stack_traces or 0)
        if note:
            kept.notes.append(note)
        hints = Section("Hints")
        hints.notes.extend(self.hints)
        return [before, *cell, after, held, kept, hints]


#: A smaller heap trim after the block is not shown: it is within what RSS moves by on its own.
TRIM_NOTE_MIN_BYTES = 256 * 1024
#: What one of TensorFlow's kept stack traces costs, with its share of the cell's code: measured as
#: 0.55-0.73 MiB per run of a cell whose Keras fit left 333-356 traces (TF 2.21, Python 3.11). The
#: figure depends on the depth of the stacks, so the note calls the total an estimate.
STACK_TRACE_BYTES = 2 * 1024
#: Fewer kept traces than this are not worth a line: building a Keras model without fitting it
#: leaves about 13 (26 KiB), well under what RSS figures can show.
NOTE_MIN_TRACES = 50


def tf_stack_traces_note(count: int) -> str:
    """What the stack traces TensorFlow kept from a block cost, and why no clean frees them.

    TensorFlow (``StackTrace::Capture`` in ``tensorflow/python/util/stack_trace.cc``) records the
    Python stack of every op it creates while tracing, for the "defined at" lines of its error
    messages, and keeps each distinct stack (more than 16 frames deep, which a Keras ``fit`` is) in
    a process-wide cache that nothing clears, with a reference to the code object of every frame.
    A cell is a new code object on each run, so each run that traces adds its stacks again.

    Example:
        >>> tf_stack_traces_note(13)     # a model built, not fitted: too little to mention
        ''
        >>> tf_stack_traces_note(350)[:60]
        'TensorFlow keeps 350 stack traces of the ops this cell trace'
    """
    if count < NOTE_MIN_TRACES:
        return ""
    return (f"TensorFlow keeps {count} stack traces of the ops this cell traced (for its error messages), "
            f"each holding the cell's compiled code: about {format_bytes(count * STACK_TRACE_BYTES)} that no "
            "clean can free, added again by each run of a cell; they go when the process ends "
            "(%%fresh_model --isolate runs a cell in a fresh process).")


_NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
               ast.DictComp, ast.GeneratorExp)


def assigned_names(code: str | ast.AST | types.CodeType) -> set[str]:
    """The names a cell (its source, its parsed tree or its compiled code) binds at its top level:
    assignments, loop and ``with`` targets, imports, ``def``/``class`` names. What a function or
    comprehension in it binds is its own, not the cell's.

    Example:
        >>> sorted(assigned_names("model = make()\\nfor epoch in range(3):\\n    history = model.fit()\\n"
        ...                       "def f():\\n    hidden = 1"))
        ['epoch', 'f', 'history', 'model']
    """
    if isinstance(code, types.CodeType):
        stores = ("STORE_NAME", "STORE_GLOBAL", "STORE_FAST", "STORE_DEREF")
        return {ins.argval for ins in dis.get_instructions(code) if ins.opname in stores}
    tree = ast.parse(code) if isinstance(code, str) else code
    names: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        if isinstance(node, _NEW_SCOPES):
            if not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                names.add(node.name)
            continue  # its body binds its own names
        stack.extend(ast.iter_child_nodes(node))
    return names


def rebound_names(code: str | ast.Module) -> set[str]:
    """The names every run of a cell rebinds before it reads them: deleting one before the cell
    loses nothing the cell would have kept. A name counts where a plain assignment binds it at
    the cell's top level or in the body of a top-level ``for`` or ``with``, and nothing in the
    cell reads it before that statement ends. A name bound only under ``if``, ``while``, ``try``
    or ``match`` is not one (``best_model = model`` when a trial beats the best: deleting it first
    loses the best model), nor one that ``+=`` or the assignment itself reads.

    Example:
        >>> sorted(rebound_names("for t in range(3):\\n    model = make()\\n    if better(model):\\n"
        ...                      "        best = model\\nlog = log + [1]"))
        ['model', 't']
    """
    tree = ast.parse(code) if isinstance(code, str) else code
    bound_at: dict[str, tuple[int, int]] = {}  # name -> where the statement that surely binds it ends

    def bind(target: ast.expr, statement: ast.stmt | ast.expr) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in bound_at:
                bound_at[node.id] = (statement.end_lineno or statement.lineno, statement.end_col_offset or 0)

    def leaves(statement: ast.stmt) -> bool:
        """Whether the statement can end the block before what follows it runs (a loop's own
        ``break`` ends only the loop)."""
        ends = (ast.Raise, ast.Return) if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)) else (
            ast.Break, ast.Continue, ast.Raise, ast.Return)
        return any(isinstance(node, ends) for node in ast.walk(statement))

    def visit(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, (ast.Name, ast.Tuple, ast.List)):
                        bind(target, statement)
            elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                bind(statement.target, statement)
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                # Bound once its iterable is read: `for model in model.layers` reads `model` first.
                bind(statement.target, statement.iter)
                visit(statement.body)  # a loop over nothing is not what a training cell does
            elif isinstance(statement, (ast.With, ast.AsyncWith)):
                visit(statement.body)
            if leaves(statement):
                return  # `if stop: break`: what follows may not run

    visit(tree.body)
    read_early = {node.id for node in ast.walk(tree)
                  if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store) and node.id in bound_at
                  and (node.lineno, node.col_offset) < bound_at[node.id]}
    return set(bound_at) - read_early


def _split_missing(names: tuple[str, ...], namespace: dict[str, Any], creates: set[str]
                   ) -> tuple[tuple[str, ...], list[str]]:
    """The names to delete, and those that do not exist yet because the block creates them (a loop
    cell's first run: nothing to delete, nothing wrong). A name that neither exists nor is created
    by the block is a mistake: it is refused here, before anything is deleted, with what was meant."""
    present, not_yet = [], []
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or name in namespace:
            present.append(name)  # clear_tf checks and words everything else
        elif name in creates:
            not_yet.append(name)
        else:
            known = [n for n in (*namespace, *creates) if isinstance(n, str) and not n.startswith("_")]
            close = difflib.get_close_matches(name, known, n=1)
            meant = f"; did you mean {close[0]!r}?" if close else ""
            raise KerasMagicUsageError(
                f"no variable named {name!r}, and the cell does not create it either: nothing was deleted{meant} "
                "(%who lists your variables)")
    return tuple(present), not_yet


def _references(codes: tuple[types.CodeType, ...]) -> int:
    return sum(sys.getrefcount(code) for code in codes)


class fresh_model:  # noqa: N801 - used like a function: `with fresh_model():`
    """Clean the session (``clear_tf``), then measure the block; the report is filled even if it raises.

    Args:
        *names: variables to delete before the block (e.g. the previous ``model``).
        seed: ``keras.utils.set_random_seed(seed)`` after the clean, so the block is repeatable.
        purge_hidden: drop output-cache entries and the last exception (default True).
        purge_registry: purge dead TensorFlow gradient-registry entries (default True).
        clear_jax_caches: also clear JAX's compiled functions (default False; see ``clear_tf``).
        shell: the IPython shell (default: the running one, if any).
        namespace: where ``names`` live when there is no shell (default: the calling
            module's globals; pass ``locals()`` or your own dict from inside a function).
        label: the name the report gives the block.
        creates: the names the block assigns (``%%fresh_model`` passes its cell's); default: those
            the calling code stores. A name in ``names`` that does not exist yet but that the
            block creates is the first run of a loop cell: nothing to delete, and the block
            runs. A name that neither exists nor is created is refused (a typo).
        codes: the code objects the block runs in (``%%fresh_model`` passes its cell's); default: the
            calling code's. The references TensorFlow's stack-trace cache takes to them during the
            block are counted as ``result.tf_stack_traces`` (:func:`tf_stack_traces_note`).

    Example:
        >>> from kerasmagic import fresh_model
        >>> for fold in range(5):                               # doctest: +SKIP
        ...     with fresh_model(seed=fold) as result:
        ...         model = make_model(); model.fit(x[fold], y[fold])
        ...     print(result.cell.rss_delta_bytes)
    """

    def __init__(
        self,
        *names: str,
        seed: int | None = None,
        purge_hidden: bool = True,
        purge_registry: bool = True,
        clear_jax_caches: bool = False,
        shell=None,
        namespace: dict[str, Any] | None = None,
        label: str = "cell",
        creates: Iterable[str] | None = None,
        codes: Iterable[types.CodeType] | None = None,
    ) -> None:
        self._clean_args = dict(
            shell=shell, seed=seed, purge_hidden=purge_hidden, purge_registry=purge_registry, namespace=namespace,
            clear_jax_caches=clear_jax_caches,
        )
        self._names = names
        self._creates = None if creates is None else set(creates)
        self._label = label
        self._measure: measure | None = None
        self.result: FreshModelResult | None = None
        self._codes = None if codes is None else tuple(codes)
        self._code_refs = 0

    def __enter__(self) -> FreshModelResult:
        namespace = self._clean_args["namespace"]
        caller = sys._getframe(1)
        shell = self._clean_args["shell"]
        if namespace is None and shell is None:
            shell = running_shell()
            if shell is None:
                # A script: names live in the caller's module globals.
                self._clean_args["namespace"] = caller_globals()
        where = self._clean_args["namespace"] if self._clean_args["namespace"] is not None else shell.user_ns
        names, not_yet = self._names, list[str]()
        if isinstance(where, dict):  # anything else is clear_tf's to refuse, in its words
            creates = self._creates if self._creates is not None else assigned_names(caller.f_code)
            names, not_yet = _split_missing(self._names, where, creates)
        clean = clear_tf(*names, **self._clean_args)
        # The block's new models are looked for where its names live (no shell: a script).
        self._measure = measure(self._label, namespace=self._clean_args["namespace"])
        cell = self._measure.__enter__()
        self.result = FreshModelResult(clean, cell)
        self.result.not_yet = not_yet
        if self._codes is None:
            self._codes = (caller.f_code,)
        # Read with the same holders as in __exit__ (the running frame, self._codes): what is added
        # in between is held from outside Python, by TensorFlow's stack-trace cache.
        self._code_refs = _references(self._codes)
        return self.result

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if self.result is not None:
            # The clean trims before the block; what the block frees (most of a fit's working memory)
            # would stay in glibc's heap, resident, until the next clean: 0.35-0.45 MiB per cell that
            # fits a small model, read as growth per model by anyone watching RSS (issue 20).
            before = process_probe.rss_bytes()
            if trim_heap() is None:
                self.result.heap_trimmed_bytes = max(before - process_probe.rss_bytes(), 0)
        if self._measure is not None:
            self._measure.__exit__(exc_type, exc, tb)
        # A failed block's traceback holds its frame, hence its code: not counted then.
        if self.result is not None and self._codes is not None and exc_type is None and "tensorflow" in sys.modules:
            self.result.tf_stack_traces = max(_references(self._codes) - self._code_refs, 0)
        if self.result is not None:  # set by __enter__
            events.publish("fresh_model", self.result.to_dict())
        return False

"""The IPython magics: a thin layer that parses arguments and displays the core's results.

``%tf_mem`` / ``%%tf_mem``, ``%clear_tf`` and ``%%fresh_model`` map 1:1 onto
``tf_mem()`` / ``measure()``, ``clear_tf()`` and ``fresh_model()``. Everything a magic
knows beyond parsing lives in those functions, so scripts get the same behaviour.
"""

from __future__ import annotations

import ast
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .errors import KerasMagicUsageError, check_seed, check_timeout
from .ipython_names import new_variable_name_problem

__all__ = ['KerasMagics', 'current_cell_number']


@contextmanager
def _usage_errors() -> Iterator[None]:
    """Our input errors become IPython's ``UsageError``: one red line, no internal traceback."""
    try:
        yield
    except KerasMagicUsageError as exc:
        raise UsageError(str(exc)) from None


def _check_var_name(name: str | None, option: str) -> None:
    """Refuse an ``-o VAR`` we must not assign: not a name, a keyword, or one IPython needs
    (``-o get_ipython`` would break every later magic, ``-o _oh`` every later output)."""
    if name is None:
        return
    if not name.isidentifier():
        raise UsageError(f"{option} needs a variable name, got {name!r}; e.g. {option} report")
    problem = new_variable_name_problem(name)
    if problem is not None:
        raise UsageError(f"{option} needs a new variable name; {problem}; e.g. {option} report")


def _timeout_seconds(text: str | None) -> float | None:
    """``--timeout``'s seconds, by the rule (and in the words) of ``run_isolated(timeout=...)``.

    Example:
        >>> _timeout_seconds("600"), _timeout_seconds(None)
        (600.0, None)
        >>> _timeout_seconds("abc")
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: the timeout must be a finite number of seconds > 0, e.g. 600; got 'abc'
    """
    if text is None:
        return None
    try:
        seconds: Any = float(text)
    except ValueError:
        seconds = text  # not a number at all: check_timeout refuses it, saying what to give
    check_timeout(seconds)
    return seconds


class _CellRunner:
    """Runs a cell body the way IPython would: in the user's namespace, last expression as the value.

    The code is registered with IPython's compiler cache so that a traceback shows the
    cell's own lines, and our frames carry ``__tracebackhide__`` so that the user's
    exception reads as if the magic were not there.
    """

    def __init__(self, shell, cell: str, header: str) -> None:
        self.shell = shell
        self.source = shell.transform_cell(cell)
        try:
            tree = ast.parse(self.source)
        except SyntaxError as exc:
            raise UsageError(
                f"the cell does not parse: {exc.msg} (line {(exc.lineno or 0) + 1}: {(exc.text or '').strip()!r}); "
                "nothing was run"
            ) from None
        tree = shell.transform_ast(tree)
        # The magic's own line comes first in the notebook: shift by one so that tracebacks
        # point at the line numbers the user sees, and show the header as that first line.
        ast.increment_lineno(tree, 1)
        last_expression = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last_expression = ast.Expression(tree.body.pop().value)
        self.body = tree
        self.cell_number = current_cell_number(shell)
        self.filename = shell.compile.cache(f"# {header}\n{self.source}", self.cell_number, raw_code=cell)
        # Compile everything before anything runs: a cell must not run halfway, then fail.
        try:
            self._code = compile(tree, self.filename, "exec")
            self._last = None if last_expression is None else compile(last_expression, self.filename, "eval")
        except SyntaxError as exc:
            hint = " (top-level await: put the code in an async function and asyncio.run() it)" if (
                "await" in (exc.msg or "")) else ""
            raise UsageError(f"the cell cannot run under {header.split()[0]}: {exc.msg}{hint}; nothing was run") from None

    def run(self) -> Any:
        __tracebackhide__ = True  # noqa: F841 - read by IPython's traceback formatter
        namespace = self.shell.user_ns
        exec(self._code, namespace)
        return None if self._last is None else eval(self._last, namespace)


def _assigned_names(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _reassigned_model_hints(shell, runner: "_CellRunner", named: list[str]) -> list[str]:
    """Variables the cell overwrites that hold a model now: it stays alive until the assignment.

    We do not delete them on our own (if the cell failed before reassigning, the user's
    model would be gone); we say how to free them first instead.
    """
    from .probes.keras import model_classes

    classes = model_classes()
    if not classes:
        return []
    names = sorted(
        name for name in _assigned_names(runner.body)
        if name not in named and isinstance(shell.user_ns.get(name), classes)
    )
    if not names:
        return []
    listed = " ".join(names)
    return [f"{', '.join(names)} still held the previous model while this cell ran; "
            f"`%%fresh_model {listed}` deletes it before the cell so its memory is reused"]


def current_cell_number(shell) -> int:
    """The number of the running cell: IPython counts the next one before it executes."""
    return max(int(shell.execution_count) - 1, 1)


def _ends_with_semicolon(cell: str) -> bool:
    """IPython's own rule for "a trailing ; hides the value" (comments after it allowed)."""
    from IPython.core.displayhook import DisplayHook

    try:
        return DisplayHook.semicolon_at_end_of_expression(cell)
    except Exception:  # noqa: BLE001 - tokenize errors: the cell already compiled, show the value
        return False


@magics_class
class KerasMagics(Magics):
    """``%tf_mem``, ``%%tf_mem``, ``%clear_tf`` and ``%%fresh_model``; loaded by ``%load_ext kerasmagic``."""

    # --- %tf_mem / %%tf_mem ------------------------------------------------------------------

    @magic_arguments()
    @argument("-o", "--output", nargs="?", const="", default=None, metavar="VAR",
              help="Keep the result object: a bare -o returns it (snap = %%tf_mem -o), -o VAR stores it "
                   "in VAR. For the cell magic the CellMeasurement goes to VAR (default _tf_mem).")
    @argument("-q", "--quiet", action="store_true", help="Do not display the report.")
    @argument("--who", action="store_true",
              help="Also list what keeps Keras models and large arrays/tensors alive: your variables, "
                   "the output cache (Out, _N, _, __, ___), History.model, the last exception's frames.")
    @argument("--live", action="store_true",
              help="Show a live view that updates every second (for frontends without the sidebar).")
    @line_cell_magic
    def tf_mem(self, line: str = "", cell: str | None = None):
        """Show what memory this kernel uses and who holds it; as a cell magic, measure the cell.

        Line magic: one snapshot of the process (RSS, peak, container limit), TensorFlow's
        allocator per device (in use, held but unused, peak), the GPU (TensorFlow's view next
        to NVML's), Keras (name counters, live models with weight and optimizer bytes) and
        the legacy graph. Nothing is imported or started to take it.

        Cell magic: run the cell and show its deltas with exact peaks (RSS peak from the
        kernel's VmHWM on Linux). The report is shown even when the cell raises; your
        exception then propagates unchanged.

        Examples::

            %tf_mem                  # snapshot
            %tf_mem --who            # ... and who keeps models / big arrays alive
            snap = %tf_mem -o        # the MemorySnapshot object (snap.to_dict())
            %tf_mem --live           # a live view without the JupyterLab sidebar

            %%tf_mem -o m
            model.fit(x, y, epochs=3)
        """
        __tracebackhide__ = True  # noqa: F841
        args = parse_argstring(self.tf_mem, line)
        if cell is None:
            return self._tf_mem_line(args)
        return self._tf_mem_cell(args, cell, line)

    def _tf_mem_line(self, args):
        if args.live:
            if args.output is not None or args.who:
                raise UsageError("--live shows a live view; use it without -o and --who")
            from .live.widget import show_live

            return show_live(self.shell)
        _check_var_name(args.output or None, "-o")
        from .snapshot import tf_mem

        snapshot = tf_mem(self.shell, who=args.who)
        if args.output:
            self.shell.user_ns[args.output] = snapshot
        elif args.output is not None:
            return snapshot
        if not args.quiet:
            display(snapshot)
        return None

    def _tf_mem_cell(self, args, cell: str, line: str):
        __tracebackhide__ = True  # noqa: F841
        if args.live or args.who:
            raise UsageError("%%tf_mem measures a cell; --who and --live belong to the line magic %tf_mem")
        _check_var_name(args.output or None, "-o")
        from .measuring import measure

        runner = _CellRunner(self.shell, cell, f"%%tf_mem {line}")
        meter = measure(label=f"cell [{runner.cell_number}]")
        try:
            with meter as result:
                value = runner.run()
        finally:
            # Shown before the exception propagates, so a failing cell still gets its figures.
            if args.output is not None:
                self.shell.user_ns[args.output or "_tf_mem"] = meter.result
            if not args.quiet:
                display(meter.result)
        return None if _ends_with_semicolon(cell) else value

    # --- %clear_tf ---------------------------------------------------------------------------

    @magic_arguments()
    @argument("names", nargs="*", metavar="NAME",
              help="Variables to delete, with every output-cache copy of their objects (%%xdel semantics).")
    @argument("--seed", type=int, default=None, metavar="N",
              help="Call keras.utils.set_random_seed(N) after the clean (otherwise your seed is kept).")
    @argument("--keep-hidden", action="store_true",
              help="Do not drop hidden holders (output-cache entries with models or tensors, the last exception).")
    @argument("--keep-registry", action="store_true",
              help="Do not purge dead CustomGradient entries from TensorFlow's gradient registry.")
    @argument("-q", "--quiet", action="store_true", help="Do not display the report.")
    @argument("-o", "--output", action="store_true", help="Return the CleanReport (report = %%clear_tf -o).")
    @line_magic
    def clear_tf(self, line: str = ""):
        """Free what the Keras/TensorFlow session holds, and say what could not be freed.

        Deletes only the variables you name (and the output-cache copies of their
        objects); drops the hidden holders IPython keeps (Out[] entries holding models
        or tensors, the last exception and its frames) and lists each one; runs
        keras.backend.clear_session() while keeping your dtype policy and seed; resets
        the legacy graph; purges TensorFlow's dead CustomGradient registry entries (the
        cause of Keras 3 models leaking after clear_session); one gc; malloc_trim.

        Examples::

            %clear_tf                      # free what nobody uses any more
            %clear_tf model history        # ... and delete these variables first
            %clear_tf --seed 42            # and start the next model from seed 42
            report = %clear_tf -q -o
        """
        args = parse_argstring(self.clear_tf, line)
        from .clean import clear_tf

        with _usage_errors():
            report = clear_tf(
                *args.names, shell=self.shell, seed=args.seed,
                purge_hidden=not args.keep_hidden, purge_registry=not args.keep_registry,
            )
        if args.output:
            return report  # shown once, as the cell's value
        if not args.quiet:
            display(report)
        return None

    # --- %%fresh_model -----------------------------------------------------------------------

    @magic_arguments()
    @argument("names", nargs="*", metavar="NAME",
              help="Variables to delete before the cell (e.g. the previous model); no other variable is touched.")
    @argument("--seed", type=int, default=None, metavar="N",
              help="keras.utils.set_random_seed(N) before the cell, for repeatable runs.")
    @argument("-q", "--quiet", action="store_true", help="Do not display the report.")
    @argument("-o", "--output", default=None, metavar="VAR",
              help="Store the result object (FreshModelResult or IsolatedResult) in VAR.")
    @argument("--keep-hidden", action="store_true",
              help="Do not drop hidden holders (output cache, last exception) before the cell.")
    @argument("--keep-registry", action="store_true",
              help="Do not purge dead CustomGradient entries before the cell.")
    @argument("--isolate", action="store_true",
              help="Run the cell in a fresh worker process that gives every byte back when it ends.")
    @argument("--in", dest="inputs", nargs="+", default=None, metavar="NAME",
              help="With --isolate: also send these variables (names the cell reads are sent anyway).")
    @argument("--out", dest="outputs", nargs="+", default=None, metavar="NAME",
              help="With --isolate: bring back only these variables (default: every name the cell assigns).")
    @argument("--no-return", action="store_true", help="With --isolate: bring nothing back (cells that write files).")
    # Read as text and checked by check_timeout: `--timeout abc` and `--timeout nan` then fail with
    # the one message run_isolated(timeout=...) gives, not argparse's "invalid float value".
    @argument("--timeout", default=None, metavar="S", help="With --isolate: kill the worker after S seconds.")
    @argument("--gpu", default=None, metavar="N", help="With --isolate: CUDA_VISIBLE_DEVICES for the worker: GPU indices (0 or 0,1), GPU-/MIG- UUIDs, or -1 for none.")
    @argument("--env", nargs="+", default=None, metavar="K=V",
              help="With --isolate: environment for the worker, set before TensorFlow starts.")
    @cell_magic
    def fresh_model(self, line: str, cell: str):
        """Start the cell from a clean session, measure it, optionally in a fresh process.

        Before the cell: the same clean as %clear_tf (named variables deleted, hidden
        holders dropped, Keras session cleared with your settings kept, dead gradient
        registry entries purged, gc, malloc_trim). Then the cell runs and its deltas and
        exact peaks are shown. If the cell raises, the report is shown and then your
        exception with its own traceback.

        With --isolate the cell runs in a fresh process instead (a fork of a warm template): the names
        it reads are sent, the names it assigns come back (Keras models as models), its
        output streams live, and when it ends the process returns all of its memory,
        TensorFlow's CPU pool and GPU memory included.

        Examples::

            %%fresh_model --seed 0
            model = make_model()
            history = model.fit(x, y, epochs=5)

            %%fresh_model model history      # delete the previous ones first

            %%fresh_model --isolate --timeout 600
            model = make_model(); history = model.fit(x_train, y_train)
        """
        __tracebackhide__ = True  # noqa: F841
        args = parse_argstring(self.fresh_model, line)
        _check_var_name(args.output, "-o")
        isolation_only = [flag for flag, value in (
            ("--in", args.inputs), ("--out", args.outputs), ("--no-return", args.no_return),
            ("--timeout", args.timeout), ("--gpu", args.gpu), ("--env", args.env)) if value]
        if isolation_only and not args.isolate:
            raise UsageError(f"{', '.join(isolation_only)} only work with --isolate; add --isolate to the line")
        with _usage_errors():
            args.timeout = _timeout_seconds(args.timeout)
            check_seed(args.seed)
        if args.isolate:
            return self._fresh_model_isolated(args, cell)
        from .fresh import fresh_model

        runner = _CellRunner(self.shell, cell, f"%%fresh_model {line}")
        hints = _reassigned_model_hints(self.shell, runner, args.names)
        with _usage_errors():
            context = fresh_model(
                *args.names, seed=args.seed, purge_hidden=not args.keep_hidden,
                purge_registry=not args.keep_registry, shell=self.shell,
                label=f"cell [{runner.cell_number}]",
            )
            result = context.__enter__()
        result.hints.extend(hints)
        failed = True
        try:
            value = runner.run()
            failed = False
        finally:
            context.__exit__(*(sys.exc_info() if failed else (None, None, None)))
            if args.output:
                self.shell.user_ns[args.output] = result
            if not args.quiet:
                display(result)
        return None if _ends_with_semicolon(cell) else value

    def _fresh_model_isolated(self, args, cell: str):
        __tracebackhide__ = True  # noqa: F841
        if args.names:
            raise UsageError("--isolate starts from a fresh process: there is nothing to delete, drop the names")
        env = {}
        for pair in args.env or []:
            key, sep, value = pair.partition("=")
            if not sep or not key.isidentifier():
                raise UsageError(f"--env takes KEY=VALUE pairs, got {pair!r}; e.g. --env TF_ENABLE_ONEDNN_OPTS=0")
            env[key] = value
        from .isolation.cell import run_cell_isolated

        result = None
        try:
            with _usage_errors():
                result = run_cell_isolated(
                    self.shell, cell, inputs=args.inputs, outputs=args.outputs, no_return=args.no_return,
                    timeout=args.timeout, gpu=args.gpu, env=env, seed=args.seed, quiet=args.quiet,
                )
        except BaseException as exc:
            result = getattr(exc, "result", None)
            raise
        finally:
            if result is not None:
                if args.output:
                    self.shell.user_ns[args.output] = result
                if not args.quiet:
                    display(result)
        return None

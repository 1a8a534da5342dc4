"""The IPython magics: a thin layer that parses arguments and displays the core's results.

``%tf_mem`` / ``%%tf_mem``, ``%clear_tf`` and ``%%fresh_model`` map 1:1 onto
``tf_mem()`` / ``measure()``, ``clear_tf()`` and ``fresh_model()``. Everything a magic
knows beyond parsing lives in those functions, so scripts get the same behaviour.

Built as IPython's own magics are: options by ``@magic_arguments``, each value checked by its
``type=`` (in the Python API's words), ``-o`` returning the result object as ``%timeit -o``
does, and ``@output_can_be_silenced`` hiding the value of a cell (or line) that ends with ``;``.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import types
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from IPython.utils.process import arg_split

from .cell_numbers import running_cell_number
from .compat import output_can_be_silenced
from .errors import KerasMagicUsageError, check_seed, check_timeout
from .ipython_names import new_variable_name_problem

__all__ = ['KerasMagics']

_F = TypeVar("_F", bound=Callable[..., Any])


@contextmanager
def _usage_errors() -> Iterator[None]:
    """Our input errors become IPython's ``UsageError``: one red line, no internal traceback."""
    try:
        yield
    except KerasMagicUsageError as exc:
        raise UsageError(str(exc)) from None


# --- option values: argparse ``type=`` callables -----------------------------------------------
# Each raises UsageError itself: argparse would replace a ValueError's words with its own
# ("invalid int value") and prefix an ArgumentTypeError's; a UsageError passes through as is,
# so a magic and the Python API refuse a value in the same words.


def _seed(text: str) -> int:
    """``--seed N``, by the rule (and in the words) of ``clear_tf(seed=...)``.

    Example:
        >>> _seed("42")
        42
        >>> _seed("forty")
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: the seed must be an integer from 0 to 2**32 - 1, got 'forty'; e.g. --seed 42
    """
    try:
        seed: Any = int(text)
    except ValueError:
        seed = text  # not an integer at all: check_seed refuses it, saying what to give
    with _usage_errors():
        check_seed(seed)
    return seed


def _timeout_seconds(text: str) -> float:
    """``--timeout S``, by the rule (and in the words) of ``run_isolated(timeout=...)``.

    Example:
        >>> _timeout_seconds("600")
        600.0
        >>> _timeout_seconds("abc")
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: the timeout must be a finite number of seconds > 0, e.g. 600; got 'abc'
    """
    try:
        seconds: Any = float(text)
    except ValueError:
        seconds = text
    with _usage_errors():
        check_timeout(seconds)
    return seconds


def _result_variable(name: str) -> str:
    """``--as VAR``: a new variable name; never one IPython needs (``--as get_ipython`` would
    break every later magic, ``--as _oh`` every later output) or a keyword.

    Example:
        >>> _result_variable("report")
        'report'
        >>> _result_variable("In")
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: --as needs a new variable name; 'In' is IPython's (...); e.g. --as report
    """
    if not name.isidentifier():
        raise UsageError(f"--as needs a variable name, got {name!r}; e.g. --as report")
    problem = new_variable_name_problem(name)
    if problem is not None:
        raise UsageError(f"--as needs a new variable name; {problem}; e.g. --as report")
    return name


def _variable_to_delete(name: str) -> str:
    """A ``NAME`` of ``%clear_tf``/``%%fresh_model``; whether it exists is ``clear_tf``'s to say."""
    if not name.isidentifier():
        raise UsageError(f"{name!r} is not a variable name; name the variables to delete, e.g. model history")
    return name


def _gpu(text: str) -> str | None:
    """``--gpu``, as ``run_isolated(gpu=...)`` checks it (CUDA ignores what it cannot parse)."""
    from .isolation.api import check_gpu

    with _usage_errors():
        return check_gpu(text)


def _env_pair(pair: str) -> tuple[str, str]:
    """``--env KEY=VALUE``.

    Example:
        >>> _env_pair("TF_ENABLE_ONEDNN_OPTS=0")
        ('TF_ENABLE_ONEDNN_OPTS', '0')
    """
    key, sep, value = pair.partition("=")
    if not sep or not key.isidentifier():
        raise UsageError(f"--env takes KEY=VALUE pairs, got {pair!r}; e.g. --env TF_ENABLE_ONEDNN_OPTS=0")
    return key, value


# --- the option blocks the magics share -----------------------------------------------------------


def _options(*decorators: Callable[[_F], _F]) -> Callable[[_F], _F]:
    """Several ``@argument`` decorators as one, in the order written (as if stacked)."""
    def apply(func: _F) -> _F:
        for decorate in reversed(decorators):
            func = decorate(func)
        return func
    return apply


def _result_options(returned: str) -> Callable[[_F], _F]:
    """``-q``, ``-o`` and ``--as``: the same meaning in every magic. ``returned`` says how ``-o``
    hands the result over (a line magic returns it, a cell magic makes it the cell's value)."""
    return _options(
        argument("-q", "--quiet", action="store_true", help="Do not display the report."),
        argument("-o", "--output", action="store_true",
                 help=f"Return the result object, as %%timeit -o does: {returned.replace('%', '%%')}. "
                      "The magic does not display it then: the notebook shows it once, as the value "
                      "(a last ; hides it)."),
        argument("--as", dest="store_as", type=_result_variable, default=None, metavar="VAR",
                 help="Also keep the result object in the variable VAR (displayed unless -q)."),
    )


def _clean_options(before_cell: bool) -> Callable[[_F], _F]:
    """The options of the clean ``%clear_tf`` runs, and ``%%fresh_model`` runs before its cell."""
    when = " before the cell" if before_cell else ""
    return _options(
        argument("names", nargs="*", type=_variable_to_delete, metavar="NAME",
                 help=f"Variables to delete{when}, with every output-cache copy of their objects "
                      "(%%xdel semantics); no other variable is touched."),
        argument("--seed", type=_seed, default=None, metavar="N",
                 help="Call keras.utils.set_random_seed(N) after the clean" + (
                     ", before the cell, for repeatable runs." if before_cell else " (otherwise your seed is kept).")),
        argument("--keep-hidden", action="store_true",
                 help="Do not drop hidden holders (output-cache entries with models or tensors, the last exception)."),
        argument("--keep-registry", action="store_true",
                 help="Do not purge dead CustomGradient entries from TensorFlow's gradient registry."),
        argument("--jax-caches", action="store_true",
                 help="Also clear JAX's compiled functions (jax.clear_caches()); off by default: the "
                      "next model then recompiles everything."),
    )


# --- reading the magic's line ------------------------------------------------------------------------

# What autocorrect makes of "--" (macOS smart dashes, Word, phones): options that look right and are not.
_DASH_LOOKALIKES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"


def _limit_size(text: str) -> int | None:
    """``--limit SIZE`` (``3GiB``, ``512MiB``, bytes) or ``off``, by the rule of ``set_memory_limit``.

    Example:
        >>> _limit_size("3GiB"), _limit_size("off")
        (3221225472, None)
        >>> _limit_size("0")
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: a memory limit must be more than 0 bytes, got '0'; e.g. 3GiB, ...
    """
    from .limits import parse_size

    if text.strip().lower() == "off":
        return None
    with _usage_errors():
        return parse_size(text)


def _job_memory_limit(text: str) -> int:
    """``--memory-limit SIZE`` for an isolated cell (``2GiB``, ``512MiB``, bytes).

    Example:
        >>> _job_memory_limit("2GiB")
        2147483648
        >>> _job_memory_limit("off")
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: cannot read 'off' as a memory size; e.g. 3GiB, 512MiB or 3221225472 (bytes)
    """
    from .limits import parse_size

    with _usage_errors():
        return parse_size(text)


def _on_off(text: str) -> bool:
    """``--guard on|off``.

    Example:
        >>> _on_off("off")
        False
    """
    if text.lower() not in ("on", "off"):
        raise UsageError(f"--guard takes on or off, not {text!r}")
    return text.lower() == "on"


def _percent(text: str) -> float:
    """``--warn-at PCT`` / ``--stop-at PCT``: a share of the memory limit, in percent.

    Example:
        >>> _percent("90"), _percent("90%")
        (90.0, 90.0)
    """
    from .guard import check_pct

    try:
        value: Any = float(text.strip().rstrip("%"))
    except ValueError:
        value = text
    with _usage_errors():
        return check_pct(value, "a guard level")


def _live_mode(text: str) -> str:
    """``--live MODE``: one of the live view's kinds, or ``off``.

    Example:
        >>> _live_mode("display")
        'display'
        >>> _live_mode("sidebar")
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: --live takes auto, widgets, display or off, not 'sidebar'
    """
    from .live.widget import LIVE_MODES

    if text not in LIVE_MODES:
        raise UsageError(f"--live takes {', '.join(LIVE_MODES[:-1])} or {LIVE_MODES[-1]}, not {text!r}")
    return text


def _without_silencing_semicolon(line: str) -> str:
    """A line magic's options without the ``;`` (and a comment after it) that hides its value:
    IPython passes it on and hides the value itself (``@output_can_be_silenced``).

    Example:
        >>> _without_silencing_semicolon("-q -o;  # kept in _"), _without_silencing_semicolon("--who")
        ('-q -o', '--who')
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):
        return line  # not Python-like (a quote left open): argparse says what is wrong
    for token in reversed(tokens):
        if token.type in (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            continue
        if token.type == tokenize.OP and token.string == ";" and token.start[0] == 1:
            return line[:token.start[1]].rstrip()
        break
    return line


def _refuse_lookalike_dashes(tokens: list[str]) -> None:
    """``—seed 1`` (an em dash, as autocorrect types ``--``) is not an option; say which one is meant.

    Example:
        >>> _refuse_lookalike_dashes(["\u2014seed", "1"])
        Traceback (most recent call last):
        ...
        IPython.core.error.UsageError: '\u2014seed' is not an option: it starts with an em dash ...; you meant --seed
    """
    for token in tokens:
        if token[:1] and token[0] in _DASH_LOOKALIKES:
            rest = token.lstrip("-" + _DASH_LOOKALIKES)
            meant = ("--" if len(rest.partition("=")[0]) > 1 else "-") + rest
            dash = unicodedata.name(token[0], "dash").lower()
            article = "an" if dash[0] in "aeiou" else "a"
            raise UsageError(f"{token!r} is not an option: it starts with {article} {dash} (U+{ord(token[0]):04X}), "
                             f"not '-' (autocorrect turns -- into a dash); you meant {meant}")


def _refuse_a_name_after_dash_o(tokens: list[str], hands_over: str, deletes_names: bool = False) -> None:
    """``-o VAR`` once stored the result in ``VAR`` (``%tf_mem``, ``%%tf_mem``, ``%%fresh_model``):
    say where that went (``--as VAR``) rather than read ``VAR`` as something else."""
    for index, option in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else ""
        name = following if option in ("-o", "--output") and following.isidentifier() else (
            option.partition("=")[2] if option.startswith("--output=") else "")
        if name:
            also = f" (to delete {name} before the cell, write it before the options)" if deletes_names else ""
            raise UsageError(f"-o takes no variable name: it {hands_over}, as %timeit -o does; to keep it in "
                             f"{name}, write --as {name}{also}")


def _parse(magic: Callable[..., Any], line: str, *, line_mode: bool, dash_o_hands_over: str | None = None,
           deletes_names: bool = False) -> Any:
    """The magic's options (``parse_argstring``), after the mistakes argparse cannot name."""
    if line_mode:
        line = _without_silencing_semicolon(line)
    try:
        tokens = arg_split(line, strict=False)
    except ValueError:
        tokens = []  # argparse reports it
    _refuse_lookalike_dashes(tokens)
    if dash_o_hands_over is not None:
        _refuse_a_name_after_dash_o(tokens, dash_o_hands_over, deletes_names)
    return parse_argstring(magic, line)


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
        self.cell_number = running_cell_number(shell)
        self.filename = shell.compile.cache(f"# {header}\n{self.source}", self.cell_number, raw_code=cell)
        # Compile everything before anything runs: a cell must not run halfway, then fail.
        try:
            self._code = compile(tree, self.filename, "exec")
            self._last = None if last_expression is None else compile(last_expression, self.filename, "eval")
        except SyntaxError as exc:
            hint = " (top-level await: put the code in an async function and asyncio.run() it)" if (
                "await" in (exc.msg or "")) else ""
            raise UsageError(f"the cell cannot run under {header.split()[0]}: {exc.msg}{hint}; "
                             "nothing was run") from None

    @property
    def codes(self) -> tuple[types.CodeType, ...]:
        """The cell's compiled code: its body, and its last expression when that is displayed."""
        return (self._code,) if self._last is None else (self._code, self._last)

    def run(self) -> Any:
        __tracebackhide__ = True  # read by IPython's traceback formatter
        namespace = self.shell.user_ns
        exec(self._code, namespace)  # noqa: S102 - running the user's cell is the point
        return None if self._last is None else eval(self._last, namespace)  # noqa: S307 - its last expression


def _reassigned_model_hints(shell, runner: _CellRunner, named: list[str]) -> list[str]:
    """Variables the cell rebinds that hold a model now: it stays alive until the assignment.

    We do not delete them on our own (if the cell failed before reassigning, the user's
    model would be gone); we say how to free them first instead. Only names every run of the
    cell rebinds before reading them are offered (``fresh.rebound_names``): ``best_model``, bound
    only when a trial beats the best, would be lost. The hint names every variable that holds
    the model (``history`` of ``history.model`` too: deleting ``model`` alone frees nothing),
    found by the search ``%tf_mem --who`` does; where something the cell does not surely rebind
    holds it too, deleting frees nothing, and the hint says so instead of offering it.
    """
    from .fresh import rebound_names
    from .holders import HolderSearch
    from .probes.keras import model_classes

    classes = model_classes()
    if not classes:
        return []
    rebound = rebound_names(runner.body)
    names = sorted(name for name in rebound if name not in named and isinstance(shell.user_ns.get(name), classes))
    if not names:
        return []
    search = HolderSearch(shell)
    offered: list[str] = []
    freed_by: list[str] = []
    hints: list[str] = []
    for name in names:
        roots, kept = [name], []
        for item in search.heavy:
            if item.obj is not shell.user_ns[name]:
                continue
            for holder in item.holders:
                if holder.kind not in ("variable", "history"):
                    continue  # the output cache and the last exception: the clean before the cell drops them
                if holder.root in rebound or holder.root in named:
                    roots.append(holder.root)  # `models` of `models[0]` too: deleting the root frees it
                else:
                    kept.append(holder.where)
        kept = [where for where in dict.fromkeys(kept) if where not in named]
        if kept:
            hints.append(f"{name} held a model from before this cell while it ran, which {', '.join(kept)} "
                         "also holds and this cell does not always rebind: deleting it first would free nothing, "
                         "so it is not offered")
        else:
            freed_by.append(name)
            offered.extend(root for root in roots if root not in named)
    del search
    if freed_by:
        listed = " ".join(dict.fromkeys(offered))
        hints.insert(0, f"{', '.join(freed_by)} still held the previous model while this cell ran; "
                        f"`%%fresh_model {listed}` deletes it before the cell so its memory is reused")
    return hints


_LINE_RETURNS = "report = %clear_tf -o"
_CELL_RETURNS = "it becomes the cell's value (in _ afterwards) instead of the last expression's"


@magics_class
class KerasMagics(Magics):
    """``%tf_mem``, ``%%tf_mem``, ``%clear_tf`` and ``%%fresh_model``; loaded by ``%load_ext kerasmagic``."""

    def _deliver(self, args: Any, result: Any, *, failed: bool = False) -> Any:
        """The result object as ``-q``, ``--as`` and ``-o`` say: kept in the ``--as`` variable,
        displayed unless ``-q`` (or ``-o``, which makes it the value, unless the cell failed),
        returned with ``-o``."""
        if result is None:
            return None
        if args.store_as and self.shell is not None:  # a registered Magics always has its shell
            self.shell.user_ns[args.store_as] = result
        if not args.quiet and (failed or not args.output):
            display(result)
        return result if args.output else None

    # --- %tf_mem / %%tf_mem ------------------------------------------------------------------

    @magic_arguments()
    @_result_options("snap = %tf_mem -o; as a cell magic, " + _CELL_RETURNS)
    @argument("--who", action="store_true",
              help="Also list what keeps Keras models and large arrays/tensors alive: your variables, "
                   "the output cache (Out, _N, _, __, ___), History.model, the last exception's frames.")
    @argument("--live", nargs="?", const="auto", default=None, metavar="MODE", type=_live_mode,
              help="Show a live view that updates every second (for frontends without the sidebar): "
                   "widgets (ipywidgets), display (one output updated in place, no widgets needed), "
                   "auto (widgets where they render; the default), off (stop the running view).")
    @argument("--cells", action="store_true",
              help="Show which cells grow memory each time they run (the leak watch): a cell whose RSS or "
                   "TensorFlow in use grew on each of its last 3+ re-runs (from its 4th run on) is flagged, "
                   "with the fix; a run that left 100+ MiB or several models is named at once.")
    @argument("--limit", type=_limit_size, default=False, metavar="SIZE",
              help="Set the memory limit the guard measures against (3GiB, 512MiB, bytes; K/M/G are binary, "
                   "KB/MB/GB decimal), or off to drop yours and go back to KERASMAGIC_MEMORY_LIMIT, else the "
                   "cgroup's, else the host's memory. A limit above the "
                   "cgroup's does not lift it.")
    @argument("--guard", type=_on_off, default=None, metavar="on|off",
              help="Switch the memory guard on or off: near the limit it warns in the cell's output, then "
                   "stops the running cell with KernelMemoryLimitError before the OOM killer ends the kernel.")
    @argument("--warn-at", type=_percent, default=None, metavar="PCT",
              help="The guard warns past this share of the limit (default 85).")
    @argument("--stop-at", type=_percent, default=None, metavar="PCT",
              help="The guard stops the running cell past this share of the limit (default 95).")
    @line_cell_magic
    @output_can_be_silenced
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
            %tf_mem --as snap        # shown, and kept in snap
            %tf_mem --live           # a live view without the JupyterLab sidebar
            %tf_mem --live display   # ... as one output updated in place (no ipywidgets needed)
            %tf_mem --live off       # stop it
            %tf_mem --cells          # which cells grow memory each time they run
            %tf_mem --limit 3GiB     # the guard's limit (--limit off: the environment's or cgroup's again)
            %tf_mem --guard off      # let cells run into the OOM killer (--guard on)
            %tf_mem --warn-at 80 --stop-at 90

            %%tf_mem --as m          # m: the CellMeasurement
            model.fit(x, y, epochs=3)
        """
        __tracebackhide__ = True
        # argparse reads "--limit -3GiB" as a missing value and another option: let the size rule say why.
        line = re.sub(r"--limit\s+(-[\d.])", r"--limit=\1", line)
        args = _parse(self.tf_mem, line, line_mode=cell is None,
                      dash_o_hands_over="returns the result object (snap = %tf_mem -o)" if cell is None
                      else "makes the result object the cell's value")
        if cell is None:
            return self._tf_mem_line(args)
        return self._tf_mem_cell(args, cell, line)

    def _tf_mem_line(self, args):
        settings = args.limit is not False or args.guard is not None or args.warn_at is not None \
            or args.stop_at is not None
        if settings and (args.cells or args.live):
            raise UsageError("--limit, --guard, --warn-at and --stop-at set the memory guard; use them without "
                             "--cells and --live")
        if settings:
            from .guard import memory_guard
            from .limits import set_memory_limit

            with _usage_errors():
                if args.guard is not None or args.warn_at is not None or args.stop_at is not None:
                    memory_guard(args.guard, warn_pct=args.warn_at, stop_pct=args.stop_at)
                if args.limit is not False:
                    set_memory_limit(args.limit)
        if args.cells:
            if args.live or args.who:
                raise UsageError("--cells shows the leak watch; use it without --live and --who")
            from .leak_watch import cell_growth

            return self._deliver(args, cell_growth())
        if args.live:
            if args.output or args.store_as or args.who:
                raise UsageError("--live shows a live view; use it without -o, --as and --who")
            from .live.widget import show_live, stop_current

            if args.live == "off":
                stop_current()
                return None
            return show_live(self.shell, mode=args.live)
        from .snapshot import tf_mem

        return self._deliver(args, tf_mem(self.shell, who=args.who))

    def _tf_mem_cell(self, args, cell: str, line: str):
        __tracebackhide__ = True
        if args.live or args.who or args.cells or args.limit is not False or args.guard is not None \
                or args.warn_at is not None or args.stop_at is not None:
            raise UsageError("%%tf_mem measures a cell; --who, --live, --cells, --limit and --guard belong to the "
                             "line magic %tf_mem")
        from .measuring import measure

        runner = _CellRunner(self.shell, cell, f"%%tf_mem {line}")
        meter = measure(label=f"cell [{runner.cell_number}]")
        failed = True
        try:
            with meter:
                value = runner.run()
            failed = False
        finally:
            # Shown before the exception propagates, so a failing cell still gets its figures.
            report = self._deliver(args, meter.result, failed=failed)
        return report if args.output else value

    # --- %clear_tf ---------------------------------------------------------------------------

    @magic_arguments()
    @_clean_options(before_cell=False)
    @_result_options(_LINE_RETURNS)
    @line_magic
    @output_can_be_silenced
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
            report = %clear_tf -o          # the CleanReport, shown once
        """
        args = _parse(self.clear_tf, line, line_mode=True)
        from .clean import clear_tf

        with _usage_errors():
            report = clear_tf(
                *args.names, shell=self.shell, seed=args.seed,
                purge_hidden=not args.keep_hidden, purge_registry=not args.keep_registry,
                clear_jax_caches=args.jax_caches,
            )
        return self._deliver(args, report)

    # --- %%fresh_model -----------------------------------------------------------------------

    @magic_arguments()
    @_clean_options(before_cell=True)
    @_result_options(_CELL_RETURNS)
    @argument("--isolate", action="store_true",
              help="Run the cell in a fresh worker process that gives every byte back when it ends.")
    @argument("--in", dest="inputs", nargs="+", default=None, metavar="NAME",
              help="With --isolate: also send these variables (names the cell reads are sent anyway).")
    @argument("--out", dest="outputs", nargs="+", default=None, metavar="NAME",
              help="With --isolate: bring back only these variables (default: every name the cell assigns).")
    @argument("--no-return", action="store_true", help="With --isolate: bring nothing back (cells that write files).")
    @argument("--timeout", type=_timeout_seconds, default=None, metavar="S",
              help="With --isolate: kill the worker after S seconds.")
    @argument("--memory-limit", type=_job_memory_limit, default=None, metavar="SIZE",
              help="With --isolate: the most memory the cell's process may use (2GiB, 512MiB, bytes); at it, "
                   "the process (not the kernel) is killed and the cell fails with 'out of memory at X of Y'.")
    @argument("--gpu", type=_gpu, default=None, metavar="N",
              help="With --isolate: CUDA_VISIBLE_DEVICES for the worker: GPU indices (0 or 0,1), GPU-/MIG- UUIDs, "
                   "or -1 for none.")
    @argument("--env", type=_env_pair, nargs="+", default=None, metavar="K=V",
              help="With --isolate: environment for the worker, set before TensorFlow starts.")
    @argument("--on", choices=("local", "ray", "ray-local"), default=None,
              help="With --isolate: where the worker runs: this machine (local, the default), the Ray cluster "
                   "(ray: the one ray.init() connected to, else --address, else RAY_ADDRESS), or a Ray cluster "
                   "started here to try it (ray-local). See docs/guide/scale-out.md.")
    @argument("--address", default=None, metavar="ADDR",
              help="With --isolate --on ray: the Ray cluster's address, e.g. 10.0.0.5:6379.")
    @argument("--preload", nargs="+", default=None, metavar="MODULE",
              help="With --isolate: modules the worker's template imports before it forks (e.g. keras), "
                   "beside those this kernel has imported.")
    @cell_magic
    @output_can_be_silenced
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
        TensorFlow's CPU pool and GPU memory included. --on ray runs that process on a
        Ray cluster's node instead of this machine.

        Examples::

            %%fresh_model --seed 0
            model = make_model()
            history = model.fit(x, y, epochs=5)

            %%fresh_model model history      # delete the previous ones first

            %%fresh_model --isolate --timeout 600 --as run
            model = make_model(); history = model.fit(x_train, y_train)
        """
        __tracebackhide__ = True
        args = _parse(self.fresh_model, line, line_mode=False,
                      dash_o_hands_over="makes the result object the cell's value", deletes_names=True)
        self._check_fresh_model_options(args)
        if args.isolate:
            return self._fresh_model_isolated(args, line, cell)
        return self._fresh_model_in_process(args, line, cell)

    @staticmethod
    def _check_fresh_model_options(args) -> None:
        """What no single option's type can see: options that need --isolate, or each other."""
        isolation_only = [flag for flag, value in (
            ("--in", args.inputs), ("--out", args.outputs), ("--no-return", args.no_return),
            ("--timeout", args.timeout), ("--gpu", args.gpu), ("--env", args.env), ("--on", args.on),
            ("--address", args.address), ("--preload", args.preload),
            ("--memory-limit", args.memory_limit)) if value]
        if isolation_only and not args.isolate:
            raise UsageError(f"{', '.join(isolation_only)} only work with --isolate; add --isolate to the line")
        if args.isolate and args.names:
            raise UsageError("--isolate starts from a fresh process: there is nothing to delete, drop the names")
        kernel_only = [flag for flag, value in (("--keep-hidden", args.keep_hidden),
                                                ("--keep-registry", args.keep_registry),
                                                ("--jax-caches", args.jax_caches)) if value]
        if args.isolate and kernel_only:
            one = len(kernel_only) == 1
            raise UsageError(
                f"{', '.join(kernel_only)} {'acts' if one else 'act'} on this kernel's own state, in the clean "
                "%%fresh_model runs before the cell; with --isolate the cell runs in a fresh process and nothing "
                f"here is cleaned, so {'it' if one else 'they'} would do nothing: drop {'it' if one else 'them'}")
        if args.address is not None and args.on != "ray":
            raise UsageError("--address is the Ray cluster to connect to: use it with --on ray")
        if args.on in ("ray", "ray-local") and args.gpu is not None:
            raise UsageError("--gpu picks this machine's GPUs; on a Ray cluster Ray assigns them: drop --gpu "
                             "(run_isolated(..., on=kerasmagic.OnRay(num_gpus=1)) asks Ray for a GPU)")

    def _fresh_model_in_process(self, args, line: str, cell: str):
        __tracebackhide__ = True
        from .fresh import assigned_names, fresh_model

        runner = _CellRunner(self.shell, cell, f"%%fresh_model {line}")
        hints = _reassigned_model_hints(self.shell, runner, args.names)
        with _usage_errors():
            context = fresh_model(
                *args.names, seed=args.seed, purge_hidden=not args.keep_hidden,
                purge_registry=not args.keep_registry, clear_jax_caches=args.jax_caches, shell=self.shell,
                label=f"cell [{runner.cell_number}]",
                # A name the cell creates that does not exist yet: its first run, nothing to delete.
                creates=assigned_names(runner.body),
                # The cell's own code: what TensorFlow's stack-trace cache keeps of it is counted.
                codes=runner.codes,
            )
            result = context.__enter__()
        result.hints.extend(hints)
        failed = True
        try:
            value = runner.run()
            failed = False
        finally:
            context.__exit__(*(sys.exc_info() if failed else (None, None, None)))
            report = self._deliver(args, result, failed=failed)
        return report if args.output else value

    def _fresh_model_isolated(self, args, line: str, cell: str):
        __tracebackhide__ = True
        from .isolation.cell import run_cell_isolated

        try:
            with _usage_errors():
                result = run_cell_isolated(
                    self.shell, cell, inputs=args.inputs, outputs=args.outputs, no_return=args.no_return,
                    timeout=args.timeout, gpu=args.gpu, env=dict(args.env or []), seed=args.seed,
                    quiet=args.quiet, on=args.on, address=args.address, header=f"%%fresh_model {line}",
                    preload=args.preload, memory_limit=args.memory_limit,
                )
        except BaseException as exc:
            # The report so far (wall time, peaks, last output) comes with the error: show it first.
            self._deliver(args, getattr(exc, "result", None), failed=True)
            raise
        return self._deliver(args, result)

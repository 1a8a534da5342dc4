"""``run_cell_isolated()``: the kernel side of ``%%fresh_model --isolate``.

Reads the cell's inputs from ``shell.user_ns``, runs it in a worker with its output
streaming into the cell, and puts the names it assigned back into ``shell.user_ns``;
nothing else in the namespace changes, whatever happens.
"""

from __future__ import annotations

import builtins
import shutil
import time

from ..ipython_names import is_ipython_name, new_variable_name_problem
from ..probes.process import rss_bytes
from .api import check_gpu, check_options, compile_in_kernel, encode_named, parse_in_kernel
from .cell_names import analyse, uses_get_ipython
from .errors import IsolationUsageError
from .pool import worker_spec
from .result import IsolatedResult
from .runner import Job, run_job
from .shipping import make_job_directory

__all__ = ['run_cell_isolated']

_CELL_HINT = "build it inside the cell or pass --in with a picklable value"
# The cell's first line under the `%%fresh_model --isolate` line, as the notebook numbers it.
_FIRST_BODY_LINE = 2


def _is_ipython_name(shell, name: str) -> bool:
    """IPython's own entries (history, shortcuts, dunders, what it put in ``user_ns_hidden``) are
    never sent (``kerasmagic.ipython_names``: the check ``%tf_mem --who`` and ``%clear_tf`` share)."""
    return is_ipython_name(name, shell)


def cell_inputs(shell, reads: list[str], explicit: list[str]) -> list[str]:
    """The names to send: those the cell reads that the user defined, plus ``--in`` names."""
    names = []
    for name in reads:
        if name not in shell.user_ns or _is_ipython_name(shell, name):
            continue
        if name in vars(builtins) and shell.user_ns[name] is vars(builtins)[name]:
            continue
        names.append(name)
    for name in explicit:
        if name not in shell.user_ns:
            raise IsolationUsageError(f"--in {name}: no variable named {name!r} in this notebook; %who lists them")
        if name not in names:
            names.append(name)
    return names


def run_cell_isolated(shell, cell: str, *, inputs: list[str] | None, outputs: list[str] | None, no_return: bool,
                      timeout: float | None, gpu: str | None, env: dict[str, str], seed: int | None,
                      quiet: bool) -> IsolatedResult:
    """Run a notebook cell in a fresh worker process and bring the names it assigns back.

    The names the cell reads are sent from ``shell.user_ns`` (plus ``inputs``); the names it
    assigns (or only ``outputs``; none with ``no_return``) are put into ``shell.user_ns``.
    Output streams into the cell while it runs; ``display()`` and figures show as usual.
    ``quiet`` is the magic's ``-q``: the magic, not this function, displays the report.

    Raises:
        IsolationUsageError: bad options, magics in the cell, or a name that cannot be sent.
        IsolatedCellError, IsolatedTimeout, IsolatedCrash, KeyboardInterrupt: as
            :func:`run_isolated`; each carries ``.result``. The namespace is untouched then.

    Example:
        >>> result = run_cell_isolated(get_ipython(), "model = make_model(); model.fit(x, y)",
        ...                            inputs=None, outputs=None, no_return=False, timeout=600,
        ...                            gpu=None, env={}, seed=0, quiet=False)   # doctest: +SKIP
    """
    __tracebackhide__ = True  # noqa: F841
    check_options(timeout, env, outputs, seed)
    for name in inputs or []:
        if not name.isidentifier():
            raise IsolationUsageError(f"--in takes variable names; {name!r} is not one")
    if no_return and outputs:
        raise IsolationUsageError("--no-return and --out contradict each other; keep one")
    for name in outputs or []:
        problem = new_variable_name_problem(name)
        if problem:  # `--out In` would overwrite IPython's input history in the notebook
            raise IsolationUsageError(f"--out names variables to bring back into the notebook; {problem}")
    gpu = check_gpu(gpu)
    code = shell.transform_cell(cell)
    # Errors name lines as the notebook shows them: the magic's own line is line 1. The
    # wording is the in-process %%fresh_model's, so a cell fails the same way either way.
    tree = parse_in_kernel(code, "the cell", first_line=_FIRST_BODY_LINE)
    # The syntax tree, not the text: IPython turns magics and `!` lines into get_ipython()
    # calls, while a string that merely mentions get_ipython() is harmless.
    if uses_get_ipython(tree):
        raise IsolationUsageError(
            "an isolated cell runs in a plain Python worker, without IPython: magics (%...), "
            "shell commands (!...) and get_ipython() cannot run there; move them to a cell of their own")
    compile_in_kernel(code, "the cell", "%%fresh_model", first_line=_FIRST_BODY_LINE)
    names = analyse(tree)
    send = cell_inputs(shell, names.reads, list(inputs or []))
    if no_return:
        wanted, required = [], []
    elif outputs:
        wanted, required = list(outputs), list(outputs)
    else:
        wanted, required = names.assigns, []

    result = IsolatedResult(f"cell [{getattr(shell, 'execution_count', '?')}]")
    result.kernel_rss_before_bytes = rss_bytes()
    directory = make_job_directory()
    started = time.perf_counter()
    try:
        specs = {name: encode_named(name, shell.user_ns[name], directory, result, _CELL_HINT) for name in send}
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    result.ship_in_s = time.perf_counter() - started
    job = Job("code", directory, code=code, inputs=specs, outputs=wanted, required_outputs=required,
              seed=seed, display_last=True)
    run_job(job, worker_spec(gpu=gpu, env=env), result, timeout=timeout, forward_output=True)
    shell.user_ns.update(result.outputs)
    return result

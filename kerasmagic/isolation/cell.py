"""``run_cell_isolated()``: the kernel side of ``%%fresh_model --isolate``.

Reads the cell's inputs from ``shell.user_ns``, runs it in a worker with its output
streaming into the cell, and puts the names it assigned back into ``shell.user_ns``;
nothing else in the namespace changes, whatever happens.
"""

from __future__ import annotations

import ast
import builtins
import tokenize
from typing import Any

from ..cell_numbers import running_cell_number
from ..compat import semicolon_at_end_of_expression
from ..ipython_names import ipython_machinery_role, is_ipython_name, new_variable_name_problem
from .api import check_code, check_gpu, check_options, check_target, prepare_job
from .cell_names import CellNames, analyse, uses_get_ipython
from .dispatch import run_job
from .errors import IsolationUsageError
from .job import Job
from .job_memory import check_memory_limit
from .result import IsolatedResult
from .spec import check_preload, worker_spec

__all__ = ['run_cell_isolated']

_CELL_HINT = "build it inside the cell or pass --in with a picklable value"


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
                      quiet: bool, on: Any = None, address: str | None = None,
                      header: str = "%%fresh_model --isolate", preload: list[str] | None = None,
                      memory_limit: int | str | None = None) -> IsolatedResult:
    """Run a notebook cell in a fresh worker process and bring the names it assigns back.

    The names the cell reads are sent from ``shell.user_ns`` (plus ``inputs``); the names it
    assigns (or only ``outputs``; none with ``no_return``) are put into ``shell.user_ns``.
    Output streams into the cell while it runs; ``display()`` and figures show as usual, and
    so does the last expression's value unless the cell ends with ``;`` (IPython's rule).
    ``quiet`` is the magic's ``-q``: the magic, not this function, displays the report.
    ``on``/``address`` run it on a Ray cluster and ``preload`` asks its template for modules, as
    for :func:`~kerasmagic.isolation.run_isolated`, and ``memory_limit`` (``--memory-limit``) stops
    the cell's process, not the kernel, at that size.
    ``header`` is the magic's line: line 1 of the cell, as the notebook numbers it, so that
    errors and tracebacks name the lines the user sees.

    Raises:
        IsolationUsageError: bad options, magics in the cell, or a name that cannot be sent.
        IsolatedCellError, IsolatedTimeout, IsolatedCrash, KeyboardInterrupt: as
            :func:`run_isolated`; each carries ``.result``. The namespace is untouched then.

    Example:
        >>> result = run_cell_isolated(get_ipython(), "model = make_model(); model.fit(x, y)",
        ...                            inputs=None, outputs=None, no_return=False, timeout=600,
        ...                            gpu=None, env={}, seed=0, quiet=False)   # doctest: +SKIP
    """
    __tracebackhide__ = True
    gpu, target = _check_cell_options(inputs, outputs, no_return, timeout, gpu, env, seed, on, address)
    modules = check_preload(preload)
    limit_bytes = check_memory_limit(memory_limit)
    result = IsolatedResult(f"cell [{running_cell_number(shell)}]")
    job = _prepare_cell_job(shell, cell, header, result, inputs=list(inputs or []), outputs=outputs,
                            no_return=no_return, seed=seed)
    job.memory_limit_bytes = limit_bytes
    run_job(job, worker_spec(gpu=gpu, env=env, preload=modules), result, timeout=timeout, forward_output=True,
            on=target)
    shell.user_ns.update(result.outputs)
    return result


def _check_cell_options(inputs: list[str] | None, outputs: list[str] | None, no_return: bool,
                        timeout: float | None, gpu: str | None, env: dict[str, str], seed: int | None,
                        on: Any, address: str | None) -> tuple[str | None, Any]:
    """Refuse bad options before anything is read or sent; the GPUs and the Ray target to use."""
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
    return gpu, check_target(on, address, gpu)


def _refuse_ipython_syntax(tree: ast.Module) -> None:
    # The syntax tree, not the text: IPython turns magics and `!` lines into get_ipython()
    # calls, while a string that merely mentions get_ipython() is harmless.
    if uses_get_ipython(tree):
        raise IsolationUsageError(
            "an isolated cell runs in a plain Python worker, without IPython: magics (%...), "
            "shell commands (!...) and get_ipython() cannot run there; move them to a cell of their own")


def _shows_last_value(cell: str) -> bool:
    """IPython's rule, the one ``@output_can_be_silenced`` applies to the in-process magic: a
    last ``;`` hides the value, a comment after it included (``x;  # note``)."""
    try:
        return not semicolon_at_end_of_expression(cell)
    except (tokenize.TokenError, SyntaxError):  # e.g. `!echo (`: not Python, refused later anyway
        return True


def _wanted_outputs(names: CellNames, outputs: list[str] | None, no_return: bool,
                    result: IsolatedResult) -> tuple[list[str], list[str]]:
    """The names to bring back, and those of them the cell must have assigned (``--out``).

    A name IPython itself needs (``_oh``, ``_dh``, ``get_ipython``...) is not brought back, as
    ``--out`` and ``--as`` refuse it: put back, it would break every later output display, ``%cd``
    or magic. ``result.not_returned`` says so, and with it the job's one warning line.
    """
    if no_return:
        return [], []
    if outputs:
        return list(outputs), list(outputs)
    wanted = []
    for name in names.assigns:
        role = ipython_machinery_role(name)
        if role is None:
            wanted.append(name)
        else:
            result.not_returned[name] = (f"IPython's own ({role}): putting the cell's value there would "
                                         "break IPython; rename it")
    return wanted, []


def _prepare_cell_job(shell, cell: str, header: str, result: IsolatedResult, *, inputs: list[str],
                      outputs: list[str] | None, no_return: bool, seed: int | None) -> Job:
    """The cell checked here (it parses, compiles and runs no IPython syntax), then its job.

    The magic's line comes first, as a comment: line numbers in errors and in the worker's
    traceback are then the notebook's, as they are in-process (where the magic line is line 1).
    """
    __tracebackhide__ = True
    code = f"# {header}\n{shell.transform_cell(cell)}"
    # The wording is the in-process %%fresh_model's, so a cell fails the same way either way.
    tree = check_code(code, "the cell", "%%fresh_model", refuse=_refuse_ipython_syntax)
    names = analyse(tree)
    send = cell_inputs(shell, names.reads, inputs)
    wanted, required = _wanted_outputs(names, outputs, no_return, result)
    return prepare_job("code", result, hint=_CELL_HINT, inputs={name: shell.user_ns[name] for name in send},
                       code=code, outputs=wanted, required_outputs=required, seed=seed,
                       display_last=_shows_last_value(cell))

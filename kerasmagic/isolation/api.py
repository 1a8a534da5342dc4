"""``run_isolated()``: run code or a function in a fresh worker process, for scripts and loops."""

from __future__ import annotations

import ast
import keyword
import re
import shutil
import time
from typing import Any, Callable

from ..errors import KerasMagicUsageError, check_seed, check_timeout
from ..probes.process import rss_bytes
from .cell_names import analyse
from .errors import IsolationUsageError
from .pool import worker_spec
from .result import IsolatedResult
from .runner import Job, run_job
from .shipping import ShippingError, describe, encode, make_job_directory

__all__ = ['run_isolated']

_SCRIPT_HINT = "create it inside the isolated code, or pass a picklable value instead"


def check_options(timeout: float | None, env: dict[str, str] | None, outputs: list[str] | None,
                  seed: int | None = None) -> None:
    """Reject bad options before anything runs, with what to do instead."""
    try:
        check_timeout(timeout)
        check_seed(seed)
    except KerasMagicUsageError as exc:
        raise IsolationUsageError(str(exc)) from None
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key or "=" in key or not isinstance(value, str):
            raise IsolationUsageError(f"env takes string names and values, e.g. {{'TF_ENABLE_ONEDNN_OPTS': '0'}}; got {key!r}: {value!r}")
    for name in outputs or []:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise IsolationUsageError(f"outputs are variable names; {name!r} is not one")


# CUDA_VISIBLE_DEVICES items: an index (-1 hides every GPU), a GPU UUID or a MIG instance.
_GPU_ITEM = re.compile(r"^(?:-1|\d+|GPU-[0-9A-Fa-f][0-9A-Fa-f-]*|MIG-[0-9A-Za-z][0-9A-Za-z/-]*)$")


def check_gpu(gpu: str | int | None) -> str | None:
    """``gpu`` as ``CUDA_VISIBLE_DEVICES``: comma-separated indices or ``GPU-``/``MIG-`` UUIDs.

    CUDA silently ignores everything from the first item it cannot parse, so a typo would
    give the worker no GPU (or the wrong one) without a word; this refuses it instead.

    Example:
        >>> check_gpu(0), check_gpu("0, 1"), check_gpu("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6")
        ('0', '0,1', 'GPU-8932f937-d72c-4106-c12f-20bd9faed9f6')
    """
    if gpu is None:
        return None
    if isinstance(gpu, bool) or not isinstance(gpu, (int, str)):
        raise IsolationUsageError(f"gpu takes a GPU index or a comma-separated list like '0,1', got {gpu!r}")
    items = [item.strip() for item in str(gpu).split(",")]
    bad = [item for item in items if not _GPU_ITEM.match(item)]
    if bad:
        raise IsolationUsageError(
            f"gpu={gpu!r}: {bad[0]!r} is not a GPU; give comma-separated indices (e.g. '0' or '0,1'), "
            "GPU UUIDs ('GPU-...') or MIG instances ('MIG-...') as nvidia-smi -L lists them, or -1 for none")
    return ",".join(items)


def check_inputs(inputs: dict[str, Any] | None) -> None:
    """Input names become the code's global variables, so each must be a Python identifier."""
    if inputs is not None and not isinstance(inputs, dict):
        raise IsolationUsageError(f"inputs takes a dict of variable names to values, got {type(inputs).__name__}")
    for name in inputs or {}:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise IsolationUsageError(
                f"inputs are variables of the isolated code, so their names must be Python identifiers; "
                f"{name!r} is not one (e.g. {{'data': value}})")


def parse_in_kernel(code: str, what: str, first_line: int = 1) -> ast.Module:
    """Parse the code here, refusing what does not parse in the in-process ``%%fresh_model`` wording.

    ``first_line`` is the number the code's first line has where the user sees it (2 in a
    cell under its magic line), so that the line named is the one the user reads.

    Example:
        >>> parse_in_kernel("x = (1,", "the code")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: the code does not parse: '(' was never closed (line 1: 'x = (1,'); nothing was run
    """
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        line = (exc.lineno or 1) + first_line - 1
        raise IsolationUsageError(
            f"{what} does not parse: {exc.msg} (line {line}: {(exc.text or '').strip()!r}); nothing was run") from None


def compile_in_kernel(code: str, what: str, where: str, first_line: int = 1) -> None:
    """Compile the code here, as the worker would: what cannot run (``return``/``yield``/``await``
    at the top, ``nonlocal`` outside a function) is refused before a process is used, in the
    in-process ``%%fresh_model`` wording, not as a worker's traceback.

    ``ast.parse`` accepts all of these; only ``compile`` refuses them. ``first_line`` as in
    :func:`parse_in_kernel`.

    Example:
        >>> compile_in_kernel("x = 1\\nreturn x", "the code", "run_isolated()")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: the code cannot run under run_isolated(): 'return' outside function (line 2); nothing was run
    """
    try:
        compile(code, "<isolated code>", "exec")
    except SyntaxError as exc:
        hint = " (top-level await: put the code in an async function and asyncio.run() it)" if (
            "await" in (exc.msg or "")) else ""
        line = (exc.lineno or 1) + first_line - 1
        raise IsolationUsageError(f"{what} cannot run under {where}: {exc.msg} (line {line}){hint}; "
                                  "nothing was run") from None


def encode_named(name: str, value: Any, directory: str, result: IsolatedResult, hint: str) -> dict[str, Any]:
    """Encode one input, turning a failure into an error that names it and says what to do."""
    try:
        spec = encode(name, value, directory)
    except ShippingError as exc:
        raise IsolationUsageError(f"cannot send {name!r} to the isolated process: {exc.reason}; {hint}") from None
    result.sent.append(describe(name, spec))
    return spec


def run_isolated(code_or_function: str | Callable[..., Any], *, inputs: dict[str, Any] | None = None,
                 outputs: list[str] | None = None, args: tuple = (), kwargs: dict[str, Any] | None = None,
                 timeout: float | None = None, gpu: str | int | None = None, env: dict[str, str] | None = None,
                 seed: int | None = None, quiet: bool = False) -> IsolatedResult:
    """Run code or a function in a fresh worker process; every byte it used is returned at the end.

    A string of code runs with ``inputs`` as its globals; the names it assigns (or only
    ``outputs``) come back in ``result.outputs``. A function is called with ``args`` and
    ``kwargs``; its return value comes back as ``result.value``. Keras models travel as
    ``.keras`` files, a ``History`` comes back as an :class:`IsolatedHistory`.

    Args:
        timeout: kill the worker after this many seconds (raises :class:`IsolatedTimeout`).
        gpu: ``CUDA_VISIBLE_DEVICES`` for the worker, e.g. ``0`` or ``"0,1"``.
        env: environment for the worker, set before TensorFlow starts
            (e.g. ``{"TF_GPU_ALLOCATOR": "cuda_malloc_async"}``).
        seed: ``keras.utils.set_random_seed(seed)`` in the worker before the code runs.
        quiet: do not forward the worker's stdout/stderr (it is still kept in
            ``result.last_output``); useful for loops with ``verbose`` training.

    Raises:
        IsolationUsageError: bad options, or an input that cannot be sent (nothing ran).
        IsolatedCellError: the code raised; the message carries the worker's traceback.
        IsolatedTimeout, IsolatedCrash: the worker was killed, or died.
        KeyboardInterrupt: interrupted; the worker was killed.

    Example:
        >>> def fold(k):
        ...     model = make_model(); model.fit(x[train[k]], y[train[k]], verbose=0)
        ...     return model.evaluate(x[test[k]], y[test[k]], verbose=0)
        >>> scores = [run_isolated(fold, args=(k,), timeout=600).value for k in range(10)]  # doctest: +SKIP
        >>> run_isolated("y = x * 2", inputs={"x": 21}).outputs                          # doctest: +SKIP
        {'y': 42}
    """
    __tracebackhide__ = True  # noqa: F841
    check_options(timeout, env, outputs, seed)
    check_inputs(inputs)
    gpu = check_gpu(gpu)
    if isinstance(code_or_function, str):
        # Here, before a process or a job folder is used: nothing runs halfway, then fails.
        tree = parse_in_kernel(code_or_function, "the code")
        compile_in_kernel(code_or_function, "the code", "run_isolated()")
    result = IsolatedResult("isolated function" if callable(code_or_function) else "isolated code")
    result.kernel_rss_before_bytes = rss_bytes()
    directory = make_job_directory()
    started = time.perf_counter()
    try:
        if isinstance(code_or_function, str):
            names = analyse(tree)
            specs = {name: encode_named(name, value, directory, result, _SCRIPT_HINT)
                     for name, value in (inputs or {}).items()}
            wanted = list(outputs) if outputs is not None else names.assigns
            job = Job("code", directory, code=code_or_function, inputs=specs, outputs=wanted,
                      required_outputs=list(outputs or []), seed=seed)
        elif callable(code_or_function):
            if inputs or outputs:
                raise IsolationUsageError("inputs/outputs are for code strings; pass a function's data as args/kwargs")
            call = {
                "function": encode_named(getattr(code_or_function, "__name__", "function"), code_or_function,
                                         directory, result, "define it at module level or in the notebook"),
                "args": [encode_named(f"args[{i}]", value, directory, result, _SCRIPT_HINT)
                         for i, value in enumerate(args)],
                "kwargs": {key: encode_named(f"kwargs[{key!r}]", value, directory, result, _SCRIPT_HINT)
                           for key, value in (kwargs or {}).items()},
            }
            job = Job("function", directory, call=call, seed=seed)
        else:
            raise IsolationUsageError(
                f"run_isolated() takes a string of code or a function, not {type(code_or_function).__name__}")
        result.ship_in_s = time.perf_counter() - started
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    spec = worker_spec(gpu=gpu, env=env)
    return run_job(job, spec, result, timeout=timeout, forward_output=not quiet)

"""``run_isolated()``: run code or a function in a fresh worker process, for scripts and loops."""

from __future__ import annotations

import ast
import keyword
import re
import shutil
import time
from collections.abc import Callable
from typing import Any

from ..errors import KerasMagicUsageError, check_seed, check_timeout
from ..probes.process import rss_bytes
from .cell_names import analyse
from .dispatch import run_job
from .errors import IsolationUsageError
from .gpu_figures import kernel_gpu_figures
from .job import Job
from .job_memory import check_memory_limit
from .result import IsolatedResult
from .shipping import ShippingError, describe, encode, make_job_directory
from .spare import fixed_settings_in_function
from .spec import check_preload, worker_spec

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
            raise IsolationUsageError("env takes string names and values, e.g. {'TF_ENABLE_ONEDNN_OPTS': '0'}; "
                                      f"got {key!r}: {value!r}")
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


def check_target(on: Any, address: str | None, gpu: Any) -> Any:
    """The :class:`~kerasmagic.isolation.cluster.target.OnRay` that ``on`` names, or None (local).

    Example:
        >>> check_target("ray", None, "0")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: gpu= picks this machine's GPUs; on a Ray cluster, Ray
        assigns them: use on=OnRay(num_gpus=1)
    """
    # The cluster code loads only for on= (and imports no Ray: that waits for the first job).
    from .cluster.target import resolve_on  # noqa: PLC0415

    target = resolve_on(on, address)
    if target is not None and gpu is not None:
        raise IsolationUsageError("gpu= picks this machine's GPUs; on a Ray cluster, Ray assigns them: "
                                  "use on=OnRay(num_gpus=1)")
    return target


def check_inputs(inputs: dict[str, Any] | None) -> None:
    """Input names become the code's global variables, so each must be a Python identifier."""
    if inputs is not None and not isinstance(inputs, dict):
        raise IsolationUsageError(f"inputs takes a dict of variable names to values, got {type(inputs).__name__}")
    for name in inputs or {}:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise IsolationUsageError(
                f"inputs are variables of the isolated code, so their names must be Python identifiers; "
                f"{name!r} is not one (e.g. {{'data': value}})")


def parse_in_kernel(code: str, what: str) -> ast.Module:
    """Parse the code here, refusing what does not parse in the in-process ``%%fresh_model`` wording.

    The line named is the code's own line number: a cell arrives with its magic's line as
    line 1 (:func:`~kerasmagic.isolation.cell.run_cell_isolated`), as the notebook shows it.

    Example:
        >>> parse_in_kernel("x = (1,", "the code")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: the code does not parse: '(' was never closed
        (line 1: 'x = (1,'); nothing was run
    """
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        raise IsolationUsageError(
            f"{what} does not parse: {exc.msg} (line {exc.lineno or 1}: {(exc.text or '').strip()!r}); "
            "nothing was run") from None


def compile_in_kernel(code: str, what: str, where: str) -> None:
    """Compile the code here, as the worker would: what cannot run (``return``/``yield``/``await``
    at the top, ``nonlocal`` outside a function) is refused before a process is used, in the
    in-process ``%%fresh_model`` wording, not as a worker's traceback.

    ``ast.parse`` accepts all of these; only ``compile`` refuses them.

    Example:
        >>> compile_in_kernel("x = 1\\nreturn x", "the code", "run_isolated()")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: the code cannot run under run_isolated(): 'return' outside
        function (line 2); nothing was run
    """
    try:
        compile(code, "<isolated code>", "exec")
    except SyntaxError as exc:
        hint = " (top-level await: put the code in an async function and asyncio.run() it)" if (
            "await" in (exc.msg or "")) else ""
        raise IsolationUsageError(f"{what} cannot run under {where}: {exc.msg} (line {exc.lineno or 1}){hint}; "
                                  "nothing was run") from None


def check_code(code: str, what: str, where: str,
               refuse: Callable[[ast.Module], None] | None = None) -> ast.Module:
    """The code's syntax tree, once it parses and compiles here (``refuse`` may object to the tree
    in between): code that cannot run never reaches a job folder or a process.

    Example:
        >>> check_code("y = x * 2", "the code", "run_isolated()").body[0].targets[0].id
        'y'
    """
    tree = parse_in_kernel(code, what)
    if refuse is not None:
        refuse(tree)
    compile_in_kernel(code, what, where)
    return tree


def encode_named(name: str, value: Any, directory: str, result: IsolatedResult, hint: str) -> dict[str, Any]:
    """Encode one input, turning a failure into an error that names it and says what to do."""
    try:
        spec = encode(name, value, directory)
    except ShippingError as exc:
        raise IsolationUsageError(f"cannot send {name!r} to the isolated process: {exc.reason}; {hint}") from None
    result.sent.append(describe(name, spec))
    return spec


def _encode_call(function: Callable[..., Any], args: tuple, kwargs: dict[str, Any], directory: str,
                 result: IsolatedResult) -> dict[str, Any]:
    return {
        "function": encode_named(getattr(function, "__name__", "function"), function, directory, result,
                                 "define it at module level or in the notebook"),
        "args": [encode_named(f"args[{i}]", value, directory, result, _SCRIPT_HINT) for i, value in enumerate(args)],
        "kwargs": {key: encode_named(f"kwargs[{key!r}]", value, directory, result, _SCRIPT_HINT)
                   for key, value in kwargs.items()},
    }


def prepare_job(mode: str, result: IsolatedResult, *, hint: str, inputs: dict[str, Any] | None = None,
                call: tuple[Callable[..., Any], tuple, dict[str, Any]] | None = None, **fields: Any) -> Job:
    """Encode a job's values into a new job folder and build its :class:`Job`: the one preparation
    :func:`run_isolated` and ``%%fresh_model --isolate`` share.

    ``inputs`` become the code's variables (``hint`` says what to do with one that cannot
    travel); ``call`` is ``(function, args, kwargs)`` for a function job; ``fields`` are the
    rest of the job (``code``, ``outputs``, ``seed``...). ``result`` gets the kernel's RSS
    before, what was sent and how long it took. If a value cannot be sent, the folder is
    removed and the :class:`IsolationUsageError` names the value: nothing ran.

    Example:
        >>> result = IsolatedResult("isolated code")
        >>> job = prepare_job("code", result, hint="", inputs={"x": 21}, code="y = x * 2", outputs=["y"])
        >>> job.mode, list(job.inputs), [shipped.name for shipped in result.sent]
        ('code', ['x'], ['x'])
        >>> shutil.rmtree(job.directory)
    """
    result.kernel_rss_before_bytes = rss_bytes()
    result.kernel_gpu_before = kernel_gpu_figures()
    directory = make_job_directory()
    started = time.perf_counter()
    try:
        specs = {name: encode_named(name, value, directory, result, hint) for name, value in (inputs or {}).items()}
        encoded_call = None if call is None else _encode_call(*call, directory, result)
        if call is not None:
            fields.setdefault("fixed_settings", fixed_settings_in_function(call[0]))
        job = Job(mode, directory, inputs=specs, call=encoded_call, **fields)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    result.ship_in_s = time.perf_counter() - started
    return job


def run_isolated(code_or_function: str | Callable[..., Any], *, inputs: dict[str, Any] | None = None,
                 outputs: list[str] | None = None, args: tuple = (), kwargs: dict[str, Any] | None = None,
                 timeout: float | None = None, gpu: str | int | None = None, env: dict[str, str] | None = None,
                 seed: int | None = None, quiet: bool = False, on: Any = None,
                 address: str | None = None, preload: list[str] | None = None,
                 memory_limit: int | str | None = None) -> IsolatedResult:
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
        on: ``"ray"`` runs the job on the connected Ray cluster (``ray.init(...)``, else
            ``address=``, else ``RAY_ADDRESS``), still as a fork of a warm template on the
            node Ray picks; ``OnRay(num_gpus=1, node=...)`` sets its resources and place;
            ``"ray-local"`` starts a local cluster to try it. See docs/guide/scale-out.md.
        address: the Ray cluster's address, with ``on="ray"``.
        preload: modules the job's template imports before it forks (``["keras"]``), beside the
            frameworks this process has imported: for a script whose jobs import them
            themselves. Without it the pool learns them from the first job that imports them.
        memory_limit: the most memory the job may use (``"2GiB"``, ``512MiB``, bytes). The job
            (never the kernel) is killed when it reaches it and :class:`IsolatedOutOfMemory`
            says "out of memory at X of its Y limit". The kernel watches the worker's RSS; where
            it can make a memory cgroup (root, a delegated cgroup v2), the job also runs in one
            with this limit, which no sudden allocation can outrun (``result.memory_limit_how``).
            On Ray, the node's agent holds it the same way.

    Raises:
        IsolationUsageError: bad options, or an input that cannot be sent (nothing ran).
        IsolatedCellError: the code raised; the message carries the worker's traceback.
        IsolatedTimeout, IsolatedCrash: the worker was killed, or died.
        IsolatedOutOfMemory: the job reached ``memory_limit`` (an ``IsolatedCrash``).
        KeyboardInterrupt: interrupted; the worker was killed.

    Example:
        >>> def fold(k):
        ...     model = make_model(); model.fit(x[train[k]], y[train[k]], verbose=0)
        ...     return model.evaluate(x[test[k]], y[test[k]], verbose=0)
        >>> scores = [run_isolated(fold, args=(k,), timeout=600).value for k in range(10)]  # doctest: +SKIP
        >>> run_isolated("y = x * 2", inputs={"x": 21}).outputs                          # doctest: +SKIP
        {'y': 42}
    """
    __tracebackhide__ = True
    check_options(timeout, env, outputs, seed)
    limit_bytes = check_memory_limit(memory_limit)
    check_inputs(inputs)
    modules = check_preload(preload)
    gpu = check_gpu(gpu)
    target = check_target(on, address, gpu)
    if isinstance(code_or_function, str):
        # Here, before a process or a job folder is used: nothing runs halfway, then fails.
        tree = check_code(code_or_function, "the code", "run_isolated()")
        result = IsolatedResult("isolated code")
        job = prepare_job("code", result, hint=_SCRIPT_HINT, inputs=inputs, code=code_or_function,
                          outputs=list(outputs) if outputs is not None else analyse(tree).assigns,
                          required_outputs=list(outputs or []), seed=seed, memory_limit_bytes=limit_bytes)
    elif callable(code_or_function):
        if inputs or outputs:
            raise IsolationUsageError("inputs/outputs are for code strings; pass a function's data as args/kwargs")
        result = IsolatedResult("isolated function")
        job = prepare_job("function", result, hint=_SCRIPT_HINT, call=(code_or_function, args, kwargs or {}),
                          seed=seed, memory_limit_bytes=limit_bytes)
    else:
        raise IsolationUsageError(
            f"run_isolated() takes a string of code or a function, not {type(code_or_function).__name__}")
    spec = worker_spec(gpu=gpu, env=env, preload=modules)
    return run_job(job, spec, result, timeout=timeout, forward_output=not quiet, on=target)

"""``isolated_map()``: a function over many items, each call in its own fresh process.

Cross-validation folds and hyperparameter trials are where a notebook kernel fills up, and
where a process per item gives every byte back. Each call is a fork of the warm template
(milliseconds, see :mod:`kerasmagic.isolation.template`), up to ``workers`` at a time, all
driven from the kernel's main thread: output streams in prefixed by item, a progress bar
shows each job's state, Ctrl-C kills every job, and the summary says what each one used.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..probes import nvml
from ..probes.availability import Unavailable, to_jsonable
from ..probes.process import rss_bytes
from ..tables import Report, Section, format_bytes
from .api import check_gpu, check_options, check_target, encode_named
from .dispatch import JobRun, backend_for, run_jobs
from .errors import IsolatedInterrupt, IsolationUsageError
from .gpu_figures import kernel_gpu_figures
from .job import Job
from .job_memory import check_memory_limit
from .result import IsolatedResult, add_kernel_gpu_rows
from .shipping import make_job_directory
from .spec import check_preload, worker_spec

__all__ = ["IsolatedMapResult", "isolated_map"]

_ON_ERROR = ("raise", "collect")
_HINT = "pass picklable items (numbers, arrays, index lists), or build the object inside the function"


class IsolatedMapResult(Report, Sequence):
    """What :func:`isolated_map` returns: the values in input order, and a job per item.

    It is a sequence of the values (``list(result)``, ``result[3]``); with
    ``on_error="collect"`` a failed item's place holds its exception. ``jobs`` are the
    :class:`IsolatedResult` reports; shown in a notebook, it renders the summary table.

    Example:
        >>> scores = isolated_map(train_fold, range(5), workers=2)     # doctest: +SKIP
        >>> list(scores), scores.failed                                # doctest: +SKIP
        ([0.91, 0.9, 0.92, 0.89, 0.91], [])
    """

    def __init__(self, items: list[Any], jobs: list[IsolatedResult], values: list[Any], *, workers: int,
                 at_once: int, wall_s: float, kernel_rss_before_bytes: int, kernel_rss_after_bytes: int,
                 notes: list[str], kernel_gpu_before: dict[str, int | Unavailable] | None = None,
                 kernel_gpu_after: dict[str, int | Unavailable] | None = None) -> None:
        self.items = items
        self.jobs = jobs
        self.values = values
        self.workers = workers
        self.at_once = at_once
        self.wall_s = wall_s
        self.kernel_rss_before_bytes = kernel_rss_before_bytes
        self.kernel_rss_after_bytes = kernel_rss_after_bytes
        self.notes = notes
        self.kernel_gpu_before = kernel_gpu_before or {}
        self.kernel_gpu_after = kernel_gpu_after or {}

    def __getitem__(self, index):
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def failed(self) -> list[int]:
        """Indices of the items whose job did not end ``ok``."""
        return [i for i, job in enumerate(self.jobs) if job.status != "ok"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "workers": self.workers,
            "at_once": self.at_once,
            "kernel_rss_before_bytes": self.kernel_rss_before_bytes,
            "kernel_rss_after_bytes": self.kernel_rss_after_bytes,
            # A view without a number carries why (an unavailable object), as in a job's report.
            "kernel_gpu_before_bytes": to_jsonable(self.kernel_gpu_before),
            "kernel_gpu_after_bytes": to_jsonable(self.kernel_gpu_after),
            "failed": self.failed,
            "notes": list(self.notes),
            "jobs": [job.to_dict() for job in self.jobs],
        }

    def _title(self) -> str:
        done = sum(job.status == "ok" for job in self.jobs)
        return (f"kerasmagic: isolated_map ran {len(self.jobs)} job(s), {done} ok, in {self.wall_s:.2f} s "
                f"({self.at_once} at a time)")

    def _sections(self) -> list[Section]:
        jobs = Section("Jobs")
        for index, job in enumerate(self.jobs):
            peak = format_bytes(job.child_rss_peak_bytes)
            gpu = max(job.child_gpu_peak.values(), default=None)
            gpu_text = f", GPU {format_bytes(gpu)}" if gpu else ""
            how = {"warm": "forked", "starting": "forked", "cold": "forked, first"}.get(job.worker_state, "fresh")
            status = f"{job.status}: {job.error}" if job.status != "ok" and job.error else job.status
            if job.status == "out_of_memory" and job.error:
                status = job.error  # "out of memory at X of its Y limit" says it all
            where = f" on {job.node.get('ip', '?')}/{str(job.node.get('node_id', ''))[:6]}" if job.node else ""
            jobs.add(f"[{index}] {_short(self.items[index])}", f"{job.wall_s:.2f} s",
                     f"{status}; RSS peak {peak}{gpu_text}; {how}{where}")
        kernel = Section("Kernel")
        kernel.add("RSS change", format_bytes(self.kernel_rss_after_bytes - self.kernel_rss_before_bytes, signed=True),
                   f"{format_bytes(self.kernel_rss_before_bytes)} → {format_bytes(self.kernel_rss_after_bytes)}")
        add_kernel_gpu_rows(kernel, self.kernel_gpu_before, self.kernel_gpu_after)
        on_gpu = [f"[{index}] {', '.join(job.returned_on_gpu['value'])}" for index, job in enumerate(self.jobs)
                  if job.returned_on_gpu.get("value")]
        if on_gpu:
            kernel.notes.append(f"on the kernel's GPU now, values brought back: {'; '.join(on_gpu)}")
        imported = [f"[{index}] imported {', '.join(job.job_imported)} itself" for index, job in enumerate(self.jobs)
                    if job.job_imported]
        if imported:
            kernel.notes.append(f"{'; '.join(imported)}: the templates after it import those first")
        kernel.notes.extend(self.notes)
        return [jobs, kernel]


def _short(item: Any, width: int = 24) -> str:
    try:
        text = repr(item)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not break the summary
        text = f"<{type(item).__name__}>"
    return text if len(text) <= width else text[:width - 1] + "…"


def _gpu_plan(gpu: Any, count: int) -> list[str | None]:
    """The CUDA_VISIBLE_DEVICES of each job: one device for all, round-robin, or a list."""
    if gpu is None:
        return [None] * count
    if isinstance(gpu, str) and gpu == "round-robin":
        devices = _visible_gpus()
        return [devices[i % len(devices)] for i in range(count)]
    if isinstance(gpu, (list, tuple)):
        if not gpu:
            raise IsolationUsageError("gpu=[] names no GPU; give indices like [0, 1], 'round-robin' or None")
        chosen = [check_gpu(g) for g in gpu]
        return [chosen[i % len(chosen)] for i in range(count)]
    return [check_gpu(gpu)] * count


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return [item.strip() for item in visible.split(",") if item.strip() and item.strip() != "-1"] or \
            _no_gpu("CUDA_VISIBLE_DEVICES hides every GPU in this kernel")
    devices = nvml.devices()
    if not isinstance(devices, list) or not devices:
        return _no_gpu(str(devices))
    return [str(i) for i in range(len(devices))]


def _no_gpu(why: str) -> list[str]:
    raise IsolationUsageError(f"gpu='round-robin' spreads jobs over NVIDIA GPUs, and there is none here ({why}); "
                              "leave gpu=None to run on the CPU")


class _Progress:
    """A bar with each job's state: ipywidgets in a notebook, one rewritten line in a terminal."""

    _MARKS = {"queued": "·", "launching": "…", "starting": "…", "running": "▶", "finishing": "▶",
              "over": "✓", "cancelled": "–"}

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.states = ["queued"] * total
        self.widget = None
        self.label = None
        self.enabled = enabled and total > 0
        self.started = time.perf_counter()
        self.tty = False
        if not self.enabled:
            return
        shell = _notebook_shell()
        if shell is not None:
            try:
                import ipywidgets
                from IPython.display import display  # noqa: PLC0415 - workers import this package too: no IPython there

                self.widget = ipywidgets.IntProgress(min=0, max=total, description="isolated_map")
                self.label = ipywidgets.HTML()
                self.box = ipywidgets.HBox([self.widget, self.label])
                display(self.box)
            except ImportError:
                self.widget = None
        self.tty = self.widget is None and sys.stderr.isatty()

    def update(self, index: int, run: JobRun) -> None:
        state = run.phase
        if state == "over" and run.result.status != "ok":
            state = "failed"
        self.states[index] = state
        if not self.enabled:
            return
        done = sum(s in ("over", "failed", "cancelled") for s in self.states)
        failed = self.states.count("failed")
        running = sum(s in ("launching", "starting", "running", "finishing") for s in self.states)
        marks = "".join("✗" if s == "failed" else self._MARKS.get(s, "?") for s in self.states)
        elapsed = time.perf_counter() - self.started
        text = f"{done}/{self.total} done, {running} running, {failed} failed, {elapsed:.1f} s"
        if self.widget is not None and self.label is not None:
            self.widget.value = done
            self.widget.bar_style = "danger" if failed else ("success" if done == self.total else "")
            self.label.value = f"<code>{marks}</code> {text}"
        elif self.tty:
            sys.stderr.write(f"\risolated_map {marks[:60]} {text}\033[K")
            if done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif state in ("over", "failed"):
            sys.stderr.write(f"isolated_map: job [{index}] {run.result.status} in {run.result.wall_s:.2f} s; {text}\n")
            sys.stderr.flush()


def _notebook_shell():
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is None or not shell_module.InteractiveShell.initialized():
        return None
    shell = shell_module.InteractiveShell.instance()
    return shell if type(shell).__name__ == "ZMQInteractiveShell" else None


def _check_map_options(fn: Any, workers: Any, on_error: Any) -> None:
    if not callable(fn):
        raise IsolationUsageError(f"isolated_map() calls a function on each item; {type(fn).__name__} is not callable")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise IsolationUsageError(f"workers is how many jobs run at once: an integer >= 1, got {workers!r}")
    if on_error not in _ON_ERROR:
        raise IsolationUsageError(f"on_error takes 'raise' (stop at the first failure) or 'collect' (keep going, "
                                  f"the exception takes the item's place), got {on_error!r}")


def isolated_map(fn: Callable[[Any], Any], items: Iterable[Any], *, workers: int = 1, timeout: float | None = None,
                 gpu: Any = None, env: dict[str, str] | None = None, seed: int | None = None,
                 on_error: str = "raise", quiet: bool = False, progress: bool = True, on: Any = None,
                 address: str | None = None, preload: list[str] | None = None,
                 memory_limit: int | str | None = None) -> IsolatedMapResult:
    """Call ``fn(item)`` for every item, each call in a fresh process; values in input order.

    Each call is a fork of the warm template (the frameworks are imported once, not per
    item), gives all of its memory back when it ends (TensorFlow's pools and GPU memory
    too), and leaves the kernel as it was. ``fn`` is sent once, by value (a notebook
    function works), with everything it refers to.

    Args:
        workers: how many calls run at once (at most ``configure_pool(size=...)``, the
            number of CPU cores by default).
        timeout: seconds per call, waiting for its process included.
        gpu: None (the kernel's setting), a device for every call (``0``, ``"0,1"``),
            ``"round-robin"`` over the visible GPUs, or a list to cycle through.
        env: environment for every call (see :func:`run_isolated`).
        seed: ``keras.utils.set_random_seed(seed)`` before each call.
        on_error: ``"raise"``: the first failure kills the running calls and is raised
            (``exc.map_result`` has the partial summary); ``"collect"``: the others go on
            and the exception takes the failed item's place.
        quiet: keep the calls' output out of the cell (each job keeps its last lines).
        progress: show a progress bar (a widget in a notebook, a line in a terminal).
        on: ``"ray"`` (or ``OnRay(...)``) runs the calls on a Ray cluster, ``workers`` at a
            time, each a fork of a warm template on the node Ray picks; ``fn`` and what it
            refers to go up to the object store once. See :func:`run_isolated`.
        address: the Ray cluster's address, with ``on="ray"``.
        preload: modules every call's template imports first (``["keras"]``), as in
            :func:`run_isolated`; without it, what the first calls import themselves is
            imported first for the later ones.
        memory_limit: the most memory each call may use (``"2GiB"``, bytes); a call that
            reaches it is killed and fails with :class:`IsolatedOutOfMemory` (``"collect"``
            keeps the others going), never the kernel. See :func:`run_isolated`.

    Raises:
        IsolationUsageError: bad options or an item that cannot be sent; nothing ran.
        KeyboardInterrupt: Ctrl-C; every running call was killed.

    Example:
        >>> def fold(k):
        ...     model = make_model(); model.fit(x[train[k]], y[train[k]], verbose=0)
        ...     return model.evaluate(x[test[k]], y[test[k]], verbose=0)
        >>> scores = isolated_map(fold, range(10), workers=2, timeout=600)   # doctest: +SKIP
        >>> sum(scores) / len(scores)                                        # doctest: +SKIP
        0.912
    """
    __tracebackhide__ = True
    _check_map_options(fn, workers, on_error)
    check_options(timeout, env, None, seed)
    limit_bytes = check_memory_limit(memory_limit)
    modules = check_preload(preload)
    target = check_target(on, address, gpu)
    items = list(items)
    gpus = _gpu_plan(gpu, len(items))
    notes = []
    backend = backend_for(target)
    if backend.capacity is None:
        at_once = min(workers, max(len(items), 1))  # the cluster's resources decide what really runs at once
    else:
        at_once = min(workers, backend.capacity, max(len(items), 1))
        if workers > backend.capacity:
            notes.append(f"workers={workers} capped at {backend.capacity}, the pool's size: "
                         f"configure_pool(size={workers}) allows more at once")
    kernel_before = rss_bytes()
    kernel_gpu_before = kernel_gpu_figures()
    started = time.perf_counter()
    shared = make_job_directory()
    runs: list[JobRun] = []
    try:
        function_result = IsolatedResult("isolated_map")
        function_spec = encode_named(getattr(fn, "__name__", "function"), fn, shared, function_result,
                                     "define it at module level or in the notebook")
        for index, item in enumerate(items):
            result = IsolatedResult(f"isolated_map item [{index}]")
            result.kernel_rss_before_bytes = kernel_before
            result.kernel_gpu_before = dict(kernel_gpu_before)
            result.sent = list(function_result.sent) if index == 0 else []
            directory = make_job_directory()
            try:
                call = {"function": function_spec, "kwargs": {},
                        "args": [encode_named(f"item [{index}]", item, directory, result, _HINT)]}
            except BaseException:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            job = Job("function", directory, call=call, seed=seed, memory_limit_bytes=limit_bytes)
            prefix = f"[{index}] " if at_once > 1 else ""
            runs.append(JobRun(job, worker_spec(gpu=gpus[index], env=env, preload=modules), result, timeout=timeout,
                               forward_output=not quiet, prefix=prefix))
    except BaseException:
        for run in runs:
            shutil.rmtree(run.job.directory, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)
        raise
    bar = _Progress(len(runs), progress)

    def summary() -> IsolatedMapResult:
        values = [run.result.value if run.error is None else run.error for run in runs]
        return IsolatedMapResult(items, [run.result for run in runs], values, workers=workers, at_once=at_once,
                                 wall_s=time.perf_counter() - started, kernel_rss_before_bytes=kernel_before,
                                 kernel_rss_after_bytes=rss_bytes(), notes=notes,
                                 kernel_gpu_before=kernel_gpu_before, kernel_gpu_after=kernel_gpu_figures())

    def progress_of(run: Any) -> None:
        bar.update(index_of[id(run.result)], run)

    index_of = {id(run.result): i for i, run in enumerate(runs)}
    try:
        run_jobs(runs, backend, at_once=at_once, stop_on_error=on_error == "raise", on_change=progress_of)
    # The partial summary travels on the exception (documented above): any exception, so an
    # attribute set at run time that no exception class declares.
    except IsolatedInterrupt as exc:
        exc.map_result = summary()  # type: ignore[attr-defined]
        raise
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    mapped = summary()
    if on_error == "raise":
        errors = [run.error for run in runs if run.error is not None]
        if errors:
            errors[0].map_result = mapped  # type: ignore[attr-defined]
            raise errors[0] from None
    return mapped


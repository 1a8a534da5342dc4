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
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import events
from ..probes import nvml
from ..probes.availability import Unavailable, to_jsonable
from ..probes.process import rss_bytes
from ..tables import Report, Section, format_bytes
from .api import check_gpu, check_options, check_target, encode_named
from .checkpoint import Checkpoint, ItemRecord, fingerprint_call, store_value
from .dispatch import Backend, JobRun, backend_for, run_jobs
from .errors import IsolatedInterrupt, IsolationUsageError, IsolationWarning
from .gpu_figures import kernel_gpu_figures
from .job import Job
from .job_memory import check_memory_limit
from .result import IsolatedResult, add_kernel_gpu_rows
from .retries import RetryPolicy, attempt_record
from .shipping import make_job_directory
from .spare import fixed_settings_in_function
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
                 kernel_gpu_after: dict[str, int | Unavailable] | None = None,
                 attempts: list[list[dict[str, Any]]] | None = None, restored: list[bool] | None = None,
                 checkpoint: str | None = None) -> None:
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
        #: Per item, each run it took (status, cause, time, peaks); ``[]`` for an item read from the checkpoint
        #: whose attempts were not kept.
        self.attempts = attempts if attempts is not None else [[] for _ in jobs]
        #: Per item, whether its value was read from the checkpoint instead of run now.
        self.restored = restored if restored is not None else [False] * len(jobs)
        self.checkpoint = checkpoint

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
            "attempts": self.attempts,
            "restored": list(self.restored),
            "checkpoint": self.checkpoint,
        }

    def to_frame(self) -> Any:
        """The summary table as a pandas DataFrame: one row per item, in input order.

        Columns: ``item``, ``status``, ``attempts``, ``wall_s`` (the last attempt's), ``total_s``
        (all attempts), ``rss_peak_bytes``, ``gpu_peak_bytes`` (None without a GPU reading),
        ``cause`` (why the last attempt ended), ``node`` (on a cluster) and ``restored`` (read from
        the checkpoint, not run now).

        Example:
            >>> frame = isolated_map(fold, range(5)).to_frame()                 # doctest: +SKIP
            >>> frame[["status", "attempts", "wall_s", "rss_peak_bytes"]].head(2) # doctest: +SKIP
              status  attempts  wall_s  rss_peak_bytes
            0     ok         1    3.12       912261120
            1     ok         2    3.40       917504000
        """
        try:
            import pandas  # type: ignore[import-untyped]  # heavy and optional: loaded only when asked for
        except ImportError:
            raise IsolationUsageError("to_frame() needs pandas: pip install pandas (to_dict() needs nothing)") from None
        rows = []
        for index, job in enumerate(self.jobs):
            tries = self.attempts[index]
            last = tries[-1] if tries else {}
            gpu = [v for v in job.child_gpu_peak.values() if isinstance(v, int) and not isinstance(v, bool)]
            node = job.node or last.get("node") or {}
            rows.append({
                "item": _short(self.items[index], 60),
                "status": job.status,
                "attempts": len(tries) if tries else (0 if job.status == "cancelled" else 1),
                "wall_s": job.wall_s,
                "total_s": sum(t.get("wall_s") or 0.0 for t in tries) if tries else job.wall_s,
                "rss_peak_bytes": job.child_rss_peak_bytes,
                "gpu_peak_bytes": max(gpu) if gpu else last.get("gpu_peak_bytes"),
                "cause": last.get("cause", "ok" if job.status == "ok" else job.error or job.status),
                "node": node.get("ip") if node else None,
                "restored": self.restored[index],
            })
        return pandas.DataFrame(rows, columns=["item", "status", "attempts", "wall_s", "total_s", "rss_peak_bytes",
                                               "gpu_peak_bytes", "cause", "node", "restored"])

    def _title(self) -> str:
        done = sum(job.status == "ok" for job in self.jobs)
        restored = sum(self.restored)
        from_file = f", {restored} of them from {self.checkpoint}" if restored else ""
        return (f"kerasmagic: isolated_map ran {len(self.jobs)} job(s), {done} ok{from_file}, in {self.wall_s:.2f} s "
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
            tries = self.attempts[index] if index < len(self.attempts) else []
            if tries and job.status in ("crash", "timeout", "out_of_memory"):  # a death, said in words
                status = f"{job.status}: {tries[-1]['cause']}"
            if len(tries) > 1:
                status += "; attempts: " + "; ".join(f"{t['attempt']}. {t['cause']}" for t in tries)
            if self.restored[index]:
                how = f"from {self.checkpoint}"
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
    """Each item's state, with done / running / failed / left, elapsed and the time left estimated
    from the items finished so far: ipywidgets in a notebook, one rewritten line in a terminal."""

    _MARKS = {"queued": "·", "launching": "…", "starting": "…", "running": "▶", "finishing": "▶",
              "over": "✓", "restored": "✓", "cancelled": "–", "failed": "✗", "retrying": "↻"}
    _RUNNING = ("launching", "starting", "running", "finishing")

    def __init__(self, total: int, enabled: bool, at_once: int = 1, restored: list[bool] | None = None,
                 name: str = "isolated_map") -> None:
        self.total = total
        self.name = name
        self.map_id = uuid.uuid4().hex[:12]
        self.job_ids: dict[int, str] = {}  # item -> its current job's id, for the sidebar's jobs list
        self.published: tuple[int, ...] | None = None
        self.at_once = max(at_once, 1)
        self.states = ["restored" if restored and restored[i] else "queued" for i in range(total)]
        self.finished_s: list[float] = []  # wall time of each item finished in this run, for the estimate
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

    def counts(self) -> dict[str, int]:
        """Items done (ok, this run or from the checkpoint), running, failed and left to start."""
        return {"done": sum(s in ("over", "restored") for s in self.states),
                "running": sum(s in self._RUNNING for s in self.states),
                "failed": self.states.count("failed"),
                "left": sum(s in ("queued", "retrying") for s in self.states)}

    def eta_s(self) -> float | None:
        """Seconds left, from the items finished in this run; None before the first finished."""
        c = self.counts()
        if not self.finished_s or not (c["left"] or c["running"]):
            return None
        per_item = sum(self.finished_s) / len(self.finished_s)
        # The running items are about half done on average; what is left runs at_once at a time.
        return per_item * (c["left"] + c["running"] / 2) / self.at_once

    def text(self) -> str:
        """The progress line: ``4/10 done, 2 running, 1 failed, 3 left; 41 s, about 30 s left``."""
        c = self.counts()
        elapsed = time.perf_counter() - self.started
        line = f"{c['done']}/{self.total} done, {c['running']} running, {c['failed']} failed, {c['left']} left; " \
               f"{elapsed:.1f} s"
        eta = self.eta_s()
        if eta is not None:
            line += f", about {_duration(eta)} left"
        return line

    def publish(self) -> None:
        """The counts to the sidebar's jobs list (kerasmagic.live), when they changed."""
        c = self.counts()
        key = (c["done"], c["running"], c["failed"], c["left"])
        if key == self.published:
            return
        self.published = key
        events.publish("isolated_map_progress", {
            "map_id": self.map_id, "name": self.name, "total": self.total, **c,
            "elapsed_s": time.perf_counter() - self.started, "eta_s": self.eta_s(),
            "job_ids": list(self.job_ids.values())})

    def update(self, index: int, run: JobRun, state: str | None = None, why: str = "") -> None:
        if state is None:
            state = run.phase
            if state == "over" and run.result.status != "ok":
                state = "failed"
        if state in ("over", "failed") and self.states[index] != state:
            self.finished_s.append(run.result.wall_s)
        self.states[index] = state
        self.job_ids[index] = run.result.job_id
        self.publish()
        if not self.enabled:
            return
        c = self.counts()
        finished = c["done"] + c["failed"] + self.states.count("cancelled")
        marks = "".join(self._MARKS.get(s, "?") for s in self.states)
        text = self.text()
        if self.widget is not None and self.label is not None:
            self.widget.value = c["done"]
            self.widget.bar_style = "danger" if c["failed"] else ("success" if c["done"] == self.total else "")
            self.label.value = f"<code>{marks[:200]}</code> {text}"
        elif self.tty:
            sys.stderr.write(f"\risolated_map {marks[:60]} {text}\033[K")
            if finished == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif state in ("over", "failed", "retrying"):
            if state == "retrying":
                ended = f"ended after {run.result.wall_s:.2f} s ({why or run.result.status}); it runs again"
            else:
                ended = f"{run.result.status} after {run.result.wall_s:.2f} s"
            sys.stderr.write(f"isolated_map: job [{index}] {ended}; {text}\n")
            sys.stderr.flush()


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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
                 memory_limit: int | str | None = None, checkpoint: str | os.PathLike[str] | None = None,
                 resume: bool | str = True, retries: int = 0,
                 retry_on: Iterable[str | type[BaseException]] | str | None = None) -> IsolatedMapResult:
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
        checkpoint: a file (``"cv.kmrun"``) that keeps each finished item (value, report,
            last output, attempts) as it ends; running the same call again, in this kernel
            or a new one, skips what is done ("7 of 10 done, resuming at item 7"). A changed
            function or item list is refused. A value that cannot be stored is said when it
            comes back (its item runs again at the next resume).
        resume: ``True`` (continue what the checkpoint holds) or ``"restart"`` (discard it).
        retries: how many more times an item runs, each time in a fresh fork, after its
            process crashed, was killed or ran out of memory (see ``retry_on``).
        retry_on: which failures are retried: ``"crash"``, ``"out_of_memory"`` (these two
            by default), ``"timeout"``, ``"error"`` (the code raised) or exception types
            (``ValueError`` or ``"ValueError"``).

    Raises:
        IsolationUsageError: bad options or an item that cannot be sent; nothing ran.
        CheckpointError: a checkpoint that cannot be written, is not ours, is damaged, was
            written for another function or item list, or is held by another process.
        KeyboardInterrupt: Ctrl-C; every running call was killed.

    Example:
        >>> def fold(k):
        ...     model = make_model(); model.fit(x[train[k]], y[train[k]], verbose=0)
        ...     return model.evaluate(x[test[k]], y[test[k]], verbose=0)
        >>> scores = isolated_map(fold, range(10), workers=2, timeout=600)   # doctest: +SKIP
        >>> sum(scores) / len(scores)                                        # doctest: +SKIP
        0.912
        >>> scores = isolated_map(fold, range(10), checkpoint="cv.kmrun", retries=1)  # doctest: +SKIP
        7 of 10 done, resuming at item 7
    """
    __tracebackhide__ = True
    _check_map_options(fn, workers, on_error)
    check_options(timeout, env, None, seed)
    limit_bytes = check_memory_limit(memory_limit)
    modules = check_preload(preload)
    target = check_target(on, address, gpu)
    policy = RetryPolicy.of(retries, retry_on)
    if resume is not True and resume != "restart":
        raise IsolationUsageError(f"resume takes True (go on from the checkpoint) or 'restart' (discard what it "
                                  f"holds), got {resume!r}")
    items = list(items)
    gpus = _gpu_plan(gpu, len(items))
    notes: list[str] = []
    backend = backend_for(target)
    if backend.capacity is None:
        at_once = min(workers, max(len(items), 1))  # the cluster's resources decide what really runs at once
    else:
        at_once = min(workers, backend.capacity, max(len(items), 1))
        if workers > backend.capacity:
            notes.append(f"workers={workers} capped at {backend.capacity}, the pool's size: "
                         f"configure_pool(size={workers}) allows more at once")
    # The checkpoint is opened (locked, checked, read) before anything is sent: a path that cannot be
    # written or a file that does not fit fails here, before any item ran.
    book = None
    if checkpoint is not None:
        book = Checkpoint.open(os.fspath(checkpoint), fingerprint_call(fn, items), resume=resume)
    try:
        return _map_items(fn, items, book, policy, workers=workers, at_once=at_once, backend=backend,
                          gpus=gpus, env=env, seed=seed, on_error=on_error, quiet=quiet, progress=progress,
                          modules=modules, limit_bytes=limit_bytes, timeout=timeout, notes=notes)
    finally:
        if book is not None:
            book.close()


def _map_items(fn: Callable[[Any], Any], items: list[Any], book: Checkpoint | None, policy: RetryPolicy, *,
               workers: int, at_once: int, backend: Backend, gpus: list[str | None], env: Any, seed: Any,
               on_error: str, quiet: bool, progress: bool, modules: Any, limit_bytes: int | None,
               timeout: float | None, notes: list[str]) -> IsolatedMapResult:
    """The per-item flow of :func:`isolated_map`: skip what the checkpoint holds, run the rest in
    passes (a pass runs the items left; the next, those worth another attempt), record each end."""
    __tracebackhide__ = True
    count = len(items)
    kernel_before = rss_bytes()
    kernel_gpu_before = kernel_gpu_figures()
    started = time.perf_counter()
    results: list[IsolatedResult] = [IsolatedResult(f"isolated_map item [{i}]", status="cancelled")
                                     for i in range(count)]
    values: list[Any] = [None] * count
    errors: list[BaseException | None] = [None] * count
    attempts: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    restored = [False] * count
    if book is not None:
        notes.extend(book.notes)
        for index, record in book.done.items():
            if index < count:
                results[index], values[index], restored[index] = _restored_result(index, record), record.value, True
                attempts[index] = list(record.attempts)
        _say_where_it_resumes(book, restored, quiet, notes)
    pending = [i for i in range(count) if not restored[i]]
    shared = make_job_directory()
    bar = _Progress(count, progress, at_once, restored, name=getattr(fn, "__name__", "isolated_map"))
    handled: set[int] = set()

    def summary() -> IsolatedMapResult:
        shown = [errors[i] if errors[i] is not None else values[i] for i in range(count)]
        return IsolatedMapResult(items, results, shown, workers=workers, at_once=at_once,
                                 wall_s=time.perf_counter() - started, kernel_rss_before_bytes=kernel_before,
                                 kernel_rss_after_bytes=rss_bytes(), notes=notes,
                                 kernel_gpu_before=kernel_gpu_before, kernel_gpu_after=kernel_gpu_figures(),
                                 attempts=attempts, restored=restored,
                                 checkpoint=book.path if book is not None else None)

    try:
        function_result = IsolatedResult("isolated_map")
        fixed = fixed_settings_in_function(fn)
        function_spec = encode_named(getattr(fn, "__name__", "function"), fn, shared, function_result,
                                     "define it at module level or in the notebook") if pending else None
        first = True
        while pending:
            runs = []
            try:
                for index in pending:
                    result = IsolatedResult(_label(index, len(attempts[index]) + 1, policy.retries))
                    result.kernel_rss_before_bytes = kernel_before
                    result.kernel_gpu_before = dict(kernel_gpu_before)
                    result.sent = list(function_result.sent) if first else []
                    first = False
                    results[index] = result
                    directory = make_job_directory()
                    try:
                        call = {"function": function_spec, "kwargs": {},
                                "args": [encode_named(f"item [{index}]", items[index], directory, result, _HINT)]}
                    except BaseException:
                        shutil.rmtree(directory, ignore_errors=True)
                        raise
                    job = Job("function", directory, call=call, seed=seed, memory_limit_bytes=limit_bytes,
                              fixed_settings=fixed)
                    prefix = f"[{index}] " if at_once > 1 else ""
                    runs.append(JobRun(job, worker_spec(gpu=gpus[index], env=env, preload=modules), result,
                                       timeout=timeout, forward_output=not quiet, prefix=prefix))
            except BaseException:
                for run in runs:
                    shutil.rmtree(run.job.directory, ignore_errors=True)
                raise
            index_of = {id(run.result): pending[i] for i, run in enumerate(runs)}
            again: list[int] = []

            def on_change(run: Any, index_of: dict[int, int] = index_of, again: list[int] = again) -> None:
                index = index_of[id(run.result)]
                if run.phase != "over" or id(run.result) in handled:
                    bar.update(index, run)
                    return
                handled.add(id(run.result))
                if _item_over(index, run, book, policy, attempts, values, errors, timeout):
                    again.append(index)
                    bar.update(index, run, "retrying", why=attempts[index][-1]["cause"])
                else:
                    bar.update(index, run)

            try:
                run_jobs(runs, backend, at_once=at_once, stop_on_error=on_error == "raise", on_change=on_change)
            # The partial summary travels on the exception (documented above): any exception, so an
            # attribute set at run time that no exception class declares.
            except IsolatedInterrupt as exc:
                exc.map_result = summary()  # type: ignore[attr-defined]
                raise
            if on_error == "raise" and any(error is not None for error in errors):
                break
            pending = sorted(again)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    mapped = summary()
    if on_error == "raise":
        failed = [error for error in errors if error is not None]
        if failed:
            failed[0].map_result = mapped  # type: ignore[attr-defined]
            raise failed[0] from None
    return mapped


def _label(index: int, attempt: int, retries: int) -> str:
    """The job's name in the sidebar's jobs list: which item, and which attempt when there may be more."""
    return f"isolated_map item [{index}]" + (f", attempt {attempt} of {retries + 1}" if retries else "")


def _item_over(index: int, run: Any, book: Checkpoint | None, policy: RetryPolicy,
               attempts: list[list[dict[str, Any]]], values: list[Any], errors: list[BaseException | None],
               timeout: float | None) -> bool:
    """An item's run ended: record the attempt, keep the value (and store it), or decide on another
    attempt. True when the item runs again; its error is then taken off the run, so that the loop
    does not stop the map for a failure that a retry may mend."""
    result, error = run.result, run.error
    tries = attempts[index]
    tries.append(attempt_record(len(tries) + 1, result, error, timeout=timeout, output=getattr(run, "tail", ""),
                                kernel_log_since=run.kernel_log_since))
    if error is not None:
        exc_type = getattr(error, "exc_type", None) or None
        if policy.should_retry(result.status, exc_type, attempts=len(tries)):
            run.error = None
            return True
        if len(tries) > 1:
            _add_attempts(error, tries)
        errors[index] = error
        if book is not None:
            _keep(book, index, ItemRecord(index, result.status, None, _report_summary(result),
                                          result.last_output[-4000:], tries, time.time()), None)
        return False
    values[index], errors[index] = result.value, None
    lost = result.not_returned.get("value")
    if book is not None and lost is not None:
        # The worker could not send its value: None here is no result. Marked done, a resume would
        # return that None as the item's value, silently (issue 33, item 10).
        warnings.warn(IsolationWarning(
            f"item [{index}]'s value did not come back from the isolated process ({lost}), so it is not "
            f"checkpointed in {book.path}: a resume runs this item again. Return plain values (numbers, arrays, "
            "dicts, a saved model's path)"), stacklevel=2)
    elif book is not None:
        try:
            stored = store_value(result.value)
        except TypeError as why:
            warnings.warn(IsolationWarning(
                f"item [{index}]'s value ({type(result.value).__name__}) cannot be stored in {book.path}: {why}. "
                "You have it in this kernel; a resume runs this item again. Return plain values (numbers, "
                "arrays, dicts, a saved model's path)"), stacklevel=2)
        else:
            _keep(book, index, ItemRecord(index, "ok", None, _report_summary(result), result.last_output[-4000:],
                                          tries, time.time()), stored)
    return False


def _keep(book: Checkpoint, index: int, record: ItemRecord, stored: bytes | None) -> None:
    """Append an item's record; a file that cannot take it (a full disk) is said, and the map goes on."""
    try:
        book.write(record, stored)
    except OSError as exc:
        warnings.warn(IsolationWarning(
            f"item [{index}] could not be written to {book.path} ({type(exc).__name__}: {exc.strerror or exc}); "
            "you have its value in this kernel, and a resume runs it again. Free space where the checkpoint "
            "is, or give the map a checkpoint on another disk"), stacklevel=2)


def _add_attempts(error: BaseException, tries: list[dict[str, Any]]) -> None:
    """Every attempt's cause on the error of an item that failed them all."""
    listed = "\n".join(f"  attempt {t['attempt']}: {t['cause']}" for t in tries)
    if error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}\n\nall {len(tries)} attempts failed:\n{listed}",) + tuple(error.args[1:])
    error.attempts = tries  # type: ignore[attr-defined]


def _report_summary(result: IsolatedResult) -> dict[str, Any]:
    """What the checkpoint keeps of a job's report: what the summary table and ``to_frame()`` show."""
    keep = ("status", "error", "wall_s", "run_s", "wait_s", "worker_state", "exit_code", "signal_name",
            "child_rss_peak_bytes", "memory_limit_bytes", "worker_pid", "on", "node")
    summary = {name: getattr(result, name) for name in keep}
    summary["child_gpu_peak"] = {k: v for k, v in result.child_gpu_peak.items() if isinstance(v, int)}
    return summary


def _restored_result(index: int, record: ItemRecord) -> IsolatedResult:
    result = IsolatedResult(f"isolated_map item [{index}]")
    for name, value in record.report.items():
        if hasattr(result, name) and value is not None:
            setattr(result, name, value)
    result.value = record.value
    result.last_output = record.output_tail
    return result


def _say_where_it_resumes(book: Checkpoint, restored: list[bool], quiet: bool, notes: list[str]) -> None:
    done = sum(restored)
    if not done:
        return
    left = [i for i, was in enumerate(restored) if not was]
    if not left:
        line = f"{done} of {len(restored)} done in {book.path}; nothing left to run"
    else:
        line = f"{done} of {len(restored)} done, resuming at item {left[0]}"
        if left != list(range(left[0], len(restored))):
            shown = ", ".join(str(i) for i in left[:10]) + (" …" if len(left) > 10 else "")
            line += f" (left: {shown})"
    notes.append(f"{line} ({book.path})")
    if not quiet:
        print(line, flush=True)


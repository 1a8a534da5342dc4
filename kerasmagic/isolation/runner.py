"""The one loop that drives isolated jobs, and its seam: ``drive(runs, backend)``.

Whatever runs the jobs, the loop is the same: it starts up to ``at_once`` of them, waits for
news, ends those that are over (their report published, their warning issued), stops at the
first failure when asked, and, whatever ends it (an exception, a Ctrl-C), stops every job still
running before it returns; a second Ctrl-C waits for that cleanup. Where a job runs is the
:class:`Backend`'s business, behind three calls (``start``, ``wait``, ``cancel``): the local
one forks processes from this machine's pool (:class:`kerasmagic.isolation.local.LocalBackend`),
the Ray one sends jobs to a cluster (:class:`kerasmagic.isolation.cluster.remote.RayBackend`).
:mod:`kerasmagic.isolation.dispatch` picks it, once.

A :class:`JobRun` is one job on its way: the same object whichever backend drives it, so a
map's progress bar and summary read either. What the job sends goes to its sink
(:mod:`kerasmagic.isolation.sink`); how it ends is told by :mod:`kerasmagic.isolation.outcome`.
The loop runs in the kernel's main thread: output written there reaches the running cell, and a
Ctrl-C lands in it.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from .. import events
from ..probes.process import rss_bytes
from .gpu_figures import kernel_gpu_figures
from .job import Job
from .job_memory import JobMemoryLimit
from .outcome import TAIL_CHARS, interruption, last_lines, status_of, warn
from .result import IsolatedResult
from .sink import CellSink, JobSink
from .spec import WorkerSpec

__all__ = ["Backend", "JobRun", "drive"]

logger = logging.getLogger(__name__)


class JobRun:
    """One job on its way through the loop: queued → launching → starting → running → finishing → over
    (or cancelled: it never ran, or it was stopped because another job failed).

    ``sink`` receives what the job sends (by default the kernel's :class:`~kerasmagic.isolation.sink.CellSink`,
    with ``forward_output`` and ``prefix``); ``attempt`` is the backend's own state of the run (a
    process, a Ray task). ``error`` is set when it failed, ``warning`` when values did not come back.
    """

    def __init__(self, job: Job, spec: WorkerSpec, result: IsolatedResult, *, timeout: float | None = None,
                 forward_output: bool = True, prefix: str = "", sink: JobSink | None = None) -> None:
        self.job = job
        self.spec = spec
        self.result = result
        self.timeout = timeout
        self.sink: JobSink = sink if sink is not None else CellSink(result, forward=forward_output, prefix=prefix)
        self.phase = "queued"
        self.error: BaseException | None = None
        self.warning: str | None = None  # issued once the job's process is released
        self.tail = ""
        self.started = 0.0  # perf_counter when it began
        self.started_ts = 0.0  # the same moment, in epoch seconds
        self.run_started = 0.0
        self.deadline: float | None = None
        self.expired = False  # ended from another thread as if its timeout had passed (expire())
        self.attempt: Any = None  # the backend's, from its start to its release
        #: Where this machine's kernel log was as the job started (a local job only): a kill line
        #: written after it can be about the job's pid (see retries.kernel_log_mark).
        self.kernel_log_since: int | None = None
        self.memory_limit = None if job.memory_limit_bytes is None else JobMemoryLimit(job.memory_limit_bytes)
        result.frameworks = list(spec.preload)
        result.memory_limit_bytes = job.memory_limit_bytes

    @property
    def label(self) -> str:
        return self.result.label

    def begin(self) -> None:
        """It starts now: its clock, and its deadline (waiting for a process counts)."""
        self.started = time.perf_counter()
        self.started_ts = time.time()
        self.deadline = None if self.timeout is None else self.started + self.timeout
        self.phase = "launching"
        if self.expired:  # expired between its registration and its start
            self.deadline = self.started

    def expire(self) -> None:
        """End the job (from another thread) as if its timeout had passed: the loop sees a deadline
        that has passed and ends it itself, whatever phase it is in."""
        self.expired = True
        self.timeout = self.timeout if self.timeout is not None else 0.0
        self.deadline = time.perf_counter()

    def output(self, stream: str, text: str) -> None:
        """What the job printed: kept (the end of it, for the report) and handed to the sink."""
        if text and self.result.first_output_ts is None:
            self.result.first_output_ts = time.time()
        self.tail = (self.tail + text)[-TAIL_CHARS:]
        self.sink.output(stream, text)

    def output_ended(self) -> None:
        for stream in ("stdout", "stderr"):
            self.sink.output_ended(stream)

    def last_output(self) -> str:
        return last_lines(self.tail)

    def fail(self, error: BaseException, status: str | None = None) -> None:
        """The job failed with ``error`` (the first failure is the one it keeps); it is over."""
        if self.error is None:
            self.error = error
            self.result.status = status or status_of(error)
        self.phase = "over"

    def cancel(self) -> None:
        """It never ran, or it was stopped because another job failed."""
        self.phase = "cancelled"
        self.result.status = "cancelled"

    def remove_folder(self) -> None:
        if self.job.owns_directory:
            shutil.rmtree(self.job.directory, ignore_errors=True)


class Backend(Protocol):
    """Where jobs run: what the loop asks of a backend (its seam)."""

    #: What a Ctrl-C raises when no job had started.
    not_started: str

    @property
    def capacity(self) -> int | None:
        """How many jobs it runs at once (a pool's size), or None where it does not say (a cluster's
        resources decide)."""

    def open(self, runs: list[JobRun]) -> None:
        """Before the first start of a drive (connect to a cluster); what it raises ends the drive, nothing
        ran. A backend may drive several times in turn: each drive opens and closes it."""

    def start(self, run: JobRun) -> None:
        """Start the run (it is counted as running from here: a Ctrl-C cancels it)."""

    def wait(self, runs: list[JobRun]) -> bool:
        """Wait a little for news of the running ``runs`` and move them on (output, messages, exits,
        deadlines); False when nothing more can start here (the backend went away)."""

    def cancel(self, run: JobRun, why: str) -> None:
        """Stop a running job now: ``"interrupt"`` (Ctrl-C: it fails with an ``IsolatedInterrupt``)
        or ``"other"`` (another job failed: it is cancelled)."""

    def release(self, run: JobRun) -> None:
        """The run is over: give back what it held (its process, its folder, its uploads)."""

    def close(self) -> None:
        """The drive is over."""


def drive(runs: list[JobRun], backend: Backend, *, at_once: int = 1, stop_on_error: bool = True,
          on_change: Callable[[JobRun], None] | None = None) -> None:
    """Run ``runs`` on ``backend``, at most ``at_once`` at a time, in this (the main) thread; fills
    each ``.result``, and sets ``.error`` where a job failed.

    With ``stop_on_error``, the first failure stops the jobs still running and ends the loop
    (the rest are ``cancelled``). ``on_change`` is called with a run whenever its phase changes.
    A Ctrl-C stops every running job and re-raises as
    :class:`~kerasmagic.isolation.errors.IsolatedInterrupt`. Whatever ends the loop (an exception
    too), every job is stopped and its folder removed before it returns.
    """
    __tracebackhide__ = True
    notify = _Notifier(on_change)
    try:
        backend.open(runs)
    except BaseException:  # no cluster, none answering: nothing ran, nothing stays
        for run in runs:
            run.remove_folder()
        raise
    queued = list(runs)
    active: list[JobRun] = []
    interrupted = False
    try:
        while queued or active:
            while queued and len(active) < at_once:
                run = queued.pop(0)
                active.append(run)  # from here on a Ctrl-C stops it, started or not
                backend.start(run)
                notify(run)
            alive = backend.wait(active)
            for run in list(active):
                if run.phase in ("over", "cancelled"):
                    active.remove(run)
                    _end(run, backend)
                    notify(run)
                    _warn(run)
                else:
                    notify(run)
            if not alive or (stop_on_error and any(run.error is not None for run in runs)):
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        with _interrupts_deferred() as deferred:
            for run in active:
                try:
                    if run.phase not in ("over", "cancelled"):
                        backend.cancel(run, "interrupt" if interrupted else "other")
                    _end(run, backend)
                    notify(run)
                except Exception:  # one run's failure must not leave the others running
                    logger.exception("kerasmagic: ending isolated job %s failed", run.label)
            for run in queued:  # never started: another job failed first, or Ctrl-C
                run.cancel()
                run.remove_folder()
            backend.close()
        interrupted = interrupted or deferred.happened
    if interrupted:
        raise interruption(runs, backend.not_started) from None


class _Notifier:
    """Calls ``on_change`` with a run when its phase differs from the one it was last called with."""

    def __init__(self, on_change: Callable[[JobRun], None] | None) -> None:
        self.on_change = on_change
        self.seen: dict[int, str] = {}

    def __call__(self, run: JobRun) -> None:
        if self.on_change is not None and self.seen.get(id(run)) != run.phase:
            self.seen[id(run)] = run.phase
            self.on_change(run)


def _end(run: JobRun, backend: Backend) -> None:
    """The run is over: the backend gives back what it held, then its report is completed and published."""
    backend.release(run)
    result = run.result
    if not result.last_output:
        result.last_output = run.last_output()
    result.wall_s = time.perf_counter() - run.started if run.started else 0.0
    result.kernel_rss_after_bytes = rss_bytes()
    result.kernel_gpu_after = kernel_gpu_figures()
    result.finished_ts = time.time()
    events.publish("isolated_done", result.to_dict())


def _warn(run: JobRun) -> None:
    if run.warning:
        message, run.warning = run.warning, None
        warn(run.label, message)


class _Deferred:
    happened = False


@contextmanager
def _interrupts_deferred() -> Iterator[_Deferred]:
    """Hold a second Ctrl-C until the cleanup is done (a cleanup cut short leaks processes)."""
    state = _Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def note(signum: int, frame: Any) -> None:
        state.happened = True

    try:
        saved = signal.signal(signal.SIGINT, note)
    except (ValueError, TypeError):
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, saved)

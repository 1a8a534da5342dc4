"""Running isolated jobs: get each a process, send it the job, stream its output, watch its
memory, bring its values back; one job (``run_isolated``, a cell) or many (``isolated_map``).

The kernel's main thread does all of it in one ``selectors`` loop over every running job's
file descriptors (its message channel, its stdout and stderr pipes): output is written to
``sys.stdout``/``sys.stderr`` from the main thread, which is where ipykernel routes it into
the running cell, and a Ctrl-C (``KeyboardInterrupt``) lands in that loop, which then kills
every job's process group.
"""

from __future__ import annotations

import codecs
import logging
import os
import selectors
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import events
from ..probes.availability import guarded
from ..probes.process import rss_bytes
from ..probes.sample import gpu_device_values, keep_largest, tf_device_missing, tf_device_values
from ..tables import format_bytes
from .errors import (
    IsolatedCellError,
    IsolatedCrash,
    IsolatedInterrupt,
    IsolatedOutOfMemory,
    IsolatedShippingError,
    IsolatedTimeout,
    IsolationWarning,
    describe_exit,
    shorten_message,
)
from .gpu_figures import gpu_devices_of, kernel_gpu_figures
from .job import Job
from .job_memory import WATCH_INTERVAL_S, JobMemoryLimit
from .messages import (
    CHANNEL_LOST_EXIT,
    JOB_CHANNEL,
    Display,
    Done,
    ImportFailed,
    JobEnded,
    MessageError,
    Raised,
    Ready,
    RunJob,
    Sample,
    dumps,
)
from .pool import Launch, WorkerPool, default_pool
from .processes import JobProcess
from .result import IsolatedResult
from .shipping import FrameworkNotImported, decode, describe
from .spec import WorkerSpec, env_overrides
from .template import TemplateFailed

logger = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.25
_TAIL_CHARS = 8192
_EXIT_GRACE_S = 10.0
#: How long a job whose channel closed without its last message may run on: nothing it makes
#: can come back any more (it closed the descriptor, or it is dying and the exit is on its way).
_CHANNEL_LOST_GRACE_S = 2.0
_DRAIN_AFTER_EXIT_S = 1.0


class _Stream:
    """One of the worker's output pipes: chunks are decoded and written as they arrive."""

    def __init__(self, fd: int, target_name: str, prefix: str) -> None:
        self.fd = fd
        self.target_name = target_name
        self.prefix = prefix
        self.partial = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def lines_to_write(self, text: str, final: bool = False) -> str:
        """With a prefix (jobs of a map run side by side), whole lines only, each prefixed."""
        if not self.prefix:
            return text
        text = self.partial + text
        lines = text.split("\n")
        self.partial = "" if final else lines.pop()
        return "".join(f"{self.prefix}{line}\n" for line in lines if line or not final)


class JobRun:
    """One job on its way through the loop: queued → launching → starting → running → finishing → over."""

    def __init__(self, job: Job, spec: WorkerSpec, result: IsolatedResult, *, timeout: float | None = None,
                 forward_output: bool = True, prefix: str = "") -> None:
        self.job = job
        self.spec = spec
        self.result = result
        self.timeout = timeout
        self.forward_output = forward_output
        self.prefix = prefix
        self.phase = "queued"
        self.launch: Launch | None = None
        self.worker: JobProcess | None = None
        self.error: BaseException | None = None
        self.tail = ""
        self.final: JobEnded | ImportFailed | None = None
        self.channel_open = False
        self.streams: dict[int, _Stream] = {}
        self.started = 0.0
        self.launched_ts = 0.0
        self.run_started = 0.0
        self.exited_at: float | None = None
        self.finish_deadline = 0.0
        self.deadline: float | None = None
        self.warning: str | None = None  # issued once the job's process is released
        self.killed_without_result = False  # it ran on after its channel closed, and we ended it
        self.pool: WorkerPool | None = None  # the pool it was launched from: it learns what the job imports
        self.memory_limit = None if job.memory_limit_bytes is None else JobMemoryLimit(job.memory_limit_bytes)
        result.frameworks = list(spec.preload)
        result.memory_limit_bytes = job.memory_limit_bytes

    # --- phases ---------------------------------------------------------------------------

    def begin(self, pool: WorkerPool) -> None:
        self.started = time.perf_counter()
        self.launched_ts = time.time()
        self.deadline = None if self.timeout is None else self.started + self.timeout
        self.phase = "launching"
        self.pool = pool
        events.publish("isolated_started", {"job_id": self.result.job_id, "label": self.result.label,
                                            "on": "local", "node": None, "ts": self.launched_ts})
        try:
            self.launch = pool.launch(self.spec, self.job.directory)
        except (OSError, RuntimeError) as exc:
            self._cannot_start(exc)

    def attach(self, selector: selectors.BaseSelector) -> None:
        """The launch finished: register the process's descriptors, or record why it failed."""
        assert self.launch is not None
        launch = self.launch
        self.result.worker_state = launch.state
        self.result.worker_note = launch.note
        self.result.template_pid = launch.template_pid
        self.result.template_threads = launch.template_threads
        error = launch.future.exception()
        if isinstance(error, TemplateFailed):
            self._import_failed(error.error, error.log)
            return
        if error is not None:
            self._cannot_start(error)
            return
        worker = launch.future.result()
        self.worker = worker
        self.result.worker_pid = worker.pid
        self.result.origin = worker.origin
        selector.register(worker.conn.fileno(), selectors.EVENT_READ, (self, None))
        self.channel_open = True
        for fd, name in ((worker.stdout_fd, "stdout"), (worker.stderr_fd, "stderr")):
            os.set_blocking(fd, False)
            stream = _Stream(fd, name, self.prefix)
            self.streams[fd] = stream
            selector.register(fd, selectors.EVENT_READ, (self, stream))
        self.phase = "starting"

    def on_ready(self, message: Ready, selector: selectors.BaseSelector) -> None:
        assert self.worker is not None
        self.worker.ready_info = message
        result = self.result
        result.worker_import_s = message.import_s
        result.child_rss_start_bytes = message.rss_bytes
        result.template_modules = list(message.modules)
        result.wait_s = time.perf_counter() - self.started
        if self.memory_limit is not None:
            # Before the job is sent: from its first line, its memory is charged to its cgroup.
            self.memory_limit.enter(self.worker.pid)
            self.result.memory_limit_how = self.memory_limit.how
        self.run_started = time.perf_counter()
        self.phase = "running"
        try:
            self.worker.conn.send_bytes(dumps(self.request()))
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it died after it was ready
            self._died_before_the_job(exc, selector)

    def request(self) -> RunJob:
        """The ``job`` message this run sends its process: the job, where it runs (cwd, ``sys.path``)."""
        return RunJob.here(self.job)

    def check(self, now: float, selector: selectors.BaseSelector) -> None:
        """Advance what needs no I/O: launches that finished, deadlines, exits."""
        if self.phase == "launching" and self.launch is not None and self.launch.future.done():
            self.attach(selector)
        if self.phase in ("launching", "starting", "running") and self.deadline is not None and now >= self.deadline:
            self._timed_out(selector)
            return
        if self.phase == "starting" and self.worker is not None and not self.channel_open:
            self._died_while_starting(selector)
            return
        if self.phase == "running" and self.memory_limit is not None and self.final is None:
            assert self.worker is not None
            rss = self.memory_limit.over(self.worker.pid)
            if rss is not None:
                self._out_of_memory(rss, selector)
                return
        if self.phase == "running" and (self.final is not None or not self.channel_open):
            self.result.run_s = now - self.run_started
            self.phase = "finishing"
            self.finish_deadline = now + (_EXIT_GRACE_S if self.final is not None else _CHANNEL_LOST_GRACE_S)
        if self.phase == "finishing":
            assert self.worker is not None
            if self.exited_at is None and self.worker.poll() is not None:
                self.exited_at = now
            if self.exited_at is None and now >= self.finish_deadline:
                self.worker.end_group()
                self.killed_without_result = self.final is None
                self.exited_at = now
            # A grandchild the job started may hold the pipes open: drain briefly, never wait on it.
            if self.exited_at is not None and (not self.streams or now - self.exited_at >= _DRAIN_AFTER_EXIT_S):
                self._conclude(selector)

    def wait_hint(self, now: float) -> float:
        """How long the loop may sleep before this job needs a look without I/O."""
        hint = 0.25
        if self.phase == "launching":
            hint = 0.005  # a fork answers in milliseconds; the future has no descriptor to select on
        elif self.phase == "finishing":
            hint = 0.01
        elif self.phase == "running" and self.memory_limit is not None:
            hint = WATCH_INTERVAL_S
        if self.deadline is not None:
            hint = min(hint, max(0.0, self.deadline - now))
        return hint

    # --- I/O --------------------------------------------------------------------------------

    def read_stream(self, stream: _Stream, selector: selectors.BaseSelector) -> None:
        try:
            chunk = os.read(stream.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            selector.unregister(stream.fd)
            del self.streams[stream.fd]
            self._write(stream, stream.decoder.decode(b"", final=True), final=True)
            return
        self._write(stream, stream.decoder.decode(chunk))

    def _write(self, stream: _Stream, text: str, final: bool = False) -> None:
        if text and self.result.first_output_ts is None:
            self.result.first_output_ts = time.time()
        self.tail = (self.tail + text)[-_TAIL_CHARS:]
        shown = stream.lines_to_write(text, final)
        if self.forward_output and shown:
            self.emit_output(stream.target_name, shown)

    # --- where a job's output, displays, samples and values go (the Ray agent relays them) ---

    def emit_output(self, stream_name: str, text: str) -> None:
        target = getattr(sys, stream_name)
        target.write(text)
        target.flush()

    def show(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        _show(data, metadata, self.forward_output)

    def publish_sample(self, message: Sample) -> None:
        events.publish("isolated_sample", {**message.reading, "job_id": self.result.job_id})

    def bring_back(self, final: Done) -> str | None:
        """Rebuild the job's values in this process; a warning naming what did not come back."""
        return _bring_back(final, self.result)

    def read_channel(self, selector: selectors.BaseSelector) -> None:
        assert self.worker is not None
        try:
            data = self.worker.conn.recv_bytes()
        except (EOFError, OSError):
            self._close_channel(selector)
            return
        try:
            message = JOB_CHANNEL.loads(data)
        except MessageError as exc:
            logger.warning("kerasmagic: job %s sent what it may not: %s", self.result.label, exc)
            return
        if message.sender is not None and message.sender != self.worker.pid:
            return  # a process the job forked shares the channel: only the job's own messages count
        if isinstance(message, Ready):
            if self.phase == "starting":
                self.on_ready(message, selector)
        elif isinstance(message, ImportFailed):
            self.final = message
            self._close_channel(selector)
        elif isinstance(message, Sample):
            self._record_sample(message.reading)
            self.publish_sample(message)
        elif isinstance(message, Display):
            self.show(message.data, message.metadata or {})
        elif isinstance(message, JobEnded):
            self.final = message
            self._imported(message.imported)
            final_sample = message.final_sample
            self._record_sample(final_sample)
            exact_peak = final_sample.get("rss_peak_bytes")
            if isinstance(exact_peak, int) and exact_peak:  # VmHWM; an unavailable object off Linux
                self.result.child_rss_peak_bytes = max(self.result.child_rss_peak_bytes or 0, exact_peak)
                self.result.child_rss_peak_method = "exact"
            self.result.child_pss_bytes = final_sample.get("pss_bytes")
            self.result.child_uss_bytes = final_sample.get("uss_bytes")
            if message.first_line_ts:
                self.result.start_latency_s = max(0.0, message.first_line_ts - self.launched_ts)

    def _imported(self, modules: Any) -> None:
        """The heavy modules the job imported itself: into its report, and taught to the pool,
        which starts a template that has them for the next jobs. At the job's end, not while it
        runs: on two cores a second import beside the job's slowed that job by half (6.5 s vs 4.2 s)
        and saved the next one a second."""
        if not modules:
            return
        known = self.result.job_imported
        self.result.job_imported = [*known, *(m for m in modules if m not in known)]
        if self.pool is not None:
            self.pool.learn(list(modules), self.spec)

    def _close_channel(self, selector: selectors.BaseSelector) -> None:
        if self.channel_open and self.worker is not None:
            self.channel_open = False
            try:
                selector.unregister(self.worker.conn.fileno())
            except (KeyError, ValueError):
                pass

    def _record_sample(self, sample: dict[str, Any]) -> None:
        result = self.result
        result.samples += 1
        rss = sample.get("rss_bytes")
        if isinstance(rss, int):
            result.child_rss_peak_bytes = max(result.child_rss_peak_bytes or 0, rss)
            if self.memory_limit is not None:
                self.memory_limit.over(0, sampled_rss=rss)  # the job's own reading counts toward the peak
        keep_largest(result.child_tf_peak, tf_device_values(sample.get("tf"), "peak_bytes"))
        for device, why in tf_device_missing(sample.get("tf"), "in_use_bytes").items():
            result.child_tf_peak.setdefault(device, why)  # the report says why there is no peak
        keep_largest(result.child_gpu_peak, gpu_device_values(sample.get("gpu"), "process_used_bytes"))
        result.fold_allocators(sample.get("allocators"))

    # --- endings ----------------------------------------------------------------------------

    def stop(self, selector: selectors.BaseSelector) -> None:
        """Kill the job's process group now and drain what it printed (timeouts, Ctrl-C, errors)."""
        if self.worker is not None:
            self.worker.end_group()
            deadline = time.perf_counter() + _DRAIN_AFTER_EXIT_S
            while self.streams and time.perf_counter() < deadline:
                for key, _ in selector.select(0.05):
                    run, stream = key.data
                    if run is self and stream is not None:
                        self.read_stream(stream, selector)
        self._unregister(selector)

    def _unregister(self, selector: selectors.BaseSelector) -> None:
        self._close_channel(selector)
        for fd in list(self.streams):
            try:
                selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        self.streams.clear()

    def _fail(self, error: BaseException, status: str) -> None:
        self.result.status = status
        self.error = error
        self.phase = "over"

    def _cannot_start(self, exc: BaseException) -> None:
        self._fail(IsolatedCrash(
            f"could not start an isolated worker ({type(exc).__name__}: {exc}); nothing ran. Check that "
            f"{sys.executable} still runs and that the machine has free memory and processes/open files "
            "to spare (ulimit -u, ulimit -n), then run it again", self.result), "crash")

    def _import_failed(self, error: str | None, log: str) -> None:
        modules = ", ".join(self.spec.preload) or "Python"
        overrides = sorted(env_overrides(self.spec)) if error else []
        cause = f"{error}" if error else f"it printed:\n{log}"
        where = f" (its environment differs from the kernel's in {', '.join(overrides)})" if overrides else ""
        self.result.last_output = log if not error else ""
        self._fail(IsolatedCrash(
            f"the isolated process could not import {modules}{where}: {cause}; nothing ran and the "
            "namespace is unchanged. Fix the environment (--env / env=) or install what is missing", self.result,
            last_output=log), "crash")

    def _died_while_starting(self, selector: selectors.BaseSelector) -> None:
        assert self.worker is not None
        failed = self.final if isinstance(self.final, ImportFailed) else None
        self.stop(selector)
        code = self.worker.poll()
        self.result.exit_code = code
        if failed is not None:
            self._import_failed(failed.error, failed.traceback)
            return
        log = self.worker.import_failure()
        self._import_failed(None, log or f"nothing (exit code {code})")

    def _died_before_the_job(self, exc: OSError, selector: selectors.BaseSelector) -> None:
        assert self.worker is not None
        self.stop(selector)  # its descriptors leave the loop before they are closed and reused
        code = _wait_for_exit(self.worker, 2.0)
        self._record_exit(code)
        self._fail(IsolatedCrash(
            f"the isolated worker (pid {self.worker.pid}) {self._how_it_ended(code)} after it was ready, before it "
            f"received the job ({type(exc).__name__}); nothing ran and the namespace is unchanged: run it again, a "
            "fresh worker takes it (if this repeats, something on this machine kills idle processes, e.g. the "
            "out-of-memory killer)", self.result, exit_code=code, signal_name=self.result.signal_name,
            last_output=self.result.last_output), "crash")

    def _timed_out(self, selector: selectors.BaseSelector) -> None:
        phase = self.phase
        self.stop(selector)
        now = time.perf_counter()
        # The job's own output only: a template's import log (TensorFlow's banner, runpy's
        # warnings) is not what the job printed.
        self.result.last_output = _last_lines(self.tail)
        shown = f"; its output so far:\n{self.result.last_output}" if self.result.last_output.strip() else ""
        if phase in ("launching", "starting"):
            self.result.wait_s = now - self.started
            what = "the template" if self.result.worker_state in ("cold", "starting") else "the worker"
            self.result.error = f"no worker was ready within {self.timeout:g} s"
            message = (f"no isolated worker was ready within the timeout of {self.timeout:g} s ({what} was still "
                       f"starting: importing {', '.join(self.spec.preload) or 'Python'}); nothing ran. Raise the "
                       f"timeout, or look at what slows the start (a sitecustomize, PYTHONPATH){shown}")
        else:
            self.result.run_s = now - self.run_started
            self.result.error = f"ran past its timeout of {self.timeout:g} s; killed"
            message = (f"the isolated job ran past its timeout of {self.timeout:g} s and its worker was killed "
                       f"(all of its memory is back); raise the timeout or make the job shorter{shown}")
        self._fail(IsolatedTimeout(message, self.result), "timeout")

    def _out_of_memory(self, growth: int, selector: selectors.BaseSelector) -> None:
        """The watch saw the job reach its limit: its process group is killed, the kernel lives on."""
        assert self.memory_limit is not None
        self.stop(selector)
        self.result.run_s = time.perf_counter() - self.run_started
        self.result.last_output = _last_lines(self.tail)
        self.result.child_rss_peak_bytes = max(self.result.child_rss_peak_bytes or 0, self.memory_limit.last_rss_bytes)
        self._fail_out_of_memory(growth, "kerasmagic's watch killed its worker", at_limit=True)

    def _fail_out_of_memory(self, growth: int | None, by: str, at_limit: bool) -> None:
        """``at_limit``: ``growth`` is the reading that reached the limit, else the last one before a kill."""
        assert self.memory_limit is not None
        limit = format_bytes(self.memory_limit.limit_bytes)
        if at_limit and growth:
            at = f"at {format_bytes(growth)} of its {limit} limit"
        else:
            at = f"at its {limit} limit" + (f" (last reading {format_bytes(growth)})" if growth else "")
        started = self.memory_limit.start_rss_bytes
        counted = (f" (the limit counts what the job added to the {format_bytes(started)} it started with, "
                   "shared with its template)") if started else ""
        self.result.error = f"out of memory {at}"
        shown = f"; its last output:\n{self.result.last_output}" if self.result.last_output.strip() else ""
        pid = f" (pid {self.worker.pid})" if self.worker is not None else ""
        self._fail(IsolatedOutOfMemory(
            f"the isolated job ran out of memory {at}: {by}{pid}, and all of its memory is back; the kernel "
            f"and your variables are unchanged{counted}. Raise memory_limit, or make the job use less (smaller "
            f"batches, fewer copies of the data){shown}", self.result, exit_code=self.result.exit_code,
            signal_name=self.result.signal_name, last_output=self.result.last_output), "out_of_memory")

    def interrupted(self, selector: selectors.BaseSelector) -> None:
        if self.phase == "over":
            return
        self.stop(selector)
        if self.run_started and not self.result.run_s:
            self.result.run_s = time.perf_counter() - self.run_started
        who = f"the isolated worker (pid {self.worker.pid})" if self.worker is not None else "the isolated worker"
        self._fail(IsolatedInterrupt(f"interrupted; {who} was killed", self.result), "interrupted")

    def _record_exit(self, code: int | None) -> None:
        self.result.exit_code = code
        if code is not None and code < 0:
            self.result.signal_name = _signal_name(-code)
        self.result.last_output = _last_lines(self.tail)

    def _how_it_ended(self, code: int | None) -> str:
        return describe_exit(code, verb=True)

    def _conclude(self, selector: selectors.BaseSelector) -> None:
        """The process ended: record how, then fail the run or bring its values back."""
        assert self.worker is not None
        self._unregister(selector)
        code = self.worker.poll()
        if code is None:  # we ended its group a moment ago: its exit status is on its way
            code = _wait_for_exit(self.worker, 2.0)
        self._record_exit(code)
        final, result = self.final, self.result
        self.phase = "over"
        if not isinstance(final, JobEnded):
            self._crashed()
            return
        result.run_s = final.run_s if final.run_s is not None else result.run_s
        result.not_returned.update(final.not_returned or {})
        if isinstance(final, Raised) and final.stage == "inputs":
            self._input_not_rebuilt(final)
        elif isinstance(final, Raised):
            self._code_raised(final)
        elif isinstance(final, Done):
            self.warning = self.bring_back(final)

    def _crashed(self) -> None:
        assert self.worker is not None
        result = self.result
        code = result.exit_code
        if self.memory_limit is not None and self.memory_limit.oom_killed():
            self._fail_out_of_memory(self.memory_limit.peak_growth_bytes or None,
                                     "the out-of-memory killer of its cgroup ended its worker", at_limit=False)
            return
        output = f"; its last output:\n{result.last_output}" if result.last_output else "; it printed nothing"
        closed = ("closed its channel to the kernel (did it close file descriptors it had not opened, e.g. "
                  "os.closerange(3, ...)?)")
        if self.killed_without_result:
            result.error = "closed its channel to the kernel and ran on; killed"
            message = (f"the isolated job {closed} and ran on; nothing it made could come back, so its worker "
                       f"(pid {self.worker.pid}) was killed {_CHANNEL_LOST_GRACE_S:g} s later")
        elif code == CHANNEL_LOST_EXIT:
            result.error = "closed its channel to the kernel; nothing came back"
            message = (f"the isolated job {closed}, so nothing it made could come back; its worker "
                       f"(pid {self.worker.pid}) ended without sending it (exit code {code})")
        else:
            result.error = describe_exit(code)
            hint = ", what the out-of-memory killer sends" if result.signal_name == "SIGKILL" else ""
            message = f"the isolated worker (pid {self.worker.pid}) {self._how_it_ended(code)}{hint} before the job " \
                      "finished"
        self._fail(IsolatedCrash(f"{message}{output}", result, exit_code=code, signal_name=result.signal_name,
                                 last_output=result.last_output), "crash")

    def _input_not_rebuilt(self, final: Raised) -> None:
        name = final.name or "an input"
        self._fail(IsolatedShippingError(
            f"{name!r} reached the isolated process but could not be rebuilt there ({final.exc_type}: "
            f"{shorten_message(final.exc_message)}); the code did not run and the namespace is unchanged. "
            "A class that exists only in this kernel (defined at run time, or a keras.Model subclass without "
            "@keras.saving.register_keras_serializable) cannot be rebuilt in another process: define it in "
            "a module on sys.path, or build the object inside the isolated code",
            self.result, name=name, exc_type=final.exc_type, exc_message=final.exc_message), "error")
        self.result.error = _error_line(final)

    def _code_raised(self, final: Raised) -> None:
        self.result.error = _error_line(final)
        message, traceback = final.exc_message, final.traceback.rstrip()
        shortened = shorten_message(message)
        if shortened != message and shortened in traceback:
            # Shown once, at the end of the traceback (the worker shortened it there), not twice.
            headline = (f"the isolated code raised {final.exc_type} (its message, {len(message):,} characters, "
                        "is shortened at the end of the traceback; exc.exc_message holds all of it)")
        else:
            headline = f"the isolated code raised {final.exc_type}: {shortened}"
        self._fail(IsolatedCellError(
            f"{headline}\n\nTraceback in the worker process:\n{traceback}",
            self.result, exc_type=final.exc_type, exc_message=message,
            child_traceback=final.traceback), "error")


def _error_line(final: Raised) -> str:
    """The job's error in one short line (the sidebar's and the map summary's): type and message start."""
    message = final.exc_message
    first = (message[:301].splitlines() or [""])[0][:300]
    return f"{final.exc_type}: {first}{'…' if len(message) > len(first) else ''}"


def _wait_for_exit(worker: JobProcess, within: float) -> int | None:
    deadline = time.perf_counter() + within
    while worker.poll() is None and time.perf_counter() < deadline:
        time.sleep(0.005)
    return worker.poll()


def drive(runs: list[JobRun], *, pool: WorkerPool | None = None, at_once: int = 1,
          stop_on_error: bool = True, on_change: Callable[[JobRun], None] | None = None) -> None:
    """Run ``runs``, at most ``at_once`` at a time, in this (the main) thread; fills each ``.result``.

    With ``stop_on_error``, the first failure kills the jobs still running and ends the loop
    (the rest are ``cancelled``). A Ctrl-C kills every running job and re-raises as
    :class:`IsolatedInterrupt`. Whatever ends the loop (an exception too), every job's
    process group is ended and its folder removed before it returns.
    """
    __tracebackhide__ = True
    loop = _Loop(runs, pool or default_pool(), at_once, on_change or (lambda run: None))
    interrupted = False
    try:
        while loop.queued or loop.active:
            loop.start_queued()
            loop.read_ready()
            loop.advance()
            if stop_on_error and any(run.error is not None for run in runs):
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        interrupted = loop.end_all(interrupted) or interrupted
    if interrupted:
        raise _interruption(runs, loop.active) from None


class _Loop:
    """The state of one :func:`drive`: the runs waiting and running, and one selector over their descriptors."""

    def __init__(self, runs: list[JobRun], pool: WorkerPool, at_once: int,
                 notify: Callable[[JobRun], None]) -> None:
        self.pool = pool
        self.at_once = at_once
        self.notify = notify
        self.queued = list(runs)
        self.active: list[JobRun] = []
        self.selector = selectors.DefaultSelector()

    def start_queued(self) -> None:
        """Begin queued runs while fewer than ``at_once`` are active."""
        while self.queued and len(self.active) < self.at_once:
            run = self.queued.pop(0)
            run.begin(self.pool)
            self.active.append(run)
            self.notify(run)

    def read_ready(self) -> None:
        """Wait (no longer than the earliest run needs) and read each descriptor that has data."""
        now = time.perf_counter()
        timeout = min([run.wait_hint(now) for run in self.active] + [0.25])
        for key, _ in self.selector.select(timeout):
            run, stream = key.data
            if stream is None:
                run.read_channel(self.selector)
            elif stream.fd in run.streams:
                run.read_stream(stream, self.selector)

    def advance(self) -> None:
        """Move each active run on (launches, deadlines, exits); end those that are over."""
        now = time.perf_counter()
        for run in list(self.active):
            before = run.phase
            run.check(now, self.selector)
            if run.phase == "over":
                self.active.remove(run)
                _end(run, self.pool)
            if run.phase != before:
                self.notify(run)
            _warn(run)

    def end_all(self, interrupted: bool) -> bool:
        """Stop what still runs, cancel what never started, close the selector; True if a Ctrl-C
        came meanwhile (it waits until this is done: a cleanup cut short leaks processes)."""
        with _interrupts_deferred() as deferred:
            for run in self.active:
                try:
                    self._end_active(run, interrupted)
                except Exception:  # one run's failure must not leave the others running
                    logger.exception("kerasmagic: ending isolated job %s failed", run.result.label)
            for run in self.queued:  # never started: another job failed first, or Ctrl-C
                run.phase = "cancelled"
                run.result.status = "cancelled"
                if run.job.owns_directory:
                    shutil.rmtree(run.job.directory, ignore_errors=True)
            self.selector.close()
        return deferred.happened

    def _end_active(self, run: JobRun, interrupted: bool) -> None:
        if interrupted:
            run.interrupted(self.selector)
        elif run.phase != "over":
            run.stop(self.selector)
            run.phase = "cancelled"
            run.result.status = "cancelled"
        _end(run, self.pool)
        self.notify(run)


def _interruption(runs: list[JobRun], active: list[JobRun]) -> IsolatedInterrupt:
    """What a Ctrl-C during :func:`drive` raises: the interrupted job's error, or why nothing came back."""
    stopped = [run.error for run in active if isinstance(run.error, IsolatedInterrupt)]
    if stopped:
        return stopped[0]
    finished = [run for run in runs if run.phase == "over"]
    if finished:
        return IsolatedInterrupt(f"interrupted after the isolated job finished (pid {finished[-1].result.worker_pid}); "
                                 "its values were not brought back", finished[-1].result)
    return IsolatedInterrupt("interrupted before an isolated job started")


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


def _end(run: JobRun, pool: WorkerPool) -> None:
    """Release the job's process (its whole group dies), remove its folder, publish the result."""
    result = run.result
    if run.worker is not None:
        pool.release(run.worker)
    elif run.launch is not None:
        pool.abandon(run.launch)
    if run.memory_limit is not None:
        run.memory_limit.release()
    if run.job.owns_directory:
        shutil.rmtree(run.job.directory, ignore_errors=True)
    if not result.last_output:
        result.last_output = _last_lines(run.tail)
    result.wall_s = time.perf_counter() - run.started
    result.pool_size = pool.size
    result.pool_idle_workers, result.pool_idle_rss_bytes = pool.idle_cost()
    result.kernel_rss_after_bytes = rss_bytes()
    result.kernel_gpu_after = kernel_gpu_figures()
    result.finished_ts = time.time()
    events.publish("isolated_done", result.to_dict())


def run_job(job: Job, spec: WorkerSpec, result: IsolatedResult, *, timeout: float | None = None,
            forward_output: bool = True, pool: WorkerPool | None = None, on: Any = None) -> IsolatedResult:
    """Run one encoded job and fill ``result``; raises the isolation errors.

    ``on`` is a :class:`~kerasmagic.isolation.cluster.target.OnRay` to run it on a Ray
    cluster. The job folder is removed at the end, whatever happens.
    """
    __tracebackhide__ = True
    run: Any = JobRun(job, spec, result, timeout=timeout, forward_output=forward_output)
    if on is not None:
        # The Ray driver loads for on= only (and builds on this module: no import at the top).
        from .cluster.remote import drive_on_ray  # noqa: PLC0415

        run = drive_on_ray([run], on)[0]
    else:
        drive([run], pool=pool)
    if run.error is not None:
        # Without its context: where it was found (our loop) is plumbing the user cannot act on.
        raise run.error from None
    return result


def _show(data: dict[str, Any], metadata: dict[str, Any], forward: bool) -> None:
    if not forward:
        return
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is not None and shell_module.InteractiveShell.initialized():
        from IPython.display import display  # noqa: PLC0415 - only where IPython runs: workers load this module too

        display(data, raw=True, metadata=metadata)
    else:
        print(data.get("text/plain", ""))  # a script: the text form is all a terminal can show


def _last_lines(text: str, count: int = 12) -> str:
    return "\n".join(text.replace("\r", "\n").rstrip().splitlines()[-count:])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _framework_hint(module: str) -> str:
    return f"rebuilding it would import {module} into the kernel, which has not imported it"


def _framework_advice(modules: list[str]) -> str:
    imports = " / ".join(f"`import {m}`" for m in modules)
    its = "its" if len(modules) == 1 else "their"
    return (f" (isolation keeps {', '.join(modules)} and {its} memory out of the kernel: run {imports} in the "
            "kernel first to get such values back, or return plain values: numpy arrays, "
            "model.get_weights(), a saved file's path)")


def _bring_back(final: Done, result: IsolatedResult) -> str | None:
    """Rebuild the job's value and outputs into ``result``; a warning naming what did not come back."""
    started = time.perf_counter()
    warn_about = dict(result.not_returned)  # what the worker could not send
    frameworks: list[str] = []  # refused, not imported: named once in the warning with what to do
    if final.value is not None:
        value = _rebuild("value", final.value, result, warn_about, frameworks)
        if value is not _NOT_REBUILT:
            result.value = value
    for name, spec in final.outputs.items():
        if spec["format"] == "module" and spec["name"] not in sys.modules:
            # Importing TensorFlow into the kernel because the cell imported it would undo
            # the point of isolating it; the user imports it here when they need it. A cell's
            # own `import` is not worth a warning: the report lists it.
            result.not_returned[name] = (f"module {spec['name']!r} is not imported in the kernel; "
                                         "import it there if needed")
            continue
        value = _rebuild(name, spec, result, warn_about, frameworks)
        if value is not _NOT_REBUILT:
            result.outputs[name] = value
    result.ship_out_s = time.perf_counter() - started
    if not warn_about:
        return None
    listing = "; ".join(f"{name}: {why}" for name, why in warn_about.items())
    advice = _framework_advice(frameworks) if frameworks else ""
    return f"these values did not come back from the isolated process: {listing}{advice}"


_NOT_REBUILT = object()


def _rebuild(name: str, spec: dict[str, Any], result: IsolatedResult, warn_about: dict[str, str],
             frameworks: list[str]) -> Any:
    """One value decoded (and listed as returned), or ``_NOT_REBUILT`` with the reason noted."""
    try:
        value = decode(spec, guard=True)
    except FrameworkNotImported as exc:  # a model, a tensor, a function using tf...
        warn_about[name] = result.not_returned[name] = _framework_hint(exc.module)
        if exc.module not in frameworks:
            frameworks.append(exc.module)
        return _NOT_REBUILT
    except Exception as exc:  # noqa: BLE001 - one bad value must not lose the others
        warn_about[name] = result.not_returned[name] = \
            f"rebuilding it in the kernel failed: {type(exc).__name__}: {exc}"
        return _NOT_REBUILT
    result.returned.append(describe(name, spec))
    devices = guarded(lambda: gpu_devices_of(value), "finding the value's devices")  # a report, never a failure
    if isinstance(devices, list) and devices:
        result.returned_on_gpu[name] = devices
    return value


def _warn(run: JobRun) -> None:
    if run.warning:
        message, run.warning = run.warning, None
        # warn_explicit with no registry: Python's default filter shows it every time (a
        # location-based warning shows once per line, so a loop would hide later failures),
        # and it names the run, not a line of kerasmagic. Issued after the run's cleanup:
        # under `-W error` it raises, and nothing may be left behind then.
        warnings.warn_explicit(message, IsolationWarning, f"<{run.result.label}>", 0, module="kerasmagic.isolation")

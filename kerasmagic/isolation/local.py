"""Jobs on this machine: the backend that runs them in processes from the pool.

:class:`LocalBackend` fills the drive loop's seam (:class:`~kerasmagic.isolation.runner.Backend`)
with processes: ``start`` asks the pool for one (a fork of a warm template, else a fresh
interpreter), ``wait`` is one ``selectors`` wait over every running job's descriptors (its
message channel, its stdout and stderr pipes), and ``cancel`` kills the job's process group.
Each job's process is driven through the same phases: launching (waiting for the pool),
starting (waiting for its ``ready``), running (the job was sent), finishing (its last message
came, or its channel closed: waiting for the exit), over.

The pool (:class:`~kerasmagic.isolation.pool.WorkerPool`) is the edge: anything with its
``launch``/``release``/``abandon``/``learn`` surface that hands out
:class:`~kerasmagic.isolation.processes.JobProcess` handles will do (a scripted fake process
drives this loop in tests without forking). A Ray node's agent drives its jobs with this
backend too, on its own pool.
"""

from __future__ import annotations

import codecs
import logging
import os
import selectors
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import events
from ..probes.availability import to_jsonable
from .job import Job
from .job_memory import WATCH_INTERVAL_S
from .messages import (
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
from .outcome import (
    CHANNEL_LOST_GRACE_S,
    cannot_start,
    code_raised,
    crashed,
    died_before_the_job,
    import_failed,
    input_not_rebuilt,
    interrupted,
    out_of_memory,
    record_end,
    record_exit,
    record_sample,
    timed_out,
)
from .pool import Launch
from .processes import JobProcess
from .retries import kernel_log_mark
from .runner import JobRun
from .spec import WorkerSpec
from .template import TemplateFailed

__all__ = ["LocalBackend", "ProcessSource"]

logger = logging.getLogger(__name__)

_EXIT_GRACE_S = 10.0
_DRAIN_AFTER_EXIT_S = 1.0


class ProcessSource(Protocol):
    """Where a local job gets its process: what the backend asks of the pool."""

    size: int

    def launch(self, spec: WorkerSpec, directory: str, fixed: list[str] | tuple[str, ...] = ()) -> Launch: ...

    def release(self, worker: JobProcess) -> None: ...

    def abandon(self, launch: Launch) -> None: ...

    def learn(self, modules: list[str], spec: WorkerSpec) -> list[str]: ...

    def idle_cost(self) -> tuple[int, Any]: ...

    def spare_states(self) -> list[dict[str, Any]]: ...

    def end_spares(self) -> int: ...


class _Stream:
    """One of the job's output pipes: its chunks decoded as they arrive."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")


class LocalBackend:
    """Jobs in processes of this machine's pool (see the module).

    ``request`` makes the ``job`` message a job's process receives (the job, where it runs); a
    Ray node's agent passes its own, with the kernel's working directory where it exists there.
    """

    not_started = "interrupted before an isolated job started"

    def __init__(self, pool: ProcessSource, request: Callable[[Job], RunJob] = RunJob.here) -> None:
        self.pool = pool
        self.request = request
        self.selector: selectors.BaseSelector = selectors.DefaultSelector()

    @property
    def capacity(self) -> int:
        return self.pool.size

    # --- the seam ----------------------------------------------------------------------------

    def open(self, runs: list[JobRun]) -> None:
        """A selector of its own for each drive: a backend may drive several in turn (a map's passes)."""
        self.selector = selectors.DefaultSelector()

    def start(self, run: JobRun) -> None:
        run.begin()
        # Before the worker is taken (a fork, or a spare forked earlier and alive now): a kill line
        # written from here on that names its pid is about this job, not an earlier owner of the pid.
        run.kernel_log_since = kernel_log_mark()
        run.attempt = _Process(run, self)
        events.publish("isolated_started", {"job_id": run.result.job_id, "label": run.label,
                                            "on": "local", "node": None, "ts": run.started_ts})
        run.attempt.launch_process()

    def wait(self, runs: list[JobRun]) -> bool:
        """Wait (no longer than the earliest run needs), read each descriptor that has data, then
        move each run on (launches, deadlines, exits)."""
        now = time.perf_counter()
        timeout = min([run.attempt.wait_hint(now) for run in runs] + [0.25])
        for key, _ in self.selector.select(timeout):
            process, stream = key.data
            if stream is None:
                process.read_channel()
            elif stream.fd in process.streams:
                process.read_stream(stream)
        now = time.perf_counter()
        for run in runs:
            run.attempt.check(now)
        return True

    def cancel(self, run: JobRun, why: str) -> None:
        process = run.attempt
        if why == "interrupt":
            # Ctrl-C: the user stops; a spare would hold memory (a GPU context) for a job that may not come.
            self.pool.end_spares()
        if why == "interrupt" and process is not None:
            process.interrupt()
        elif why == "interrupt":  # a Ctrl-C before its process was asked for
            run.fail(interrupted(run.result, "the isolated worker"))
        else:
            if process is not None:
                process.stop()
            run.cancel()

    def release(self, run: JobRun) -> None:
        """Release the job's process (its whole group dies), its memory limit and its folder."""
        process = run.attempt
        if process is not None:
            if process.worker is not None:
                self.pool.release(process.worker)
            elif process.launch is not None:
                self.pool.abandon(process.launch)
        if run.memory_limit is not None:
            run.memory_limit.release()
        run.remove_folder()
        result = run.result
        result.pool_size = self.pool.size
        result.pool_idle_workers, result.pool_idle_rss_bytes = self.pool.idle_cost()
        result.pool_spares = to_jsonable(self.pool.spare_states())
        run.attempt = None  # it refers to the run: no cycle left for the garbage collector to find

    def close(self) -> None:
        self.selector.close()


class _Process:
    """One run's process, as the local backend drives it (the run's ``attempt``)."""

    def __init__(self, run: JobRun, backend: LocalBackend) -> None:
        self.run = run
        self.backend = backend
        self.selector = backend.selector
        self.launch: Launch | None = None
        self.worker: JobProcess | None = None
        self.final: JobEnded | ImportFailed | None = None
        self.channel_open = False
        self.streams: dict[int, _Stream] = {}
        self.exited_at: float | None = None
        self.finish_deadline = 0.0
        self.killed_without_result = False  # it ran on after its channel closed, and we ended it

    # --- phases ---------------------------------------------------------------------------

    def launch_process(self) -> None:
        run = self.run
        try:
            self.launch = self.backend.pool.launch(run.spec, run.job.directory, run.job.fixed_settings)
        except (OSError, RuntimeError) as exc:
            run.fail(cannot_start(run.result, exc))

    def attach(self) -> None:
        """The launch finished: register the process's descriptors, or record why it failed."""
        run, launch, result = self.run, self.launch, self.run.result
        assert launch is not None
        result.worker_state = launch.state
        result.worker_note = launch.note
        result.spare = launch.spare
        result.template_pid = launch.template_pid
        result.template_threads = launch.template_threads
        error = launch.future.exception()
        if isinstance(error, TemplateFailed):
            run.fail(import_failed(result, run.spec, error.error, error.log))
            return
        if error is not None:
            run.fail(cannot_start(result, error))
            return
        worker = launch.future.result()
        self.worker = worker
        result.worker_pid = worker.pid
        result.origin = worker.origin
        self.selector.register(worker.conn.fileno(), selectors.EVENT_READ, (self, None))
        self.channel_open = True
        for fd, name in ((worker.stdout_fd, "stdout"), (worker.stderr_fd, "stderr")):
            os.set_blocking(fd, False)
            stream = _Stream(fd, name)
            self.streams[fd] = stream
            self.selector.register(fd, selectors.EVENT_READ, (self, stream))
        run.phase = "starting"

    def on_ready(self, message: Ready) -> None:
        run, worker, result = self.run, self.worker, self.run.result
        assert worker is not None
        worker.ready_info = message
        result.worker_import_s = message.import_s
        result.spare_warm_up_s = message.warm_up_s
        result.child_rss_start_bytes = message.rss_bytes
        result.template_modules = list(message.modules)
        result.wait_s = time.perf_counter() - run.started
        if run.memory_limit is not None:
            # Before the job is sent: from its first line, its memory is charged to its cgroup.
            worker.enter_memory_limit(run.memory_limit)
            result.memory_limit_how = run.memory_limit.how
        run.run_started = time.perf_counter()
        run.phase = "running"
        try:
            worker.conn.send_bytes(dumps(self.backend.request(run.job)))
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it died after it was ready
            self._died_before_the_job(exc)

    def check(self, now: float) -> None:
        """Advance what needs no I/O: launches that finished, deadlines, exits."""
        run = self.run
        if run.phase == "launching" and self.launch is not None and self.launch.future.done():
            self.attach()
        if run.phase in ("launching", "starting", "running") and run.deadline is not None and now >= run.deadline:
            self._timed_out()
            return
        if run.phase == "starting" and self.worker is not None and not self.channel_open:
            self._died_while_starting()
            return
        if run.phase == "running" and run.memory_limit is not None and self.final is None:
            worker = self.worker
            assert worker is not None
            growth = run.memory_limit.watch(worker.resident_bytes)
            if growth is not None:
                self._out_of_memory(growth)
                return
        if run.phase == "running" and (self.final is not None or not self.channel_open):
            run.result.run_s = now - run.run_started
            run.phase = "finishing"
            self.finish_deadline = now + (_EXIT_GRACE_S if self.final is not None else CHANNEL_LOST_GRACE_S)
        if run.phase == "finishing":
            assert self.worker is not None
            if self.exited_at is None and self.worker.poll() is not None:
                self.exited_at = now
            if self.exited_at is None and now >= self.finish_deadline:
                self.worker.end_group()
                self.killed_without_result = self.final is None
                self.exited_at = now
            # A grandchild the job started may hold the pipes open: drain briefly, never wait on it.
            if self.exited_at is not None and (not self.streams or now - self.exited_at >= _DRAIN_AFTER_EXIT_S):
                self._conclude()

    def wait_hint(self, now: float) -> float:
        """How long the loop may sleep before this job needs a look without I/O."""
        run = self.run
        hint = 0.25
        if run.phase == "launching":
            hint = 0.005  # a fork answers in milliseconds; the future has no descriptor to select on
        elif run.phase == "finishing":
            hint = 0.01
        elif run.phase == "running" and run.memory_limit is not None:
            hint = WATCH_INTERVAL_S
        if run.deadline is not None:
            hint = min(hint, max(0.0, run.deadline - now))
        return hint

    # --- I/O --------------------------------------------------------------------------------

    def read_stream(self, stream: _Stream) -> None:
        try:
            chunk = os.read(stream.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.selector.unregister(stream.fd)
            del self.streams[stream.fd]
            self.run.output(stream.name, stream.decoder.decode(b"", final=True))
            self.run.sink.output_ended(stream.name)
            return
        self.run.output(stream.name, stream.decoder.decode(chunk))

    def read_channel(self) -> None:
        run, worker = self.run, self.worker
        assert worker is not None
        try:
            data = worker.conn.recv_bytes()
        except (EOFError, OSError):
            self._close_channel()
            return
        try:
            message = JOB_CHANNEL.loads(data)
        except MessageError as exc:
            logger.warning("kerasmagic: isolated job %s sent what its channel does not carry: %s", run.label, exc)
            return
        if message.sender is not None and message.sender != worker.pid:
            return  # a process the job forked shares the channel: only the job's own messages count
        if isinstance(message, Ready):
            if run.phase == "starting":
                self.on_ready(message)
        elif isinstance(message, ImportFailed):
            self.final = message
            self._close_channel()
        elif isinstance(message, Sample):
            record_sample(run.result, message.reading, run.memory_limit)
            run.sink.sample(message.reading)
        elif isinstance(message, Display):
            run.sink.display(message.data, message.metadata or {})
        elif isinstance(message, JobEnded):
            self.final = message
            self._imported(message.imported)
            record_end(run.result, message, run.started_ts, run.memory_limit)

    def _imported(self, modules: list[str]) -> None:
        """The heavy modules the job imported itself: into its report, and taught to the pool,
        which starts a template that has them for the next jobs. At the job's end, not while it
        runs: on two cores a second import beside the job's slowed that job by half (6.5 s vs 4.2 s)
        and saved the next one a second."""
        if not modules:
            return
        known = self.run.result.job_imported
        self.run.result.job_imported = [*known, *(m for m in modules if m not in known)]
        self.backend.pool.learn(list(modules), self.run.spec)

    def _close_channel(self) -> None:
        if self.channel_open and self.worker is not None:
            self.channel_open = False
            try:
                self.selector.unregister(self.worker.conn.fileno())
            except (KeyError, ValueError):
                pass

    # --- endings ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill the job's process group now and drain what it printed (timeouts, Ctrl-C, errors)."""
        if self.worker is not None:
            self.worker.end_group()
            deadline = time.perf_counter() + _DRAIN_AFTER_EXIT_S
            while self.streams and time.perf_counter() < deadline:
                for key, _ in self.selector.select(0.05):
                    process, stream = key.data
                    if process is self and stream is not None:
                        self.read_stream(stream)
        self._unregister()

    def _unregister(self) -> None:
        self._close_channel()
        for fd in list(self.streams):
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        self.streams.clear()

    def interrupt(self) -> None:
        run = self.run
        if run.phase == "over":
            return
        self.stop()
        if run.run_started and not run.result.run_s:
            run.result.run_s = time.perf_counter() - run.run_started
        who = f"the isolated worker (pid {self.worker.pid})" if self.worker is not None else "the isolated worker"
        run.fail(interrupted(run.result, who))

    def _died_while_starting(self) -> None:
        assert self.worker is not None
        run = self.run
        failed = self.final if isinstance(self.final, ImportFailed) else None
        self.stop()
        code = self.worker.poll()
        run.result.exit_code = code
        if failed is not None:
            run.fail(import_failed(run.result, run.spec, failed.error, failed.traceback))
            return
        log = self.worker.import_failure()
        run.fail(import_failed(run.result, run.spec, None, log or f"nothing (exit code {code})"))

    def _died_before_the_job(self, exc: OSError) -> None:
        assert self.worker is not None
        self.stop()  # its descriptors leave the loop before they are closed and reused
        code = _wait_for_exit(self.worker, 2.0)
        record_exit(self.run.result, code, self.run.last_output())
        self.run.fail(died_before_the_job(self.run.result, self.worker.pid, code, exc))

    def _timed_out(self) -> None:
        run = self.run
        starting = run.phase in ("launching", "starting")
        self.stop()
        now = time.perf_counter()
        assert run.timeout is not None
        run.fail(timed_out(run.result, run.timeout, starting=starting, importing=run.spec.preload,
                           elapsed_s=now - (run.started if starting else run.run_started),
                           output=run.last_output()))

    def _out_of_memory(self, growth: int) -> None:
        """The watch saw the job reach its limit: its process group is killed, the kernel lives on."""
        run, limit = self.run, self.run.memory_limit
        assert limit is not None
        self.stop()
        run.result.run_s = time.perf_counter() - run.run_started
        run.result.last_output = run.last_output()
        run.result.child_rss_peak_bytes = max(run.result.child_rss_peak_bytes or 0, limit.last_rss_bytes)
        run.fail(out_of_memory(run.result, limit, growth, by="kerasmagic's watch killed its worker", at_limit=True,
                               pid=self.worker.pid if self.worker is not None else None))

    def _conclude(self) -> None:
        """The process ended: record how, then fail the run or bring its values back."""
        run, worker, result = self.run, self.worker, self.run.result
        assert worker is not None
        self._unregister()
        code = worker.poll()
        if code is None:  # we ended its group a moment ago: its exit status is on its way
            code = _wait_for_exit(worker, 2.0)
        record_exit(result, code, run.last_output())
        final = self.final
        run.phase = "over"
        if not isinstance(final, JobEnded):
            run.fail(crashed(result, worker.pid, code, result.last_output,
                             killed_without_result=self.killed_without_result, memory_limit=run.memory_limit))
            return
        result.run_s = final.run_s if final.run_s is not None else result.run_s
        result.not_returned.update(final.not_returned or {})
        if isinstance(final, Raised) and final.stage == "inputs":
            run.fail(input_not_rebuilt(result, final))
        elif isinstance(final, Raised):
            run.fail(code_raised(result, final))
        elif isinstance(final, Done):
            run.warning = run.sink.values(final)


def _wait_for_exit(worker: JobProcess, within: float) -> int | None:
    deadline = time.perf_counter() + within
    while worker.poll() is None and time.perf_counter() < deadline:
        time.sleep(0.005)
    return worker.poll()

"""The kernel's handles on the processes jobs run in: their channel, their output pipes, their
exit status, and ending them (with everything they started).

A job runs in one of two kinds of process:

- :class:`ForkedWorker`, a child of a template (:mod:`kerasmagic.isolation.template`): its exit
  status comes from the template, its parent;
- :class:`FreshWorker`, a fresh interpreter (``python -m kerasmagic.isolation.child.worker``,
  :func:`spawn_fresh`), when no template may fork: it pays the framework import itself.

Either way the handle has the same surface (:class:`JobProcess`), which is all the job loop
uses: ``pid``, ``conn`` (the job channel), ``stdout_fd``/``stderr_fd``, :meth:`~JobProcess.poll`,
:meth:`~JobProcess.end_group` and :meth:`~JobProcess.kill`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Protocol

from ..probes.availability import Unavailable
from ..probes.process import pid_exists
from . import job_memory
from .job import working_directory
from .job_memory import JobMemoryLimit
from .leftovers import log_file, read_tail
from .lifeline import lifeline_pipe
from .messages import Ready
from .spec import VOLATILE_ENV, WorkerSpec

__all__ = ["ForkedWorker", "FreshWorker", "JobProcess", "process_env", "spawn_fresh", "start_directory"]

logger = logging.getLogger(__name__)

_MPL_BACKEND = "module://kerasmagic.isolation.child.mpl_backend"


def process_env(env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The environment a process of ours starts with: the spec's, plus what makes it ours.

    Example:
        >>> environment = process_env((("HOME", "/root"),))
        >>> environment["PYTHONUNBUFFERED"], environment["MPLBACKEND"].endswith("mpl_backend")
        ('1', True)
    """
    result = {k: v for k, v in os.environ.items() if k in VOLATILE_ENV}
    result.update(env)
    # It imports kerasmagic from wherever this kernel does (an editable checkout too).
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, result.get("PYTHONPATH", "")) if p)
    result["PYTHONUNBUFFERED"] = "1"  # prints must stream, not wait for a full pipe buffer
    result["MPLBACKEND"] = _MPL_BACKEND
    return result


def start_directory() -> str:
    """Where a process of ours starts: the kernel's working directory, or the temporary folder
    when that was deleted under it."""
    return working_directory() or tempfile.gettempdir()


class JobProcess:
    """The kernel's handle on the process running one job: its channel and output pipes."""

    origin = "fresh"

    def __init__(self, spec: WorkerSpec, pid: int, conn: Connection, stdout_fd: int, stderr_fd: int) -> None:
        self.spec = spec
        self.pid = pid
        self.conn = conn
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.started_at = time.monotonic()
        self.ready_info: Ready | None = None
        self._closed = False

    def poll(self) -> int | None:
        """The exit code (negative: the signal) once the process ended, else None."""
        raise NotImplementedError

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def alive(self) -> bool:
        return self.poll() is None

    def import_failure(self) -> str:
        """What a process that died before it was ready printed (the import log's tail)."""
        return ""

    def kill(self) -> None:
        """SIGKILL the job's whole process group (what it started too), wait, close. Idempotent."""
        self.end_group()
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        self.close()

    def end_group(self) -> None:
        """SIGKILL whatever is left in the job's process group (a subprocess the job started)."""
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except OSError:
                pass  # gone already

    def rss_bytes(self) -> int | Unavailable:
        try:
            import psutil

            return psutil.Process(self.pid).memory_info().rss
        except Exception as exc:  # noqa: BLE001 - a process may exit between two lines
            return Unavailable("error", f"reading RSS of pid {self.pid} failed: {exc}")

    def resident_bytes(self) -> int | None:
        """Its RSS read the cheap way (``/proc/<pid>/statm``, about 10 µs), for a memory limit's
        watch; None where it cannot be read."""
        return job_memory._rss_of(self.pid)

    def enter_memory_limit(self, limit: JobMemoryLimit) -> None:
        """Hold ``limit`` for this process from now on (a cgroup of its own where one can be made)."""
        limit.enter(self.pid)

    def close(self) -> None:
        """Close the kernel's ends of the channels (and whatever else the kind holds). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.conn.close()
        except OSError:
            pass
        self._close_rest()

    def _close_rest(self) -> None:
        for fd in (self.stdout_fd, self.stderr_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class FreshWorker(JobProcess):
    """A fresh interpreter (``python -m kerasmagic.isolation.child.worker``): pays the import itself."""

    origin = "fresh"

    def __init__(self, spec: WorkerSpec, process: subprocess.Popen, conn: Connection, watch_write_fd: int,
                 log_path: str) -> None:
        if process.stdout is None or process.stderr is None:
            raise ValueError("a fresh worker is started with stdout and stderr pipes")
        super().__init__(spec, process.pid, conn, process.stdout.fileno(), process.stderr.fileno())
        self.process = process
        self.log_path = log_path
        self._watch_write_fd: int | None = watch_write_fd

    def poll(self) -> int | None:
        """The exit code, read without collecting the process: while it is a zombie its pid
        and process group id cannot be reused, so the last ``killpg`` hits only the job's own."""
        if self.process.returncode is not None:
            return self.process.returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.process.poll()
        if info is None or info.si_pid == 0:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def import_failure(self) -> str:
        return read_tail(self.log_path)

    def _close_rest(self) -> None:
        if self._watch_write_fd is not None:
            os.close(self._watch_write_fd)
            self._watch_write_fd = None
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.warning("isolated worker %s did not exit after SIGKILL", self.pid)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


class ForkParent(Protocol):
    """What a forked job's handle asks of its template's handle (the template is its parent)."""

    state: str

    def exit_code(self, pid: int) -> int | None: ...

    def done_with(self, pid: int) -> None: ...


class ForkedWorker(JobProcess):
    """A child of a template: its exit status comes from the template (its parent)."""

    origin = "forked"

    def __init__(self, spec: WorkerSpec, template: ForkParent, pid: int, conn: Connection, stdout_fd: int,
                 stderr_fd: int) -> None:
        super().__init__(spec, pid, conn, stdout_fd, stderr_fd)
        self.template = template

    def poll(self) -> int | None:
        code = self.template.exit_code(self.pid)
        if code is None and self.template.state == "dead" and not pid_exists(self.pid):
            return -signal.SIGKILL  # the template died first and took its children along
        return code


def spawn_fresh(spec: WorkerSpec, env: dict[str, str] | None = None) -> FreshWorker:
    """Start a fresh interpreter for one job (``python -m kerasmagic.isolation.child.worker``);
    ``env``: variables of the pool's own beside the spec's (its JAX cache folder)."""
    parent_sock, child_sock = socket.socketpair()
    watch_read, watch_write = lifeline_pipe()
    log_path = log_file("worker")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "kerasmagic.isolation.child.worker",
             "--channel-fd", str(child_sock.fileno()), "--watch-fd", str(watch_read),
             "--parent-pid", str(os.getpid()), "--preload", ",".join(spec.preload),
             "--learned", ",".join(spec.learned), "--warmup-log", log_path],
            pass_fds=(child_sock.fileno(), watch_read),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**process_env(spec.env), **(env or {})}, cwd=start_directory(),
            # Its own session: a Ctrl-C in a terminal reaches the kernel, which decides, and
            # the job's process group can be ended as one.
            start_new_session=True,
        )
    except BaseException:
        parent_sock.close()
        os.close(watch_write)
        os.unlink(log_path)
        raise
    finally:
        child_sock.close()
        os.close(watch_read)
    return FreshWorker(spec, process, Connection(parent_sock.detach()), watch_write, log_path)


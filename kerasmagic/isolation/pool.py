"""Where isolated jobs get their process: a fork of a warm template, else a fresh interpreter.

One template per environment (:mod:`kerasmagic.isolation.template`) imports the kernel's
frameworks once and never runs an op; each job is a child forked from it, which costs
milliseconds instead of an import. When the template refuses to fork (its fork-safety check
failed), it is retired and that job runs in a fresh interpreter; the job's report says why.
``size`` is how many jobs may run at once (each is its own process, sharing the template's
pages until it writes to them). The template starts on first use (or
:func:`prestart_pool`), is retired after ``idle_timeout`` seconds without jobs, and goes at
``%unload_ext`` and at interpreter exit; no process of ours outlives the kernel.

Every process is started by one long-lived pool thread: Linux's ``PR_SET_PDEATHSIG`` fires
when the *thread* that forked the child ends, so a short-lived thread would kill them.

Example:
    >>> from kerasmagic.isolation import configure_pool
    >>> configure_pool(size=2, idle_timeout=300)     # two jobs at once; the template goes after 5 idle minutes
"""

from __future__ import annotations

import atexit
import dataclasses
import glob
import itertools
import logging
import math
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from ..probes.availability import Unavailable
from ..probes.process import pid_exists
from .errors import IsolationUsageError
from .messages import (
    CONTROL_CHANNEL,
    Exited,
    Fork,
    Forked,
    ImportFailed,
    Message,
    MessageError,
    Ready,
    Reap,
    Refused,
    Retire,
    dumps,
)
from .template import LATE_ENV, MAX_CONTROL_BYTES, PRELOADABLE

logger = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT_S = 600.0

#: Heavy modules a template imports up front when the kernel has them imported.
_PRELOADABLE = PRELOADABLE
#: ``preload=[...]``: dotted module names.
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MPL_BACKEND = "module://kerasmagic.isolation.child.mpl_backend"
#: Variables that change by themselves (pytest sets one per test) and mean nothing to TF:
#: a template started under another value of these is still the right template.
_VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST", "_", "OLDPWD", "PWD", "COLUMNS", "LINES"})
#: Files of ours named after the kernel that made them, so that a later pool can tell
#: whose kernel is gone (``kerasmagic-isolated-<pid>-…`` folders, ``kerasmagic-worker-<pid>-…`` logs).
_OWNED_NAME = re.compile(r"^kerasmagic-(?:isolated|worker|template|kernel)-(\d+)-")


def default_size() -> int:
    """Jobs that may run at once by default: one per CPU core.

    Example:
        >>> default_size() >= 1
        True
    """
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class WorkerSpec:
    """What a job's process must have: the kernel's frameworks and its whole environment.

    The variables in :data:`~kerasmagic.isolation.template.LATE_ENV` (``CUDA_VISIBLE_DEVICES``,
    allocator settings) are read only when a runtime starts, so the forked child sets them;
    every other variable is read at import time, and a job that changes one needs a
    template of its own.

    ``preload`` must import (the kernel's frameworks, ``preload=[...]``); ``learned`` are what
    earlier jobs imported themselves (:meth:`WorkerPool.learn`), imported where they can be.

    Example:
        >>> spec = WorkerSpec(("numpy",), (("CUDA_VISIBLE_DEVICES", "1"), ("HOME", "/root")))
        >>> spec.template_env(), spec.late_env()
        ((('HOME', '/root'),), {'CUDA_VISIBLE_DEVICES': '1'})
    """

    preload: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    learned: tuple[str, ...] = ()

    def template_env(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in self.env if k not in LATE_ENV)

    def late_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env if k in LATE_ENV}

    def can_run(self, needed: WorkerSpec) -> bool:
        """Same import-time environment: a template that lacks a module lets the job import it."""
        return self.template_env() == needed.template_env()

    def covers(self, needed: WorkerSpec) -> bool:
        """Same import-time environment and every module the job needs (its kernel's, those asked
        for, those learned) is imported."""
        return self.can_run(needed) and set(self.modules()) >= set(needed.modules())

    def modules(self) -> tuple[str, ...]:
        """Everything a template for this spec imports: ``preload``, then ``learned``."""
        return (*self.preload, *(m for m in self.learned if m not in self.preload))


def detect_preload() -> tuple[str, ...]:
    """The heavy modules this kernel has imported (the template imports the same ones).

    Example:
        >>> detect_preload()     # in a kernel that ran `import keras`           # doctest: +SKIP
        ('numpy', 'tensorflow', 'keras')
    """
    modules = [name for name in _PRELOADABLE if name in sys.modules]
    keras = sys.modules.get("keras")
    backend = _keras_backend(keras) if keras is not None else None
    if backend in ("jax", "torch", "tensorflow") and backend not in modules:
        modules.insert(modules.index("keras"), backend)  # keras imports its backend; do it first
    return tuple(modules)


def _keras_backend(keras: Any) -> str | None:
    try:
        return str(keras.config.backend())
    except Exception:  # noqa: BLE001 - a half-imported or legacy keras has no config.backend()
        return None


def check_preload(preload: Any) -> tuple[str, ...]:
    """``preload=[...]``: module names a template must import before it forks (empty: None).

    Example:
        >>> check_preload(["keras", "sklearn.ensemble"])
        ('keras', 'sklearn.ensemble')
        >>> check_preload("keras")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: preload takes a list of module names, e.g.
        preload=['keras']; got 'keras'
    """
    if preload is None:
        return ()
    if isinstance(preload, str) or not isinstance(preload, (list, tuple)):
        raise IsolationUsageError(f"preload takes a list of module names, e.g. preload=['keras']; got {preload!r}")
    for name in preload:
        if not isinstance(name, str) or not _MODULE_NAME.match(name):
            raise IsolationUsageError(f"preload takes module names as `import` takes them (e.g. 'keras', "
                                      f"'sklearn.ensemble'); {name!r} is not a module name")
    return tuple(dict.fromkeys(preload))


def worker_spec(gpu: str | None = None, env: dict[str, str] | None = None,
                preload: tuple[str, ...] = ()) -> WorkerSpec:
    """The spec a job needs now: this kernel's environment, its frameworks (and ``preload``, already
    checked by :func:`check_preload`), plus overrides.

    Example:
        >>> worker_spec(gpu="1", env={"TF_GPU_ALLOCATOR": "cuda_malloc_async"}).late_env()["CUDA_VISIBLE_DEVICES"]
        '1'
    """
    environment = dict(os.environ)
    keras = sys.modules.get("keras")
    backend = _keras_backend(keras) if keras is not None else None
    if backend:
        environment["KERAS_BACKEND"] = backend  # set_backend() in the kernel must hold in the worker
    environment.update(env or {})
    if gpu is not None:
        environment["CUDA_VISIBLE_DEVICES"] = str(gpu)
    stable = {k: v for k, v in environment.items() if k not in _VOLATILE_ENV}
    return WorkerSpec(tuple(dict.fromkeys((*detect_preload(), *preload))), tuple(sorted(stable.items())))


def _process_env(env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The environment a process of ours starts with: the spec's, plus what makes it ours."""
    result = {k: v for k, v in os.environ.items() if k in _VOLATILE_ENV}
    result.update(env)
    # It imports kerasmagic from wherever this kernel does (an editable checkout too).
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, result.get("PYTHONPATH", "")) if p)
    result["PYTHONUNBUFFERED"] = "1"  # prints must stream, not wait for a full pipe buffer
    result["MPLBACKEND"] = _MPL_BACKEND
    return result


def _safe_cwd() -> str:
    """The kernel's working directory, or the temp folder when it was deleted under us."""
    try:
        return os.getcwd()
    except OSError:
        return tempfile.gettempdir()


def _log_file(kind: str) -> str:
    fd, path = tempfile.mkstemp(prefix=f"kerasmagic-{kind}-{os.getpid()}-", suffix=".log")
    os.close(fd)
    return path


def _read_tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


_owner_locks: list[int] = []


def _owner_lock_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"kerasmagic-kernel-{pid}-owner.lock")


def _our_folders() -> list[str]:
    return [tempfile.gettempdir()] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])


def hold_owner_lock() -> None:
    """Hold, for this process's life, a lock saying "this kernel's files are in use".

    A pid alone cannot tell: a kernel in another container that shares ``/dev/shm`` has a
    pid that does not exist here. The lock (``flock``) is released by the OS when the kernel
    dies, however it dies.
    """
    if _owner_locks:
        return
    import fcntl

    for folder in _our_folders():
        try:
            fd = os.open(_owner_lock_path(folder, os.getpid()), os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue
        _owner_locks.append(fd)


def _release_owner_locks() -> None:
    """At a clean exit: the lock files go with the kernel (a killed kernel's go with its template)."""
    while _owner_locks:
        os.close(_owner_locks.pop())
    for folder in _our_folders():
        try:
            os.unlink(_owner_lock_path(folder, os.getpid()))
        except OSError:
            pass


atexit.register(_release_owner_locks)


def release_owner_locks() -> None:
    """Give up this process's claim on its isolation files now (a Ray node agent that is told
    to end; a kernel does it at exit)."""
    _release_owner_locks()


def _owner_gone(folder: str, pid: int) -> bool:
    import fcntl

    path = _owner_lock_path(folder, pid)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return not pid_exists(pid)  # no lock: a kernel of an older version; trust the pid
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # held: that kernel is alive, wherever its pid lives
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def sweep_orphans() -> list[str]:
    """Remove job folders and logs left by kernels that no longer exist (killed, OOM-killed).

    Example:
        >>> sweep_orphans()      # nothing of a dead kernel's is left lying around
        []
    """
    removed = []
    for folder in _our_folders():
        gone: dict[int, bool] = {}
        locks = []
        for path in glob.glob(os.path.join(folder, "kerasmagic-*")):
            match = _OWNED_NAME.match(os.path.basename(path))
            if match is None:
                continue
            pid = int(match.group(1))
            if pid not in gone:
                gone[pid] = pid != os.getpid() and _owner_gone(folder, pid)
            if not gone[pid]:
                continue
            if path.endswith("-owner.lock"):
                locks.append(path)  # last: it says whose the other files are
                continue
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    continue
            removed.append(path)
        for path in locks:
            try:
                os.unlink(path)
            except OSError:
                pass
    return removed


class TemplateFailed(Exception):
    """The template died while importing; ``error`` is the Python exception, when it said one."""

    def __init__(self, message: str, error: str | None = None, log: str = "") -> None:
        super().__init__(message)
        self.error = error
        self.log = log


class ForkRefused(Exception):
    """The template would not fork (a fork-safety check failed); ``reason`` says which."""

    def __init__(self, reason: str, retire: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retire = retire  # False: this fork failed (fork() itself), the template stays


# --- the processes a job runs in -------------------------------------------------------


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
        assert process.stdout is not None and process.stderr is not None
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
        return _read_tail(self.log_path)

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


class ForkedWorker(JobProcess):
    """A child of a template: its exit status comes from the template (its parent)."""

    origin = "forked"

    def __init__(self, spec: WorkerSpec, template: Template, pid: int, conn: Connection, stdout_fd: int,
                 stderr_fd: int) -> None:
        super().__init__(spec, pid, conn, stdout_fd, stderr_fd)
        self.template = template

    def poll(self) -> int | None:
        code = self.template.exit_code(self.pid)
        if code is None and self.template.state == "dead" and not pid_exists(self.pid):
            return -signal.SIGKILL  # the template died first and took its children along
        return code


def _spawn_fresh(spec: WorkerSpec) -> FreshWorker:
    parent_sock, child_sock = socket.socketpair()
    watch_read, watch_write = os.pipe()
    log_path = _log_file("worker")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "kerasmagic.isolation.child.worker",
             "--channel-fd", str(child_sock.fileno()), "--watch-fd", str(watch_read),
             "--parent-pid", str(os.getpid()), "--preload", ",".join(spec.preload),
             "--learned", ",".join(spec.learned), "--warmup-log", log_path],
            pass_fds=(child_sock.fileno(), watch_read),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=_process_env(spec.env), cwd=_safe_cwd(),
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


# --- the template, seen from the kernel ------------------------------------------------


class Template:
    """A template process for one import-time environment, and the thread reading its news."""

    _job_ids = itertools.count(1)

    def __init__(self, spec: WorkerSpec, on_end: Callable[[Template], None]) -> None:
        self.spec = spec
        self.state = "starting"  # -> "ready" -> "retired" | "failed" | "dead"
        self.ready: Future = Future()
        self.ready_info: Ready | None = None
        self.pid: int | None = None
        self.process: subprocess.Popen | None = None
        self.last_used = time.monotonic()
        self.log_path = ""
        self._on_end = on_end
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[Future, socket.socket, int, int]] = {}
        self._exits: dict[int, int] = {}
        self._children: set[int] = set()
        self._control: socket.socket | None = None
        self._watch_write: int | None = None
        self._close_lock = threading.Lock()
        self._killed = False
        self.waiting: set[int] = set()  # ids of launches waiting for this template's imports

    def start(self) -> None:
        """Start the process (on the pool thread). Raises OSError when it cannot be started."""
        if self._killed:
            raise RuntimeError("the template was stopped before it started")
        # Not only when the pool is made: a kernel that died while this one ran (killed while
        # its template imported, or a zombie its server had not reaped yet when this pool was
        # made) left files that nothing else will remove (issue 23, fault 5).
        sweep_orphans()
        control, child_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        watch_read, watch_write = os.pipe()
        self.log_path = _log_file("template")
        env = _process_env(self.spec.template_env())
        # Keras' torch backend asks torch.cuda.is_available() at import, which initialises
        # the CUDA driver, and no child of a process with a live driver can use CUDA. Asked
        # through NVML instead, the answer is the same and the driver stays untouched.
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    # -c, not -m: runpy would run a second copy of the module the package
                    # already imported (and warn into the log), two frames deeper.
                    [sys.executable, "-c", "from kerasmagic.isolation.template import main; main()",
                     "--control-fd", str(child_control.fileno()), "--watch-fd", str(watch_read),
                     "--parent-pid", str(os.getpid()), "--preload", ",".join(self.spec.preload),
                     "--learned", ",".join(self.spec.learned),
                     "--log", self.log_path],
                    pass_fds=(child_control.fileno(), watch_read),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=env, cwd=_safe_cwd(), start_new_session=True,
                )
        except BaseException:
            control.close()
            os.close(watch_write)
            os.unlink(self.log_path)
            raise
        finally:
            child_control.close()
            os.close(watch_read)
        self.pid = self.process.pid
        self._control = control
        self._watch_write = watch_write
        threading.Thread(target=self._read, name=f"kerasmagic-isolation-template-{self.pid}", daemon=True).start()

    def _read(self) -> None:
        assert self._control is not None
        while True:
            try:
                data = self._control.recv(MAX_CONTROL_BYTES)
            except OSError:
                data = b""
            if not data:
                break
            try:
                self._handle(CONTROL_CHANNEL.loads(data))
            except Exception:  # one bad message must not stop the reader
                logger.exception("kerasmagic: bad message from isolation template %s", self.pid)
        self._ended()

    def _handle(self, message: Message) -> None:
        if isinstance(message, Ready):
            self.ready_info = message
            self.state = "ready"
            self.ready.set_result(self)
        elif isinstance(message, ImportFailed):
            self.state = "failed"
            self.ready.set_exception(TemplateFailed(message.error, message.error, message.traceback))
        elif isinstance(message, (Forked, Refused)):
            with self._lock:
                future, parent_channel, out_read, err_read = self._pending.pop(message.job_id)
            if isinstance(message, Refused):
                retire = message.retire
                if retire and self.state == "ready":
                    self.state = "retired"
                for fd in (out_read, err_read):
                    os.close(fd)
                parent_channel.close()
                if future.set_running_or_notify_cancel():
                    future.set_exception(ForkRefused(message.reason, retire))
                return
            pid = message.pid
            with self._lock:
                self._children.add(pid)
            worker = ForkedWorker(self.spec, self, pid, Connection(parent_channel.detach()), out_read, err_read)
            if not future.set_running_or_notify_cancel():
                # Nobody waits for it any more (timed out, interrupted). Signal only: waiting
                # for its exit here would wait for this very thread to read the news.
                worker.end_group()
                threading.Thread(target=self._collect, args=(worker,), daemon=True,
                                 name=f"kerasmagic-isolation-collect-{pid}").start()
                return
            future.set_result(worker)
        elif isinstance(message, Exited):
            with self._lock:
                self._exits[message.pid] = message.returncode  # type: ignore[assignment]
                self._children.discard(message.pid)
            self.last_used = time.monotonic()
        else:
            raise MessageError(f"a template sends ready, failed, forked, refused and exited, not {message.kind!r}")

    def _ended(self) -> None:
        """The template process is gone (or we closed it): fail whoever still waits."""
        if self.state != "failed":
            self.state = "dead"
        if not self.ready.done():
            code = self.process.wait() if self.process is not None else None
            self.ready.set_exception(TemplateFailed(
                f"the template process exited with code {code} while importing", None, _read_tail(self.log_path)))
        with self._lock:
            pending, self._pending = self._pending, {}
        for future, channel, out_read, err_read in pending.values():
            channel.close()
            for fd in (out_read, err_read):
                os.close(fd)
            if future.set_running_or_notify_cancel():
                future.set_exception(ForkRefused("the template process ended"))
        self._on_end(self)

    def _collect(self, worker: ForkedWorker) -> None:
        worker.kill()
        self.done_with(worker.pid)

    def fork(self, spec: WorkerSpec, directory: str) -> Future:
        """Ask for a child for one job; the future gives a :class:`ForkedWorker` or ForkRefused."""
        future: Future = Future()
        made: list[Any] = []
        try:
            parent_channel, child_channel = socket.socketpair()
            made += [parent_channel, child_channel]
            out_read, out_write = os.pipe()
            made += [out_read, out_write]
            err_read, err_write = os.pipe()
        except OSError as exc:  # EMFILE: out of file descriptors
            for item in made:
                item.close() if isinstance(item, socket.socket) else os.close(item)
            future.set_exception(ForkRefused(f"no file descriptors left for the job's channels ({exc}); "
                                             "raise `ulimit -n`", retire=False))
            return future
        job_id = next(self._job_ids)
        request = Fork(job_id=job_id, env=spec.late_env(), directory=directory)
        with self._lock:
            self._pending[job_id] = (future, parent_channel, out_read, err_read)
        self.last_used = time.monotonic()
        try:
            if self._control is None or self.state != "ready":
                raise OSError("the template is not running")
            socket.send_fds(self._control, [dumps(request)],
                            [child_channel.fileno(), out_write, err_write])
        except OSError as exc:
            with self._lock:
                entry = self._pending.pop(job_id, None)
            if entry is not None:
                parent_channel.close()
                os.close(out_read)
                os.close(err_read)
                future.set_exception(ForkRefused(f"the template could not be reached ({exc})"))
        finally:
            child_channel.close()
            os.close(out_write)
            os.close(err_write)
        return future

    def exit_code(self, pid: int) -> int | None:
        with self._lock:
            return self._exits.get(pid)

    def done_with(self, pid: int) -> None:
        """The kernel has ended the job's group: the template may collect the zombie now."""
        with self._lock:
            self._exits.pop(pid, None)
        if self._control is not None:
            try:
                self._control.send(dumps(Reap(pid=pid)))
            except OSError:
                pass  # the template is gone, and its zombies with it

    def busy(self) -> bool:
        with self._lock:
            return bool(self._children or self._pending)

    def retire(self) -> None:
        """Take no more jobs; the process exits once its running children have ended."""
        if self.state in ("starting", "ready"):
            self.state = "retired"
        if self._control is not None:
            try:
                self._control.send(dumps(Retire()))
            except OSError:
                pass

    def kill(self) -> None:
        """End the template and every child it still has, now. Safe to call twice."""
        self._killed = True  # a start() still queued on the pool thread will not happen
        with self._lock:
            children = list(self._children)
        for pid in children:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.kill()
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.warning("isolation template %s did not exit after SIGKILL", self.pid)
        with self._close_lock:
            self._close_channels()

    def _close_channels(self) -> None:
        if self._control is not None:
            try:
                self._control.shutdown(socket.SHUT_RDWR)  # wakes the reader thread, which then ends
            except OSError:
                pass
            self._control.close()
        if self._watch_write is not None:
            os.close(self._watch_write)
            self._watch_write = None
        if self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass

    def rss_bytes(self) -> int | Unavailable:
        try:
            import psutil

            return psutil.Process(self.pid).memory_info().rss
        except Exception as exc:  # noqa: BLE001 - it may exit between two lines
            return Unavailable("error", f"reading the template's RSS failed: {exc}")


# --- the pool --------------------------------------------------------------------------


@dataclass
class Launch:
    """A job's process on its way: ``future`` gives a :class:`JobProcess`.

    ``state`` says how it came: ``"warm"`` (forked from a ready template), ``"starting"``
    (forked once the template finished importing), ``"cold"`` (the template was started for
    this job) or ``"fresh"`` (a fresh interpreter; ``note`` says why).
    """

    future: Future = field(default_factory=Future)
    state: str = "warm"
    note: str = ""
    template_pid: int | None = None
    template_threads: list[str] = field(default_factory=list)
    template: Template | None = None

    def log_tail(self) -> str:
        """The template's import log so far (what a slow or failing start printed)."""
        return _read_tail(self.template.log_path) if self.template is not None and self.template.log_path else ""



def _fail_launch(launch: Launch, error: BaseException) -> None:
    if launch.future.cancelled():
        return
    try:
        launch.future.set_exception(error)
    except InvalidStateError:
        pass  # cancelled or answered meanwhile


def _guarded(launch: Launch, callback: Callable[[Future], None]) -> Callable[[Future], None]:
    """A Future callback that cannot leave ``launch`` waiting forever: concurrent.futures
    logs and swallows a callback's exception, and the job would wait for nothing."""
    def run(future: Future) -> None:
        try:
            callback(future)
        except BaseException as exc:  # handed to the waiting job instead
            logger.exception("kerasmagic: launching an isolated job failed")
            if not launch.future.done():
                _fail_launch(launch, exc)

    return run


class WorkerPool:
    """Templates per environment, the jobs' processes, and the limit on jobs at once.

    Example:
        >>> pool = WorkerPool(size=1)
        >>> pool.prestart(); pool.wait_until_warm(timeout=60)       # doctest: +SKIP
        True
        >>> pool.shutdown()
    """

    def __init__(self, size: int | None = None, idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
                 fork: bool = True, learn: bool = True) -> None:
        self.size = size if size is not None else default_size()
        self.idle_timeout = idle_timeout
        self.fork = fork
        self.learning = learn
        self._learned: list[str] = []  # heavy modules jobs imported themselves, in PRELOADABLE order
        self._lock = threading.Lock()
        self._templates: list[Template] = []
        self._ending: list[Template] = []  # retired, waiting for their children
        self._running: set[JobProcess] = set()
        self._tasks: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False
        hold_owner_lock()
        sweep_orphans()

    def configure(self, *, size: int | None = None, idle_timeout: float | None = None,
                  fork: bool | None = None, learn: bool | None = None) -> None:
        """Change the limit on jobs at once, the templates' idle timeout or forking (None: keep).

        Running jobs and templates carry on; what changed applies to the next launch and
        the next idle check.

        Example:
            >>> pool = WorkerPool(size=1)
            >>> pool.configure(size=3, idle_timeout=60.0)
            >>> pool.size, pool.idle_timeout, pool.fork
            (3, 60.0, True)
            >>> pool.shutdown()
        """
        with self._lock:
            if size is not None:
                self.size = size
            if idle_timeout is not None:
                self.idle_timeout = idle_timeout
            if fork is not None:
                self.fork = fork
            if learn is not None:
                self.learning = learn
                if not learn:
                    self._learned = []

    # --- what jobs teach it ---------------------------------------------------------------

    def learn(self, modules: list[str], spec: WorkerSpec) -> list[str]:
        """A job (run for ``spec``) imported ``modules`` itself: the next templates import the heavy
        ones first, and one is started now, while that job still runs. Returns what was new.

        Only :data:`~kerasmagic.isolation.template.PRELOADABLE` modules are learned, and a
        template imports them where it can (a failure is the job's to meet, never the template's).
        ``configure_pool(learn=False)`` turns it off.
        """
        with self._lock:
            if not self.learning:
                return []
            known = set(self._learned) | set(spec.preload)
            new = [m for m in modules if m in PRELOADABLE and m not in known]
            if not new:
                return []
            self._learned = [m for m in PRELOADABLE if m in self._learned or m in new]
        logger.info("kerasmagic: isolated jobs imported %s themselves; the next templates import them first",
                    ", ".join(new))
        if self.fork:
            self.prestart(spec)
        return new

    def with_learned(self, spec: WorkerSpec) -> WorkerSpec:
        """``spec`` with what this pool has learned (:meth:`learn`) as its ``learned`` modules."""
        with self._lock:
            learned = tuple(m for m in (*spec.learned, *self._learned) if m not in spec.preload)
        return dataclasses.replace(spec, learned=tuple(dict.fromkeys(learned)))

    # --- the pool thread: every process is started here --------------------------------

    def _on_pool_thread(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="kerasmagic-isolation-pool", daemon=True)
                self._thread.start()
            self._tasks.put(task)

    def _serve(self) -> None:
        while True:
            try:
                task = self._tasks.get(timeout=1.0)
            except queue.Empty:
                task = None
            if task is False:
                return
            if task is not None:
                task()
            if self._retire_idle_templates():
                return

    def _retire_idle_templates(self) -> bool:
        """Kill templates idle for ``idle_timeout``; True when nothing is left to serve."""
        now = time.monotonic()
        with self._lock:
            idle = [t for t in self._templates if t.state == "ready" and not t.busy()
                    and now - t.last_used >= self.idle_timeout]
            for template in idle:
                template.state = "retired"  # no launch picks it from here on
        for template in idle:
            template.kill()  # killed first, then forgotten: pids() never lists a dead one as gone
            with self._lock:
                if template in self._templates:
                    self._templates.remove(template)
        with self._lock:
            if self._templates or self._ending or self._running or not self._tasks.empty():
                return False
            self._thread = None
            return True

    def _template_ended(self, template: Template) -> None:
        with self._lock:
            for group in (self._templates, self._ending):
                if template in group:
                    group.remove(template)
        if template.process is not None:
            template.close()

    # --- what jobs use --------------------------------------------------------------------

    def _template_for(self, spec: WorkerSpec) -> tuple[Template, str]:
        """The template for ``spec``, started if there is none: and how warm it is."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the isolation pool was shut down")
            usable = [t for t in self._templates if t.spec.covers(spec) and t.state in ("starting", "ready")]
            usable.sort(key=lambda t: t.state != "ready")
            if usable:
                template = usable[0]
                return template, ("warm" if template.state == "ready" else "starting")
            # The newest spec wins: a template for another environment, or one started before
            # the kernel imported another framework, is retired once its jobs end.
            stale = [t for t in self._templates if t.spec.can_run(spec) or not t.busy()]
            for old in stale:
                self._templates.remove(old)
                self._ending.append(old)
            template = Template(spec, self._template_ended)
            self._templates.append(template)
        for old in stale:
            old.retire()
            if old.state == "starting" or not old.busy():
                old.kill()

        def start() -> None:
            try:
                template.start()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
                with self._lock:
                    if template in self._templates:
                        self._templates.remove(template)
                template.state = "failed"
                template.ready.set_exception(exc)
            if self._closed:
                template.kill()

        self._on_pool_thread(start)
        return template, "cold"

    def launch(self, spec: WorkerSpec, directory: str) -> Launch:
        """Start getting a process for one job (never blocks): see :class:`Launch`.

        The process imports what ``spec`` asks and what earlier jobs taught the pool (:meth:`learn`).
        """
        spec = self.with_learned(spec)
        launch = Launch()
        if not self.fork:
            launch.state, launch.note = "fresh", "forking is off (configure_pool(fork=True) turns it on)"
            self._launch_fresh(spec, launch)
            return launch
        template, launch.state = self._template_for(spec)
        launch.template_pid = template.pid
        launch.template = template
        with self._lock:
            template.waiting.add(id(launch))

        def forked(future: Future) -> None:
            error = future.exception()
            if error is None:
                self._adopt(future.result(), launch)
            elif launch.future.cancelled():
                return  # nobody waits: no fresh interpreter for nobody
            elif isinstance(error, ForkRefused):
                why = "the template may not fork" if error.retire else "this fork failed"
                launch.state, launch.note = "fresh", f"{why}: {error.reason}"
                if error.retire:
                    logger.info("kerasmagic: isolation template %s retired: %s", template.pid, error.reason)
                    with self._lock:
                        if template in self._templates:
                            self._templates.remove(template)
                            self._ending.append(template)
                    template.retire()
                self._launch_fresh(spec, launch)
            else:
                _fail_launch(launch, error)

        def ready(future: Future) -> None:
            with self._lock:
                template.waiting.discard(id(launch))
            launch.template_pid = template.pid
            error = future.exception()
            if error is not None:
                _fail_launch(launch, error)
                return
            launch.template_threads = list(template.ready_info.threads if template.ready_info is not None else [])
            if launch.future.cancelled():
                return
            template.fork(spec, directory).add_done_callback(_guarded(launch, forked))

        template.ready.add_done_callback(_guarded(launch, ready))
        return launch

    def _launch_fresh(self, spec: WorkerSpec, launch: Launch) -> None:
        def start() -> None:
            try:
                worker = _spawn_fresh(spec)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting job
                _fail_launch(launch, exc)
                return
            self._adopt(worker, launch)

        self._on_pool_thread(start)

    def _adopt(self, worker: JobProcess, launch: Launch) -> None:
        with self._lock:
            closed = self._closed
            self._running.add(worker)
        if closed or not launch.future.set_running_or_notify_cancel():
            self._release_elsewhere(worker)
            return
        launch.future.set_result(worker)

    def _release_elsewhere(self, worker: JobProcess) -> None:
        """Release from another thread: this may be a template's reader thread, and releasing
        a forked child waits for the exit status that very thread delivers."""
        worker.end_group()
        threading.Thread(target=self.release, args=(worker,), daemon=True,
                         name=f"kerasmagic-isolation-release-{worker.pid}").start()

    def abandon(self, launch: Launch) -> None:
        """Nobody wants this launch's process any more (timeout, Ctrl-C, another job failed).

        A process that arrives later is released at once; a template still importing is
        stopped (a start that outlasted a job's timeout is hung or far too slow to wait for).
        """
        if not launch.future.cancel():
            def release_when_started(future: Future) -> None:
                if not future.cancelled() and future.exception() is None:
                    self._release_elsewhere(future.result())

            launch.future.add_done_callback(release_when_started)
        template = launch.template
        if template is None:
            return
        with self._lock:
            template.waiting.discard(id(launch))
            stop = template.state == "starting" and not template.waiting  # nobody else waits for it
            if stop and template in self._templates:
                self._templates.remove(template)
        if stop:
            template.kill()

    def release(self, worker: JobProcess) -> None:
        """A job is over: its process group must be gone (it exits by itself; we make sure)."""
        worker.kill()
        with self._lock:
            self._running.discard(worker)
        if isinstance(worker, ForkedWorker):
            worker.template.done_with(worker.pid)

    def running(self) -> int:
        """How many jobs have a process now."""
        with self._lock:
            return len(self._running)

    def prestart(self, spec: WorkerSpec | None = None) -> None:
        """Start the template now (e.g. before a CV loop) instead of on the first job."""
        if self.fork:
            self._template_for(self.with_learned(spec or worker_spec()))

    def wait_until_warm(self, spec: WorkerSpec | None = None, timeout: float = 120.0) -> bool:
        """Block until the template for ``spec`` has imported everything; False on timeout or failure."""
        spec = self.with_learned(spec or worker_spec())
        with self._lock:
            usable = [t for t in self._templates if t.spec.covers(spec) and t.state in ("starting", "ready")]
        if not usable:
            return False
        try:
            usable[0].ready.result(timeout=timeout)
        except Exception:  # noqa: BLE001 - a timeout or a failed import both mean "not warm"
            return False
        return True

    def idle_cost(self) -> tuple[int, int | Unavailable]:
        """How many templates wait, and their RSS together (what the pool costs the machine)."""
        with self._lock:
            templates = [t for t in self._templates if t.state == "ready"]
        total = 0
        for template in templates:
            rss = template.rss_bytes()
            if isinstance(rss, Unavailable):
                return len(templates), rss
            total += rss
        return len(templates), total

    def pids(self) -> list[int]:
        """PIDs of every process the pool knows: templates and the jobs' processes."""
        with self._lock:
            templates = [t.pid for t in (*self._templates, *self._ending) if t.pid is not None]
            return templates + [w.pid for w in self._running]

    def template_states(self) -> list[dict[str, Any]]:
        """Each template that takes jobs: pid, state and what it imported (for reports).

        Example:
            >>> WorkerPool(size=1).template_states()
            []
        """
        with self._lock:
            return [{"pid": t.pid, "state": t.state, "preload": list(t.spec.preload), "learned": list(t.spec.learned)}
                    for t in self._templates]

    def template_pids(self) -> list[int]:
        """PIDs of the templates that take jobs now."""
        with self._lock:
            return [t.pid for t in self._templates if t.pid is not None and t.state == "ready"]

    def shutdown(self) -> None:
        """Kill every template and job process and stop the pool thread. Safe to call twice."""
        with self._lock:
            self._closed = True
            templates = [*self._templates, *self._ending]
            running = list(self._running)
            self._templates, self._ending, self._running = [], [], set()
            thread, self._thread = self._thread, None
        for worker in running:
            worker.kill()
        for template in templates:
            template.kill()
        if thread is not None and thread.is_alive():
            self._tasks.put(False)
            if thread is not threading.current_thread():
                thread.join(timeout=10)


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()
_settings: dict[str, Any] = {"size": None, "idle_timeout": DEFAULT_IDLE_TIMEOUT_S, "fork": True, "learn": True}


def default_pool() -> WorkerPool:
    """The process's pool, created on first use with the :func:`configure_pool` settings."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = WorkerPool(**_settings)
        return _default_pool


def configure_pool(size: int | None = None, idle_timeout: float | None = None, fork: bool | None = None,
                   learn: bool | None = None) -> None:
    """Set how many isolated jobs may run at once, the template's idle timeout, forking and learning.

    ``size`` defaults to the number of CPU cores. ``fork=False`` runs every job in a fresh
    interpreter (each pays the framework import): the escape hatch should a framework ever
    misbehave in a forked child. ``learn=False`` stops templates from importing first what
    earlier jobs imported themselves (and forgets what they taught).

    Example:
        >>> configure_pool(size=2, idle_timeout=120)
    """
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise IsolationUsageError(f"size is how many isolated jobs may run at once: an integer >= 1, got {size!r}")
    if idle_timeout is not None and (isinstance(idle_timeout, bool) or not isinstance(idle_timeout, (int, float))
                                     or not math.isfinite(idle_timeout) or idle_timeout <= 0):
        raise IsolationUsageError(
            f"idle_timeout is a number of seconds > 0 (e.g. idle_timeout=600), got {idle_timeout!r}")
    if fork is not None and not isinstance(fork, bool):
        raise IsolationUsageError(f"fork takes True or False, got {fork!r}")
    if learn is not None and not isinstance(learn, bool):
        raise IsolationUsageError(f"learn takes True or False, got {learn!r}")
    with _default_lock:
        if size is not None:
            _settings["size"] = size
        if idle_timeout is not None:
            _settings["idle_timeout"] = float(idle_timeout)
        if fork is not None:
            _settings["fork"] = fork
        if learn is not None:
            _settings["learn"] = learn
        if _default_pool is not None:
            _default_pool.configure(size=_settings["size"] if _settings["size"] is not None else default_size(),
                                    idle_timeout=_settings["idle_timeout"], fork=_settings["fork"],
                                    learn=learn)


def prestart_pool(gpu: str | None = None, env: dict[str, str] | None = None, preload: Any = None) -> None:
    """Start the template now, so that the first isolated job is a fork of a warm one.

    Call it after importing your frameworks and before the loop: the template imports them
    while your other cells run. ``preload=["keras"]`` has it import modules this process has
    not imported (a script whose jobs import Keras themselves).

    Example:
        >>> import keras                                        # doctest: +SKIP
        >>> prestart_pool()                                     # doctest: +SKIP
        >>> scores = isolated_map(fold, range(5)).values        # doctest: +SKIP
    """
    default_pool().prestart(worker_spec(gpu=gpu, env=env, preload=check_preload(preload)))


def shutdown_default_pool() -> None:
    """Kill the default pool's processes (``%unload_ext kerasmagic`` and interpreter exit call this).

    Example:
        >>> shutdown_default_pool()     # the next isolated job starts a new pool
    """
    global _default_pool
    with _default_lock:
        pool, _default_pool = _default_pool, None
    if pool is not None:
        pool.shutdown()


atexit.register(shutdown_default_pool)

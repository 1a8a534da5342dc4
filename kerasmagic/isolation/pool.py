"""A small pool of warm workers: fresh interpreters that have imported the kernel's frameworks.

One job per worker; the worker exits when its job ends. When a job takes a worker, a
replacement is started in the background (after the job's own worker is ready, so that the
two imports do not compete), so the next job finds a warm one. An idle TensorFlow worker
holds about 0.5 GB, hence: the pool starts on first use, holds ``size`` idle workers
(default 1), and stops after ``idle_timeout`` seconds without jobs, at ``%unload_ext`` and
at interpreter exit.

Every worker is started by one long-lived pool thread: Linux's ``PR_SET_PDEATHSIG`` fires
when the *thread* that forked the child ends, so a short-lived thread would kill its workers.

Example:
    >>> from kerasmagic.isolation import configure_pool
    >>> configure_pool(size=2, idle_timeout=300)     # two warm workers, gone after 5 idle minutes
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..probes.availability import Unavailable

DEFAULT_SIZE = 1
DEFAULT_IDLE_TIMEOUT_S = 600.0

#: Heavy modules a worker imports up front when the kernel has them imported.
_PRELOADABLE = ("numpy", "pandas", "tensorflow", "tf_keras", "keras", "jax", "torch", "matplotlib.pyplot", "sklearn")
_MPL_BACKEND = "module://kerasmagic.isolation.mpl_backend"
#: Variables that change by themselves (pytest sets one per test) and mean nothing to TF:
#: a worker started under another value of these is still the right worker.
_VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST", "_", "OLDPWD", "PWD", "COLUMNS", "LINES"})


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker must have been started with: its modules and its whole environment.

    Two specs are equal only if the environments are equal: a worker started before
    ``--env TF_GPU_ALLOCATOR=...`` or ``--gpu 1`` cannot take that job (TF reads them once).
    """

    preload: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    def can_run(self, needed: "WorkerSpec") -> bool:
        """Same environment: a worker that lacks a module imports it during the job."""
        return self.env == needed.env

    def covers(self, needed: "WorkerSpec") -> bool:
        """Same environment and every module the job's kernel has is already imported."""
        return self.env == needed.env and set(self.preload) >= set(needed.preload)


def detect_preload() -> tuple[str, ...]:
    """The heavy modules this kernel has imported (the worker imports the same ones).

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


def worker_spec(gpu: str | None = None, env: dict[str, str] | None = None) -> WorkerSpec:
    """The spec a job needs now: this kernel's environment, its frameworks, plus overrides.

    Example:
        >>> worker_spec(gpu="1", env={"TF_GPU_ALLOCATOR": "cuda_malloc_async"}).env  # doctest: +SKIP
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
    return WorkerSpec(detect_preload(), tuple(sorted(stable.items())))


class Worker:
    """One worker process and the kernel's ends of its channels."""

    def __init__(self, spec: WorkerSpec, process, conn: Connection, watch_write_fd: int, log_path: str) -> None:
        self.spec = spec
        self.process = process
        self.conn = conn
        self.pid = process.pid
        self.log_path = log_path
        self.started_at = time.monotonic()
        self.ready_info: dict[str, Any] | None = None
        self._watch_write_fd: int | None = watch_write_fd

    @property
    def ready(self) -> bool:
        """True once the worker has imported everything (reads its message if it is there)."""
        if self.ready_info is None and self.process.poll() is None:
            try:
                if self.conn.poll(0):
                    self.ready_info = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                return False
        return self.ready_info is not None

    def alive(self) -> bool:
        return self.process.poll() is None

    def warmup_log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""

    def rss_bytes(self) -> int | Unavailable:
        try:
            import psutil

            return psutil.Process(self.pid).memory_info().rss
        except Exception as exc:  # noqa: BLE001 - a worker may exit between two lines
            return Unavailable("error", f"reading worker RSS failed: {exc}")

    def kill(self) -> None:
        """SIGKILL and reap; safe to call twice. Idle workers hold nothing worth a clean exit."""
        if self.process.poll() is None:
            try:
                self.process.kill()
            except OSError:
                pass
        try:
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001 - nothing more we can do for a process that will not die
            pass
        self.close()

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self._watch_write_fd is not None:
            os.close(self._watch_write_fd)
            self._watch_write_fd = None
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def _spawn(spec: WorkerSpec) -> Worker:
    import subprocess

    parent_sock, child_sock = socket.socketpair()
    watch_read, watch_write = os.pipe()
    log_fd, log_path = tempfile.mkstemp(prefix="kerasmagic-worker-", suffix=".log")
    os.close(log_fd)
    env = {k: v for k, v in os.environ.items() if k in _VOLATILE_ENV}
    env.update(spec.env)
    # The worker imports kerasmagic from wherever this kernel does (an editable checkout too).
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # prints must stream, not wait for a full pipe buffer
    env["MPLBACKEND"] = _MPL_BACKEND
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "kerasmagic.isolation.worker",
             "--channel-fd", str(child_sock.fileno()), "--watch-fd", str(watch_read),
             "--parent-pid", str(os.getpid()), "--preload", ",".join(spec.preload), "--warmup-log", log_path],
            pass_fds=(child_sock.fileno(), watch_read),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd=os.getcwd(),
            # Its own session: a Ctrl-C in a terminal reaches the kernel, which decides.
            start_new_session=True,
        )
    except BaseException:
        parent_sock.close()
        os.close(watch_write)
        raise
    finally:
        child_sock.close()
        os.close(watch_read)
    return Worker(spec, process, Connection(parent_sock.detach()), watch_write, log_path)


class WorkerPool:
    """Warm workers, at most ``size`` idle at a time, stopped after ``idle_timeout`` seconds idle.

    Example:
        >>> pool = WorkerPool(size=1)
        >>> pool.prestart(); pool.wait_until_warm(timeout=60)       # doctest: +SKIP
        True
        >>> pool.shutdown()
    """

    def __init__(self, size: int = DEFAULT_SIZE, idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S) -> None:
        self.size = size
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._busy: set[Worker] = set()
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._last_activity = time.monotonic()
        self._closed = False
        self._spawning = 0  # requested, not yet in _idle/_busy

    # --- the pool thread: every spawn happens here --------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="kerasmagic-isolation-pool", daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                request = self._requests.get(timeout=1.0)
            except queue.Empty:
                request = None
            if request is None:
                if self._stop_if_idle():
                    return
                continue
            spec, future, into_idle = request
            if future is None:  # the stop signal
                return
            if not future.set_running_or_notify_cancel():
                with self._lock:
                    self._spawning -= 1
                continue
            try:
                worker = _spawn(spec)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                with self._lock:
                    self._spawning -= 1
                future.set_exception(exc)
                continue
            with self._lock:
                self._spawning -= 1
                if self._closed:
                    worker.kill()
                    future.set_exception(RuntimeError("the isolation pool was shut down"))
                    continue
                (self._idle.append(worker) if into_idle else self._busy.add(worker))
            future.set_result(worker)

    def _stop_if_idle(self) -> bool:
        with self._lock:
            for worker in [w for w in self._idle if not w.alive()]:
                self._idle.remove(worker)
                worker.close()
            if any(not w.ready for w in self._idle):
                # A worker still importing is not idle: the idle time counts from when it is ready.
                self._last_activity = time.monotonic()
                return False
            if self._busy or time.monotonic() - self._last_activity < self.idle_timeout:
                return False
            if self._spawning:
                return False
            idle, self._idle = self._idle, []
            self._thread = None
        for worker in idle:
            worker.kill()
        return True

    def _request(self, spec: WorkerSpec, into_idle: bool) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the isolation pool was shut down")
            self._ensure_thread()
            self._spawning += 1
            self._requests.put((spec, future, into_idle))
        return future

    # --- what jobs use --------------------------------------------------------------------

    def acquire(self, spec: WorkerSpec) -> tuple[Worker, str]:
        """A worker for ``spec`` (taken out of the pool) and its state: ready, starting or cold."""
        with self._lock:
            self._last_activity = time.monotonic()
            candidates = [w for w in self._idle if w.spec.can_run(spec) and w.alive()]
            # Best first: has every module already, then has finished importing.
            candidates.sort(key=lambda w: (not w.spec.covers(spec), not w.ready))
            worker = candidates[0] if candidates else None
            if worker is not None:
                self._idle.remove(worker)
                self._busy.add(worker)
        if worker is not None:
            return worker, ("ready" if worker.ready else "starting")
        future = self._request(spec, into_idle=False)
        try:
            return future.result(), "cold"
        except BaseException:
            # Interrupted while the pool thread spawns: that worker must not be left behind.
            future.add_done_callback(lambda f: f.exception() is None and self.release(f.result()))
            raise

    def replenish(self, spec: WorkerSpec) -> None:
        """Start workers for ``spec`` in the background until ``size`` are idle; drop stale specs."""
        stale: list[Worker] = []
        with self._lock:
            if self._closed or self.size <= 0:
                return
            matching = [w for w in self._idle if w.spec.covers(spec)]
            # Idle workers started for another environment (or before the kernel imported
            # another framework) are not what the next job wants: the newest spec wins.
            others = [w for w in self._idle if not w.spec.covers(spec)]
            while others and len(matching) + len(others) >= self.size:
                stale.append(others.pop(0))
            for worker in stale:
                self._idle.remove(worker)
            missing = self.size - len(matching)
        for worker in stale:
            worker.kill()
        for _ in range(max(missing, 0)):
            self._request(spec, into_idle=True)

    def release(self, worker: Worker) -> None:
        """A job is over: its worker must be gone (it exits by itself; we make sure)."""
        with self._lock:
            self._busy.discard(worker)
            self._last_activity = time.monotonic()
        worker.kill()

    def prestart(self, spec: WorkerSpec | None = None) -> None:
        """Start the pool's workers now (e.g. before a CV loop) instead of on the first job."""
        self.replenish(spec or worker_spec())

    def wait_until_warm(self, spec: WorkerSpec | None = None, timeout: float = 120.0) -> bool:
        """Block until an idle worker for ``spec`` has finished importing; False on timeout."""
        spec = spec or worker_spec()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                idle = [w for w in self._idle if w.spec.covers(spec) and w.alive()]
                pending = self._spawning > 0
            if any(w.ready for w in idle):
                return True
            if not idle and not pending:
                return False  # nothing is starting for this spec (stopped, or never asked)
            time.sleep(0.05)
        return False

    def idle_cost(self) -> tuple[int, int | Unavailable]:
        """How many workers wait, and their RSS together (what the pool costs the machine)."""
        with self._lock:
            idle = [w for w in self._idle if w.alive()]
        total = 0
        for worker in idle:
            rss = worker.rss_bytes()
            if isinstance(rss, Unavailable):
                return len(idle), rss
            total += rss
        return len(idle), total

    def pids(self) -> list[int]:
        """PIDs of every worker the pool knows, idle or busy."""
        with self._lock:
            return [w.pid for w in (*self._idle, *self._busy)]

    def shutdown(self) -> None:
        """Kill every worker, idle and busy, and stop the pool thread. Safe to call twice."""
        with self._lock:
            self._closed = True
            workers = [*self._idle, *self._busy]
            self._idle, self._busy = [], set()
            thread, self._thread = self._thread, None
        for worker in workers:
            worker.kill()
        if thread is not None and thread.is_alive():
            self._requests.put((None, None, False))
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        # A spawn that was in flight registered nothing (closed); drain leftovers.
        while not self._requests.empty():
            try:
                _, future, _ = self._requests.get_nowait()
            except queue.Empty:
                break
            if future is not None:
                future.cancel()


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()
_settings = {"size": DEFAULT_SIZE, "idle_timeout": DEFAULT_IDLE_TIMEOUT_S}


def default_pool() -> WorkerPool:
    """The process's pool, created on first use with the :func:`configure_pool` settings."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = WorkerPool(**_settings)
        return _default_pool


def configure_pool(size: int | None = None, idle_timeout: float | None = None) -> None:
    """Set the default pool's size (idle warm workers) and idle timeout in seconds.

    ``size=0`` keeps no warm worker: every job pays the framework import, and no memory is
    held between jobs.

    Example:
        >>> configure_pool(size=2, idle_timeout=120)
    """
    from .errors import IsolationUsageError

    if size is not None and (not isinstance(size, int) or size < 0):
        raise IsolationUsageError(f"pool size must be an integer >= 0, got {size!r}")
    if idle_timeout is not None and idle_timeout <= 0:
        raise IsolationUsageError(f"idle_timeout must be a positive number of seconds, got {idle_timeout!r}")
    with _default_lock:
        if size is not None:
            _settings["size"] = size
        if idle_timeout is not None:
            _settings["idle_timeout"] = float(idle_timeout)
        pool = _default_pool
    if pool is not None:
        pool.size = _settings["size"]
        pool.idle_timeout = _settings["idle_timeout"]
        with pool._lock:
            extra = pool._idle[pool.size:]
            del pool._idle[pool.size:]
        for worker in extra:
            worker.kill()


def prestart_pool(gpu: str | None = None, env: dict[str, str] | None = None) -> None:
    """Start the default pool's workers now, so that the first isolated job finds one warm.

    Call it after importing your frameworks and before the loop: the workers import them
    while your other cells run.

    Example:
        >>> import keras                                        # doctest: +SKIP
        >>> prestart_pool()                                     # doctest: +SKIP
        >>> scores = [run_isolated(fold, args=(k,)).value for k in range(5)]   # doctest: +SKIP
    """
    default_pool().prestart(worker_spec(gpu=gpu, env=env))


def shutdown_default_pool() -> None:
    """Kill the default pool's workers (``%unload_ext kerasmagic`` and interpreter exit call this).

    Example:
        >>> shutdown_default_pool()     # the next isolated job starts a new pool
    """
    global _default_pool
    with _default_lock:
        pool, _default_pool = _default_pool, None
    if pool is not None:
        pool.shutdown()


atexit.register(shutdown_default_pool)

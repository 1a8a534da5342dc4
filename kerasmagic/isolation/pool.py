"""Where isolated jobs get their process: a fork of a warm template, else a fresh interpreter.

One template per environment (:mod:`kerasmagic.isolation.template`) imports the kernel's
frameworks once and never runs an op; each job is a child forked from it, which costs
milliseconds instead of an import. When the template refuses to fork (its fork-safety check
failed), it is retired and that job runs in a fresh interpreter
(:func:`~kerasmagic.isolation.processes.spawn_fresh`); the job's report says why. ``size`` is
how many jobs may run at once (each is its own process, sharing the template's pages until it
writes to them). The template starts on first use (or :func:`prestart_pool`), is retired after
``idle_timeout`` seconds without jobs, and goes at ``%unload_ext`` and at interpreter exit; no
process of ours outlives the kernel (:mod:`kerasmagic.isolation.lifeline`).

Every process is started by one long-lived pool thread: Linux's ``PR_SET_PDEATHSIG`` fires
when the *thread* that forked the child ends, so a short-lived thread would kill them.

Example:
    >>> from kerasmagic.isolation import configure_pool
    >>> configure_pool(size=2, idle_timeout=300)     # two jobs at once; the template goes after 5 idle minutes
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from ..probes.availability import Unavailable
from .errors import IsolationUsageError
from .leftovers import hold_owner_lock, read_tail, sweep_orphans
from .processes import ForkedWorker, JobProcess, spawn_fresh
from .spec import PRELOADABLE, WorkerSpec, check_preload, worker_spec
from .template import ForkRefused, TemplateHandle

__all__ = ["Launch", "WorkerPool", "configure_pool", "default_pool", "prestart_pool", "shutdown_default_pool"]

logger = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT_S = 600.0


def default_size() -> int:
    """Jobs that may run at once by default: one per CPU core.

    Example:
        >>> default_size() >= 1
        True
    """
    return max(1, os.cpu_count() or 1)


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
    template: TemplateHandle | None = None

    def log_tail(self) -> str:
        """The template's import log so far (what a slow or failing start printed)."""
        return read_tail(self.template.log_path) if self.template is not None and self.template.log_path else ""



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
        self._templates: list[TemplateHandle] = []
        self._ending: list[TemplateHandle] = []  # retired, waiting for their children
        # Stale templates that were still importing with jobs waiting for them: retired once
        # each of those jobs has its fork (see _template_for), never killed under them.
        self._retire_when_served: set[TemplateHandle] = set()
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

        Only :data:`~kerasmagic.isolation.spec.PRELOADABLE` modules are learned, and a
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

    def _template_ended(self, template: TemplateHandle) -> None:
        with self._lock:
            self._retire_when_served.discard(template)
            for group in (self._templates, self._ending):
                if template in group:
                    group.remove(template)
        if template.process is not None:
            template.close()

    # --- what jobs use --------------------------------------------------------------------

    def _template_for(self, spec: WorkerSpec, waiter: int | None = None) -> tuple[TemplateHandle, str]:
        """The template for ``spec``, started if there is none: and how warm it is.

        ``waiter`` (a launch's id) is counted among the template's :attr:`waiting` jobs under
        the same lock, so that no other thread can find the template unwanted in between.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the isolation pool was shut down")
            usable = [t for t in self._templates if t.spec.covers(spec) and t.state in ("starting", "ready")]
            usable.sort(key=lambda t: t.state != "ready")
            if usable:
                template = usable[0]
                if waiter is not None:
                    template.waiting.add(waiter)
                return template, ("warm" if template.state == "ready" else "starting")
            # The newest spec wins: a template for another environment, or one started before
            # the kernel imported another framework, is retired once its jobs end.
            stale = [t for t in self._templates if t.spec.can_run(spec) or not t.busy()]
            # One that jobs wait for (still importing, or ready with their forks not yet asked)
            # is retired once they have their forks: a warm-up for another spec (a node
            # agent's, learn()'s) that comes while a job waits must not kill the job's template
            # under it (issue 23, fault 11: "could not import numpy: it printed:", nothing more).
            served_first = {t for t in stale if t.waiting}
            for old in stale:
                self._templates.remove(old)
                self._ending.append(old)
            self._retire_when_served |= served_first
            template = TemplateHandle(spec, self._template_ended)
            if waiter is not None:
                template.waiting.add(waiter)
            self._templates.append(template)
        for old in stale:
            if old in served_first:
                continue
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
        template, launch.state = self._template_for(spec, waiter=id(launch))
        launch.template_pid = template.pid
        launch.template = template

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
            try:
                launch.template_pid = template.pid
                error = future.exception()
                if error is not None:
                    _fail_launch(launch, error)
                    return
                launch.template_threads = list(template.ready_info.threads if template.ready_info is not None
                                               else [])
                if launch.future.cancelled():
                    return
                template.fork(spec, directory).add_done_callback(_guarded(launch, forked))
            finally:
                self._retire_if_served(template)  # after the fork request: the template forks, then retires

        template.ready.add_done_callback(_guarded(launch, ready))
        return launch

    def _retire_if_served(self, template: TemplateHandle) -> None:
        """Retire a stale template once no job waits for it any more (see :meth:`_template_for`):
        it exits when the children it forked for them have ended."""
        with self._lock:
            if template not in self._retire_when_served or template.waiting:
                return
            self._retire_when_served.discard(template)
        template.retire()

    def _launch_fresh(self, spec: WorkerSpec, launch: Launch) -> None:
        def start() -> None:
            try:
                worker = spawn_fresh(spec)
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
                self._retire_when_served.discard(template)
        if stop:
            template.kill()
        else:
            self._retire_if_served(template)

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
            self._retire_when_served = set()
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

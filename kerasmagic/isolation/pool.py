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

Where it pays (a GPU visible to the jobs, or a core free beside the running job:
:func:`~kerasmagic.isolation.spare.default_rule`), the pool keeps one *warm spare* per device:
a child forked ahead of the next job, which created its device context and ran a small fit
while the previous job ran (:mod:`kerasmagic.isolation.child.warmup`). The next job of the same
spec takes it; any other gets a cold fork and its report says why. A spare ends with its
template (idle, retired, shut down), on Ctrl-C, and when the memory guard needs memory
(:func:`end_default_spares`). Isolated JAX jobs share a persistent compilation cache in a folder
the pool owns (:meth:`WorkerPool.jax_cache_folder`), removed with its other files.

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
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from ..probes import nvml
from ..probes.availability import Unavailable
from .child.warmup import JAX_CACHE_ENV
from .errors import IsolationUsageError
from .leftovers import hold_owner_lock, owned_prefix, read_tail, sweep_orphans
from .processes import ForkedWorker, JobProcess, spawn_fresh
from .spare import default_rule, device_key, gpu_room, gpu_visible, no_spare_for, spare_mismatch, usable_cores
from .spec import PRELOADABLE, WorkerSpec, check_preload, worker_spec
from .template import ForkRefused, TemplateHandle

__all__ = ["Launch", "WorkerPool", "configure_pool", "default_pool", "end_default_spares", "prestart_pool",
           "shutdown_default_pool"]

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
    this job) or ``"fresh"`` (a fresh interpreter; ``note`` says why). ``spare``: ``"taken"``
    when it is the pool's warm spare, else why a job that could have had one got a cold fork
    ("" where the pool keeps no spares).
    """

    future: Future = field(default_factory=Future)
    state: str = "warm"
    note: str = ""
    template_pid: int | None = None
    template_threads: list[str] = field(default_factory=list)
    template: TemplateHandle | None = None
    spare: str = ""

    def log_tail(self) -> str:
        """The template's import log so far (what a slow or failing start printed)."""
        return read_tail(self.template.log_path) if self.template is not None and self.template.log_path else ""



@dataclass
class _Spare:
    """A child forked ahead of its job, warming up: the next job for ``spec`` on ``template``
    (and the same device) takes it instead of asking for a fork."""

    template: TemplateHandle
    spec: WorkerSpec
    future: Future = field(default_factory=Future)  # gives the ForkedWorker, as TemplateHandle.fork does
    asked: float = field(default_factory=time.monotonic)

    def worker(self) -> ForkedWorker | None:
        """Its process, once forked (None before, or when the fork failed)."""
        if not self.future.done() or self.future.exception() is not None:
            return None
        return self.future.result()

    def warmed(self) -> bool:
        """Its warm-up is over: its ``ready`` waits on its channel (read by the job that takes it)."""
        worker = self.worker()
        try:
            return worker is not None and worker.poll() is None and worker.conn.poll(0)
        except (OSError, EOFError):
            return False


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
                 fork: bool = True, learn: bool = True, warm_spare: bool | None = None) -> None:
        self.size = size if size is not None else default_size()
        self.idle_timeout = idle_timeout
        self.fork = fork
        self.learning = learn
        #: True / False: the user's choice; None: :func:`~kerasmagic.isolation.spare.default_rule`.
        self.warm_spare = warm_spare
        self._spares: dict[str | None, _Spare] = {}  # by the device the jobs see (CUDA_VISIBLE_DEVICES)
        self._jax_cache: str | None = None
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
                  fork: bool | None = None, learn: bool | None = None, warm_spare: bool | str | None = None) -> None:
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
            if warm_spare is not None:
                self.warm_spare = None if warm_spare == "auto" else bool(warm_spare)
        if warm_spare is not None and not self.spares_on()[0]:
            self.end_spares()

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
            self.end_spares(template)  # the pool idles: its spares hold memory for nobody
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
        self.end_spares(template)
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
            self.end_spares(old)
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

    def launch(self, spec: WorkerSpec, directory: str, fixed: list[str] | tuple[str, ...] = ()) -> Launch:
        """Start getting a process for one job (never blocks): see :class:`Launch`.

        The process imports what ``spec`` asks and what earlier jobs taught the pool (:meth:`learn`).
        ``fixed``: settings the job changes that a warmed process cannot (it never takes a spare).
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
                worker, launch.spare = self._take_spare(template, spec, fixed)
                if worker is not None:
                    self._adopt(worker, launch)
                else:
                    template.fork(spec, directory, env=self._child_env(spec)).add_done_callback(
                        _guarded(launch, forked))
                if not fixed:  # a job that changes what a runtime fixes is no guide to the next ones
                    self._ask_spare(template, spec)
            finally:
                self._retire_if_served(template)  # after the fork request: the template forks, then retires

        template.ready.add_done_callback(_guarded(launch, ready))
        return launch

    # --- the warm spare ---------------------------------------------------------------------

    def spares_on(self) -> tuple[bool, str]:
        """Whether this pool keeps warm spares, and why (the user's choice, or the default rule).

        Example:
            >>> pool = WorkerPool(size=1, warm_spare=False)
            >>> pool.spares_on()
            (False, 'configure_pool(warm_spare=False)')
            >>> pool.shutdown()
        """
        if self.warm_spare is not None:
            return self.warm_spare, f"configure_pool(warm_spare={self.warm_spare})"
        return default_rule()

    def _ask_spare(self, template: TemplateHandle, spec: WorkerSpec) -> None:
        """Fork a spare for the next job like this one, where it pays and there is room for it."""
        if not self.spares_on()[0] or no_spare_for(spec):
            return
        key = device_key(spec)
        if gpu_visible(dict(spec.env)):
            if gpu_room(key, nvml.devices()):
                return  # its context would take memory the running job may need
        elif self.warm_spare is None:  # by the default rule: only with a core free beside the jobs that run
            with self._lock:
                running = len(self._running)
            if running + 1 >= usable_cores():
                return  # its warm-up would slow the jobs that run
        with self._lock:
            if (self._closed or key in self._spares or template.state != "ready"
                    or template not in self._templates):
                return
            spare = self._spares[key] = _Spare(template, spec)

        def forked(future: Future) -> None:
            error = future.exception()
            with self._lock:
                mine = self._spares.get(key) is spare
                if error is not None and mine:
                    del self._spares[key]
            if error is None:
                template.spare_pids.add(future.result().pid)
                if not mine:  # ended meanwhile: nobody else will end it
                    self._end_spare(spare)
            if error is None:
                spare.future.set_result(future.result())
            else:
                spare.future.set_exception(error)

        template.fork(spec, "", warm=True, env=self._child_env(spec)).add_done_callback(forked)

    def _take_spare(self, template: TemplateHandle, spec: WorkerSpec,
                    fixed: list[str] | tuple[str, ...]) -> tuple[JobProcess | None, str]:
        """The spare for this job, if it may take one: and, when it gets none, why (for its report)."""
        on, _ = self.spares_on()
        if not on:
            return None, ""
        key = device_key(spec)
        with self._lock:
            spare = self._spares.get(key)
        if fixed:
            return None, (f"a cold fork: the job sets {', '.join(fixed)}, which a warmed process can no "
                          "longer change")
        refused = no_spare_for(spec)
        if refused:
            return None, f"a cold fork: {refused}"
        if spare is None:
            return None, "a cold fork: no spare was waiting (the first job, or the last one took it)"
        why = "" if spare.template is template else "the spare was forked from an older template"
        why = why or spare_mismatch(spare.spec, spec)
        if why:
            self.end_spares(spare.template, key)  # no job like this one comes: a spare for this one is asked
            return None, f"a cold fork: {why}"
        if not spare.warmed():
            return None, "a cold fork: the spare was still warming up (it waits for the next job)"
        with self._lock:
            if self._spares.get(key) is not spare:
                return None, "a cold fork: the spare was ended meanwhile"
            del self._spares[key]
        worker = spare.worker()
        assert worker is not None
        template.spare_pids.discard(worker.pid)
        return worker, "taken"

    def end_spares(self, template: TemplateHandle | None = None, key: Any = ...) -> int:
        """End the warm spares (of ``template``, for device ``key``; all by default): how many.

        Example:
            >>> WorkerPool(size=1).end_spares()
            0
        """
        with self._lock:
            ended = [s for k, s in self._spares.items()
                     if (template is None or s.template is template) and (key is ... or k == key)]
            for spare in ended:
                for k, s in list(self._spares.items()):
                    if s is spare:
                        del self._spares[k]
        for spare in ended:
            self._end_spare(spare)
        return len(ended)

    def _end_spare(self, spare: _Spare) -> None:
        def end(future: Future) -> None:
            if future.exception() is None:
                worker = future.result()
                spare.template.spare_pids.discard(worker.pid)
                self._release_elsewhere(worker)

        spare.future.add_done_callback(end)

    def spare_states(self) -> list[dict[str, Any]]:
        """Each warm spare: its pid, device, whether its warm-up is over, its RSS and its GPU memory
        by NVML (what it costs while it waits; in the job report, ``%tf_mem`` and the sidebar).

        Example:
            >>> WorkerPool(size=1).spare_states()
            []
        """
        with self._lock:
            spares = list(self._spares.items())
        states = []
        for key, spare in spares:
            worker = spare.worker()
            if worker is None:
                continue
            gpu = _gpu_bytes_of(worker.pid) if gpu_visible(dict(spare.spec.env)) else None
            states.append({"pid": worker.pid, "device": key, "state": "ready" if spare.warmed() else "warming",
                           "backend": dict(spare.spec.env).get("KERAS_BACKEND"),
                           "rss_bytes": worker.rss_bytes(), "gpu_bytes": gpu})
        return states

    # --- JAX's compilation cache, the pool's own ------------------------------------------

    def jax_cache_folder(self) -> str:
        """The folder of the jobs' JAX persistent compilation cache (made on first use): the pool's,
        named after this kernel, so that it goes with the pool (shutdown) or with the kernel's other
        files when it dies (:mod:`kerasmagic.isolation.leftovers`); never the user's own cache.

        Example:
            >>> pool = WorkerPool(size=1)
            >>> os.path.basename(pool.jax_cache_folder()).endswith("-jaxcache")
            True
            >>> pool.shutdown()
        """
        with self._lock:
            if self._jax_cache is None:
                self._jax_cache = os.path.join(tempfile.gettempdir(), owned_prefix("isolated") + "jaxcache")
                os.makedirs(self._jax_cache, mode=0o700, exist_ok=True)
            return self._jax_cache

    def jax_cache_bytes(self) -> int:
        """What the JAX cache holds on disk now (0 before any JAX job)."""
        folder = self._jax_cache
        total = 0
        if folder is not None:
            for root, _, files in os.walk(folder):
                for name in files:
                    try:
                        total += os.path.getsize(os.path.join(root, name))
                    except OSError:
                        pass
        return total

    def _child_env(self, spec: WorkerSpec) -> dict[str, str]:
        """The pool's own variables for a job's process: its JAX cache, where the job runs on JAX
        (Keras on JAX, or JAX without Keras: Keras imports JAX on any backend where it is installed)."""
        backend = dict(spec.env).get("KERAS_BACKEND")
        on_jax = backend == "jax" or ("jax" in spec.modules() and "keras" not in spec.modules())
        return {JAX_CACHE_ENV: self.jax_cache_folder()} if on_jax else {}

    def _retire_if_served(self, template: TemplateHandle) -> None:
        """Retire a stale template once no job waits for it any more (see :meth:`_template_for`):
        it exits when the children it forked for them have ended."""
        with self._lock:
            if template not in self._retire_when_served or template.waiting:
                return
            self._retire_when_served.discard(template)
        self.end_spares(template)
        template.retire()

    def _launch_fresh(self, spec: WorkerSpec, launch: Launch) -> None:
        def start() -> None:
            try:
                worker = spawn_fresh(spec, self._child_env(spec))
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
            spares = [pid for t in (*self._templates, *self._ending) for pid in t.spare_pids]
            return templates + [w.pid for w in self._running] + spares

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
            jax_cache, self._jax_cache = self._jax_cache, None
        self.end_spares()
        for worker in running:
            worker.kill()
        for template in templates:
            template.kill()
        if jax_cache is not None:
            shutil.rmtree(jax_cache, ignore_errors=True)
        if thread is not None and thread.is_alive():
            self._tasks.put(False)
            if thread is not threading.current_thread():
                thread.join(timeout=10)


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()
_settings: dict[str, Any] = {"size": None, "idle_timeout": DEFAULT_IDLE_TIMEOUT_S, "fork": True, "learn": True,
                             "warm_spare": None}


def _gpu_bytes_of(pid: int) -> int | None:
    """GPU memory NVML counts for process ``pid``, over its devices (None: no NVML reading)."""
    devices = nvml.devices(pid)
    if not isinstance(devices, list):
        return None
    values = [d.get("process_used_bytes") for d in devices if isinstance(d, dict)]
    numbers = [v for v in values if isinstance(v, int)]
    return sum(numbers) if numbers else None


def default_pool() -> WorkerPool:
    """The process's pool, created on first use with the :func:`configure_pool` settings."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = WorkerPool(**_settings)
        return _default_pool


def configure_pool(size: int | None = None, idle_timeout: float | None = None, fork: bool | None = None,
                   learn: bool | None = None, warm_spare: bool | str | None = None) -> None:
    """Set how many isolated jobs may run at once, the template's idle timeout, forking and learning.

    ``size`` defaults to the number of CPU cores. ``fork=False`` runs every job in a fresh
    interpreter (each pays the framework import): the escape hatch should a framework ever
    misbehave in a forked child. ``learn=False`` stops templates from importing first what
    earlier jobs imported themselves (and forgets what they taught).

    ``warm_spare``: keep one job process forked ahead of the next job (per GPU), which creates its
    device context and runs a small Keras fit while the previous job runs, so that the next job
    starts at in-process speed. ``"auto"`` (the default): where a GPU is visible to the jobs or at
    least 3 cores are usable; ``True`` / ``False`` decide. A job that changes what a warmed
    process cannot (``tf.config`` threads, visible devices, memory growth, ``XLA_PYTHON_CLIENT_*``,
    another backend) gets a cold fork, and its report says why.

    Example:
        >>> configure_pool(size=2, idle_timeout=120)
        >>> configure_pool(warm_spare="auto")
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
    if warm_spare is not None and not isinstance(warm_spare, bool) and warm_spare != "auto":
        raise IsolationUsageError(f"warm_spare takes True, False or 'auto', got {warm_spare!r}")
    with _default_lock:
        if size is not None:
            _settings["size"] = size
        if idle_timeout is not None:
            _settings["idle_timeout"] = float(idle_timeout)
        if fork is not None:
            _settings["fork"] = fork
        if learn is not None:
            _settings["learn"] = learn
        if warm_spare is not None:
            _settings["warm_spare"] = None if warm_spare == "auto" else warm_spare
        if _default_pool is not None:
            _default_pool.configure(size=_settings["size"] if _settings["size"] is not None else default_size(),
                                    idle_timeout=_settings["idle_timeout"], fork=_settings["fork"],
                                    learn=learn, warm_spare=warm_spare)


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


def end_default_spares() -> int:
    """End the default pool's warm spares now (the memory guard calls it when memory runs short);
    how many ended. The next jobs fork cold until the pool asks for a spare again.

    Example:
        >>> end_default_spares()
        0
    """
    with _default_lock:
        pool = _default_pool
    return pool.end_spares() if pool is not None else 0


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

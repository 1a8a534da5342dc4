"""The template: a fresh interpreter that imports the frameworks once, never runs an op, and
forks one child per isolated job; both of its sides live here, the kernel's handle on it
(:class:`TemplateHandle`) and its own loop (:class:`TemplateServer`).

Why a fork and not a worker per job: a job's worker had to pay the framework import
(3-5 s for TensorFlow on two cores, 13-18 s for torch + JAX on a GPU machine), so a loop of
short folds ran at a fifth of in-process speed. A fork of a process that has *imported*
TensorFlow, Keras, torch or JAX but never started their runtimes is safe and costs
milliseconds; a fork after a runtime started hangs or fails (TensorFlow's thread pools,
"CUDA error: initialization error"). So the template runs no op, and before every fork it
checks that this still holds (:mod:`kerasmagic.isolation.fork_safety`); when a check fails it
refuses, the kernel retires it and runs that job in a fresh interpreter instead, saying why.

The handle starts it as ``python -c "from kerasmagic.isolation.template import main; main()"
--control-fd N --watch-fd M --parent-pid P --preload tensorflow,keras --log PATH`` (not ``-m``:
runpy would run a second copy of this module, which the package has imported already), and
talks to it over a control socket (``SOCK_SEQPACKET``: :data:`~kerasmagic.isolation.messages.CONTROL_CHANNEL`).
The server is single-threaded on purpose (a thread of ours would be one more thing to prove
idle at fork time): one ``select`` loop over the control socket (fork requests with the job's
file descriptors, sent with ``SCM_RIGHTS``), the kernel's lifeline (EOF: the kernel is gone) and
a SIGCHLD wake-up pipe (a child ended: its exit status goes to the kernel, which is not its
parent). A forked child leaves that loop by an exception (:class:`ForkedChild`) and runs its
job from :func:`main` (:func:`kerasmagic.isolation.child.worker.serve_forked_job`), near the top
of the stack; the child imports nothing back from this module.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from ..probes.availability import Unavailable
from ..probes.process import child_pids, rss_bytes
from .fork_safety import ForkSafety
from .leftovers import log_file, our_folders, read_tail, remove_kernel_files, sweep_orphans
from .lifeline import PARENT_GONE_EXIT, become_subreaper, lifeline_pipe, parent_gone, set_parent_death_signal
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
from .processes import ForkedWorker, process_env, start_directory
from .spec import WorkerSpec, modules_present, preload

__all__ = ["MAX_CONTROL_BYTES", "ForkRefused", "TemplateFailed", "TemplateHandle", "TemplateServer", "main"]

logger = logging.getLogger(__name__)

#: The largest control message (a fork request: the job's environment and folder).
MAX_CONTROL_BYTES = 1 << 20
#: How long a template that was told its kernel is gone waits to see it handed to a new parent.
_PROOF_OF_DEATH_S = 2.0


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


# --- the kernel's side: the handle on a template process --------------------------------


class TemplateHandle:
    """The kernel's handle on one template process (for one import-time environment), and the
    thread reading its news: starting it, asking it for forks, retiring and killing it."""

    _job_ids = itertools.count(1)

    def __init__(self, spec: WorkerSpec, on_end: Callable[[TemplateHandle], None]) -> None:
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
        self._reader: threading.Thread | None = None
        #: Children forked as warm spares that no job has taken yet: they keep no template busy.
        self.spare_pids: set[int] = set()
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
        watch_read, watch_write = lifeline_pipe()
        self.log_path = log_file("template")
        env = process_env(self.spec.template_env())
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
                    env=env, cwd=start_directory(), start_new_session=True,
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
        self._reader = threading.Thread(target=self._read, name=f"kerasmagic-isolation-template-{self.pid}",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        control = self._control
        while control is not None:
            try:
                data = control.recv(MAX_CONTROL_BYTES)
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
                f"the template process exited with code {code} while importing", None, read_tail(self.log_path)))
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

    def fork(self, spec: WorkerSpec, directory: str, warm: bool = False, env: dict[str, str] | None = None) -> Future:
        """Ask for a child for one job; the future gives a :class:`ForkedWorker` or ForkRefused.

        ``warm``: a spare for a job not known yet (no ``directory``), which warms its Keras backend
        up before it says ready; ``env``: variables of the pool's own beside the spec's late ones.
        """
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
        request = Fork(job_id=job_id, env={**spec.late_env(), **(env or {})}, directory=directory, warm=warm)
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
        """A job's fork is on its way or a job's process runs (a spare waiting for its job is neither)."""
        with self._lock:
            return bool((self._children - self.spare_pids) or self._pending)

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
        # The shutdown above wakes the reader, which may not have run yet on a loaded machine
        # when kill() returns: a pool that shut down must leave no thread of ours behind (the
        # session check in tests/conftest.py saw one). Not from the reader itself, which closes
        # the handle when the template ends.
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5)

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


# --- the template's side: its loop, in the template process --------------------------------


class ForkedChild(BaseException):
    """Raised in a forked child, caught by :func:`main`: the child leaves the template's loop
    (and every frame of it) before it becomes the job. A BaseException, so that the loop's
    ``except Exception`` (a bad request must not end the template) lets it through."""

    def __init__(self, template: TemplateServer, request: Fork, fds: list[int]) -> None:
        super().__init__()
        self.template, self.request, self.fds = template, request, fds


def _send(control: socket.socket, message: Message) -> None:
    try:
        control.send(dumps(message))
    except OSError:
        pass  # the kernel went away; the loop notices and ends us


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class TemplateServer:
    """The template's loop, in the template process; see the module docstring."""

    def __init__(self, control: socket.socket, watch_fd: int, parent_pid: int, log_path: str,
                 safety: ForkSafety, modules: list[str] | None = None) -> None:
        self.modules = list(modules or [])  # what it was asked to import: a job's report names those it has
        self.control = control
        self.watch_fd = watch_fd
        self.parent_pid = parent_pid
        self.log_path = log_path
        self.safety = safety
        self.children: dict[int, str] = {}  # pid -> the job's folder, until the kernel says "reap"
        self.exited: set[int] = set()  # children whose end was reported (zombies until "reap")
        self.retiring = False
        self.ending = False
        self.subreaper = become_subreaper()
        #: Processes a job left behind that this template adopted and ended (the log says which).
        self.orphans_ended = 0
        # Worked out now: at the kernel's death there must be nothing left to look up.
        self.folders = our_folders()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self.kernel_gone())  # the parent-death signal
        signal.set_wakeup_fd(self.wake_write)

    def serve(self) -> None:
        while True:
            watched: list[socket.socket | int] = [self.control, self.watch_fd, self.wake_read]
            readable, _, _ = select.select(watched, [], [], 1.0)
            if self.watch_fd in readable and not os.read(self.watch_fd, 1):
                self.kernel_gone()
            if os.getppid() != self.parent_pid:
                self.kernel_gone()
            if self.wake_read in readable:
                try:
                    while os.read(self.wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
            self.reap()
            if self.control in readable:
                self.handle_control()
            if self.retiring and not self.children:
                if self.subreaper:
                    self.end_orphans()
                self.exit(0)

    def handle_control(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.control, MAX_CONTROL_BYTES, 8)
        except OSError:
            data, fds = b"", []
        if not data:
            _close_fds(fds)
            self.kernel_gone()  # the kernel died, or the pool closed us: nothing may outlive it
        try:
            message = CONTROL_CHANNEL.loads(data)
            if isinstance(message, Fork):
                self.fork(message, fds)
                return
            if isinstance(message, Retire):
                self.retiring = True
            elif isinstance(message, Reap):
                self.release_zombie(message.pid)
            else:
                raise MessageError(f"a template takes fork, retire and reap requests, not {message.kind!r}")
        except Exception:  # noqa: BLE001 - a bad request must never end the template and its jobs
            traceback.print_exc()  # into the template's log
        _close_fds(fds)

    def fork(self, request: Fork, fds: list[int]) -> None:
        job_id = request.job_id
        if self.retiring:
            _close_fds(fds)
            _send(self.control, Refused(job_id=job_id, reason="the template is retiring", retire=True))
            return
        problem = self.safety.problem()
        if problem:
            _close_fds(fds)
            self.retiring = True
            _send(self.control, Refused(job_id=job_id, reason=problem, retire=True))
            return
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # what the template made since (its messages): the job's collections skip it too
        try:
            pid = os.fork()
        except OSError as exc:  # ENOMEM, EAGAIN (ulimit -u): this job runs fresh, the others go on
            _close_fds(fds)
            _send(self.control, Refused(job_id=job_id, reason=f"fork() failed: {exc}", retire=False))
            return
        if pid == 0:
            # Out of the loop first (to main()), then the job: it runs near the top of the
            # stack, and TensorFlow records that stack for every op it creates.
            raise ForkedChild(self, request, fds)
        _close_fds(fds)
        self.children[pid] = request.directory
        _send(self.control, Forked(job_id=job_id, pid=pid))

    def become_job(self, request: Fork, fds: list[int]) -> tuple[int, int, int, list[str], bool]:
        """In the child: a session of its own, the job's pipes and environment; what
        :func:`~kerasmagic.isolation.child.worker.serve_forked_job` then takes (the job's channel,
        the kernel's watch pipe, the template's pid, the modules the template was asked for,
        whether to warm up first: a spare)."""
        os.setsid()  # its own process group: the kernel ends everything the job started at once
        if self.subreaper:
            become_subreaper()  # what the job's own children orphan stays under the job while it runs
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the job's own _die_with_parent sets its handler
        _close_fds([self.wake_read, self.wake_write])
        self.control.close()
        channel_fd, stdout_fd, stderr_fd = fds
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        _close_fds([stdout_fd, stderr_fd])
        os.environ.update(request.env)
        return channel_fd, self.watch_fd, os.getppid(), self.modules, request.warm

    def reap(self) -> None:
        """Report each child that ended, but leave it a zombie until the kernel says "reap".

        While it is a zombie its pid (and so its process group's id) cannot be reused: the
        kernel's last ``killpg`` of the job's group (for what the job started) can then never
        hit an unrelated process that got the same number.
        """
        for pid in [p for p in self.children if p not in self.exited]:
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                self.exited.add(pid)
                _send(self.control, Exited(pid=pid, returncode=None))
                continue
            if info is None or info.si_pid == 0:
                continue
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            self.exited.add(pid)
            _send(self.control, Exited(pid=pid, returncode=code))
        if self.subreaper:
            self.end_orphans()

    def end_orphans(self) -> None:
        """End (and collect) every child that is not a job: it was adopted, left behind by a job
        that ended; a running job's orphans are adopted by the job itself, never by us."""
        for pid in set(child_pids()) - set(self.children):
            for kill in (os.killpg, os.kill):  # its group too: what it started in its own session
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    self.orphans_ended += 1
                    print(f"kerasmagic template: ended process {pid}, left running by a job that ended",
                          file=sys.stderr, flush=True)
            except ChildProcessError:
                pass  # collected already

    def release_zombie(self, pid: int) -> None:
        """The kernel is done with this child: collect it, its pid is free again."""
        if pid in self.children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            self.children.pop(pid, None)
            self.exited.discard(pid)

    def kernel_gone(self) -> None:
        """The kernel died or closed us: end every job's process group, remove their files, exit.

        A dead kernel's files go too, all of them: the folders of jobs that were never forked
        (an ``isolated_map``'s shared folder and its items not yet started, 25 MiB each in
        ``/dev/shm`` for large items), the logs, the owner locks (issue 23, fault 5). Only once
        its death is proven (this process was handed to another parent): a SIGTERM may be
        anyone's, and a live kernel's files are in use.
        """
        # Once only: the parent-death SIGTERM arrives while the watch pipe's EOF is being
        # handled, and its handler re-entering here deadlocked on a lock the first call held
        # (tempfile's, seen under CI). Nothing in here may take a lock the loop might hold.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self.ending:
            return
        self.ending = True
        for pid, directory in list(self.children.items()):
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if directory:  # a spare's is empty: it had no job yet
                shutil.rmtree(directory, ignore_errors=True)
        if self.subreaper:
            self.end_orphans()
        if parent_gone(self.parent_pid, within=_PROOF_OF_DEATH_S):
            # Its job folders and logs, then its "my files are in use" locks (leftovers.hold_owner_lock).
            remove_kernel_files(self.parent_pid, self.folders)
        self.exit(PARENT_GONE_EXIT)

    def exit(self, code: int) -> None:
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        os._exit(code)


def freeze_imports() -> None:
    """Move every object the imports made into Python's permanent generation, which the garbage
    collector never visits: in a forked child, a full collection otherwise walks the whole
    imported heap (about 400k objects with TensorFlow and Keras), writes each object's GC
    header and so copies every page that holds one. Measured on 2 cores: one such collection
    in each job's first ``fit()``, 0.3 s of CPU and 90 MiB of copy-on-write faults, which a
    warm kernel never pays (the gc state every fork starts from is the same, so every job did).

    Collected first, so that what the imports left as garbage is freed, not kept forever;
    :meth:`TemplateServer.fork` freezes again what the template made since.
    """
    gc.collect()
    gc.freeze()


def _gone_while_starting(parent_pid: int, folders: list[str], log_path: str) -> None:
    """A SIGTERM before the loop runs (the kernel's death signal, usually during the imports):
    remove the dead kernel's files and our log, and exit. A SIGTERM from anyone else, while the
    kernel lives, ends us as it did before: by its default action, and the kernel says so."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if parent_gone(parent_pid, within=_PROOF_OF_DEATH_S):
        remove_kernel_files(parent_pid, folders)
        try:
            os.unlink(log_path)
        except OSError:
            pass
        os._exit(PARENT_GONE_EXIT)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kerasmagic.isolation.template")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--watch-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("--learned", default="")
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    # The kernel may die while we import (seconds; a kill then is a restart during a cold start):
    # the death signal's default action would end us without a word, and leave the job's folder,
    # the kernel's locks and our log behind (issue 23, fault 5). The loop's handler replaces this one.
    folders = our_folders()
    signal.signal(signal.SIGTERM, lambda *_: _gone_while_starting(args.parent_pid, folders, args.log))
    set_parent_death_signal()
    if os.getppid() != args.parent_pid:
        _gone_while_starting(args.parent_pid, folders, args.log)
    control = socket.socket(fileno=args.control_fd)
    modules = [m for m in args.preload.split(",") if m]
    learned = [m for m in args.learned.split(",") if m]
    try:
        import_s = preload(modules, learned)
    except BaseException as exc:  # noqa: BLE001 - the kernel shows the cause, not the log's chatter
        _send(control, ImportFailed(error=f"{type(exc).__name__}: {exc}",
                                    traceback="".join(traceback.format_exception(exc))))
        os._exit(1)
    freeze_imports()
    safety = ForkSafety()
    _send(control, Ready(pid=os.getpid(), import_s=import_s, rss_bytes=rss_bytes(),
                         threads=sorted(name for name, _ in safety.baseline.values()),
                         modules=modules_present(modules + learned)))
    child = None
    try:
        TemplateServer(control, args.watch_fd, args.parent_pid, args.log, safety,
                       modules + learned).serve()  # returns only in a child
    except ForkedChild as forked:
        child = forked.template, forked.request, forked.fds
    # Out of the except block: the job must not run with our exception as its context.
    if child is not None:
        template, request, fds = child
        try:
            from .child import worker  # noqa: PLC0415 - it imports this module; only a forked job runs it

            worker.serve_forked_job(*template.become_job(request, fds))
        finally:
            os._exit(70)  # serve_forked_job never returns; this is for an exception before it


if __name__ == "__main__":
    main()

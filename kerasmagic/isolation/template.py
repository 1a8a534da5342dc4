"""The template: a fresh interpreter that imports the frameworks once, never runs an op, and
forks one child per isolated job.

Why a fork and not a worker per job: a job's worker had to pay the framework import
(3-5 s for TensorFlow on two cores, 13-18 s for torch + JAX on a GPU machine), so a loop of
short folds ran at a fifth of in-process speed. A fork of a process that has *imported*
TensorFlow, Keras, torch or JAX but never started their runtimes is safe and costs
milliseconds; a fork after a runtime started hangs or fails (TensorFlow's thread pools,
"CUDA error: initialization error"). So the template runs no op, and before every fork it
checks that this still holds (:func:`fork_safety_problem`); when a check fails it refuses,
the kernel retires it and runs that job in a fresh interpreter instead, saying why.

Started by the pool as ``python -c "from kerasmagic.isolation.template import main; main()"
--control-fd N --watch-fd M --parent-pid P --preload tensorflow,keras --log PATH`` (not ``-m``:
runpy would run a second copy of this module, which the package has imported already). It is
single-threaded on purpose (a thread of ours would be one more thing to prove idle at fork
time): one ``select`` loop over the control socket (fork requests with the job's file
descriptors, sent with ``SCM_RIGHTS``), the kernel's watch pipe (EOF: the kernel is gone) and
a SIGCHLD wake-up pipe (a child ended: its exit status goes to the kernel, which is not its
parent). A forked child leaves that loop by an exception (:class:`ForkedChild`) and runs its
job from :func:`main`, near the top of the stack.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback

from ..compat import display_functions_module
from ..probes import jax_devices as jax_probe
from ..probes import torch_cuda as torch_probe
from ..probes.process import child_pids, rss_bytes
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

#: Exit status of a template (or forked child) that found the kernel gone.
PARENT_GONE_EXIT = 75
#: Exit status of a job's process that could not send its last message: the job closed the
#: channel's descriptor (``os.closerange``), so nothing it made can go back.
CHANNEL_LOST_EXIT = 74
#: The largest control message (a fork request: the job's environment and folder).
MAX_CONTROL_BYTES = 1 << 20
#: Environment variables that no framework reads at import time, only when its runtime or
#: device starts, i.e. in the child after the fork. A job that sets only these can be forked
#: from the kernel's own template instead of needing a template of its own.
LATE_ENV = frozenset({
    "CUDA_VISIBLE_DEVICES", "TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH",
    "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF",
})
#: The heavy modules a template imports when the kernel has them (or a job imported them: the
#: pool learns), in the order it imports them; what a job imports of these is in its report.
PRELOADABLE = ("numpy", "pandas", "tensorflow", "tf_keras", "keras", "jax", "torch", "matplotlib.pyplot", "sklearn")
#: What the CUDA driver API returns before ``cuInit`` (CUDA_ERROR_NOT_INITIALIZED).
_CUDA_ERROR_NOT_INITIALIZED = 3


def set_parent_death_signal(signum: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``signum`` when this process's parent thread ends (no-op elsewhere).

    SIGTERM, with a handler that cleans up, rather than SIGKILL: a process killed outright
    leaves what it started (a job's subprocess, the job's folder) behind.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the watch pipe still covers us


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphans among this process's descendants its children instead of PID 1's (Linux 3.4+).

    Why: a job's ``subprocess.Popen(..., start_new_session=True)`` leaves the job's process
    group, so ending the group missed it, and when the job ended it was adopted by PID 1 and
    ran on (issue 23, fault 6). With the template and each job subreapers, what a running job
    orphans stays under the job, and what a finished or killed job leaves behind is adopted
    by the template, which ends it (:meth:`Template.end_orphans`). Not inherited by a fork: the
    job sets it again. False where it cannot be set.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def thread_states() -> dict[int, tuple[str, str]]:
    """This process's threads: ``{tid: (name, state)}`` from ``/proc/self/task`` (Linux).

    Example:
        >>> main = thread_states()[os.getpid()]
        >>> main[1] in "RS"
        True
    """
    states: dict[int, tuple[str, str]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return states
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue  # the thread ended while we looked
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2:].split(" ", 1)[0]
        states[int(tid)] = (name, state)
    return states


def cuda_driver_state() -> str:
    """``"not loaded"``, ``"not initialised"`` or ``"initialised (code N)"``, asking without initialising.

    A child forked from a process whose CUDA driver was initialised cannot use CUDA
    ("CUDA error: initialization error"). Importing torch maps libcuda and starts one of
    its threads even when nothing initialises it (seen on an H100 with torch 2.11), so
    neither the mapping nor the threads tell; ``cuCtxGetCurrent`` does: before ``cuInit``
    it returns CUDA_ERROR_NOT_INITIALIZED, and it initialises nothing itself. The library
    is only looked up if already loaded (``RTLD_NOLOAD``): the check never loads it.

    Example:
        >>> cuda_driver_state()     # a process that never touched CUDA
        'not loaded'
    """
    try:
        with open("/proc/self/maps") as maps:
            mapped = sorted({line.split()[-1] for line in maps if "libcuda.so" in line})
    except OSError:
        mapped = []
    if not mapped:
        return "not loaded"
    try:
        library = ctypes.CDLL(mapped[0], mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        context = ctypes.c_void_p()
        code = library.cuCtxGetCurrent(ctypes.byref(context))
    except (OSError, AttributeError) as exc:
        return f"initialised? (cannot ask: {exc})"
    return "not initialised" if code == _CUDA_ERROR_NOT_INITIALIZED else f"initialised (code {code})"


def _cuda_driver_problem() -> str | None:
    state = cuda_driver_state()
    if state in ("not loaded", "not initialised"):
        return None
    return f"the CUDA driver was {state} in the template"


def framework_problems() -> list[str]:
    """Why forking this process now would not be safe, per framework ([] when it is).

    Each check reads state only; none starts a runtime.

    Example:
        >>> framework_problems()    # a process that imported no framework
        []
    """
    problems = []
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is not None:
        ctx = context.context_safe()
        if ctx is not None and getattr(ctx, "_initialized", False):
            problems.append("TensorFlow's runtime has started in the template")
    if torch_probe.started_cuda() is not None:
        problems.append("torch initialised CUDA in the template")
    if jax_probe.backend_started():
        problems.append("JAX started its backend in the template")
    return problems


class ForkSafety:
    """The template's state right after its imports, and the check made before every fork."""

    #: How long a thread may be seen running before the fork is refused: a framework's
    #: idle pool thread wakes now and then, and OpenBLAS' threads spin for a while after
    #: their last task before they sleep; one that keeps running is doing work.
    BUSY_RETRIES = 100
    BUSY_WAIT_S = 0.005

    def __init__(self) -> None:
        self.settle()
        self.baseline = thread_states()

    @staticmethod
    def busy_threads() -> list[str]:
        return sorted(name for tid, (name, state) in thread_states().items() if tid != os.getpid() and state != "S")

    def settle(self, within: float = 3.0) -> None:
        """Right after the imports, wait (a little) for the framework threads to go to sleep."""
        deadline = time.monotonic() + within
        while self.busy_threads() and time.monotonic() < deadline:
            time.sleep(0.01)

    def problem(self) -> str | None:
        """None when a fork is safe now, else the reason in words."""
        problems = framework_problems()
        for attempt in range(self.BUSY_RETRIES):
            states = thread_states()
            new = sorted(name for tid, (name, _) in states.items() if tid not in self.baseline)
            if new:
                problems.append(f"a thread started after the imports ({new[0]!r})")
                break
            busy = sorted(name for tid, (name, state) in states.items() if tid != os.getpid() and state != "S")
            if not busy:
                break
            if attempt == self.BUSY_RETRIES - 1:
                problems.append(f"a framework thread kept running ({busy[0]!r})")
            time.sleep(self.BUSY_WAIT_S)
        driver = _cuda_driver_problem()
        if driver:
            problems.append(driver)
        return "; ".join(problems) or None


class ForkedChild(BaseException):
    """Raised in a forked child, caught by :func:`main`: the child leaves the template's loop
    (and every frame of it) before it becomes the job. A BaseException, so that the loop's
    ``except Exception`` (a bad request must not end the template) lets it through."""

    def __init__(self, template: Template, request: Fork, fds: list[int]) -> None:
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


class Template:
    """The template's loop; see the module docstring."""

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
        self.owner_lock_paths = [os.path.join(folder, f"kerasmagic-kernel-{parent_pid}-owner.lock")
                                 for folder in (tempfile.gettempdir(), "/dev/shm")]
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
            self.kernel_gone(kernel_dead=False)  # the pool closed us: nothing may outlive it
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

    def become_job(self, request: Fork, fds: list[int]) -> tuple[int, int, int, list[str]]:
        """In the child: a session of its own, the job's pipes and environment; what
        :func:`~kerasmagic.isolation.child.worker.serve_forked_job` then takes (the job's channel,
        the kernel's watch pipe, the template's pid, the modules the template was asked for)."""
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
        return channel_fd, self.watch_fd, os.getppid(), self.modules

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

    def kernel_gone(self, kernel_dead: bool = True) -> None:
        """The kernel died or closed us: end every job's process group, remove their files, exit."""
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
            shutil.rmtree(directory, ignore_errors=True)
        if self.subreaper:
            self.end_orphans()
        # The kernel's own "my files are in use" locks (pool.hold_owner_lock) go with it.
        for path in self.owner_lock_paths if kernel_dead else ():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.exit(PARENT_GONE_EXIT)

    def exit(self, code: int) -> None:
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        os._exit(code)


def preload(modules: list[str], learned: list[str] | tuple[str, ...] = ()) -> float:
    """Import the frameworks; their chatter goes to the log that fd 1 and 2 point at.

    ``modules`` (the kernel's, and what ``preload=`` asked for) must import; ``learned`` (what
    earlier jobs imported themselves) are imported if they can be: one that fails is left to
    the job, with a line in the log, and never fails the template.
    """
    started = time.perf_counter()
    # Loaded (and timed) with the frameworks, their chatter in the log: display() is patched per job.
    import IPython.core.formatters  # noqa: F401, PLC0415

    __import__(display_functions_module())

    for name in modules:
        __import__(name)
    for name in learned:
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 - a learned module is a hint, not a requirement
            print(f"kerasmagic: learned module {name} did not import here ({type(exc).__name__}: {exc}); "
                  "the jobs import what they need themselves", file=sys.stderr)
    _preload_worker_probes()
    return time.perf_counter() - started


def modules_present(asked: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The heavy modules (and those ``asked`` for) this process has imported: what a template
    had for its jobs, what a job found when it started.

    Example:
        >>> "numpy" in modules_present() or "numpy" not in sys.modules
        True
    """
    return [name for name in dict.fromkeys((*PRELOADABLE, *asked)) if name in sys.modules]


def imported_since(before: set[str] | frozenset[str]) -> list[str]:
    """The heavy modules imported since ``before`` (a copy of ``sys.modules``' keys) was taken.

    Example:
        >>> imported_since(set(sys.modules))
        []
    """
    return [name for name in PRELOADABLE if name in sys.modules and name not in before]


def _preload_worker_probes() -> None:
    """What a job's own sampling imports, imported once here instead of in every job.

    With TensorFlow, torch or JAX imported, each sample of a job reads NVML, and the first
    one imported ``pynvml`` (a large module of ctypes structures): 37 ms of CPU and 5k
    copy-on-write page faults inside every job's first fit, measured on 2 cores. Importing
    it loads no library and starts nothing (``nvmlInit`` stays the job's).
    """
    from ..probes.sample import gpu_framework_imported  # noqa: PLC0415 - after the frameworks, as a job asks

    if gpu_framework_imported():
        try:
            import pynvml  # noqa: F401
        except ImportError:
            pass  # the job's sample says NVML is not installed, as it would anyway


def freeze_imports() -> None:
    """Move every object the imports made into Python's permanent generation, which the garbage
    collector never visits: in a forked child, a full collection otherwise walks the whole
    imported heap (about 400k objects with TensorFlow and Keras), writes each object's GC
    header and so copies every page that holds one. Measured on 2 cores: one such collection
    in each job's first ``fit()``, 0.3 s of CPU and 90 MiB of copy-on-write faults, which a
    warm kernel never pays (the gc state every fork starts from is the same, so every job did).

    Collected first, so that what the imports left as garbage is freed, not kept forever;
    :meth:`Template.fork` freezes again what the template made since.
    """
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kerasmagic.isolation.template")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--watch-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("--learned", default="")
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    set_parent_death_signal()
    if os.getppid() != args.parent_pid:
        os._exit(PARENT_GONE_EXIT)
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
        Template(control, args.watch_fd, args.parent_pid, args.log, safety,
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

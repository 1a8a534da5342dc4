"""A scripted fake of the process edge: job processes that replay a script, so that the drive
loop, :class:`~kerasmagic.isolation.runner.JobRun` and the local backend can be tested in
milliseconds, without forking.

Only the edge is fake. A :class:`ScriptedPool` stands where the real
:class:`~kerasmagic.isolation.pool.WorkerPool` stands (``launch``/``release``/``abandon``/
``learn``), and hands out :class:`ScriptedProcess` handles with the surface of a real
:class:`~kerasmagic.isolation.processes.JobProcess`: a real ``socketpair`` channel and real
stdout/stderr pipes, which a thread writes into as the script says, and an exit code it sets.
Everything above (the selector, the messages, the phases, the outcomes) is the real code.

Example::

    pool = ScriptedPool([ready(), expect_job(), say("hello\\n"), done(value=42), exit_with(0)])
    result = run_job(job, spec, IsolatedResult("a job"), pool=pool)
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from kerasmagic.isolation.job_memory import JobMemoryLimit
from kerasmagic.isolation.messages import JOB_CHANNEL, Done, ImportFailed, Message, Raised, Ready, RunJob, dumps
from kerasmagic.isolation.pool import Launch
from kerasmagic.isolation.processes import JobProcess
from kerasmagic.isolation.shipping import encode

#: Pids no process can have (Linux's pid_max is at most 2**22): a stray signal to one hits nobody.
_PIDS = itertools.count(2**22 + 1000)

Step = Callable[["ScriptedProcess"], None]


class ScriptedProcess(JobProcess):
    """A job's process that does what its script says, from a thread of the test process."""

    origin = "forked"

    def __init__(self, spec: Any, script: list[Step], rss_bytes: int = 500 << 20) -> None:
        parent, child = socket.socketpair()
        out_read, self._out_write = os.pipe()
        err_read, self._err_write = os.pipe()
        super().__init__(spec, next(_PIDS), Connection(parent.detach()), out_read, err_read)
        self.channel = Connection(child.detach())
        self.script = list(script)
        self.rss = rss_bytes
        self.request: RunJob | None = None
        self.killed = False
        self._code: int | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._play, name=f"test-scripted-process-{self.pid}", daemon=True)

    # --- what the kernel sees -------------------------------------------------------------------

    def start(self) -> ScriptedProcess:
        self._thread.start()
        return self

    def poll(self) -> int | None:
        return self._code

    def end_group(self) -> None:
        if self._code is None:
            self.killed = True
            self.exit(-signal.SIGKILL)

    def resident_bytes(self) -> int | None:
        return self.rss

    def enter_memory_limit(self, limit: JobMemoryLimit) -> None:
        limit.watch_only(self.rss, "a scripted process")

    def join(self) -> None:
        self._ended.set()
        self._thread.join(timeout=5)

    # --- what the script does ---------------------------------------------------------------------

    def send(self, message: Message) -> None:
        if message.sender is None:
            message.sender = self.pid
        self.channel.send_bytes(dumps(message))

    def write(self, stream: str, text: str) -> None:
        os.write(self._out_write if stream == "stdout" else self._err_write, text.encode())

    def close_channel(self) -> None:
        """Shut the channel down (the kernel reads EOF; a step blocked on it wakes up). The thread
        playing the script closes its end when the script is over: never under a blocked read."""
        with self._lock:
            if self.channel.closed:
                return
            try:
                with socket.socket(fileno=os.dup(self.channel.fileno())) as end:
                    end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def exit(self, code: int) -> None:
        """The process ends: its descriptors close (EOF for the kernel), then its exit status is there."""
        with self._lock:
            if self._code is not None:
                return
            for fd in (self._out_write, self._err_write):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.close_channel()
        with self._lock:
            self._code = code
        self._ended.set()

    def _play(self) -> None:
        try:
            for step in self.script:
                if self._code is not None:
                    return
                step(self)
        except (OSError, EOFError):
            pass  # killed while it wrote or read: its descriptors are shut
        finally:
            with self._lock:
                self.channel.close()

    def wait_ended(self, timeout: float) -> bool:
        return self._ended.wait(timeout)


class ScriptedPool:
    """Stands where the pool stands: each launch replays the next script (or fails as told)."""

    def __init__(self, *scripts: list[Step] | BaseException, size: int = 4, state: str = "warm") -> None:
        self.scripts = list(scripts)
        self.size = size
        self.state = state
        self.processes: list[ScriptedProcess] = []
        self.released: list[ScriptedProcess] = []
        self.abandoned: list[Launch] = []
        self.learned: list[str] = []

    def launch(self, spec: Any, directory: str, fixed: Any = ()) -> Launch:
        launch = Launch(future=Future(), state=self.state, template_pid=1)
        script = self.scripts.pop(0)
        if isinstance(script, BaseException):
            launch.future.set_exception(script)
            return launch
        process = ScriptedProcess(spec, script).start()
        self.processes.append(process)
        launch.future.set_result(process)
        return launch

    def release(self, worker: ScriptedProcess) -> None:
        worker.kill()
        worker.join()
        self.released.append(worker)

    def abandon(self, launch: Launch) -> None:
        self.abandoned.append(launch)

    def learn(self, modules: list[str], spec: Any) -> list[str]:
        self.learned.extend(modules)
        return modules

    def idle_cost(self) -> tuple[int, int]:
        return 0, 0

    def spare_states(self) -> list[dict[str, Any]]:
        return []

    def end_spares(self) -> int:
        return 0


# --- steps -------------------------------------------------------------------------------------


def ready(modules: tuple[str, ...] = ("numpy",)) -> Step:
    """Say ``ready``, as a forked child does at once."""
    return lambda process: process.send(Ready(pid=process.pid, rss_bytes=process.rss, import_s=0.0, forked=True,
                                              modules=list(modules)))


def import_failed(error: str) -> Step:
    return lambda process: process.send(ImportFailed(error=error, traceback=f"Traceback ...\n{error}\n"))


def expect_job() -> Step:
    """Wait for the ``job`` message, and keep it (``process.request``)."""
    def step(process: ScriptedProcess) -> None:
        message = JOB_CHANNEL.loads(process.channel.recv_bytes())
        assert isinstance(message, RunJob), message
        process.request = message

    return step


def say(text: str, stream: str = "stdout") -> Step:
    return lambda process: process.write(stream, text)


def send(message: Message | Callable[[ScriptedProcess], Message]) -> Step:
    return lambda process: process.send(message(process) if callable(message) else message)


def send_raw(wire: dict[str, Any]) -> Step:
    """Something that is not one of the channel's messages."""
    import pickle

    return lambda process: process.channel.send_bytes(pickle.dumps(wire))


def sample(rss_bytes: int) -> Step:
    from kerasmagic.isolation.messages import Sample

    return lambda process: process.send(Sample(reading={"pid": process.pid, "ts": time.time(), "rss_bytes": rss_bytes}))


def _final_sample(process: ScriptedProcess) -> dict[str, Any]:
    return {"pid": process.pid, "ts": time.time(), "rss_bytes": process.rss, "rss_peak_bytes": process.rss + 1}


def done(value: Any = None, outputs: dict[str, Any] | None = None, imported: tuple[str, ...] = (),
         sender: int | None = None) -> Step:
    """The job ran through: its value (or outputs) encoded into the job's folder, as a worker does."""
    def step(process: ScriptedProcess) -> None:
        assert process.request is not None, "done() comes after expect_job()"
        folder = process.request.job.directory
        process.send(Done(
            value=None if value is None else encode("value", value, folder),
            outputs={name: encode(name, item, folder) for name, item in (outputs or {}).items()},
            run_s=0.01, final_sample=_final_sample(process), first_line_ts=time.time(), imported=list(imported),
            sender=sender))

    return step


def raised(exc_type: str, exc_message: str, stage: str = "code", name: str | None = None) -> Step:
    def step(process: ScriptedProcess) -> None:
        process.send(Raised(stage=stage, name=name, exc_type=exc_type, exc_message=exc_message,
                            traceback=f"Traceback (most recent call last):\n  ...\n{exc_type}: {exc_message}\n",
                            run_s=0.01, final_sample=_final_sample(process)))

    return step


def grow_to(rss_bytes: int) -> Step:
    """From now on its resident set is ``rss_bytes`` (what the memory watch reads)."""
    def step(process: ScriptedProcess) -> None:
        process.rss = rss_bytes

    return step


def close_channel() -> Step:
    return lambda process: process.close_channel()


def exit_with(code: int) -> Step:
    """The process ends with ``code`` (negative: killed by that signal)."""
    return lambda process: process.exit(code)


def hang() -> Step:
    """Do nothing more until killed."""
    return lambda process: process.wait_ended(30)


def interrupt() -> Step:
    """A Ctrl-C in the kernel (SIGINT to the test process, which raises KeyboardInterrupt there)."""
    return lambda process: os.kill(os.getpid(), signal.SIGINT)


def pause(seconds: float) -> Step:
    return lambda process: process.wait_ended(seconds)

"""The node side of ``on="ray"``: one agent per node per kernel, and the relay task per job.

The agent is a Ray actor pinned to its node. It owns an ordinary
:class:`~kerasmagic.isolation.pool.WorkerPool`, so the node gets exactly what the kernel
gets locally: a template that imports the kernel's frameworks once and never starts them,
and a fork of it per job, which runs the job with the same worker code and protocol and
exits, giving back all of its memory (GPU memory too). It drives each job with the kernel's
own loop and local backend (:mod:`kerasmagic.isolation.local`), into a :class:`QueueSink`
whose events it streams back. The agent is to its templates what
the kernel is locally: if the agent dies (its node is removed, the kernel disconnects),
its templates and their children die with it.

Ray decides where a job runs through :func:`relay_job`, a task that asks for the job's
resources. It starts on the node Ray picks, hands the job to that node's agent, and
passes the job's events (output, displays, samples, the final message with the returned
files) back to the kernel as a streaming generator; it holds the job's CPUs and GPUs
until the job ends, so Ray's accounting stays true. The relay imports no framework.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..job import Job
from ..leftovers import our_folders, release_owner_locks, remove_kernel_files
from ..local import LocalBackend
from ..messages import Accepted, Display, Done, Final, Message, NoAgent, Output, Placed, RunJob, Sample
from ..pool import WorkerPool
from ..result import IsolatedResult
from ..runner import JobRun, drive
from ..shipping import make_job_directory
from ..spec import VOLATILE_ENV, WorkerSpec
from .session_watch import start_file_reaper
from .transfer import read_files, rebase_job, returned_specs, spec_paths, write_files

logger = logging.getLogger(__name__)

NAMESPACE = "kerasmagic"
#: Events are sent in batches at most this often; a job that prints a line per batch must
#: not cost an object-store round trip per line.
_BATCH_S = 0.05
#: Templates on a node outlive their last job this long (the kernel's default is 10 minutes).
AGENT_IDLE_TIMEOUT_S = 600.0


#: The agent's first answer to a job: it was alive when it took the job.
_ACCEPTED = Accepted().to_wire()

def agent_name(session: str, node_id: str) -> str:
    """The agent's actor name: one per kernel (``session``) and node.

    Example:
        >>> agent_name("01000000-4242", "3b3408")
        'kerasmagic-agent-01000000-4242-3b3408'
    """
    return f"kerasmagic-agent-{session}-{node_id}"


def _node_environment(overrides: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The node's own environment plus the kernel's overrides (``env=``, the Keras backend).

    The node's PATH, HOME and virtualenv are the ones that exist there; the kernel's would
    not. Ray's own per-worker variables are left out: they differ from worker to worker
    and would split the template.
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # Ray sets OMP_NUM_THREADS to the worker's CPU count (1 for this zero-CPU actor) unless
    # the user did: a job given 4 CPUs must not inherit the agent's 1.
    environment.pop("OMP_NUM_THREADS", None)
    environment.update(overrides)
    for key in VOLATILE_ENV:
        environment.pop(key, None)
    return tuple(sorted(environment.items()))


def job_environment(overrides: dict[str, str], num_cpus: float | None,
                    gpu_ids: list[str] | None = None) -> tuple[tuple[str, str], ...]:
    """A job's environment on this node, and the one its template is warmed with: one function for
    both, so that the warm-up starts the very template the first job needs.

    ``OMP_NUM_THREADS`` is read at import time (it is not in
    :data:`~kerasmagic.isolation.spec.LATE_ENV`): a warm-up without it started a template the
    job could not use, and the job's own template replaced it (issue 23, fault 11).

    Example:
        >>> dict(job_environment({}, 4))["OMP_NUM_THREADS"]
        '4'
        >>> dict(job_environment({"OMP_NUM_THREADS": "2"}, 4))["OMP_NUM_THREADS"]
        '2'
    """
    overrides = dict(overrides)
    if gpu_ids is not None:
        # The GPUs Ray gave the relay task are the job's: the child sees those and no other.
        overrides["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    if "OMP_NUM_THREADS" not in overrides:
        # What Ray gives any task: OpenMP pools sized to the CPUs the job holds, not to the node.
        overrides["OMP_NUM_THREADS"] = str(max(1, int(num_cpus or 1)))
    return _node_environment(overrides)


class QueueSink:
    """A job's sink on a node (:class:`~kerasmagic.isolation.sink.JobSink`): its output, displays and
    samples go into a queue that the agent streams to the kernel, and its values are read back as
    files instead of being rebuilt here (that would import the frameworks into the agent)."""

    def __init__(self) -> None:
        self.events: queue.Queue = queue.Queue()
        self.returned_files: dict[str, bytes] = {}
        self.done: Done | None = None

    def output(self, stream: str, text: str) -> None:
        if text:
            self.events.put(Output(stream=stream, text=text))

    def output_ended(self, stream: str) -> None:
        pass  # the text went as it came: the kernel's sink cuts it into lines

    def placed(self, where: str) -> None:
        pass

    def display(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.events.put(Display(data=data, metadata=metadata))

    def sample(self, reading: dict[str, Any]) -> None:
        self.events.put(Sample(reading=dict(reading)))

    def values(self, done: Done) -> str | None:
        paths = [path for spec in returned_specs(done) for path in spec_paths(spec)]
        self.returned_files = read_files(paths)
        self.done = done
        return None


def _kernel_place(kernel_cwd: str | None, kernel_sys_path: tuple[str, ...]) -> Callable[[Job], RunJob]:
    """How a node's job is sent to its process: with the kernel's working directory where it exists
    here (a shared filesystem, the same image), the agent's otherwise; the kernel's ``sys.path``
    entries that exist here first."""
    def request(job: Job) -> RunJob:
        message = RunJob.here(job)
        if kernel_cwd and os.path.isdir(kernel_cwd):
            message.cwd = kernel_cwd
        local = [p for p in kernel_sys_path if os.path.isdir(p)]
        message.sys_path = local + [p for p in message.sys_path if p not in local]
        return message

    return request


_OVER = object()  # the drive loop ended: nothing more will be queued


def _batched(events: queue.Queue) -> Iterator[list[dict[str, Any]]]:
    """Yield what is queued (wire dicts), consecutive output of one stream joined, until the run is over."""
    over = False
    while not over:
        batch = [events.get()]
        deadline = time.monotonic() + _BATCH_S
        while batch[-1] is not _OVER and time.monotonic() < deadline:
            try:
                batch.append(events.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        joined: list[Message] = []
        for event in batch:
            if event is _OVER:
                over = True
                continue
            last = joined[-1] if joined else None
            if isinstance(event, Output) and isinstance(last, Output) and last.stream == event.stream:
                last.text += event.text
            else:
                joined.append(event)
        if joined:
            yield [event.to_wire() for event in joined]


#: How often an agent looks whether its raylet still lives.
RAYLET_WATCH_S = 1.0

class NodeAgent:
    """One node's isolation pool, serving one kernel's jobs (a Ray actor; see the module).

    Example:
        >>> agent = ray.remote(NodeAgent).options(name=..., scheduling_strategy=...).remote()  # doctest: +SKIP
        >>> ray.get(agent.describe.remote())["hostname"]                                      # doctest: +SKIP
        'worker-3'
    """

    def __init__(self) -> None:
        self.pool = WorkerPool(idle_timeout=AGENT_IDLE_TIMEOUT_S)  # it sweeps what dead agents and kernels left
        self._runs: dict[str, JobRun] = {}
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._ended = False
        # Ray ends an agent with SIGTERM (ray.shutdown(), the kernel's exit, its job's end):
        # its owner locks and its templates' logs were left behind (issue 23, fault 5).
        atexit.register(self.shutdown)
        self._on_sigterm(signal.getsignal(signal.SIGTERM))
        # Often there is no SIGTERM to handle, or no time to handle it: a reaper removes the
        # files once this process is gone.
        start_file_reaper()
        threading.Thread(target=self._end_with_raylet, args=(os.getppid(),), name="kerasmagic-agent-raylet-watch",
                         daemon=True).start()

    def _end_with_raylet(self, raylet_pid: int) -> None:
        """A raylet that dies leaves its workers running (issue 23, fault 3): this agent, its
        template and a job ran on for minutes. The agent's parent is its raylet; once it is
        gone, end the templates and their jobs and leave."""
        while os.getppid() == raylet_pid:
            time.sleep(RAYLET_WATCH_S)
        logger.warning("kerasmagic: this node's raylet (pid %d) is gone: ending the node's jobs and agent",
                       raylet_pid)
        try:
            self.shutdown()
        finally:
            os._exit(1)

    def _on_sigterm(self, previous: Any) -> None:
        """On SIGTERM: end the templates and jobs, remove this agent's files, then whatever Ray does."""
        def ended(signum: int, frame: Any) -> None:
            self.shutdown()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        try:
            signal.signal(signal.SIGTERM, ended)
        except ValueError:  # not on the main thread: the exit hook and the next agent's sweep remain
            logger.debug("kerasmagic: the agent could not handle SIGTERM", exc_info=True)

    def describe(self) -> dict[str, Any]:
        """Where the agent is: node id, IP, hostname, pid, and its templates' state."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "agent_pid": os.getpid(),
            "templates": self.pool.template_states(),
            "running": self.pool.running(),
        }

    def warm(self, preload: list[str], overrides: dict[str, str], num_cpus: float | None = None,
             learned: list[str] | None = None) -> None:
        """Start the template for the kernel's frameworks now, before the first job asks: the one
        a job asking for ``num_cpus`` CPUs forks from (:func:`job_environment`), with what jobs
        on other nodes ``learned`` (:meth:`learn`) imported first.

        Never raises: the kernel does not wait for it, and Ray would print an uncollected
        error (a pool already shut down, a failed start) into the user's cell.
        """
        try:
            spec = WorkerSpec(tuple(preload), job_environment(overrides, num_cpus))
            if learned:
                self.pool.learn(list(learned), spec)
            self.pool.prestart(spec)
        except Exception:  # the first job starts it again and reports what fails
            logger.info("kerasmagic: warming the node's template failed", exc_info=True)

    def learn(self, modules: list[str], preload: list[str], overrides: dict[str, str],
              num_cpus: float | None = None) -> list[str]:
        """A job on another node imported ``modules`` itself: this node's templates import them
        first from now on, and one that does is started now. Returns what was new here.

        Never raises, for the reason :meth:`warm` gives.

        Example (the kernel's cluster session calls it on the other nodes' agents):
            >>> agent.learn.remote(["pandas"], ["numpy", "keras"], {}, 1.0)    # doctest: +SKIP
        """
        try:
            return self.pool.learn(list(modules), WorkerSpec(tuple(preload), job_environment(overrides, num_cpus)))
        except Exception:  # the next job imports them itself, as before
            logger.info("kerasmagic: learning %s on this node failed", modules, exc_info=True)
            return []

    def run(self, job_id: str, request: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
        """Run one job in a fork of this node's template; yield its events in batches.

        The first batch is ``[{"kind": "accepted"}]``, at once: the relay then knows the agent
        was alive when it took the job. The last batch ends with ``{"kind": "final", ...}``:
        the job's report, its error (pickled, without its report) and the files its values
        live in.
        """
        yield [_ACCEPTED]

        directory = make_job_directory()
        try:
            run, sink, backend = self._prepare(request, directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)  # an input that did not arrive, a version mismatch
            raise
        with self._lock:
            if job_id in self._cancelled:
                shutil.rmtree(directory, ignore_errors=True)
                return
            self._runs[job_id] = run
        events = sink.events

        def drive_here() -> None:
            try:
                drive([run], backend)
            except BaseException as exc:  # reported to the kernel as the job's error
                logger.exception("kerasmagic: the agent could not run job %s", job_id)
                run.error = run.error or exc
            finally:
                events.put(_OVER)

        driver = threading.Thread(target=drive_here, name=f"kerasmagic-agent-job-{job_id}", daemon=True)
        driver.start()
        try:
            yield from _batched(events)
        finally:
            driver.join()
            with self._lock:
                self._runs.pop(job_id, None)
                self._cancelled.discard(job_id)
        error = run.error
        if error is not None:
            # The report travels on its own, below. Our errors carry `result`; any other
            # exception gets the attribute here, which no exception class declares.
            error.result = None  # type: ignore[attr-defined]
        yield [Final(result=pickle.dumps(run.result, protocol=5), error=_pickled_error(error), done=sink.done,
                     files=sink.returned_files, agent=self.describe()).to_wire()]

    def _prepare(self, request: dict[str, Any], directory: str) -> tuple[JobRun, QueueSink, LocalBackend]:
        """The job's files written here, its paths rebased, its environment made: a run to drive, on this
        node's pool."""
        import ray

        moves = {}
        for kernel_folder, files_ref in request["folders"]:
            write_files(ray.get(files_ref), directory)
            moves[kernel_folder] = directory
        fields = dict(request["job"])
        fields["call"], fields["inputs"] = rebase_job(fields.get("call"), fields.get("inputs") or {}, moves)
        job = Job(directory=directory, **fields)
        environment = job_environment(request["overrides"], request.get("num_cpus"), request.get("gpu_ids"))
        spec = WorkerSpec(tuple(request["preload"]), environment)
        sink = QueueSink()
        run = JobRun(job, spec, IsolatedResult(request["label"]), timeout=request["timeout"], sink=sink)
        place = _kernel_place(request.get("cwd"), tuple(request.get("sys_path") or ()))
        return run, sink, LocalBackend(self.pool, request=place)

    def cancel(self, job_id: str) -> bool:
        """End the job now (timeout or Ctrl-C in the kernel): its process group is killed."""
        with self._lock:
            run = self._runs.get(job_id)
            if run is None:
                self._cancelled.add(job_id)  # it may not have arrived yet
                return False
        run.expire()
        return True

    def shutdown(self) -> None:
        """Kill the node's templates and jobs and remove this agent's files: its owner locks, its
        templates' logs, its job folders (the kernel is leaving, or Ray is ending the agent)."""
        if self._ended:
            return
        self._ended = True
        # The files first: after SIGTERM, Ray may SIGKILL the agent before its templates are
        # down. A template's log may go before the template; its jobs' folders go with them.
        release_owner_locks()
        remove_kernel_files(os.getpid(), our_folders())
        self.pool.shutdown()


def _pickled_error(error: BaseException | None) -> bytes | None:
    if error is None:
        return None
    try:
        return pickle.dumps(error, protocol=5)
    except Exception:  # noqa: BLE001 - an exception that cannot travel still says what it was
        return pickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"), protocol=5)


def relay_job(session: str, job_id: str, request: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """A Ray task: run the job on this node's agent and stream its events (see the module).

    Its first batch says where it runs; the object refs of the job's folders travel inside
    the request, so they are fetched by the agent on this node, once.
    """
    import ray

    context = ray.get_runtime_context()
    node_id = context.get_node_id()
    yield [Placed(node_id=node_id, gpu_ids=[str(g) for g in ray.get_gpu_ids()]).to_wire()]
    try:
        agent = ray.get_actor(agent_name(session, node_id), namespace=NAMESPACE)
    except ValueError:
        yield [NoAgent(node_id=node_id).to_wire()]
        return
    request = dict(request)
    # As for any Ray task: the job sees the GPUs Ray gave it, and none when it asked for none
    # (an unasked-for GPU would be used behind Ray's accounting).
    request["gpu_ids"] = [str(g) for g in ray.get_gpu_ids()]
    events = agent.run.remote(job_id, request)
    answered = False
    try:
        for ref in events:
            batch = ray.get(ref)
            if not answered and batch == [_ACCEPTED]:
                answered = True
                continue  # the relay's own business: the kernel hears of the job from its events
            yield batch
    except ray.exceptions.RayActorError:
        if not answered:
            # The agent was dead before it took the job (an earlier job killed it, or the OOM
            # killer did): Ray keeps its name for a while, so the kernel must start a new one
            # and send the job again (issue 23, fault 1). An agent that dies during a job
            # takes that job with it: a crash, told as one.
            yield [NoAgent(node_id=node_id, dead_agent=True).to_wire()]
            return
        raise
    except BaseException:
        # Cancelled by the kernel (its timeout, Ctrl-C) or failing: the job must not run on.
        agent.cancel.remote(job_id)
        raise

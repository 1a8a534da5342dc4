"""The kernel side of ``on="ray"``: jobs go to the cluster, their output comes into the cell.

:class:`RayBackend` fills the drive loop's seam (:class:`~kerasmagic.isolation.runner.Backend`)
for a Ray cluster. The jobs are the same :class:`~kerasmagic.isolation.runner.JobRun` objects a
local run drives, built by the same code (``run_isolated``, ``isolated_map``, ``%%fresh_model``),
and the loop is the same; ``start`` sends a job's encoded folder to the object store (a folder
shared by every item of a map goes up once) and submits a relay task with the job's resources;
``wait`` waits on all running jobs' event streams at once (:data:`~kerasmagic.isolation.messages.EVENT_CHANNEL`),
handing each job's output, displays and samples to its sink (output prefixed by job and node)
and enforcing timeouts; ``cancel`` kills a job wherever it is, on every node for a Ctrl-C.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import os
import pickle
import shutil
import sys
import time
from typing import Any

from ... import events
from ..errors import IsolationUsageError
from ..job import working_directory
from ..messages import EVENT_CHANNEL, Display, Final, MessageError, NoAgent, Output, Placed, Sample
from ..outcome import (
    from_node,
    interrupted,
    no_agent_after_restart,
    node_crashed,
    not_placed_in_time,
    ray_shut_down,
    relay_ended_without_result,
    summary_line,
    timed_out_on_node,
)
from ..runner import JobRun
from ..shipping import make_job_directory
from ..spec import PRELOADABLE, WorkerSpec, env_overrides, keras_backend
from .agent import NAMESPACE, NodeAgent, agent_name, relay_job
from .target import SHUTDOWN_WAIT_S, OnRay, connect, import_ray, wait_for_shutdown
from .transfer import job_specs, read_files, rebase_final, returned_specs, spec_paths, write_files

__all__ = ["ClusterSession", "RayBackend", "close_cluster_session", "cluster_session", "describe_agents"]

logger = logging.getLogger(__name__)

#: After a job's own timeout, the agent kills it and reports; the kernel gives it this long
#: to say so before it gives up on the node.
_REPORT_GRACE_S = 15.0
#: Between two looks at the running jobs' event streams (see RayBackend._poll_events): the
#: most an output line waits before it shows, at about 50 cheap calls a second.
_EVENT_POLL_S = 0.02
_job_numbers = itertools.count(1)


class ClusterSession:
    """This kernel's agents on the connected cluster: one per alive node, made on first use."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.job_id = ray.get_runtime_context().get_job_id()
        self.session = f"{self.job_id}-{os.getpid()}"
        self.agents: dict[str, Any] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.resources: dict[str, dict[str, float]] = {}
        self.gcs_address = _gcs_address(ray)
        self._agent_class = ray.remote(NodeAgent)
        #: What jobs imported themselves on some node: every node's templates import it first.
        self.learned: list[str] = []
        # max_calls=0: the relay never touches a GPU, so its worker may serve the next job
        # (Ray's default for a task with GPUs is a new worker per call).
        self._relay = ray.remote(max_calls=0, max_retries=0)(relay_job)

    def refresh(self, preload: tuple[str, ...], overrides: dict[str, str], num_cpus: float) -> None:
        """An agent on every alive node that has none yet; each starts its template at once: the
        one a job that asks for ``num_cpus`` CPUs forks from (its ``OMP_NUM_THREADS``)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = {node["NodeID"]: node for node in self.ray.nodes() if node.get("Alive")}
        for node_id in list(self.agents):
            if node_id not in alive:
                del self.agents[node_id]
        for node_id in list(self.nodes):
            if node_id not in alive:
                del self.nodes[node_id]
        self.resources = {node_id: dict(node.get("Resources") or {}) for node_id, node in alive.items()}
        for node_id, node in alive.items():
            self.nodes[node_id] = {"node_id": node_id, "ip": node.get("NodeManagerAddress", ""),
                                   "hostname": node.get("NodeManagerHostname", "")}
            if node_id in self.agents:
                continue
            agent = self._agent_class.options(
                name=agent_name(self.session, node_id), namespace=NAMESPACE, get_if_exists=True, num_cpus=0,
                max_concurrency=1000, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
            # warm() never raises: nothing to collect.
            agent.warm.remote(list(preload), overrides, num_cpus, list(self.learned))
            self.agents[node_id] = agent

    def spread_learned(self, modules: list[str], node_id: str | None, preload: tuple[str, ...],
                       overrides: dict[str, str], num_cpus: float) -> None:
        """A job on ``node_id`` imported ``modules`` itself, and that node's agent learned them:
        the other nodes' agents learn them too, so that a job Ray sends anywhere next finds them
        in its template (issue 23, part 2: "locally and on every Ray node"). Waits for their
        answers (milliseconds: each starts its new template in the background), so that the
        next job cannot reach an agent before the news does.

        Example (after a job on node ``a1`` imported pandas itself):
            >>> session.spread_learned(["pandas"], "a1", ("numpy", "keras"), {}, 1.0)    # doctest: +SKIP
        """
        new = [m for m in modules if m in PRELOADABLE and m not in self.learned and m not in preload]
        if not new:
            return
        self.learned.extend(new)
        refs = [agent.learn.remote(new, list(preload), overrides, num_cpus)
                for other, agent in self.agents.items() if other != node_id]
        _collect_quietly(self.ray, refs, timeout=5.0)

    def forget_agent(self, node_id: str) -> None:
        """The node's agent is gone (killed, crashed): the next refresh starts a new one."""
        self.agents.pop(node_id, None)

    def offered(self) -> str:
        """What the nodes offer, for a job that no node took: "2 nodes: 1 CPU, 1 CPU 1 GPU"."""
        parts = []
        for resources in self.resources.values():
            cpus, gpus = resources.get("CPU", 0), resources.get("GPU", 0)
            parts.append(f"{cpus:g} CPU" + (f" {gpus:g} GPU" if gpus else ""))
        return f"{len(parts)} node(s): " + ", ".join(parts) if parts else "no alive node"

    def label(self, node_id: str) -> str:
        """How output lines name a node: its IP, with its id where IPs repeat (one machine)."""
        node = self.nodes.get(node_id, {})
        ip = node.get("ip") or "?"
        if sum(other.get("ip") == ip for other in self.nodes.values()) > 1:
            return f"{ip}/{node_id[:6]}"
        return ip

    def node_for(self, wanted: str | None) -> str | None:
        """The node id a job is pinned to (``node=`` gives an id, a prefix of one, or an IP)."""
        if wanted is None:
            return None
        matches = [node_id for node_id, node in self.nodes.items()
                   if node_id.startswith(wanted) or node.get("ip") == wanted or node.get("hostname") == wanted]
        if len(matches) != 1:
            known = ", ".join(f"{n['ip']} ({i[:8]})" for i, n in self.nodes.items())
            what = "no alive node" if not matches else f"{len(matches)} nodes"
            raise IsolationUsageError(f"node={wanted!r} matches {what}; the cluster's nodes: {known}. Give a node id "
                                      "(ray.nodes()[i]['NodeID'], a unique prefix is enough) or a unique IP")
        return matches[0]

    def relay(self, target: OnRay, node_id: str | None) -> Any:
        options = dict(target.task_options())
        if node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        return self._relay.options(**options)


    def close(self, timeout: float = 10.0) -> None:
        """End every agent's templates and jobs and the agents themselves (kernel exit, ``close_cluster_session``)."""
        agents, self.agents = list(self.agents.values()), {}
        if not agents or not self.ray.is_initialized():
            return
        # Each waited for on its own: a dead agent (its node is gone) must not cut short the
        # others' cleanup, and none is killed before its own shutdown has finished.
        deadline = time.monotonic() + timeout
        for pending in [agent.shutdown.remote() for agent in agents]:
            try:
                self.ray.get(pending, timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # a node already gone took its processes with it
                logger.debug("kerasmagic: an agent did not answer its shutdown", exc_info=True)
        for agent in agents:
            try:
                self.ray.kill(agent)
            except Exception:  # already dead
                logger.debug("kerasmagic: agent already gone", exc_info=True)


_session: ClusterSession | None = None
_exit_hook: list[bool] = []


def describe_agents(timeout: float = 10.0) -> list[dict[str, Any]]:
    """This kernel's node agents: node id, IP, hostname, pid, templates, jobs running.

    Example:
        >>> describe_agents()    # before any job ran on a cluster
        []
    """
    if _session is None or not _session.agents:
        return []
    ray = _session.ray
    pending = {agent.describe.remote(): node_id for node_id, agent in _session.agents.items()}
    described = []
    for ref in pending:
        try:
            described.append(ray.get(ref, timeout=timeout))
        except Exception:  # an agent whose node died: nothing left to describe
            logger.debug("kerasmagic: the agent on node %s is gone", pending[ref], exc_info=True)
    return described


def close_cluster_session() -> None:
    """End this kernel's agents on the cluster now: their templates, jobs and files go.

    Runs by itself when the kernel exits (before Ray's own disconnect); call it before
    ``ray.shutdown()`` to end them at once.

    Example:
        >>> close_cluster_session()    # nothing to do when no job ran on a cluster
    """
    global _session
    session, _session = _session, None
    if session is not None:
        session.close()


def cluster_session(target: OnRay) -> tuple[ClusterSession, str]:
    """The session for the cluster this process is connected to (connecting first); and a note."""
    global _session
    ray = import_ray()
    note = connect(target)
    job_id = ray.get_runtime_context().get_job_id()
    # Job ids restart at 01000000 on every cluster: the cluster's address tells a reconnect apart.
    if _session is None or _session.job_id != job_id or _session.gcs_address != _gcs_address(ray):
        if not _exit_hook:
            # Registered after ray.init's own exit hook, so it runs first: agents end cleanly.
            atexit.register(close_cluster_session)
            _exit_hook.append(True)
        _session = ClusterSession(ray)  # a new connection: the old agents died with the old one
    return _session, note


def _gcs_address(ray: Any) -> str:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - an old Ray without it: the job id alone decides
        return ""


def _overrides(spec: WorkerSpec) -> dict[str, str]:
    """What a job's environment must carry to a node: ``env=`` and the kernel's Keras backend.

    The node keeps its own PATH, HOME and the rest: the kernel's would point at this machine.
    """
    changed = env_overrides(spec)
    keras = sys.modules.get("keras")
    backend = keras_backend(keras) if keras is not None else None
    if backend:
        changed["KERAS_BACKEND"] = backend
    changed.pop("CUDA_VISIBLE_DEVICES", None)  # Ray assigns GPUs on the cluster
    return changed


def _collect_quietly(ray: Any, refs: list[Any], timeout: float = 2.0) -> None:
    """Fetch fire-and-forget results so that a dead agent's error is not printed into the cell by Ray."""
    deadline = time.monotonic() + timeout
    for ref in refs:
        try:
            ray.get(ref, timeout=max(0.05, deadline - time.monotonic()))
        except Exception:  # the agent or its node is gone: nothing left to cancel there
            logger.debug("kerasmagic: an agent did not answer a cancel", exc_info=True)


def _asked(target: OnRay | None) -> str:
    if target is None:
        return "?"
    asked = [f"num_cpus={target.num_cpus:g}"] + ([f"num_gpus={target.num_gpus:g}"] if target.num_gpus else []) \
        + ([f"memory={target.memory}"] if target.memory else []) + ([f"node={target.node!r}"] if target.node else [])
    return ", ".join(asked)




def _folders_of(run: JobRun) -> list[str]:
    """The local folders a job's files are in: its own, and a map's shared one."""
    folders = {run.job.directory}
    for spec in job_specs(run.job.call, run.job.inputs):
        for path in spec_paths(spec):
            folders.add(os.path.dirname(path))
    return sorted(folders)


class RayBackend:
    """Jobs on the Ray cluster that ``target`` names (see the module); each job's state is a
    ``_RayJob``, the run's ``attempt``."""

    capacity: int | None = None  # the cluster's resources decide what really runs at once
    not_started = "interrupted before a job started on the cluster"

    def __init__(self, target: OnRay) -> None:
        self.target = target
        self.session: ClusterSession | None = None
        self.ray: Any = None
        self.node_id: str | None = None
        self.uploaded: dict[str, Any] = {}  # local folder -> object ref: a shared folder goes up once
        self.users: dict[str, int] = {}  # local folder -> jobs not yet over that need it

    def open(self, runs: list[JobRun]) -> None:
        """Connect (or use the connection), and start an agent on every node that has none."""
        session, note = cluster_session(self.target)
        self.session, self.ray = session, session.ray
        self.uploaded, self.users = {}, {}  # per drive: a backend may drive several in turn (a map's passes)
        for run in runs:
            run.result.on = "ray"
            run.result.cluster_note = note
        if runs:
            session.refresh(runs[0].spec.preload, _overrides(runs[0].spec), self.target.num_cpus)
        self.node_id = session.node_for(self.target.node)

    def start(self, run: JobRun) -> None:
        """Send the job's folders up (those already there are not sent again), then submit its relay."""
        job = run.attempt = _RayJob(run, self)
        for folder in _folders_of(run):
            if folder not in self.uploaded:
                paths = [os.path.join(folder, name) for name in os.listdir(folder)]
                self.uploaded[folder] = self.ray.put(read_files(paths))
            self.users[folder] = self.users.get(folder, 0) + 1
            job.folders.append((folder, self.uploaded[folder]))
        # A job waits for resources on the cluster: that counts, as waiting for a process does locally.
        # Until a node takes it, nothing runs and nothing else will report: the timeout alone.
        run.begin()
        job.submit(self.node_id)

    def wait(self, runs: list[JobRun]) -> bool:
        """Wait on the running jobs' event streams at once; hand each batch to its job."""
        ray = self.ray
        for run in runs:
            if run.attempt.needs_agent_on is not None and run.phase not in ("over", "cancelled"):
                run.attempt.resubmit()
        ready = self._poll_events(runs)
        if not ray.is_initialized():
            self._shut_down_under(runs)
            return False
        by_events = {id(run.attempt.events): run for run in runs}
        for events_ref in ready:
            job = by_events[id(events_ref)].attempt
            try:
                batch = ray.get(next(events_ref))
            except StopIteration:
                if job.needs_agent_on is None:  # else it is sent again, to the node's new agent
                    job.conclude()
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - Ray's errors for a dead node, worker or task
                job.crashed(exc)
            else:
                job.handle(batch)
        now = time.perf_counter()
        for run in runs:
            if run.phase not in ("over", "cancelled") and run.deadline is not None and now >= run.deadline:
                run.attempt.cancel("timeout")
        return True

    def cancel(self, run: JobRun, why: str) -> None:
        # After ray.shutdown() any Ray call would start a new local cluster: none is made.
        if run.attempt is None and why == "interrupt":  # a Ctrl-C before it was started: nothing on the cluster
            run.fail(interrupted(run.result, "the isolated job"))
        elif run.attempt is None:
            run.cancel()
        elif self.ray is not None and self.ray.is_initialized():
            run.attempt.cancel(why)

    def release(self, run: JobRun) -> None:
        """Its inputs leave the object store with it; its folder here goes."""
        job = run.attempt
        run.remove_folder()
        if job is None or not self.ray.is_initialized():
            # After ray.shutdown() nothing of Ray may run, the destructors of its references
            # included (a dropped event stream calls into the core worker): they stay with the run.
            return
        for folder, _ in job.folders:
            self.users[folder] -= 1
            if self.users[folder] == 0:
                del self.uploaded[folder]
        # The job refers to the run: dropped here, its final event (the files of its values) goes at
        # once, not at the garbage collector's next full pass (24 jobs of 2 MB grew the kernel 58 MiB).
        run.attempt = None

    def close(self) -> None:
        pass

    def _poll_events(self, runs: list[JobRun]) -> list[Any]:
        """The event streams that have something, waiting up to a quarter second in short polls.

        ``ray.shutdown()`` from another thread while this thread is inside Ray's blocking wait can
        leave that wait spinning for ever (seen in CI: the cell never returned). So no call here
        blocks inside Ray: each is a zero-timeout look, made only while Ray is connected (after a
        shutdown, any Ray call would start a new local cluster), with the waiting done in Python.
        """
        ray = self.ray
        streams = [run.attempt.events for run in runs if run.attempt.events is not None]
        deadline = time.perf_counter() + 0.25
        while True:
            if not ray.is_initialized():
                return []
            try:
                ready, _ = ray.wait(streams, num_returns=1, timeout=0) if streams else ([], [])
            except SystemExit:
                # Ray's answer to a call after ray.shutdown() (from another thread or cell).
                if ray.is_initialized():
                    raise
                return []
            if ready or time.perf_counter() >= deadline:
                return ready
            time.sleep(_EVENT_POLL_S)

    def _shut_down_under(self, runs: list[JobRun]) -> None:
        """``ray.shutdown()`` ran while jobs did: they end here in words, and nothing of Ray is called
        again (any call would quietly start a new local cluster, issue 23, fault 2)."""
        global _session
        if _session is self.session:
            _session = None  # its agents went with the connection; a later ray.init() gets new ones
        # The cell returns once the shutdown has finished: a ray.init() right after it must not run
        # while the shutdown still tears down (issue 33, item 11).
        pending = None if wait_for_shutdown(self.ray) else SHUTDOWN_WAIT_S
        for run in runs:
            if run.phase not in ("over", "cancelled"):
                run.output_ended()
                _fail(run, ray_shut_down(run.result, run.attempt.where(), run.last_output(), pending))


def _fail(run: JobRun, error: BaseException, status: str | None = None) -> None:
    """Fail the run; a report without an error line gets the error's first line (the sidebar and
    the map's summary show it)."""
    first = run.error is None
    run.fail(error, status)
    if first and not run.result.error:
        run.result.error = summary_line(error)


class _RayJob:
    """One run's job on the cluster: its relay task, its event stream, its node."""

    def __init__(self, run: JobRun, backend: RayBackend) -> None:
        self.run = run
        self.backend = backend
        self.job_id = f"{os.getpid()}-{next(_job_numbers)}"
        self.events: Any = None  # Ray's ObjectRefGenerator of event batches
        self.node_id: str | None = None
        self.final: Final | None = None
        self.folders: list[tuple[str, Any]] = []
        self.needs_agent_on: str | None = None
        self.resubmitted = False

    @property
    def session(self) -> ClusterSession:
        if self.backend.session is None:
            raise RuntimeError("the Ray backend starts jobs only once it is open")
        return self.backend.session

    # --- submitting ---------------------------------------------------------------------------

    def request(self) -> dict[str, Any]:
        run = self.run
        # Every field of the Job but where its folder is (the node has its own): a field
        # added to Job reaches the node without a change here.
        job_fields = {f.name: getattr(run.job, f.name) for f in dataclasses.fields(run.job)
                      if f.name not in ("directory", "owns_directory")}
        return {
            "label": run.label, "job": job_fields, "folders": self.folders, "preload": list(run.spec.preload),
            "overrides": _overrides(run.spec), "cwd": working_directory(), "sys_path": [p for p in sys.path if p],
            "timeout": run.timeout, "num_cpus": self.backend.target.num_cpus,
        }

    def submit(self, node_id: str | None) -> None:
        self.events = self.session.relay(self.backend.target, node_id).remote(self.session.session, self.job_id,
                                                                              self.request())

    def resubmit(self) -> None:
        """Send the job again to the node that had no agent, now that it has one."""
        session = self.session
        node_id, self.needs_agent_on = self.needs_agent_on, None
        logger.info("kerasmagic: job %s sent again to node %s, which had no agent", self.job_id, node_id)
        session.forget_agent(node_id or "")
        session.refresh(self.run.spec.preload, _overrides(self.run.spec), self.backend.target.num_cpus)
        self.resubmitted = True
        self.submit(node_id)

    # --- events -------------------------------------------------------------------------------

    def handle(self, batch: list[dict[str, Any]]) -> None:
        run, result, session = self.run, self.run.result, self.session
        for wire in batch:
            try:
                event = EVENT_CHANNEL.decode(wire)
            except MessageError as exc:
                logger.warning("kerasmagic: job %s: %s", self.job_id, exc)
                continue
            if isinstance(event, Placed):
                self.node_id = event.node_id
                result.node = dict(session.nodes.get(self.node_id, {"node_id": self.node_id}))
                result.node["gpu_ids"] = event.gpu_ids or []
                run.phase = "starting"
                run.sink.placed(session.label(self.node_id))
                if run.timeout is not None:  # the agent now enforces it and reports: give it time to
                    run.deadline = run.started + run.timeout + _REPORT_GRACE_S
                events.publish("isolated_started", {"job_id": result.job_id, "label": result.label,
                                                    "on": "ray", "node": result.node, "ts": time.time()})
            elif isinstance(event, NoAgent):
                # The node joined after this call started its agents, or its agent died: start
                # one there and send the job again to the node Ray chose (once).
                if self.resubmitted:
                    _fail(run, no_agent_after_restart(result, event.node_id))
                else:
                    self.needs_agent_on = event.node_id
            elif isinstance(event, Output):
                run.phase = "running"
                run.output(event.stream, event.text)
            elif isinstance(event, Display):
                run.sink.display(event.data, event.metadata or {})
            elif isinstance(event, Sample):
                run.sink.sample(event.reading)
            elif isinstance(event, Final):
                self.final = event

    # --- endings ------------------------------------------------------------------------------

    def where(self) -> str:
        node = self.run.result.node or {}
        if not node:
            return "(not placed yet)"
        return f"{node.get('ip', '?')} ({node.get('hostname', '?')}, id {str(node.get('node_id', ''))[:8]})"

    def conclude(self) -> None:
        """The event stream ended: the node's report, and the error or the values, from the final event."""
        run, result = self.run, self.run.result
        run.output_ended()
        if run.phase == "over":
            return
        final = self.final
        if final is None:
            _fail(run, relay_ended_without_result(result, self.where(), run.last_output()))
            return
        result.take_node_report(pickle.loads(final.result))
        result.agent = final.agent
        if result.job_imported:
            self.session.spread_learned(result.job_imported, self.node_id, run.spec.preload, _overrides(run.spec),
                                        self.backend.target.num_cpus)
        if final.error is not None:
            _fail(run, from_node(pickle.loads(final.error), result, self.where()), result.status)
            return
        run.phase = "over"
        done = final.done
        if done is None:
            return
        directory = make_job_directory()
        try:
            write_files(final.files or {}, directory)
            folders = {os.path.dirname(path) for spec in returned_specs(done) for path in spec_paths(spec)}
            run.warning = run.sink.values(rebase_final(done, {folder: directory for folder in folders}))
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def crashed(self, exc: BaseException) -> None:
        """The relay or its node failed: the job ends with an ``IsolatedCrash`` saying where and why."""
        self.run.output_ended()
        _fail(self.run, node_crashed(self.run.result, self.where(), exc, self.run.last_output()))

    def cancel(self, why: str) -> None:
        """Kill the job wherever it is: its agent kills the process group, Ray cancels the relay."""
        run, result, session = self.run, self.run.result, self.session
        ray = session.ray
        agents = [session.agents[self.node_id]] if self.node_id in session.agents else list(session.agents.values())
        pending = []  # not placed yet: whoever gets it must not run it
        for agent in agents:
            try:
                pending.append(agent.cancel.remote(self.job_id))
            except Exception:  # a dead node: its processes are gone already
                logger.debug("kerasmagic: cancelling job %s on a gone agent", self.job_id, exc_info=True)
        _collect_quietly(ray, pending)
        if self.events is not None:
            try:
                ray.cancel(self.events)
            except Exception:  # already finished
                logger.debug("kerasmagic: relay of job %s already over", self.job_id, exc_info=True)
        run.output_ended()
        result.last_output = run.last_output()
        timeout = run.timeout if run.timeout is not None else 0.0
        if why == "timeout" and self.node_id is None:
            _fail(run, not_placed_in_time(result, timeout, _asked(self.backend.target), session.offered()))
        elif why == "timeout":
            _fail(run, timed_out_on_node(result, timeout, self.where()))
        elif why == "interrupt":
            _fail(run, interrupted(result, f"the isolated job on node {self.where()}"))
        else:
            run.cancel()



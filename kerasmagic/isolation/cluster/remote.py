"""The kernel side of ``on="ray"``: jobs go to the cluster, their output comes into the cell.

The jobs are the same :class:`~kerasmagic.isolation.runner.JobRun` objects a local run
drives, built by the same code (``run_isolated``, ``isolated_map``, ``%%fresh_model``); only
the loop differs. :func:`drive_on_ray` sends each job's encoded folder to the object store
(a folder shared by every item of a map goes up once), submits a relay task with the job's
resources, and then, in the kernel's main thread, waits on all running jobs' event streams
at once, writing their output into the cell as it arrives (prefixed by job and node),
enforcing timeouts, and turning Ctrl-C into "kill every job" on every node.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import os
import pickle
import re
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from ... import events
from ...probes.process import rss_bytes
from ..errors import IsolatedCrash, IsolatedInterrupt, IsolatedTimeout, IsolationUsageError
from ..gpu_figures import kernel_gpu_figures
from ..job import working_directory
from ..messages import EVENT_CHANNEL, Display, Final, MessageError, NoAgent, Output, Placed, Sample
from ..result import IsolatedResult
from ..runner import JobRun, _bring_back, _interrupts_deferred, _last_lines, _show, _Stream, _warn
from ..shipping import make_job_directory
from ..spec import WorkerSpec, env_overrides, keras_backend
from .agent import NAMESPACE, NodeAgent, agent_name, relay_job
from .target import OnRay, connect, import_ray
from .transfer import job_specs, read_files, rebase_final, returned_specs, spec_paths, write_files

logger = logging.getLogger(__name__)

#: After a job's own timeout, the agent kills it and reports; the kernel gives it this long
#: to say so before it gives up on the node.
_REPORT_GRACE_S = 15.0
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
        # max_calls=0: the relay never touches a GPU, so its worker may serve the next job
        # (Ray's default for a task with GPUs is a new worker per call).
        self._relay = ray.remote(max_calls=0, max_retries=0)(relay_job)

    def refresh(self, preload: tuple[str, ...], overrides: dict[str, str]) -> None:
        """An agent on every alive node that has none yet; each starts its template at once."""
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
            agent.warm.remote(list(preload), overrides)  # warm() never raises: nothing to collect
            self.agents[node_id] = agent

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


class RayJobRun:
    """A job on its way through the cluster: queued → submitted → running → over/cancelled.

    It carries what a local :class:`JobRun` carries (``job``, ``spec``, ``result``,
    ``error``, ``phase``), so a map's progress bar and summary read either.
    """

    def __init__(self, run: JobRun) -> None:
        self.job = run.job
        self.spec = run.spec
        self.result = run.result
        self.timeout = run.timeout
        self.forward_output = run.forward_output
        self.prefix = run.prefix
        self.phase = "queued"
        self.error: BaseException | None = None
        self.warning: str | None = None
        self.job_id = f"{os.getpid()}-{next(_job_numbers)}"
        self.events: Any = None  # Ray's ObjectRefGenerator of event batches
        self.node_id: str | None = None
        self.started = 0.0
        self.deadline: float | None = None
        self.tail = ""
        self.streams: dict[str, _Stream] = {}
        self.final: Final | None = None
        self.folders: list[tuple[str, Any]] = []
        self.needs_agent_on: str | None = None
        self.resubmitted = False
        self.spec_target: OnRay | None = None

    # --- submitting ---------------------------------------------------------------------------

    def request(self, folders: list[tuple[str, Any]]) -> dict[str, Any]:
        # Every field of the Job but where its folder is (the node has its own): a field
        # added to Job reaches the node without a change here.
        job_fields = {f.name: getattr(self.job, f.name) for f in dataclasses.fields(self.job)
                      if f.name not in ("directory", "owns_directory")}
        return {
            "label": self.result.label, "job": job_fields, "folders": folders, "preload": list(self.spec.preload),
            "overrides": _overrides(self.spec), "cwd": working_directory(), "sys_path": [p for p in sys.path if p],
            "timeout": self.timeout,
        }

    def submit(self, session: ClusterSession, target: OnRay, node_id: str | None,
               folders: list[tuple[str, Any]]) -> None:
        self.started = time.perf_counter()
        # A job waits for resources on the cluster: that counts, as waiting for a process does locally.
        # Until a node takes it, nothing runs and nothing else will report: the timeout alone.
        self.deadline = None if self.timeout is None else self.started + self.timeout
        self.folders = folders
        self.spec_target = target
        request = self.request(folders)
        request["num_cpus"] = target.num_cpus
        self.events = session.relay(target, node_id).remote(session.session, self.job_id, request)
        self.phase = "launching"

    def resubmit(self, session: ClusterSession, target: OnRay) -> None:
        """Send the job again to the node that had no agent, now that it has one."""
        node_id, self.needs_agent_on = self.needs_agent_on, None
        logger.info("kerasmagic: job %s sent again to node %s, which had no agent", self.job_id, node_id)
        session.forget_agent(node_id or "")
        session.refresh(self.spec.preload, _overrides(self.spec))
        self.resubmitted = True
        self.events = session.relay(target, node_id).remote(session.session, self.job_id, self.request(self.folders)
                                                              | {"num_cpus": target.num_cpus})

    # --- events -------------------------------------------------------------------------------

    def handle(self, batch: list[dict[str, Any]], session: ClusterSession) -> None:
        for wire in batch:
            try:
                event = EVENT_CHANNEL.decode(wire)
            except MessageError as exc:
                logger.warning("kerasmagic: job %s: %s", self.job_id, exc)
                continue
            if isinstance(event, Placed):
                self.node_id = event.node_id
                self.result.node = dict(session.nodes.get(self.node_id, {"node_id": self.node_id}))
                self.result.node["gpu_ids"] = event.gpu_ids or []
                self.phase = "starting"
                if self.timeout is not None:  # the agent now enforces it and reports: give it time to
                    self.deadline = self.started + self.timeout + _REPORT_GRACE_S
                events.publish("isolated_started", {"job_id": self.result.job_id, "label": self.result.label,
                                                    "on": "ray", "node": self.result.node, "ts": time.time()})
            elif isinstance(event, NoAgent):
                # The node joined after this call started its agents, or its agent died: start
                # one there and send the job again to the node Ray chose (once).
                if self.resubmitted:
                    self._fail(IsolatedCrash(
                        f"node {event.node_id[:8]} has no kerasmagic agent even after one was started for it "
                        "(it may be dying, or the agent fails to start there: is kerasmagic installed on it?)",
                        self.result), "crash")
                else:
                    self.needs_agent_on = event.node_id
            elif isinstance(event, Output):
                self.phase = "running"
                self._write(event.stream, event.text, session)
            elif isinstance(event, Display):
                _show(event.data, event.metadata or {}, self.forward_output)
            elif isinstance(event, Sample):
                events.publish("isolated_sample", {**event.reading, "job_id": self.result.job_id,
                                                   "node": self.result.node})
            elif isinstance(event, Final):
                self.final = event

    def _write(self, stream_name: str, text: str, session: ClusterSession) -> None:
        if text and getattr(self.result, "first_output_ts", None) is None:
            self.result.first_output_ts = time.time()
        self.tail = (self.tail + text)[-8192:]
        if not self.forward_output:
            return
        stream = self.streams.get(stream_name)
        if stream is None:
            where = session.label(self.node_id or "")
            prefix = f"{self.prefix.rstrip()[:-1]} @ {where}] " if self.prefix else f"[{where}] "
            stream = self.streams[stream_name] = _Stream(-1, stream_name, prefix)
        shown = stream.lines_to_write(text)
        if shown:
            target = getattr(sys, stream_name)
            target.write(shown)
            target.flush()

    def _flush_partial_lines(self) -> None:
        for stream in self.streams.values():
            shown = stream.lines_to_write("", final=True)
            if shown and self.forward_output:
                getattr(sys, stream.target_name).write(shown)

    # --- endings ------------------------------------------------------------------------------

    def _fail(self, error: BaseException, status: str) -> None:
        if self.error is None:
            self.error = error
            self.result.status = status
            if not self.result.error:  # the sidebar and the map's summary show this line
                self.result.error = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        self.phase = "over"

    def conclude(self) -> None:
        """The event stream ended: rebuild the report, the error or the values from the final event."""
        self._flush_partial_lines()
        if self.phase == "over":
            return
        final = self.final
        if final is None:
            self._fail(IsolatedCrash(
                f"the job's relay on node {self._where()} ended without a result; its last output:\n"
                f"{_last_lines(self.tail) or '(none)'}", self.result, last_output=_last_lines(self.tail)), "crash")
            return
        self._merge(pickle.loads(final.result))
        self.result.agent = final.agent
        if final.error is not None:
            error = pickle.loads(final.error)
            error.result = self.result
            if isinstance(error, IsolatedCrash) or isinstance(error, IsolatedTimeout):
                error.args = (f"{error.args[0]} (on node {self._where()})",) + tuple(error.args[1:])
            self._fail(error, self.result.status)
            return
        self.phase = "over"
        message = final.done
        if message is None:
            return
        directory = make_job_directory()
        try:
            write_files(final.files or {}, directory)
            folders = {os.path.dirname(path) for spec in returned_specs(message) for path in spec_paths(spec)}
            self.warning = _bring_back(rebase_final(message, {folder: directory for folder in folders}), self.result)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _merge(self, remote: IsolatedResult) -> None:
        """The node's report, with what only the kernel knows kept (what it sent, its own memory)."""
        kept = {"label", "sent", "returned", "value", "outputs", "not_returned", "kernel_rss_before_bytes",
                "kernel_rss_after_bytes", "kernel_gpu_before", "kernel_gpu_after", "returned_on_gpu", "ship_in_s",
                "ship_out_s", "node", "on", "agent", "job_id",
                "cluster_note"}
        for name, value in vars(remote).items():
            if name not in kept:
                setattr(self.result, name, value)
        self.result.not_returned.update(remote.not_returned)

    def _where(self) -> str:
        node = getattr(self.result, "node", None) or {}
        if not node:
            return "(not placed yet)"
        return f"{node.get('ip', '?')} ({node.get('hostname', '?')}, id {str(node.get('node_id', ''))[:8]})"

    def crashed(self, exc: BaseException) -> None:
        """The relay or its node failed: the job ends with :class:`IsolatedCrash` saying where and why."""
        self._flush_partial_lines()
        reason = _ray_failure(exc)
        self.result.last_output = _last_lines(self.tail)
        advice = ("fix the node's environment, then run it again" if reason.startswith("the relay task failed")
                  else "run it again" if reason.startswith("this node's kerasmagic agent died")
                  else "its memory on that node went with its process; run it again (Ray places it on a live node)")
        self._fail(IsolatedCrash(
            f"the isolated job on node {self._where()} ended without a result: {reason}. "
            f"{advice[0].upper()}{advice[1:]}{_output(self.result.last_output)}",
            self.result, last_output=self.result.last_output), "crash")

    def cancel(self, session: ClusterSession, why: str) -> None:
        """Kill the job wherever it is: its agent kills the process group, Ray cancels the relay."""
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
        self._flush_partial_lines()
        self.result.last_output = _last_lines(self.tail)
        if why == "timeout" and self.node_id is None:
            self._fail(IsolatedTimeout(
                f"no node took the isolated job within its timeout of {self.timeout:g} s: the cluster may have no "
                f"free node with what it asks for ({_asked(self.spec_target)}; the cluster has {session.offered()}). "
                "Ask for less, wait for busy nodes (a longer timeout), or add nodes", self.result), "timeout")
        elif why == "timeout":
            self._fail(IsolatedTimeout(
                f"the isolated job on node {self._where()} ran past its timeout of {self.timeout:g} s (waiting for "
                "the cluster's resources included) and was killed there; raise the timeout or make the job shorter",
                self.result), "timeout")
        elif why == "interrupt":
            self._fail(IsolatedInterrupt(f"interrupted; the isolated job on node {self._where()} was killed",
                                         self.result), "interrupted")
        else:
            self.phase = "cancelled"
            self.result.status = "cancelled"


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




def _output(text: str) -> str:
    return f"; its last output:\n{text}" if text else ""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ray_failure(exc: BaseException) -> str:
    """Ray's error in a sentence: which kind of death, without Ray's multi-page traceback."""
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the exception the task raised
    died = cause if isinstance(cause, BaseException) and "RayTaskError" in type(exc).__name__ else exc
    if "ActorDied" in type(died).__name__ and "NodeAgent" in str(died):
        return (f"this node's kerasmagic agent died during the job ({type(died).__name__}: killed, or out of "
                "memory); the next job on the node starts a new agent")
    if isinstance(cause, BaseException) and "RayTaskError" in type(exc).__name__:
        hint = (" (the node cannot import what the job needs: the notebook's environment, kerasmagic included, "
                "must exist on every node; see docs/scale-out.md, Limits)") if isinstance(cause, ImportError) else ""
        return f"the relay task failed there with {type(cause).__name__}: {_ANSI.sub('', str(cause))[:300]}{hint}"
    name = type(exc).__name__
    text = _ANSI.sub("", str(exc)).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    if "NodeDied" in name or "node" in first.lower() and "died" in first.lower():
        return f"its node died or was removed ({name})"
    if "WorkerCrashed" in name or "ActorDied" in name or "ActorUnavailable" in name:
        return f"the process running it on the node died ({name}: {first[:200]})"
    return f"{name}: {first[:300]}"


def _folders_of(run: JobRun | RayJobRun) -> list[str]:
    """The local folders a job's files are in: its own, and a map's shared one."""
    folders = {run.job.directory}
    for spec in job_specs(run.job.call, run.job.inputs):
        for path in spec_paths(spec):
            folders.add(os.path.dirname(path))
    return sorted(folders)


def drive_on_ray(runs: list[JobRun], target: OnRay, *, at_once: int = 1, stop_on_error: bool = True,
                 on_change: Callable[[Any], None] | None = None) -> list[RayJobRun]:
    """Run ``runs`` on the cluster, at most ``at_once`` at a time, from this (the main) thread.

    Each job's ``result`` is filled as a local run's would be, plus ``result.node``. The
    job folders are removed at the end, whatever happens. Returns the cluster runs (same
    order), whose ``error`` is set where a job failed; Ctrl-C kills every job on every node
    and raises :class:`IsolatedInterrupt`.
    """
    __tracebackhide__ = True
    try:
        session, note = cluster_session(target)
    except BaseException:  # no cluster, none answering, Ray missing: nothing ran, nothing stays
        for run in runs:
            if run.job.owns_directory:
                shutil.rmtree(run.job.directory, ignore_errors=True)
        raise
    ray = session.ray
    remote_runs = [RayJobRun(run) for run in runs]
    for remote in remote_runs:
        remote.result.on = "ray"
        remote.result.cluster_note = note
    notify = on_change or (lambda run: None)
    uploaded: dict[str, Any] = {}  # local folder -> object ref: a shared folder goes up once
    users: dict[str, int] = {}  # local folder -> jobs not yet over that need it
    queued = list(remote_runs)
    active: list[RayJobRun] = []
    interrupted = False
    submitted = False  # a refusal before the first submission (a bad node=) is not a cancelled map
    try:
        if runs:
            session.refresh(runs[0].spec.preload, _overrides(runs[0].spec))
        node_id = session.node_for(target.node)
        while queued or active:
            while queued and len(active) < at_once:
                remote = queued.pop(0)
                active.append(remote)  # from here on a Ctrl-C cancels it, submitted or not
                submitted = True
                folders = []
                for folder in _folders_of(remote):
                    if folder not in uploaded:
                        paths = [os.path.join(folder, name) for name in os.listdir(folder)]
                        uploaded[folder] = ray.put(read_files(paths))
                    users[folder] = users.get(folder, 0) + 1
                    folders.append((folder, uploaded[folder]))
                remote.submit(session, target, node_id, folders)
                notify(remote)
            for remote in active:
                if remote.needs_agent_on is not None and remote.phase not in ("over", "cancelled"):
                    remote.resubmit(session, target)
            try:
                ready, _ = ray.wait([run.events for run in active if run.events is not None], num_returns=1,
                                    timeout=0.25)
            except SystemExit:
                # Ray's answer to a call after ray.shutdown() (from another thread or cell).
                if ray.is_initialized():
                    raise
                ready = []
            if not ray.is_initialized():
                _shut_down_under(active, session)
                break
            by_events = {id(run.events): run for run in active}
            for events_ref in ready:
                remote = by_events[id(events_ref)]
                before = remote.phase
                try:
                    batch = ray.get(next(events_ref))
                except StopIteration:
                    if remote.needs_agent_on is None:  # else it is sent again, to the node's new agent
                        remote.conclude()
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - Ray's errors for a dead node, worker or task
                    remote.crashed(exc)
                else:
                    remote.handle(batch, session)
                if remote.phase != before:
                    notify(remote)
            now = time.perf_counter()
            for remote in list(active):
                if remote.phase not in ("over", "cancelled") and remote.deadline is not None and now >= remote.deadline:
                    remote.cancel(session, "timeout")
                if remote.phase in ("over", "cancelled"):
                    active.remove(remote)
                    for folder, _ in remote.folders:  # its inputs leave the object store with it
                        users[folder] -= 1
                        if users[folder] == 0:
                            del uploaded[folder]
                    remote.events = None
                    _end(remote)
                    notify(remote)
                    _warn(remote)  # type: ignore[arg-type]
            if stop_on_error and any(run.error is not None for run in remote_runs):
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        with _interrupts_deferred() as deferred:
            for remote in active:
                try:
                    # After ray.shutdown() any Ray call would start a new local cluster: none is made.
                    if remote.phase not in ("over", "cancelled") and ray.is_initialized():
                        remote.cancel(session, "interrupt" if interrupted else "other")
                    _end(remote)
                    notify(remote)
                except Exception:  # one job's failure must not leave the others running
                    logger.exception("kerasmagic: ending the cluster job %s failed", remote.result.label)
            for remote in queued:  # never submitted: another job failed first, or Ctrl-C
                remote.phase = "cancelled"
                remote.result.status = "cancelled"
                if submitted:
                    _end(remote)
            for run in runs:
                if run.job.owns_directory:
                    shutil.rmtree(run.job.directory, ignore_errors=True)
        interrupted = interrupted or deferred.happened
    if interrupted:
        stopped = [run.error for run in remote_runs if isinstance(run.error, IsolatedInterrupt)]
        raise (stopped[0] if stopped else IsolatedInterrupt("interrupted before a job started on the cluster")) \
            from None
    return remote_runs


def _shut_down_under(active: list[RayJobRun], session: ClusterSession) -> None:
    """``ray.shutdown()`` ran while jobs did: they end here in words, and nothing of Ray is called
    again (any call would quietly start a new local cluster, issue 23, fault 2)."""
    global _session
    if _session is session:
        _session = None  # its agents went with the connection; a later ray.init() gets new ones
    for remote in active:
        if remote.phase in ("over", "cancelled"):
            continue
        remote._flush_partial_lines()
        remote.result.last_output = _last_lines(remote.tail)
        remote._fail(IsolatedCrash(
            f"Ray was shut down (ray.shutdown()) while the isolated job ran on node {remote._where()}: this "
            "process's connection to the cluster ended, and the job's agent ends its process with it. Nothing was "
            "started again: call ray.init(...) and run it again" + _output(remote.result.last_output),
            remote.result, last_output=remote.result.last_output), "crash")


def _end(remote: RayJobRun) -> None:
    result = remote.result
    if not result.last_output:
        result.last_output = _last_lines(remote.tail)
    result.wall_s = time.perf_counter() - remote.started if remote.started else 0.0
    result.kernel_rss_after_bytes = rss_bytes()
    result.kernel_gpu_after = kernel_gpu_figures()
    result.finished_ts = time.time()
    events.publish("isolated_done", result.to_dict())

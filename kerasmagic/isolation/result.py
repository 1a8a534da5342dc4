"""``IsolatedResult``: what an isolated job used, how long it waited, what travelled, and proof
that the kernel did not grow; plus ``IsolatedHistory``, the History stand-in that comes back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..probes.availability import Unavailable
from ..probes.sample import is_count, keep_largest
from ..records import NOT_WIRE, Record, wire
from ..tables import Report, Section, format_bytes
from .errors import describe_exit

__all__ = ['KERNEL_OWNED', 'IsolatedHistory', 'IsolatedResult', 'ShippedName', 'add_kernel_gpu_rows', 'kernel_owned',
           'spare_words']

#: The field metadata key of the fields only the kernel knows (:func:`kernel_owned`).
KERNEL_OWNED = "kernel_owned"


def kernel_owned(metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Field metadata (beside ``metadata``, e.g. the wire form's) for a field of a job's report that
    only the kernel knows: what it sent, its own memory, where the job ran. A Ray node reports the
    job too; :meth:`IsolatedResult.take_node_report` keeps these and takes every other field.

    Example:
        >>> kernel_owned({"wire": False})
        {'wire': False, 'kernel_owned': True}
    """
    return {**(metadata or {}), KERNEL_OWNED: True}



class IsolatedHistory:
    """What ``model.fit()`` returned in the worker, without the model it would pin.

    A real ``keras.callbacks.History`` holds ``.model``; bringing it back would bring the
    model (and its graphs) into the kernel a second time. This keeps what plots need.

    Attributes:
        history: ``{"loss": [...], "val_loss": [...], ...}``, one float per epoch.
        epoch: the epoch indices, as in Keras.
        params: ``{"epochs": ..., "steps": ..., "verbose": ...}`` as Keras recorded them.

    Example:
        >>> h = IsolatedHistory({"loss": [0.9, 0.5]}, [0, 1], {"epochs": 2})
        >>> h.history["loss"][-1], h.epoch
        (0.5, [0, 1])
    """

    def __init__(self, history: dict[str, list[float]], epoch: list[int], params: dict[str, Any] | None = None) -> None:
        self.history = history
        self.epoch = epoch
        self.params = params or {}

    def __repr__(self) -> str:
        metrics = ", ".join(self.history)
        return f"IsolatedHistory(epochs={len(self.epoch)}, metrics=[{metrics}])"


#: Where each worker allocator figure comes from: (framework in the sample, its key, the field).
_ALLOCATOR_FIELDS = (("torch", "peak_allocated_bytes", "child_torch_peak"),
                     ("torch", "peak_reserved_bytes", "child_torch_reserved_peak"),
                     ("jax", "peak_bytes", "child_jax_peak"),
                     ("jax", "pool_bytes", "child_jax_pool"))
#: The kernel's GPU views, in the order the report shows them, and whose number each is.
_KERNEL_VIEWS = {"NVML": "NVML, kernel process", "TF": "TF allocator, kernel", "torch": "torch allocator, kernel",
                 "JAX": "JAX allocator, kernel"}


@dataclass
class ShippedName(Record):
    """One name that crossed between the kernel and the worker: how, and how many bytes.

    Example:
        >>> ShippedName("w", "pickle", 21).to_dict()
        {'name': 'w', 'how': 'pickle', 'size_bytes': 21}
    """

    name: str
    how: str  # "pickle", "pickle+files", "keras", "history", "module"
    size_bytes: int = 0


@dataclass(eq=False, repr=False)
class IsolatedResult(Record, Report):
    """The report of one job run in a fresh worker process.

    ``status`` is ``"ok"``, ``"error"`` (the code raised), ``"timeout"``, ``"crash"``,
    ``"out_of_memory"`` (it reached ``memory_limit``) or ``"interrupted"``. Values that came
    back are in ``outputs`` (code) or ``value`` (a function's return value); they are not part
    of ``to_dict()``.

    Example:
        >>> result = run_isolated("import numpy as np; total = int(np.arange(10).sum())")  # doctest: +SKIP
        >>> result.outputs["total"], result.warm, result.child_rss_peak_bytes > 0      # doctest: +SKIP
        (45, False, True)
        >>> IsolatedResult("a job").to_dict()["status"]
        'ok'
    """

    label: str = field(default="isolated job", metadata=kernel_owned())
    status: str = "ok"
    outputs: dict[str, Any] = field(default_factory=dict, metadata=kernel_owned(NOT_WIRE))
    value: Any = field(default=None, metadata=kernel_owned(NOT_WIRE))
    error: str | None = None
    wall_s: float = 0.0
    wait_s: float = 0.0
    run_s: float = 0.0
    ship_in_s: float = field(default=0.0, metadata=kernel_owned())
    ship_out_s: float = field(default=0.0, metadata=kernel_owned(wire(then=("warm",))))
    #: "warm" (forked from a ready template), "starting" (forked once the template had
    #: imported), "cold" (the template was started for this job) or "fresh" (a fresh
    #: interpreter; ``worker_note`` says why).
    worker_state: str = "cold"
    worker_note: str = ""
    #: ``"taken"``: the job ran in the pool's warm spare (``spare_warm_up_s``: its warm-up, done
    #: before the job came); otherwise why it got a cold fork where the pool keeps spares ("": none).
    spare: str = ""
    spare_warm_up_s: float = 0.0
    #: The pool's warm spares once the job ended (pid, device, state, ``rss_bytes``, ``gpu_bytes``):
    #: what they cost while they wait for the next job.
    pool_spares: list[dict[str, Any]] = field(default_factory=list)
    origin: str = ""  # "forked" or "fresh": the process the job ran in
    template_pid: int | None = None
    template_threads: list[str] = field(default_factory=list, metadata=NOT_WIRE)
    start_latency_s: float | None = None  # from asking for the process to the job's first line
    worker_pid: int | None = None
    worker_import_s: float | None = None
    frameworks: list[str] = field(default_factory=list)
    #: The heavy modules the job's process had imported when the job began (the template's), and
    #: those the job imported itself (the pool's next templates import them first).
    template_modules: list[str] = field(default_factory=list)
    job_imported: list[str] = field(default_factory=list)
    exit_code: int | None = None
    signal_name: str | None = None
    child_rss_start_bytes: int | None = None
    child_rss_peak_bytes: int | None = None
    child_rss_peak_method: str = "sampled"
    #: ``memory_limit=`` in bytes (None: no limit) and how it was held (a cgroup, or only the watch, and why).
    memory_limit_bytes: int | None = None
    memory_limit_how: str = ""
    child_pss_bytes: int | None = None  # its share of pages it shares with the template
    child_uss_bytes: int | None = None  # pages only it had
    child_tf_peak: dict[str, Any] = field(default_factory=dict, metadata=wire("child_tf_peak_bytes"))
    child_gpu_peak: dict[str, Any] = field(default_factory=dict, metadata=wire("child_gpu_process_peak_bytes"))
    #: The worker's framework allocators, per device (``cuda:0``, ``gpu:0``), or why there are
    #: none (torch never started CUDA, JAX ran on a CPU): torch's ``max_memory_allocated`` and
    #: ``max_memory_reserved``, JAX's ``peak_bytes_in_use`` and the largest its pool grew to (read
    #: with every sample and at the end). ``{}``: no reading came (the worker died first). Exact:
    #: a worker's counters are the job's alone (the pool is sampled, but XLA's pool only grows).
    child_torch_peak: dict[str, Any] | Unavailable = field(
        default_factory=dict, metadata=wire("child_torch_peak_allocated_bytes"))
    child_torch_reserved_peak: dict[str, Any] | Unavailable = field(
        default_factory=dict, metadata=wire("child_torch_peak_reserved_bytes"))
    child_jax_peak: dict[str, Any] | Unavailable = field(default_factory=dict, metadata=wire("child_jax_peak_bytes"))
    child_jax_pool: dict[str, Any] | Unavailable = field(default_factory=dict, metadata=wire("child_jax_pool_bytes"))
    samples: int = 0
    kernel_rss_before_bytes: int = field(default=0, metadata=kernel_owned())
    kernel_rss_after_bytes: int = field(default=0, metadata=kernel_owned(wire(then=("kernel_rss_delta_bytes",))))
    #: The kernel's GPU bytes before the job and after its values came back, by whose view
    #: (``NVML GPU:0``, ``TF GPU:0 in use``, ``torch cuda:0 allocated``/``reserved``, ``JAX gpu:0
    #: in use``; see :func:`~kerasmagic.isolation.gpu_figures.kernel_gpu_figures`); no key where
    #: the kernel has no such view; the view's name (``torch``) with why where it gave no number
    #: (not started, or an error).
    kernel_gpu_before: dict[str, int | Unavailable] = field(
        default_factory=dict, metadata=kernel_owned(wire("kernel_gpu_before_bytes")))
    kernel_gpu_after: dict[str, int | Unavailable] = field(
        default_factory=dict, metadata=kernel_owned(wire("kernel_gpu_after_bytes")))
    #: The values that came back and live on a GPU of the kernel, with their devices.
    returned_on_gpu: dict[str, list[str]] = field(default_factory=dict, metadata=kernel_owned())
    pool_size: int = 0
    pool_idle_workers: int = 0
    pool_idle_rss_bytes: int | Unavailable = 0
    sent: list[ShippedName] = field(default_factory=list, metadata=kernel_owned())
    returned: list[ShippedName] = field(default_factory=list, metadata=kernel_owned())
    #: Kernel-owned, and a node's report adds its own (what the node could not send).
    not_returned: dict[str, str] = field(default_factory=dict, metadata=kernel_owned())
    last_output: str = field(default="", metadata=NOT_WIRE)
    first_output_ts: float | None = field(default=None, metadata=NOT_WIRE)
    finished_ts: float | None = field(default=None, metadata=NOT_WIRE)
    #: Where it ran: "local" (a process of this machine's pool) or "ray" (a node of a cluster).
    on: str = field(default="local", metadata=kernel_owned())
    #: On a cluster: the node's ``node_id``, ``ip``, ``hostname`` and the GPUs Ray gave the job.
    node: dict[str, Any] = field(default_factory=dict, metadata=kernel_owned())
    #: On a cluster: the node agent's pid and its templates when the job ended.
    agent: dict[str, Any] | None = field(default_factory=dict, metadata=kernel_owned())
    #: On a cluster: what connecting did, when it did something (started a local cluster).
    cluster_note: str = field(default="", metadata=kernel_owned())
    #: Names the job in the kernel's events (``isolated_started``/``_sample``/``_done``).
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12], metadata=kernel_owned())

    def take_node_report(self, node: IsolatedResult) -> None:
        """Take a Ray node's report of this job (times, peaks, the template's state), keeping what only
        the kernel knows (the fields marked :func:`kernel_owned`: what it sent, its own memory, where
        the job ran); what the node could not send joins ``not_returned``.

        Example:
            >>> kernel = IsolatedResult("cell [3]", kernel_rss_before_bytes=100)
            >>> kernel.take_node_report(IsolatedResult("on the node", run_s=2.0, not_returned={"m": "a module"}))
            >>> kernel.label, kernel.kernel_rss_before_bytes, kernel.run_s, kernel.not_returned
            ('cell [3]', 100, 2.0, {'m': 'a module'})
        """
        for item in fields(self):
            if not item.metadata.get(KERNEL_OWNED):
                setattr(self, item.name, getattr(node, item.name))
        self.not_returned.update(node.not_returned)

    @property
    def warm(self) -> bool:
        """True when the job was forked from a template that had already imported everything."""
        return self.worker_state == "warm"

    @property
    def kernel_rss_delta_bytes(self) -> int:
        return self.kernel_rss_after_bytes - self.kernel_rss_before_bytes

    @property
    def child_tf_peak_bytes(self) -> int | None:
        """The largest TF allocator peak over the worker's devices (None before TF ran)."""
        values = [v for v in self.child_tf_peak.values() if isinstance(v, int)]
        return max(values) if values else None

    def fold_allocators(self, allocators: Any) -> None:
        """Fold a worker sample's ``allocators`` part (its torch and JAX peaks per device, see
        :func:`~kerasmagic.isolation.gpu_figures.allocator_peaks`) into the report: per device
        the largest peak seen; where a framework has no numbers, why (until it has some).

        Example:
            >>> result = IsolatedResult()
            >>> result.fold_allocators({"torch": {"cuda:0": {"peak_allocated_bytes": 5, "peak_reserved_bytes": 8}},
            ...                         "jax": {"status": "unavailable", "reason": "not_supported", "detail": "CPU"}})
            >>> result.child_torch_peak, result.child_torch_reserved_peak, result.child_jax_peak
            ({'cuda:0': 5}, {'cuda:0': 8}, Unavailable(reason='not_supported', detail='CPU'))
        """
        if not isinstance(allocators, dict):
            return
        for framework, key, name in _ALLOCATOR_FIELDS:
            view = allocators.get(framework)
            if not isinstance(view, dict):
                continue
            held = getattr(self, name)
            if view.get("status") == "unavailable":
                if not (isinstance(held, dict) and held):  # numbers seen earlier stay
                    setattr(self, name, Unavailable(str(view.get("reason") or "error"), str(view.get("detail") or "")))
                continue
            if not isinstance(held, dict):
                held = {}
                setattr(self, name, held)
            keep_largest(held, {device: stats[key] for device, stats in view.items()
                                if isinstance(stats, dict) and is_count(stats.get(key))})

    def _title(self) -> str:
        status = {
            "ok": "",
            "error": " (the code raised)",
            "timeout": " (timed out, worker killed)",
            "crash": " (the worker died)",
            "interrupted": " (interrupted, worker killed)",
            "out_of_memory": " (out of memory, worker killed)",
            "cancelled": " (cancelled: another job of the map failed)",
        }.get(self.status, f" ({self.status})")
        return f"kerasmagic: {self.label} ran in a fresh process in {self.wall_s:.2f} s{status}"

    def _sections(self) -> list[Section]:
        time_section = Section("Time")
        worker_note = {
            "warm": "forked from a warm template, frameworks already imported",
            "starting": "forked once the template had finished importing",
            "cold": "the template was started for this job: it paid the import",
            "fresh": f"fresh interpreter, it paid the import ({self.worker_note})",
        }.get(self.worker_state, self.worker_state)
        if self.spare == "taken":
            worker_note = (f"the pool's warm spare: its device context and a small fit were done "
                           f"({self.spare_warm_up_s:.2f} s) before the job came")
        elif self.spare:
            worker_note = f"{worker_note}; {self.spare}"
        time_section.add("waiting for a worker", f"{self.wait_s:.2f} s", worker_note)
        time_section.notes.extend(self._import_notes())
        latency = f"; first line {self.start_latency_s * 1000:.0f} ms after the fork was asked for" \
            if self.start_latency_s is not None and self.worker_state == "warm" else ""
        time_section.add("running", f"{self.run_s:.2f} s", f"worker pid {self.worker_pid}{latency}")
        if self.ship_in_s or self.ship_out_s:
            time_section.add("shipping", f"{self.ship_in_s + self.ship_out_s:.2f} s",
                             f"in {self.ship_in_s:.2f} s, out {self.ship_out_s:.2f} s")

        child = Section("Worker process (gone now: all of it was given back)")
        if self.child_rss_peak_bytes is not None:
            method = "exact (VmHWM)" if self.child_rss_peak_method == "exact" else "sampled"
            when = "at the fork, shared with the template" if self.origin == "forked" else "after import"
            start = f"; {format_bytes(self.child_rss_start_bytes)} {when}" if self.child_rss_start_bytes else ""
            child.add("RSS peak", format_bytes(self.child_rss_peak_bytes), f"{method}{start}")
        if self.child_pss_bytes is not None and self.origin == "forked":
            uss = f", {format_bytes(self.child_uss_bytes)} its own (USS)" if self.child_uss_bytes is not None else ""
            child.add("PSS at the end", format_bytes(self.child_pss_bytes),
                      f"pages shared with the template counted once{uss}")
        for device, peak in sorted(self.child_tf_peak.items()):
            if isinstance(peak, Unavailable):  # no statistics (a CPU without oneDNN): why, and the remedy
                child.add_missing(f"TF {device} peak", peak, "TF allocator, worker")
            else:
                child.add(f"TF {device} peak", format_bytes(peak), "TF allocator, worker")
        self._allocator_rows(child)
        for device, peak in sorted(self.child_gpu_peak.items()):
            child.add(f"{device} peak", format_bytes(peak), self._nvml_peak_source())
        if self.memory_limit_bytes is not None:
            child.add("memory limit", format_bytes(self.memory_limit_bytes), self.memory_limit_how or "not reached")
        if self.signal_name or (self.exit_code not in (None, 0)):
            child.add("ended by", self.signal_name or f"exit code {self.exit_code}", describe_exit(self.exit_code))

        kernel = Section("Kernel")
        kernel.add("RSS change", format_bytes(self.kernel_rss_delta_bytes, signed=True),
                   f"{format_bytes(self.kernel_rss_before_bytes)} → {format_bytes(self.kernel_rss_after_bytes)}")
        self._kernel_gpu_rows(kernel)
        sections = [time_section, child, kernel]
        if self.on == "ray":
            sections.insert(0, self._node_section())
        else:
            kernel.add("pool cost", format_bytes(self.pool_idle_rss_bytes),
                       f"{self.pool_idle_workers} template(s) waiting to fork, RSS; "
                       f"up to {self.pool_size} jobs at once")
            for spare in self.pool_spares:
                kernel.add("warm spare", format_bytes(spare.get("rss_bytes")), spare_words(spare))

        shipped = Section("Shipped")
        for label, items in (("in", self.sent), ("out", self.returned)):
            for item in items:
                shipped.add(f"{label}: {item.name}", format_bytes(item.size_bytes), item.how)
        for name, why in self.not_returned.items():
            shipped.notes.append(f"not brought back: {name} ({why})")
        return [*sections, shipped]

    def _import_notes(self) -> list[str]:
        """What the job's process had imported when the job began, and what the job imported itself."""
        notes = []
        if self.worker_pid is not None and self.template_modules:
            whose = "the template" if self.origin == "forked" else "the fresh worker"
            notes.append(f"{whose} had imported {', '.join(self.template_modules)}")
        if self.job_imported:
            it = "it" if len(self.job_imported) == 1 else "them"
            notes.append(f"the job imported {', '.join(self.job_imported)} itself: later templates import {it} "
                         "first (configure_pool(learn=False) to stop), or ask for it up front with preload=[...]")
        return notes

    def _allocator_rows(self, child: Section) -> None:
        """torch's and JAX's own peaks in the worker, per device."""
        torch_reserved = self.child_torch_reserved_peak if isinstance(self.child_torch_reserved_peak, dict) else {}
        if isinstance(self.child_torch_peak, dict):
            for device, peak in sorted(self.child_torch_peak.items()):
                reserved = torch_reserved.get(device)
                cached = f"; reserved peak {format_bytes(reserved)}" if reserved is not None else ""
                child.add(f"torch {device} peak", format_bytes(peak),
                          f"torch allocator, worker: allocated (max_memory_allocated){cached}")
        jax_pool = self.child_jax_pool if isinstance(self.child_jax_pool, dict) else {}
        if isinstance(self.child_jax_peak, dict):
            for device, peak in sorted(self.child_jax_peak.items()):
                pool = jax_pool.get(device)
                held = f"; its largest pool {format_bytes(pool)}" if pool is not None else ""
                child.add(f"JAX {device} peak", format_bytes(peak), f"JAX allocator, worker (peak_bytes_in_use){held}")

    def _has_allocator_view(self) -> bool:
        """Whether a framework allocator saw the worker's GPU memory (TF GPU, torch, JAX)."""
        return (any(device.startswith("GPU") for device in self.child_tf_peak)
                or any(isinstance(view, dict) and view for view in (self.child_torch_peak, self.child_jax_peak)))

    def _nvml_peak_source(self) -> str:
        """Whose number NVML's peak is, and, where no allocator saw the GPU, that it is the figure."""
        if self._has_allocator_view():
            return "NVML, worker process, sampled; beyond the allocators: the CUDA context and libraries"
        why = [f"{framework}: {view.detail or view.reason.replace('_', ' ')}"
               for framework, view in (("torch", self.child_torch_peak), ("JAX", self.child_jax_peak))
               if isinstance(view, Unavailable) and view.reason != "not_imported"]
        because = f" ({'; '.join(why)})" if why else ""
        return f"NVML, worker process, sampled: the GPU peak, no framework allocator saw it{because}"

    def _kernel_gpu_rows(self, kernel: Section) -> None:
        """The kernel's GPU before the job and after its values came back, and which values did it."""
        add_kernel_gpu_rows(kernel, self.kernel_gpu_before, self.kernel_gpu_after)
        if self.returned_on_gpu:
            names = ", ".join(f"{name} ({', '.join(devices)})" for name, devices in self.returned_on_gpu.items())
            kernel.notes.append(f"on the kernel's GPU now, brought back by this job: {names}")

    def _node_section(self) -> Section:
        """Where on the cluster it ran, and what the node's agent keeps warm there."""
        node = Section("Ray node")
        where = self.node or {}
        gpus = where.get("gpu_ids") or []
        node.add("node", where.get("ip", "?"), f"{where.get('hostname', '?')}, id {str(where.get('node_id', ''))[:8]}"
                 + (f", GPU {','.join(gpus)} (given by Ray)" if gpus else ""))
        templates = (self.agent or {}).get("templates") or []
        ready = [t for t in templates if t.get("state") == "ready"]
        if self.agent:
            node.add("agent", f"pid {self.agent.get('agent_pid', '?')}",
                     f"{len(ready)} warm template(s) on the node" + (
                         f", importing {', '.join(ready[0].get('preload') or []) or 'Python only'}" if ready else ""))
        if self.cluster_note:
            node.notes.append(self.cluster_note)
        return node


def _why_missing(figures: dict[str, Any], view: str) -> Unavailable | None:
    """Why ``view`` (``torch``) gave no number, as :func:`kernel_gpu_figures` recorded it; None
    where it recorded nothing (the view did not exist: a framework not imported yet)."""
    why = figures.get(view)
    return why if isinstance(why, Unavailable) else None


def add_kernel_gpu_rows(kernel: Section, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Rows of the kernel's GPU change, one per view with a number in ``before`` or ``after``
    (keys as :func:`~kerasmagic.isolation.gpu_figures.kernel_gpu_figures` names them); none
    without a view. A view missing before is a change from nothing only where it did not
    exist or had not started; where reading it failed, the row gives the figure after alone.

    Example:
        >>> section = Section("Kernel")
        >>> add_kernel_gpu_rows(section, {"NVML GPU:0": 2**30, "torch": Unavailable("not_started")},
        ...                     {"NVML GPU:0": 2**30 + 700 * 2**20, "torch cuda:0 allocated": 690 * 2**20,
        ...                      "JAX gpu:0 in use": 2**20})
        >>> for row in section.rows: print(row)
        ('GPU:0 change', '+700 MiB', '1.00 GiB → 1.68 GiB, NVML, kernel process')
        ('torch cuda:0 allocated change', '+690 MiB', 'not started before → 690 MiB, torch allocator, kernel')
        ('JAX gpu:0 in use change', '+1.00 MiB', 'not imported before → 1.00 MiB, JAX allocator, kernel')
        >>> section = Section("Kernel")
        >>> add_kernel_gpu_rows(section, {"torch": Unavailable("error", "CUDA busy")},
        ...                     {"torch cuda:0 allocated": 690 * 2**20})
        >>> for row in section.rows: print(row)
        ('torch cuda:0 allocated after', '690 MiB', 'no reading before (CUDA busy), torch allocator, kernel')
    """
    order = list(_KERNEL_VIEWS)
    numbers = {key for key in set(before) | set(after) if " " in key}  # a bare view name carries why
    keys = sorted(numbers, key=lambda key: (
        order.index(key.partition(" ")[0]) if key.partition(" ")[0] in order else len(order), key))
    for key in keys:
        view, _, what = key.partition(" ")
        label = what if view == "NVML" and what else key
        whose = _KERNEL_VIEWS.get(view, "kernel")
        was, now = before.get(key), after.get(key)
        was = was if is_count(was) else None
        now = now if is_count(now) else None
        why_before = _why_missing(before, view)
        if was is not None and now is not None:
            kernel.add(f"{label} change", format_bytes(now - was, signed=True),
                       f"{format_bytes(was)} → {format_bytes(now)}, {whose}")
        elif now is not None and view != "NVML" and (why_before is None or why_before.reason == "not_started") \
                and not any(other.startswith(f"{view} ") for other in before):
            # The runtime started (or was imported) for the values that came back: before, it held nothing.
            state = "not started" if why_before is not None else "not imported"
            kernel.add(f"{label} change", format_bytes(now, signed=True),
                       f"{state} before → {format_bytes(now)}, {whose}")
        elif now is not None:
            why = f" ({why_before.detail or why_before.reason.replace('_', ' ')})" if why_before is not None else ""
            kernel.add(f"{label} after", format_bytes(now), f"no reading before{why}, {whose}")
        elif was is not None:
            why_after = _why_missing(after, view)
            why = f" ({why_after.detail or why_after.reason.replace('_', ' ')})" if why_after is not None else ""
            kernel.add(f"{label} before", format_bytes(was), f"no reading after{why}, {whose}")


def spare_words(spare: dict[str, Any]) -> str:
    """What a warm spare costs and does, in words (the job report and ``%tf_mem``).

    Example:
        >>> spare_words({"pid": 7, "device": "0", "state": "ready", "gpu_bytes": 536870912})[-67:]
        'waits for the next job (GPU 0); 512 MiB of GPU memory (its context)'
    """
    where = f" (GPU {spare['device']})" if spare.get("device") is not None else ""
    doing = "waits for the next job" if spare.get("state") == "ready" else "warming up for the next job"
    gpu = spare.get("gpu_bytes")
    held = f"; {format_bytes(gpu)} of GPU memory (its context)" if isinstance(gpu, int) and gpu else ""
    return f"pid {spare.get('pid')}, RSS (mostly pages shared with the template), {doing}{where}{held}"

"""``IsolatedResult``: what an isolated job used, how long it waited, what travelled, and proof
that the kernel did not grow; plus ``IsolatedHistory``, the History stand-in that comes back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..probes.availability import Unavailable
from ..records import NOT_WIRE, Record, wire
from ..tables import Report, Section, format_bytes

__all__ = ['IsolatedHistory', 'IsolatedResult', 'ShippedName']


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

    ``status`` is ``"ok"``, ``"error"`` (the code raised), ``"timeout"``, ``"crash"`` or
    ``"interrupted"``. Values that came back are in ``outputs`` (code) or ``value``
    (a function's return value); they are not part of ``to_dict()``.

    Example:
        >>> result = run_isolated("import numpy as np; total = int(np.arange(10).sum())")  # doctest: +SKIP
        >>> result.outputs["total"], result.warm, result.child_rss_peak_bytes > 0      # doctest: +SKIP
        (45, False, True)
        >>> IsolatedResult("a job").to_dict()["status"]
        'ok'
    """

    label: str = "isolated job"
    status: str = "ok"
    outputs: dict[str, Any] = field(default_factory=dict, metadata=NOT_WIRE)
    value: Any = field(default=None, metadata=NOT_WIRE)
    error: str | None = None
    wall_s: float = 0.0
    wait_s: float = 0.0
    run_s: float = 0.0
    ship_in_s: float = 0.0
    ship_out_s: float = field(default=0.0, metadata=wire(then=("warm",)))
    #: "warm" (forked from a ready template), "starting" (forked once the template had
    #: imported), "cold" (the template was started for this job) or "fresh" (a fresh
    #: interpreter; ``worker_note`` says why).
    worker_state: str = "cold"
    worker_note: str = ""
    origin: str = ""  # "forked" or "fresh": the process the job ran in
    template_pid: int | None = None
    template_threads: list[str] = field(default_factory=list, metadata=NOT_WIRE)
    start_latency_s: float | None = None  # from asking for the process to the job's first line
    worker_pid: int | None = None
    worker_import_s: float | None = None
    frameworks: list[str] = field(default_factory=list)
    exit_code: int | None = None
    signal_name: str | None = None
    child_rss_start_bytes: int | None = None
    child_rss_peak_bytes: int | None = None
    child_rss_peak_method: str = "sampled"
    child_pss_bytes: int | None = None  # its share of pages it shares with the template
    child_uss_bytes: int | None = None  # pages only it had
    child_tf_peak: dict[str, Any] = field(default_factory=dict, metadata=wire("child_tf_peak_bytes"))
    child_gpu_peak: dict[str, Any] = field(default_factory=dict, metadata=wire("child_gpu_process_peak_bytes"))
    samples: int = 0
    kernel_rss_before_bytes: int = 0
    kernel_rss_after_bytes: int = field(default=0, metadata=wire(then=("kernel_rss_delta_bytes",)))
    pool_size: int = 0
    pool_idle_workers: int = 0
    pool_idle_rss_bytes: int | Unavailable = 0
    sent: list[ShippedName] = field(default_factory=list)
    returned: list[ShippedName] = field(default_factory=list)
    not_returned: dict[str, str] = field(default_factory=dict)
    last_output: str = field(default="", metadata=NOT_WIRE)
    first_output_ts: float | None = field(default=None, metadata=NOT_WIRE)
    finished_ts: float | None = field(default=None, metadata=NOT_WIRE)
    #: Where it ran: "local" (a process of this machine's pool) or "ray" (a node of a cluster).
    on: str = "local"
    #: On a cluster: the node's ``node_id``, ``ip``, ``hostname`` and the GPUs Ray gave the job.
    node: dict[str, Any] = field(default_factory=dict)
    #: On a cluster: the node agent's pid and its templates when the job ended.
    agent: dict[str, Any] | None = field(default_factory=dict)
    #: On a cluster: what connecting did, when it did something (started a local cluster).
    cluster_note: str = ""
    #: Names the job in the kernel's events (``isolated_started``/``_sample``/``_done``).
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

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

    def _title(self) -> str:
        status = {
            "ok": "",
            "error": " (the code raised)",
            "timeout": " (timed out, worker killed)",
            "crash": " (the worker died)",
            "interrupted": " (interrupted, worker killed)",
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
        time_section.add("waiting for a worker", f"{self.wait_s:.2f} s", worker_note)
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
            child.add(f"TF {device} peak", format_bytes(peak), "TF allocator, worker")
        for device, peak in sorted(self.child_gpu_peak.items()):
            child.add(f"{device} peak", format_bytes(peak), "NVML, worker process")
        if self.signal_name or (self.exit_code not in (None, 0)):
            child.add("ended by", self.signal_name or f"exit code {self.exit_code}", "")

        kernel = Section("Kernel")
        kernel.add("RSS change", format_bytes(self.kernel_rss_delta_bytes, signed=True),
                   f"{format_bytes(self.kernel_rss_before_bytes)} → {format_bytes(self.kernel_rss_after_bytes)}")
        sections = [time_section, child, kernel]
        if self.on == "ray":
            sections.insert(0, self._node_section())
        else:
            kernel.add("pool cost", format_bytes(self.pool_idle_rss_bytes),
                       f"{self.pool_idle_workers} template(s) waiting to fork, RSS; "
                       f"up to {self.pool_size} jobs at once")

        shipped = Section("Shipped")
        for label, items in (("in", self.sent), ("out", self.returned)):
            for item in items:
                shipped.add(f"{label}: {item.name}", format_bytes(item.size_bytes), item.how)
        for name, why in self.not_returned.items():
            shipped.notes.append(f"not brought back: {name} ({why})")
        return [*sections, shipped]

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

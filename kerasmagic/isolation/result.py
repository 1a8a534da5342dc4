"""``IsolatedResult``: what an isolated job used, how long it waited, what travelled, and proof
that the kernel did not grow; plus ``IsolatedHistory``, the History stand-in that comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..probes.availability import Unavailable, to_jsonable
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
class ShippedName:
    """One name that crossed between the kernel and the worker: how, and how many bytes."""

    name: str
    how: str  # "pickle", "pickle+files", "keras", "history", "module"
    size_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "how": self.how, "size_bytes": self.size_bytes}


class IsolatedResult(Report):
    """The report of one job run in a fresh worker process.

    ``status`` is ``"ok"``, ``"error"`` (the code raised), ``"timeout"``, ``"crash"`` or
    ``"interrupted"``. Values that came back are in ``outputs`` (code) or ``value``
    (a function's return value); they are not part of ``to_dict()``.

    Example:
        >>> result = run_isolated("import numpy as np; total = int(np.arange(10).sum())")  # doctest: +SKIP
        >>> result.outputs["total"], result.warm, result.child_rss_peak_bytes > 0      # doctest: +SKIP
        (45, False, True)
    """

    def __init__(self, label: str = "isolated job") -> None:
        self.label = label
        self.status = "ok"
        self.outputs: dict[str, Any] = {}
        self.value: Any = None
        self.error: str | None = None
        self.wall_s = 0.0
        self.wait_s = 0.0
        self.run_s = 0.0
        self.ship_in_s = 0.0
        self.ship_out_s = 0.0
        #: "warm" (forked from a ready template), "starting" (forked once the template had
        #: imported), "cold" (the template was started for this job) or "fresh" (a fresh
        #: interpreter; ``worker_note`` says why).
        self.worker_state = "cold"
        self.worker_note = ""
        self.origin = ""  # "forked" or "fresh": the process the job ran in
        self.template_pid: int | None = None
        self.template_threads: list[str] = []
        self.start_latency_s: float | None = None  # from asking for the process to the job's first line
        self.worker_pid: int | None = None
        self.worker_import_s: float | None = None
        self.frameworks: list[str] = []
        self.exit_code: int | None = None
        self.signal_name: str | None = None
        self.child_rss_start_bytes: int | None = None
        self.child_rss_peak_bytes: int | None = None
        self.child_rss_peak_method = "sampled"
        self.child_pss_bytes: int | None = None  # its share of pages it shares with the template
        self.child_uss_bytes: int | None = None  # pages only it had
        self.child_tf_peak: dict[str, Any] = {}
        self.child_gpu_peak: dict[str, Any] = {}
        self.samples = 0
        self.kernel_rss_before_bytes = 0
        self.kernel_rss_after_bytes = 0
        self.pool_idle_workers = 0
        self.pool_idle_rss_bytes: int | Unavailable = 0
        self.pool_size = 0
        self.sent: list[ShippedName] = []
        self.returned: list[ShippedName] = []
        self.not_returned: dict[str, str] = {}
        self.last_output = ""
        self.first_output_ts: float | None = None
        self.finished_ts: float | None = None

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

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "label": self.label,
            "status": self.status,
            "error": self.error,
            "wall_s": self.wall_s,
            "wait_s": self.wait_s,
            "run_s": self.run_s,
            "ship_in_s": self.ship_in_s,
            "ship_out_s": self.ship_out_s,
            "warm": self.warm,
            "worker_state": self.worker_state,
            "worker_note": self.worker_note,
            "origin": self.origin,
            "template_pid": self.template_pid,
            "start_latency_s": self.start_latency_s,
            "worker_pid": self.worker_pid,
            "worker_import_s": self.worker_import_s,
            "frameworks": list(self.frameworks),
            "exit_code": self.exit_code,
            "signal_name": self.signal_name,
            "child_rss_start_bytes": self.child_rss_start_bytes,
            "child_rss_peak_bytes": self.child_rss_peak_bytes,
            "child_rss_peak_method": self.child_rss_peak_method,
            "child_pss_bytes": self.child_pss_bytes,
            "child_uss_bytes": self.child_uss_bytes,
            "child_tf_peak_bytes": dict(self.child_tf_peak),
            "child_gpu_process_peak_bytes": dict(self.child_gpu_peak),
            "samples": self.samples,
            "kernel_rss_before_bytes": self.kernel_rss_before_bytes,
            "kernel_rss_after_bytes": self.kernel_rss_after_bytes,
            "kernel_rss_delta_bytes": self.kernel_rss_delta_bytes,
            "pool_size": self.pool_size,
            "pool_idle_workers": self.pool_idle_workers,
            "pool_idle_rss_bytes": self.pool_idle_rss_bytes,
            "sent": [s.to_dict() for s in self.sent],
            "returned": [s.to_dict() for s in self.returned],
            "not_returned": dict(self.not_returned),
        })

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
        kernel.add("pool cost", format_bytes(self.pool_idle_rss_bytes),
                   f"{self.pool_idle_workers} template(s) waiting to fork, RSS; up to {self.pool_size} jobs at once")

        shipped = Section("Shipped")
        for label, items in (("in", self.sent), ("out", self.returned)):
            for item in items:
                shipped.add(f"{label}: {item.name}", format_bytes(item.size_bytes), item.how)
        for name, why in self.not_returned.items():
            shipped.notes.append(f"not brought back: {name} ({why})")
        return [time_section, child, kernel, shipped]

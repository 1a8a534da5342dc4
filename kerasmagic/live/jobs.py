"""Isolated jobs for the sidebar: the kernel's ``isolated_*`` events as small protocol messages.

``run_isolated()``, ``isolated_map()`` and ``%%fresh_model --isolate`` publish
``isolated_started``, ``isolated_sample`` (the job process's memory sample, about 4 a second)
and ``isolated_done`` (the whole ``IsolatedResult.to_dict()``) through :mod:`kerasmagic.events`.
:class:`IsolatedJobs` folds them into the protocol's ``isolated_started`` /
``isolated_sample`` / ``isolated_done`` messages (docs/reference/protocol.md): per job only what the
panel shows, samples at most one per :data:`SAMPLE_MIN_GAP_S` per job, and it keeps the
running jobs and the last :data:`KEEP_FINISHED` finished ones for a sidebar that attaches
later (the ``isolated_jobs`` message).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from ..probes.sample import gpu_device_values, keep_largest
from .protocol import shorten

__all__ = ["IsolatedJobs", "KINDS", "KEEP_FINISHED", "SAMPLE_MIN_GAP_S"]

#: The events this module turns into messages (``isolated_map_progress``: an ``isolated_map``'s counts,
#: sent as an ``isolated_jobs`` list whose jobs of that map carry them as ``map_progress``).
KINDS = ("isolated_started", "isolated_sample", "isolated_done", "isolated_map_progress")
#: Maps whose counts are kept (the newest), and jobs remembered as belonging to one.
KEEP_MAPS = 4
KEEP_MAP_JOBS = 4096
_MAP_COUNTS = ("total", "done", "running", "failed", "left", "elapsed_s")
#: Finished jobs kept for a sidebar that attaches (or reloads) later.
KEEP_FINISHED = 20
#: At most one ``isolated_sample`` message per job this often (the worker samples at 4 Hz).
SAMPLE_MIN_GAP_S = 0.5
#: Running jobs tracked at most; a job whose ``isolated_done`` never came is dropped first.
RUNNING_LIMIT = 256
#: A failed job's error text is cut to this many characters (plus a length note).
ERROR_LIMIT = 200


def _number(value: Any) -> float | int | None:
    """A byte count or time as a JSON number, or None (unavailable objects, bools, junk)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if value == value and abs(value) != float("inf") else None


def _node(node: Any) -> dict[str, str] | None:
    """``{"ip", "hostname"}`` of a Ray node, None on this machine (``None`` or ``{}``)."""
    if not isinstance(node, dict) or not node:
        return None
    return {"ip": str(node.get("ip") or ""), "hostname": str(node.get("hostname") or "")}


def _gpu_total(peaks: dict[str, Any]) -> int | float | None:
    """GPU bytes summed over devices (each device's own peak), None when no device had a number."""
    values = [v for v in peaks.values() if _number(v) is not None]
    return sum(values) if values else None


#: The worker's allocator peaks a job message carries (optional fields, since 1.4): the job's
#: field, the framework in a worker sample's ``allocators``, its key there, and the report's
#: field in ``isolated_done``'s payload (``IsolatedResult.to_dict()``).
_ALLOCATOR_PEAKS = (("torch_peak_bytes", "torch", "peak_allocated_bytes", "child_torch_peak_allocated_bytes"),
                    ("jax_peak_bytes", "jax", "peak_bytes", "child_jax_peak_bytes"))


def _allocator_peaks(allocators: Any) -> dict[str, dict[str, Any]]:
    """``{job field: {device: peak}}`` from a worker sample's ``allocators`` (a framework
    without numbers, an unavailable object, gives none)."""
    peaks: dict[str, dict[str, Any]] = {}
    for name, framework, key, _ in _ALLOCATOR_PEAKS:
        view = allocators.get(framework) if isinstance(allocators, dict) else None
        if isinstance(view, dict) and view.get("status") != "unavailable":
            peaks[name] = {device: stats.get(key) for device, stats in view.items() if isinstance(stats, dict)}
    return peaks


def _put_allocator_peaks(job: dict[str, Any], totals: dict[str, Any]) -> None:
    """Set the optional allocator fields that have a number; the others stay absent (never a 0
    that was not read: a job whose torch never started CUDA has no ``torch_peak_bytes``)."""
    for name, *_ in _ALLOCATOR_PEAKS:
        total = totals.get(name)
        if total is not None:
            job[name] = total


class _Running:
    __slots__ = ("job", "gpu_peaks", "allocator_peaks", "last_sent")

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.gpu_peaks: dict[str, Any] = {}
        self.allocator_peaks: dict[str, dict[str, Any]] = {}
        self.last_sent: float | None = None


class IsolatedJobs:
    """The isolated jobs this kernel ran, as the sidebar sees them; thread-safe.

    Example:
        >>> jobs = IsolatedJobs()
        >>> jobs.on_event("isolated_started", {"job_id": "j1", "label": "fold", "on": "local",
        ...                                    "node": None, "ts": 100.0})["job"]["status"]
        'running'
        >>> jobs.on_event("isolated_sample", {"job_id": "j1", "rss_bytes": 5, "ts": 100.1})["rss_peak_bytes"]
        5
        >>> jobs.on_event("isolated_sample", {"job_id": "j1", "rss_bytes": 7, "ts": 100.2}) is None  # throttled
        True
        >>> done = jobs.on_event("isolated_done", {"job_id": "j1", "label": "fold", "status": "error",
        ...                                        "error": "ValueError: bad", "wall_s": 1.5, "on": "local",
        ...                                        "node": {}, "child_rss_peak_bytes": 9,
        ...                                        "child_gpu_process_peak_bytes": {}})
        >>> done["job"]["status"], done["job"]["rss_peak_bytes"], done["job"]["error"]
        ('error', 9, 'ValueError: bad')
        >>> [job["job_id"] for job in jobs.snapshot()["jobs"]]
        ['j1']
    """

    def __init__(self, keep: int = KEEP_FINISHED, min_gap_s: float = SAMPLE_MIN_GAP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.min_gap_s = min_gap_s
        self._clock = clock
        self._lock = threading.Lock()
        self._running: OrderedDict[str, _Running] = OrderedDict()
        self._finished: deque[dict[str, Any]] = deque(maxlen=keep)
        self._maps: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._map_of: OrderedDict[str, str] = OrderedDict()

    def on_event(self, kind: str, payload: Any) -> dict[str, Any] | None:
        """The message to send for one event, or None (throttled, unknown job, not a job event)."""
        if kind == "isolated_map_progress" and isinstance(payload, dict) and isinstance(payload.get("map_id"), str):
            with self._lock:
                return self._map_progress(payload)
        if not isinstance(payload, dict) or not isinstance(payload.get("job_id"), str):
            return None
        with self._lock:
            if kind == "isolated_started":
                return self._started(payload)
            if kind == "isolated_sample":
                return self._sample(payload)
            if kind == "isolated_done":
                return self._done(payload)
        return None

    def snapshot(self) -> dict[str, Any]:
        """The ``isolated_jobs`` message: running jobs (oldest first), then finished (newest first)."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        running = [self._with_map(entry.job) for entry in self._running.values()]
        finished = [self._with_map(job) for job in reversed(self._finished)]
        return {"method": "isolated_jobs", "ts": time.time(), "jobs": running + finished}

    def _with_map(self, job: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``job``, with its map's latest counts when it is an ``isolated_map`` item."""
        copy = dict(job)
        progress = self._maps.get(self._map_of.get(job["job_id"], ""))
        if progress is not None:
            copy["map_progress"] = dict(progress)
        return copy

    def _map_progress(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """A map's counts changed: remember them and its jobs; the whole list goes out again."""
        progress = {name: _number(payload.get(name)) for name in _MAP_COUNTS}
        if any(value is None for value in progress.values()):
            return None
        progress["eta_s"] = _number(payload.get("eta_s"))
        map_id = payload["map_id"]
        self._maps.pop(map_id, None)
        self._maps[map_id] = progress
        while len(self._maps) > KEEP_MAPS:
            self._maps.popitem(last=False)
        for job_id in payload.get("job_ids") or ():
            if isinstance(job_id, str):
                self._map_of.pop(job_id, None)
                self._map_of[job_id] = map_id
        while len(self._map_of) > KEEP_MAP_JOBS:
            self._map_of.popitem(last=False)
        return self._snapshot()

    # ---- events -------------------------------------------------------------------------------
    def _started(self, payload: dict[str, Any]) -> dict[str, Any]:
        job_id = payload["job_id"]
        started_ts = _number(payload.get("ts")) or time.time()
        job = {
            "job_id": job_id,
            "label": str(payload.get("label") or "isolated job"),
            "status": "running",
            "on": str(payload.get("on") or "local"),
            "node": _node(payload.get("node")),
            "started_ts": started_ts,
            "wall_s": None,
            "rss_peak_bytes": None,
            "gpu_peak_bytes": None,
        }
        self._running.pop(job_id, None)
        self._running[job_id] = _Running(job)
        while len(self._running) > RUNNING_LIMIT:
            self._running.popitem(last=False)
        return {"method": "isolated_started", "ts": time.time(), "job": self._with_map(job)}

    def _sample(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        entry = self._running.get(payload["job_id"])
        if entry is None:
            return None  # not started here (a kernel that loaded kerasmagic mid-job), or over
        job = entry.job
        rss = _number(payload.get("rss_bytes"))
        if rss is not None:
            job["rss_peak_bytes"] = max(job["rss_peak_bytes"] or 0, rss)
        keep_largest(entry.gpu_peaks, gpu_device_values(payload.get("gpu"), "process_used_bytes"))
        job["gpu_peak_bytes"] = _gpu_total(entry.gpu_peaks)
        # NVML cannot see the worker in a container (its pid is not the host's): the exact
        # allocator peaks still are the job's GPU memory, all but the CUDA context.
        for name, peaks in _allocator_peaks(payload.get("allocators")).items():
            keep_largest(entry.allocator_peaks.setdefault(name, {}),
                         {device: peak for device, peak in peaks.items() if _number(peak) is not None})
        _put_allocator_peaks(job, {name: _gpu_total(peaks) for name, peaks in entry.allocator_peaks.items()})
        if job["node"] is None and payload.get("node"):
            job["node"] = _node(payload.get("node"))
        now = self._clock()
        if entry.last_sent is not None and now - entry.last_sent < self.min_gap_s:
            return None  # the peaks are kept: the next message (or done) carries them
        entry.last_sent = now
        message = {
            "method": "isolated_sample",
            "ts": _number(payload.get("ts")) or time.time(),
            "job_id": job["job_id"],
            "rss_bytes": rss,
            "rss_peak_bytes": job["rss_peak_bytes"],
            "gpu_peak_bytes": job["gpu_peak_bytes"],
        }
        _put_allocator_peaks(message, job)
        return message

    def _done(self, payload: dict[str, Any]) -> dict[str, Any]:
        job_id = payload["job_id"]
        entry = self._running.pop(job_id, None)
        seen = entry.job if entry is not None else {}
        now = time.time()
        wall_s = _number(payload.get("wall_s"))
        started_ts = seen.get("started_ts")
        if started_ts is None:
            started_ts = now - (wall_s or 0.0)
        rss_peak = _number(payload.get("child_rss_peak_bytes"))
        if rss_peak is None:
            rss_peak = seen.get("rss_peak_bytes")
        gpu = payload.get("child_gpu_process_peak_bytes")
        gpu_peak = _gpu_total(gpu) if isinstance(gpu, dict) else None
        if gpu_peak is None:
            gpu_peak = seen.get("gpu_peak_bytes")
        status = str(payload.get("status") or "ok")
        job = {
            "job_id": job_id,
            "label": str(payload.get("label") or seen.get("label") or "isolated job"),
            "status": status,
            "on": str(payload.get("on") or seen.get("on") or "local"),
            "node": _node(payload.get("node")) or seen.get("node"),
            "started_ts": started_ts,
            "wall_s": wall_s if wall_s is not None else max(0.0, now - started_ts),
            "rss_peak_bytes": rss_peak,
            "gpu_peak_bytes": gpu_peak,
        }
        # The report's peaks (its last reading included) win; a job that died before its
        # report keeps what its samples said.
        _put_allocator_peaks(job, seen)
        _put_allocator_peaks(job, {name: _gpu_total(field) for name, _, _, reported in _ALLOCATOR_PEAKS
                                   if isinstance(field := payload.get(reported), dict)
                                   and field.get("status") != "unavailable"})
        # Whether it ran in the pool's warm spare (or why not), and what the spares cost then.
        if isinstance(payload.get("spare"), str) and payload["spare"]:
            job["spare"] = payload["spare"]
        spares = payload.get("pool_spares")
        if isinstance(spares, list) and spares:
            job["spares"] = [{"pid": spare.get("pid"), "device": spare.get("device"), "state": spare.get("state"),
                              "rss_bytes": _number(spare.get("rss_bytes")),
                              "gpu_bytes": _number(spare.get("gpu_bytes"))}
                             for spare in spares if isinstance(spare, dict)]
        error = payload.get("error")
        if status != "ok" and isinstance(error, str) and error:
            # "ExcType: message": its first line says what happened; the report has the rest.
            job["error"] = shorten((error.strip().splitlines() or [error])[0], ERROR_LIMIT)
        self._finished.append(job)
        return {"method": "isolated_done", "ts": now, "job": self._with_map(job)}

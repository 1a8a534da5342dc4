"""Process memory: RSS, the exact peak since a mark, and the container's limit.

Linux keeps the peak resident set size of a process (``VmHWM``) and lets the process
reset it by writing ``5`` to ``/proc/self/clear_refs``; that gives an exact per-cell peak
without a sampling thread. Elsewhere (or where ``clear_refs`` is not writable) we fall back
to a sampling thread and say so in the result.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any

from .availability import Unavailable, guarded
from .cgroup import memory_cgroup

__all__ = ['PeakRss', 'container_limit_bytes', 'high_water_rss_bytes', 'host_memory', 'pss_uss_bytes', 'rss_bytes',
           'snapshot']

_STATUS_PATH = "/proc/self/status"
_CLEAR_REFS_PATH = "/proc/self/clear_refs"
_HWM_RE = re.compile(rb"VmHWM:\s+(\d+) kB")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_psutil_process = None


def _process():
    global _psutil_process
    if _psutil_process is None or _psutil_process.pid != os.getpid():
        import psutil  # psutil is a hard dependency, but importing it lazily keeps import fast

        _psutil_process = psutil.Process()
    return _psutil_process


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists in *this* PID namespace (signal 0, nothing sent).

    Example:
        >>> pid_exists(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours to signal
    return True


def rss_bytes() -> int:
    """Resident set size of this process, in bytes (about 20 µs).

    Example:
        >>> rss_bytes() > 0
        True
    """
    if sys.platform.startswith("linux"):
        # statm avoids psutil's object overhead and is what the sampler reads every tick.
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    return _process().memory_info().rss


def host_memory() -> dict[str, int]:
    """The machine's memory: ``{"total_bytes", "available_bytes"}``, as ``psutil.virtual_memory()``
    gives ``total`` and ``available``.

    On Linux it reads the two lines of ``/proc/meminfo`` itself (about 25 µs, a quarter of
    psutil's cost: the sampler reads it every tick).

    Example:
        >>> host = host_memory()
        >>> host["total_bytes"] >= host["available_bytes"] > 0
        True
    """
    if sys.platform.startswith("linux"):
        total = available = None
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                if total is not None and available is not None:
                    return {"total_bytes": total, "available_bytes": available}
        # A kernel too old for MemAvailable (before 3.14): psutil estimates it.
    import psutil

    memory = psutil.virtual_memory()
    return {"total_bytes": int(memory.total), "available_bytes": int(memory.available)}


def container_limit_bytes() -> int | Unavailable:
    """The lowest memory limit on this process's own cgroup path (its cgroup and every
    ancestor, cgroup v1 or v2), if one is set (:func:`kerasmagic.probes.cgroup.memory_cgroup`).

    Example:
        >>> limit = container_limit_bytes()   # an int, or Unavailable("not_supported", ...)
    """
    memory = memory_cgroup()
    if isinstance(memory, Unavailable):
        return memory
    if memory.limit_bytes is None:
        return Unavailable("not_supported", "no memory limit is set on this process's cgroup path")
    return memory.limit_bytes


def _read_hwm_bytes() -> int:
    with open(_STATUS_PATH, "rb") as status:
        match = _HWM_RE.search(status.read())
    if match is None:
        raise OSError("VmHWM missing from /proc/self/status")
    return int(match.group(1)) * 1024


def high_water_rss_bytes() -> int | Unavailable:
    """The peak RSS of this process (the kernel's ``VmHWM``) since it started or since a
    ``PeakRss`` last reset it: exact, no sampling.

    Example:
        >>> high_water_rss_bytes() >= rss_bytes()
        True
    """
    try:
        return _read_hwm_bytes()
    except (OSError, ValueError) as exc:
        return Unavailable("not_supported", f"no peak RSS from the OS here ({exc})")


def pss_uss_bytes() -> dict[str, int]:
    """``pss_bytes`` and ``uss_bytes`` of this process, where Linux gives them (else fewer keys).

    A forked child shares its parent's pages, so its RSS counts them again: PSS counts each
    shared page in proportion to its sharers, USS only the pages this process alone has.

    Example:
        >>> sorted(pss_uss_bytes())                   # doctest: +SKIP
        ['pss_bytes', 'uss_bytes']
    """
    figures: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup", "rb") as rollup:
            for line in rollup:
                key, _, rest = line.partition(b":")
                if key in (b"Pss", b"Private_Clean", b"Private_Dirty"):
                    figures[key.decode()] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    result = {}
    if "Pss" in figures:
        result["pss_bytes"] = figures["Pss"]
    if "Private_Clean" in figures and "Private_Dirty" in figures:
        result["uss_bytes"] = figures["Private_Clean"] + figures["Private_Dirty"]
    return result


def _exact_peak_supported() -> bool:
    try:
        with open(_CLEAR_REFS_PATH, "w") as clear_refs:
            clear_refs.write("5")
        _read_hwm_bytes()
        return True
    except OSError:
        return False


class PeakRss:
    """The peak RSS of this process from :meth:`start` until :meth:`stop`.

    ``method`` is ``"exact"`` (the kernel's own high-water mark, reset at start) or
    ``"sampled"`` (a 2 ms sampling thread, which can miss short spikes).

    Example:
        >>> peak = PeakRss().start()
        >>> block = b"x" * (50 * 2**20); del block       # written, so the pages are really resident
        >>> peak.stop() - peak.start_rss_bytes > 45 * 2**20
        True
    """

    SAMPLE_INTERVAL_S = 0.002
    _exact: bool | None = None
    #: Exact measurements running now (outermost first); nested ones must not erase their peaks.
    _active: list[PeakRss] = []

    def __init__(self) -> None:
        self.method = "exact"
        self.start_rss_bytes = 0
        self.peak_bytes: int | None = None
        self._sampler: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._sampled_peak = 0
        self._carried_peak = 0

    def start(self) -> PeakRss:
        if PeakRss._exact is None:
            PeakRss._exact = _exact_peak_supported()
        self.start_rss_bytes = rss_bytes()
        if PeakRss._exact:
            self.method = "exact"
            # VmHWM is one counter per process: before a nested measurement resets it, the
            # measurements around it keep the peak they have seen so far.
            high_water = _read_hwm_bytes()
            for outer in PeakRss._active:
                outer._carried_peak = max(outer._carried_peak, high_water)
            with open(_CLEAR_REFS_PATH, "w") as clear_refs:
                clear_refs.write("5")
            PeakRss._active.append(self)
        else:
            self.method = "sampled"
            self._sampled_peak = self.start_rss_bytes
            self._stop_event.clear()
            self._sampler = threading.Thread(
                target=self._sample, name="kerasmagic-peak-rss", daemon=True
            )
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop_event.wait(self.SAMPLE_INTERVAL_S):
            self._sampled_peak = max(self._sampled_peak, rss_bytes())

    def stop(self) -> int:
        """Stop tracking and return the peak in bytes."""
        if self.method == "exact":
            if self in PeakRss._active:
                PeakRss._active.remove(self)
            self.peak_bytes = max(_read_hwm_bytes(), self._carried_peak, self.start_rss_bytes)
        else:
            self._stop_event.set()
            if self._sampler is not None:
                self._sampler.join()
            self.peak_bytes = max(self._sampled_peak, rss_bytes())
        return self.peak_bytes


def snapshot() -> dict[str, Any]:
    """Everything the process probe knows, as JSON-able values.

    Example:
        >>> sorted(snapshot())
        ['container_limit_bytes', 'pid', 'rss_bytes', 'system_available_bytes', 'ts']
    """

    def system_available() -> int:
        import psutil

        return psutil.virtual_memory().available

    return {
        "ts": time.time(),
        "pid": os.getpid(),
        "rss_bytes": guarded(rss_bytes, "reading RSS"),
        "container_limit_bytes": guarded(container_limit_bytes, "reading the cgroup limit"),
        "system_available_bytes": guarded(system_available, "reading system memory"),
    }

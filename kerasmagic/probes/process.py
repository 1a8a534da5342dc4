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

__all__ = ['PeakRss', 'child_pids', 'child_processes_memory', 'container_limit_bytes', 'descendant_pids',
           'high_water_rss_bytes', 'host_memory', 'process_tree_memory', 'pss_uss_bytes', 'rss_bytes',
           'rss_shmem_bytes', 'snapshot']

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


def rss_shmem_bytes() -> int:
    """The shared memory (tmpfs, ``/dev/shm``) mapped into this process's RSS (``RssShmem``); 0
    where it cannot be read.

    Example:
        >>> rss_shmem_bytes() >= 0
        True
    """
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"RssShmem:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


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


def pss_uss_bytes(pid: int | str = "self") -> dict[str, int]:
    """``pss_bytes`` and ``uss_bytes`` of this process (or of ``pid``), where Linux gives them
    (else fewer keys).

    A forked child shares its parent's pages, so its RSS counts them again: PSS counts each
    shared page in proportion to its sharers, USS only the pages this process alone has.
    The kernel walks the process's page tables to answer: about 15 ms for a 1.2 GiB process
    with TensorFlow (2-core Xeon), so a sampler reads it far less often than RSS.

    Example:
        >>> sorted(pss_uss_bytes())                   # doctest: +SKIP
        ['pss_bytes', 'uss_bytes']
    """
    figures: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
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


def _pid_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * _PAGE_SIZE


def descendant_pids(pid: int | str = "self") -> list[int]:
    """The pids of this process's children, their children and so on (Linux), in walk order.

    Read from ``/proc/<pid>/task/<tid>/children`` of every thread: a child belongs to the
    thread that started it (kerasmagic starts its isolation template from a helper thread).
    Elsewhere, or on a kernel built without that file, the list is empty.

    Example:
        >>> import subprocess, sys
        >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
        >>> child.pid in descendant_pids()            # doctest: +SKIP
        True
        >>> child.kill(); _ = child.wait()
    """
    found: list[int] = []
    queue: list[int | str] = [pid]
    while queue:
        for child in child_pids(queue.pop(0)):
            if child not in found:  # a pid reused mid-walk must not loop
                found.append(child)
                queue.append(child)
    return found


def child_pids(pid: int | str = "self") -> list[int]:
    """The pids of a process's own children, from every thread's ``/proc/<pid>/task/<tid>/children``
    (Linux); empty elsewhere, for a process that is gone, or on a kernel without that file.

    Example:
        >>> child_pids(2**22 + 1)   # no such process
        []
    """
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    pids: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as children:
                pids.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):
            continue
    return pids


#: What the command line of kerasmagic's isolation template holds; its jobs are forks of it.
_TEMPLATE_COMMAND = b"kerasmagic.isolation.template"
#: How the post-mortem's watcher (``kerasmagic/death_watch.py``, one beside each kernel) is told
#: apart from the user's own child processes: a sidebar that said "with 1 child process" for every
#: kernel would teach users to ignore the line.
_DEATH_WATCH_COMMAND = b"death_watch.py"


def child_processes_memory() -> dict[str, int] | Unavailable:
    """The RSS of this process's descendants, and how much of it is kerasmagic's isolation template
    and its jobs (told by their command line): ``{"count", "rss_bytes", "isolation_count",
    "isolation_rss_bytes"}``. Cheap (one ``statm`` per child), unlike :func:`process_tree_memory`.

    A template stays up after the last isolated job until its idle timeout, holding what it
    imported (hundreds of MiB with TensorFlow): outside this kernel's RSS, so a report of the kernel
    alone never showed it (issue 20).

    Example:
        >>> child_processes_memory()["count"] >= 0        # Linux   # doctest: +SKIP
        True
    """
    if not sys.platform.startswith("linux"):
        return Unavailable("not_supported", "child processes are read from Linux's /proc")
    found = {"count": 0, "rss_bytes": 0, "isolation_count": 0, "isolation_rss_bytes": 0}
    for pid in descendant_pids():
        try:
            rss = _pid_rss_bytes(pid)
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except (OSError, ValueError, IndexError):
            continue  # it exited between the walk and now
        if _DEATH_WATCH_COMMAND in command:
            continue  # our post-mortem's watcher: bookkeeping, not the user's children
        ours = _TEMPLATE_COMMAND in command
        if not rss:
            continue  # a zombie (a job that ended, not yet reaped): no memory, nothing to report
        found["count"] += 1
        found["rss_bytes"] += rss
        if ours:
            found["isolation_count"] += 1
            found["isolation_rss_bytes"] += rss
    return found


def process_tree_memory() -> dict[str, Any] | Unavailable:
    """This process's PSS, and the RSS and PSS of its descendants (the isolation template and
    its running jobs, any other child), as the sidebar reconciles its RSS with its neighbours':
    ``{"pss_bytes", "children_count", "children_rss_bytes", "children_pss_bytes", "rss_bytes"}``
    (``rss_bytes``: this process's RSS as the PSS was read, so that a reader can tell a PSS from
    before a jump), and ``child_pids`` (the children counted, for the meter; not sent).

    RSS counts shared pages (libraries, a forked child's inherited pages) in full in every
    process that maps them; PSS shares them out, so PSS sums across processes and RSS does not.
    A PSS the OS does not give is unavailable; a child that exits mid-read is left out.
    Costly (see :func:`pss_uss_bytes`): read it every few tens of seconds, not every tick.

    Example:
        >>> tree = process_tree_memory()              # Linux
        >>> tree["pss_bytes"] <= rss_bytes(), tree["children_count"] >= 0   # doctest: +SKIP
        (True, True)
    """
    if not sys.platform.startswith("linux"):
        return Unavailable("not_supported", "PSS and child processes are read from Linux's /proc")
    own = pss_uss_bytes().get("pss_bytes")
    own_rss = rss_bytes()
    count = children_rss = children_pss = 0
    counted: list[int] = []
    pss_missing = own is None
    for pid in descendant_pids():
        try:
            rss = _pid_rss_bytes(pid)
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if _DEATH_WATCH_COMMAND in cmdline.read():
                    continue  # our post-mortem's watcher (about 10 MiB): not one of the user's children
        except (OSError, ValueError, IndexError):
            continue  # it exited between the walk and now
        pss = pss_uss_bytes(pid).get("pss_bytes")
        count += 1
        counted.append(pid)
        children_rss += rss
        if pss is None:
            pss_missing = True
        else:
            children_pss += pss
    missing = Unavailable("not_supported", "no /proc/<pid>/smaps_rollup here (Linux 4.14 or later gives it)")
    return {
        "pss_bytes": missing if own is None else own,
        "children_count": count,
        "children_rss_bytes": children_rss,
        "children_pss_bytes": missing if pss_missing and count else children_pss,
        **({"rss_bytes": own_rss} if isinstance(own_rss, int) else {}),
        "child_pids": counted,
    }


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

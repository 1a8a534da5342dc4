"""``memory_limit=`` for an isolated job: the job runs out of memory, not the kernel.

The limit counts what the job adds: its memory from the moment it receives the job, above what
it started with. A forked job starts resident with every page of its template (TensorFlow and
Keras imported: 600-700 MiB on CPU), all of it shared and none of it the job's doing; counted
whole, a limit under that would stop every job at once.

Two guards, both on for every limited job:

* **The watch** (everywhere): the kernel's job loop reads the worker's resident set size
  (``/proc/<pid>/statm``, about 10 µs) every :data:`WATCH_INTERVAL_S` and kills the job's
  process group once it reaches the limit. It needs nothing from the machine, but a job that
  grows faster than a tenth of a second can overshoot it by what it allocated meanwhile.
* **A memory cgroup** (where one can be made: root, or a delegated cgroup v2 subtree): a child
  of the kernel's own memory cgroup with the limit, which the worker joins before the job is
  sent to it. The kernel's OOM killer then stops the job however fast it grows. A cgroup
  charges the pages the job makes and also those it copies from its template on first write
  (Python's reference counts write to many), which RSS does not count again: its limit is the
  job's limit plus what the job started with, so it never acts before the watch would, and
  stops what the watch cannot see in time.

Where no cgroup can be made the job still has the watch, and its report says why
(:attr:`JobMemoryLimit.how`).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

from ..errors import KerasMagicUsageError
from ..limits import parse_size
from ..probes.availability import Unavailable
from ..probes.cgroup import memory_cgroup, read_oom_kills
from .errors import IsolationUsageError

__all__ = ['WATCH_INTERVAL_S', 'JobMemoryLimit', 'check_memory_limit']

logger = logging.getLogger(__name__)

#: How often the kernel reads a limited job's RSS.
WATCH_INTERVAL_S = 0.1
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_names = itertools.count(1)
# Cgroups whose processes had not gone yet when their job ended: removed at the next job.
_leftover: list[str] = []
_leftover_lock = threading.Lock()


def check_memory_limit(limit: object) -> int | None:
    """``memory_limit=`` in bytes (``"2GiB"``, ``1.5e9``, ``512MiB``), or None for no limit.

    Example:
        >>> check_memory_limit("2GiB"), check_memory_limit(None)
        (2147483648, None)
        >>> check_memory_limit("lots")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: memory_limit: cannot read 'lots' as a memory size; e.g. ...
    """
    if limit is None:
        return None
    try:
        return parse_size(limit)
    except KerasMagicUsageError as exc:
        raise IsolationUsageError(f"memory_limit: {exc}") from None


def _rss_of(pid: int) -> int | None:
    """A process's RSS from ``/proc/<pid>/statm`` (about 10 µs); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None  # gone, or not Linux: the job's own samples are the watch then


class JobMemoryLimit:
    """One job's memory limit: the watch, and the cgroup where one could be made.

    Example:
        >>> limit = JobMemoryLimit(2 * 2**30)
        >>> limit.watch(lambda: _rss_of(os.getpid())) is None     # this process is far below 2 GiB
        True
        >>> limit.release()
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = int(limit_bytes)
        #: The folder of the job's own cgroup, None where none could be made.
        self.cgroup: str | None = None
        self._oom_file: str | None = None
        self._oom_before = 0
        #: How the limit is held, for the report.
        self.how = ""
        #: The worker's RSS when it received the job (shared with its template, for a fork).
        self.start_rss_bytes = 0
        #: The most the job added above that, and the RSS of the last reading.
        self.peak_growth_bytes = 0
        self.last_rss_bytes = 0
        self._next_read = 0.0

    # ---- the cgroup ------------------------------------------------------------------------------
    def enter(self, pid: int) -> None:
        """Put the worker into a cgroup of its own, before the job is sent; says in ``how`` what held."""
        _sweep_leftovers()
        self.start_rss_bytes = _rss_of(pid) or 0
        watch = self._watch_words()
        try:
            self.cgroup, self._oom_file = _make_cgroup(self.limit_bytes + self.start_rss_bytes)
            with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as procs:
                procs.write(str(pid))
            oom = read_oom_kills(self._oom_file)
            self._oom_before = oom if isinstance(oom, int) else 0
            self.how = f"a memory cgroup of its own ({os.path.basename(self.cgroup)}) and {watch}"
        except (OSError, _NoCgroup) as exc:
            self.release()
            self.cgroup = None
            self.watch_only(self.start_rss_bytes, str(exc))

    def watch_only(self, start_rss_bytes: int, why: str) -> None:
        """Hold the limit with the watch alone (``why``: no cgroup could be made), counting from
        ``start_rss_bytes``, the process's RSS when it received the job."""
        self.start_rss_bytes = start_rss_bytes
        self.how = f"{self._watch_words()} (no memory cgroup: {why})"

    def _watch_words(self) -> str:
        return (f"its growth over the {self.start_rss_bytes / 2**20:.0f} MiB it started with watched every "
                f"{WATCH_INTERVAL_S:g} s")

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer acted in the job's cgroup."""
        if self._oom_file is None:
            return False
        now = read_oom_kills(self._oom_file)
        return isinstance(now, int) and now > self._oom_before

    def release(self) -> None:
        """Remove the job's cgroup (its processes are gone or going); retried at the next job."""
        folder, self.cgroup = self.cgroup, None
        if folder is not None and not _remove(folder):
            with _leftover_lock:
                if not _leftover:
                    atexit.register(_remove_leftovers)
                _leftover.append(folder)

    # ---- the watch -------------------------------------------------------------------------------
    def watch(self, read_rss: Callable[[], int | None]) -> int | None:
        """The watch: what the job added if that reached the limit, else None. ``read_rss`` reads the
        process's RSS (:meth:`~kerasmagic.isolation.processes.JobProcess.resident_bytes`); it is
        called at most every WATCH_INTERVAL_S."""
        now = time.monotonic()
        if now < self._next_read:
            return None
        self._next_read = now + WATCH_INTERVAL_S
        return self.reading(read_rss())

    def reading(self, rss: int | None) -> int | None:
        """One RSS reading of the job's process (the watch's, or a sample the job sent): it counts
        toward the peak; what the job added if that reached the limit, else None."""
        if rss is None:
            return None
        self.last_rss_bytes = rss
        growth = rss - self.start_rss_bytes
        self.peak_growth_bytes = max(self.peak_growth_bytes, growth)
        return growth if growth >= self.limit_bytes else None


class _NoCgroup(Exception):
    """Why no cgroup of its own could be made for a job (said in the report, never raised to the user)."""


def _make_cgroup(limit_bytes: int) -> tuple[str, str]:
    """A new child of this process's memory cgroup with ``limit_bytes``: (its folder, its OOM counter)."""
    if os.name != "posix" or not os.path.isdir("/proc/self"):
        raise _NoCgroup("not Linux")
    own = memory_cgroup()
    if isinstance(own, Unavailable):
        raise _NoCgroup(own.detail or own.reason)
    parent = os.path.dirname(own.oom_kill_file)
    name = f"kerasmagic-job-{os.getpid()}-{next(_names)}"
    folder = os.path.join(parent, name)
    if own.version == 2:
        # cgroup v2 gives a child the memory controller only where the parent hands it down,
        # and refuses that while the parent holds processes itself (the kernel does): a
        # delegated or empty parent works, a plain session scope does not.
        with open(os.path.join(parent, "cgroup.subtree_control")) as control:
            enabled = control.read().split()
        if "memory" not in enabled:
            try:
                with open(os.path.join(parent, "cgroup.subtree_control"), "w") as control:
                    control.write("+memory")
            except OSError as exc:
                raise _NoCgroup(f"cgroup v2 does not hand the memory controller down from {own.cgroup} "
                                f"({exc.strerror or exc})") from None
        limit_name, oom_name = "memory.max", "memory.events"
    else:
        limit_name, oom_name = "memory.limit_in_bytes", "memory.oom_control"
    try:
        os.mkdir(folder, 0o755)
    except OSError as exc:
        raise _NoCgroup(f"cannot make a cgroup under {parent} ({exc.strerror or exc}; it takes root or a "
                        "delegated cgroup)") from None
    try:
        with open(os.path.join(folder, limit_name), "w") as limit_file:
            limit_file.write(str(limit_bytes))
    except OSError:
        _remove(folder)
        raise
    return folder, os.path.join(folder, oom_name)


def _remove(folder: str, within_s: float = 0.5) -> bool:
    """rmdir a job cgroup; the kernel refuses while a process in it has not been reaped yet."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            os.rmdir(folder)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def _sweep_leftovers(within_s: float = 0.0) -> None:
    with _leftover_lock:
        folders = list(_leftover)
        _leftover.clear()
    for folder in folders:
        if not _remove(folder, within_s=within_s):
            with _leftover_lock:
                _leftover.append(folder)


def _remove_leftovers() -> None:
    """At exit: the last jobs' cgroups go too (a job killed a moment ago is being reaped)."""
    _sweep_leftovers(within_s=1.0)
    atexit.unregister(_remove_leftovers)

"""A record of each kernel that outlives it, and the explanation its notebook's next kernel gives.

The out-of-memory killer ends a kernel with SIGKILL: nothing in the process runs after it, so
whatever should explain the death must already be on disk. While kerasmagic is loaded, the
kernel keeps one small JSON file (:class:`KernelRecord`): its last samples, the cell running
and the first line of its code, the memory limit, and the OOM-kill counter of its cgroup
with the file it was read from. A clean end (``%unload_ext kerasmagic``, or the process
exiting through ``atexit``) deletes the file; a file left behind by a process that no longer
exists is a death.

The next kernel of the same notebook (``JPY_SESSION_NAME``, which jupyter-server sets to the
notebook's path, else the kernel's connection file, which a restart keeps) that loads
kerasmagic finds it and prints one explanation (:func:`explain`): killed by the OOM killer
(the counter in the dead kernel's cgroup rose), exited unexpectedly (the counter was readable
and did not rise), or cause unknown.

Records live in a per-user folder (``$KERASMAGIC_RECORD_DIR``, else
``$XDG_RUNTIME_DIR/kerasmagic/kernels``, else ``~/.cache/kerasmagic/kernels``), mode 0700,
files 0600; a folder or file owned by someone else is never read. At most
:data:`KEEP_RECORDS` files of at most :data:`MAX_RECORD_BYTES` each, none older than
:data:`MAX_AGE_S`: the rest is swept when kerasmagic loads. A folder that cannot be written
is said once and never breaks a cell.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import stat
import sys
import threading
import time
from typing import Any

from .probes.cgroup import read_oom_kills
from .tables import format_bytes

__all__ = ['DIR_ENV_VAR', 'KEEP_RECORDS', 'KEEP_SAMPLES', 'MAX_AGE_S', 'MAX_RECORD_BYTES', 'KernelRecord',
           'explain', 'forget', 'notebook_identity', 'previous_deaths', 'record_folder', 'sweep']

logger = logging.getLogger(__name__)

DIR_ENV_VAR = "KERASMAGIC_RECORD_DIR"
#: Samples kept in a record (at 1 Hz a minute, at 10 Hz near the limit six seconds).
KEEP_SAMPLES = 60
#: Record files kept in the folder, at most; dead ones older than MAX_AGE_S go first.
KEEP_RECORDS = 50
MAX_AGE_S = 7 * 24 * 3600.0
#: A file larger than this is not ours to read (ours stay under 8 KiB).
MAX_RECORD_BYTES = 64 * 1024
#: How often a record is rewritten while memory is far from the limit; near it, every sample.
SLOW_WRITE_S = 5.0
_FORMAT = 1
_SUFFIX = ".json"


def record_folder() -> str:
    """Where this user's kernel records live (created on first write).

    Example:
        >>> os.path.basename(record_folder())
        'kernels'
    """
    chosen = os.environ.get(DIR_ENV_VAR)
    if chosen:
        return os.path.abspath(chosen)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and _owned_private(runtime):
        return os.path.join(runtime, "kerasmagic", "kernels")
    return os.path.join(os.path.expanduser("~"), ".cache", "kerasmagic", "kernels")


def _owned_private(path: str) -> bool:
    """Ours and writable by no one else: only then is what is inside ours too."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def notebook_identity(shell: Any = None) -> str | None:
    """What ties the kernels of one notebook together: ``JPY_SESSION_NAME`` (the notebook's path,
    set by jupyter-server 2), else the kernel's connection file (kept by a restart); None
    outside a kernel.

    Example:
        >>> os.environ["JPY_SESSION_NAME"] = "/home/me/lesson.ipynb"
        >>> notebook_identity()
        '/home/me/lesson.ipynb'
        >>> del os.environ["JPY_SESSION_NAME"]
    """
    name = os.environ.get("JPY_SESSION_NAME")
    if name:
        return name
    kernel = getattr(shell, "kernel", None)
    app = getattr(kernel, "parent", None)
    connection_file = getattr(app, "connection_file", None)
    if isinstance(connection_file, str) and connection_file:
        return os.path.abspath(connection_file)
    return None


def _key(identity: str) -> str:
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat``): with the pid it
    names one process, even after the pid is reused. None for a zombie: a kernel that died and
    whose parent has not reaped it yet is dead, and its next kernel may start meanwhile."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            fields = status.read().rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, start_ticks: int | None) -> bool:
    if sys.platform.startswith("linux"):
        now = _start_ticks(pid)
        return now is not None and (start_ticks is None or now == start_ticks)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class KernelRecord:
    """This kernel's record file: written on each cell's start and by the guard's samples.

    Never raises: a folder that cannot be written is said once (stderr) and retried a minute later.

    Example:
        >>> record = KernelRecord("/tmp/records", "/home/me/lesson.ipynb")   # doctest: +SKIP
        >>> record.cell_started(12, "x = np.ones((2**30,))")                   # doctest: +SKIP
        >>> record.close_clean()                                                # doctest: +SKIP
    """

    def __init__(self, folder: str, identity: str) -> None:
        self.folder = folder
        self.identity = identity
        self.pid = os.getpid()
        self.path = os.path.join(folder, f"{_key(identity)}-{self.pid}{_SUFFIX}")
        self._lock = threading.Lock()
        # The cell hooks (main thread) and the guard's samples (its thread) both write the file:
        # one writer at a time, each writing what is newest, so that a sample taken just before a
        # cell started can never replace the record that names the cell (nor share its temp file).
        self._write_lock = threading.Lock()
        self._samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=KEEP_SAMPLES)
        self._cell: dict[str, Any] | None = None
        self._limit: dict[str, Any] | None = None
        self._oom: tuple[str, int] | None = None
        self._started_ts = time.time()
        self._start_ticks = _start_ticks(self.pid)
        self._last_write = 0.0
        self._broken_until = 0.0
        self._said_broken = False
        self.closed = False
        #: Writes done and the last one's cost (the benchmark reads them).
        self.writes = 0
        self.last_write_s = 0.0

    # ---- what the kernel tells it ------------------------------------------------------------
    def cell_started(self, execution_count: int | None, first_line: str) -> None:
        """A cell starts: written at once, as the cell may take all memory before the next sample."""
        with self._lock:
            self._cell = {"execution_count": execution_count, "first_line": first_line, "started_ts": time.time()}
        self.write()

    def cell_ended(self) -> None:
        with self._lock:
            self._cell = None
        self.write(force=False)

    def sample(self, ts: float, rss_bytes: int, limit: dict[str, Any] | None, near: bool) -> None:
        """A guard sample; the file is rewritten each time ``near`` the limit, else every few seconds."""
        with self._lock:
            self._samples.append((round(ts, 2), int(rss_bytes)))
            if limit is not None:
                self._limit = limit
                cgroup = limit.get("cgroup")
                if isinstance(cgroup, dict) and isinstance(cgroup.get("oom_kills"), int):
                    self._oom = (cgroup["oom_kill_file"], cgroup["oom_kills"])
        self.write(force=near)

    # ---- the file ---------------------------------------------------------------------------------
    def _content(self) -> dict[str, Any]:
        with self._lock:
            return {
                "format": _FORMAT,
                "pid": self.pid,
                "start_ticks": self._start_ticks,
                "notebook": self.identity,
                "started_ts": self._started_ts,
                "updated_ts": time.time(),
                "cell": dict(self._cell) if self._cell else None,
                "limit": self._limit,
                "oom_kill_file": self._oom[0] if self._oom else None,
                "oom_kills": self._oom[1] if self._oom else None,
                "samples": list(self._samples),
            }

    def write(self, force: bool = True) -> bool:
        """Rewrite the file (atomically: a kill mid-write leaves the previous one); False if it could not."""
        with self._write_lock:
            now = time.monotonic()
            if self.closed or now < self._broken_until or (not force and now - self._last_write < SLOW_WRITE_S):
                return False
            started = time.perf_counter()
            try:
                self._write(json.dumps(self._content(), separators=(",", ":")).encode())
            except (OSError, ValueError) as exc:
                self._broken_until = now + 60.0
                if not self._said_broken:
                    self._said_broken = True
                    print(f"kerasmagic: cannot keep this kernel's record in {self.folder} ({exc}); if it dies, "
                          f"the next kernel cannot say why (set {DIR_ENV_VAR} to a writable folder)", file=sys.stderr)
                return False
            self._last_write = now
            self.writes += 1
            self.last_write_s = time.perf_counter() - started
            return True

    def _write(self, data: bytes) -> None:
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        if not _owned_private(self.folder):
            raise PermissionError(f"{self.folder} is not a private folder of this user")
        temporary = os.path.join(self.folder, f".{os.path.basename(self.path)}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(descriptor, data)
        finally:
            os.close(descriptor)
        os.replace(temporary, self.path)

    def close_clean(self) -> None:
        """The kernel ends cleanly: no record is left, so no death is reported."""
        with self._write_lock:  # a write under way would otherwise put the file back
            self.closed = True
        try:
            os.unlink(self.path)
        except OSError:
            pass  # never written (an unwritable folder), or swept already


def _read_record(path: str) -> dict[str, Any] | None:
    """A record file, if it is this user's regular file of a sane size; None otherwise."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size > MAX_RECORD_BYTES:
            return None
        data = json.loads(os.read(descriptor, MAX_RECORD_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(descriptor)
    return data if isinstance(data, dict) and data.get("format") == _FORMAT else None


def _record_files(folder: str) -> list[str]:
    if not _owned_private(folder):
        return []  # someone else's folder (or none): never read what is in it
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, name) for name in names if name.endswith(_SUFFIX) and not name.startswith(".")]


def previous_deaths(folder: str, identity: str) -> list[dict[str, Any]]:
    """Records of this notebook's kernels that ended without a clean exit, newest first; each
    carries its ``path``.

    Example:
        >>> previous_deaths("/nonexistent", "/home/me/lesson.ipynb")
        []
    """
    prefix = _key(identity) + "-"
    deaths = []
    for path in _record_files(folder):
        if not os.path.basename(path).startswith(prefix):
            continue
        record = _read_record(path)
        if record is None or record.get("notebook") != identity or record.get("pid") == os.getpid():
            continue
        pid, ticks = record.get("pid"), record.get("start_ticks")
        if isinstance(pid, int) and _alive(pid, ticks if isinstance(ticks, int) else None):
            continue  # another kernel of this notebook, still running
        deaths.append({**record, "path": path})
    return sorted(deaths, key=lambda record: -float(record.get("updated_ts") or 0))


def forget(path: str) -> None:
    """Delete a dead kernel's record once its death has been told.

    Example:
        >>> forget("/nonexistent/record.json")
    """
    try:
        os.unlink(path)
    except OSError:
        pass  # gone already (another kernel of the notebook told it)


def sweep(folder: str, keep: int = KEEP_RECORDS, max_age_s: float = MAX_AGE_S) -> int:
    """Delete dead kernels' records older than ``max_age_s`` and, beyond ``keep`` files, the
    oldest; returns how many went. Records of running kernels stay.

    Example:
        >>> sweep("/nonexistent")
        0
    """
    entries = []
    for path in _record_files(folder):
        try:
            entries.append((os.lstat(path).st_mtime, path))
        except OSError:
            continue
    entries.sort(reverse=True)
    removed = 0
    now = time.time()
    for index, (mtime, path) in enumerate(entries):
        if index < keep and now - mtime < max_age_s:
            continue
        record = _read_record(path)
        pid = record.get("pid") if record is not None else None
        if isinstance(pid, int) and _alive(pid, record.get("start_ticks") if record is not None else None):
            continue  # a running kernel's record, however old
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            continue
    return removed


def explain(record: dict[str, Any]) -> str:
    """One sentence: when the kernel died, which cell ran, and why, as far as can be known.

    Example:
        >>> record = {"updated_ts": 0, "cell": {"execution_count": 12, "first_line": "x = big()"},
        ...           "samples": [[0, 3 * 2**30]], "limit": {"limit_bytes": 4 * 2**30},
        ...           "oom_kill_file": "/nonexistent", "oom_kills": 0}
        >>> explain(record)                                  # doctest: +ELLIPSIS
        'The previous kernel of this notebook died at ...:00 while cell [12] ran (`x = big()`): cause unknown ...'
    """
    when = time.strftime("%H:%M:%S", time.localtime(float(record.get("updated_ts") or 0)))
    cell = record.get("cell")
    if isinstance(cell, dict):
        first = str(cell.get("first_line") or "").replace("`", "'")
        number = cell.get("execution_count")
        label = f"cell [{number}]" if isinstance(number, int) else "a cell"
        where = f"while {label} ran" + (f" (`{first}`)" if first else "")
    else:
        where = "between cells"
    samples = record.get("samples") or []
    rss = samples[-1][1] if samples and isinstance(samples[-1], list) and len(samples[-1]) == 2 else None
    limit = (record.get("limit") or {}).get("limit_bytes") if isinstance(record.get("limit"), dict) else None
    figure = ""
    if isinstance(rss, int):
        figure = f"at {format_bytes(rss)}" + (f" of a {format_bytes(limit)} limit" if isinstance(limit, int) else "")
    oom_file, oom_before = record.get("oom_kill_file"), record.get("oom_kills")
    oom_now = read_oom_kills(oom_file) if isinstance(oom_file, str) and isinstance(oom_before, int) else None
    if isinstance(oom_now, int) and isinstance(oom_before, int) and oom_now > oom_before:
        cause = "killed by the out-of-memory killer" + (f" {figure}" if figure else "")
    elif isinstance(oom_now, int):
        cause = ("exited unexpectedly, not killed by the out-of-memory killer (its cgroup counted no OOM kill); "
                 "a crash, os._exit(), or a restart that had to kill it"
                 + (f"; its last reading: {figure.removeprefix('at ')}" if figure else ""))
    else:
        cause = "cause unknown" + (f" (its last reading: {figure.removeprefix('at ')}" if figure else " (")
        near = isinstance(rss, int) and isinstance(limit, int) and rss >= 0.9 * limit
        cause += ("; that close to the limit, probably out of memory)" if near else
                  "; no OOM-kill counter could be read)")
    return f"The previous kernel of this notebook died at {when} {where}: {cause}."

"""A record of each kernel that outlives it, and the explanation its notebook's next kernel gives.

The out-of-memory killer ends a kernel with SIGKILL: nothing in the process runs after it, so
whatever should explain the death must already be on disk. While kerasmagic is loaded, the
kernel keeps one small JSON file (:class:`KernelRecord`): its last samples, the cell running
and the first line of its code, the memory limit, and the OOM-kill counter of its cgroup
with the file it was read from. A clean end (``%unload_ext kerasmagic``, or the process
exiting through ``atexit``) deletes the file; a file left behind by a process that no longer
exists is a death.

A watcher process (:mod:`kerasmagic.death_watch`) sees the kernel die and writes, at that
moment, its exit signal, the cgroup's OOM-kill counter just before and at the death, and the
kernel log's line naming it, where readable. A counter read later says nothing about *whose*
kill it counted (any process of the cgroup raises it), so it is never used alone.

The next kernel of the same notebook (``JPY_SESSION_NAME``, which jupyter-server sets to the
notebook's path, else the kernel's connection file, which a restart keeps) that loads
kerasmagic finds it and prints one explanation (:func:`explain`): killed by the OOM killer
(the kernel log names it, or the counter rose as it died), killed with SIGKILL by something
else, killed by another signal, exited with a code, or what is unknown and why.

Records live in a per-user folder (``$KERASMAGIC_RECORD_DIR``, else
``$XDG_RUNTIME_DIR/kerasmagic/kernels``, else ``~/.cache/kerasmagic/kernels``), mode 0700,
files 0600; a folder or file owned by someone else is never read. At most
:data:`KEEP_RECORDS` files of at most :data:`MAX_RECORD_BYTES` each, none older than
:data:`MAX_AGE_S`: the rest is swept when kerasmagic loads. A folder that cannot be written
is said once and never breaks a cell.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import Any

from . import death_watch
from .probes.availability import Unavailable
from .probes.cgroup import memory_cgroup
from .tables import format_bytes

__all__ = ['DIR_ENV_VAR', 'KEEP_RECORDS', 'KEEP_SAMPLES', 'MAX_AGE_S', 'MAX_RECORD_BYTES', 'KernelRecord',
           'death_time', 'explain', 'forget', 'notebook_identity', 'previous_deaths', 'record_folder', 'sweep']

logger = logging.getLogger(__name__)

DIR_ENV_VAR = "KERASMAGIC_RECORD_DIR"
#: Samples kept in a record (at 1 Hz a minute, at 10 Hz near the limit six seconds).
KEEP_SAMPLES = 60
#: Record files kept in the folder, at most; dead ones older than MAX_AGE_S go first.
KEEP_RECORDS = 50
MAX_AGE_S = 7 * 24 * 3600.0
#: A file larger than this is not ours to read (ours stay under 8 KiB).
MAX_RECORD_BYTES = 64 * 1024
#: How often a record is rewritten while memory is far from the limit, and near it.
SLOW_WRITE_S = 5.0
NEAR_WRITE_S = 0.1
NEAR_WRITE_BYTES = 8 * 2**20
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
        self._written_rss = 0  # the last sample in the file
        self._broken_until = 0.0
        self._said_broken = False
        self.closed = False
        self._watcher: subprocess.Popen | None = None
        #: Writes done and the last one's cost (the benchmark reads them).
        self.writes = 0
        self.last_write_s = 0.0

    # ---- the witness ---------------------------------------------------------------------------------
    def watch(self) -> bool:
        """Start the process that watches this kernel die (:mod:`kerasmagic.death_watch`); False
        where it cannot start (then the next kernel says the cause is unknown, not a guess).

        The record is written first: the watcher writes its facts only where the record still
        exists when the kernel dies (a clean end deletes it before).
        """
        if self._watcher is not None or not sys.platform.startswith("linux"):
            return self._watcher is not None
        memory = memory_cgroup()
        oom_file = "" if isinstance(memory, Unavailable) else memory.oom_kill_file
        if not self.write():
            return False
        with contextlib.suppress(OSError):
            os.unlink(death_watch.death_path(self.path))  # an earlier kernel's with this pid (a container's restart)
        # Read here, while this kernel lives, and handed over: the watcher's own first reading
        # comes tens of milliseconds later, and this kernel can die before it.
        before = death_watch.read_counter(oom_file)
        kmsg = death_watch.KernelLog.open_at_end()
        argv = [str(self.pid), self.path, oom_file, "" if before is None else str(before), f"{time.time():.3f}",
                str(-1 if kmsg is None else kmsg)]
        try:
            self._watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", death_watch.__file__, *argv],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                close_fds=True, pass_fds=() if kmsg is None else (kmsg,), start_new_session=True)
        except OSError as exc:
            print(f"kerasmagic: cannot start the process that watches this kernel ({exc}); if it dies, the "
                  "next kernel cannot say how", file=sys.stderr)
            return False
        finally:
            if kmsg is not None:
                os.close(kmsg)
        return True

    @property
    def watcher_pid(self) -> int | None:
        return None if self._watcher is None else self._watcher.pid

    def _stop_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is None:
            return
        try:
            watcher.send_signal(signal.SIGTERM)
            watcher.wait(2.0)
        except (OSError, subprocess.TimeoutExpired):
            watcher.kill()
            watcher.wait()

    # ---- what the kernel tells it ------------------------------------------------------------
    def cell_started(self, execution_count: int | None, first_line: str) -> None:
        """A cell starts: written at once, as the cell may take all memory before the next sample."""
        with self._lock:
            self._cell = {"execution_count": execution_count, "first_line": first_line, "started_ts": time.time()}
        self.write()

    def cell_ended(self) -> None:
        """A cell ended: written at once (one small file per cell), so that a kernel killed a
        second later is not said to have died in a cell that had finished."""
        with self._lock:
            self._cell = None
        self.write()

    def sample(self, ts: float, rss_bytes: int, limit: dict[str, Any] | None, near: bool) -> None:
        """A guard sample. ``near`` the limit the file is rewritten when the figure moved by
        :data:`NEAR_WRITE_BYTES`, else every :data:`NEAR_WRITE_S`; far from it, every few seconds."""
        with self._lock:
            self._samples.append((round(ts, 2), int(rss_bytes)))
            if limit is not None:
                self._limit = limit
                cgroup = limit.get("cgroup")
                if isinstance(cgroup, dict) and isinstance(cgroup.get("oom_kills"), int):
                    self._oom = (cgroup["oom_kill_file"], cgroup["oom_kills"])
        # Near the limit the file is rewritten at each reading that moved by NEAR_WRITE_BYTES (a
        # death's figure is the last one before the fatal step), and otherwise every NEAR_WRITE_S:
        # the guard reads a flat cell near a small limit 20 times a second.
        moved = abs(int(rss_bytes) - self._written_rss) >= NEAR_WRITE_BYTES
        self.write(force=near and (moved or time.monotonic() - self._last_write >= NEAR_WRITE_S))

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
                "watcher_pid": self.watcher_pid,
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
            with self._lock:
                self._written_rss = self._samples[-1][1] if self._samples else 0
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
        self._stop_watcher()


def _read_record(path: str, any_format: bool = False) -> dict[str, Any] | None:
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
    return data if isinstance(data, dict) and (any_format or data.get("format") == _FORMAT) else None


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
        facts = _death_facts(path, record.get("watcher_pid"))
        if facts is not None and not _facts_are_about(facts, record):
            facts = None  # an earlier kernel's, left where this one's record now is: nothing watched this one
        deaths.append({**record, "path": path, "death": facts})
    return sorted(deaths, key=lambda record: -float(record.get("updated_ts") or 0))


def _death_facts(path: str, watcher_pid: Any, wait_s: float = 2.0) -> dict[str, Any] | None:
    """What the watcher wrote when the kernel died; a moment's wait where it still runs (a restart
    can be quicker than its write), None where there is nothing."""
    facts_path = death_watch.death_path(path)
    deadline = time.monotonic() + wait_s
    while True:
        facts = _read_record(facts_path, any_format=True)
        if facts is not None or not isinstance(watcher_pid, int) or not _alive(watcher_pid, None) \
                or time.monotonic() > deadline:
            return facts
        time.sleep(0.05)


def _facts_are_about(facts: dict[str, Any], record: dict[str, Any]) -> bool:
    """Whether a watcher's facts are about the kernel that kept ``record``: its pid, and a death
    after that kernel started (a record path is the notebook's key and the pid, and pids repeat).

    Example:
        >>> _facts_are_about({"pid": 7, "died_ts": 20.0}, {"pid": 7, "started_ts": 10.0})
        True
        >>> _facts_are_about({"pid": 7, "died_ts": 5.0}, {"pid": 7, "started_ts": 10.0})
        False
    """
    died, started = facts.get("died_ts"), record.get("started_ts")
    if facts.get("pid") != record.get("pid"):
        return False
    return not (isinstance(died, (int, float)) and isinstance(started, (int, float)) and died < started)


def forget(path: str) -> None:
    """Delete a dead kernel's record (and its watcher's facts) once its death has been told.

    Example:
        >>> forget("/nonexistent/record.json")
    """
    for each in (path, death_watch.death_path(path)):
        try:
            os.unlink(each)
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
        forget(path)  # the watcher's facts with it
    return removed


def _clock(ts: Any) -> str:
    """The kernel's clock with its zone, ``14:02:11 UTC``: a browser in another zone (a hub's kernel
    runs in UTC) shows this sentence beside its own clocks."""
    return time.strftime("%H:%M:%S %Z", time.localtime(float(ts or 0))).strip()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_rss(log_line: str) -> int | None:
    """The victim's anonymous memory in the kernel's OOM line (``anon-rss:1082332kB``), in bytes."""
    match = re.search(r"anon-rss:(\d+)kB", log_line)
    return int(match.group(1)) * 1024 if match else None


def _cause(death: dict[str, Any] | None, figure: str, limit: Any) -> str:
    """The verdict, from what the watcher saw at the moment of death; never from a counter alone."""
    reading = f"; its last reading: {figure}" if figure else ""
    if not isinstance(death, dict):
        return ("cause unknown: nothing watched it die (kerasmagic's watcher could not run), and an OOM-kill "
                f"counter read afterwards cannot tell its kill from another process's{reading}")
    log_line, sig, code = death.get("kernel_log"), death.get("signal"), death.get("exit_code")
    before, after = death.get("oom_kills_before"), death.get("oom_kills_at_death")
    rose = isinstance(before, int) and isinstance(after, int) and after > before
    counted = isinstance(before, int) and isinstance(after, int)
    # The OOM killer sends SIGKILL: a kernel that exited with a code or died of another signal was
    # not its victim, whatever its cgroup counted (another process's kill) or the log says.
    could_be_oom = sig == signal.SIGKILL or death.get("wait_status") is None
    if isinstance(log_line, str) and log_line and could_be_oom:
        rss = _kill_rss(log_line)
        at = f" at {format_bytes(rss)}" + (f" of a {format_bytes(limit)} limit" if isinstance(limit, int) else "") \
            if rss is not None else ""
        quoted = log_line.split(")", 1)[0] + ")" if ")" in log_line else log_line[:120]
        return f"killed by the out-of-memory killer{at} (the kernel log: \"{quoted}\"){reading}"
    if rose and could_be_oom:
        how = "SIGKILL, as" if sig == signal.SIGKILL else "as"
        return (f"killed by the out-of-memory killer: it died of {how} its cgroup counted an OOM kill in the "
                f"{_window(death)} before{reading}")
    if sig == signal.SIGKILL:
        why = ("its cgroup counted no OOM kill as it died" if counted else "no OOM-kill counter could be read, "
               "and the kernel log does not name it" if death.get("kernel_log_readable") else
               "no OOM-kill counter or kernel log could be read")
        return (f"killed with SIGKILL, {'not by the out-of-memory killer' if counted else 'by whom is unknown'} "
                f"({why}): a restart or shutdown that had to kill it, kill -9, or a job scheduler{reading}")
    if isinstance(sig, int):
        return f"killed by {_signal_name(sig)}" + (" (a crash in native code)" if sig in (
            signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL) else "") + reading
    if isinstance(code, int):
        return (f"exited unexpectedly with code {code} (os._exit(), or a crash that exits; not the out-of-memory "
                f"killer){reading}")
    if counted:
        return ("exited unexpectedly, not killed by the out-of-memory killer (its cgroup counted no OOM kill as it "
                f"died; its exit status was gone before it could be read){reading}")
    return ("cause unknown: its exit status, its cgroup's OOM-kill counter and the kernel log could not be "
            f"read{reading}")


def _window(death: dict[str, Any]) -> str:
    """How long before the death the watcher's last counter reading was, in words ("0.2 s"): the
    watcher reads every :data:`~kerasmagic.death_watch.POLL_S`; a longer gap (a watcher that
    started late or stalled) is said as it was.

    Example:
        >>> _window({"died_ts": 10.1, "oom_kills_before_ts": 10.0})
        '0.2 s'
        >>> _window({"died_ts": 13.0, "oom_kills_before_ts": 10.0})
        '3.0 s'
    """
    died, read = death.get("died_ts"), death.get("oom_kills_before_ts")
    gap = died - read if isinstance(died, (int, float)) and isinstance(read, (int, float)) else None
    if gap is None or gap <= death_watch.POLL_S * 1.5:
        return f"{death_watch.POLL_S:g} s"
    return f"{gap:.1f} s"


def death_time(record: dict[str, Any]) -> tuple[float | None, bool]:
    """When the kernel died, and whether its watcher saw it (else: its record's last write, the
    last sign of life). The one time both the post-mortem's sentence and the sidebar's banner
    tell (issue 33, item 9: one death was shown at 02:00:02 and 01:59:59).

    Example:
        >>> death_time({"updated_ts": 10.0, "death": {"died_ts": 12.5}}), death_time({"updated_ts": 10.0})
        ((12.5, True), (10.0, False))
    """
    death = record.get("death")
    died = death.get("died_ts") if isinstance(death, dict) else None
    if isinstance(died, (int, float)) and not isinstance(died, bool):
        return float(died), True
    last = record.get("updated_ts")
    return (float(last), False) if isinstance(last, (int, float)) and not isinstance(last, bool) else (None, False)


def explain(record: dict[str, Any]) -> str:
    """One sentence: when the kernel died, which cell ran, and why, as far as the evidence says.

    The out-of-memory killer is named only on evidence about this kernel: the kernel log naming
    its pid, or its watcher seeing the cgroup's OOM-kill counter rise as it died. Otherwise it
    says what is known (the signal, the last reading, the cell) and what is not.

    Example:
        >>> record = {"updated_ts": 0, "cell": {"execution_count": 12, "first_line": "x = big()"},
        ...           "samples": [[0, 3 * 2**30]], "limit": {"limit_bytes": 4 * 2**30},
        ...           "death": {"died_ts": 0, "signal": 9, "oom_kills_before": 1, "oom_kills_at_death": 1}}
        >>> print(explain(record))                           # doctest: +ELLIPSIS
        The previous kernel of this notebook died at ... while cell [12] ran (`x = big()`): killed with SIGKILL, ...
    """
    death = record.get("death") if isinstance(record.get("death"), dict) else None
    moment, witnessed = death_time(record)
    died = moment if witnessed else None
    when = "died" if moment is None else f"died at {_clock(moment)}" if witnessed else \
        f"died after {_clock(moment)} (its last sign of life)"
    cell = record.get("cell")
    if isinstance(cell, dict):
        first = str(cell.get("first_line") or "").replace("`", "'")
        number = cell.get("execution_count")
        label = f"cell [{number}]" if isinstance(number, int) else "a cell"
        where = f"while {label} ran" + (f" (`{first}`)" if first else "")
    else:
        where = "between cells"
    samples = record.get("samples") or []
    last = samples[-1] if samples and isinstance(samples[-1], list) and len(samples[-1]) == 2 else None
    rss = last[1] if last is not None and isinstance(last[1], int) else None
    limit = (record.get("limit") or {}).get("limit_bytes") if isinstance(record.get("limit"), dict) else None
    figure = ""
    if isinstance(rss, int):
        figure = format_bytes(rss) + (f" of a {format_bytes(limit)} limit" if isinstance(limit, int) else "")
        if last is not None and isinstance(died, (int, float)) and isinstance(last[0], (int, float)) \
                and died - last[0] >= 1:
            figure += f", {died - last[0]:.0f} s before"
    return f"The previous kernel of this notebook {when} {where}: {_cause(death, figure, limit)}."

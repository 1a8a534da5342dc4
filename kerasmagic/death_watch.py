"""A small process that watches the kernel die and writes down, at that moment, how it died.

A kernel killed with SIGKILL writes nothing more, and the cgroup's OOM-kill counter read later
(by the next kernel, or from a reading the dead kernel took seconds before) cannot say whose kill
it counted: any process in the cgroup (another kernel, an isolated job) raises it. So kerasmagic
starts this watcher beside each kernel (``python -I -S death_watch.py ...``, its own session, so a
signal to the kernel's process group does not reach it). It waits on the kernel's pidfd and reads
the counter every :data:`POLL_S` seconds; when the kernel dies it reads, at once:

- the kernel's exit status from ``/proc/<pid>/stat`` (field 52, readable while the dead kernel is a
  zombie, which is until its server reaps it: the pidfd wakes the watcher first);
- the OOM-kill counter again: a rise since the reading just before the death ties the kill to it;
- the kernel log (``/dev/kmsg``, where readable), from where the kernel opened it as it started
  the watcher: ``Killed process <pid>`` names the victim (an older line names an earlier owner
  of the pid).

It writes these facts next to the kernel's record (``<record>.death``, 0600) and exits; where the
record is gone (a clean end deletes it first) it writes nothing. :mod:`kerasmagic.postmortem` turns
them into a verdict. This file imports nothing from kerasmagic: it runs as a script, in a process
that must stay small (it lives in the kernel's memory cgroup).
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import signal
import sys
import time

__all__ = ['POLL_S', 'KernelLog', 'death_path', 'exit_status', 'main', 'read_counter']

#: How often the counter is read while the kernel lives: another process's OOM kill more than
#: this long before the kernel's death is never taken for the kernel's.
POLL_S = 0.2
#: The kernel log is read up to this many bytes at a time (the ring buffer is 128 KiB to a few
#: MiB, so this is only a bound for a log written as fast as it is read).
_KMSG_LIMIT = 64 * 2**20


def death_path(record_path: str) -> str:
    """Where the watcher writes its facts for a record file (hidden from the record listing).

    Example:
        >>> death_path("/r/abc-42.json")
        '/r/abc-42.death'
    """
    base = record_path[:-5] if record_path.endswith(".json") else record_path
    return base + ".death"


def read_counter(path: str) -> int | None:
    """The ``oom_kill`` count in a ``memory.events(.local)`` or ``memory.oom_control`` file; None
    where it cannot be read.

    Example:
        >>> read_counter("/nonexistent") is None
        True
    """
    if not path:
        return None
    try:
        with open(path) as file:
            for line in file:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def exit_status(pid: int) -> int | None:
    """A zombie's wait status (``/proc/<pid>/stat`` field 52, Linux 3.5+); None once it is reaped
    or where it cannot be read.

    Example:
        >>> exit_status(os.getpid()) in (None, 0)      # a live process has none yet
        True
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After ")": field 3 (state) is fields[0], so field 52 is fields[49].
    if len(fields) < 50 or fields[0] not in (b"Z", b"X"):
        return None
    try:
        return int(fields[49])
    except ValueError:
        return None


#: ``Killed process <pid>``: the OOM killer's own line, the global and the memory cgroup one.
_KILLED = re.compile(r"Killed process (\d+)\b")


#: The inode of the first pid namespace, the same on every Linux (``PROC_PID_INIT_INO``).
_HOST_PID_NAMESPACE = "pid:[4026531836]"


def _in_the_hosts_pid_namespace() -> bool:
    """Whether pids here are the ones the kernel log writes (not a container's own numbering)."""
    try:
        return os.readlink("/proc/self/ns/pid") == _HOST_PID_NAMESPACE
    except OSError:
        return False


class KernelLog:
    """The kernel log (``/dev/kmsg``) from the moment this object was made: a ``Killed process
    <pid>`` line is evidence about a process only when it was written while that process lived.

    The log keeps lines for hours and pids are reused (a 2-core CI machine wraps a 32768-pid
    space in minutes): a kill line found by pid alone once called a plain SIGKILL an OOM death,
    quoting another process's kill from twenty minutes before. So the log is opened at its end,
    before the process to watch is started or while it lives, and only lines read from there on
    count. :meth:`mark` returns a position for processes started later (an isolated job).
    ``/dev/kmsg`` needs root or ``CAP_SYSLOG`` on most systems, and in a container of its own pid
    namespace it names the host's pids; there it is not read, and nothing is ever found.

    Example:
        >>> log = KernelLog()
        >>> log.kill_line(2**22 + 1) is None          # no process has that pid
        True
        >>> log.mark() >= 0
        True
    """

    #: How many pids' kill lines are kept (the newest), so a long-lived reader stays small.
    KEEP = 1024

    def __init__(self, fd: int | None = None) -> None:
        """``fd``: a descriptor from :meth:`open_at_end` to take over (the watcher's, opened by the
        kernel before it started the watcher); by default the log is opened here, at its end."""
        self._owner = os.getpid()
        self._last_seq = 0
        self._kills: dict[int, tuple[int, str]] = {}  # pid -> (sequence number, line)
        self._fd = fd if fd is not None and fd >= 0 else self.open_at_end()
        if self._fd is not None and not _in_the_hosts_pid_namespace():
            # A (privileged) container: the log names the host's pids, which can equal one of ours.
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def open_at_end() -> int | None:
        """A non-blocking descriptor of ``/dev/kmsg`` at the log's end (what is already there is
        about other processes); None where the log cannot be read."""
        try:
            fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            os.close(fd)
            return None
        return fd

    @property
    def readable(self) -> bool:
        """Whether this process can read the kernel log (a fork of the one that opened it cannot)."""
        return self._fd is not None and self._owner == os.getpid()

    def mark(self) -> int:
        """The sequence number of the last line written so far: pass it as ``since`` for a
        process started after this call."""
        self._read()
        return self._last_seq

    def kill_line(self, pid: int, since: int = 0) -> str | None:
        """The OOM killer's line naming ``pid`` written after this object was made (and after
        ``since``, a :meth:`mark`); None where there is none or the log cannot be read."""
        self._read()
        found = self._kills.get(pid)
        return found[1] if found is not None and found[0] > since else None

    def close(self) -> None:
        """Let the log go (also done when the object is collected)."""
        if self._fd is not None and self._owner == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __del__(self) -> None:
        self.close()

    def _read(self) -> None:
        if not self.readable or self._fd is None:
            return  # a fork shares the file position: only the process that opened it reads
        size = 0
        while size < _KMSG_LIMIT:
            try:
                chunk = os.read(self._fd, 8192)  # one record per read
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten since the last read: the next read goes on after them
                break
            if not chunk:
                break
            size += len(chunk)
            self._note(chunk.decode("utf-8", "replace"))

    def _note(self, record: str) -> None:
        """One record: ``priority,sequence,microseconds,flags;message``, continuation lines after."""
        header, _, message = record.partition(";")
        try:
            self._last_seq = max(self._last_seq, int(header.split(",")[1]))
        except (IndexError, ValueError):
            return
        first = message.split("\n", 1)[0].strip()
        killed = _KILLED.search(first)
        if killed is None:
            return
        self._kills.pop(int(killed.group(1)), None)
        self._kills[int(killed.group(1))] = (self._last_seq, first)
        while len(self._kills) > self.KEEP:
            del self._kills[next(iter(self._kills))]


def _wait_for_death(pid: int, oom_file: str, before: int | None, before_ts: float) -> tuple[int | None, float]:
    """Block until ``pid`` exits; returns the counter as read just before the death and when
    (``before`` at ``before_ts`` until the first reading here: the kernel's, as it started this)."""
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)  # Linux 5.3+, Python 3.9+
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            if pidfd is not None:
                ready, _, _ = select.select([pidfd], [], [], POLL_S)
                if ready:
                    return before, before_ts
            else:
                time.sleep(POLL_S)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return before, before_ts
                except PermissionError:
                    pass
                if exit_status(pid) is not None:
                    return before, before_ts
            before, before_ts = read_counter(oom_file), time.time()
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _write_private(path: str, data: bytes) -> None:
    temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    """``death_watch.py PID RECORD_PATH [OOM_FILE [COUNT TS KMSG_FD]]``: watch, then write
    ``<record>.death``. COUNT is the OOM-kill counter the kernel read at TS, just before it
    started the watcher, and KMSG_FD the kernel log it opened at its end then (-1: none): a
    kernel that dies before the watcher's first reading (a cell that fills memory right after
    ``%load_ext``) is still judged on evidence from while it lived."""
    pid, record_path, oom_file = int(argv[0]), argv[1], argv[2] if len(argv) > 2 else ""
    if len(argv) > 5:
        before = int(argv[3]) if argv[3].isdigit() else None
        before_ts, kmsg_fd = float(argv[4]), int(argv[5])
    else:
        before, before_ts, kmsg_fd = read_counter(oom_file), time.time(), -1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the kernel is not ours
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("-1000")  # root only: the OOM killer must take the kernel, not its witness
    except OSError:
        pass
    log = KernelLog(kmsg_fd)  # opened while the kernel lived: a kill line from there on is about it
    before, before_ts = _wait_for_death(pid, oom_file, before, before_ts)
    died_ts = time.time()
    status = exit_status(pid)
    at_death = read_counter(oom_file)
    if not os.path.exists(record_path):
        return 0  # a clean end: the kernel deleted its record before it exited
    log_line = log.kill_line(pid)
    signalled = (status & 0x7F) if status is not None else None
    if log_line is None and log.readable and signalled in (signal.SIGKILL, None):
        # The OOM killer writes its line as it kills: the pidfd can wake this process first.
        deadline = time.monotonic() + 0.5
        while log_line is None and time.monotonic() < deadline:
            time.sleep(0.05)
            log_line = log.kill_line(pid)
    facts = {
        "pid": pid, "died_ts": round(died_ts, 3),
        "wait_status": status,
        "signal": (status & 0x7F) or None if status is not None else None,
        "exit_code": (status >> 8) & 0xFF if status is not None and not status & 0x7F else None,
        "oom_file": oom_file or None,
        "oom_kills_before": before, "oom_kills_before_ts": round(before_ts, 3),
        "oom_kills_at_death": at_death,
        "kernel_log": log_line,
        "kernel_log_readable": log.readable,
    }
    _write_private(death_path(record_path), json.dumps(facts).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

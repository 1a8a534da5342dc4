"""The lifeline: how a process of ours learns that its parent is gone, and dies with it.

No process of ours outlives the kernel, however the kernel dies (SIGKILL too). A template and
each job's process watch three things:

- ``PR_SET_PDEATHSIG`` (Linux): SIGTERM when the parent *thread* that started them ends (so
  the kernel starts every process from one long-lived pool thread);
- a pipe whose only write end the parent holds (:func:`lifeline_pipe`): EOF means it is gone;
- ``os.getppid()``, once a second: it changes when the parent dies.

Whoever sees the parent gone ends what it started and exits with :data:`PARENT_GONE_EXIT`.
The template watches from its one ``select`` loop (it has no thread of its own, on purpose);
a job's process from a thread (:func:`watch_parent`). A subreaper (:func:`become_subreaper`)
also keeps what a job orphans under the job, and then under the template, which ends it.

Example:
    >>> read_fd, write_fd = lifeline_pipe()
    >>> os.close(write_fd); os.read(read_fd, 1)    # the parent's end closed: EOF
    b''
    >>> os.close(read_fd)
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

__all__ = [
    "PARENT_GONE_EXIT", "become_subreaper", "lifeline_pipe", "parent_gone", "set_parent_death_signal",
    "watch_parent",
]

#: Exit status of a template (or a job's process) that found its parent gone.
PARENT_GONE_EXIT = 75
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def lifeline_pipe() -> tuple[int, int]:
    """A new lifeline: ``(read_fd, write_fd)``; the child gets the read end, only the parent keeps the write end."""
    return os.pipe()


def set_parent_death_signal(signum: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``signum`` when this process's parent thread ends (no-op elsewhere).

    SIGTERM, with a handler that cleans up, rather than SIGKILL: a process killed outright
    leaves what it started (a job's subprocess, the job's folder) behind.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)
        except (OSError, AttributeError):
            pass  # the watch pipe still covers us


def parent_gone(parent_pid: int, within: float = 1.0) -> bool:
    """Whether the parent has died: this process was handed to another parent (up to ``within``
    seconds to see it).

    A signal or the lifeline's EOF says "gone" but cannot prove it: a SIGTERM may come from
    anyone, and the lifeline's end is closed a moment before the process is. Its death moves
    its children to another parent at once, also while it stays a zombie, and by then its
    descriptors and locks are released. Safe in a signal handler (no lock taken).

    Example:
        >>> parent_gone(os.getppid(), within=0.05)    # this process's parent lives
        False
    """
    deadline = time.monotonic() + within
    while os.getppid() == parent_pid:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def become_subreaper() -> bool:
    """Make orphans among this process's descendants its children instead of PID 1's (Linux 3.4+).

    Why: a job's ``subprocess.Popen(..., start_new_session=True)`` leaves the job's process
    group, so ending the group missed it, and when the job ended it was adopted by PID 1 and
    ran on (issue 23, fault 6). With the template and each job subreapers, what a running job
    orphans stays under the job, and what a finished or killed job leaves behind is adopted
    by the template, which ends it. Not inherited by a fork: the job sets it again. False where
    it cannot be set.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(parent_pid: int, watch_fd: int, on_gone: Callable[[], None]) -> None:
    """Call ``on_gone`` (from a daemon thread, or from the death signal's handler) once the parent is gone.

    ``on_gone`` must not return in practice: it ends the process (``os._exit``).
    """
    signal.signal(signal.SIGTERM, lambda *_: on_gone())  # the parent-death signal, and a plain kill
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        on_gone()

    def watch() -> None:
        watched = [watch_fd]
        while True:
            try:
                readable, _, _ = select.select(watched, [], [], 1.0)
                if readable and not os.read(watch_fd, 1):
                    on_gone()  # EOF: the only write end died with the parent
            except (OSError, ValueError):
                # The job closed our descriptor (os.closerange): the parent's pid and the death
                # signal still tell, once a second; no traceback of ours in the job's output.
                watched = []
            if os.getppid() != parent_pid:
                on_gone()

    threading.Thread(target=watch, name="kerasmagic-isolation-watch-parent", daemon=True).start()

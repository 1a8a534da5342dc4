"""Waiting for a process to be gone, without racing its exit."""

from __future__ import annotations

import time

import psutil


def exited_within(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` has exited (a zombie counts: only its parent can reap it).

    The process may vanish between any two reads of ``/proc``, so every read
    that finds it gone counts as gone rather than as an error.

    Example:
        >>> import subprocess, sys
        >>> child = subprocess.Popen([sys.executable, "-c", "pass"])
        >>> child.wait()
        0
        >>> exited_within(child.pid)
        True
    """
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False

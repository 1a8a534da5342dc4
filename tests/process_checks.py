"""Waiting on real processes in the isolation tests."""

from __future__ import annotations

import time

import psutil


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` ends within ``within`` seconds: exited, or a zombie (dead, only its exit
    status left for a parent that has not read it).

    Example:
        >>> gone(1, within=0.1)
        False
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

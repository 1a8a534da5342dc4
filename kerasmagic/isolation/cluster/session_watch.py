"""Watchers that outlive a process of ours to clean up after it: a kernel's ``on="ray-local"``
cluster, a node agent's files.

**The local cluster.**
``ray.init(address="local")`` starts the cluster's processes (GCS, raylet, the dashboard's and
the runtime environment's agents, workers) as the kernel's children, and Ray ends them at a
clean exit. A kernel that is SIGKILLed (the OOM killer, "Restart kernel" after a hang) cannot:
the dashboard agent and the runtime-env agent ran on for good (issue 23, fault 5).

So :func:`start_watcher` starts a small process beside the cluster that holds the read end of
a lifeline pipe (:mod:`kerasmagic.isolation.lifeline`) whose write end only the kernel holds.
When the kernel is gone (EOF on the pipe, or its pid no longer running), the watcher ends every
process of that Ray session: those whose command line names the session folder, or that have
a file of it open (Ray renames its agents and workers, ``ray::DashboardAgent``, so their
command line no longer says which session they belong to), and only Ray's own processes: another
driver attached to the session, or a ``tail -f`` of its log, is left alone. SIGTERM first,
SIGKILL for what is left after a moment; then it exits. It touches nothing of another session or
of any other user.

**A node agent's files.** Ray ends an agent (``ray.shutdown()``, the kernel's exit, its node's
end) with a SIGTERM that it may follow at once with SIGKILL, or with no signal at all, and
SIGKILLs the agent's children, its templates, with it: nothing of ours in those processes got to
remove the agent's owner locks and its templates' logs (issue 23, fault 5).
:func:`start_file_reaper` starts a process that leaves the agent's process tree at once (Ray
kills a worker's children, not its grandchildren) and, when the agent is gone, removes the files
named after it (:func:`~kerasmagic.isolation.leftovers.remove_kernel_files`).

Example:
    >>> start_watcher("/tmp/ray/session_2026-11-27_13-27-49_246712_31017")   # doctest: +SKIP
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from ..leftovers import our_folders, remove_kernel_files
from ..lifeline import lifeline_pipe

__all__ = ["end_session", "session_processes", "start_file_reaper", "start_watcher"]

#: How long the session's processes get to end after SIGTERM before they are SIGKILLed.
TERM_GRACE_S = 2.0
#: How long the watcher keeps looking for processes of the session (a raylet may start a worker
#: while the others end).
SWEEP_S = 15.0
#: Between two looks at the kernel's pid (the pipe's EOF says it at once; a copy of its write
#: end in a child the kernel forked would hold it back).
_POLL_S = 0.5

_watchers: list[tuple[subprocess.Popen, int]] = []


def start_watcher(session_dir: str) -> int | None:
    """Start the watcher of the local Ray session in ``session_dir`` (see the module); its pid.

    None where it could not be started: the cluster then ends with the kernel only when the
    kernel exits cleanly, as before.

    Example:
        >>> start_watcher("/tmp/ray/session_that_never_was") is None    # no such session folder
        True
    """
    if not session_dir or not os.path.isdir(session_dir):
        return None
    read_fd, write_fd = lifeline_pipe()
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-c", "from kerasmagic.isolation.cluster.session_watch import main; main()",
             session_dir, str(os.getpid()), str(read_fd)],
            pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in the kernel's process group: a kill of the group spares it
        )
    except OSError:
        os.close(write_fd)
        return None
    finally:
        os.close(read_fd)
    _watchers.append((watcher, write_fd))  # the write end stays open for as long as this process lives
    return watcher.pid


def start_file_reaper() -> bool:
    """Have this process's files removed once it is gone, however it ends (see the module).

    False where the reaper could not be started (the next agent's sweep then removes them).

    Example (in a Ray node's agent, which Ray may end without a word):
        >>> start_file_reaper()    # doctest: +SKIP
        True
    """
    read_fd, write_fd = lifeline_pipe()
    try:
        starter = subprocess.Popen(
            [sys.executable, "-c", "from kerasmagic.isolation.cluster.session_watch import main; main()",
             "--files-of", str(os.getpid()), str(read_fd)],
            pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        starter.wait(timeout=30)  # it forks the reaper and exits: the reaper is no child of ours
    except subprocess.TimeoutExpired:
        # Ended, or the reaper it forks later would find the pipe closed and take this live
        # process for gone (only the owner lock would then keep its files).
        starter.kill()
        starter.wait()
        os.close(write_fd)
        return False
    except OSError:
        os.close(write_fd)
        return False
    finally:
        os.close(read_fd)
    _watchers.append((starter, write_fd))
    return starter.returncode == 0


def _is_rays_own(args: list[str]) -> bool:
    """Whether a command line is one of Ray's own processes: its GCS, a raylet, a worker or an
    agent Ray renamed (``ray::IDLE``, ``ray::DashboardAgent``), or a Python script of Ray's
    (the dashboard, the log monitor, ``default_worker.py``).

    Example:
        >>> _is_rays_own(["ray::DashboardAgent"]), _is_rays_own(["python", "train.py"])
        (True, False)
    """
    if not args:
        return False
    if args[0].startswith("ray::") or os.path.basename(args[0]) in ("gcs_server", "raylet"):
        return True
    return any(f"{os.sep}ray{os.sep}" in arg for arg in args[:2])


def _names_session(process: Any, session_dir: str) -> bool:
    """Whether a ``psutil.Process`` is one of Ray's own processes of the session: it names the
    session folder, or has a file of it open (Ray renames its agents). Anyone else's process
    that names it or reads its files (another driver attached with ``address="auto"``, a
    ``tail -f`` of a log) is never ours to end."""
    import psutil

    try:
        args = process.cmdline()
        if not _is_rays_own(args):
            return False
        if session_dir in " ".join(args):
            return True
        return any(f.path == session_dir or f.path.startswith(session_dir + os.sep) for f in process.open_files())
    except psutil.Error:
        return False


def session_processes(session_dir: str) -> list[int]:
    """The pids of this user's processes that belong to the Ray session in ``session_dir``.

    Example:
        >>> session_processes("/tmp/ray/session_that_never_was")
        []
    """
    import psutil

    mine = os.getuid()
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.uids().real != mine or process.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if _names_session(process, session_dir):
            found.append(process.pid)
    return found


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            pass  # gone already


def end_session(session_dir: str) -> None:
    """End every process of the session: SIGTERM, then SIGKILL what is left (see the module).

    Example:
        >>> end_session("/tmp/ray/session_that_never_was")    # nothing of it runs: returns at once
    """
    deadline = time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
        pids = session_processes(session_dir)
        if not pids:
            return
        _signal(pids, signal.SIGTERM)
        grace = time.monotonic() + TERM_GRACE_S
        while time.monotonic() < grace and set(session_processes(session_dir)) & set(pids):
            time.sleep(0.1)
        _signal(session_processes(session_dir), signal.SIGKILL)
        time.sleep(0.2)


def _started(pid: int) -> float | None:
    """When process ``pid`` started (psutil's ``create_time``); None when it is gone."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _kernel_running(pid: int, started: float | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs: a zombie does not,
    and neither does a new process that got its number."""
    import psutil

    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_until_gone(pid: int, fd: int) -> None:
    """Return once process ``pid`` is gone: EOF on its lifeline ``fd``, or its pid no longer running."""
    started = _started(pid)
    watched = [fd]
    while True:
        try:
            readable, _, _ = select.select(watched, [], [], _POLL_S)
            if readable and not os.read(fd, 1):
                return  # EOF: the only write end died with the process
        except OSError:
            watched = []
            time.sleep(_POLL_S)
        if not _kernel_running(pid, started):
            return


def main(argv: list[str] | None = None) -> None:
    """A watcher's loop: wait until the process it watches is gone, then clean up after it and exit.

    ``SESSION_DIR KERNEL_PID FD``: end the kernel's local Ray session. ``--files-of PID FD``:
    fork (the reaper must not be the agent's child), then remove the agent's files.
    """
    args = argv if argv is not None else sys.argv[1:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the kernel's terminal is not its death
    if args[0] == "--files-of":
        pid, fd = int(args[1]), int(args[2])
        if os.fork() > 0:
            os._exit(0)
        _wait_until_gone(pid, fd)
        remove_kernel_files(pid, our_folders())
        return
    session_dir, kernel_pid, watch_fd = args[:3]
    pid, fd = int(kernel_pid), int(watch_fd)
    _wait_until_gone(pid, fd)
    end_session(session_dir)

"""The files isolation leaves in the temporary folders, whose they are, and sweeping up after
kernels that died.

Every file or folder of ours there is named after the kernel that made it
(``kerasmagic-isolated-<pid>-…`` job folders, ``kerasmagic-worker-<pid>-…`` and
``kerasmagic-template-<pid>-…`` logs), and each kernel holds an ``flock`` on
``kerasmagic-kernel-<pid>-owner.lock`` (:func:`owner_lock_path`) for as long as it lives. A new
template removes what belongs to kernels whose lock nobody holds (:func:`sweep_orphans`): a pid
alone cannot tell, since a kernel in another container sharing ``/dev/shm`` has a pid that does
not exist here. A template whose kernel died removes all of that kernel's files itself, at
once (:func:`remove_kernel_files`), also while it is still importing.

Example:
    >>> os.path.basename(owner_lock_path("/dev/shm", 4242))
    'kerasmagic-kernel-4242-owner.lock'
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import tempfile
import time

from ..probes.process import pid_exists

__all__ = [
    "hold_owner_lock", "log_file", "our_folders", "owned_prefix", "owner_lock_path", "read_tail",
    "release_owner_locks", "remove_kernel_files", "running", "sweep_orphans",
]

#: The kinds of files of ours, each named ``kerasmagic-<kind>-<pid>-…`` after its kernel.
_OWNED_NAME = re.compile(r"^kerasmagic-(?:isolated|worker|template|kernel)-(\d+)-")
#: The kinds of files a kernel makes besides its owner lock (job folders, a map's shared folder, logs).
_FILE_KINDS = ("isolated", "worker", "template")
_LOCK_SUFFIX = "-owner.lock"

_owner_locks: list[int] = []


def owned_prefix(kind: str, pid: int | None = None) -> str:
    """How a file of ours starts: named after its kernel (``pid``, this process by default).

    Example:
        >>> owned_prefix("isolated", 42)
        'kerasmagic-isolated-42-'
    """
    return f"kerasmagic-{kind}-{os.getpid() if pid is None else pid}-"


def owner_lock_path(folder: str, pid: int) -> str:
    """The lock file that says kernel ``pid``'s files in ``folder`` are in use."""
    return os.path.join(folder, f"{owned_prefix('kernel', pid)}{_LOCK_SUFFIX[1:]}")


def our_folders() -> list[str]:
    """Where our files go: the temporary folder, and ``/dev/shm`` (job folders, in RAM) where it exists."""
    return [tempfile.gettempdir()] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])


def log_file(kind: str) -> str:
    """A new, empty log file of ours (``kind``: ``worker``, ``template``), named after this kernel."""
    fd, path = tempfile.mkstemp(prefix=owned_prefix(kind), suffix=".log")
    os.close(fd)
    return path


def read_tail(path: str, lines: int = 15) -> str:
    """The last lines of a log (what a process that failed to start printed); "" when it is gone."""
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def hold_owner_lock() -> None:
    """Hold, for this process's life, a lock saying "this kernel's files are in use".

    A pid alone cannot tell: a kernel in another container that shares ``/dev/shm`` has a
    pid that does not exist here. The lock (``flock``) is released by the OS when the kernel
    dies, however it dies. It is a *shared* lock: two kernels with the same number in two PID
    namespaces (containers sharing ``/dev/shm`` often start their kernels with the same small
    pid) both hold it, and whoever would remove that number's files takes it exclusively,
    which it gets only when neither lives. A sweep holds it exclusively for milliseconds while
    it removes a dead namesake's files: this waits for it, and holds the lock file that is there
    afterwards, not the one the sweep removed.

    Example:
        >>> hold_owner_lock()    # a second call keeps the locks it holds
    """
    if _owner_locks:
        return
    import fcntl

    for folder in our_folders():
        path = owner_lock_path(folder, os.getpid())
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            except OSError:
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    _owner_locks.append(fd)
                    break
            except OSError:
                pass  # a sweep holds it, or removed the file under us: again
            os.close(fd)
            time.sleep(0.02)


def release_owner_locks() -> None:
    """Give up this process's claim on its isolation files now: the lock files go with it (a
    kernel at a clean exit, a Ray node agent that is told to end; a killed kernel's go with its
    template)."""
    while _owner_locks:
        os.close(_owner_locks.pop())
    for folder in our_folders():
        try:
            os.unlink(owner_lock_path(folder, os.getpid()))
        except OSError:
            pass


atexit.register(release_owner_locks)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process here: a zombie is not.

    A killed kernel stays a zombie until its parent (the Jupyter server) collects it, which may
    be much later; its pid cannot be reused until then, so the zombie is the dead kernel itself
    (or another process that got its number and died too). Where ``/proc`` cannot tell, the pid
    alone answers.

    Example:
        >>> running(os.getpid())
        True
    """
    if not pid_exists(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True  # no /proc (macOS), or it is not ours to read: it exists
    state = stat[stat.rfind(b")") + 2:][:1]  # the field after "(command name)"
    return state not in (b"Z", b"X", b"x")


def _remove(path: str) -> bool:
    """Remove a file or a whole folder of ours; False where a file could not be removed (a folder
    goes as far as it can). Safe in a signal handler."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
        return True
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


#: How long a cleaner waits for an owner lock that is taken: a live kernel holds it for good, but
#: another cleaner (a new pool's sweep checking the owner) holds it for a moment, and giving up
#: at once then left a dead kernel's files for good (seen: test_leftovers, 1 run in 3).
_BUSY_LOCK_WAIT_S = 1.0


def _take_exclusively(fd: int, within: float) -> bool:
    """Take the lock on ``fd`` exclusively, trying for up to ``within`` seconds. Safe in a signal
    handler (``fcntl`` is imported by whoever holds or sweeps locks)."""
    import fcntl

    deadline = time.monotonic() + within
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def remove_kernel_files(pid: int, folders: list[str]) -> list[str]:
    """Remove every file kernel ``pid`` left in ``folders`` (job folders, a map's shared folder and
    its items' folders, logs), then its owner locks: for a template whose kernel is dead.

    A folder whose owner lock someone holds is left alone: a kernel with the same number in
    another PID namespace sharing ``/dev/shm`` lives. The lock is held while the files go, so
    that no sweep of a new kernel works on them at the same time. Safe in a signal handler of a
    single-threaded process: it imports nothing, takes no lock of Python's and looks nothing up
    but the folders (``folders``: :func:`our_folders`, worked out beforehand).

    Example:
        >>> remove_kernel_files(os.getpid(), our_folders())    # this process made no files
        []
    """
    removed = []
    prefixes = tuple(owned_prefix(kind, pid) for kind in _FILE_KINDS)
    for folder in folders:
        lock_path = owner_lock_path(folder, pid)
        try:
            fd: int | None = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            fd = None
        except OSError:
            continue
        try:
            if fd is not None and not _take_exclusively(fd, within=_BUSY_LOCK_WAIT_S):
                continue  # held: that kernel's number is alive somewhere
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if not name.startswith(prefixes):
                    continue
                path = os.path.join(folder, name)
                if _remove(path):
                    removed.append(path)
            if fd is not None:
                try:
                    os.unlink(lock_path)
                    removed.append(lock_path)
                except OSError:
                    pass
        finally:
            if fd is not None:
                os.close(fd)
    return removed


def _owner_gone(folder: str, pid: int) -> bool:
    import fcntl

    path = owner_lock_path(folder, pid)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        # No lock: a kernel of an older version, or one whose template removed its lock when it
        # died (and then its files, unless it was killed too). Trust the pid, a zombie is gone.
        return not running(pid)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # held: that kernel is alive, wherever its pid lives
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def sweep_orphans() -> list[str]:
    """Remove job folders and logs left by kernels that no longer exist (killed, OOM-killed).

    Example:
        >>> sweep_orphans()      # nothing of a dead kernel's is left lying around
        []
    """
    removed = []
    for folder in our_folders():
        gone: dict[int, bool] = {}
        locks = []
        for path in glob.glob(os.path.join(folder, "kerasmagic-*")):
            match = _OWNED_NAME.match(os.path.basename(path))
            if match is None:
                continue
            pid = int(match.group(1))
            if pid not in gone:
                gone[pid] = pid != os.getpid() and _owner_gone(folder, pid)
            if not gone[pid]:
                continue
            if path.endswith(_LOCK_SUFFIX):
                locks.append(path)  # last: it says whose the other files are
                continue
            if _remove(path):
                removed.append(path)
        for path in locks:
            try:
                os.unlink(path)
            except OSError:
                pass
    return removed

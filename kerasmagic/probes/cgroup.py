"""The memory limit on this process's own cgroup path, and its cgroup's OOM-kill counter.

A kernel in a JupyterHub pod, a systemd slice or a Slurm job is limited by the cgroup it
lives in, or by any ancestor of it: ``/proc/self/cgroup`` names the process's own cgroup
(``4:memory:/slurm/uid_1000/job_7`` on cgroup v1, ``0::/user.slice/...`` on v2), and the
limit that bites is the lowest one on the way from there up to the mount's root. Reading
only the mount's root (what kerasmagic did before) misses every limit set below it.

Where the files are comes from ``/proc/self/mountinfo``: the mount point of the v1
``memory`` controller (or the v2 hierarchy) and the cgroup that mount shows as its root (a
container without a cgroup namespace sees ``/docker/<id>`` there, and the same prefix in
``/proc/self/cgroup``).

The OOM-kill counter is read in the process's own cgroup: v2 counts a kill in the cgroup
and its ancestors (``memory.events``; ``memory.events.local``, read where it exists, only
in the cgroup itself), v1 only in the killed task's own cgroup (``memory.oom_control``), so
the own cgroup is the one place both count our death. The counter counts every process
of the cgroup: it alone never says *which* process was killed (:mod:`kerasmagic.death_watch`).

Every function takes the ``/proc/self`` folder to read, so tests build a fake tree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .availability import Unavailable, to_jsonable

__all__ = ['CgroupMemory', 'CgroupMount', 'memory_cgroup', 'parse_mountinfo', 'parse_proc_cgroup', 'read_oom_kills',
           'read_shmem_bytes']

# cgroup v1 reports "no limit" as a page-rounded LONG_MAX; anything above 2**60 is no limit.
_NO_LIMIT_ABOVE = 2**60
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup mount from ``/proc/self/mountinfo``: where it is, and which cgroup is its root."""

    mount_point: str
    root: str
    version: int
    controllers: tuple[str, ...]


@dataclass(frozen=True)
class CgroupMemory:
    """What this process's memory cgroup says: the lowest limit on its path, and the OOM counter.

    ``limit_bytes`` is None where no cgroup on the path sets a limit; ``limit_cgroup`` is the
    cgroup (as ``/proc/self/cgroup`` names paths) whose limit is the lowest, ``limit_file`` the
    file it was read from.

    Example:
        >>> memory = memory_cgroup()                   # doctest: +SKIP
        >>> memory.limit_bytes, memory.limit_cgroup    # doctest: +SKIP
        (1073741824, '/process_api/kerasmagic-test-4242')
    """

    version: int
    cgroup: str
    limit_bytes: int | None
    limit_cgroup: str
    limit_file: str
    oom_kill_file: str
    oom_kills: int | Unavailable
    #: ``memory.stat`` of the limiting cgroup: its ``shmem`` (tmpfs, ``/dev/shm``) counts against the
    #: limit but is in no process's RSS until mapped.
    stat_file: str = ""

    def to_dict(self) -> dict:
        """The JSON-able wire form."""
        return to_jsonable({name: getattr(self, name) for name in self.__dataclass_fields__})

    @property
    def describe(self) -> str:
        """Where the limit comes from, in a few words.

        Example:
            >>> CgroupMemory(1, "/a/b", 2**30, "/a", "/sys/fs/cgroup/memory/a/memory.limit_in_bytes", "", 0).describe
            'cgroup v1 /a (memory.limit_in_bytes)'
        """
        return f"cgroup v{self.version} {self.limit_cgroup} ({os.path.basename(self.limit_file)})"


def _unescape(field: str) -> str:
    # mountinfo writes a space in a path as \040, a tab as \011, a backslash as \134.
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as ``{controller: path}``; the v2 (unified) line is under ``""``.

    Example:
        >>> parse_proc_cgroup("4:memory:/kernels/k1\\n2:cpu,cpuacct:/\\n0::/user.slice\\n")
        {'memory': '/kernels/k1', 'cpu': '/', 'cpuacct': '/', '': '/user.slice'}
    """
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup mounts (v1 and v2) in ``/proc/self/mountinfo`` text.

    Example:
        >>> line = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory"
        >>> parse_mountinfo(line)
        [CgroupMount(mount_point='/sys/fs/cgroup/memory', root='/', version=1, controllers=('memory',))]
    """
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        if fstype == "cgroup2":
            mounts.append(CgroupMount(_unescape(fields[4]), _unescape(fields[3]), 2, ()))
        elif fstype == "cgroup":
            controllers = tuple(option for option in options if option not in ("rw", "ro") and "=" not in option)
            mounts.append(CgroupMount(_unescape(fields[4]), _unescape(fields[3]), 1, controllers))
    return mounts


def _read_text(path: str) -> str:
    with open(path) as file:
        return file.read()


def _limit_value(raw: str) -> int | None:
    raw = raw.strip()
    if raw == "max":
        return None
    value = int(raw)
    return None if value >= _NO_LIMIT_ABOVE else value


def read_oom_kills(path: str) -> int | Unavailable:
    """The ``oom_kill`` count in a ``memory.events`` (v2) or ``memory.oom_control`` (v1) file.

    Example:
        >>> read_oom_kills("/nonexistent/memory.events").reason
        'error'
    """
    try:
        text = _read_text(path)
    except OSError as exc:
        return Unavailable("error", f"cannot read {path}: {exc.strerror or exc}")
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            try:
                return int(value)
            except ValueError:
                break
    return Unavailable("not_supported", f"{path} has no oom_kill count (Linux before 4.13?)")


def read_shmem_bytes(path: str) -> int | None:
    """The tmpfs / shared memory a cgroup is charged for (``memory.stat``: v1 ``total_shmem``, the
    cgroup and its children; v2 ``shmem``, hierarchical already); None where it cannot be read.

    Example:
        >>> read_shmem_bytes("/nonexistent/memory.stat") is None
        True
    """
    try:
        text = _read_text(path)
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in ("total_shmem", "shmem"):
            try:
                values[key] = int(value)
            except ValueError:
                continue
    return values.get("total_shmem", values.get("shmem"))


def _own_folder(mount: CgroupMount, path: str) -> str | None:
    """The folder of cgroup ``path`` under ``mount``; None if the mount does not show it."""
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    relative = path[len(root):].lstrip("/")
    return os.path.join(mount.mount_point, relative) if relative else mount.mount_point


def memory_cgroup(proc_self: str = "/proc/self") -> CgroupMemory | Unavailable:
    """The lowest memory limit on this process's cgroup path, every ancestor included, and the
    OOM-kill counter of its own cgroup; cgroup v1's ``memory`` controller first (where a
    machine mounts both, that is where memory is accounted), else cgroup v2.

    Returns ``Unavailable("not_supported")`` where there is no memory cgroup (macOS, a
    container without one) and ``Unavailable("error")`` where one exists but cannot be read.

    Example:
        >>> memory = memory_cgroup()
        >>> memory.limit_bytes if not isinstance(memory, Unavailable) else memory.reason  # doctest: +SKIP
        1073741824
    """
    try:
        paths = parse_proc_cgroup(_read_text(os.path.join(proc_self, "cgroup")))
        mounts = parse_mountinfo(_read_text(os.path.join(proc_self, "mountinfo")))
    except FileNotFoundError:
        return Unavailable("not_supported", "no cgroups here (no /proc/self/cgroup)")
    except OSError as exc:
        return Unavailable("error", f"cannot read this process's cgroup: {exc.strerror or exc}")
    if "memory" in paths:
        version, path, limit_name, oom_name = 1, paths["memory"], "memory.limit_in_bytes", "memory.oom_control"
        candidates = [m for m in mounts if m.version == 1 and "memory" in m.controllers]
    elif "" in paths:
        version, path, limit_name, oom_name = 2, paths[""], "memory.max", "memory.events"
        candidates = [m for m in mounts if m.version == 2]
    else:
        return Unavailable("not_supported", "this process is in no memory cgroup")
    for mount in candidates:
        folder = _own_folder(mount, path)
        if folder is not None and os.path.isdir(folder):
            return _walk(mount, folder, path, version, limit_name, oom_name)
    if not candidates:
        return Unavailable("not_supported", f"no cgroup v{version} memory mount in /proc/self/mountinfo")
    return Unavailable("error", f"the cgroup {path} is not visible under {candidates[0].mount_point}")


def _walk(mount: CgroupMount, folder: str, path: str, version: int, limit_name: str,
          oom_name: str) -> CgroupMemory | Unavailable:
    lowest: tuple[int, str, str] | None = None
    current, cgroup = folder, path
    mount_point = os.path.normpath(mount.mount_point)
    read_any = False
    while True:
        limit_file = os.path.join(current, limit_name)
        try:
            value = _limit_value(_read_text(limit_file))
            read_any = True
        except FileNotFoundError:
            value = None  # v2's root cgroup has no memory.max; v2 without the controller neither
        except (OSError, ValueError) as exc:
            return Unavailable("error", f"cannot read {limit_file}: {getattr(exc, 'strerror', None) or exc}")
        if value is not None and (lowest is None or value < lowest[0]):
            lowest = (value, cgroup or "/", limit_file)
        if os.path.normpath(current) == mount_point:
            break
        current = os.path.dirname(current)
        cgroup = os.path.dirname(cgroup.rstrip("/")) or "/"
    if not read_any and version == 2:
        return Unavailable("not_supported", "the cgroup v2 memory controller is not enabled for this cgroup")
    oom_file = os.path.join(folder, oom_name)
    local = oom_file + ".local"
    if version == 2 and os.path.exists(local):
        # v2's memory.events counts kills in the cgroup's descendants too; .local (Linux 5.7+) only
        # its own processes: nearer to "this kernel" (issue 33).
        oom_file = local
    return CgroupMemory(
        version=version,
        cgroup=path,
        limit_bytes=lowest[0] if lowest else None,
        limit_cgroup=lowest[1] if lowest else path,
        limit_file=lowest[2] if lowest else os.path.join(folder, limit_name),
        oom_kill_file=oom_file,
        oom_kills=read_oom_kills(oom_file),
        stat_file=os.path.join(os.path.dirname(lowest[2]) if lowest else folder, "memory.stat"),
    )

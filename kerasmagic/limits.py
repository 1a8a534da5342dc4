"""The memory limit this kernel works under, and where it comes from.

In order: a limit the user set (``set_memory_limit("3GiB")``, ``%tf_mem --limit 3GiB``), else
the ``KERASMAGIC_MEMORY_LIMIT`` environment variable, else the lowest limit on the process's
own cgroup path (:mod:`kerasmagic.probes.cgroup`), else the host's total memory. A user's
limit above the cgroup's does not lift the cgroup's: the lower of the two is the one that
bites, and the result says so.

The cgroup is read at most every :data:`CGROUP_REREAD_S` seconds (a walk up the tree is a few
file reads; the guard asks every tick), and at once after ``refresh=True``.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import KerasMagicUsageError
from .probes import cgroup as cgroup_probe
from .probes import process as process_probe
from .probes.availability import Unavailable, guarded
from .records import Record
from .tables import format_bytes

__all__ = ['CGROUP_REREAD_S', 'ENV_VAR', 'MemoryLimit', 'memory_limit', 'parse_size', 'set_memory_limit']

#: The environment variable a hub or a user sets to give kernels a limit (e.g. ``3GiB``).
ENV_VAR = "KERASMAGIC_MEMORY_LIMIT"
#: How long a cgroup reading is reused.
CGROUP_REREAD_S = 30.0

# Binary units for K/M/G/T alone, as Slurm (--mem=3G), Docker (-m 3g) and free -g read them;
# KB/MB/GB/TB are the decimal SI units, Ki/Mi/Gi as Kubernetes writes binary ones.
_UNITS = {"": 1, "b": 1,
          "k": 2**10, "ki": 2**10, "kib": 2**10, "kb": 10**3,
          "m": 2**20, "mi": 2**20, "mib": 2**20, "mb": 10**6,
          "g": 2**30, "gi": 2**30, "gib": 2**30, "gb": 10**9,
          "t": 2**40, "ti": 2**40, "tib": 2**40, "tb": 10**12}
_SIZE = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+|nan|inf(?:inity)?))\s*([a-z]*)\s*$", re.IGNORECASE)
_EXAMPLE = "e.g. 3GiB, 512MiB or 3221225472 (bytes)"


def parse_size(text: Any) -> int:
    """A memory size in bytes from ``3GiB``, ``1.5G``, ``512MiB``, ``4GB`` or a number of bytes.

    ``K``/``M``/``G``/``T`` alone are binary (as Slurm and Docker read them), ``KB``/``MB``/``GB``
    decimal. Zero, negative, NaN, infinite and unparseable sizes are refused.

    Example:
        >>> parse_size("3GiB"), parse_size("1.5G"), parse_size("4GB"), parse_size(1024)
        (3221225472, 1610612736, 4000000000, 1024)
        >>> parse_size("-1GiB")
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: a memory limit must be more than 0 bytes, got '-1GiB'; e.g. 3GiB, ...
    """
    if isinstance(text, bool):
        raise KerasMagicUsageError(f"a memory limit is a size, got {text!r}; {_EXAMPLE}")
    if isinstance(text, numbers.Real):
        number, unit, shown = float(text), 1, repr(text)
    elif isinstance(text, str):
        match = _SIZE.match(text)
        scale = _UNITS.get(match.group(2).lower()) if match else None
        if match is None or scale is None:
            raise KerasMagicUsageError(f"cannot read {text!r} as a memory size; {_EXAMPLE}")
        number, unit, shown = float(match.group(1)), scale, repr(text)
    else:
        raise KerasMagicUsageError(f"a memory limit is a size, got {type(text).__name__}; {_EXAMPLE}")
    if math.isnan(number) or math.isinf(number):
        raise KerasMagicUsageError(f"a memory limit must be a finite size, got {shown}; {_EXAMPLE}")
    size = int(number * unit)
    if size <= 0:
        raise KerasMagicUsageError(f"a memory limit must be more than 0 bytes, got {shown}; {_EXAMPLE}")
    return size


@dataclass(frozen=True)
class MemoryLimit(Record):
    """The limit the guard measures against, where it comes from, and the headroom now.

    ``source`` is ``user`` (``set_memory_limit``), ``environment`` (``KERASMAGIC_MEMORY_LIMIT``),
    ``cgroup`` (the lowest on this process's cgroup path) or ``host`` (the machine's memory);
    ``where`` says which one in words. ``cgroup`` is what the cgroup says, whatever the source.

    Example:
        >>> limit = memory_limit()
        >>> limit.source in ("user", "environment", "cgroup", "host"), limit.limit_bytes > 0
        (True, True)
        >>> print(limit)                        # doctest: +SKIP
        1.00 GiB (cgroup v1 /kernels/k1 (memory.limit_in_bytes)); headroom 912 MiB
    """

    limit_bytes: int
    source: str
    where: str
    rss_bytes: int
    cgroup: dict[str, Any] | Unavailable
    note: str = ""
    #: tmpfs / ``/dev/shm`` the cgroup is charged for beyond what this process maps (in no RSS).
    shmem_bytes: int = 0

    @property
    def used_bytes(self) -> int:
        """What counts against the limit: RSS, plus the cgroup's tmpfs that is in no RSS."""
        return self.rss_bytes + self.shmem_bytes

    @property
    def headroom_bytes(self) -> int:
        """What the process may still grow by before it reaches the limit (negative: beyond it)."""
        return self.limit_bytes - self.used_bytes

    @property
    def used_pct(self) -> float:
        """What counts against the limit as a percentage of it."""
        return 100.0 * self.used_bytes / self.limit_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "used_bytes": self.used_bytes, "headroom_bytes": self.headroom_bytes,
                "used_pct": round(self.used_pct, 1)}

    def __str__(self) -> str:
        text = f"{format_bytes(self.limit_bytes)} ({self.where}); headroom {format_bytes(self.headroom_bytes)}"
        if self.shmem_bytes:
            text += f" (tmpfs / /dev/shm counted: {format_bytes(self.shmem_bytes)})"
        return f"{text}; {self.note}" if self.note else text


_lock = threading.Lock()
_user_limit: int | None = None
_cgroup_cache: tuple[float, cgroup_probe.CgroupMemory | Unavailable] | None = None
_env_cache: tuple[str, int | KerasMagicUsageError] | None = None
_said: set[str] = set()


def _say_once(key: str, text: str) -> None:
    """A problem the user cannot act on every second: one line to stderr per process."""
    if key not in _said:
        _said.add(key)
        print(f"kerasmagic: {text}", file=sys.stderr)


def _cgroup(refresh: bool) -> cgroup_probe.CgroupMemory | Unavailable:
    global _cgroup_cache
    now = time.monotonic()
    with _lock:
        cached = _cgroup_cache
    if cached is not None and not refresh and now - cached[0] < CGROUP_REREAD_S:
        return cached[1]
    memory = guarded(cgroup_probe.memory_cgroup, "reading the memory cgroup")
    with _lock:
        _cgroup_cache = (now, memory)
    return memory


def _environment_limit() -> int | None:
    global _env_cache
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw or raw.lower() == "off":
        return None
    if _env_cache is None or _env_cache[0] != raw:
        try:
            parsed: int | KerasMagicUsageError = parse_size(raw)
        except KerasMagicUsageError as exc:
            parsed = exc
        else:
            # The rule of set_memory_limit: a limit the kernel is already past would stop every cell
            # that grows, "at 195 %" (issue 33). Judged once, when the value is first seen.
            rss = process_probe.rss_bytes()
            if isinstance(parsed, int) and parsed <= rss:
                parsed = KerasMagicUsageError(
                    f"it is below what this kernel uses now ({format_bytes(rss)} RSS); give more, e.g. "
                    f"{_suggest(rss)}, or set one in the kernel with %tf_mem --limit")
        _env_cache = (raw, parsed)
    value = _env_cache[1]
    if isinstance(value, KerasMagicUsageError):
        _say_once(f"env:{raw}", f"{ENV_VAR}={raw!r} is ignored: {value}")
        return None
    return value


def memory_limit(refresh: bool = False) -> MemoryLimit:
    """The memory limit this kernel works under now, its source, and the headroom.

    Args:
        refresh: read the cgroup again now (otherwise a reading up to 30 s old is reused).

    Example:
        >>> limit = memory_limit()
        >>> limit.headroom_bytes == limit.limit_bytes - (limit.rss_bytes + limit.shmem_bytes)
        True
    """
    rss = process_probe.rss_bytes()
    memory = _cgroup(refresh)
    cgroup_limit = None if isinstance(memory, Unavailable) else memory.limit_bytes
    cgroup_facts: dict[str, Any] | Unavailable = memory if isinstance(memory, Unavailable) else memory.to_dict()
    if isinstance(memory, Unavailable) and memory.reason == "error":
        _say_once("cgroup", f"the cgroup memory limit is unknown ({memory.detail}); "
                            "the memory guard measures against the host's memory")
    chosen: tuple[int, str, str] | None = None
    with _lock:
        user = _user_limit
    if user is not None:
        chosen = (user, "user", "set by you: kerasmagic.set_memory_limit / %tf_mem --limit")
    else:
        env = _environment_limit()
        if env is not None:
            chosen = (env, "environment", f"{ENV_VAR}={os.environ.get(ENV_VAR, '').strip()}")
    note = ""
    if cgroup_limit is not None and not isinstance(memory, Unavailable):
        if chosen is None or cgroup_limit < chosen[0]:
            if chosen is not None:
                note = f"your {format_bytes(chosen[0])} is above the cgroup's limit, which stays in force"
            chosen = (cgroup_limit, "cgroup", memory.describe)
    if chosen is None:
        host = process_probe.host_memory()["total_bytes"]
        why = "no cgroup limit" if not isinstance(memory, Unavailable) else (
            "limit unknown: " + (memory.detail or memory.reason))
        chosen = (host, "host", f"the host's total memory; {why}")
    return MemoryLimit(limit_bytes=chosen[0], source=chosen[1], where=chosen[2], rss_bytes=rss,
                       cgroup=cgroup_facts, note=note, shmem_bytes=_unmapped_shmem(memory))


def _unmapped_shmem(memory: cgroup_probe.CgroupMemory | Unavailable) -> int:
    """The cgroup's tmpfs that is in no RSS of ours (issue 33: 720 MB in /dev/shm went unseen until
    the OOM killer acted). A tmpfs file this process maps is in its RSS already (``RssShmem``)."""
    if isinstance(memory, Unavailable) or not memory.stat_file:
        return 0
    shmem = cgroup_probe.read_shmem_bytes(memory.stat_file)
    if not shmem:
        return 0
    return max(0, shmem - process_probe.rss_shmem_bytes())


def set_memory_limit(limit: Any) -> MemoryLimit:
    """Set the memory limit the guard measures against (``%tf_mem --limit``); ``None`` or
    ``"off"`` drops the limit you set and goes back to the one the kernel had before it:
    ``KERASMAGIC_MEMORY_LIMIT`` where that is set, else the cgroup's, else the host's memory. It
    never removes a limit of the environment or the cgroup (a cgroup's cannot be lifted from
    inside; to measure against more than ``KERASMAGIC_MEMORY_LIMIT``, set a larger limit).

    A limit must be a size above what the kernel uses now (its RSS): anything else is refused
    with a ``ValueError`` that says why. A limit above the cgroup's does not lift the cgroup's.

    Args:
        limit: bytes (``3 * 2**30``), a size (``"3GiB"``, ``"1.5G"``, ``"4GB"``), or None / ``"off"``.

    Example:
        >>> import kerasmagic
        >>> kerasmagic.set_memory_limit("3GiB")        # doctest: +SKIP
        >>> kerasmagic.set_memory_limit(None).source in ("environment", "cgroup", "host")
        True
    """
    global _user_limit
    if limit is None or (isinstance(limit, str) and limit.strip().lower() == "off"):
        with _lock:
            _user_limit = None
        return memory_limit()
    size = parse_size(limit)
    rss = process_probe.rss_bytes()
    if size <= rss:
        raise KerasMagicUsageError(f"a memory limit of {format_bytes(size)} is below what this kernel uses now "
                                   f"({format_bytes(rss)} RSS): give more, e.g. {_suggest(rss)}")
    with _lock:
        _user_limit = size
    return memory_limit()


def _suggest(rss: int) -> str:
    """A round size comfortably above ``rss``, as the user would type it.

    Example:
        >>> _suggest(700 * 2**20)
        '2GiB'
    """
    return f"{max(1, math.ceil(rss * 2 / 2**30))}GiB"

"""JAX's per-device allocator (``Device.memory_stats()``), read only once JAX has started a backend.

By default JAX preallocates 75 % of each GPU when its backend starts: on an H100 a process
with a 512 MiB array held 59.9 GiB in NVML, all but 0.5 GiB of it a pool that JAX keeps
for itself (``pool_bytes``). ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (or a smaller
``XLA_PYTHON_CLIENT_MEM_FRACTION``) changes that, but only in a process whose backend has
not started yet. CPU devices keep no statistics (``memory_stats()`` is None).

What the variables were when the backend started cannot be read back afterwards (JAX keeps
no record of it, and ``os.environ`` says only what they are now), so :func:`pool_story` reads
the pool itself: a pool as large as its limit was preallocated, a smaller one grew on demand.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .availability import Unavailable, guarded

__all__ = ['POOL_STORIES', 'allocator_stats', 'asked', 'backend_started', 'named_now', 'pool_story', 'preallocation',
           'snapshot']


def backend_started() -> bool:
    """Whether JAX has started a backend in this process (asking ``jax.devices()`` would start one).

    Example:
        >>> backend_started()          # JAX not imported
        False
    """
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False
    started = getattr(bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else bool(getattr(bridge, "_backends", None))


def allocator_stats() -> dict[str, dict[str, int | None]] | Unavailable:
    """Per device that keeps statistics: in use, peak, pool, limit and held-unused bytes.

    Example:
        >>> allocator_stats()          # JAX not imported
        Unavailable(reason='not_imported', detail='JAX is not imported in this process')
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return Unavailable("not_imported", "JAX is not imported in this process")
    # jax.devices() would start the backend (and preallocate a GPU) for the user.
    if not backend_started():
        return Unavailable("not_started", "JAX has not started a backend in this process")
    stats: dict[str, dict[str, int | None]] = {}
    for device in jax.local_devices():
        raw = device.memory_stats()
        if not raw:
            continue
        in_use = raw.get("bytes_in_use")
        pool = raw.get("pool_bytes")
        stats[f"{device.platform}:{device.id}"] = {
            "in_use_bytes": in_use,
            "peak_bytes": raw.get("peak_bytes_in_use"),
            "pool_bytes": pool,
            "limit_bytes": raw.get("bytes_limit"),
            "held_unused_bytes": max(pool - in_use, 0) if pool is not None and in_use is not None else None,
        }
    if not stats:
        return Unavailable("not_supported", "JAX keeps no allocator statistics for its devices here (CPU)")
    return stats


#: The variables that size JAX's GPU pool (``jaxlib.xla_client`` reads them when the backend
#: starts; ``XLA_CLIENT_MEM_FRACTION`` is the newer name of the fraction).
_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
              "XLA_PYTHON_CLIENT_ALLOCATOR")

#: What ``jaxlib.xla_client`` takes for "do not preallocate".
_OFF = ("false", "False", "0")


def preallocation() -> str:
    """The variables that size JAX's GPU pool as this process's environment has them *now*, or
    JAX's default where none is set.

    Now, not when the backend started: a variable set after that is listed here but not in
    force (only a new process reads it); :func:`pool_story` tells the two apart by the pool.

    Example:
        >>> preallocation() in ("default: 75 % of each GPU at start",) or "XLA_" in preallocation()
        True
    """
    set_now = [f"{name}={os.environ[name]}" for name in _VARIABLES if name in os.environ]
    return ", ".join(set_now) or "default: 75 % of each GPU at start"


def asked(preallocation_text: str) -> dict[str, str]:
    """The variables a :func:`preallocation` text names, ``{name: value}`` (none for the default).

    The sidebar parses the sample's text the same way (labextension/src/gpu.ts), so both read
    the same evidence.

    Example:
        >>> asked("XLA_PYTHON_CLIENT_PREALLOCATE=false, XLA_PYTHON_CLIENT_MEM_FRACTION=.25")
        {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false', 'XLA_PYTHON_CLIENT_MEM_FRACTION': '.25'}
        >>> asked("default: 75 % of each GPU at start")
        {}
    """
    pairs = (part.strip().partition("=") for part in preallocation_text.split(","))
    return {name: value for name, sep, value in pairs if sep and name.startswith("XLA_")}


#: Why a device's pool holds more than it uses, and so which remedy applies (``%tf_mem`` and the
#: sidebar word each one; docs/reference/protocol.md, the ``jax`` field):
#:
#: - ``preallocated``: the pool is its whole limit and no variable asks otherwise now;
#: - ``preallocated_off_now``: the pool is its whole limit, yet ``PREALLOCATE=false`` (or the
#:   platform allocator) is set now: set after the backend started, read only by a new process;
#: - ``preallocated_fraction_now``: the pool is its whole limit and a fraction is set now: that
#:   fraction sized it if it was set before the backend started, and nothing here can tell
#:   (the limit, compared with the GPU, can);
#: - ``grown``: the pool is below its limit, so preallocation was off when the backend started
#:   and the pool grew on demand: it stays at its high-water mark (XLA's BFC pool never shrinks);
#: - ``grown_platform_now``: grown, yet the platform allocator (which keeps no pool) is set now;
#: - ``unknown``: JAX gave no limit to compare with.
POOL_STORIES = ("preallocated", "preallocated_off_now", "preallocated_fraction_now", "grown", "grown_platform_now",
                "unknown")


def pool_story(stats: dict[str, int | None], preallocation_text: str) -> str:
    """Which of :data:`POOL_STORIES` a device's figures and the variables set now tell.

    The evidence is the pool, not the environment: a preallocated pool is its whole limit from
    the start. (A pool that grew on demand until it reached the limit looks the same; that
    takes a process that once needed all of it.)

    Example:
        >>> pool = {"in_use_bytes": 536870912, "pool_bytes": 63763906560, "limit_bytes": 63763906560}
        >>> pool_story(pool, "default: 75 % of each GPU at start")
        'preallocated'
        >>> pool_story(pool, "XLA_PYTHON_CLIENT_PREALLOCATE=false")    # set after JAX started
        'preallocated_off_now'
        >>> pool_story({**pool, "pool_bytes": 538968064}, "XLA_PYTHON_CLIENT_PREALLOCATE=false")
        'grown'
    """
    pool, limit = stats.get("pool_bytes"), stats.get("limit_bytes")
    variables = asked(preallocation_text)
    platform = variables.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform"
    if not isinstance(pool, int) or not isinstance(limit, int):
        return "unknown"
    if pool < limit:
        return "grown_platform_now" if platform else "grown"
    if platform or variables.get("XLA_PYTHON_CLIENT_PREALLOCATE") in _OFF:
        return "preallocated_off_now"
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" in variables or "XLA_CLIENT_MEM_FRACTION" in variables:
        return "preallocated_fraction_now"
    return "preallocated"


def snapshot() -> dict[str, Any]:
    """JAX's allocator facts as JSON-able values; starts nothing.

    Example:
        >>> snapshot()["allocator"]
        Unavailable(reason='not_imported', detail='JAX is not imported in this process')
    """
    return {"allocator": guarded(allocator_stats, "reading JAX's device allocator"), "preallocation": preallocation()}


def named_now(story: str, preallocation_text: str) -> str:
    """The variables set now that a story's advice names (``"XLA_PYTHON_CLIENT_PREALLOCATE=false"``),
    '' where it names none.

    Example:
        >>> named_now("preallocated_off_now", "XLA_PYTHON_CLIENT_PREALLOCATE=0, XLA_PYTHON_CLIENT_MEM_FRACTION=.5")
        'XLA_PYTHON_CLIENT_PREALLOCATE=0'
    """
    def wanted(name: str, value: str) -> bool:
        platform = name == "XLA_PYTHON_CLIENT_ALLOCATOR" and value.lower() == "platform"
        if story == "preallocated_off_now":
            return platform or (name == "XLA_PYTHON_CLIENT_PREALLOCATE" and value in _OFF)
        if story == "preallocated_fraction_now":
            return name in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION")
        return story == "grown_platform_now" and platform

    return " and ".join(f"{name}={value}" for name, value in asked(preallocation_text).items() if wanted(name, value))

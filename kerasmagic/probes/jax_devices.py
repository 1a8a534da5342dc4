"""JAX's per-device allocator (``Device.memory_stats()``), read only once JAX has started a backend.

By default JAX preallocates 75 % of each GPU when its backend starts: on an H100 a process
with a 512 MiB array held 59.9 GiB in NVML, all but 0.5 GiB of it a pool that JAX keeps
for itself (``pool_bytes``). ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (or a smaller
``XLA_PYTHON_CLIENT_MEM_FRACTION``) changes that, but only in a process whose backend has
not started yet. CPU devices keep no statistics (``memory_stats()`` is None).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .availability import Unavailable, guarded

__all__ = ['allocator_stats', 'backend_started', 'preallocation', 'snapshot']


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


def preallocation() -> str:
    """What this process asked of JAX's GPU pool: the variables as set, or JAX's default.

    Example:
        >>> preallocation() in ("default: 75 % of each GPU at start",) or "XLA_" in preallocation()
        True
    """
    asked = [f"{name}={os.environ[name]}" for name in ("XLA_PYTHON_CLIENT_PREALLOCATE",
             "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR") if name in os.environ]
    return ", ".join(asked) or "default: 75 % of each GPU at start"


def snapshot() -> dict[str, Any]:
    """JAX's allocator facts as JSON-able values; starts nothing.

    Example:
        >>> snapshot()["allocator"]
        Unavailable(reason='not_imported', detail='JAX is not imported in this process')
    """
    return {"allocator": guarded(allocator_stats, "reading JAX's device allocator"), "preallocation": preallocation()}

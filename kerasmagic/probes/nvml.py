"""NVIDIA GPUs through NVML (``pynvml`` from nvidia-ml-py), initialised lazily.

Nothing here runs at import: the first call initialises NVML under a lock (21 ms the first
time without a driver, then free), and a missing driver becomes a clean ``no_device``
state, remembered so that we do not retry on every sample.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from .availability import Unavailable, guarded
from .process import pid_exists

__all__ = ['devices', 'initialise', 'shutdown', 'snapshot']

_init_lock = threading.Lock()
_init_state: bool | Unavailable | None = None  # None: not tried yet


def _pynvml():
    import pynvml  # deferred on purpose: never touch a GPU library at import

    return pynvml


def initialise() -> bool | Unavailable:
    """Initialise NVML once; True, or why there is no GPU view.

    Example:
        >>> state = initialise()   # without a driver: Unavailable(reason='no_device', ...)
        >>> state is True or state.reason in ("no_device", "error")
        True
    """
    global _init_state
    with _init_lock:
        if _init_state is None:
            try:
                pynvml = _pynvml()
            except ImportError:
                _init_state = Unavailable("not_installed", "nvidia-ml-py (pynvml) is not installed")
                return _init_state
            try:
                pynvml.nvmlInit()
                _init_state = True
            except pynvml.NVMLError as exc:
                _init_state = Unavailable("no_device", f"no NVIDIA driver: {exc}")
            except Exception as exc:  # noqa: BLE001 - a broken driver must not break the cell
                _init_state = Unavailable("error", f"NVML failed to start: {exc}")
        return _init_state


def shutdown() -> None:
    """Shut NVML down if we started it (``%unload_ext`` calls it via ``kerasmagic.live.channel.unregister``)."""
    global _init_state
    with _init_lock:
        if _init_state is True:
            guarded(lambda: _pynvml().nvmlShutdown(), "shutting NVML down")
        _init_state = None


def _device_info(pynvml, index: int, pid: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)

    def utilisation() -> int:
        return int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def this_process_bytes() -> int | Unavailable:
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        for process in processes:
            if process.pid == pid:
                return int(process.usedGpuMemory or 0)
        if processes and not any(pid_exists(process.pid) for process in processes):
            # Inside a container NVML reports host PIDs: none of them is visible here, so
            # we cannot tell which one is ours. Otherwise we are simply not on this GPU.
            return Unavailable(
                "not_supported",
                "this process is not among NVML's processes (a container PID namespace?)",
            )
        return 0

    name = pynvml.nvmlDeviceGetName(handle)
    return {
        "index": index,
        "name": name.decode() if isinstance(name, bytes) else name,
        "used_bytes": int(memory.used),
        "total_bytes": int(memory.total),
        "utilisation_pct": guarded(utilisation, "reading GPU utilisation"),
        "process_used_bytes": guarded(this_process_bytes, "reading this process's GPU memory"),
    }


def devices(pid: int | None = None) -> list[dict[str, Any] | Unavailable] | Unavailable:
    """Per GPU: NVML's used/total bytes, utilisation, and this process's own use (or ``pid``'s:
    the isolation pool's warm spare).

    Example:
        >>> found = devices()      # without a driver: Unavailable(reason='no_device', ...)
        >>> isinstance(found, list) or found.reason in ("no_device", "error")
        True
    """
    state = initialise()
    if isinstance(state, Unavailable):
        return state
    pynvml = _pynvml()
    pid = os.getpid() if pid is None else pid
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        return Unavailable("no_device", "NVML found no GPU")
    return [
        guarded(functools.partial(_device_info, pynvml, i, pid), f"reading GPU {i}") for i in range(count)
    ]


def snapshot() -> dict[str, Any]:
    """Every GPU NVML sees (or why none), as JSON-able values; initialises NVML on first use.

    Example:
        >>> snapshot()                    # on a machine without an NVIDIA driver  # doctest: +SKIP
        {'devices': Unavailable(reason='no_device', detail='no NVIDIA driver: NVML Shared Library Not Found')}
    """
    return {"devices": guarded(devices, "reading NVML")}

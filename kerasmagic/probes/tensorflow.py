"""TensorFlow, observed from outside: never imported here, never started by a probe.

``tf.config.experimental.get_memory_info`` starts TensorFlow's runtime if it is not running
yet (the process goes from 2 to 6+ threads), so every allocator read first checks that the
eager context is already initialised.

TensorFlow keeps statistics for its CPU allocator only where that allocator is a pool: with
oneDNN on (TensorFlow turns it on by itself only on CPUs with neural-network instructions:
AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX; not on older Intel or most AMD CPUs) or with
``TF_CPU_ALLOCATOR_USE_BFC=1`` (any CPU). Elsewhere the figures are missing, and
:func:`cpu_stats_missing` is the one place that says why and what to do, for every report
and the sidebar alike. The probe never sets that variable itself: it changes how TensorFlow
manages memory, which is the user's call.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from .availability import Unavailable, guarded

__all__ = ['CPU_STATS_VARIABLE', 'allocator_stats', 'cpu_stats_missing', 'custom_gradient_entries',
           'default_graph_op_count', 'device_names', 'executing_eagerly', 'gradient_registry', 'module', 'reset_peaks',
           'runtime_started', 'snapshot', 'status', 'version', 'version_tuple']

#: TF's BFC pool never shrinks, so the largest peak we have ever seen on a device is a lower
#: bound of what TF holds there. We keep it ourselves because measuring a cell resets TF's
#: own peak counter.
_pool_high_water: dict[str, int] = {}
_high_water_lock = threading.Lock()


def module():
    """The imported ``tensorflow`` module, or None. Never imports it.

    Example:
        >>> module() is None or hasattr(module(), "__version__")
        True
    """
    return sys.modules.get("tensorflow")


def status() -> str | Unavailable:
    """``"running"``, or why TensorFlow numbers are not available.

    Example:
        >>> status()   # in a fresh interpreter
        Unavailable(reason='not_imported', detail='TensorFlow is not imported in this process')
    """
    if module() is None:
        return Unavailable("not_imported", "TensorFlow is not imported in this process")
    if not runtime_started():
        return Unavailable("not_started", "TensorFlow is imported but its runtime has not started")
    return "running"


def version() -> str | Unavailable:
    """TensorFlow's version string, or why there is none (never imports it).

    Example:
        >>> version()                     # doctest: +SKIP
        '2.21.0'
    """
    tf = module()
    if tf is None:
        return Unavailable("not_imported", "TensorFlow is not imported in this process")
    return str(getattr(tf, "__version__", None) or getattr(tf.version, "VERSION", "unknown"))


def version_tuple() -> tuple[int, int]:
    """(major, minor) of the imported TensorFlow, ``(0, 0)`` when it is not imported.

    Example:
        >>> version_tuple()               # doctest: +SKIP
        (2, 21)
    """
    text = version()
    if isinstance(text, Unavailable):
        return (0, 0)
    major, minor = (text.split(".") + ["0", "0"])[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def runtime_started() -> bool:
    """True when TF's eager context exists and is initialised (reading it starts nothing)."""
    context_module = sys.modules.get("tensorflow.python.eager.context")
    if context_module is None:
        return False
    ctx = context_module.context_safe()
    return bool(ctx is not None and getattr(ctx, "_initialized", False))


def device_names() -> list[str]:
    """Logical device names such as ``CPU:0`` and ``GPU:0``; empty before the runtime starts."""
    if not runtime_started():
        return []
    tf = module()
    return [d.name.replace("/device:", "") for d in tf.config.list_logical_devices()]


#: TensorFlow's own switch for a CPU allocator that keeps statistics: its BFC pool, the kind
#: oneDNN's allocator is. ``ProcessState::GetCPUAllocator`` reads it once, when the runtime
#: creates its CPU device (TF 2.21: set after ``import tensorflow`` but before the first op it
#: works, set after the first op it does not).
CPU_STATS_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"

#: What the remedy changes, measured on TF 2.21 with oneDNN off (benchmarks/bench_cpu_allocator_stats.py):
#: a deleted 256 MiB tensor stays in the process (RSS +256 MiB, reused by later tensors) where
#: plain malloc gives it back; the pool is capped at 64 GiB (TF_CPU_BFC_MEM_LIMIT_IN_MB, in
#: TF's process_state.cc), beyond which TF raises ResourceExhaustedError.
_REMEDY = (f"Set {CPU_STATS_VARIABLE}=1 before TensorFlow starts (restart the kernel if it already ran) for "
           "them: its CPU allocator then pools freed memory for reuse, as with oneDNN, instead of returning it "
           "to the OS, and caps it at 64 GiB (TF_CPU_BFC_MEM_LIMIT_IN_MB raises the cap).")


def _env_flag(name: str) -> bool | None:
    """An environment variable as TF's ReadBoolFromEnvVar reads it: True, False, or None (unset or unreadable)."""
    value = os.environ.get(name, "").strip().lower()
    return {"1": True, "true": True, "0": False, "false": False}.get(value)


def cpu_stats_missing(device: str = "CPU:0") -> Unavailable:
    """Why TensorFlow has no allocator statistics for a CPU device, the remedy and what it costs.

    The one wording every report (``%tf_mem``, ``%%tf_mem``, ``%clear_tf``, ``%%fresh_model``,
    an isolated job's) and the sidebar show where TF's CPU figures are missing. It reads the
    environment only to say which case this is; it changes nothing.

    Example:
        >>> print(cpu_stats_missing().detail)       # a CPU without VNNI/AMX, neither variable set  # doctest: +SKIP
        TensorFlow keeps no allocator statistics for CPU:0 without oneDNN (TensorFlow turns it on by itself only
        on CPUs with AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX). Set TF_CPU_ALLOCATOR_USE_BFC=1 before
        TensorFlow starts (restart the kernel if it already ran) for them: its CPU allocator then pools freed
        memory for reuse, as with oneDNN, instead of returning it to the OS, and caps it at 64 GiB
        (TF_CPU_BFC_MEM_LIMIT_IN_MB raises the cap).
    """
    if _env_flag(CPU_STATS_VARIABLE):
        # Set now, yet no statistics: TF read the variable when its runtime started, before this.
        return Unavailable("not_supported", (
            f"TensorFlow keeps no allocator statistics for {device}: {CPU_STATS_VARIABLE}=1 is set now, but "
            "TensorFlow read it when its runtime started, before that. Restart the kernel with it set before the "
            "first TensorFlow operation."))
    asked = _env_flag("TF_ENABLE_ONEDNN_OPTS")
    if asked is False:
        onednn = "turned off by TF_ENABLE_ONEDNN_OPTS=0"
    elif asked:
        # Read at import (TF 2.21: set to 1 after `import tensorflow`, still no statistics).
        onednn = "TF_ENABLE_ONEDNN_OPTS=1 was set after TensorFlow was imported"
    else:
        # TF's DefaultOneDnnPolicy (core/util/port.cc) on Linux: a CPU feature test, not a vendor one.
        onednn = "TensorFlow turns it on by itself only on CPUs with AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX"
    return Unavailable("not_supported",
                       f"TensorFlow keeps no allocator statistics for {device} without oneDNN ({onednn}). {_REMEDY}")


def _memory_info(device: str) -> dict[str, int] | Unavailable:
    tf = module()
    try:
        return tf.config.experimental.get_memory_info(device)
    except ValueError:
        # Raised for a CPU device whose allocator keeps no statistics: TF's default CPU
        # allocator (plain malloc) without oneDNN. Its statistics can be switched on only by
        # tsl::EnableCPUAllocatorStats(), which no public API reaches (in TF 2.21 its one
        # caller is grappler's SingleMachine), and even then they count 0 bytes: they add up
        # MallocExtension_GetAllocatedSize, which is 0 without tcmalloc (measured through
        # ctypes: a 256 MiB tensor read 'current': 0). So the only remedy is the BFC pool.
        if device.startswith("GPU"):
            return Unavailable("not_supported", f"TensorFlow keeps no allocator statistics for {device}")
        return cpu_stats_missing(device)


def allocator_stats() -> dict[str, dict[str, Any]] | Unavailable:
    """Per device: bytes TF's allocator has in use, its peak, and a lower bound of what it holds.

    ``held_unused_min_bytes`` is ``max(peaks seen) - in_use``: TF's pool grows to its peak and
    never gives memory back while the process lives, so at least that much is reserved but
    unused. Safe to call from any thread.

    Example:
        >>> stats = allocator_stats()
        >>> stats["CPU:0"]["in_use_bytes"]            # doctest: +SKIP
        2147483648
    """
    state = status()
    if isinstance(state, Unavailable):
        return state
    result: dict[str, dict[str, Any]] = {}
    for device in device_names():
        info = _memory_info(device)
        if isinstance(info, Unavailable):
            # The why (and remedy) once per device: a sample carries it every second, and the
            # sidebar's history message up to 900 samples.
            pointer = Unavailable(info.reason, f"no statistics for {device}: in_use_bytes says why")
            result[device] = {"in_use_bytes": info, "peak_bytes": pointer, "held_unused_min_bytes": pointer}
            continue
        with _high_water_lock:
            high = max(_pool_high_water.get(device, 0), info["peak"])
            _pool_high_water[device] = high
        result[device] = {
            "in_use_bytes": info["current"],
            "peak_bytes": info["peak"],
            "held_unused_min_bytes": max(high - info["current"], 0),
        }
    return result


def reset_peaks() -> None:
    """Reset TF's per-device peak counters, remembering the old peaks as pool high-water."""
    allocator_stats()  # records the current peaks into _pool_high_water first
    if not runtime_started():
        return
    tf = module()
    for device in device_names():
        try:
            tf.config.experimental.reset_memory_stats(device)
        except ValueError:
            pass  # no statistics on this device (CPU without oneDNN): nothing to reset


def default_graph_op_count() -> int | Unavailable:
    """Ops in the legacy (TF1) default graph: it grows in graph mode until it is reset.

    Reads the graph's private node map (O(1)) instead of ``get_operations()`` (2.4 ms at 125 k
    ops), falling back to the public call if TF changes that attribute.
    """
    if module() is None:
        return Unavailable("not_imported", "TensorFlow is not imported in this process")
    ops = sys.modules["tensorflow.python.framework.ops"]
    graph = ops.get_default_graph()
    nodes = getattr(graph, "_nodes_by_id", None)
    return len(nodes) if nodes is not None else len(graph.get_operations())


def executing_eagerly() -> bool | Unavailable:
    """True in TF2's eager mode, False after ``tf.compat.v1.disable_eager_execution()``.

    Example:
        >>> executing_eagerly()           # doctest: +SKIP
        True
    """
    tf = module()
    if tf is None:
        return Unavailable("not_imported", "TensorFlow is not imported in this process")
    return bool(tf.executing_eagerly())


def custom_gradient_entries() -> int | Unavailable:
    """How many ``CustomGradient-*`` entries TF's process-global gradient registry holds.

    Each traced Keras train step adds one or two; each pins its graph (tensorflow issue 97697).
    """
    if module() is None:
        return Unavailable("not_imported", "TensorFlow is not imported in this process")
    registry = gradient_registry()
    if isinstance(registry, Unavailable):
        return registry
    return sum(1 for key in list(registry) if key.startswith("CustomGradient-"))


def gradient_registry() -> dict | Unavailable:
    """TF's private gradient registry dict (``ops.gradient_registry._registry``)."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    registry = getattr(getattr(ops, "gradient_registry", None), "_registry", None)
    if not isinstance(registry, dict):
        return Unavailable("not_supported", "this TensorFlow has no gradient registry we know")
    return registry


def snapshot() -> dict[str, Any]:
    """All TensorFlow facts as JSON-able values; cheap, and starts nothing.

    Example:
        >>> snapshot()["status"]   # before `import tensorflow`
        Unavailable(reason='not_imported', detail='TensorFlow is not imported in this process')
    """
    state = status()
    if module() is None:
        return {"status": state}
    return {
        "status": state,
        "version": guarded(version, "reading the TF version"),
        "executing_eagerly": guarded(executing_eagerly, "reading the execution mode"),
        "allocator": guarded(allocator_stats, "reading TF allocator statistics"),
        "graph_op_count": guarded(default_graph_op_count, "counting graph ops"),
        "custom_gradient_entries": guarded(custom_gradient_entries, "reading the gradient registry"),
    }

"""TensorFlow, observed from outside: never imported here, never started by a probe.

``tf.config.experimental.get_memory_info`` starts TensorFlow's runtime if it is not running
yet (the process goes from 2 to 6+ threads), so every allocator read first checks that the
eager context is already initialised.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from .availability import Unavailable, guarded

__all__ = ['allocator_stats', 'custom_gradient_entries', 'default_graph_op_count', 'device_names', 'executing_eagerly',
           'gradient_registry', 'module', 'reset_peaks', 'runtime_started', 'snapshot', 'status', 'version',
           'version_tuple']

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


def _memory_info(device: str) -> dict[str, int] | Unavailable:
    tf = module()
    try:
        return tf.config.experimental.get_memory_info(device)
    except ValueError:
        # Raised for CPU:0 when oneDNN is off: TF then uses plain malloc and keeps no pool.
        return Unavailable(
            "not_supported",
            f"TensorFlow keeps no allocator statistics for {device} "
            "(on CPU they exist only with oneDNN on)",
        )


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
            result[device] = {"in_use_bytes": info, "peak_bytes": info, "held_unused_min_bytes": info}
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

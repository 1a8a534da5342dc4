"""One memory sample: RSS, TensorFlow's allocator and NVML, in the shape docs/reference/protocol.md gives.

The live sampler (the sidebar's ``sample`` message) and an isolated worker (its ``sample``
messages and its final sample) both take theirs here, and what reads a sample (the
runner's peaks, the clean's TF totals, the in-kernel view) reads it with the helpers below.
Nothing is imported or started: TensorFlow is read only once it is imported and running,
NVML is started on the first read of ``gpu``.

The shape: ``{"ts", "rss_bytes", "tf", "gpu"}`` where ``tf`` is
``{"status": "running", "devices": {"CPU:0": {"in_use_bytes", "peak_bytes",
"held_unused_min_bytes"}}}`` and ``gpu`` NVML's list of devices, either one an unavailable
object instead where there is none.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from . import jax_devices, nvml, process, torch_cuda
from . import tensorflow as tf_probe
from .availability import Unavailable, guarded, to_jsonable

__all__ = ['CONTEXT_POOLS', 'GPU_FRAMEWORKS', 'allocator_total', 'cuda_context', 'gpu_allocator_parts',
           'gpu_context_part', 'gpu_device_values', 'gpu_framework_imported', 'gpu_part', 'is_count', 'jax_part',
           'keep_largest', 'memory_sample', 'tf_device_missing', 'tf_device_values', 'tf_part', 'torch_part']

#: The frameworks whose import makes a process worth asking NVML about.
GPU_FRAMEWORKS = ("tensorflow", "torch", "jax")

#: ``gpu`` of a sample taken with ``gpu=False``.
_GPU_NOT_READ = Unavailable("not_imported", "no GPU framework (TensorFlow, torch, JAX) is imported in this process")


def tf_part() -> dict[str, Any] | Unavailable:
    """A sample's ``tf``: TensorFlow's allocator per device, or why there are no numbers.

    Example:
        >>> tf_part()   # before `import tensorflow`
        Unavailable(reason='not_imported', detail='TensorFlow is not imported in this process')
    """
    stats = tf_probe.allocator_stats()
    if isinstance(stats, Unavailable):
        return stats
    return {"status": "running", "devices": stats}


def gpu_part() -> list[dict[str, Any] | Unavailable] | Unavailable:
    """A sample's ``gpu``: NVML's devices (this process's use included), or why there are none.

    Example:
        >>> part = gpu_part()        # without an NVIDIA driver: Unavailable(reason='no_device', ...)
        >>> isinstance(part, list) or part.reason in ("no_device", "error")
        True
        >>> gpu_part()               # on an H100 with torch (benchmarks/results/h100-2026-11-22)  # doctest: +SKIP
        [{'index': 0, 'name': 'NVIDIA H100 80GB HBM3', 'used_bytes': 1861025792, 'total_bytes': 85520809984,
          'utilisation_pct': 2, 'process_used_bytes': 1348468736}]
    """
    return nvml.devices()


def torch_part() -> dict[str, Any] | Unavailable:
    """A sample's ``torch`` (protocol 1.4): torch's CUDA caching allocator per device, or why none.

    Example:
        >>> torch_part()   # torch not imported
        Unavailable(reason='not_imported', detail='torch is not imported in this process')
    """
    stats = torch_cuda.allocator_stats()
    if isinstance(stats, Unavailable):
        return stats
    return {"status": "running", "devices": stats}


def jax_part() -> dict[str, Any] | Unavailable:
    """A sample's ``jax`` (protocol 1.4): JAX's pool per GPU and what the process asked of it.

    Example:
        >>> jax_part()   # JAX not imported
        Unavailable(reason='not_imported', detail='JAX is not imported in this process')
    """
    stats = jax_devices.allocator_stats()
    if isinstance(stats, Unavailable):
        return stats
    # The setting explains the pool: 75 % of the GPU by default, only what is used when off.
    preallocation = jax_devices.preallocation()
    # Since 1.7 each device carries the story its pool tells (pool_story's code) and the
    # variables set now that the story's advice names: the sidebar only words them.
    devices: dict[str, dict[str, Any]] = {}
    for name, device in stats.items():
        story = jax_devices.pool_story(device, preallocation)
        devices[name] = {**device, "pool_story": story, "named_now": jax_devices.named_now(story, preallocation)}
    return {"status": "running", "devices": devices, "preallocation": preallocation}


#: A sample's optional framework fields: each is named after the module whose import makes it worth reading.
_FRAMEWORK_PARTS = (("torch", torch_part, "reading torch's CUDA allocator"),
                    ("jax", jax_part, "reading JAX's device allocator"))


#: The pools :func:`cuda_context` can subtract, as codes on the wire (a sample's ``gpu_context``).
CONTEXT_POOLS = ("torch_reserved", "jax_pool", "tf_pool")


def _number(value: Any) -> int | float:
    return value if is_count(value) else 0


def cuda_context(process_used_bytes: int | float | None, torch_devices: Any, jax_devices_stats: Any,
                 tf_devices: Any) -> dict[str, Any] | None:
    """What NVML counts for this process beyond every framework's pool (the CUDA context and the
    libraries' buffers), or None where there is no pool or no NVML figure to subtract from.

    The devices are the allocators' ``{name: stats}`` as the probes give them (a non-number
    counts as 0). TensorFlow reports its pool only as at least its high-water mark: with it
    among those subtracted, less may have been subtracted than the pool holds, so the figure
    is an ``upper_bound``.

    Example:
        >>> cuda_context(3764387840, {"cuda:0": {"reserved_bytes": 3 * 2**30}}, None, None)
        {'context_bytes': 543162368, 'upper_bound': False, 'pools': ['torch_reserved']}
        >>> cuda_context(None, {"cuda:0": {"reserved_bytes": 2**30}}, None, None) is None
        True
    """
    pools: float = 0
    whose: list[str] = []
    if isinstance(torch_devices, dict) and torch_devices:
        pools += sum(_number(stats.get("reserved_bytes")) for stats in torch_devices.values())
        whose.append("torch_reserved")
    if isinstance(jax_devices_stats, dict) and jax_devices_stats:
        pools += sum(_number(stats.get("pool_bytes")) for stats in jax_devices_stats.values())
        whose.append("jax_pool")
    tf_gpu = [stats for name, stats in tf_devices.items() if "GPU" in name.upper()] if isinstance(
        tf_devices, dict) else []
    if tf_gpu:
        pools += sum(_number(stats.get("in_use_bytes")) + _number(stats.get("held_unused_min_bytes"))
                     for stats in tf_gpu)
        whose.append("tf_pool")
    if not isinstance(process_used_bytes, (int, float)) or not whose or process_used_bytes < pools:
        return None
    return {"context_bytes": process_used_bytes - pools, "upper_bound": "tf_pool" in whose, "pools": whose}


def _devices_of(part: Any) -> Any:
    return part.get("devices") if isinstance(part, dict) and part.get("status") != "unavailable" else None


def gpu_context_part(sample: dict[str, Any]) -> dict[str, Any] | None:
    """A sample's ``gpu_context`` (protocol 1.7): :func:`cuda_context` of its own ``gpu``,
    ``torch``, ``jax`` and ``tf`` parts, or None (then the field is left out).

    Example:
        >>> gpu_context_part({"gpu": [{"index": 0, "process_used_bytes": 5 * 2**30}],
        ...                   "torch": {"status": "running", "devices": {"cuda:0": {"reserved_bytes": 2**32}}}})
        {'context_bytes': 1073741824, 'upper_bound': False, 'pools': ['torch_reserved']}
    """
    gpu = sample.get("gpu")
    used = [d["process_used_bytes"] for d in gpu if isinstance(d, dict) and is_count(d.get("process_used_bytes"))] \
        if isinstance(gpu, list) else []
    return cuda_context(sum(used) if used else None, _devices_of(sample.get("torch")),
                        _devices_of(sample.get("jax")), _devices_of(sample.get("tf")))


def gpu_allocator_parts() -> dict[str, Any]:
    """A sample's ``torch`` and ``jax`` fields (protocol 1.4), JSON-able; never raises.

    Only for the frameworks this process imported: most kernels run Keras on TensorFlow
    alone, and their samples stay as small as before. An imported framework that has not
    started its GPU side is ``not_started``; nothing here starts CUDA or a JAX backend (the
    probes ask ``torch.cuda.is_initialized()`` and JAX's backend registry first).

    Example:
        >>> parts = gpu_allocator_parts()
        >>> all(name in sys.modules for name in parts)   # nothing for a framework not imported
        True
    """
    return to_jsonable({name: guarded(read, what) for name, read, what in _FRAMEWORK_PARTS if name in sys.modules})


def gpu_framework_imported() -> bool:
    """Whether this process has imported TensorFlow, torch or JAX: only then is NVML worth
    starting for a worker's or the leak watch's sample (``memory_sample(gpu=...)``).

    Example:
        >>> isinstance(gpu_framework_imported(), bool)
        True
    """
    return any(name in sys.modules for name in GPU_FRAMEWORKS)


def memory_sample(*, gpu: bool = True) -> dict[str, Any]:
    """One JSON-able sample of this process; never raises (a failing probe is unavailable).

    ``gpu=False`` leaves NVML alone (``gpu`` is then ``not_imported``): an isolated job that
    imported no GPU framework does not pay for starting it.

    Example:
        >>> sample = memory_sample()
        >>> sorted(sample), sample["rss_bytes"] > 0, sample["tf"]["reason"]
        (['gpu', 'rss_bytes', 'tf', 'ts'], True, 'not_imported')
    """
    return to_jsonable({
        "ts": time.time(),
        "rss_bytes": guarded(process.rss_bytes, "reading RSS"),
        "tf": guarded(tf_part, "reading TF allocator statistics"),
        "gpu": guarded(gpu_part, "reading NVML") if gpu else _GPU_NOT_READ,
    })


def is_count(value: Any) -> bool:
    """Whether ``value`` is a byte count as a sample carries it: a number, not a bool nor an
    unavailable object (JSON may give an integral count as a float).

    Example:
        >>> is_count(5), is_count(5.0), is_count(True), is_count({"status": "unavailable"})
        (True, True, False, False)
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def tf_device_values(tf: Any, key: str) -> dict[str, Any]:
    """``{device: number}`` of one allocator figure (``in_use_bytes``, ``peak_bytes``,
    ``held_unused_min_bytes``) from a sample's ``tf``; devices without the number are left out.

    Example:
        >>> tf = {"status": "running", "devices": {"CPU:0": {"peak_bytes": 7}, "GPU:0": {"peak_bytes": 9}}}
        >>> tf_device_values(tf, "peak_bytes"), tf_device_values(Unavailable("not_imported"), "peak_bytes")
        ({'CPU:0': 7, 'GPU:0': 9}, {})
    """
    devices = tf.get("devices") if isinstance(tf, dict) else None
    if not isinstance(devices, dict):
        return {}
    return {name: stats[key] for name, stats in devices.items()
            if isinstance(stats, dict) and is_count(stats.get(key))}


def tf_device_missing(tf: Any, key: str) -> dict[str, Unavailable]:
    """``{device: why}`` for the devices of a sample's ``tf`` that lack one allocator figure
    (a CPU without oneDNN: :func:`kerasmagic.probes.tensorflow.cpu_stats_missing`), the wire
    form turned back into ``Unavailable``.

    Example:
        >>> why = {"status": "unavailable", "reason": "not_supported", "detail": "no statistics"}
        >>> tf_device_missing({"status": "running", "devices": {"CPU:0": {"peak_bytes": why}}}, "peak_bytes")
        {'CPU:0': Unavailable(reason='not_supported', detail='no statistics')}
    """
    devices = tf.get("devices") if isinstance(tf, dict) else None
    if not isinstance(devices, dict):
        return {}
    missing = {}
    for name, stats in devices.items():
        value = stats.get(key) if isinstance(stats, dict) else None
        if isinstance(value, Unavailable):
            missing[name] = value
        elif isinstance(value, dict) and value.get("status") == "unavailable":
            missing[name] = Unavailable(str(value.get("reason") or "error"), str(value.get("detail") or ""))
    return missing


def allocator_total(tf: Any, key: str = "in_use_bytes", *, gpu: bool | None = None) -> Any:
    """TensorFlow's allocator bytes (``key``) summed over devices: all of them, only GPUs
    (``gpu=True``) or only the others (``gpu=False``); None when no such device has the number.

    Example:
        >>> tf = {"status": "running", "devices": {"CPU:0": {"in_use_bytes": 5}, "GPU:0": {"in_use_bytes": 2}}}
        >>> allocator_total(tf), allocator_total(tf, gpu=True), allocator_total(tf_part())
        (7, 2, None)
    """
    values = [value for name, value in tf_device_values(tf, key).items() if gpu is None or ("GPU" in name) == gpu]
    return sum(values) if values else None


def gpu_device_values(gpu: Any, key: str = "process_used_bytes") -> dict[str, Any]:
    """``{"GPU:<index>": number}`` of one NVML figure from a sample's ``gpu``.

    Example:
        >>> gpu_device_values([{"index": 0, "process_used_bytes": 512}, {"status": "unavailable"}])
        {'GPU:0': 512}
    """
    if not isinstance(gpu, list):
        return {}
    return {f"GPU:{device['index']}": device[key] for device in gpu
            if isinstance(device, dict) and "index" in device and is_count(device.get(key))}


def keep_largest(peaks: dict[str, Any], values: dict[str, Any]) -> None:
    """Fold ``values`` into ``peaks``: per key, the largest number seen so far.

    Example:
        >>> peaks = {"CPU:0": 10}
        >>> keep_largest(peaks, {"CPU:0": 4, "GPU:0": 8}); peaks
        {'CPU:0': 10, 'GPU:0': 8}
    """
    for key, value in values.items():
        known = peaks.get(key)
        peaks[key] = max(value, known) if is_count(known) else value

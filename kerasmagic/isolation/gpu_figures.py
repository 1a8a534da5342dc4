"""The GPU figures of an isolated job's report, each from the process it describes.

- In the worker: torch's and JAX's own peaks (``max_memory_allocated``/``max_memory_reserved``,
  ``peak_bytes_in_use``), sent with its samples and its last message. A worker is a new
  process, so these counters are the job's alone.
- In the kernel: its GPU memory before the job and after the job's values came back (a Keras
  model loaded onto the kernel's GPU: +700 MiB measured on an H100), by whose view (NVML, TF,
  torch, JAX), and which of the values that came back live on a GPU.

Nothing here starts a runtime: torch is read only once it has initialised CUDA, JAX once it
has started a backend, TensorFlow once it runs, and NVML only in a process that has imported
one of them (the rule of the worker's samples and of the leak watch).
"""

from __future__ import annotations

from typing import Any

from ..holders import tensor_device
from ..probes import jax_devices as jax_probe
from ..probes import keras as keras_probe
from ..probes import torch_cuda as torch_probe
from ..probes.availability import Unavailable, guarded, to_jsonable
from ..probes.sample import gpu_device_values, gpu_framework_imported, memory_sample, tf_device_values

__all__ = ['allocator_peaks', 'gpu_devices_of', 'kernel_gpu_figures']

def _jax_peak_and_pool() -> dict[str, dict[str, Any]] | Unavailable:
    """``{device: {"peak_bytes", "pool_bytes"}}`` (measuring's ``_jax_peaks`` is flat, by label)."""
    stats = jax_probe.allocator_stats()
    if isinstance(stats, Unavailable):
        return stats
    return {device: {"peak_bytes": s["peak_bytes"], "pool_bytes": s["pool_bytes"]} for device, s in stats.items()}


def allocator_peaks() -> dict[str, Any]:
    """The ``allocators`` part of a worker's sample: torch's and JAX's own GPU peaks per device,
    each framework's as numbers or as why there are none (JSON-able; starts nothing).

    Example:
        >>> peaks = allocator_peaks()      # in a process that imported neither
        >>> peaks["torch"]["reason"], peaks["jax"]["reason"]
        ('not_imported', 'not_imported')
    """
    return to_jsonable({"torch": guarded(torch_probe.peaks, "reading torch's peaks"),
                        "jax": guarded(_jax_peak_and_pool, "reading JAX's peaks")})


#: Why a view has no number, kept in the figures: the report words a view missing before the
#: job by it ("not started before" is a change from nothing, a failed read is not).
_WHY_KEPT = ("not_started", "error")


def _note_why(figures: dict[str, int | Unavailable], view: str, read: Any) -> None:
    """Record under ``view`` (``TF``, ``torch``, ``JAX``, ``NVML``) why it gave no number, where
    that is worth a word: not started, or an error. A view that does not exist here (not
    imported, a CPU, no driver) gets no key."""
    if any(key.startswith(f"{view} ") for key in figures):
        return
    if isinstance(read, dict) and read.get("status") == "unavailable":  # a sample's JSON form
        read = Unavailable(str(read.get("reason") or "error"), str(read.get("detail") or ""))
    if isinstance(read, Unavailable) and read.reason in _WHY_KEPT:
        figures[view] = read


def _allocator_figures(figures: dict[str, int | Unavailable]) -> None:
    torch_stats = guarded(torch_probe.allocator_stats, "reading torch's allocator")
    if isinstance(torch_stats, dict):
        for device, stats in torch_stats.items():
            figures[f"torch {device} allocated"] = stats["allocated_bytes"]
            figures[f"torch {device} reserved"] = stats["reserved_bytes"]
    _note_why(figures, "torch", torch_stats)
    jax_stats = guarded(jax_probe.allocator_stats, "reading JAX's allocator")
    if isinstance(jax_stats, dict):
        for device, jax_device in jax_stats.items():
            in_use = jax_device.get("in_use_bytes")
            if isinstance(in_use, int):
                figures[f"JAX {device} in use"] = in_use
    _note_why(figures, "JAX", jax_stats)


def kernel_gpu_figures() -> dict[str, int | Unavailable]:
    """This process's GPU bytes by whose view they are: ``NVML GPU:0`` (this process), ``TF GPU:0
    in use``, ``torch cuda:0 allocated``/``reserved``, ``JAX gpu:0 in use``; a view that does not
    exist here (no driver, a framework not imported, a CPU) has no key, never a 0. A view that
    exists but gave no number has its name as the key and why as the value: ``"torch":
    Unavailable("not_started", ...)`` (CUDA not initialised yet), or ``Unavailable("error", ...)``
    (the read failed: the report then claims no change from nothing).

    Example:
        >>> kernel_gpu_figures()           # no GPU here, or nothing started on it
        {}
    """
    sample = memory_sample(gpu=gpu_framework_imported())
    figures: dict[str, int | Unavailable] = {
        f"NVML {device}": value for device, value in gpu_device_values(sample["gpu"]).items()}
    _note_why(figures, "NVML", sample["gpu"])
    figures.update({f"TF {device} in use": value for device, value in tf_device_values(sample["tf"], "in_use_bytes")
                    .items() if device.startswith("GPU")})
    _note_why(figures, "TF", sample["tf"])
    _allocator_figures(figures)
    return figures


def gpu_devices_of(value: Any) -> list[str]:
    """The GPU devices ``value`` keeps memory on: a tensor's, a Keras model's weights', one level
    into a list, tuple or dict; empty for host memory. Imports nothing.

    Example:
        >>> import numpy as np
        >>> gpu_devices_of({"weights": [np.zeros(3)]}), gpu_devices_of("text")
        ([], [])
    """
    found: set[str] = set()

    def note(item: Any) -> None:
        device = tensor_device(item)
        if device:
            found.add(device)
            return
        classes = keras_probe.model_classes()
        if classes and isinstance(item, classes):
            for weight in getattr(item, "weights", None) or []:
                device = tensor_device(weight)
                if device:
                    found.add(device)

    note(value)
    if isinstance(value, (list, tuple)):
        for item in value:
            note(item)
    elif isinstance(value, dict):
        for item in value.values():
            note(item)
    return sorted(found)

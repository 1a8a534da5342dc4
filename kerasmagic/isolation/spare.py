"""The warm spare's rules: when the pool keeps one, which job may take it, and why not.

A child forked from the template starts with every runtime down: on a GPU it must create its
CUDA context (about 1 s on an H200) and set up its first kernels; on a CPU TensorFlow's runtime
and Python's caches are cold. A *spare* is a child forked ahead of the next job, which does all
of that with a small warm-up fit while the previous job runs (:mod:`kerasmagic.isolation.child.warmup`),
then waits. Measured on an H200 (Keras 3.15 on torch, a 3-layer MLP): a cold fork's job took
1.27-2.88 s, a job in a fork that had created its context and fitted a different small model
0.59-0.70 s, in-process 0.50 s.

The warm-up must run somewhere: on 2 cores it ran beside the job before it and slowed it (CI's
machine: 1.19x in-process with a spare against 1.02-1.14x without), so the pool keeps a spare by
default only where it pays (:func:`default_rule`): a GPU is visible to the jobs, or at least
:data:`SPARE_MIN_CORES` cores are usable. ``configure_pool(warm_spare=True/False)`` overrides it.

A warmed process has fixed what its runtime fixes when it starts: a job that changes one of
those settings (:func:`fixed_settings_in_code`, :func:`fixed_settings_in_function`) or runs
under another environment (:func:`spare_mismatch`) gets a cold fork, and its report says why.

Example:
    >>> spare_mismatch(WorkerSpec(("keras",), (("KERAS_BACKEND", "torch"),)),
    ...                WorkerSpec(("keras",), (("KERAS_BACKEND", "jax"),)))
    'the job runs Keras on jax, the spare was warmed on torch'
    >>> fixed_settings_in_code("tf.config.threading.set_intra_op_parallelism_threads(1)")
    ["tf.config.threading's thread counts"]
"""

from __future__ import annotations

import glob
import os
import re
import types
from collections.abc import Callable
from typing import Any

from .spec import WorkerSpec

__all__ = [
    "FIXED_AT_START", "SPARE_GPU_HEADROOM_BYTES", "SPARE_MIN_CORES", "default_rule", "device_key",
    "fixed_settings_in_code", "fixed_settings_in_function", "gpu_room", "gpu_visible", "no_spare_for",
    "spare_mismatch", "usable_cores",
]

#: Calls that fail (TensorFlow: ``RuntimeError``) once a runtime has started, by what they set.
FIXED_AT_START = {
    "set_intra_op_parallelism_threads": "tf.config.threading's thread counts",
    "set_inter_op_parallelism_threads": "tf.config.threading's thread counts",
    "set_visible_devices": "the visible devices (tf.config.set_visible_devices)",
    "set_memory_growth": "memory growth (tf.config.experimental.set_memory_growth)",
    "set_logical_device_configuration": "logical devices (tf.config.set_logical_device_configuration)",
    "set_virtual_device_configuration": "logical devices (tf.config.set_logical_device_configuration)",
    "set_backend": "the Keras backend (keras.config.set_backend)",
}
_FIXED_CALL = re.compile(r"\b(" + "|".join(FIXED_AT_START) + r")\b")
#: Environment variables a runtime reads once, when it starts: a spare warmed under other values
#: cannot take them. (``CUDA_VISIBLE_DEVICES`` picks a spare per device instead: :func:`device_key`.)
_READ_AT_START = ("XLA_PYTHON_CLIENT_", "TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH", "PYTORCH_CUDA_ALLOC_CONF")
#: Cores a machine needs for a spare by default when no GPU is visible: one for the kernel's job,
#: one for the spare's warm-up, one for the kernel and everything else.
SPARE_MIN_CORES = 3
#: The free memory a GPU must have for a spare on it: its CUDA context and warm-up fit took
#: 0.5-0.7 GiB on an H200; the rest is room left for the job that runs there meanwhile.
SPARE_GPU_HEADROOM_BYTES = 4 << 30


def fixed_settings_in_code(code: str) -> list[str]:
    """The settings ``code`` changes that a warmed process can no longer change (once each).

    Example:
        >>> fixed_settings_in_code("model.fit(x, y)")
        []
    """
    return list(dict.fromkeys(FIXED_AT_START[name] for name in _FIXED_CALL.findall(code)))


def _code_names(code: types.CodeType, seen: set[int]) -> set[str]:
    if id(code) in seen:
        return set()
    seen.add(id(code))
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const, seen)
    return names


def fixed_settings_in_function(function: Callable[..., Any]) -> list[str]:
    """What :func:`fixed_settings_in_code` finds, for a function: the names its code (and the code
    of functions defined in it, and of the notebook's functions it calls by name) uses.

    Example:
        >>> def fold(i):
        ...     import tensorflow as tf
        ...     tf.config.experimental.set_memory_growth(None, True)
        >>> fixed_settings_in_function(fold)
        ['memory growth (tf.config.experimental.set_memory_growth)']
    """
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return []
    seen: set[int] = set()
    names = _code_names(code, seen)
    namespace = getattr(function, "__globals__", {})
    helpers = [namespace.get(name) for name in names]
    helpers += [cell.cell_contents for cell in getattr(function, "__closure__", None) or ()
                if cell.cell_contents is not None]
    for helper in helpers:  # one level of the user's own helpers, e.g. fold() calling setup()
        code = getattr(helper, "__code__", None)
        if isinstance(code, types.CodeType) and "site-packages" not in code.co_filename:
            names |= _code_names(code, seen)
    return list(dict.fromkeys(FIXED_AT_START[name] for name in sorted(names) if name in FIXED_AT_START))


def device_key(spec: WorkerSpec) -> str | None:
    """Which device's spare a job of ``spec`` can take: its ``CUDA_VISIBLE_DEVICES`` (None: unset).

    Example:
        >>> device_key(WorkerSpec((), (("CUDA_VISIBLE_DEVICES", "1"),)))
        '1'
    """
    return spec.late_env().get("CUDA_VISIBLE_DEVICES")


def spare_mismatch(spare: WorkerSpec, job: WorkerSpec) -> str:
    """Why a job of spec ``job`` cannot take a spare warmed for ``spare`` ("" when it can).

    Example:
        >>> print(spare_mismatch(WorkerSpec((), (("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),)), WorkerSpec((), ())))
        XLA_PYTHON_CLIENT_PREALLOCATE differs from the spare's, and its runtime read it when it started
    """
    if spare == job:
        return ""
    spare_env, job_env = dict(spare.env), dict(job.env)
    backend = spare_env.get("KERAS_BACKEND"), job_env.get("KERAS_BACKEND")
    if backend[0] != backend[1]:
        return f"the job runs Keras on {backend[1] or 'its default backend'}, the spare was warmed on " \
               f"{backend[0] or 'the default backend'}"
    if device_key(spare) != device_key(job):
        return f"the job runs on CUDA_VISIBLE_DEVICES={device_key(job)}, the spare on {device_key(spare)}"
    for key in sorted(set(spare_env) | set(job_env)):
        if spare_env.get(key) != job_env.get(key) and key.startswith(_READ_AT_START):
            return f"{key} differs from the spare's, and its runtime read it when it started"
    if not spare.can_run(job):
        changed = sorted(k for k in set(spare_env) | set(job_env) if spare_env.get(k) != job_env.get(k))
        return f"the job's environment differs from the spare's ({', '.join(changed[:3])})"
    return "the job needs modules its spare's template did not import"


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's ``cpu.max`` quota.

    Example:
        >>> usable_cores() >= 1
        True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as handle:
            quota, period = handle.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota: the affinity is the limit
    return max(1, cores)


def gpu_visible(env: dict[str, str] | None = None) -> bool:
    """Whether the jobs would see an NVIDIA GPU, found without touching CUDA: a device node
    ``/dev/nvidia<N>``, and a ``CUDA_VISIBLE_DEVICES`` that does not hide them all.

    Example:
        >>> gpu_visible({"CUDA_VISIBLE_DEVICES": "-1"})
        False
    """
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]:
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def default_rule(env: dict[str, str] | None = None, cores: int | None = None) -> tuple[bool, str]:
    """Whether the pool keeps a warm spare by default here, and why.

    Example:
        >>> default_rule({"CUDA_VISIBLE_DEVICES": "-1"}, cores=2)
        (False, 'no GPU visible and 2 usable cores (a spare pays from 3: its warm-up would compete with the job)')
    """
    if gpu_visible(env):
        return True, "a GPU is visible to the jobs"
    cores = usable_cores() if cores is None else cores
    if cores >= SPARE_MIN_CORES:
        return True, f"{cores} usable cores: a core is free beside the running job"
    return False, (f"no GPU visible and {cores} usable core{'s' if cores != 1 else ''} (a spare pays from "
                   f"{SPARE_MIN_CORES}: its warm-up would compete with the job)")


def no_spare_for(spec: WorkerSpec, env: dict[str, str] | None = None) -> str:
    """Why no job of ``spec`` gets a spare at all ("" when it may): TensorFlow on a GPU maps most of
    the card's memory when its runtime starts, and a spare would hold it while it waits.

    Example:
        >>> no_spare_for(WorkerSpec(("keras",), (("KERAS_BACKEND", "torch"),)))
        ''
    """
    values = dict(spec.env)
    if values.get("KERAS_BACKEND", "tensorflow") != "tensorflow" or "tensorflow" not in spec.modules():
        return ""
    if values.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" or values.get("TF_GPU_ALLOCATOR") == "cuda_malloc_async":
        return ""
    if gpu_visible(values if env is None else env):
        return ("TensorFlow would map most of the GPU's memory while the spare waits (set "
                "TF_FORCE_GPU_ALLOW_GROWTH=true for spares on TensorFlow)")
    return ""


def gpu_room(key: str | None, devices: Any) -> str:
    """Whether the GPU a spare for device ``key`` would use has room for one ("" when it has),
    from NVML's ``devices()`` (:func:`kerasmagic.probes.nvml.devices`). No reading, no refusal:
    NVML may be missing where the driver is not, and the spare's cost is shown either way.

    Example:
        >>> gpu_room("0", [{"index": 0, "used_bytes": 79 << 30, "total_bytes": 80 << 30}])
        'GPU 0 has 1.0 GiB free, a spare needs 4.0 GiB'
    """
    if not isinstance(devices, list) or not devices:
        return ""
    first = (key or "0").split(",")[0].strip()
    if not first.isdigit() or int(first) >= len(devices):
        return ""  # a UUID, or a device NVML does not list: not ours to judge
    device = devices[int(first)]
    if not isinstance(device, dict):
        return ""
    try:
        free = int(device["total_bytes"]) - int(device["used_bytes"])
    except (KeyError, TypeError, ValueError):
        return ""
    if free >= SPARE_GPU_HEADROOM_BYTES:
        return ""
    return f"GPU {first} has {free / 2**30:.1f} GiB free, a spare needs {SPARE_GPU_HEADROOM_BYTES / 2**30:.1f} GiB"

"""A GPU as NVML reports it, for tests on machines without one (the edge we cannot have here).

The numbers come from the test: readings recorded on a real GPU, or a stand-in framework's
allocator, so that what NVML says follows what the framework does. torch and JAX stand in
the same way (their allocator's answers, from the recording), also inside a kernel that a
browser test drives (``pytest.MonkeyPatch()`` there, as no test fixture exists).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = ["CONSTRUCTED", "READINGS", "StandInNVML", "jax_modules", "recorded_moment", "torch_module", "use_jax",
           "use_nvml", "use_recorded", "use_torch"]

#: What torch, JAX and NVML answered on an H100 (benchmarks/gpu_readings.py wrote it).
READINGS = Path(__file__).parents[1] / "benchmarks/results/h100-2026-11-22/allocator_readings.json"


class StandInNVML:
    """One GPU whose only user is this process; the slice of pynvml's API the probe calls."""

    class NVMLError(Exception):
        pass

    def __init__(self, process_bytes: Callable[[], int], used_bytes: Callable[[], int] | None = None,
                 total_bytes: int = 85520809984, name: str = "NVIDIA H100 80GB HBM3") -> None:
        self.process_bytes = process_bytes
        self.used_bytes = used_bytes or process_bytes
        self.total_bytes = total_bytes
        self.name = name

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.name

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=self.used_bytes(), total=self.total_bytes)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=self.process_bytes())]


def use_nvml(monkeypatch: Any, fake: StandInNVML) -> None:
    """Make kerasmagic's NVML probe talk to ``fake`` (initialised afresh, lazily as always)."""
    from kerasmagic.probes import nvml

    monkeypatch.setattr(nvml, "_pynvml", lambda: fake)
    monkeypatch.setattr(nvml, "_init_state", None)


def recorded_moment(run: str, moment: str) -> dict:
    """One moment of a recorded run, e.g. ``("torch", "2 GiB allocated")``: its ``nvml`` and
    its framework's figures (``torch`` or ``jax``); or one of :data:`CONSTRUCTED` from them."""
    if (run, moment) in CONSTRUCTED:
        return CONSTRUCTED[run, moment]()
    (found,) = [m for m in json.loads(READINGS.read_text())[run]["moments"] if m["moment"] == moment]
    return found


def _jax_array_deleted() -> dict:
    """JAX without preallocation once its 512 MiB array is deleted: a pool that grew and stays.

    Not recorded: built from the recorded moment ("jax preallocate=false", "512 MiB array"),
    whose array was the only thing in use (``bytes_in_use`` is exactly 512 MiB). Deleting it
    leaves nothing in use and every byte of the pool free, while the pool, and so NVML's figure
    for the process, stay as they were: XLA's BFC allocator never returns its pool to the
    driver (the JAX documentation's "GPU memory allocation": only
    ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` deallocates).
    """
    recorded = recorded_moment("jax preallocate=false", "512 MiB array")
    jax = dict(recorded["jax"], num_allocs=0, bytes_in_use=0, largest_free_block_bytes=recorded["jax"]["pool_bytes"])
    return {**recorded, "moment": "512 MiB array deleted (constructed)", "jax": jax}


#: Moments the recording lacks, each built from recorded ones by a function that says how.
CONSTRUCTED: dict[tuple[str, str], Callable[[], dict]] = {
    ("jax preallocate=false", "512 MiB array deleted (constructed)"): _jax_array_deleted,
}


def torch_module(reading: dict | None) -> SimpleNamespace:
    """torch whose CUDA is started with a recorded ``torch`` reading, or not (None: then any
    device query fails the test, as it would start CUDA)."""

    def started_only(value):
        def query(index=0):
            assert reading is not None, "the probe queried CUDA that torch never started"
            return value
        return query

    stats = reading or {}
    return SimpleNamespace(cuda=SimpleNamespace(
        is_initialized=lambda: reading is not None, device_count=started_only(1),
        memory_allocated=started_only(stats.get("allocated")), memory_reserved=started_only(stats.get("reserved")),
        max_memory_allocated=started_only(stats.get("max_allocated")),
    ))


def jax_modules(stats: dict | None) -> dict[str, SimpleNamespace]:
    """``jax`` and ``jax._src.xla_bridge`` of a JAX whose GPU backend started with a recorded
    ``memory_stats()``, or whose backend never started (None: asking for devices fails the test)."""

    def local_devices():
        assert stats is not None, "the probe started JAX's backend"
        return [SimpleNamespace(platform="gpu", id=0, memory_stats=lambda: stats)]

    return {"jax": SimpleNamespace(local_devices=local_devices),
            "jax._src.xla_bridge": SimpleNamespace(backends_are_initialized=lambda: stats is not None)}


def use_torch(monkeypatch: Any, reading: dict | None) -> None:
    """Make ``torch`` the stand-in of :func:`torch_module` for the probes."""
    monkeypatch.setitem(sys.modules, "torch", torch_module(reading))


def use_jax(monkeypatch: Any, stats: dict | None) -> None:
    """Make ``jax`` the stand-in of :func:`jax_modules` for the probes."""
    for name, module in jax_modules(stats).items():
        monkeypatch.setitem(sys.modules, name, module)


def use_recorded(monkeypatch: Any, run: str, moment: str) -> dict:
    """NVML and the run's framework answer as they did at that recorded moment; returns the moment."""
    found = recorded_moment(run, moment)
    reading = found["nvml"]
    use_nvml(monkeypatch, StandInNVML(process_bytes=lambda: reading["this_process_bytes"],
                                      used_bytes=lambda: reading["used_bytes"], total_bytes=reading["total_bytes"]))
    if "torch" in found:
        use_torch(monkeypatch, found["torch"])
    if "jax" in found:
        use_jax(monkeypatch, found["jax"])
    return found

"""`%tf_mem`'s allocator view for torch and JAX, against readings recorded on an H100.

No GPU here, and torch cannot be installed (no CPU-only wheel): `torch`, `jax` and `pynvml` are
stand-ins that answer with what the real ones answered on the GPU machine
(benchmarks/results/h100-2026-11-22/allocator_readings.json, taken by
benchmarks/gpu_readings.py). The numbers, the held-unused arithmetic and the advice are ours.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kerasmagic import tf_mem
from kerasmagic.probes import nvml

from gpu_stand_ins import StandInNVML, use_jax, use_nvml, use_torch

pytestmark = pytest.mark.unit

READINGS = json.loads(
    (Path(__file__).parents[2] / "benchmarks/results/h100-2026-11-22/allocator_readings.json").read_text()
)


def _moment(run: str, name: str) -> dict:
    (moment,) = [m for m in READINGS[run]["moments"] if m["moment"] == name]
    return moment


@pytest.fixture
def recorded_gpu(monkeypatch):
    def use(reading: dict) -> None:
        use_nvml(monkeypatch, StandInNVML(process_bytes=lambda: reading["this_process_bytes"],
                                          used_bytes=lambda: reading["used_bytes"],
                                          total_bytes=reading["total_bytes"]))

    yield use
    monkeypatch.setattr(nvml, "_init_state", None)


def test_torch_cache_kept_after_freeing_everything_is_held_unused_with_the_remedy(monkeypatch, recorded_gpu):
    moment = _moment("torch", "everything freed, cache kept")
    recorded_gpu(moment["nvml"])
    use_torch(monkeypatch, moment["torch"])
    snap = tf_mem()
    stats = snap.to_dict()["torch"]["allocator"]["cuda:0"]
    assert stats == {"allocated_bytes": 0, "reserved_bytes": 3 * 2**30, "peak_allocated_bytes": 3 * 2**30,
                     "held_unused_bytes": 3 * 2**30}
    text = str(snap)
    assert "torch cuda:0 held, unused" in text and "3.00 GiB" in text
    assert "%clear_tf hands them back (torch.cuda.empty_cache()), no restart needed" in text


def test_the_cuda_context_estimate_matches_what_nvml_read_after_empty_cache(monkeypatch, recorded_gpu):
    # NVML this process − torch reserved, at a moment with 3 GiB cached, must be what NVML
    # read once empty_cache() had returned everything: the context and libraries alone.
    moment = _moment("torch", "everything freed, cache kept")
    after = _moment("torch", "after empty_cache()")
    recorded_gpu(moment["nvml"])
    use_torch(monkeypatch, moment["torch"])
    context = moment["nvml"]["this_process_bytes"] - moment["torch"]["reserved"]
    assert context == after["nvml"]["this_process_bytes"] == 543162368
    assert "CUDA context and libraries" in str(tf_mem()) and "≈ 518 MiB" in str(tf_mem())


def test_torch_without_a_cache_gets_no_advice(monkeypatch, recorded_gpu):
    moment = _moment("torch", "2 GiB allocated")
    recorded_gpu(moment["nvml"])
    use_torch(monkeypatch, moment["torch"])
    text = str(tf_mem())
    assert "torch cuda:0 allocated" in text and "torch cuda:0 held, unused" in text
    assert "no restart needed" not in text


def test_jax_default_preallocation_is_named_with_the_variable_and_the_restart(monkeypatch, recorded_gpu):
    moment = _moment("jax default preallocation", "512 MiB array")
    recorded_gpu(moment["nvml"])
    use_jax(monkeypatch, moment["jax"])
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    snap = tf_mem()
    stats = snap.to_dict()["jax"]["allocator"]["gpu:0"]
    assert stats["in_use_bytes"] == 512 * 2**20
    assert stats["held_unused_bytes"] == 63763906560 - 512 * 2**20
    text = str(snap)
    assert "GPU 0 this process" in text and "59.9 GiB" in text  # what users saw, and nothing else
    assert "JAX holds 58.9 GiB of gpu:0 that it does not use (default: 75 % of each GPU at start)" in text
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in text and "restart the kernel" in text
    assert "%%fresh_model --isolate" in text


def test_jax_without_preallocation_gets_no_advice(monkeypatch, recorded_gpu):
    moment = _moment("jax preallocate=false", "512 MiB array")
    recorded_gpu(moment["nvml"])
    use_jax(monkeypatch, moment["jax"])
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    snap = tf_mem()
    assert snap.jax["allocator"]["gpu:0"]["held_unused_bytes"] == 538968064 - 536870912
    assert snap.jax["preallocation"] == "XLA_PYTHON_CLIENT_PREALLOCATE=false"
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false (or" not in str(snap)


def test_frameworks_that_never_started_the_gpu_are_not_started_by_the_probe(monkeypatch):
    use_torch(monkeypatch, None)
    use_jax(monkeypatch, None)
    snap = tf_mem().to_dict()
    assert snap["torch"]["allocator"]["reason"] == "not_started"
    assert snap["jax"]["allocator"]["reason"] == "not_started"


def test_in_a_container_nvml_cannot_name_this_process_and_the_framework_view_stands_in(monkeypatch):
    # NVML lists host PIDs; inside a PID namespace none of them exists here.
    moment = _moment("torch", "2 GiB allocated")
    foreign = StandInNVML(process_bytes=lambda: moment["nvml"]["this_process_bytes"])
    foreign.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        SimpleNamespace(pid=4_000_000 + handle, usedGpuMemory=moment["nvml"]["this_process_bytes"])]
    use_nvml(monkeypatch, foreign)
    use_torch(monkeypatch, moment["torch"])
    snap = tf_mem()
    (device,) = snap.nvml["devices"]
    assert device["process_used_bytes"].reason == "not_supported"
    text = str(snap)
    assert "torch cuda:0 allocated" in text and "2.00 GiB" in text
    assert "this container cannot see" in text and "the framework figures above are this process's own view" in text
    assert "CUDA context and libraries" not in text  # no NVML figure of ours to subtract from
    use_torch(monkeypatch, None)
    assert "no framework has started the GPU here" in str(tf_mem())


class _StandInTorchCuda:
    """torch.cuda's counters as the caching allocator keeps them: peak since the last reset."""

    def __init__(self, allocated: int) -> None:
        self.allocated = self.peak = allocated

    def is_initialized(self):
        return True

    def device_count(self):
        return 1

    def memory_allocated(self, index=0):
        return self.allocated

    def memory_reserved(self, index=0):
        return self.peak

    def max_memory_allocated(self, index=0):
        return self.peak

    def reset_peak_memory_stats(self, index=0):
        self.peak = self.allocated

    def use(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)


def test_a_cells_torch_peak_is_its_own_and_nested_blocks_keep_the_outer_one(monkeypatch):
    from kerasmagic import measure

    cuda = _StandInTorchCuda(allocated=2**30)
    cuda.use(4 * 2**30)
    cuda.use(-4 * 2**30)  # the process's peak (5 GiB) is from before the cell
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    with measure("outer") as outer:
        cuda.use(2 * 2**30)
        cuda.use(-2 * 2**30)
        with measure("inner") as inner:  # resets the counters: the outer block must keep its 3 GiB
            cuda.use(2**29)
            cuda.use(-(2**29))
    assert inner.gpu_peak == {"torch cuda:0": 2**30 + 2**29}
    assert outer.gpu_peak == {"torch cuda:0": 3 * 2**30}
    text = str(outer)
    assert "torch cuda:0 peak" in text and "3.00 GiB" in text and "torch allocator, this cell" in text
    assert outer.to_dict()["gpu_framework_peak_bytes"] == {"torch cuda:0": 3 * 2**30}


def test_jax_peak_counts_only_where_the_cell_raised_it(monkeypatch):
    from kerasmagic import measure

    stats = dict(_moment("jax preallocate=false", "512 MiB array")["jax"])
    use_jax(monkeypatch, stats)
    with measure() as raised:
        stats["peak_bytes_in_use"] = 3 * 2**30
    assert raised.gpu_peak == {"JAX gpu:0": 3 * 2**30}
    with measure() as below:
        pass
    (peak,) = below.gpu_peak.values()
    assert peak.reason == "not_supported" and "at most the process's earlier peak, 3.00 GiB" in peak.detail

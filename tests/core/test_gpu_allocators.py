"""`%tf_mem`'s allocator view for torch and JAX, against readings recorded on an H100 and an H200.

No GPU here, and torch cannot be installed (no CPU-only wheel): `torch`, `jax` and `pynvml` are
stand-ins that answer with what the real ones answered on the GPU machines
(benchmarks/results/h100-2026-11-22/allocator_readings.json, taken by
benchmarks/gpu_readings.py; the H200 GPU-suite run's records in benchmarks/results/h200-2026-11-28).
The numbers, the held-unused arithmetic and the advice are ours.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from kerasmagic import tf_mem
from kerasmagic.probes import jax_devices
from kerasmagic.snapshot import jax_advice
from kerasmagic.tables import format_bytes

from gpu_recorded import JAX_PREALLOCATED_NOTE, h200_session
from gpu_stand_ins import StandInNVML, recorded_moment, use_jax, use_nvml, use_recorded, use_torch

pytestmark = pytest.mark.unit

_XLA_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
                  "XLA_PYTHON_CLIENT_ALLOCATOR")


@pytest.fixture
def xla_env(monkeypatch):
    """The kernel's environment with only the XLA variables a test sets (the runner's may have some)."""
    for name in _XLA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_torch_cache_kept_after_freeing_everything_is_held_unused_with_the_remedy(monkeypatch):
    use_recorded(monkeypatch, "torch", "everything freed, cache kept")
    snap = tf_mem()
    stats = snap.to_dict()["torch"]["allocator"]["cuda:0"]
    assert stats == {"allocated_bytes": 0, "reserved_bytes": 3 * 2**30, "peak_allocated_bytes": 3 * 2**30,
                     "held_unused_bytes": 3 * 2**30}
    text = str(snap)
    assert "torch cuda:0 held, unused" in text and "3.00 GiB" in text
    assert "%clear_tf hands them back (torch.cuda.empty_cache()), no restart needed" in text


def test_the_cuda_context_estimate_matches_what_nvml_read_after_empty_cache(monkeypatch):
    # NVML this process − torch reserved, at a moment with 3 GiB cached, must be what NVML
    # read once empty_cache() had returned everything: the context and libraries alone.
    after = recorded_moment("torch", "after empty_cache()")
    use_recorded(monkeypatch, "torch", "everything freed, cache kept")
    (row,) = [line for line in str(tf_mem()).splitlines() if "CUDA context and libraries" in line]
    assert "≈ 518 MiB" in row and "NVML this process − torch reserved" in row
    assert f"≈ {format_bytes(after['nvml']['this_process_bytes'])}" in row


def test_with_tensorflow_the_context_estimate_is_an_upper_bound(monkeypatch):
    # TF gives its pool only as at least its high-water mark (in use + held unused): NVML minus
    # that is at most the context, and %tf_mem must not print it as an estimate.
    moment = use_recorded(monkeypatch, "torch", "everything freed, cache kept")
    snap = tf_mem()
    snap.tensorflow["allocator"] = {"GPU:0": {"in_use_bytes": 2**28, "peak_bytes": 2**28,
                                              "held_unused_min_bytes": 0}}
    (row,) = [line for line in str(snap).splitlines() if "CUDA context and libraries" in line]
    left = moment["nvml"]["this_process_bytes"] - 3 * 2**30 - 2**28
    assert f"≤ {format_bytes(left)}" in row and "≈" not in row
    assert "torch reserved − TF pool (at least): an upper bound, as TF reports only a lower bound" in row


def test_torch_without_a_cache_gets_no_advice(monkeypatch):
    use_recorded(monkeypatch, "torch", "2 GiB allocated")
    text = str(tf_mem())
    assert "torch cuda:0 allocated" in text and "torch cuda:0 held, unused" in text
    assert "no restart needed" not in text


# The sidebar says the same (labextension/src/__tests__/gpu.spec.ts): the why, then the remedy.
_PREALLOCATED = ("JAX holds 58.9 GiB of gpu:0 that it does not use "
                 "(preallocated when JAX started: the pool is its whole limit). ")
_GROWN = ("JAX holds 514 MiB of gpu:0 that it does not use "
          "(the pool's high-water mark: it grew on demand and never shrinks). ")


def test_jax_default_preallocation_is_named_with_the_variable_and_the_restart(xla_env):
    use_recorded(xla_env, "jax default preallocation", "512 MiB array")
    snap = tf_mem()
    stats = snap.to_dict()["jax"]["allocator"]["gpu:0"]
    assert stats["in_use_bytes"] == 512 * 2**20
    assert stats["held_unused_bytes"] == 63763906560 - 512 * 2**20
    text = str(snap)
    assert "GPU 0 this process" in text and "59.9 GiB" in text  # what users saw, and nothing else
    assert _PREALLOCATED + (
        "XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used (XLA_PYTHON_CLIENT_MEM_FRACTION=.25 still "
        "preallocates, a quarter of the GPU instead of 75 %), but only if set before JAX starts: restart the kernel "
        "with it set, or run the work with %%fresh_model --isolate."
    ) in _one_line(text)


@pytest.mark.parametrize("setting", [{"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
                                     {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}])
def test_jax_preallocated_with_the_variable_set_afterwards_says_so_instead_of_asking_for_it(xla_env, setting):
    # The pool is JAX's whole limit, as the default made it; the variable, set now, came too late.
    use_recorded(xla_env, "jax default preallocation", "512 MiB array")
    for name, value in setting.items():
        xla_env.setenv(name, value)
    ((name, value),) = setting.items()
    text = _one_line(str(tf_mem()))
    assert _PREALLOCATED + (
        f"The environment now has {name}={value}, but the pool is JAX's whole limit, so that was set after JAX "
        "started and only a new process reads it: restart the kernel, or run the work with %%fresh_model --isolate."
    ) in text
    assert "takes only what is used" not in text


def test_jax_preallocated_with_a_fraction_set_now_cannot_say_when_it_was_set(xla_env):
    # A fraction in force also makes the pool its whole limit: the limit, shown, tells which.
    use_recorded(xla_env, "jax default preallocation", "512 MiB array")
    xla_env.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5")
    assert _PREALLOCATED + (
        "The environment now has XLA_PYTHON_CLIENT_MEM_FRACTION=.5: the pool, JAX's whole limit (59.4 GiB), is that "
        "fraction of the GPU only if it was set before JAX started; set after, only a new process reads it. "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used, but only if set before JAX starts: restart the "
        "kernel with it set, or run the work with %%fresh_model --isolate."
    ) in _one_line(str(tf_mem()))


def test_jax_pool_grown_without_preallocation_names_the_platform_allocator_not_the_variable_already_set(xla_env):
    use_recorded(xla_env, "jax preallocate=false", "512 MiB array deleted (constructed)")
    xla_env.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    snap = tf_mem()
    assert snap.jax["allocator"]["gpu:0"]["held_unused_bytes"] == 538968064
    text = _one_line(str(snap))
    assert _GROWN + (
        "XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory when arrays are deleted (allocations get slower), but only "
        "in a new process: restart the kernel with it set, or run the work with %%fresh_model --isolate."
    ) in text
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false (or" not in text


def test_jax_pool_grown_with_the_platform_allocator_set_afterwards_says_so(xla_env):
    use_recorded(xla_env, "jax preallocate=false", "512 MiB array deleted (constructed)")
    xla_env.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    xla_env.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    assert _GROWN + (
        "The environment now has XLA_PYTHON_CLIENT_ALLOCATOR=platform, but JAX keeps a pool, so that was set after JAX "
        "started and only a new process reads it: restart the kernel, or run the work with %%fresh_model --isolate."
    ) in _one_line(str(tf_mem()))


def test_jax_without_a_limit_to_compare_claims_no_cause():
    why, remedy = jax_advice({"in_use_bytes": 0, "pool_bytes": 2**30, "limit_bytes": None},
                             "XLA_PYTHON_CLIENT_PREALLOCATE=false")
    assert (why, remedy) == ("pool − in use", "Only a new process gives it back: restart the kernel, or run the "
                                              "work with %%fresh_model --isolate.")


def test_jax_without_preallocation_gets_no_advice(xla_env):
    use_recorded(xla_env, "jax preallocate=false", "512 MiB array")
    xla_env.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    snap = tf_mem()
    assert snap.jax["allocator"]["gpu:0"]["held_unused_bytes"] == 538968064 - 536870912
    assert snap.jax["preallocation"] == "XLA_PYTHON_CLIENT_PREALLOCATE=false"
    assert "JAX holds" not in str(snap)


def _one_line(text: str) -> str:
    """A report's text with its notes' line wrapping undone."""
    return " ".join(text.split())


def test_frameworks_that_never_started_the_gpu_are_not_started_by_the_probe(monkeypatch):
    use_torch(monkeypatch, None)
    use_jax(monkeypatch, None)
    snap = tf_mem().to_dict()
    assert snap["torch"]["allocator"]["reason"] == "not_started"
    assert snap["jax"]["allocator"]["reason"] == "not_started"


def test_in_a_container_nvml_cannot_name_this_process_and_the_framework_view_stands_in(monkeypatch):
    # NVML lists host PIDs; inside a PID namespace none of them exists here.
    moment = recorded_moment("torch", "2 GiB allocated")
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

    stats = dict(recorded_moment("jax preallocate=false", "512 MiB array")["jax"])
    use_jax(monkeypatch, stats)
    with measure() as raised:
        stats["peak_bytes_in_use"] = 3 * 2**30
    assert raised.gpu_peak == {"JAX gpu:0": 3 * 2**30}
    with measure() as below:
        pass
    (peak,) = below.gpu_peak.values()
    assert peak.reason == "not_supported" and "at most the process's earlier peak, 3.00 GiB" in peak.detail


def test_the_h200s_default_preallocated_pool_gets_the_story_the_gpu_suite_expects(xla_env):
    # gpu_session_jax.json: Keras on JAX, no XLA variable set, a 512 MiB array; JAX's pool is its whole
    # limit, 74.7 % of the H200, as JAX documents its default (75 % of the GPU's memory at start).
    record = h200_session("jax")["tf_mem"]
    assert h200_session("jax")["preallocate_variable"] is None
    stats, device = record["jax"], record["device"]
    assert stats["pool_bytes"] == stats["bytes_limit"] and 0.74 < stats["bytes_limit"] / device["total_bytes"] < 0.76
    use_nvml(xla_env, StandInNVML(process_bytes=lambda: record["nvml"], used_bytes=lambda: device["used_bytes"],
                                  total_bytes=device["total_bytes"], name="NVIDIA H200"))
    use_jax(xla_env, stats)
    snap = tf_mem()
    assert snap.jax["preallocation"] == "default: 75 % of each GPU at start"
    assert jax_devices.pool_story(snap.jax["allocator"]["gpu:0"], snap.jax["preallocation"]) == "preallocated"
    text = _one_line(str(snap))
    # What tests/gpu/test_jax_gpu.py asserts on the GPU, on the text the code makes of the same reading.
    assert JAX_PREALLOCATED_NOTE.search(text), text
    assert "JAX holds 104 GiB of gpu:0" in text and "JAX gpu:0 pool / limit 105 GiB / 105 GiB" in text

"""The magics on Keras 3's JAX backend on a real NVIDIA GPU, checked against JAX and NVML.

One notebook-like session (tests/gpu/session_jax.py) runs in its own interpreter with
KERAS_BACKEND=jax and JAX's default preallocation; each test reads one scenario of it. Every
expected figure comes from JAX's ``memory_stats()`` or NVML read at the same moment.
"""

from __future__ import annotations

import re

import pytest
from gpu_suite import UNCHANGED, nvml_sees, part, run_session, skip_unless, tolerance

from gpu_recorded import JAX_PREALLOCATED_NOTE

pytestmark = pytest.mark.gpu

MiB = 2**20
#: The variables that change JAX's GPU pool: unset, the session gets JAX's default.
POOL_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


@pytest.fixture(scope="module")
def seen(gpu_facts):
    skip_unless(gpu_facts, "jax")
    return run_session("session_jax.py", "jax", {"KERAS_BACKEND": "jax"}, unset=POOL_VARIABLES)


def test_the_session_ran_keras_on_jax_on_the_gpu_with_default_preallocation(seen):
    assert seen["backend"] == "jax" and seen["preallocate_variable"] is None
    part(seen, "tf_mem")
    assert seen["versions"]["platform"] == "gpu"


def test_tf_mem_shows_jaxs_in_use_pool_peak_and_limit_as_jax_reads_them(seen):
    record = part(seen, "tf_mem")
    stats = record["report"]["jax"]["allocator"]["gpu:0"]
    direct = record["jax"]
    assert stats["in_use_bytes"] == direct["bytes_in_use"] >= 512 * MiB
    assert stats["peak_bytes"] == direct["peak_bytes_in_use"]
    assert stats["pool_bytes"] == direct["pool_bytes"]
    assert stats["limit_bytes"] == direct["bytes_limit"] <= record["device"]["total_bytes"]
    assert stats["held_unused_bytes"] == direct["pool_bytes"] - direct["bytes_in_use"]
    # Preallocated: the whole limit was taken when the backend started, whatever is in use.
    assert direct["pool_bytes"] == direct["bytes_limit"]
    for row in ("in use", "peak", "pool / limit", "held, unused"):
        assert f"JAX gpu:0 {row}" in record["text"]


def test_preallocation_is_named_held_unused_with_its_remedy_and_the_restart(seen):
    record = part(seen, "tf_mem")
    assert record["report"]["jax"]["preallocation"] == "default: 75 % of each GPU at start"
    text = " ".join(record["text"].split())  # notes wrap
    # The story is read from the pool (its whole limit: preallocated), as the CPU-side test checks on
    # the H200's recording of this session (tests/core/test_gpu_allocators.py).
    assert JAX_PREALLOCATED_NOTE.search(text), text


def test_nvml_this_process_is_jaxs_pool_plus_the_cuda_context(seen):
    record = part(seen, "tf_mem")
    nvml_sees(record["nvml"])
    (device,) = [d for d in record["report"]["nvml"]["devices"] if d["index"] == 0]
    assert abs(device["process_used_bytes"] - record["nvml"]) <= UNCHANGED
    context = record["nvml"] - record["jax"]["pool_bytes"]
    # A CUDA context with XLA's libraries: 550 MiB on an H100; more than 2 GiB would be a pool
    # NVML counts and the report does not.
    assert 0 < context <= 2 * 1024 * MiB
    match = re.search(r"CUDA context and libraries\s+≈ ([\d.]+) (MiB|GiB)\s+NVML this process − JAX pool",
                      record["text"])
    assert match, record["text"]
    shown = float(match.group(1)) * (MiB if match.group(2) == "MiB" else 1024 * MiB)
    assert abs(shown - context) <= tolerance(context)


def test_clear_tf_frees_jax_arrays_into_its_pool_and_says_the_gpu_did_not_change(seen):
    record = part(seen, "clear_tf")
    assert record["before"]["bytes_in_use"] - record["jax"]["bytes_in_use"] >= 512 * MiB
    nvml_sees(record["nvml_before"], record["nvml"])
    # The pool keeps what JAX freed: NVML, and so the report, sees no change.
    assert abs(record["nvml_before"] - record["nvml"]) <= UNCHANGED
    assert abs(record["report"]["gpu_freed_bytes"]) <= UNCHANGED


def test_cell_tf_mem_shows_jaxs_peak_only_where_the_cell_set_a_new_one(seen):
    record = part(seen, "cell_peak")
    peaks = record["report"]["gpu_framework_peak_bytes"]
    assert peaks["JAX gpu:0"] == record["inner_peak"] > record["before"]["peak_bytes_in_use"]
    assert re.search(r"JAX gpu:0 peak\s+[\d.]+ (MiB|GiB)\s+JAX allocator, this cell", record["text"])
    # JAX's peak cannot be reset: a cell below the process's peak gets a reason, not a number.
    small = record["small_report"]["gpu_framework_peak_bytes"]["JAX gpu:0"]
    assert small["status"] == "unavailable" and "no new high" in small["detail"]


def test_load_model_with_its_optimizer_on_the_gpu_is_named_with_the_remedy(seen):
    record = part(seen, "load_model")
    assert record["platforms"] == ["gpu"]
    (model,) = record["report"]["new_models"]
    assert model["held_by"] == ["loaded"] and model["optimizer_state"] == "restored"
    assert model["optimizer_bytes"] >= 2 * model["weight_bytes"] > 0
    grown = record["jax"]["bytes_in_use"] - record["before"]["bytes_in_use"]
    assert grown >= model["weight_bytes"] + model["optimizer_bytes"]
    assert "compile=False" in record["text"]


def test_an_isolated_cell_gives_all_its_gpu_memory_back(seen):
    record = part(seen, "isolate")
    report = record["report"]
    assert report["status"] == "ok" and report["origin"] == "forked"
    assert record["platform"] == "gpu" and record["worker_pid"] == report["worker_pid"]
    # --env reached JAX in the worker: it took what it used, not 75 % of the GPU.
    stats = record["worker_stats"]
    assert 0 < stats["pool_bytes"] < stats["bytes_limit"] // 2
    peaks = [v for v in report["child_gpu_process_peak_bytes"].values() if isinstance(v, int)]
    nvml_sees(record["kernel_nvml_before"], record["kernel_nvml_after"], *(peaks or [None]))
    assert max(peaks) >= stats["pool_bytes"]
    assert record["worker_gone_from_nvml"] is True
    assert abs(record["kernel_nvml_after"] - record["kernel_nvml_before"]) <= UNCHANGED

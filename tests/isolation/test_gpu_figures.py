"""The GPU in isolated reports: the worker's allocator peaks and the kernel's GPU after values came back.

No GPU and no torch here. The worker is another process, so its stand-ins travel on its
``PYTHONPATH`` (tests/gpu_stand_in_modules: a torch whose caching allocator keeps counters, and
an NVML that counts the CUDA context plus what that allocator reserved). The numbers are those
an isolated torch job read on an H100 (benchmarks/results/h100-2026-11-22/gpu_report.json).
JAX is real (its CPU build): there it keeps no allocator statistics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kerasmagic.isolation import isolated_map, run_isolated
from kerasmagic.isolation.gpu_figures import kernel_gpu_figures
from kerasmagic.isolation.result import IsolatedResult
from kerasmagic.probes.availability import Unavailable

from gpu_stand_in_modules import use_in_kernel, without_bystanders, worker_env
from gpu_stand_ins import StandInNVML, use_nvml

pytestmark = pytest.mark.isolation

#: One isolated Keras-on-torch fit, forked from a warm template, on the H100.
RECORDED = json.loads((Path(__file__).parents[2] / "benchmarks/results/h100-2026-11-22/gpu_report.json")
                      .read_text())["torch"]["isolated"][0]
TORCH_PEAK = RECORDED["value"]["torch_peak"]            # max_memory_allocated: 69.2 MiB
TORCH_RESERVED = RECORDED["value"]["torch_reserved"]    # memory_reserved at the end: 70.0 MiB
NVML_PEAK = RECORDED["gpu_peak"]["GPU:0"]               # NVML, the worker: 812 MiB
#: What NVML counted beyond torch's reserve in that worker: the CUDA context, cuBLAS, cuDNN.
WORKER_CONTEXT = NVML_PEAK - TORCH_RESERVED
#: NVML for a torch process whose cache was emptied: the context alone (allocator_readings.json).
KERNEL_CONTEXT = 543162368

#: The recorded job, in short: a batch of the recorded peak is allocated and freed; torch keeps
#: its blocks cached, so the reserve (and NVML) stay at their peak until the process ends.
FIT = f"import torch\nbatch = torch.empty({TORCH_PEAK})\ndel batch\ndone = True"
NOT_STARTED = Unavailable("not_started", "torch has not initialised CUDA in this process")


def test_the_workers_torch_peaks_are_in_the_report_as_recorded_on_the_h100():
    result = run_isolated(FIT, env=worker_env(WORKER_CONTEXT))
    assert result.status == "ok" and result.outputs["done"] is True
    assert result.child_gpu_peak == {"GPU:0": NVML_PEAK}
    assert result.child_torch_peak == {"cuda:0": TORCH_PEAK}
    assert result.child_torch_reserved_peak == {"cuda:0": TORCH_RESERVED}
    wire = result.to_dict()
    assert wire["child_torch_peak_allocated_bytes"] == {"cuda:0": 72541184}
    assert wire["child_torch_peak_reserved_bytes"] == {"cuda:0": 73400320}
    assert wire["child_gpu_process_peak_bytes"] == {"GPU:0": 851443712}
    # No JAX figure: the job used no JAX (the template may have imported it with Keras, whose
    # import brings JAX in where it is installed, but nothing started its backend).
    assert wire["child_jax_peak_bytes"]["reason"] in ("not_imported", "not_started")
    text = str(result)
    assert "torch cuda:0 peak" in text and "69.2 MiB" in text and "reserved peak 70.0 MiB" in text
    assert "GPU:0 peak" in text and "812 MiB" in text
    assert "beyond the allocators: the CUDA context and libraries" in text
    assert "torch cuda:0 peak" in result._repr_html_() and "reserved peak 70.0 MiB" in result._repr_html_()


def test_a_job_that_never_started_cuda_has_no_torch_numbers_and_says_why():
    result = run_isolated("import torch\nready = torch.cuda.is_initialized()", env=worker_env(WORKER_CONTEXT))
    assert result.outputs["ready"] is False
    assert result.child_torch_peak == NOT_STARTED
    assert result.to_dict()["child_torch_peak_allocated_bytes"]["reason"] == "not_started"
    assert "torch cuda:0" not in str(result)


def test_a_tensor_brought_back_onto_the_kernels_gpu_shows_in_the_kernel_section(monkeypatch):
    torch = use_in_kernel(monkeypatch, KERNEL_CONTEXT)
    nbytes = 700 * 2**20
    result = run_isolated(f"import torch\nweights = torch.empty({nbytes})\nsteps = 3",
                          env=worker_env(WORKER_CONTEXT))
    assert result.outputs["weights"].device == "cuda:0" and torch.cuda.memory_allocated() == nbytes
    # Before: torch imported, CUDA not started, so NVML's 0 is real and torch has no number
    # yet, and says why: the report words the change from it.
    assert without_bystanders(result.kernel_gpu_before) == {"NVML GPU:0": 0, "torch": NOT_STARTED}
    assert without_bystanders(result.kernel_gpu_after) == {
        "NVML GPU:0": KERNEL_CONTEXT + nbytes, "torch cuda:0 allocated": nbytes, "torch cuda:0 reserved": nbytes}
    assert result.returned_on_gpu == {"weights": ["cuda:0"]}
    wire = result.to_dict()
    assert wire["kernel_gpu_after_bytes"]["torch cuda:0 allocated"] == nbytes
    assert wire["kernel_gpu_before_bytes"]["torch"]["reason"] == "not_started"
    assert wire["returned_on_gpu"] == {"weights": ["cuda:0"]}
    text = str(result)
    kernel = text[text.index("\nKernel\n"):]
    assert "GPU:0 change" in kernel and "+1.19 GiB" in kernel and "0 B → 1.19 GiB, NVML, kernel process" in kernel
    assert "torch cuda:0 allocated change  +700 MiB" in kernel
    assert "not started before → 700 MiB, torch allocator, kernel" in kernel
    assert "on the kernel's GPU now, brought back by this job: weights (cuda:0)" in kernel
    assert "steps" not in result.returned_on_gpu  # a plain value is no GPU holder
    # The worker's side of the same job: its own peaks, its own NVML.
    assert result.child_torch_peak == {"cuda:0": nbytes}
    assert result.child_gpu_peak == {"GPU:0": WORKER_CONTEXT + nbytes}


def test_a_map_names_the_items_whose_values_came_back_onto_the_gpu(monkeypatch):
    use_in_kernel(monkeypatch, KERNEL_CONTEXT)

    def tensor_of(mib):
        import torch

        return torch.empty(mib * 2**20) if mib else None

    mapped = isolated_map(tensor_of, [0, 2], workers=1, env=worker_env(WORKER_CONTEXT), progress=False)
    assert [job.returned_on_gpu for job in mapped.jobs] == [{}, {"value": ["cuda:0"]}]
    assert mapped.to_dict()["kernel_gpu_after_bytes"]["torch cuda:0 allocated"] == 2 * 2**20
    text = str(mapped)
    assert "torch cuda:0 allocated change" in text
    assert "on the kernel's GPU now, values brought back: [1] cuda:0" in text


def test_real_jax_on_a_cpu_has_no_allocator_view_and_the_report_invents_no_gpu_figure():
    result = run_isolated("import jax.numpy as jnp\ntotal = float(jnp.arange(4.0).sum())")
    assert result.outputs["total"] == 6.0
    jax_view = result.to_dict()["child_jax_peak_bytes"]
    assert jax_view["status"] == "unavailable" and jax_view["reason"] == "not_supported"
    assert result.child_gpu_peak == {}
    for figures in (result.kernel_gpu_before, result.kernel_gpu_after):
        assert without_bystanders(figures) == {}, figures
    assert "JAX" not in str(result) and "GPU" not in str(result)


def test_without_a_gpu_framework_the_kernel_never_starts_nvml(monkeypatch):
    def refuse():
        raise AssertionError("NVML was started in a kernel that imported no GPU framework")

    for name in ("tensorflow", "torch", "jax"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    stand_in = StandInNVML(process_bytes=lambda: 2**30)
    stand_in.nvmlInit = refuse
    use_nvml(monkeypatch, stand_in)
    assert kernel_gpu_figures() == {}


def test_where_no_allocator_saw_the_gpu_the_nvml_peak_is_named_as_the_figure():
    result = IsolatedResult("job", child_gpu_peak={"GPU:0": NVML_PEAK}, child_torch_peak=NOT_STARTED,
                            child_jax_peak=Unavailable("not_imported", "JAX is not imported in this process"))
    text = str(result)
    assert "NVML, worker process, sampled: the GPU peak, no framework allocator saw it" in text
    assert "(torch: torch has not initialised CUDA in this process)" in text and "JAX" not in text
    with_tf = IsolatedResult("job", child_gpu_peak={"GPU:0": NVML_PEAK}, child_tf_peak={"GPU:0": 2**20})
    assert "beyond the allocators" in str(with_tf)


def test_jax_peaks_from_the_h100_fold_and_render_with_the_pool():
    # What JAX's memory_stats() said at the end of an isolated Keras-on-JAX fit on the H100.
    stats = json.loads((Path(__file__).parents[2] / "benchmarks/results/h100-2026-11-22/gpu_report.json")
                       .read_text())["jax"][1]["value"]["memory_stats"]
    result = IsolatedResult("job")
    result.fold_allocators({"jax": {"status": "unavailable", "reason": "not_started", "detail": ""}})
    result.fold_allocators({"jax": {"gpu:0": {"peak_bytes": stats["peak_bytes_in_use"],
                                              "pool_bytes": stats["pool_bytes"]}}})
    result.fold_allocators({"jax": {"status": "unavailable", "reason": "error", "detail": "late"}})  # numbers stay
    assert result.child_jax_peak == {"gpu:0": 185515520} and result.child_jax_pool == {"gpu:0": 270532608}
    assert "JAX gpu:0 peak" in str(result) and "177 MiB" in str(result) and "its largest pool 258 MiB" in str(result)


def test_the_jax_pool_is_the_largest_seen_and_said_so():
    # XLA's pool grows; a smaller reading (another device's, or a late one) must not lower it.
    result = IsolatedResult("job")
    for pool in (2**30, 3 * 2**30, 2 * 2**30):
        result.fold_allocators({"jax": {"gpu:0": {"peak_bytes": 2**20, "pool_bytes": pool}}})
    assert result.child_jax_pool == {"gpu:0": 3 * 2**30}
    assert "its largest pool 3.00 GiB" in str(result) and "its largest pool 3.00 GiB" in result._repr_html_()


def test_a_view_whose_reading_before_failed_is_not_called_not_started(monkeypatch):
    torch = use_in_kernel(monkeypatch, KERNEL_CONTEXT)
    from kerasmagic.probes import torch_cuda

    real = torch_cuda.allocator_stats
    calls = []

    def fails_first():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: device busy")
        return real()

    torch.cuda.started = True  # CUDA was running in the kernel before the job
    monkeypatch.setattr(torch_cuda, "allocator_stats", fails_first)
    result = run_isolated(f"import torch\nweights = torch.empty({2**20})", env=worker_env(WORKER_CONTEXT))
    assert result.kernel_gpu_before["torch"].reason == "error"
    assert "device busy" in result.kernel_gpu_before["torch"].detail
    assert result.to_dict()["kernel_gpu_before_bytes"]["torch"]["reason"] == "error"
    kernel = str(result)[str(result).index("\nKernel\n"):]
    assert "not started before" not in kernel
    assert "torch cuda:0 allocated after" in kernel and "no reading before (" in kernel and "device busy" in kernel


def test_a_framework_the_kernel_had_not_imported_is_a_change_from_nothing():
    from kerasmagic.isolation.result import add_kernel_gpu_rows
    from kerasmagic.tables import Section

    kernel = Section("Kernel")
    add_kernel_gpu_rows(kernel, {}, {"torch cuda:0 allocated": 2**20, "torch": Unavailable("error", "x")})
    assert kernel.rows == [("torch cuda:0 allocated change", "+1.00 MiB",
                            "not imported before → 1.00 MiB, torch allocator, kernel")]

"""`clear_tf` hands torch's cached GPU blocks back after its garbage collection, not before.

torch cannot be installed here (no CPU-only wheel; the GPU wheel needs its CUDA libraries), and
there is no GPU: `torch` is a stand-in whose CUDA cache behaves as torch's caching allocator
does (freed tensors' blocks stay reserved until `empty_cache()`). The real thing was measured
on an H100 (benchmarks/results/h100-2026-11-22/allocator_readings.json).
"""

from __future__ import annotations

import sys
import types

import pytest

from kerasmagic.clean import STEP_EMPTY_TORCH_CACHE, clear_tf
from kerasmagic.probes import nvml

from gpu_stand_ins import StandInNVML, use_nvml

pytestmark = pytest.mark.shell


class _CachingAllocator:
    """Blocks of dead tensors stay reserved; `empty_cache()` returns only the unused ones."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.reserved_bytes = 0

    def allocate(self, owner: object, nbytes: int) -> None:
        self.live[id(owner)] = nbytes
        self.reserved_bytes = max(self.reserved_bytes, sum(self.live.values()))

    def free(self, owner_id: int) -> None:
        self.live.pop(owner_id, None)

    def empty_cache(self) -> None:
        self.reserved_bytes = sum(self.live.values())


class _Tensor:
    def __init__(self, allocator: _CachingAllocator, nbytes: int) -> None:
        allocator.allocate(self, nbytes)
        self._allocator, self._key = allocator, id(self)

    def __del__(self) -> None:
        self._allocator.free(self._key)


def _starts_cuda():
    # torch.cuda.is_available() runs cuInit unless PYTORCH_NVML_BASED_CUDA_CHECK=1: a kernel that
    # did that can no longer fork isolation templates, so a clean must never ask it.
    raise AssertionError("the clean asked torch.cuda.is_available(), which can start CUDA")


#: What NVML counts for a torch process beyond its cache (H100 reading: context and libraries).
CUDA_CONTEXT_BYTES = 543162368


@pytest.fixture
def fake_torch(monkeypatch):
    allocator = _CachingAllocator()
    cuda = types.SimpleNamespace(is_available=_starts_cuda, is_initialized=lambda: True,
                                 empty_cache=allocator.empty_cache)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    use_nvml(monkeypatch, StandInNVML(process_bytes=lambda: CUDA_CONTEXT_BYTES + allocator.reserved_bytes))
    yield allocator
    monkeypatch.setattr(nvml, "_init_state", None)


def test_a_model_freed_only_by_the_collection_gives_its_gpu_memory_back(shell, fake_torch):
    # A model in a reference cycle (as Keras layers and their trackers are): `del` leaves it to gc.
    model = types.SimpleNamespace(weights=_Tensor(fake_torch, 900 * 2**20))
    model.me = model
    del model
    assert fake_torch.reserved_bytes == 900 * 2**20 and fake_torch.live, "precondition: only gc frees it"
    report = clear_tf(shell=shell)
    assert not fake_torch.live, "the collection freed the model's tensor"
    assert fake_torch.reserved_bytes == 0, "empty_cache() ran before the collection: the blocks stayed reserved"
    names = [step.name for step in report.steps]
    assert names.index("garbage collection") < names.index(STEP_EMPTY_TORCH_CACHE)
    (step,) = [s for s in report.steps if s.name == STEP_EMPTY_TORCH_CACHE]
    assert step.detail == "torch.cuda.empty_cache() (cached CUDA blocks)" and not step.skipped


def test_the_report_shows_what_each_step_and_the_whole_clean_gave_back_to_the_gpu(shell, fake_torch):
    tensor = _Tensor(fake_torch, 2**30)
    del tensor  # freed at once, its 1 GiB block stays cached (reserved) until empty_cache()
    report = clear_tf(shell=shell)
    (step,) = [s for s in report.steps if s.name == STEP_EMPTY_TORCH_CACHE]
    assert step.gpu_freed_bytes == 2**30
    assert all(s.gpu_freed_bytes == 0 for s in report.steps if s is not step)
    assert report.gpu_freed_bytes == 2**30
    assert (report.gpu_before_bytes, report.gpu_after_bytes) == (CUDA_CONTEXT_BYTES + 2**30, CUDA_CONTEXT_BYTES)
    wire = report.to_dict()
    assert (wire["gpu_process_before_bytes"], wire["gpu_freed_bytes"]) == (CUDA_CONTEXT_BYTES + 2**30, 2**30)
    assert wire["steps"][[s.name for s in report.steps].index(STEP_EMPTY_TORCH_CACHE)]["gpu_freed_bytes"] == 2**30
    text = str(report)
    assert "GPU -1.00 GiB (1.51 GiB → 518 MiB, NVML)" in text.splitlines()[0]
    assert "torch.cuda.empty_cache() (cached CUDA blocks); GPU -1.00 GiB" in text
    assert "GPU -1.00 GiB" in report.summary().splitlines()[0]


def test_fresh_model_shows_the_gpu_its_clean_gave_back(shell, fake_torch):
    tensor = _Tensor(fake_torch, 2**30)
    del tensor
    shell.run_cell("%%fresh_model -q --as fresh_result\npass", store_history=True)
    result = shell.user_ns.pop("fresh_result")
    assert result.clean.gpu_freed_bytes == 2**30
    assert "GPU freed" in str(result) and "-1.00 GiB" in str(result)


def test_without_a_gpu_view_the_report_claims_no_gpu_figure(shell, monkeypatch):
    monkeypatch.setattr(nvml, "_init_state", None)  # the real probe: no NVIDIA driver here
    report = clear_tf(shell=shell)
    assert report.gpu_freed_bytes is None and all(s.gpu_freed_bytes is None for s in report.steps)
    assert "GPU" not in str(report).splitlines()[0]


def test_without_torch_the_step_says_so(shell, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    report = clear_tf(shell=shell)
    (step,) = [s for s in report.steps if s.name == STEP_EMPTY_TORCH_CACHE]
    assert step.skipped == "torch not imported"


def test_a_kernel_that_never_used_cuda_is_not_made_to(shell, monkeypatch):
    cuda = types.SimpleNamespace(is_available=_starts_cuda, is_initialized=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    report = clear_tf(shell=shell)
    (step,) = [s for s in report.steps if s.name == STEP_EMPTY_TORCH_CACHE]
    assert step.skipped == "torch: CUDA not in use, no cached blocks to return"


def test_a_failing_nvml_read_costs_the_gpu_figure_not_the_clean(shell, monkeypatch):
    def lost(*_):
        raise RuntimeError("GPU is lost")

    monkeypatch.setattr(nvml, "devices", lost)
    report = clear_tf(shell=shell)
    assert report.gpu_freed_bytes is None and report.steps[-1].name == "malloc_trim"

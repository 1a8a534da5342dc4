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


@pytest.fixture
def fake_torch(monkeypatch):
    allocator = _CachingAllocator()
    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 empty_cache=allocator.empty_cache)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return allocator


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


def test_without_torch_the_step_says_so(shell, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    report = clear_tf(shell=shell)
    (step,) = [s for s in report.steps if s.name == STEP_EMPTY_TORCH_CACHE]
    assert step.skipped == "torch not imported"

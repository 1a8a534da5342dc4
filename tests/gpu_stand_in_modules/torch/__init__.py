"""A stand-in ``torch`` for isolated jobs where there is no GPU (and no torch wheel): its CUDA
caching allocator's counters, and tensors on ``cuda:0`` that travel back into the kernel.

A worker gets it through ``env={"PYTHONPATH": <this folder>}``; ``pynvml.py`` beside it makes
NVML's "this process" follow this allocator, as NVML counted a torch process on an H100: the
CUDA context (``STAND_IN_CUDA_CONTEXT_BYTES``) plus what the allocator reserved. A kernel test
loads this same file as ``sys.modules["torch"]``, so a tensor pickled in the worker is rebuilt
here by the same class, on the kernel's own stand-in GPU.
"""

from __future__ import annotations

#: torch's caching allocator reserves large blocks in segments of this size.
SEGMENT_BYTES = 2 * 2**20


class _Cuda:
    """``torch.cuda``'s memory counters: peaks since the process started or the last reset."""

    def __init__(self) -> None:
        self.started = False
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def is_initialized(self) -> bool:
        return self.started

    def is_available(self) -> bool:
        # The real one can run cuInit; kerasmagic must never ask it.
        raise AssertionError("torch.cuda.is_available() was asked: it can start CUDA")

    def device_count(self) -> int:
        assert self.started, "a device query before CUDA started would start it"
        return 1

    def memory_allocated(self, index: int = 0) -> int:
        return self.allocated

    def memory_reserved(self, index: int = 0) -> int:
        return self.reserved

    def max_memory_allocated(self, index: int = 0) -> int:
        return self.peak_allocated

    def max_memory_reserved(self, index: int = 0) -> int:
        return self.peak_reserved

    def reset_peak_memory_stats(self, index: int = 0) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def empty_cache(self) -> None:
        self.reserved = -(-self.allocated // SEGMENT_BYTES) * SEGMENT_BYTES

    def allocate(self, nbytes: int) -> None:
        self.started = True
        self.allocated += nbytes
        # Freed blocks stay reserved (cached) for reuse: reserved only grows until empty_cache().
        self.reserved = max(self.reserved, -(-self.allocated // SEGMENT_BYTES) * SEGMENT_BYTES)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes


cuda = _Cuda()


class Tensor:
    """``nbytes`` of uint8 on ``cuda:0``; unpickling allocates it again, as loading onto a GPU does."""

    def __init__(self, nbytes: int) -> None:
        cuda.allocate(nbytes)
        self._nbytes = nbytes
        self.device = "cuda:0"

    def nelement(self) -> int:
        return self._nbytes

    def element_size(self) -> int:
        return 1

    def __reduce__(self):
        return Tensor, (self._nbytes,)

    def __del__(self) -> None:
        cuda.free(self._nbytes)


def empty(nbytes: int) -> Tensor:
    """A tensor of ``nbytes`` bytes on the GPU."""
    return Tensor(nbytes)

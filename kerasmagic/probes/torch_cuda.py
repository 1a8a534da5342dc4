"""torch's CUDA caching allocator, read only where the user's torch has already started CUDA.

torch keeps the blocks of freed tensors reserved for reuse: ``memory_reserved()`` minus
``memory_allocated()`` is memory this process holds on the GPU and uses for nothing until
``torch.cuda.empty_cache()`` hands it back (``%clear_tf`` does). What NVML counts for the
process beyond ``memory_reserved()`` is the CUDA context and the libraries' own buffers
(cuBLAS, cuDNN workspaces): on an H100, 518 MiB, exactly what NVML read after empty_cache().
"""

from __future__ import annotations

import sys
from typing import Any

from .availability import Unavailable, guarded

__all__ = ['allocator_stats', 'peaks', 'started_cuda', 'snapshot']


def started_cuda() -> Any:
    """``torch.cuda`` where the user's torch has already initialised CUDA, else None.

    The one question everything that touches torch's GPU side asks first: ``is_initialized()``
    starts nothing, while ``is_available()``, ``device_count()`` or ``memory_allocated()`` in a
    process that never used CUDA can run cuInit, and a process that did can no longer fork
    isolation templates.

    Example:
        >>> started_cuda() is None     # torch not imported
        True
    """
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    return cuda if cuda is not None and cuda.is_initialized() else None


def allocator_stats(*, reserved_peak: bool = False) -> dict[str, dict[str, int]] | Unavailable:
    """Per CUDA device: allocated, reserved, peak allocated and held-unused bytes, and with
    ``reserved_peak=True`` the peak reserved too.

    Device names are torch's (``cuda:0`` is the first device ``CUDA_VISIBLE_DEVICES``
    lets the process see, not NVML's GPU 0). The peaks count since the process started or
    since the last ``reset_peak_memory_stats()``. The reserved peak is read only for the
    isolated report, which shows it: the live protocol's ``torch`` (docs/reference/protocol.md, 1.4),
    sampled 4 times a second, and ``%tf_mem``'s snapshot carry the four other fields.

    Example:
        >>> allocator_stats()          # torch not imported
        Unavailable(reason='not_imported', detail='torch is not imported in this process')
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return Unavailable("not_imported", "torch is not imported in this process")
    cuda = started_cuda()
    if cuda is None:
        return Unavailable("not_started", "torch has not initialised CUDA in this process")
    stats = {}
    for index in range(cuda.device_count()):
        allocated, reserved = int(cuda.memory_allocated(index)), int(cuda.memory_reserved(index))
        stats[f"cuda:{index}"] = {
            "allocated_bytes": allocated,
            "reserved_bytes": reserved,
            "peak_allocated_bytes": int(cuda.max_memory_allocated(index)),
            "held_unused_bytes": max(reserved - allocated, 0),
        }
        if reserved_peak:
            # The most the caching allocator held on the GPU; NVML's figure for the process
            # adds the CUDA context and the libraries' buffers to it.
            stats[f"cuda:{index}"]["peak_reserved_bytes"] = int(cuda.max_memory_reserved(index))
    return stats


def peaks() -> dict[str, dict[str, int]] | Unavailable:
    """Per CUDA device: the most torch has had allocated and reserved (``allocator_stats()``'s peaks).

    Example:
        >>> peaks()                    # torch not imported
        Unavailable(reason='not_imported', detail='torch is not imported in this process')
    """
    stats = allocator_stats(reserved_peak=True)
    if isinstance(stats, Unavailable):
        return stats
    return {device: {"peak_allocated_bytes": figures["peak_allocated_bytes"],
                     "peak_reserved_bytes": figures["peak_reserved_bytes"]} for device, figures in stats.items()}


def snapshot() -> dict[str, Any]:
    """torch's allocator facts as JSON-able values; starts nothing.

    Example:
        >>> snapshot()["allocator"]
        Unavailable(reason='not_imported', detail='torch is not imported in this process')
    """
    return {"allocator": guarded(allocator_stats, "reading torch's CUDA allocator")}

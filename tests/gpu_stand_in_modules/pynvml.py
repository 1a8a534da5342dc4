"""A stand-in ``pynvml`` for isolated jobs: one GPU, whose only process is this one, using the
CUDA context plus what the stand-in torch beside it has reserved (nothing before CUDA starts).
The slice of the API is that of tests/gpu_stand_ins.py's ``StandInNVML``, which does the work."""

from __future__ import annotations

import os
import sys
from typing import Any

from gpu_stand_ins import StandInNVML


def _process_bytes() -> int:
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return 0
    return int(os.environ["STAND_IN_CUDA_CONTEXT_BYTES"]) + cuda.memory_reserved()


_nvml = StandInNVML(process_bytes=_process_bytes)
NVMLError = StandInNVML.NVMLError


def __getattr__(name: str) -> Any:
    return getattr(_nvml, name)

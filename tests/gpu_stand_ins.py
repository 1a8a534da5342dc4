"""A GPU as NVML reports it, for tests on machines without one (the edge we cannot have here).

The numbers come from the test: readings recorded on a real GPU, or a stand-in framework's
allocator, so that what NVML says follows what the framework does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

__all__ = ["StandInNVML", "use_nvml"]


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

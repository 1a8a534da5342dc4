"""What the GPU sessions share: a real InteractiveShell, cells run as a user runs them, NVML read directly.

A session is a script run in its own interpreter (``python tests/gpu/session_torch.py``): Keras
picks its backend once per process, from ``KERAS_BACKEND`` set before it is imported. Each
scenario records what it saw into a dict; a scenario that raises records its traceback instead,
so one failure fails its own tests and the others still report. The last line printed is
``SEEN {json}``, which tests/gpu/conftest.py reads.

NVML is read here with pynvml itself, not through kerasmagic's probe, so that the reports'
figures are checked against a reading the package did not make.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

SEEN: dict[str, Any] = {}
MiB = 2**20
GiB = 2**30


#: The sessions' first cell after their imports: data and a model of any width, the same on
#: every backend so that their figures compare.
MODEL_CELL = """
MiB = 2**20
x = np.random.default_rng(0).random((2048, 256), dtype=np.float32)
y = (x.sum(axis=1) > 128).astype("int32")
def make_model(width):
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(width, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
"""


def start_shell() -> Any:
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    cell(shell, "%load_ext kerasmagic")
    return shell


def cell(shell: Any, source: str) -> Any:
    """Run ``source`` as a user would (history on, so Out[] and _ fill); raise on any error."""
    result = shell.run_cell(source, store_history=True)
    if not result.success:
        raise RuntimeError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}\n{source}")
    return result.result


def scenario(name: str) -> Callable[[Callable[[], dict[str, Any]]], None]:
    """Run the decorated function now and record what it returns (or its traceback) under ``name``."""

    def run(function: Callable[[], dict[str, Any]]) -> None:
        try:
            SEEN[name] = function()
        except Exception:  # noqa: BLE001 - the traceback is the scenario's result; the next one still runs
            SEEN[name] = {"error": traceback.format_exc()}

    return run


def _pynvml() -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def gpu_count() -> int:
    return int(_pynvml().nvmlDeviceGetCount())


def nvml_processes() -> dict[int, int]:
    """Every compute process on every GPU: pid → bytes NVML counts for it (summed over GPUs)."""
    pynvml = _pynvml()
    found: dict[int, int] = {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            found[process.pid] = found.get(process.pid, 0) + int(process.usedGpuMemory or 0)
    return found


def nvml_this_process() -> int | None:
    """What NVML counts for this process; None where it lists no such pid (a container's host pids)."""
    return nvml_processes().get(os.getpid())


def nvml_device(index: int = 0) -> dict[str, int]:
    pynvml = _pynvml()
    memory = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
    return {"used_bytes": int(memory.used), "total_bytes": int(memory.total)}


def wait_until_gone_from_nvml(pid: int, deadline_s: float = 60.0) -> bool:
    """Whether ``pid`` left NVML's process list within ``deadline_s`` (a bound, not a measurement).

    A process's GPU memory goes back when the driver tears its context down, which follows
    its exit by a moment; polling avoids asserting on that moment.
    """
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if pid not in nvml_processes():
            return True
        time.sleep(0.1)
    return pid not in nvml_processes()


def finish() -> None:
    from kerasmagic.probes.availability import to_jsonable

    SEEN["python"] = sys.version.split()[0]
    print("SEEN " + json.dumps(to_jsonable(SEEN), default=str), flush=True)

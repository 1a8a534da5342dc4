"""The GPU suite's first run on an NVIDIA H200 (benchmarks/results/h200-2026-11-28), and what the
suite expects of the reports made from such readings.

One definition for both sides: tests/gpu asserts these expectations on hardware, and the CPU-side
tests feed the recorded readings to the code and assert the same ones, so that a suite whose
expectation drifts from the code fails here first, not on the next (rare) GPU machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["H200", "JAX_PREALLOCATED_NOTE", "h200_session"]

#: The run's readings, as benchmarks/gpu_device_run.sh wrote them (README.md there).
H200 = Path(__file__).parents[1] / "benchmarks/results/h200-2026-11-28"

#: `%tf_mem`'s note on a JAX pool that default preallocation made (the pool is JAX's whole limit and
#: no variable asks otherwise): the why, then the remedy with the restart (test_jax_gpu.py).
JAX_PREALLOCATED_NOTE = re.compile(
    r"JAX holds [\d.]+ (MiB|GiB) of gpu:0 that it does not use "
    r"\(preallocated when JAX started: the pool is its whole limit\)\. "
    r"XLA_PYTHON_CLIENT_PREALLOCATE=false .*restart the kernel with it set, or run the work with "
    r"%%fresh_model --isolate\.")


def h200_session(name: str) -> dict[str, Any]:
    """One session's record of that run, e.g. ``h200_session("jax")`` (gpu_session_jax.json)."""
    return json.loads((H200 / f"gpu_session_{name}.json").read_text())

"""The `gpu` suite's one fixture: what this machine has, asked once per test session."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_suite import probe


@pytest.fixture(scope="session")
def gpu_facts() -> dict[str, Any]:
    """NVML's GPUs, torch's and JAX's CUDA, Keras and IPython, asked in a child process (gpu_suite.PROBE)."""
    return probe()

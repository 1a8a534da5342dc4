"""Stand-in ``torch`` and ``pynvml`` modules that reach an isolated worker, and what a test
needs to use them (the worker is another process: monkeypatching the kernel cannot reach it).

This folder goes on the worker's ``PYTHONPATH`` (:func:`worker_env`): the job's ``import
torch`` and kerasmagic's lazy ``import pynvml`` there find the stand-ins. The kernel gets the
same ``torch`` file as ``sys.modules["torch"]`` and an NVML that follows it
(:func:`use_in_kernel`), so a tensor that comes back lands on the kernel's stand-in GPU.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from kerasmagic.probes.availability import Unavailable

from gpu_stand_ins import use_nvml

__all__ = ["FOLDER", "use_in_kernel", "without_bystanders", "worker_env"]

FOLDER = Path(__file__).parent


def worker_env(context_bytes: int) -> dict[str, str]:
    """``env=`` for ``run_isolated``: the stand-ins importable, NVML counting ``context_bytes``
    of CUDA context once torch started CUDA (``gpu_stand_ins`` importable for ``pynvml``)."""
    path = os.pathsep.join([str(FOLDER), str(FOLDER.parent)])
    return {"PYTHONPATH": path, "STAND_IN_CUDA_CONTEXT_BYTES": str(context_bytes)}


def _load(name: str, path: Path, **kwargs: Any) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path, **kwargs)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def use_in_kernel(monkeypatch: Any, context_bytes: int) -> ModuleType:
    """This process's ``torch`` becomes the stand-in (CUDA not started) and NVML follows it; returns torch."""
    torch = _load("torch", FOLDER / "torch" / "__init__.py", submodule_search_locations=[str(FOLDER / "torch")])
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setenv("STAND_IN_CUDA_CONTEXT_BYTES", str(context_bytes))
    use_nvml(monkeypatch, _load("_stand_in_pynvml", FOLDER / "pynvml.py")._nvml)
    return torch


def without_bystanders(figures: dict[str, Any]) -> dict[str, Any]:
    """A report's kernel GPU figures less TF's and JAX's entries that have no number.

    Earlier tests in this process may have imported them (Keras imports JAX where it is
    installed) without starting them, and the report rightly says so; a number from either
    would stay and fail the comparison.
    """
    return {view: value for view, value in figures.items()
            if not (view in ("TF", "JAX") and isinstance(value, Unavailable))}

"""A real out-of-memory error on a real NVIDIA GPU, through a real InteractiveShell: what the
explanation printed below the error says, next to torch's, JAX's and NVML's own readings.

Run by tests/gpu/test_oom_gpu.py as ``python tests/gpu/session_oom.py`` with
``KERASMAGIC_OOM_FRAMEWORK`` set to ``torch`` or ``jax`` (one framework per process, as a
notebook kernel has). A cell keeps 1 GiB on the GPU in ``kept``; the next asks for twice the
GPU's memory and fails.
"""

from __future__ import annotations

import contextlib
import io
import os

from session_common import cell, finish, nvml_this_process, scenario, start_shell

FRAMEWORK = os.environ["KERASMAGIC_OOM_FRAMEWORK"]

shell = start_shell()
ns = shell.user_ns


def run_failing(source: str) -> dict:
    """Run a cell that fails; what it printed (the traceback, then ours) and its error."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = shell.run_cell(source, store_history=True)
    error = result.error_in_exec
    return {"text": printed.getvalue(), "execution_count": result.execution_count,
            "error_class": type(error).__name__, "error_module": type(error).__module__,
            "error_message": str(error).splitlines()[0] if error is not None else None}


@scenario("torch")
def _torch():
    if FRAMEWORK != "torch":
        return {"skipped": True}
    cell(shell, "import torch\nkept = torch.empty(2**30, dtype=torch.uint8, device='cuda')")
    torch = ns["torch"]
    total = torch.cuda.get_device_properties(0).total_memory
    seen = run_failing(f"huge = torch.empty({2 * total}, dtype=torch.uint8, device='cuda')")
    seen.update(allocated=int(torch.cuda.memory_allocated(0)), reserved=int(torch.cuda.memory_reserved(0)),
                total=int(total), nvml=nvml_this_process())
    return seen


@scenario("jax")
def _jax():
    if FRAMEWORK != "jax":
        return {"skipped": True}
    cell(shell, "import jax, jax.numpy as jnp\nkept = jnp.ones((2**28,), jnp.float32).block_until_ready()")
    device = ns["jax"].devices("gpu")[0]
    seen = run_failing("huge = jnp.ones((2**38,), jnp.float32).block_until_ready()")
    stats = device.memory_stats()
    seen.update(in_use=int(stats["bytes_in_use"]), pool=int(stats.get("pool_bytes") or 0),
                limit=int(stats["bytes_limit"]), device=f"{device.platform}:{device.id}", nvml=nvml_this_process())
    return seen


finish()

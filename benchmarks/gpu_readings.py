"""Record real allocator and NVML readings on a GPU machine, to test GPU reports without one.

Run where an NVIDIA GPU, torch and JAX exist: ``python benchmarks/gpu_readings.py OUT.json``.
Each scenario runs in a fresh interpreter and records, at named moments, what NVML says
(device totals and this process's use) next to what the framework's allocator says:

- torch: after 2 GiB allocated, after freeing half (cache kept), after ``empty_cache()``;
- JAX with its default preallocation, and with ``XLA_PYTHON_CLIENT_PREALLOCATE=false``;
- whether this process is in its own PID namespace (NVML lists host PIDs in containers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = r'''
import json, os, sys
def nvml_now():
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.nvmlDeviceGetMemoryInfo(handle)
    procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    return {"used_bytes": info.used, "total_bytes": info.total, "this_process_bytes": procs.get(os.getpid()),
            "processes": len(procs)}
def nspid():
    for line in open("/proc/self/status"):
        if line.startswith("NSpid:"):
            return line.split()[1:]
moments = []
scenario = sys.argv[1]
if scenario == "torch":
    import torch
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    def torch_now():
        return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved()}
    moments.append({"moment": "2 GiB allocated", "nvml": nvml_now(), "torch": torch_now()})
    b = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); del b
    moments.append({"moment": "1 GiB more allocated and freed (cached)", "nvml": nvml_now(), "torch": torch_now()})
    del a
    moments.append({"moment": "everything freed, cache kept", "nvml": nvml_now(), "torch": torch_now()})
    torch.cuda.empty_cache()
    moments.append({"moment": "after empty_cache()", "nvml": nvml_now(), "torch": torch_now()})
else:
    import jax, jax.numpy as jnp
    x = jnp.ones((512, 1 << 20), dtype=jnp.uint8)  # 512 MiB
    x.block_until_ready()
    stats = {k: v for k, v in (jax.devices()[0].memory_stats() or {}).items() if isinstance(v, int)}
    moments.append({"moment": "512 MiB array", "nvml": nvml_now(), "jax": stats,
                    "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")})
print(json.dumps({"nspid": nspid(), "moments": moments}))
'''


def main() -> None:
    readings = {}
    for name, scenario, env in (("torch", "torch", {}),
                                ("jax default preallocation", "jax", {}),
                                ("jax preallocate=false", "jax", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})):
        done = subprocess.run([sys.executable, "-c", PROBE, scenario], capture_output=True, text=True, timeout=300,
                              env={**os.environ, **env})
        try:
            readings[name] = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            readings[name] = {"error": done.stderr[-3000:]}
    text = json.dumps(readings, indent=1)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()

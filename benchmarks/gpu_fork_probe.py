"""What importing torch, Keras (torch backend) and JAX does to a process, seen from /proc.

Run on a GPU machine: ``python benchmarks/gpu_fork_probe.py OUT.json``. It answers what the
template's fork-safety check relies on: is libcuda mapped, which threads exist, and what
``torch.cuda.is_available()`` changes with and without ``PYTORCH_NVML_BASED_CUDA_CHECK``.
Each stage runs in a fresh interpreter so that stages do not see each other's state.
"""

from __future__ import annotations

import json
import subprocess
import sys

STAGE = r"""
import json, os, sys
def facts(label):
    from kerasmagic.isolation.fork_safety import thread_states, framework_problems, ForkSafety, cuda_driver_state
    maps = open('/proc/self/maps').read()
    return {"label": label, "libcuda_mapped": "libcuda.so" in maps,
            "threads": sorted({name for name, _ in thread_states().values()}),
            "thread_count": len(thread_states()), "framework_problems": framework_problems(),
            "cuda_driver": cuda_driver_state(),
            "fork_problem": ForkSafety().problem()}
out = []
stage = sys.argv[1]
if stage == "keras-torch":
    os.environ["KERAS_BACKEND"] = "torch"
    import torch, keras
    out.append(facts("import torch, keras (torch backend)"))
    import jax
    out.append(facts("+ import jax"))
    torch.cuda.is_available()
    out.append(facts("+ torch.cuda.is_available()"))
    torch.zeros(1, device="cuda")
    out.append(facts("+ a CUDA tensor"))
elif stage == "keras-jax":
    os.environ["KERAS_BACKEND"] = "jax"
    import jax, keras
    out.append(facts("import jax, keras (jax backend)"))
    jax.devices()
    out.append(facts("+ jax.devices()"))
print(json.dumps(out))
"""


def main() -> None:
    results = {}
    for stage, nvml_check in (("keras-torch", "1"), ("keras-torch", None), ("keras-jax", "1")):
        import os

        env = dict(os.environ)
        env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        if nvml_check:
            env["PYTORCH_NVML_BASED_CUDA_CHECK"] = nvml_check
        done = subprocess.run([sys.executable, "-c", STAGE, stage], capture_output=True, text=True, env=env,
                              timeout=300)
        key = f"{stage} NVML_CHECK={nvml_check}"
        try:
            results[key] = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            results[key] = {"error": done.stderr[-3000:]}
    text = json.dumps(results, indent=1)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()

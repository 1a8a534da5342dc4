"""Isolation on a real GPU: forked children use CUDA, train, and give every byte back.

Run on a machine with an NVIDIA GPU, torch, JAX and Keras 3 (no TensorFlow needed):
``python benchmarks/gpu_isolation_check.py OUT_DIR``. It writes ``OUT_DIR/gpu_report.json``
(every figure below) and ``OUT_DIR/gpu_readings.json`` (raw NVML / torch / JAX allocator
readings, kept as test fixtures), and prints a summary. It exits non-zero when a check fails.

What it checks, each in a fresh "kernel" interpreter so that backends do not mix:
- Keras on torch: back-to-back small GPU fits, in-process (first and second) vs isolated;
  each isolated job forked from the template, on ``cuda``, and gone from NVML's process list
  after it ends; ``isolated_map(..., gpu="round-robin")`` sets each child's device.
- Keras on JAX: an isolated fit forked from the template runs on the GPU.
- A template whose CUDA driver was initialised (by a ``sitecustomize``) refuses to fork;
  the job runs in a fresh interpreter and its report says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

TORCH_KERNEL = r'''
import json, os, sys, time
os.environ["KERAS_BACKEND"] = "torch"
import numpy as np, torch, keras
from kerasmagic.isolation import isolated_map, run_isolated
from kerasmagic.probes import nvml

x = np.random.rand(4096, 256).astype("float32"); y = np.random.randint(0, 10, 4096)

def fit(seed):
    import os, time, torch, keras
    started = time.perf_counter()
    keras.utils.set_random_seed(int(seed))
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, batch_size=256, verbose=0)
    return {"device": str(model.weights[0].value.device), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device_count": torch.cuda.device_count(), "fit_s": time.perf_counter() - started,
            "torch_peak": torch.cuda.max_memory_allocated(), "torch_reserved": torch.cuda.memory_reserved(),
            "pid": os.getpid()}

report = {"in_process": []}
for i in range(2):
    started = time.perf_counter(); value = fit(i); report["in_process"].append(time.perf_counter() - started)
report["in_process_device"] = value["device"]
from kerasmagic.isolation.pool import default_pool
default_pool().prestart(); assert default_pool().wait_until_warm(timeout=300)
jobs = []
for i in range(5):
    result = run_isolated(fit, args=(i,), timeout=300)
    time.sleep(0.2)
    value = result.value
    devices = nvml.devices()
    still = []
    if isinstance(devices, list):
        import pynvml
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            still += [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    jobs.append({"wall_s": result.wall_s, "run_s": result.run_s, "wait_s": result.wait_s, "state": result.worker_state,
                 "origin": result.origin, "note": result.worker_note, "start_latency_s": result.start_latency_s,
                 "gpu_peak": result.child_gpu_peak, "pss": result.child_pss_bytes, "value": value,
                 "child_in_nvml_after": value["pid"] in still})
report["isolated"] = jobs
mapped = isolated_map(fit, range(4), workers=2, gpu="round-robin", timeout=300, progress=False)
report["map"] = [{"visible": v["visible"], "device": v["device"], "count": v["device_count"]} for v in mapped]
report["map_states"] = [j.worker_state for j in mapped.jobs]
report["template_threads"] = mapped.jobs[0].template_threads
report["kernel_cuda_initialised"] = torch.cuda.is_initialized()
print(json.dumps(report))
'''

JAX_KERNEL = r'''
import json, os, time
os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
import numpy as np, jax, keras
from kerasmagic.isolation import run_isolated
x = np.random.rand(2048, 128).astype("float32"); y = np.random.randint(0, 10, 2048)
def fit():
    import os, time, jax, keras
    started = time.perf_counter()
    model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, batch_size=256, verbose=0)
    stats = jax.devices()[0].memory_stats() or {}
    return {"platform": jax.devices()[0].platform, "fit_s": time.perf_counter() - started,
            "memory_stats": {k: v for k, v in stats.items() if isinstance(v, int)}}
out = []
for _ in range(3):
    result = run_isolated(fit, timeout=300)
    out.append({"wall_s": result.wall_s, "state": result.worker_state, "origin": result.origin,
                "note": result.worker_note, "value": result.value})
print(json.dumps(out))
'''

REFUSAL_KERNEL = r'''
import json, os, sys
os.environ["KERAS_BACKEND"] = "torch"
import torch, keras
from kerasmagic.isolation import run_isolated
code = "import torch\nx = torch.ones(3, device='cuda').sum().item()\ndevice = torch.cuda.get_device_name(0)"
path = os.pathsep.join(p for p in (sys.argv[1], os.environ.get("PYTHONPATH", "")) if p)
result = run_isolated(code, env={"PYTHONPATH": path}, timeout=300)
print(json.dumps({"state": result.worker_state, "origin": result.origin, "note": result.worker_note,
                  "x": result.outputs["x"], "device": result.outputs["device"]}))
'''

READINGS_KERNEL = r'''
import json, os
os.environ["KERAS_BACKEND"] = "torch"
import torch
from kerasmagic.probes import nvml
a = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
b = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"); del b
stats = {k: v for k, v in torch.cuda.memory_stats().items() if k in (
    "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current", "reserved_bytes.all.peak")}
readings = {"torch": {"memory_allocated": torch.cuda.memory_allocated(),
                      "memory_reserved": torch.cuda.memory_reserved(),
                      "max_memory_allocated": torch.cuda.max_memory_allocated(), "stats": stats},
            "nvml": nvml.snapshot()}
import jax
readings["jax_preallocate_default"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
print(json.dumps(readings, default=str))
'''


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=580,
                          env={**os.environ, **(env or {})})
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": done.stderr[-4000:], "stdout": done.stdout[-2000:]}


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    report: dict = {}
    report["torch"] = _run(TORCH_KERNEL)
    report["jax"] = _run(JAX_KERNEL)
    with tempfile.TemporaryDirectory() as site:
        with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
            handle.write(textwrap.dedent("""
                import os
                if os.environ.get("KERAS_BACKEND") == "torch":
                    import ctypes
                    ctypes.CDLL("libcuda.so.1").cuInit(0)   # what an eager framework import would do
            """))
        report["refusal"] = _run(REFUSAL_KERNEL, site)
    readings = _run(READINGS_KERNEL)
    with open(os.path.join(out_dir, "gpu_report.json"), "w") as handle:
        json.dump(report, handle, indent=1, default=str)
    with open(os.path.join(out_dir, "gpu_readings.json"), "w") as handle:
        json.dump(readings, handle, indent=1, default=str)
    print(json.dumps(report, indent=1, default=str)[:20000])

    failures = []
    torch_report = report["torch"]
    if "error" in torch_report:
        failures.append("torch kernel failed")
    else:
        first = torch_report["in_process"][0]
        for job in torch_report["isolated"]:
            if job["origin"] != "forked" or not job["value"]["device"].startswith("cuda"):
                failures.append(f"torch job not forked on cuda: {job}")
            if job["child_in_nvml_after"]:
                failures.append("a child still held GPU memory after it ended")
        slowest = max(job["wall_s"] for job in torch_report["isolated"][1:])
        print(f"torch: in-process first fit {first:.2f} s, second {torch_report['in_process'][1]:.2f} s; "
              f"isolated jobs {[round(j['wall_s'], 2) for j in torch_report['isolated']]} (target <= first + 1 s: "
              f"{'met' if slowest <= first + 1 else 'NOT met'})")
        if any(m["visible"] != "0" or not m["device"].startswith("cuda") for m in torch_report["map"]):
            failures.append(f"round-robin did not set the device: {torch_report['map']}")
    if "error" in report["jax"] or any(j["origin"] != "forked" or j["value"]["platform"] != "gpu"
                                       for j in report["jax"]):
        failures.append(f"jax: {report['jax']}")
    refusal = report["refusal"]
    if "error" in refusal or refusal["state"] != "fresh" or "CUDA driver" not in refusal["note"]:
        failures.append(f"refusal: {refusal}")
    print("FAILURES:" if failures else "all GPU checks passed", *failures, sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

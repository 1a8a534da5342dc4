"""Isolation's API on a real GPU with Keras on torch: forked children train on CUDA and give it all back.

Run by tests/gpu/test_isolation_gpu.py (``python tests/gpu/session_isolation.py``,
KERAS_BACKEND=torch); this interpreter plays the kernel. It was benchmarks/gpu_isolation_check.py,
a script run by hand on an H100; the wall times it printed are recorded here (``timings``) and
kept with the readings, not asserted (a shared GPU machine's times vary).
"""

from __future__ import annotations

import os
import tempfile
import time

os.environ["KERAS_BACKEND"] = "torch"  # before Keras is imported, as the kernel's first cell would

import keras
import numpy as np
import torch
from session_common import SEEN, finish, gpu_count, scenario, wait_until_gone_from_nvml

from kerasmagic.isolation import isolated_map, run_isolated
from kerasmagic.isolation.pool import default_pool

x = np.random.default_rng(0).random((4096, 256), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 4096)


def fit(seed):
    import os
    import time

    import torch

    started = time.perf_counter()
    keras.utils.set_random_seed(int(seed))
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, batch_size=256, verbose=0)
    return {"device": str(model.weights[0].value.device), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device_count": torch.cuda.device_count(), "fit_s": time.perf_counter() - started, "pid": os.getpid()}


SEEN["gpu_count"] = gpu_count()
SEEN["visible_env"] = os.environ.get("CUDA_VISIBLE_DEVICES")
timings: dict[str, list[float]] = {"in_process_s": [], "isolated_wall_s": [], "isolated_start_latency_s": []}
SEEN["timings"] = timings


@scenario("in_process")
def _in_process():
    for seed in range(2):
        started = time.perf_counter()
        value = fit(seed)
        timings["in_process_s"].append(time.perf_counter() - started)
    return {"device": value["device"]}


@scenario("isolated")
def _isolated():
    default_pool().prestart()
    warm = default_pool().wait_until_warm(timeout=300)
    jobs = []
    for seed in range(3):
        result = run_isolated(fit, args=(seed,), timeout=300)
        timings["isolated_wall_s"].append(result.wall_s)
        timings["isolated_start_latency_s"].append(result.start_latency_s)
        jobs.append({"state": result.worker_state, "origin": result.origin, "note": result.worker_note,
                     "device": result.value["device"], "pid": result.value["pid"],
                     "gone_from_nvml": wait_until_gone_from_nvml(result.value["pid"])})
    return {"template_warm": warm, "jobs": jobs}


@scenario("round_robin")
def _round_robin():
    mapped = isolated_map(fit, range(4), workers=2, gpu="round-robin", timeout=300, progress=False)
    return {"values": [{"visible": v["visible"], "device": v["device"], "count": v["device_count"]} for v in mapped],
            "origins": [job.origin for job in mapped.jobs],
            "gone_from_nvml": [wait_until_gone_from_nvml(v["pid"]) for v in mapped]}


@scenario("refusal")
def _refusal():
    # A template whose CUDA driver is initialised (as an eager framework import would do) must
    # refuse to fork; the job then runs in a fresh interpreter and its report says why.
    site = tempfile.mkdtemp()
    with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
        handle.write("import ctypes, os\n"
                     "if os.environ.get('KERAS_BACKEND') == 'torch':\n"
                     "    ctypes.CDLL('libcuda.so.1').cuInit(0)\n")
    path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p)
    code = "import torch\nx = torch.ones(3, device='cuda').sum().item()\ndevice = torch.cuda.get_device_name(0)"
    result = run_isolated(code, env={"PYTHONPATH": path}, timeout=300)
    return {"state": result.worker_state, "origin": result.origin, "note": result.worker_note,
            "x": result.outputs.get("x"), "device": result.outputs.get("device")}


SEEN["kernel_cuda_initialised"] = torch.cuda.is_initialized()
finish()

"""The issue-32 table through the real pool on a GPU: cold fork, warm spare and in-process, on
the backend KERAS_BACKEND names (torch or jax), and GPU memory given back at each job's end.

Run by tests/gpu/test_spare_gpu.py (``python tests/gpu/session_spare.py``), once per backend;
this interpreter plays the kernel. The job is the table's: a 3-layer MLP (64-512-512-10, 8,192
rows, 3 epochs, batch 256), timed inside the job from its start to the end of its fit. Times are
recorded (``table``), printed by benchmarks/gpu_device_run.sh and not asserted (a shared GPU
machine's times vary); what is asserted is where each job ran and that it left NVML.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a spare must not hold 75 % of the card
import keras
import numpy as np
from session_common import SEEN, finish, scenario, wait_until_gone_from_nvml

from kerasmagic.isolation import run_isolated
from kerasmagic.isolation.pool import configure_pool, default_pool

JOBS = 3
x = np.random.default_rng(0).random((8192, 64), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 8192)


def fit(seed):
    import os
    import time

    started = time.perf_counter()
    keras.utils.set_random_seed(int(seed))
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=3, batch_size=256, verbose=0)
    return {"fit_s": time.perf_counter() - started, "pid": os.getpid(), "device": str(model.weights[0].value.device)
            if hasattr(model.weights[0].value, "device") else ""}


def _ready_spare(within: float = 120.0) -> dict | None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready = [s for s in default_pool().spare_states() if s["state"] == "ready"]
        if ready:
            return ready[0]
        time.sleep(0.05)
    return None


SEEN["backend"] = keras.backend.backend()
table: dict[str, list[float]] = {"cold_fork_s": [], "warm_spare_s": [], "in_process_s": []}
SEEN["table"] = table


@scenario("cold_fork")
def _cold():
    configure_pool(warm_spare=False)
    default_pool().prestart()
    default_pool().wait_until_warm(timeout=300)
    jobs = []
    for seed in range(JOBS):
        result = run_isolated(fit, args=(seed,), timeout=300)
        table["cold_fork_s"].append(result.value["fit_s"])
        jobs.append({"spare": result.spare, "gone_from_nvml": wait_until_gone_from_nvml(result.value["pid"])})
    return {"jobs": jobs}


@scenario("warm_spare")
def _warm():
    configure_pool(warm_spare="auto")  # a GPU is visible: on by the default rule
    jobs, spares = [], []
    run_isolated(fit, args=(0,), timeout=300)  # asks the first spare
    for seed in range(JOBS):
        spares.append(_ready_spare())
        result = run_isolated(fit, args=(seed,), timeout=300)
        table["warm_spare_s"].append(result.value["fit_s"])
        jobs.append({"spare": result.spare, "warm_up_s": result.spare_warm_up_s, "device": result.value["device"],
                     "gone_from_nvml": wait_until_gone_from_nvml(result.value["pid"])})
    default_pool().end_spares()
    gone = [wait_until_gone_from_nvml(s["pid"]) for s in spares if s]
    return {"rule": default_pool().spares_on(), "jobs": jobs, "spares": spares, "spares_gone_from_nvml": gone}


@scenario("in_process")
def _in_process():
    for seed in range(JOBS + 1):
        value = fit(seed)
        if seed:  # fits 2 and later, as the table's "in-process, warm"
            table["in_process_s"].append(value["fit_s"])
    return {}


finish()

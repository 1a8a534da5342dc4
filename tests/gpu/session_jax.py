"""Keras 3 on JAX on a real NVIDIA GPU, through a real InteractiveShell: what each magic reports.

Run by tests/gpu/test_jax_gpu.py (``python tests/gpu/session_jax.py``, KERAS_BACKEND=jax) with
JAX's default preallocation (75 % of the GPU at start), the case the report must explain.
Every scenario records the magic's own figures next to JAX's ``memory_stats()`` and NVML's,
read directly at the same moment. The scenarios build on each other, as a notebook's cells do.
"""

from __future__ import annotations

import os
import tempfile

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported, as in a notebook's first cell

from session_common import (
    MODEL_CELL,
    SEEN,
    cell,
    finish,
    nvml_device,
    nvml_processes,
    nvml_this_process,
    scenario,
    start_shell,
    wait_until_gone_from_nvml,
)

shell = start_shell()
ns = shell.user_ns
cell(shell, "import gc, os\nimport numpy as np, jax, jax.numpy as jnp, keras\n" + MODEL_CELL)
jax = ns["jax"]
SEEN["backend"] = cell(shell, "keras.backend.backend()")
SEEN["preallocate_variable"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")


def jax_now() -> dict[str, int]:
    stats = jax.local_devices()[0].memory_stats() or {}
    return {key: int(value) for key, value in stats.items() if isinstance(value, int)}


@scenario("tf_mem")
def _tf_mem():
    cell(shell, "arr = jnp.ones((512, MiB), dtype=jnp.uint8).block_until_ready()")
    snap = cell(shell, "%tf_mem -q -o")
    platform = jax.local_devices()[0].platform
    SEEN["versions"] = {"jax": jax.__version__, "keras": ns["keras"].__version__, "platform": platform}
    return {"report": snap.to_dict(), "text": str(snap), "jax": jax_now(), "nvml": nvml_this_process(),
            "device": nvml_device(0)}


@scenario("clear_tf")
def _clear_tf():
    before, nvml_before = jax_now(), nvml_this_process()
    report = cell(shell, "%clear_tf arr -q -o")
    return {"before": before, "nvml_before": nvml_before, "report": report.to_dict(), "text": str(report),
            "jax": jax_now(), "nvml": nvml_this_process()}


@scenario("cell_peak")
def _cell_peak():
    # JAX's peak cannot be reset: a cell reaches a new high only by going past the process's
    # peak so far, so the array is sized from that peak.
    before = jax_now()
    ns["scratch_bytes"] = before["peak_bytes_in_use"] + 256 * 2**20
    cell(shell, "%%tf_mem -q --as measured\n"
                "scratch = jnp.ones((scratch_bytes,), dtype=jnp.uint8).block_until_ready()\n"
                "inner_peak = jax.local_devices()[0].memory_stats()['peak_bytes_in_use']\n"
                "del scratch")
    cell(shell, "%%tf_mem -q --as small\nsmall_array = jnp.ones((MiB,), dtype=jnp.uint8).block_until_ready()")
    return {"before": before, "inner_peak": ns["inner_peak"], "report": ns["measured"].to_dict(),
            "text": str(ns["measured"]), "small_report": ns["small"].to_dict(), "jax": jax_now()}


@scenario("load_model")
def _load_model():
    ns["path"] = os.path.join(tempfile.mkdtemp(), "trained.keras")
    cell(shell, "trained = make_model(1024); trained.fit(x, y, epochs=1, batch_size=256, verbose=0)\n"
                "trained.save(path); del trained")
    cell(shell, "%clear_tf -q")
    before = jax_now()
    cell(shell, "%%tf_mem -q --as loaded_report\nloaded = keras.models.load_model(path)")
    measured = ns["loaded_report"]
    platforms = cell(shell, "sorted({d.platform for d in loaded.weights[0].value.devices()})")
    return {"before": before, "jax": jax_now(), "report": measured.to_dict(), "text": str(measured),
            "platforms": platforms}


@scenario("isolate")
def _isolate():
    cell(shell, "%clear_tf loaded -q")
    kernel_before = nvml_this_process()
    # The kernel's JAX already holds 75 % of the GPU: the worker asks for what it uses only,
    # the remedy the report gives (a variable JAX reads when its backend starts, in the worker).
    cell(shell, "%%fresh_model -q --isolate --env XLA_PYTHON_CLIENT_PREALLOCATE=false --as iso "
                "--out platform worker_pid worker_stats\n"
                "import os, numpy as np, jax, keras\n"
                "xs = np.random.default_rng(1).random((2048, 256), dtype=np.float32)\n"
                "ys = (xs.sum(axis=1) > 128).astype('int32')\n"
                "net = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048, activation='relu'),\n"
                "                        keras.layers.Dense(2)])\n"
                "net.compile(optimizer='adam', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                "net.fit(xs, ys, epochs=2, batch_size=256, verbose=0)\n"
                "platform = jax.local_devices()[0].platform\n"
                "worker_pid = os.getpid()\n"
                "worker_stats = {k: int(v) for k, v in (jax.local_devices()[0].memory_stats() or {}).items()\n"
                "                if isinstance(v, int)}")
    iso = ns["iso"]
    gone = wait_until_gone_from_nvml(ns["worker_pid"]) if isinstance(ns.get("worker_pid"), int) else None
    return {"report": iso.to_dict(), "text": str(iso), "platform": ns.get("platform"),
            "worker_pid": ns.get("worker_pid"), "worker_stats": ns.get("worker_stats"),
            "worker_gone_from_nvml": gone, "kernel_nvml_before": kernel_before,
            "kernel_nvml_after": nvml_this_process(), "nvml_pids_after": sorted(nvml_processes())}


finish()

"""Keras 3 on torch on a real NVIDIA GPU, through a real InteractiveShell: what each magic reports.

Run by tests/gpu/test_torch_gpu.py (``python tests/gpu/session_torch.py``, KERAS_BACKEND=torch).
Every scenario records the magic's own figures next to torch's and NVML's, read directly at the
same moment, so that the tests compare the report with the hardware and not with constants.
The scenarios build on each other in order, as cells of one notebook do.
"""

from __future__ import annotations

import os
import tempfile

os.environ["KERAS_BACKEND"] = "torch"  # before Keras is imported, as in a notebook's first cell

from session_common import (
    MODEL_CELL,
    SEEN,
    cell,
    finish,
    nvml_processes,
    nvml_this_process,
    scenario,
    start_shell,
    wait_until_gone_from_nvml,
)

shell = start_shell()
ns = shell.user_ns
cell(shell, "import gc, os\nimport numpy as np, torch, keras\n" + MODEL_CELL)
torch = ns["torch"]
SEEN["backend"] = cell(shell, "keras.backend.backend()")
SEEN["versions"] = {"torch": torch.__version__, "keras": ns["keras"].__version__,
                    "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def torch_now() -> dict[str, int]:
    return {"allocated": int(torch.cuda.memory_allocated()), "reserved": int(torch.cuda.memory_reserved()),
            "peak": int(torch.cuda.max_memory_allocated())}


@scenario("warm_up")
def _warm_up():
    # One fit loads the kernels and libraries (cuBLAS, the optimizer's) that enlarge the CUDA
    # context; the context is read after this, so later readings compare like with like.
    cell(shell, "warm = make_model(256); warm.fit(x, y, epochs=1, batch_size=256, verbose=0);")
    device = cell(shell, "str(warm.weights[0].value.device)")
    cell(shell, "del warm; gc.collect(); torch.cuda.empty_cache()")
    return {"device": device}


@scenario("tf_mem")
def _tf_mem():
    # Nothing cached: what NVML counts beyond torch's reserved blocks is the context alone.
    quiet = torch_now()
    context_alone = nvml_this_process()
    cell(shell, "big = torch.empty(1024 * MiB, dtype=torch.uint8, device='cuda')\n"
                "spare = torch.empty(512 * MiB, dtype=torch.uint8, device='cuda'); del spare")
    snap = cell(shell, "%tf_mem -q -o")
    direct, nvml_direct = torch_now(), nvml_this_process()
    return {"before": quiet, "nvml_before": context_alone, "report": snap.to_dict(), "text": str(snap),
            "torch": direct, "nvml": nvml_direct}


@scenario("clear_tf")
def _clear_tf():
    before, nvml_before = torch_now(), nvml_this_process()
    report = cell(shell, "%clear_tf big -q -o")
    return {"before": before, "nvml_before": nvml_before, "report": report.to_dict(), "text": str(report),
            "torch": torch_now(), "nvml": nvml_this_process(), "big_left": "big" in ns}


@scenario("clear_tf_after_gc")
def _clear_tf_after_gc():
    # A trained model that only a reference cycle keeps: the clean's garbage collection frees
    # it, and its blocks reach the GPU only if the cache is emptied after that collection.
    cell(shell, "looped = make_model(4096); looped.fit(x, y, epochs=1, batch_size=256, verbose=0)\n"
                "looped_bytes = sum(int(np.prod(v.shape)) * 4 for v in looped.weights + looped.optimizer.variables)\n"
                "cycle = [looped]; cycle.append(cycle); del looped, cycle")
    before, nvml_before = torch_now(), nvml_this_process()
    report = cell(shell, "%clear_tf -q -o")
    return {"model_bytes": ns["looped_bytes"], "before": before, "nvml_before": nvml_before,
            "report": report.to_dict(), "torch": torch_now(), "nvml": nvml_this_process()}


@scenario("cell_peak")
def _cell_peak():
    before, nvml_before = torch_now(), nvml_this_process()
    cell(shell, "%%tf_mem -q --as measured\n"
                "scratch = torch.empty(768 * MiB, dtype=torch.uint8, device='cuda')\n"
                "inner_peak = torch.cuda.max_memory_allocated()\n"
                "del scratch")
    measured = ns["measured"]
    return {"before": before, "nvml_before": nvml_before, "inner_peak": ns["inner_peak"],
            "report": measured.to_dict(), "text": str(measured), "torch": torch_now(), "nvml": nvml_this_process()}


@scenario("load_model")
def _load_model():
    ns["path"] = os.path.join(tempfile.mkdtemp(), "trained.keras")
    cell(shell, "trained = make_model(1024); trained.fit(x, y, epochs=1, batch_size=256, verbose=0)\n"
                "trained.save(path); del trained")
    cell(shell, "%clear_tf -q")
    before = torch_now()
    cell(shell, "%%tf_mem -q --as loaded_report\nloaded = keras.models.load_model(path)")
    measured = ns["loaded_report"]
    return {"before": before, "torch": torch_now(), "report": measured.to_dict(), "text": str(measured),
            "device": cell(shell, "str(loaded.weights[0].value.device)")}


@scenario("isolate")
def _isolate():
    cell(shell, "%clear_tf loaded -q")
    kernel_before = nvml_this_process()
    cell(shell, "%%fresh_model -q --isolate --as iso --out device worker_pid worker_reserved\n"
                "import os, numpy as np, torch, keras\n"
                "xs = np.random.default_rng(1).random((2048, 256), dtype=np.float32)\n"
                "ys = (xs.sum(axis=1) > 128).astype('int32')\n"
                "net = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048, activation='relu'),\n"
                "                        keras.layers.Dense(2)])\n"
                "net.compile(optimizer='adam', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                "net.fit(xs, ys, epochs=2, batch_size=256, verbose=0)\n"
                "device = str(net.weights[0].value.device)\n"
                "worker_pid = os.getpid()\n"
                "worker_reserved = int(torch.cuda.memory_reserved())")
    iso = ns["iso"]
    gone = wait_until_gone_from_nvml(ns["worker_pid"]) if isinstance(ns.get("worker_pid"), int) else None
    return {"report": iso.to_dict(), "text": str(iso), "device": ns.get("device"), "worker_pid": ns.get("worker_pid"),
            "worker_reserved": ns.get("worker_reserved"), "worker_gone_from_nvml": gone,
            "kernel_nvml_before": kernel_before, "kernel_nvml_after": nvml_this_process(),
            "kernel_pid": os.getpid(), "nvml_pids_after": sorted(nvml_processes())}


finish()

"""The magics on Keras 3's JAX backend, with real JAX (its CPU build), in a real InteractiveShell.

Keras picks its backend once per process, and the rest of the suite runs on TensorFlow, so this
runs one shell session in a child process with ``KERAS_BACKEND=jax`` and checks what it saw.
torch has no CPU-only wheel to install here: its paths are covered by the GPU machine's runs and
the recorded readings (tests/core/test_gpu_allocators.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.shell, pytest.mark.frameworks,
    # Looked up, not imported: importing JAX here would change the backends this worker's other tests see.
    pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                       reason="JAX is not installed (pip install jax): Keras' JAX backend cannot run here"),
]

SESSION = r'''
import json, os, sys, tempfile, weakref
from IPython.testing.globalipapp import start_ipython

shell = start_ipython()
seen = {}

def run(cell):
    result = shell.run_cell(cell, store_history=True)
    if not result.success:
        raise SystemExit(f"cell failed: {result.error_before_exec or result.error_in_exec!r}\n{cell}")
    return result.result

run("""
%load_ext kerasmagic
import weakref
import numpy as np, keras
x = np.random.default_rng(0).random((128, 16), dtype=np.float32); y = x.sum(axis=1, keepdims=True)
def make_model():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model
""")
seen["backend"] = run("keras.backend.backend()")

# %%fresh_model in a loop: names start over, the previous model is freed each time.
for _ in range(3):
    run("%%fresh_model -q --as fresh model\nmodel = make_model()\nmodel.fit(x, y, epochs=1, verbose=0);"
        if "model" in shell.user_ns else
        "%%fresh_model -q --as fresh\nmodel = make_model()\nmodel.fit(x, y, epochs=1, verbose=0);")
    seen.setdefault("last_layer_names", []).append(run("model.layers[-1].name"))
    seen.setdefault("models_freed", []).append(shell.user_ns["fresh"].clean.models_freed)

# A model that only the output cache holds: %clear_tf frees it; JAX's caches are kept unless asked.
run("make_model()")
run("ref = weakref.ref(_)")
report = run("%clear_tf -q -o")
seen["out_model_freed"] = run("ref() is None")
steps = {step.name: step for step in report.steps}
seen["jax_step_default"] = steps["clear JAX's compiled functions"].skipped
report = run("%clear_tf -q -o --jax-caches")
seen["jax_step_asked"] = {s.name: s.detail for s in report.steps}["clear JAX's compiled functions"]

# %tf_mem: JAX has started its CPU backend, which keeps no allocator statistics.
snapshot = run("%tf_mem -q -o")
seen["jax_allocator"] = snapshot.to_dict()["jax"]["allocator"]
seen["keras_backend_in_report"] = snapshot.keras.get("backend")

# load_model(compile=True) on JAX brings Adam's slots back, and the report says so.
path = os.path.join(tempfile.mkdtemp(), "trained.keras")
shell.user_ns["path"] = path
run("model.save(path)")
measured = run("%%tf_mem -q -o\nloaded = keras.models.load_model(path)")
seen["loaded"] = [(m["optimizer_state"], m["held_by"], m["optimizer_bytes"] >= 2 * m["weight_bytes"])
                  for m in measured.new_models]
seen["advice"] = "compile=False" in str(measured)

# --isolate: a job forked from a template that imported Keras and JAX but started neither.
run("%%fresh_model -q --isolate --as iso\nimport keras\n"
    "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])\nvalue = int(m.count_params())")
seen["isolated"] = [shell.user_ns["iso"].status, shell.user_ns["iso"].origin, run("value")]
# The worker's JAX allocator peak, as its report carries it: JAX's CPU keeps no statistics.
seen["isolated_report"] = {key: value for key, value in shell.user_ns["iso"].to_dict().items()
                           if key in ("child_jax_peak_bytes", "child_gpu_process_peak_bytes", "kernel_gpu_after_bytes")}
seen["isolated_text"] = str(shell.user_ns["iso"])
print("SEEN " + json.dumps(seen))
'''


@pytest.fixture(scope="module")
def seen():
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=600, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
    assert done.returncode == 0 and lines, f"the JAX session failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("SEEN "))


def test_the_session_really_ran_on_jax(seen):
    assert seen["backend"] == "jax" and seen["keras_backend_in_report"] == "jax"


def test_fresh_model_restarts_names_and_frees_the_previous_model_on_jax(seen):
    assert seen["last_layer_names"] == ["dense_1"] * 3
    assert seen["models_freed"][1:] == [1, 1]


def test_clear_tf_frees_an_output_cache_model_and_keeps_jax_caches_unless_asked(seen):
    assert seen["out_model_freed"] is True
    assert seen["jax_step_default"].startswith("kept (clearing recompiles everything")
    assert seen["jax_step_asked"] == "jax.clear_caches() (compiled functions)"


def test_the_jax_allocator_view_says_why_a_cpu_has_no_numbers(seen):
    assert seen["jax_allocator"]["status"] == "unavailable"
    assert seen["jax_allocator"]["reason"] == "not_supported"


def test_load_model_with_its_optimizer_is_named_on_jax_too(seen):
    assert seen["loaded"] == [["restored", ["loaded"], True]]
    assert seen["advice"] is True


def test_an_isolated_cell_forks_from_a_jax_template(seen):
    assert seen["isolated"] == ["ok", "forked", 10]


def test_the_isolated_report_says_jax_on_a_cpu_keeps_no_allocator_figures(seen):
    report = seen["isolated_report"]
    assert report["child_jax_peak_bytes"]["status"] == "unavailable"
    assert report["child_jax_peak_bytes"]["reason"] == "not_supported"
    # No GPU here: no NVML figure for the worker or the kernel, and no row that pretends one.
    assert report["child_gpu_process_peak_bytes"] == {}
    # The kernel's views: no number; a framework imported but not started says so instead.
    assert all(value["status"] == "unavailable" and value["reason"] == "not_started"
               for value in report["kernel_gpu_after_bytes"].values())
    assert "JAX" not in seen["isolated_text"] and "GPU" not in seen["isolated_text"]

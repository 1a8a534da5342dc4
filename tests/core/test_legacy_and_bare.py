"""Other stacks, each in its own interpreter: legacy tf-keras graph mode, and no framework at all."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]


def run_script(code: str, **env: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None,
                    reason="tf-keras is not installed (pip install --no-deps tf-keras==<your TF minor>.*): "
                           "TensorFlow 1 graph mode through Keras needs it")
def test_legacy_graph_mode_grows_and_clear_tf_resets_it():
    data = run_script(
        """
        import json
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "kerasmagic")
        shell.run_cell('''
        import numpy as np, tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        from tensorflow import keras
        x = np.random.rand(64, 8).astype("float32"); y = x.sum(1)
        def make():
            m = keras.Sequential([keras.layers.Dense(16, input_shape=(8,)), keras.layers.Dense(1)])
            m.compile("adam", "mse"); m.fit(x, y, epochs=1, verbose=0); return m
        ''')
        ops = []
        for _ in range(3):
            shell.run_cell("model = make()")
            ops.append(shell.run_line_magic("tf_mem", "-o").tensorflow["graph_op_count"])
        report = shell.run_line_magic("clear_tf", "model -q -o")
        after = shell.run_line_magic("tf_mem", "-o").tensorflow["graph_op_count"]
        shell.run_cell("model = make()")
        name = shell.run_cell("model.layers[0].name").result
        print(json.dumps({"ops": ops, "after": after, "name": name,
                          "keras_version": __import__("tf_keras").__version__,
                          "keras_module": shell.user_ns["keras"].__name__,
                          "step": [s.detail for s in report.steps if s.name.startswith("clear Keras")][0]}))
        """,
        TF_USE_LEGACY_KERAS="1",
    )
    assert data["keras_module"].startswith("tf_keras") and data["keras_version"].startswith("2."), data
    assert data["ops"][0] < data["ops"][1] < data["ops"][2], data
    assert data["after"] < data["ops"][0], data
    assert "tf_keras.backend.clear_session()" in data["step"]
    assert data["name"] == "dense", data


def test_no_framework_imported_measures_process_memory_only():
    data = run_script(
        """
        import json, sys
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "kerasmagic")
        shell.run_cell("%%tf_mem -q --as m\\nblock = bytearray(300 * 10**6)\\ndel block")
        report = shell.run_line_magic("clear_tf", "-q -o")
        snapshot = shell.run_line_magic("tf_mem", "-o")
        print(json.dumps({
            "peak": shell.user_ns["m"].rss_peak_above_start_bytes,
            "imported": [m for m in ("tensorflow", "keras", "jax", "torch") if m in sys.modules],
            "steps": {s.name: s.skipped or s.detail for s in report.steps},
            "text": str(snapshot),
        }))
        """
    )
    assert data["imported"] == []
    assert 280e6 < data["peak"] < 330e6
    assert "no Keras or TensorFlow imported" in data["steps"]["clear Keras session and legacy graph"]
    assert "not imported" in data["text"]

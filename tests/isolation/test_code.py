"""run_isolated() with code strings and functions: values in and out, memory, streaming."""

from __future__ import annotations

import numpy as np
import pytest

from kerasmagic import events
from kerasmagic.isolation import IsolatedResult, run_isolated
from kerasmagic.probes.process import rss_bytes

pytestmark = pytest.mark.isolation


def test_code_gets_inputs_and_returns_assigned_names():
    result = run_isolated("y = x * 2\nwords = [w.upper() for w in names]", inputs={"x": 21, "names": ["a", "b"]})
    assert isinstance(result, IsolatedResult)
    assert result.outputs == {"y": 42, "words": ["A", "B"]}
    assert [s.name for s in result.sent] == ["x", "names"]
    assert result.status == "ok" and result.exit_code == 0
    assert result.to_dict()["returned"][0]["name"] == "y"


def test_only_requested_outputs_come_back():
    result = run_isolated("a = 1\nb = 2", outputs=["b"])
    assert result.outputs == {"b": 2}


def test_function_value_and_large_array_travel_out_of_band():
    array = np.random.default_rng(0).random((4096, 2048))  # 64 MiB

    def column_sums(values, scale=1.0):
        return values.sum(axis=0) * scale, values * 2

    result = run_isolated(column_sums, args=(array,), kwargs={"scale": 2.0})
    sums, doubled = result.value
    np.testing.assert_array_equal(sums, array.sum(axis=0) * 2.0)
    np.testing.assert_array_equal(doubled, array * 2)
    assert doubled.flags.writeable
    assert "out-of-band" in result.sent[1].how and result.sent[1].size_bytes >= array.nbytes
    assert "out-of-band" in result.returned[0].how


def test_one_gib_in_the_worker_leaves_the_kernel_flat():
    events_seen = []
    stop = events.subscribe(lambda kind, payload: events_seen.append(kind))
    before = rss_bytes()
    try:
        result = run_isolated(
            "import numpy as np, time\nblock = np.ones(2**27)\ntime.sleep(0.6)\n"
            "total = float(block[::4096].sum())\ndel block")
    finally:
        stop()
    assert result.outputs["total"] == 2**27 / 4096
    assert result.child_rss_peak_bytes >= 2**30, str(result)
    assert result.child_rss_peak_method == "exact"
    assert abs(rss_bytes() - before) < 50 * 2**20
    assert abs(result.kernel_rss_delta_bytes) < 50 * 2**20
    assert "isolated_sample" in events_seen and events_seen[-1] == "isolated_done"
    assert "RSS peak" in str(result) and "Kernel" in result._repr_html_()


def test_output_streams_before_the_job_ends(recording_stdout):
    with recording_stdout() as recorded_stdout:
        result = run_isolated("import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')")
    assert recorded_stdout.text == "first\nsecond\n"
    first_arrival = recorded_stdout.chunks[0][0]
    assert first_arrival < result.finished_ts - 1.5
    assert result.first_output_ts == pytest.approx(first_arrival, abs=0.1)


def test_carriage_return_progress_arrives_as_chunks(recording_stdout):
    with recording_stdout() as recorded_stdout:
        run_isolated("import sys, time\nfor i in range(3):\n"
                     "    sys.stdout.write(f'\\rstep {i}'); sys.stdout.flush(); time.sleep(0.3)\nprint()")
    assert "\rstep 0" in recorded_stdout.text and "\rstep 2" in recorded_stdout.text
    assert len(recorded_stdout.chunks) >= 3  # not one line at the end


def test_quiet_keeps_output_out_of_the_caller(recording_stdout):
    with recording_stdout() as recorded_stdout:
        result = run_isolated("print('noisy')", quiet=True)
    assert recorded_stdout.text == ""
    assert result.last_output == "noisy"


def test_env_reaches_the_worker_before_it_starts():
    result = run_isolated("import os\nvalue = os.environ.get('KERASMAGIC_TEST_FLAG')",
                          env={"KERASMAGIC_TEST_FLAG": "on"})
    assert result.outputs["value"] == "on"
    assert result.worker_state == "cold", result.worker_note  # a template for another environment
    plain = run_isolated("import os\nvalue = os.environ.get('KERASMAGIC_TEST_FLAG')")
    assert plain.outputs["value"] is None


def test_seed_is_set_before_the_code():
    code = "import random\nvalue = random.random()"
    first = run_isolated(code, seed=3).outputs["value"]
    second = run_isolated(code, seed=3).outputs["value"]
    assert first == second


def test_unreturnable_output_warns_and_others_come_back():
    with pytest.warns(UserWarning, match="gen: generator objects cannot be pickled"):
        result = run_isolated("gen = (i for i in range(3))\nok = 1")
    assert result.outputs == {"ok": 1}
    assert "gen" in result.not_returned


_NO_FRAMEWORK_KERNEL = """
import json, sys, warnings
from kerasmagic.isolation import configure_pool, run_isolated
configure_pool(size=1)
code = ("import keras, tensorflow as tf\\n"
        "model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\\n"
        "tensor = tf.constant([1.0])\\n"
        "def double(v):\\n    return tf.constant(v) * 2\\n"
        "n = 3")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("default")
    result = run_isolated(code, quiet=True)
print(json.dumps({"outputs": sorted(result.outputs), "not_returned": result.not_returned,
                  "imported": sorted(m for m in ("tensorflow", "keras") if m in sys.modules),
                  "warnings": [str(w.message) for w in caught]}))
"""


def test_a_model_never_imports_keras_into_a_kernel_without_it():
    # A fresh interpreter stands for a kernel that never imported Keras or TensorFlow.
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _NO_FRAMEWORK_KERNEL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["imported"] == []  # neither keras nor tensorflow entered the kernel
    assert report["outputs"] == ["n"]
    for name, module in (("model", "keras"), ("tensor", "tensorflow"), ("double", "tensorflow")):
        assert f"would import {module} into the kernel" in report["not_returned"][name]
    [warning] = [w for w in report["warnings"] if "did not come back" in w]
    assert "model: rebuilding it would import keras" in warning
    assert "`import keras` / `import tensorflow` in the kernel first" in warning


def test_every_unreturnable_output_is_reported_also_in_a_loop():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default: once per location
        for _ in range(2):
            run_isolated("gen = (i for i in range(3))", quiet=True)
    reported = [w for w in caught if "gen: generator objects cannot be pickled" in str(w.message)]
    assert len(reported) == 2
    assert all("kerasmagic" not in w.filename for w in reported)  # it names the run, not our code

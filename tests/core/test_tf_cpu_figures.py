"""TensorFlow's CPU figures without oneDNN (CPUs without VNNI/AMX, CI's machine): said why, or real with the remedy.

Each session runs in its own interpreter with ``TF_ENABLE_ONEDNN_OPTS=0``, which simulates a CPU where
TensorFlow leaves oneDNN off (it decides at import). There TF 2.21 keeps no CPU allocator statistics
unless ``TF_CPU_ALLOCATOR_USE_BFC=1`` was set before its runtime started. Real TensorFlow, a real
``InteractiveShell``, the magics as a user types them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kerasmagic.live import protocol
from kerasmagic.probes import tensorflow as tf_probe

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]

MiB = 2**20
REMEDY = "TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow starts"

SESSION = textwrap.dedent('''
    import json, os, re
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    shell.colors = "nocolor"
    shell.run_line_magic("load_ext", "kerasmagic")
    import kerasmagic
    from kerasmagic.probes import tensorflow as tf_probe
    from kerasmagic.probes.sample import memory_sample
    from kerasmagic.live.widget import _ViewState

    def run(cell):
        result = shell.run_cell(cell, store_history=True)
        assert result.success, (cell, result.error_in_exec or result.error_before_exec)
        return result.result

    seen = {}
    run("import numpy as np, tensorflow as tf")
    # Imported, not started: the probe must leave TensorFlow's runtime alone.
    seen["before_start"] = {"tf_mem": str(kerasmagic.tf_mem()), "sample": memory_sample()["tf"],
                            "started": tf_probe.runtime_started()}
    run("import keras" if os.environ.get("TF_USE_LEGACY_KERAS") != "1" else "import tf_keras as keras")
    run("""
    x = np.random.rand(256, 32).astype('float32'); y = np.random.randint(0, 2, 256)
    def make():
        m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(16), keras.layers.Dense(2)])
        m.compile(optimizer='adam', loss='sparse_categorical_crossentropy')
        return m
    model = make(); model.fit(x, y, epochs=1, verbose=0)
    """)
    if os.environ.get("SET_BFC_NOW"):
        os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "1"   # after the runtime started: too late
    seen["tf_mem"] = str(run("%tf_mem -o -q"))
    seen["snapshot"] = run("%tf_mem -o -q").to_dict()["tensorflow"]["allocator"]
    # A known tensor: 64 x 1024 x 1024 float32 is exactly 256 MiB.
    measured = run("%%tf_mem -o -q\\nbig = tf.ones((64, 1024, 1024))")
    seen["tf_mem_cell"] = str(measured)
    seen["tf_mem_cell_dict"] = {k: measured.to_dict()[k] for k in
                                ("tf_in_use_before_bytes", "tf_in_use_after_bytes", "tf_peak_bytes")}
    cleaned = run("%clear_tf -o -q big")
    seen["clear_tf"] = str(cleaned)
    seen["clear_tf_summary"] = cleaned.summary()
    seen["fresh_model"] = str(run("%%fresh_model -o -q --seed 0\\nmodel = make(); model.fit(x, y, verbose=0)"))
    sample = memory_sample()
    seen["sample_tf"] = sample["tf"]
    seen["sample_message"] = {"method": "sample", "seq": 1, "sample_cost_s": 0.0001, **sample}
    view = _ViewState(10)
    view.take({"method": "sample", **sample})
    seen["widget"] = re.sub("<[^>]+>", " ", view.values_html())
    isolated = run("%%fresh_model --isolate -o -q --no-return\\nimport tensorflow as tf\\n"
                   "t = tf.ones((64, 1024, 1024))")
    seen["isolated"] = str(isolated)
    seen["isolated_peak"] = isolated.to_dict()["child_tf_peak_bytes"]
    isolated = run("%%fresh_model --isolate -o -q --no-return --env TF_CPU_ALLOCATOR_USE_BFC=1\\n"
                   "import tensorflow as tf\\nt = tf.ones((64, 1024, 1024))")
    seen["isolated_env_peak"] = isolated.to_dict()["child_tf_peak_bytes"]
    from kerasmagic.isolation.pool import shutdown_default_pool
    shutdown_default_pool()
    print(json.dumps(seen))
''')


def _session(**env: str) -> dict:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("TF_CPU_ALLOCATOR_USE_BFC", "TF_USE_LEGACY_KERAS")}
    # oneDNN off, as TensorFlow leaves it on CPUs without VNNI/AMX; set before TensorFlow is imported.
    environment.update(TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0", **env)
    done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=600,
                          env=environment)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def without_statistics() -> dict:
    return _session()


@pytest.fixture(scope="module")
def with_remedy() -> dict:
    return _session(TF_CPU_ALLOCATOR_USE_BFC="1")


def _explained(text: str) -> bool:
    """Whether a report says why the CPU figures are missing and how to get them."""
    return ("no allocator statistics for CPU:0 without oneDNN (turned off by TF_ENABLE_ONEDNN_OPTS=0)" in text
            and REMEDY in text and "pools freed memory" in text and "64 GiB" in text)


def test_the_probe_never_starts_tensorflow(without_statistics):
    before = without_statistics["before_start"]
    assert before["started"] is False
    assert before["sample"]["reason"] == "not_started"
    # Not started is not "no statistics": nothing to remedy yet.
    assert "runtime has not started" in before["tf_mem"] and REMEDY not in before["tf_mem"], before["tf_mem"]


def test_every_report_says_why_and_the_remedy_instead_of_a_bare_figure(without_statistics):
    seen = without_statistics
    for report in ("tf_mem", "tf_mem_cell", "clear_tf", "fresh_model", "isolated", "widget"):
        assert _explained(seen[report]), f"{report}:\n{seen[report]}"
    # The figure rows say n/a and point to the sentence; none reads 0 B.
    assert "CPU:0 in use, peak, held       n/a" in seen["tf_mem"], seen["tf_mem"]
    assert "CPU:0 in use change, peak  n/a" in seen["tf_mem_cell"], seen["tf_mem_cell"]
    assert "TF CPU:0 peak" in seen["isolated"] and "why below" in seen["isolated"], seen["isolated"]
    for report in ("tf_mem", "tf_mem_cell", "fresh_model"):
        assert not any("CPU:0" in line and " 0 B" in line for line in seen[report].splitlines()), seen[report]
    # %%fresh_model says it once, not again under what its clean left held.
    assert seen["fresh_model"].count(REMEDY) == 1, seen["fresh_model"]
    # The sidebar's Clear session summary carries it (it shows still_held).
    assert _explained(seen["clear_tf_summary"]), seen["clear_tf_summary"]


def test_the_to_dict_and_the_sample_carry_the_reason_the_sidebar_renders(without_statistics):
    seen = without_statistics
    cpu = seen["sample_tf"]["devices"]["CPU:0"]
    # The sidebar shows "CPU:0: <in_use_bytes' detail>" (frameworks.ts, TfSection).
    assert cpu["in_use_bytes"]["reason"] == "not_supported" and _explained(cpu["in_use_bytes"]["detail"])
    # The sentence once per device: a sample goes out every second, and history holds 900.
    assert "says why" in cpu["peak_bytes"]["detail"] and len(json.dumps(cpu)) < 1000, cpu
    assert protocol.validate(seen["sample_message"], "to_frontend") is not None
    after = seen["tf_mem_cell_dict"]["tf_in_use_after_bytes"]["CPU:0"]
    assert after["status"] == "unavailable" and _explained(after["detail"])
    assert seen["tf_mem_cell_dict"]["tf_peak_bytes"]["CPU:0"]["reason"] == "not_supported"
    assert seen["isolated_peak"]["CPU:0"]["reason"] == "not_supported"
    assert seen["snapshot"]["CPU:0"]["in_use_bytes"]["reason"] == "not_supported"


def test_with_the_remedy_a_known_tensor_shows_up_in_use(with_remedy):
    seen = with_remedy
    cell = seen["tf_mem_cell_dict"]
    before, after = cell["tf_in_use_before_bytes"]["CPU:0"], cell["tf_in_use_after_bytes"]["CPU:0"]
    # 256 MiB allocated by the cell; a little slack for TF's own small tensors.
    assert abs((after - before) - 256 * MiB) < 1 * MiB, (before, after)
    assert 256 * MiB <= cell["tf_peak_bytes"]["CPU:0"] < 258 * MiB, cell
    assert isinstance(seen["snapshot"]["CPU:0"]["in_use_bytes"], int)
    for report in ("tf_mem", "tf_mem_cell", "clear_tf", "fresh_model", "isolated", "widget"):
        assert "n/a" not in seen[report] and REMEDY not in seen[report], f"{report}:\n{seen[report]}"
    # The pool keeps the deleted tensor: what the remedy changes, and the report says it.
    assert "CPU:0 pool keeps at least 2" in seen["clear_tf"], seen["clear_tf"]
    assert 256 * MiB <= seen["isolated_peak"]["CPU:0"] < 258 * MiB, seen["isolated_peak"]


def test_an_isolated_job_gets_the_figures_from_its_own_env(without_statistics):
    # The worker is a fork whose TensorFlow has not started yet: --env reaches it in time.
    assert 256 * MiB <= without_statistics["isolated_env_peak"]["CPU:0"] < 258 * MiB


def test_legacy_tf_keras_gets_the_figures_with_the_remedy():
    pytest.importorskip("tf_keras")
    seen = _session(TF_CPU_ALLOCATOR_USE_BFC="1", TF_USE_LEGACY_KERAS="1")
    cell = seen["tf_mem_cell_dict"]
    assert abs(cell["tf_in_use_after_bytes"]["CPU:0"] - cell["tf_in_use_before_bytes"]["CPU:0"] - 256 * MiB) < MiB


def test_a_remedy_set_after_tensorflow_started_is_called_too_late():
    seen = _session(SET_BFC_NOW="1")
    assert "TF_CPU_ALLOCATOR_USE_BFC=1 is set now, but TensorFlow read it when its runtime started" \
        in seen["tf_mem"], seen["tf_mem"]
    assert "Restart the kernel" in seen["tf_mem"]


@pytest.mark.unit
@pytest.mark.parametrize(("onednn", "says"), [
    (None, "TensorFlow turns it on by itself only on CPUs with AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX"),
    ("0", "turned off by TF_ENABLE_ONEDNN_OPTS=0"),
    ("false", "turned off by TF_ENABLE_ONEDNN_OPTS=0"),
    ("1", "TF_ENABLE_ONEDNN_OPTS=1 was set after TensorFlow was imported"),
])
def test_the_wording_names_the_case(monkeypatch, onednn, says):
    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    if onednn is None:
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    else:
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", onednn)
    why = tf_probe.cpu_stats_missing("CPU:0")
    assert why.reason == "not_supported" and says in why.detail and REMEDY in why.detail


@pytest.mark.unit
def test_the_protocol_fixture_carries_todays_wording(monkeypatch):
    # tests/protocol_fixtures/sample_tf_cpu_no_statistics.json is what both sides' validators (and
    # the sidebar's jest checks) see: it must stay the probe's own sentence.
    from pathlib import Path

    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    path = Path(__file__).parents[1] / "protocol_fixtures" / "sample_tf_cpu_no_statistics.json"
    sample = json.loads(path.read_text())["data"]
    assert sample["tf"]["devices"]["CPU:0"]["in_use_bytes"] == tf_probe.cpu_stats_missing("CPU:0").to_dict()

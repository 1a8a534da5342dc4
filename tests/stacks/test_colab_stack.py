"""kerasmagic on Colab's pinned stack, through a real kernel: what a Colab or Kaggle user runs.

`./dev.sh test` builds `.venv-colab` (tests/stacks/colab-pins.txt, then the built wheel with a
plain `pip install`, then checks that no pin moved) and runs this file with that venv's Python,
so the kernel below is IPython 7.34 on ipykernel 6.17 with ipywidgets 7.7 and TensorFlow 2.19.
Run from the main venv (a newer stack) the same tests run there too; the first test says which
stack it is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from kernel_session import KernelSession

pytestmark = [pytest.mark.kernel, pytest.mark.stacks]

PINS = Path(__file__).with_name("colab-pins.txt")
ON_COLAB_PINS = os.environ.get("KERASMAGIC_STACK") == "colab"

MODEL = """
import numpy as np, keras
x = np.random.rand(512, 32).astype("float32"); y = np.random.randint(0, 2, 512)
def make_model():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
"""


def _pins() -> dict[str, str]:
    pins = {}
    for line in PINS.read_text().splitlines():
        name, _, version = line.partition("==")
        if version and not line.startswith("#"):
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    # Started outside the checkout: the kernel imports the installed wheel, not ./kerasmagic.
    session = KernelSession(env={"TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=str(tmp_path_factory.mktemp("colab-kernel")))
    try:
        yield session
    finally:
        session.shutdown()


def test_the_kernel_runs_the_stack_under_test_and_the_installed_wheel(kernel):
    versions = json.loads(kernel.execute(
        "import json, IPython, ipykernel, ipywidgets, psutil, kerasmagic\n"
        "print(json.dumps({'ipython': IPython.__version__, 'ipykernel': ipykernel.__version__,"
        " 'ipywidgets': ipywidgets.__version__, 'psutil': psutil.__version__, 'kerasmagic': kerasmagic.__file__}))"))
    if not ON_COLAB_PINS:
        pytest.skip(f"not the pinned venv (KERASMAGIC_STACK=colab); this kernel runs {versions}")
    pins = _pins()
    for name in ("ipython", "ipykernel", "ipywidgets", "psutil"):
        assert versions[name] == pins[name], (name, versions[name])
    # The wheel as pip installed it, not this checkout: what users get.
    assert "site-packages" in versions["kerasmagic"], versions["kerasmagic"]
    import jupyter_client

    assert jupyter_client.__version__ == pins["jupyter-client"]


def test_every_magic_in_a_real_kernel(kernel):
    kernel.execute("%load_ext kerasmagic")
    kernel.execute(MODEL)
    kernel.execute("model = make_model(); history = model.fit(x, y, epochs=1, verbose=0)")
    who = kernel.shown("%tf_mem --who")
    assert "Keras" in who and re.search(r"Sequential 'sequential\S*'.*held by model, history\.model", who), who
    # A measured cell is labelled with the number the notebook shows (IPython 7 counts at the end).
    measured = kernel.shown("%%tf_mem\nbig = np.ones((1024, 1024))\ndel big")
    number = int(re.search(r"cell \[(\d+)\]", measured).group(1))
    assert number == kernel.last_execution_count, (number, kernel.last_execution_count)
    assert "RSS peak" in measured
    cleaned = kernel.shown("%clear_tf model history")
    assert re.search(r"models freed\s+1 of 1", cleaned), cleaned
    for _ in range(3):
        kernel.execute("%%fresh_model -q --seed 0\nmodel = make_model(); model.fit(x, y, epochs=1, verbose=0)")
    names = kernel.execute("print([layer.name for layer in model.layers])")
    assert "dense_1'" in names or "'dense'" in names, names  # the counters were reset each time
    counters = kernel.shown("%tf_mem")
    assert "name counters" in counters and "('" not in counters, counters
    cells = kernel.shown("%tf_mem --cells")
    assert "%%fresh_model -q --seed 0" in cells and "cell [?]" not in cells, cells
    # A trailing ';' hides the value on IPython 7.34 too (IPython's own rule came with 8.10).
    assert kernel.execute_result("%tf_mem -o;") is None
    assert "kerasmagic: memory of this kernel" in kernel.execute_result("%tf_mem -q -o")


def test_an_isolated_cell_returns_its_values(kernel):
    kernel.execute("%load_ext kerasmagic")
    kernel.execute(MODEL)
    out = kernel.shown("%%fresh_model --isolate --timeout 300\nmodel = make_model()\n"
                         "history = model.fit(x, y, epochs=2, verbose=0)\nlosses = history.history['loss']",
                         timeout=360)
    assert "ran in a fresh process" in out, out
    assert kernel.execute("print(len(losses), type(model).__name__, type(history).__name__)").split() == [
        "2", "Sequential", "IsolatedHistory"]


def test_live_views_widgets_and_in_place(kernel):
    kernel.execute("%load_ext kerasmagic")
    kernel.execute("from kerasmagic.live import channel; channel.active_channel().sampler.set_interval(0.3)")
    mark = len(kernel.iopub)
    kernel.execute("view = %tf_mem --live")
    opened = [m for m in kernel.iopub[mark:] if m["msg_type"] == "comm_open"]
    assert {m["content"]["target_name"] for m in opened} == {"jupyter.widget"}
    kernel.execute("import time; time.sleep(1.2)")
    updates = [m for m in kernel.iopub[mark:] if m["msg_type"] == "comm_msg"
               and "<svg" in str(m["content"]["data"].get("state", {}).get("value", ""))]
    assert len(updates) >= 2, len(updates)
    mark = len(kernel.iopub)
    kernel.execute("%tf_mem --live display")
    kernel.execute("time.sleep(1.2)")
    in_place = [m for m in kernel.iopub[mark:] if m["msg_type"] == "update_display_data"]
    assert len(in_place) >= 2 and "Kernel memory (RSS)" in in_place[-1]["content"]["data"]["text/html"]
    assert kernel.execute("print(view.running)").strip() == "False"  # one view at a time
    kernel.execute("%tf_mem --live off")


def test_the_sidebar_channel_attaches_samples_and_clears(kernel):
    kernel.execute("%load_ext kerasmagic")
    comm_id = kernel.open_comm(protocol_version="1.4.0")
    hello = kernel.comm_data(comm_id, "hello")
    assert hello["protocol_version"].startswith("1.")
    assert kernel.comm_data(comm_id, "history")["method"] == "history"
    sample = kernel.comm_data(comm_id, "sample")
    assert isinstance(sample["rss_bytes"], int) and sample["rss_bytes"] > 0
    kernel.send_comm(comm_id, {"method": "clear", "request_id": "r1"})
    result = kernel.comm_data(comm_id, "clear_result", timeout=60)
    assert result["ok"] and result["request_id"] == "r1", result
    kernel.close_comm(comm_id)


@pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None,
                    reason="tf-keras is not installed (the next TensorFlow's stage has none): "
                           "TF_USE_LEGACY_KERAS=1 needs it")
def test_tf_keras_counters_print_as_users_know_them(tmp_path):
    session = KernelSession(env={"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"}, cwd=str(tmp_path))
    try:
        session.execute("%load_ext kerasmagic")
        session.execute("import tensorflow as tf\nm = tf.keras.Sequential([tf.keras.layers.Dense(2), "
                        "tf.keras.layers.Dense(2)])\nm.build((None, 3))")
        report = session.shown("%tf_mem")
        assert "tf-keras" in report and re.search(r"name counters\s+.*dense=2", report), report
        assert "('', 'dense')" not in report
    finally:
        session.shutdown()


"""Real Keras models in workers (this file imports Keras, so its workers preload TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

from kerasmagic.isolation import IsolatedHistory, run_isolated
from kerasmagic.isolation.cell import run_cell_isolated
from kerasmagic.isolation.pool import default_pool, worker_spec

pytestmark = pytest.mark.isolation



@pytest.fixture(scope="module")
def keras():
    # Imported here, not at collection: once Keras is in this process every worker preloads
    # TensorFlow, and the other test files should keep their cheap numpy-only workers.
    import keras  # a hard test dependency: missing, it must fail, not skip

    return keras


@pytest.fixture
def keras_shell(isolated_shell, keras):
    isolated_shell.run_cell(
        "import numpy as np\nimport keras\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.random((64, 4), dtype=np.float32)\ny = rng.random((64, 1), dtype=np.float32)\n"
        "def make_model(units):\n"
        "    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation='relu'),\n"
        "                              keras.layers.Dense(1)])\n"
        "    model.compile(optimizer='adam', loss='mse')\n"
        "    return model\n")
    return isolated_shell


def test_trained_model_comes_back_and_predicts_exactly(keras_shell, keras):
    cell = "model = make_model(8)\nhistory = model.fit(x, y, epochs=2, verbose=0)\npred = model.predict(x, verbose=0)"
    result = run_cell_isolated(keras_shell, cell, inputs=None, outputs=None, no_return=False, timeout=120,
                               gpu=None, env={}, seed=0, quiet=False)
    ns = keras_shell.user_ns
    assert isinstance(ns["model"], keras.Model)
    np.testing.assert_array_equal(ns["model"].predict(ns["x"], verbose=0), ns["pred"])
    assert isinstance(ns["history"], IsolatedHistory)
    assert len(ns["history"].history["loss"]) == 2 and ns["history"].epoch == [0, 1]
    assert "tensorflow" in result.frameworks and "keras" in result.frameworks
    assert {s.name: s.how for s in result.returned}["model"] == ".keras file"
    assert ns["model"].optimizer is not None  # compiled state travelled too


def test_a_model_goes_in_as_well(keras_shell):
    keras_shell.run_cell("base = make_model(4)")
    run_cell_isolated(keras_shell, "base.fit(x, y, epochs=1, verbose=0)\nweights_after = base.get_weights()",
                      inputs=None, outputs=["weights_after"], no_return=False, timeout=120,
                      gpu=None, env={}, seed=0, quiet=False)
    assert len(keras_shell.user_ns["weights_after"]) == 4


def test_second_job_finds_a_warm_worker(keras):
    pool = default_pool()
    assert pool.wait_until_warm(worker_spec(), timeout=120)
    result = run_isolated("import keras\nname = keras.layers.Dense(2).name")
    assert result.warm and result.worker_state == "warm" and result.origin == "forked"
    assert result.pool_idle_rss_bytes is not None

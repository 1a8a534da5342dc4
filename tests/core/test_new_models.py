"""`%%tf_mem` and `%%fresh_model` name the models a cell created or loaded, and what each costs.

The question behind it ("load_model uses 5 GB, the weights are 200 MB"): a `.keras` file saved
after training carries the optimizer's slots, and `load_model(compile=True)` builds them again.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from shell_helpers import run

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]

SAVE_A_TRAINED_MODEL = """
import os, tempfile
import numpy as np
import keras

def make_model():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model

trained = make_model()
trained.fit(np.zeros((8, 64)), np.zeros((8, 2)), verbose=0)
path = os.path.join(tempfile.mkdtemp(), "trained.keras")
trained.save(path)
"""

WEIGHT_BYTES = (64 * 256 + 256 + 256 * 2 + 2) * 4  # float32


@pytest.fixture
def saved(shell):
    run(shell, SAVE_A_TRAINED_MODEL)
    yield shell
    run(shell, "import shutil; shutil.rmtree(os.path.dirname(path))")


def test_load_model_with_compile_reports_the_restored_optimizer_state_and_the_remedy(saved):
    shell = saved
    run(shell, "%%tf_mem -q --as m\nloaded = keras.models.load_model(path)")
    (model,) = shell.user_ns["m"].new_models
    assert model["class"] == "Sequential" and model["held_by"] == ["loaded"]
    assert model["weight_bytes"] == WEIGHT_BYTES
    # Adam keeps two slots per weight: the file's optimizer state comes back at twice the weights.
    assert model["optimizer_bytes"] >= 2 * WEIGHT_BYTES
    assert model["optimizer_state"] == "restored"
    text = str(shell.user_ns["m"])
    assert "New models in this cell" in text
    assert "load_model(path, compile=False) leaves it out" in text
    assert shell.user_ns["m"].to_dict()["new_models"][0]["optimizer_state"] == "restored"


def test_compile_false_brings_no_optimizer_state_and_no_advice(saved):
    shell = saved
    run(shell, "%%tf_mem -q --as m\nfor_inference = keras.models.load_model(path, compile=False)")
    (model,) = shell.user_ns["m"].new_models
    assert model["optimizer_bytes"] == 0 and model["optimizer_state"] == "none"
    assert "compile=False" not in str(shell.user_ns["m"])


def test_models_that_existed_before_the_cell_are_not_new(saved):
    shell = saved
    run(shell, "%%tf_mem -q --as m\nalias = trained\nalso = [trained]")
    assert shell.user_ns["m"].new_models == []
    assert "New models" not in str(shell.user_ns["m"])


def test_a_model_trained_in_the_cell_is_new_and_not_called_restored(saved):
    shell = saved
    run(shell, "%%fresh_model -q --as r\n"
               "fresh = make_model()\nfresh.fit(np.zeros((8, 64)), np.zeros((8, 2)), verbose=0)")
    result = shell.user_ns["r"]
    (model,) = result.cell.new_models
    assert model["held_by"] == ["fresh"] and model["optimizer_state"] == "trained"
    assert model["optimizer_bytes"] >= 2 * WEIGHT_BYTES
    text = str(result)
    assert "New models in this cell" in text and "compile=False" not in text


def test_a_model_deleted_in_the_cell_is_not_kept_alive_by_the_measurement(saved):
    shell = saved
    run(shell, "import weakref, gc\nref = weakref.ref(trained)")
    run(shell, "%%tf_mem -q --as m\ndel trained\ngc.collect()")
    run(shell, "gc.collect()")
    assert shell.user_ns["m"].new_models == []
    run(shell, "%clear_tf -q")
    assert shell.user_ns["ref"]() is None, "the measurement must hold models weakly"


def test_in_a_script_the_module_globals_are_walked():
    # No IPython: the variables of the module that enters the block, and only the user's
    # model (a loaded Sequential keeps an inner Functional alive that a gc scan would list).
    script = (
        "import os\nos.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'\n"
        + SAVE_A_TRAINED_MODEL
        + "from kerasmagic import measure\n"
        "with measure('load') as m:\n"
        "    loaded = keras.models.load_model(path)\n"
        "print([(x['optimizer_state'], x['held_by']) for x in m.new_models])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[('restored', ['loaded'])]"


def test_an_h5_load_is_not_said_to_restore_a_state_it_did_not_restore(saved):
    """Seed 003's `.h5` case: Keras 3 builds the optimizer with its step counter and learning rate
    only (12 B), leaving the file's moments behind; the report says so, read from the variables."""
    shell = saved
    run(shell, "h5 = path.replace('.keras', '.h5')\n"
               "trained.compile(optimizer='adam', loss=keras.losses.MeanSquaredError())\n"
               "trained.fit(np.zeros((8, 64)), np.zeros((8, 2)), verbose=0)\ntrained.save(h5)")
    run(shell, "%%tf_mem -q --as m\nfrom_h5 = keras.models.load_model(h5)")
    (model,) = shell.user_ns["m"].new_models
    loaded, trained = shell.user_ns["from_h5"], shell.user_ns["trained"]
    # Independent of the report: the loaded optimizer has its two scalars and none of the 8 slots.
    assert len(loaded.optimizer.variables) == 2 < len(trained.optimizer.variables)
    assert model["optimizer_read"]["filled_slots"] == 0 and model["optimizer_read"]["scalar_bytes"] == 12
    text = str(shell.user_ns["m"])
    assert "came with its optimizer state" not in text
    assert "without slot variables" in text and "not a saved optimizer state" in text


def test_json_plus_weights_gets_an_empty_optimizer_and_is_told_so(saved):
    """The weights file came from a model trained with another optimizer: Keras skips its optimizer
    variables (their count differs), so the rebuilt model's optimizer is empty: not "restored"."""
    shell = saved
    run(shell, "weights = path.replace('.keras', '.weights.h5')\n"
               "other = keras.models.clone_model(trained)\n"
               "other.compile(optimizer=keras.optimizers.SGD(momentum=0.9), loss='mse')\n"
               "other.fit(np.ones((8, 64)), np.ones((8, 2)), verbose=0); other.save_weights(weights)\n"
               "config = trained.to_json()")
    run(shell, "%%tf_mem -q --as m\n"
               "import warnings\n"
               "with warnings.catch_warnings():\n"
               "    warnings.simplefilter('ignore')\n"
               "    rebuilt = keras.models.model_from_json(config)\n"
               "    rebuilt.load_weights(weights)")
    (model,) = shell.user_ns["m"].new_models
    optimizer = shell.user_ns["rebuilt"].optimizer
    text = str(shell.user_ns["m"])
    assert "came with its optimizer state" not in text
    assert model["optimizer_state"] == "restored", "precondition: Keras built an optimizer while loading"
    # Independent of the report: the optimizer's step is 0 and every slot is zero.
    assert int(optimizer.iterations.numpy()) == 0
    slots = [v for v in optimizer.variables if not any(word in v.path for word in ("iteration", "learning_rate"))]
    assert slots and not any(shell.user_ns["np"].any(v.numpy()) for v in slots)
    assert "all zeros, step 0: no saved optimizer state is in it" in text


def test_a_keras_load_says_how_many_slots_came_back_checked_against_the_trained_ones(saved):
    shell = saved
    # Trained on non-zero data, so that its moments are not zeros (the fixture's are).
    run(shell, "trained.fit(np.ones((8, 64)), np.ones((8, 2)), verbose=0); trained.save(path)")
    run(shell, "%%tf_mem -q --as m\nloaded = keras.models.load_model(path)")
    (model,) = shell.user_ns["m"].new_models
    import numpy as np

    loaded, trained = shell.user_ns["loaded"], shell.user_ns["trained"]
    pairs = list(zip(loaded.optimizer.variables, trained.optimizer.variables, strict=True))
    equal = sum(1 for a, b in pairs if np.array_equal(a.numpy(), b.numpy()) and np.any(b.numpy()))
    read = model["optimizer_read"]
    assert read["slots"] == read["restored_slots"] == read["filled_slots"] == 8
    assert equal >= read["filled_slots"], "every slot said restored holds the trained value"
    assert read["iterations"] == int(trained.optimizer.iterations.numpy()) == 2
    assert "8 slot variables of its Adam (8 holding non-zero values)" in str(shell.user_ns["m"])


def test_a_tf_keras_savedmodel_loaded_without_compile_is_said_to_bring_its_slots_and_the_fix_works(shell):
    """The SavedModel path: tf-keras loads the optimizer's variables even with compile=False (in a
    RestoredOptimizer, never "built"), so "compile=False leaves it out" would be advice that frees
    nothing. The report says what came, read from the variables, and its advice is followed here."""
    tf_keras = pytest.importorskip("tf_keras", reason="tf-keras is not installed in this environment")
    shell.user_ns["tf_keras"] = tf_keras
    run(shell, "import os, shutil, tempfile, numpy as np\n"
               "trained = tf_keras.Sequential([tf_keras.Input((64,)), tf_keras.layers.Dense(256), "
               "tf_keras.layers.Dense(2)])\n"
               "trained.compile(optimizer='adam', loss='mse')\n"
               "trained.fit(np.ones((8, 64)), np.ones((8, 2)), verbose=0)\n"
               "folder = tempfile.mkdtemp()\n"
               "trained.save(os.path.join(folder, 'full'), save_format='tf')")
    try:
        run(shell, "%%tf_mem -q --as m\nloaded = tf_keras.models.load_model(os.path.join(folder, 'full'), "
                   "compile=False)")
        (model,) = shell.user_ns["m"].new_models
        # Independent of the report: the optimizer object holds Adam's two moments per weight.
        variables = shell.user_ns["loaded"].optimizer.variables()
        moments = [v for v in variables if "/m/" in v.name or "/v/" in v.name]
        moment_bytes = sum(v.numpy().nbytes for v in moments)
        assert moment_bytes == 2 * sum(w.numpy().nbytes for w in shell.user_ns["loaded"].weights)
        assert model["optimizer_state"] == "restored"
        assert model["optimizer_read"]["restored_slot_bytes"] >= moment_bytes
        text = str(shell.user_ns["m"])
        assert "although loaded with compile=False" in text and "include_optimizer=False" in text, text
        assert "load_model(path, compile=False) leaves it out" not in text
        # Follow the advice: saved without the optimizer, the load brings none.
        run(shell, "trained.save(os.path.join(folder, 'lean'), save_format='tf', include_optimizer=False)")
        run(shell, "%%tf_mem -q --as lean\nserving = tf_keras.models.load_model(os.path.join(folder, 'lean'), "
                   "compile=False)")
        (lean,) = shell.user_ns["lean"].new_models
        assert getattr(shell.user_ns["serving"], "optimizer", None) is None
        assert lean["optimizer_bytes"] == 0 and lean["optimizer_state"] == "none"
    finally:
        run(shell, "shutil.rmtree(folder)")

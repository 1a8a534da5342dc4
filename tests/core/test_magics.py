"""The magics in a real InteractiveShell with real TensorFlow/Keras on CPU."""

from __future__ import annotations

import gc
import re
import sys

import pytest
from IPython.core.error import UsageError

from kerasmagic.probes.process import rss_bytes

from shell_helpers import error_of, registry_pins_graphs, run

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]


def test_model_held_only_by_the_output_cache_is_freed(keras_shell):
    shell = keras_shell
    run(shell, "make_model()")  # displayed: now Out[n], _ and IPython's hidden copies hold it
    run(shell, "ref = weakref.ref(_)")
    run(shell, "gc.collect()")
    assert shell.user_ns["ref"]() is not None, "precondition: the output cache keeps the model alive"
    report = run(shell, "%clear_tf -q -o")
    assert shell.user_ns["ref"]() is None
    assert report.models_freed >= 1
    assert any(item.startswith("Out[") for item in report.dropped)
    assert any(item.startswith("user_ns_hidden[") for item in report.dropped)


def test_a_gib_array_held_by_the_last_exception_is_freed(keras_shell):
    shell = keras_shell
    cell = "def load():\n    big = np.ones(2**27)  # 1 GiB\n    raise ValueError('bad shape')\nload()"
    result = shell.run_cell(cell, store_history=True)
    assert isinstance(result.error_in_exec, ValueError)
    gc.collect()
    before = rss_bytes()
    report = run(shell, "%clear_tf -q -o")
    freed = before - rss_bytes()
    assert freed > 0.9 * 2**30, f"only {freed / 2**20:.0f} MiB freed"
    assert any("last exception ValueError" in item for item in report.dropped)
    assert not hasattr(sys, "last_value") and shell.InteractiveTB.tb is None


def test_who_names_every_holder(keras_shell):
    shell = keras_shell
    run(shell, "model = make_model()\nhistory = model.fit(x, y, epochs=1, verbose=0)")
    run(shell, "make_model()")
    snapshot = run(shell, "%tf_mem --who -o")
    text = str(snapshot)
    assert re.search(r"model, history\.model|history\.model, model", text)
    assert "Out[" in text and "user_ns_hidden['_']" in text


def test_layer_names_restart(keras_shell):
    shell = keras_shell
    run(shell, "for _i in range(3): make_model()")
    run(shell, "%clear_tf -q")
    assert run(shell, "make_model().layers[0].name") == "dense"
    run(shell, "%%fresh_model -q\nm = make_model()")
    assert run(shell, "m.layers[0].name") == "dense"


def test_alive_model_keeps_training_and_predicting_after_the_registry_purge(keras_shell):
    shell = keras_shell
    run(shell, "keep = make_model(); keep.fit(x, y, epochs=1, verbose=0)")
    run(shell, "for _i in range(3):\n    _m = make_model(); _m.fit(x, y, epochs=1, verbose=0)\ndel _m, _i")
    run(shell, "before = keep.predict(x, verbose=0)")
    report = run(shell, "%clear_tf -q -o")
    assert report.registry is not None
    if registry_pins_graphs():
        assert report.registry.purged >= 3, report.registry
        assert report.registry.kept_alive >= 1
    else:
        # TF 2.22+: nothing to purge, said once in the step, and no "Still held" row about it.
        assert report.registry.purged == 0 and "109334" in report.registry.skipped.detail, report.registry
        assert not [line for line in report.still_held if "registry" in line], report.still_held
    run(shell, "after = keep.predict(x, verbose=0)")
    run(shell, "np.testing.assert_array_equal(before, after)")
    losses = run(shell, "keep.fit(x, y, epochs=3, batch_size=64, verbose=0).history['loss']")
    assert losses[-1] < losses[0]


def test_registry_growth_stops_with_fresh_model(keras_shell):
    shell = keras_shell
    counts = []
    for _ in range(4):
        run(shell, "%%fresh_model -q model\nmodel = make_model(); model.fit(x, y, epochs=1, verbose=0)"
            if "model" in shell.user_ns else
            "%%fresh_model -q\nmodel = make_model(); model.fit(x, y, epochs=1, verbose=0)")
        counts.append(run(shell, "%tf_mem -o").tensorflow["custom_gradient_entries"])
    if registry_pins_graphs():
        assert counts[-1] == counts[1], f"registry keeps growing: {counts}"
        return
    # TF 2.22+: the entries still add up (two per Adam fit), but none holds a graph, so none holds a
    # model's weights: the count is not memory, and %tf_mem does not call it that.
    from tensorflow.python.framework import ops

    from kerasmagic.registry_purge import _captured_graph

    entries = [entry for key, entry in ops.gradient_registry._registry.items() if key.startswith("CustomGradient-")]
    assert len(entries) >= counts[0] and entries, counts
    assert all(_captured_graph(entry.get("type")) is None for entry in entries)
    assert "pin no graph" in str(run(shell, "%tf_mem -o"))


def test_peak_of_a_cell_that_allocates_and_frees_500_mb(keras_shell):
    shell = keras_shell
    run(shell, "%%tf_mem -q --as m\nblock = np.ones(500 * 10**6 // 8)\ndel block")
    measured = shell.user_ns["m"].rss_peak_above_start_bytes
    assert abs(measured - 500e6) < 0.05 * 500e6, f"peak {measured / 1e6:.0f} MB for a 500 MB cell"
    assert abs(shell.user_ns["m"].rss_delta_bytes) < 50e6


def test_tf_mem_cell_reports_then_the_users_exception_propagates(keras_shell, capsys):
    shell = keras_shell
    result = shell.run_cell("%%tf_mem --as m\nvalue = 41\nraise KeyError('user error')", store_history=True)
    assert isinstance(result.error_in_exec, KeyError) and result.error_in_exec.args == ("user error",)
    assert shell.user_ns["value"] == 41
    assert shell.user_ns["m"].error == "KeyError"
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # IPython 8 colours tracebacks by default
    assert "raised KeyError" in out
    assert out.index("raised KeyError") < out.index("KeyError: 'user error'")
    assert "kerasmagic/magics.py" not in out, "our frames must be hidden from the user's traceback"
    # The traceback points at the line the user sees (the magic line is line 1).
    assert "----> 3 raise KeyError('user error')" in out


def test_fresh_model_keeps_mixed_precision_and_seed(keras_shell):
    shell = keras_shell
    run(shell, "keras.config.set_dtype_policy('mixed_float16'); keras.utils.set_random_seed(7)")
    report = run(shell, "%clear_tf -q -o")
    assert run(shell, "keras.config.dtype_policy().name") == "mixed_float16"
    seed_of = "__import__('keras.src.backend.common.global_state').src.backend.common.global_state" \
        ".get_global_attribute('global_random_seed')"
    assert run(shell, seed_of) == 7
    assert report.preserved_settings["dtype_policy"] == "mixed_float16"
    run(shell, "%%fresh_model -q --seed 3\nw = make_model().layers[0].kernel.numpy()")
    run(shell, "%%fresh_model -q --seed 3\nw2 = make_model().layers[0].kernel.numpy()")
    run(shell, "np.testing.assert_array_equal(w, w2)")
    assert run(shell, "keras.config.dtype_policy().name") == "mixed_float16"
    run(shell, "keras.config.set_dtype_policy('float32')")


def test_clear_inside_a_graph_block(keras_shell):
    shell = keras_shell
    run(shell, "import tensorflow as tf\ng = tf.Graph()\nkeras.layers.Dense(1); keras.layers.Dense(1)")
    run(shell, "with g.as_default():\n    c = tf.constant(1.0)\n"
               "    r = get_ipython().run_line_magic('clear_tf', '-q -o')")
    report = shell.user_ns["r"]
    keras_step = next(s for s in report.steps if s.name.startswith("clear Keras"))
    assert keras_step.skipped is None and "graph kept" in keras_step.detail
    # Keras' own state was reset all the same (Keras 3.15 and 3.16 keep it in different trackers).
    assert "GLOBAL_STATE_TRACKER" in keras_step.detail
    assert run(shell, "keras.layers.Dense(1).name") == "dense"
    assert run(shell, "len(g.get_operations())") == 1


def test_never_deletes_a_variable_it_was_not_given(keras_shell):
    shell = keras_shell
    run(shell, "model = make_model(); same = model; data = np.ones(10**6)")
    report = run(shell, "%clear_tf model -q -o")
    assert "model" not in shell.user_ns
    assert shell.user_ns["same"] is not None and shell.user_ns["data"].shape == (10**6,)
    assert any("same" in line for line in report.still_held)


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("%clear_tf no_such_variable", "no variable named 'no_such_variable'"),
        ("%clear_tf --seed forty", "the seed must be an integer from 0 to 2**32 - 1, got 'forty'"),
        ("%clear_tf --frobnicate", "unrecognized arguments"),
        ("%tf_mem --who --live", "--live shows a live view"),
        ("%tf_mem --as 1x", "--as needs a variable name"),
        ("%%tf_mem --who\n1", "belong to the line magic"),
        ("%%fresh_model --timeout 5\n1", "only work with --isolate"),
        ("%%fresh_model --isolate --env NOEQUALS\n1", "--env takes KEY=VALUE"),
        ("%%fresh_model --isolate model\n1", "nothing to delete"),
        ("%%fresh_model --isolate --timeout -1\n1", "finite number of seconds > 0"),
        ("%%fresh_model --as\n1", "expected one argument"),
        ("%%fresh_model not_defined\n1", "no variable named 'not_defined'"),
        ("%%tf_mem\nx = (1,\nprint(x)", "does not parse"),
        ("%%tf_mem\nprecious.append(4)\nawait something()", "top-level await"),
        ("%clear_tf --seed -1", "from 0 to 2**32 - 1"),
        ("%%fresh_model --seed 4294967296\nprecious.append(4)", "from 0 to 2**32 - 1"),
    ],
)
def test_bad_arguments_raise_usage_error_and_keep_the_users_data(keras_shell, capsys, line, fragment):
    shell = keras_shell
    run(shell, "precious = [1, 2, 3]")
    result = shell.run_cell(line, store_history=True)
    error = error_of(result)
    assert isinstance(error, UsageError), repr(error)
    assert fragment in str(error)
    assert shell.user_ns["precious"] == [1, 2, 3]
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err


def test_help_has_examples(keras_shell):
    for name, kind in (("tf_mem", "line"), ("clear_tf", "line"), ("fresh_model", "cell")):
        doc = keras_shell.find_magic(name, kind).__doc__
        assert "Examples" in doc and "--" in doc, name


def test_load_and_unload_are_symmetric(ipython):
    before_line = set(ipython.magics_manager.magics["line"])
    before_cell = set(ipython.magics_manager.magics["cell"])
    before_hooks = {name: list(callbacks) for name, callbacks in ipython.events.callbacks.items()}
    ipython.run_line_magic("load_ext", "kerasmagic")
    assert "tf_mem" in ipython.magics_manager.magics["line"]
    assert "fresh_model" in ipython.magics_manager.magics["cell"]
    ipython.run_line_magic("unload_ext", "kerasmagic")
    assert set(ipython.magics_manager.magics["line"]) == before_line
    assert set(ipython.magics_manager.magics["cell"]) == before_cell
    assert {name: list(callbacks) for name, callbacks in ipython.events.callbacks.items()} == before_hooks
    ipython.run_line_magic("load_ext", "kerasmagic")
    ipython.run_line_magic("unload_ext", "kerasmagic")


def test_a_kept_report_does_not_hold_the_models_it_lists(keras_shell):
    shell = keras_shell
    run(shell, "model = make_model(); ref = weakref.ref(model)")
    run(shell, "snap = %tf_mem --who -o")
    assert "model" in str(shell.user_ns["snap"])
    run(shell, "%clear_tf model -q")
    assert shell.user_ns["ref"]() is None


def test_deleting_a_name_keeps_unrelated_outputs_that_share_an_interned_value(keras_shell):
    shell = keras_shell
    run(shell, "2 + 3")
    run(shell, "3 > 2")
    run(shell, "n = 5; flag = True")
    outputs_before = dict(shell.user_ns["Out"])
    report = run(shell, "%clear_tf n flag -o")
    assert "n" not in shell.user_ns and "flag" not in shell.user_ns
    assert {k: v for k, v in shell.user_ns["Out"].items() if k in outputs_before} == outputs_before
    assert report.dropped == ["variable n", "variable flag"]


def test_duplicate_names_delete_once_and_modules_are_flagged(keras_shell):
    shell = keras_shell
    run(shell, "import json as js; model = make_model()")
    report = run(shell, "%clear_tf model model js -o")
    step = report.steps[0]
    assert step.skipped is None, step.skipped
    assert step.items[:2] == ["variable model", "variable js (a module: deleting it frees no memory)"]


def test_who_survives_a_key_whose_repr_raises_and_names_private_variables(keras_shell):
    shell = keras_shell
    run(shell, "class Key:\n    def __repr__(self):\n        raise RuntimeError('no repr')")
    run(shell, "table = {Key(): make_model()}; _private = make_model()")
    text = str(run(shell, "%tf_mem --who -o"))
    assert "table[<Key>]" in text and "_private" in text
    header = "Models alive but not reachable from the notebook"
    unreachable = text.split(header)[1] if header in text else ""
    assert "Functional" not in unreachable, "a Sequential's inner Functional is part of it, not another model"


def test_semicolon_after_a_comment_and_report_shown_once(keras_shell, capsys):
    shell = keras_shell
    assert run(shell, "%%tf_mem -q\n1 + 1;  # hidden") is None
    assert run(shell, "%%tf_mem -q\n1 + 1  # shown;") == 2
    capsys.readouterr()
    run(shell, "%clear_tf -o")
    assert capsys.readouterr().out.count("kerasmagic: cleaned in") == 1


def test_reports_and_tracebacks_name_the_cell_as_in_numbers_it(shell, capsys):
    # IPython 9.8 moved the moment it counts a cell; both the report's label and the
    # traceback's "Cell In[n]" must be the number the notebook shows, whichever IPython runs.
    run(shell, "x = 1")
    result = shell.run_cell("%%tf_mem -q --as m\nvalue = 41\nraise KeyError('user error')", store_history=True)
    number = result.execution_count
    assert shell.user_ns["m"].label == f"cell [{number}]"
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    # IPython 8+ names the cell "Cell In[n], line 3"; IPython 7.34 "<ipython-input-n-hash>" with
    # the line's arrow: either way the notebook's number and the user's line.
    ipython7 = rf"<ipython-input-{number}-\w+> in <module>\n(.*\n)*----> 3 raise KeyError"
    assert f"In[{number}], line 3" in out or re.search(ipython7, out), out
    assert "compat.py" not in out, "the shim for IPython 7 hides its frame"
    isolated = shell.run_cell("%%fresh_model --isolate -q --as job\nvalue = 42", store_history=True)
    assert isolated.success and shell.user_ns["value"] == 42
    assert shell.user_ns["job"].label == f"cell [{isolated.execution_count}]"

"""What each run of a TensorFlow cell leaves that no clean frees (issue 20): the stack traces
TensorFlow keeps of the ops it traced, each holding the cell's compiled code for good.

Checked through a real InteractiveShell against outside evidence: the cell's code object stays
alive after every run (weak references), and the count the report gives is the number of
references to it that nothing in Python holds (``sys.getrefcount``).
"""

from __future__ import annotations

import gc
import sys
import types

import pytest

from kerasmagic.fresh import NOTE_MIN_TRACES

from shell_helpers import run

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]

#: A Keras fit under %%fresh_model that records a weak reference to its own code object. The
#: last line is a statement, so the whole cell is one code object (a last expression gets its own).
FIT_CELL = (
    "%%fresh_model model -q -o\n"
    "model = make_model()\n"
    "model.fit(x, y, epochs=1, verbose=0)\n"
    "cell_codes.append(weakref.ref(sys._getframe().f_code))\n"
    "ran = True"
)


def test_each_run_of_a_fit_cell_leaves_its_code_to_tensorflows_stack_traces_and_the_report_counts_them(
        keras_shell):
    shell = keras_shell
    run(shell, "import sys\ncell_codes = []")
    reports = [run(shell, FIT_CELL) for _ in range(3)]
    gc.collect()
    refs = shell.user_ns["cell_codes"]
    codes = [ref() for ref in refs]
    # The cause: every run's code object is still alive, a new one per run, though nothing in Python
    # refers to it (the models are gone; %%fresh_model freed them).
    assert all(code is not None for code in codes) and len({id(code) for code in codes}) == 3
    for code in codes:
        assert [r for r in gc.get_referrers(code) if r is not codes and not isinstance(r, types.FrameType)] == []
    del code, codes
    for report, ref in zip(reports, refs, strict=True):
        code = ref()
        # getrefcount's own argument and `code` are the only references from Python.
        held_outside = sys.getrefcount(code) - 2
        # A re-run traces the same ops again: as many stack traces per run, not fewer.
        assert report.tf_stack_traces == held_outside and held_outside > 100, (report.tf_stack_traces, held_outside)
        text = str(report)
        assert f"TensorFlow keeps {held_outside} stack traces of the ops this cell traced" in text, text
        assert "--isolate" in text
        assert report.to_dict()["tf_stack_traces"] == held_outside


def test_a_cell_that_traces_nothing_or_little_is_not_said_to_keep_anything(keras_shell):
    shell = keras_shell
    report = run(shell, "%%fresh_model -q -o\nvalue = sum(range(10))")
    assert report.tf_stack_traces == 0 and "stack traces" not in str(report), report.tf_stack_traces
    # Building a model without fitting it leaves a few (its variables' creation): counted, too few to say.
    report = run(shell, "%%fresh_model -q -o\nprobe = make_model()\ndel probe")
    assert 0 < report.tf_stack_traces < NOTE_MIN_TRACES, report.tf_stack_traces
    assert "stack traces" not in str(report)


def test_fresh_model_as_a_context_manager_counts_its_calling_cells_traces(keras_shell):
    shell = keras_shell
    run(shell, "from kerasmagic import fresh_model")
    run(shell, (
        "with fresh_model() as result:\n"
        "    model = make_model()\n"
        "    model.fit(x, y, epochs=1, verbose=0)"))
    assert shell.user_ns["result"].tf_stack_traces > 100, shell.user_ns["result"].tf_stack_traces
    run(shell, "with fresh_model('model') as quiet:\n    value = 1")
    assert shell.user_ns["quiet"].tf_stack_traces == 0

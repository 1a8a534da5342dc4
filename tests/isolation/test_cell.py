"""run_cell_isolated() through a real InteractiveShell: inputs found, outputs assigned, rich output."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from IPython.utils.capture import capture_output

from kerasmagic.isolation import IsolationWarning
from kerasmagic.isolation.cell import run_cell_isolated

pytestmark = pytest.mark.isolation


def _run(shell, cell, **options):
    settings = dict(inputs=None, outputs=None, no_return=False, timeout=60, gpu=None, env={}, seed=None, quiet=False)
    settings.update(options)
    return run_cell_isolated(shell, cell, **settings)


def test_inputs_are_found_and_outputs_assigned(isolated_shell):
    shell = isolated_shell
    shell.run_cell("import numpy as np\ndef scale(v, by):\n    return v * by\n"
                   "data = np.arange(5)\nfactor = 3\nunused = 'x'")
    before = {k: v for k, v in shell.user_ns.items()}
    result = _run(shell, "scaled = scale(data, factor)\ntotal = int(scaled.sum())\nfactor_seen = factor")
    assert {s.name for s in result.sent} == {"scale", "data", "factor"}
    np.testing.assert_array_equal(shell.user_ns["scaled"], np.arange(5) * 3)
    assert shell.user_ns["total"] == 30 and shell.user_ns["factor_seen"] == 3
    changed = {k for k in shell.user_ns if k not in before or shell.user_ns[k] is not before[k]}
    assert changed == {"scaled", "total", "factor_seen"}


def test_out_and_no_return(isolated_shell):
    shell = isolated_shell
    _run(shell, "a = 1\nb = 2", outputs=["b"])
    assert "b" in shell.user_ns and "a" not in shell.user_ns
    _run(shell, "c = 3", no_return=True)
    assert "c" not in shell.user_ns


def test_explicit_in_sends_a_name_the_cell_does_not_mention(isolated_shell):
    shell = isolated_shell
    shell.user_ns["hidden"] = 7
    _run(shell, "value = eval('hidden')", inputs=["hidden"])
    assert shell.user_ns["value"] == 7


def test_modules_are_imported_not_pickled(isolated_shell):
    shell = isolated_shell
    shell.run_cell("import json")
    result = _run(shell, "text = json.dumps([1])")
    assert result.sent[0].how.startswith("module")
    assert shell.user_ns["text"] == "[1]"


def test_display_and_last_expression_come_back_as_mimebundles(isolated_shell):
    cell = (
        "class Card:\n"
        "    def _repr_html_(self):\n        return '<b>card</b>'\n"
        "display(Card())\n"
        "40 + 2"
    )
    with capture_output() as captured:
        _run(isolated_shell, cell, no_return=True)
    bundles = [output.data for output in captured.outputs]
    assert bundles[0]["text/html"] == "<b>card</b>"
    assert bundles[1]["text/plain"] == "42"


def test_matplotlib_figures_arrive_as_png(isolated_shell):
    import matplotlib  # noqa: F401 - a hard test dependency: missing, it must fail, not skip
    cell = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nplt.figure(); plt.plot([3, 1])"
    with capture_output() as captured:
        _run(isolated_shell, cell, no_return=True)
    pngs = [o.data for o in captured.outputs if "image/png" in o.data]
    assert len(pngs) == 2  # one on plt.show(), one left open at the end


def test_a_cell_that_mentions_get_ipython_in_a_string_runs(isolated_shell):
    # Only a get_ipython() *call* (what magics and `!` lines become) needs IPython in the worker.
    _run(isolated_shell, "note = 'run get_ipython() in the kernel, not here'\nsize = len(note)")
    assert isolated_shell.user_ns["size"] == len("run get_ipython() in the kernel, not here")


def test_names_bound_by_match_patterns_come_back(isolated_shell):
    isolated_shell.run_cell("from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"
                            "items = [1, 2, 3]\nconfig = {'k': 'v', 'other': 0}\norigin = Point(4, 5)")
    cell = ("match items:\n    case [first, *rest]:\n        pass\n"
            "match config:\n    case {'k': value, **others}:\n        pass\n"
            "match origin:\n    case Point(x=px, y=py) as whole:\n        pass")
    result = _run(isolated_shell, cell)
    ns = isolated_shell.user_ns
    assert (ns["first"], ns["rest"], ns["value"], ns["others"]) == (1, [2, 3], "v", {"other": 0})
    assert (ns["px"], ns["py"], ns["whole"]) == (4, 5, ns["origin"])
    assert {s.name for s in result.sent} == {"items", "config", "origin", "Point"}


def test_a_name_bound_only_in_an_inner_function_does_not_hide_a_global_read(isolated_shell):
    isolated_shell.user_ns["offset"] = 10
    cell = ("def outer():\n    def inner():\n        offset = 1\n        return offset\n"
            "    return inner() + offset\ntotal = outer()")
    result = _run(isolated_shell, cell)
    assert isolated_shell.user_ns["total"] == 11
    assert [s.name for s in result.sent] == ["offset"]


@pytest.mark.parametrize("last, shown", [
    ("x;", False),
    ("x;  # a note after the semicolon", False),
    ("x  # a note;", True),
    ("x", True),
])
def test_a_last_semicolon_hides_the_value_under_isolate_as_in_process(shell, last, shown):
    def shows_41(cell):
        with capture_output() as captured:
            result = shell.run_cell(cell, store_history=True)
        assert result.success, result.error_in_exec
        texts = [captured.stdout] + [output.data.get("text/plain", "") for output in captured.outputs]
        return any("41" in text for text in texts)

    assert shows_41(f"%%fresh_model -q\nx = 41\n{last}") is shown
    assert shows_41(f"%%fresh_model -q --isolate\nx = 41\n{last}") is shown


def test_an_isolated_traceback_numbers_lines_as_the_notebook_does(shell, capsys):
    # The magic's line is line 1, in-process and under --isolate alike.
    body = "def fail():\n    raise KeyError('user error')\n\nfail()"
    capsys.readouterr()
    in_process = shell.run_cell(f"%%fresh_model -q\n{body}", store_history=True)
    assert isinstance(in_process.error_in_exec, KeyError)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # IPython 7 colours it
    assert "----> 5 fail()" in shown and "----> 3     raise KeyError('user error')" in shown, shown
    isolated = shell.run_cell(f"%%fresh_model -q --isolate\n{body}", store_history=True)
    child = isolated.error_in_exec.child_traceback
    assert 'File "<isolated cell>", line 5, in <module>' in child, child
    assert 'File "<isolated cell>", line 3, in fail' in child, child
    assert "    raise KeyError('user error')" in child


@pytest.mark.parametrize("name, binding", [
    ("_oh", "_oh = {}"),
    ("_dh", "_dh = []"),
    ("_ih", "_ih = ['x']"),
    ("get_ipython", "def get_ipython():\n    return None"),
])
def test_a_cell_binding_a_name_ipython_needs_does_not_bring_it_back(shell, name, binding):
    # --out and --as refuse these names; a cell that merely binds one must not put it back
    # either: without _oh every later cell with a value fails, without get_ipython every magic.
    ipython_own = shell.user_ns[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture_output():
            result = shell.run_cell(f"%%fresh_model -q --isolate\n{binding}\nkept = 7", store_history=True)
    assert result.success, result.error_in_exec
    assert shell.user_ns[name] is ipython_own
    assert shell.user_ns["kept"] == 7  # the other names come back
    said = [str(w.message) for w in caught if issubclass(w.category, IsolationWarning)]
    assert len(said) == 1 and said[0].count("\n") == 0, said
    assert f"{name}: IPython's own" in said[0] and "rename it" in said[0], said
    with capture_output() as captured:  # IPython still works: a value is shown, a magic runs
        assert shell.run_cell("40 + 2", store_history=True).success
        assert shell.run_cell("%pwd", store_history=True).success
    assert "42" in captured.stdout + "".join(output.data.get("text/plain", "") for output in captured.outputs)


def test_a_cell_may_still_bind_underscore_as_a_throwaway(shell):
    with capture_output():
        result = shell.run_cell("%%fresh_model -q --isolate\nfor _ in range(3):\n    pass\ntotal = _",
                                store_history=True)
    assert result.success, result.error_in_exec
    assert shell.user_ns["total"] == 2 and shell.user_ns["_"] == 2  # as in-process: IPython stops updating `_`

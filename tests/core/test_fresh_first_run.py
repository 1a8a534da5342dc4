"""``%%fresh_model NAME`` on a loop cell's first run, where NAME does not exist yet (issue 19 item 12),
in a real InteractiveShell: it runs; a name that is a typo is still refused, and nothing is lost."""

from __future__ import annotations

import pytest

from shell_helpers import error_of, run

pytestmark = pytest.mark.shell

LOOP_CELL = "%%fresh_model --as report model history\nmodel = [1] * 1000\nhistory = {'loss': [0.5]}\nruns.append(1)"


def test_the_first_run_of_a_loop_cell_runs_and_says_one_quiet_line(shell):
    run(shell, "runs = []")
    assert "model" not in shell.user_ns  # a fresh kernel: nothing to delete yet
    run(shell, LOOP_CELL)
    report = shell.user_ns["report"]
    assert shell.user_ns["runs"] == [1] and shell.user_ns["model"] == [1] * 1000
    assert report.not_yet == ["model", "history"]
    assert "nothing to delete yet: model, history are created by this cell (its first run)" in str(report)
    # The second run deletes the first run's objects, as it always did.
    first_model = shell.user_ns["model"]
    run(shell, LOOP_CELL)
    report = shell.user_ns["report"]
    assert report.not_yet == [] and shell.user_ns["runs"] == [1, 1]
    assert shell.user_ns["model"] is not first_model
    assert "variable model" in report.clean.to_dict()["steps"][0]["items"], report.clean.to_dict()["steps"][0]


def test_quiet_first_run_prints_nothing(shell, capsys):
    run(shell, "%%fresh_model -q model\nmodel = 1")
    assert capsys.readouterr().out == ""


def test_a_typo_is_refused_with_what_was_meant_and_nothing_is_lost(shell):
    run(shell, "runs = []")
    run(shell, LOOP_CELL)
    precious = shell.user_ns["model"]
    result = shell.run_cell("%%fresh_model modle\nmodel = [2]\nruns.append(2)", store_history=True)
    error = error_of(result)
    assert error is not None and type(error).__name__ == "UsageError", error
    assert str(error) == ("no variable named 'modle', and the cell does not create it either: nothing was deleted; "
                          "did you mean 'model'? (%who lists your variables)"), str(error)
    assert shell.user_ns["model"] is precious and shell.user_ns["runs"] == [1]  # nothing deleted, nothing ran


def test_a_typo_on_a_fresh_kernel_is_refused_too(shell):
    result = shell.run_cell("%%fresh_model modle\nmodel = [2]", store_history=True)
    assert "no variable named 'modle', and the cell does not create it either" in str(error_of(result))
    assert "model" not in shell.user_ns


def test_the_python_api_in_a_loop_runs_its_first_iteration(shell):
    run(shell, (
        "from kerasmagic import fresh_model\n"
        "seen = []\n"
        "for fold in range(3):\n"
        "    with fresh_model('model', 'history') as result:\n"
        "        model = [fold] * 1000\n"
        "        history = {'fold': fold}\n"
        "    seen.append(result.not_yet)"))
    assert shell.user_ns["seen"] == [["model", "history"], [], []]
    assert shell.user_ns["model"] == [2] * 1000


def test_assigned_names_are_the_cells_own_top_level_ones():
    from kerasmagic.fresh import assigned_names

    source = ("import numpy as np\nfrom keras import layers as L\nmodel = build()\nx, (y, z) = 1, (2, 3)\n"
              "for epoch in range(2):\n    with open('f') as handle:\n        history = fit()\n"
              "def helper():\n    inner = 1\nclass Net:\n    width = 3\nsquares = [k * k for k in range(3)]\n"
              "try:\n    pass\nexcept ValueError as problem:\n    pass\ncount += 1\n")
    assert assigned_names(source) == {"np", "L", "model", "x", "y", "z", "epoch", "handle", "history", "helper",
                                      "Net", "squares", "problem", "count"}
    assert {"a", "b"} <= assigned_names(compile("a = 1\nfor b in []: pass", "<cell>", "exec"))

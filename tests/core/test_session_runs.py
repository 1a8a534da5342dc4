"""TensorFlow 1's Session.run timed per cell: a growing graph's slowdown and a graph rebuilt with only
constants changed, each checked against what the cell measured itself (time.perf_counter around
each call, op counts read from the graph)."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

import kerasmagic
from kerasmagic import session_runs

from shell_helpers import run

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]

#: Seed 004's pattern, in a graph of its own (eager mode stays on for the rest of the process):
#: each iteration bakes its learning rate into new ops and runs them. Times and op counts are
#: taken by the cell itself, outside kerasmagic.
LOOP = """
import time
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    x = tf1.placeholder(tf.float32, (None, 4))
    w = tf1.Variable(tf.ones((4, 1)))
    sess = tf1.Session(graph=graph)
    sess.run(tf1.global_variables_initializer())
    data = np.ones((8, 4), np.float32)
    times, ops = [], []
    for i in range({iterations}):
        lr = tf.constant(0.01 * (i + 1), name="learning_rate")
        for _ in range({matmuls}):
            loss = tf.reduce_mean(tf.matmul(x, w))
        update = w.assign_sub(lr * loss * tf.ones((4, 1)))
        started = time.perf_counter()
        sess.run(update, {{x: data}})
        times.append(time.perf_counter() - started)
        ops.append(len(graph.get_operations()))
"""

#: The same training step built once, its learning rate fed through a placeholder.
FED = """
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
fed_graph = tf.Graph()
with fed_graph.as_default():
    x = tf1.placeholder(tf.float32, (None, 4))
    lr = tf1.placeholder(tf.float32, ())
    w = tf1.Variable(tf.ones((4, 1)))
    update = w.assign_sub(lr * tf.reduce_mean(tf.matmul(x, w)) * tf.ones((4, 1)))
    fed_sess = tf1.Session(graph=fed_graph)
    fed_sess.run(tf1.global_variables_initializer())
    fed_ops = len(fed_graph.get_operations())
    for i in range(30):
        fed_sess.run(update, {x: np.ones((8, 4), np.float32), lr: 0.01 * (i + 1)})
    fed_ops_after = len(fed_graph.get_operations())
"""


def _loop(shell, iterations: int, matmuls: int) -> None:
    # TensorFlow imported in a cell of its own, as notebooks do: Session.run is wrapped from the next
    # cell on (the watch never imports TensorFlow; the cell that does is not timed).
    run(shell, "import tensorflow as tf")
    run(shell, LOOP.format(iterations=iterations, matmuls=matmuls))


def _kinds(findings: list[dict]) -> dict[str, dict]:
    return {finding["kind"]: finding for finding in findings}


def test_a_loop_that_builds_ops_before_each_run_is_named_with_its_slowdown(shell):
    _loop(shell, 200, 6)
    times, ops = shell.user_ns["times"], shell.user_ns["ops"]
    # What the cell measured itself: the workload really slows down as its graph grows.
    outside_first, outside_last = min(times[:5]), statistics.median(times[-5:])
    assert outside_last >= 2 * session_runs.SLOWDOWN * outside_first, (outside_first, outside_last)
    found = _kinds(session_runs.findings())
    slowdown = found["slowdown"]
    # Our figures are those of the same calls (the wrapper times only the call).
    assert slowdown["calls"] == 201  # the initializer's run and the loop's 200
    assert slowdown["graph_ops"] == ops[-1] == len(shell.user_ns["graph"].get_operations())
    assert outside_first * 0.5 <= slowdown["first_call_s"] <= outside_first * 1.5 + 1e-3, slowdown
    assert outside_last * 0.67 <= slowdown["last_call_s"] <= outside_last * 1.5, slowdown
    ratio = round(slowdown["last_call_s"] / slowdown["first_call_s"])
    assert f"Session.run got {ratio}× slower in cell [" in slowdown["text"]
    assert f"grew to {ops[-1]} ops" in slowdown["text"] and "placeholders" in slowdown["text"]
    # The reports say it: %tf_mem and the leak watch's %tf_mem --cells.
    assert slowdown["text"] in str(kerasmagic.tf_mem())
    assert slowdown["text"] in str(kerasmagic.cell_growth())
    assert kerasmagic.tf_mem().to_dict()["session_runs"][0]["kind"] in ("slowdown", "rebuilt")


def test_a_graph_rebuilt_with_only_its_learning_rate_changed_is_named(shell):
    _loop(shell, 12, 1)
    ops = shell.user_ns["ops"]
    per_build = {after - before for before, after in zip(ops[:-1], ops[1:], strict=True)}
    assert len(per_build) == 1  # the cell's own count: the same number of ops each iteration
    rebuilt = _kinds(session_runs.findings())["rebuilt"]
    assert (rebuilt["ops_per_build"], rebuilt["builds"], rebuilt["constants_changed"]) == (per_build.pop(), 12, 1)
    assert rebuilt["constants"][0]["name"] == "learning_rate"
    assert rebuilt["constants"][0]["values"][0] == "0.01" and rebuilt["constants"][0]["values"][-1] == "0.12"
    assert f"rebuilt the same {rebuilt['ops_per_build']}-op graph 12 times with only constants changed" \
        in rebuilt["text"]
    assert "placeholder" in rebuilt["text"]


def test_a_finding_goes_with_its_graph(shell):
    # Issue 29 item 7: after the graph is dropped and a clean ran, "close the Session ... rebuild it"
    # must not be told any more of a graph nothing holds.
    _loop(shell, 12, 1)
    assert session_runs.findings()
    run(shell, "sess.close()\ndel graph, sess, x, w, lr, loss, update\n%clear_tf -q")
    assert session_runs.findings() == []
    assert "close the Session" not in str(kerasmagic.tf_mem())


def test_a_graph_built_once_and_fed_is_not_named(shell):
    run(shell, "import tensorflow as tf")
    run(shell, FED)
    assert shell.user_ns["fed_ops"] == shell.user_ns["fed_ops_after"]
    assert session_runs.findings() == []
    assert "Session.run" not in str(kerasmagic.cell_growth())


def test_a_loop_whose_graphs_differ_in_shape_is_not_called_rebuilt(shell):
    _loop(shell, 1, 1)  # the graph and the session
    run(shell, "with graph.as_default():\n"
               "    for i in range(8):\n"
               "        total = x\n"
               "        for _ in range(i + 1):\n"
               "            total = tf.nn.relu(total)\n"
               "        sess.run(total, {x: data})\n")
    assert "rebuilt" not in _kinds(session_runs.findings())


def test_unloading_puts_session_run_back(shell):
    from tensorflow.python.client import session

    run(shell, "import tensorflow as tf")  # the next cell wraps it
    run(shell, "pass")
    wrapped = session.BaseSession.run
    assert wrapped.__wrapped__ is not None
    shell.run_line_magic("unload_ext", "kerasmagic")
    try:
        assert session.BaseSession.run is wrapped.__wrapped__
        assert not hasattr(session.BaseSession.run, "__wrapped__")
    finally:
        shell.run_line_magic("load_ext", "kerasmagic")


def test_the_watch_imports_no_tensorflow():
    code = ("import sys\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "from traitlets.config import Config\n"
            "config = Config(); config.HistoryManager.hist_file = ':memory:'\n"
            "shell = InteractiveShell.instance(config=config)\n"
            "shell.run_line_magic('load_ext', 'kerasmagic')\n"
            "shell.run_cell('x = 1', store_history=True)\n"
            "from kerasmagic import session_runs\n"
            "print(session_runs.active_watch().started, 'tensorflow' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr

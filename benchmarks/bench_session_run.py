"""What timing TensorFlow 1's ``Session.run`` per cell (kerasmagic.session_runs) costs each call.

Runs a real ``InteractiveShell`` with TensorFlow imported and a small graph built once (a
placeholder fed each call, the cheapest ``sess.run`` there is), then times a cell of
``--calls`` runs with kerasmagic unloaded and loaded, alternating, and prints the median cost
per call of each and their difference: the wrapper's overhead. Measured on a 2-core AMD EPYC
(TF 2.21): 89.9 → 92.7 µs per call, +2.8 µs (+3 %) on the cheapest run there is.

    python benchmarks/bench_session_run.py [--calls 5000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

GRAPH = """
import numpy as np, tensorflow as tf
graph = tf.Graph()
with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (None, 4))
    y = tf.reduce_sum(x * 2.0)
    sess = tf.compat.v1.Session(graph=graph)
data = np.ones((8, 4), np.float32)
"""

LOOP = "for _ in range({calls}):\n    sess.run(y, {{x: data}})\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    for cell in ("import tensorflow as tf", GRAPH, LOOP.format(calls=200)):  # warm: executor built once
        assert shell.run_cell(cell).success
    shell.run_line_magic("load_ext", "kerasmagic")  # so that the first round's unload has something to undo
    loop = LOOP.format(calls=args.calls)
    per_call: dict[str, list[float]] = {"unloaded": [], "loaded": []}
    for _ in range(args.rounds):
        for state in ("unloaded", "loaded"):
            shell.run_line_magic("load_ext" if state == "loaded" else "unload_ext", "kerasmagic")
            started = time.perf_counter()
            assert shell.run_cell(loop).success
            per_call[state].append((time.perf_counter() - started) / args.calls)
    shell.run_line_magic("unload_ext", "kerasmagic")
    plain, timed = (statistics.median(per_call[state]) for state in ("unloaded", "loaded"))
    print(f"sess.run of a 4-op graph, {args.calls} calls a cell, median of {args.rounds} rounds:")
    print(f"  kerasmagic unloaded  {plain * 1e6:8.1f} µs per call")
    print(f"  kerasmagic loaded    {timed * 1e6:8.1f} µs per call")
    print(f"  wrapper overhead     {(timed - plain) * 1e6:+8.1f} µs per call ({(timed / plain - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()

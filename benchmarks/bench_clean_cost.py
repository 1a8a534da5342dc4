"""Benchmark 2: one fresh_model() clean vs keras.backend.clear_session() in a notebook-sized state.

The state: about 1.8 million live Python objects (what a long notebook session holds), a
trained model displayed into the output cache, a model deleted by ``del`` (alive in
reference cycles until a collection), and a large array held by the last exception's
frames. Each round rebuilds the leftovers, times one clean, and checks with weak
references what it freed. Target: clear_tf() <= 1.1x clear_session() while freeing more.

    python benchmarks/bench_clean_cost.py [--objects 1450000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

LEFTOVERS = """
import weakref, numpy as np, keras
def make():
    m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(512), keras.layers.Dense(1)])
    m.compile('adam', 'mse'); m.fit(np.ones((64, 32)), np.ones(64), verbose=0)
    return m
"""


def leave_leftovers(shell) -> dict:
    """What a user leaves behind after a few cells; weak references to each thing."""
    shell.run_cell("make()", store_history=True)                      # held by Out[n], _ ...
    shell.run_cell("_displayed = weakref.ref(_)", store_history=True)
    shell.run_cell("model = make(); _deleted = weakref.ref(model); del model", store_history=True)
    shell.run_cell("def load():\n    big = np.ones(2**25)\n    raise ValueError('shape')\n", store_history=True)
    import contextlib
    import io
    import sys

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        shell.run_cell("load()", store_history=True)                  # 256 MiB in the frames
    traceback = sys.last_traceback
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    frame_locals = traceback.tb_frame.f_locals
    shell.user_ns["_in_exception"] = weakref.ref(frame_locals["big"])
    return {name: shell.user_ns[name] for name in ("_displayed", "_deleted", "_in_exception")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1_450_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import gc

    import keras
    from IPython.core.interactiveshell import InteractiveShell

    from kerasmagic import clear_tf

    shell = InteractiveShell.instance()
    shell.displayhook.write_output_prompt = lambda: None
    shell.displayhook.write_format_data = lambda *a, **k: None  # keep the benchmark's output to its table
    shell.run_cell(LEFTOVERS)
    shell.user_ns["notebook_state"] = [[i] for i in range(args.objects)]  # lists: gc-tracked
    gc.collect()
    print(f"# live gc-tracked objects: {len(gc.get_objects()) / 1e6:.2f} M")

    timings: dict[str, list[float]] = {"keras.backend.clear_session()": [], "kerasmagic clear_tf()": []}
    freed: dict[str, set[str]] = {name: set() for name in timings}
    for _ in range(args.rounds):
        for name, clean in (
            ("keras.backend.clear_session()", keras.backend.clear_session),
            ("kerasmagic clear_tf()", lambda: clear_tf(shell=shell)),
        ):
            refs = leave_leftovers(shell)
            started = time.perf_counter()
            clean()
            timings[name].append(time.perf_counter() - started)
            freed[name] = {what for what, ref in refs.items() if ref() is None}
            # Level the field for the next round: whatever the first clean left, drop it.
            clear_tf(shell=shell)
    base = statistics.median(timings["keras.backend.clear_session()"])
    print(f"{'clean':32} {'median s':>9} {'ratio':>6}  freed (weak reference dead)")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:32} {median:9.2f} {median / base:6.2f}  {', '.join(sorted(freed[name])) or 'nothing'}")
    print("targets: ratio <= 1.1, and clear_tf() frees strictly more")


if __name__ == "__main__":
    main()

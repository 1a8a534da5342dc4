"""What the leak watch (per-cell growth) costs each cell: its pre_run_cell + post_run_cell hooks.

Runs a real ``InteractiveShell`` with TensorFlow and Keras imported, TF's runtime started and
a session with something in it (three trained models, 60 variables, a 1000-item list, a
10**7-float array, a CustomGradient registry of a few hundred entries), then times the
watch's two hooks around a trivial cell, and the whole ``run_cell`` with the extension
loaded and unloaded. Target: well under 1 ms per cell (no gc, no heap walk).

    python benchmarks/bench_leak_watch.py [--cells 500] [--no-tf]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SESSION = """
import numpy as np, keras
models = []
for _ in range(3):
    m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256), keras.layers.Dense(1)])
    m.compile('adam', 'mse'); m.fit(np.ones((64, 64)), np.ones(64), verbose=0); models.append(m)
history = m.fit(np.ones((64, 64)), np.ones(64), verbose=0)
big = np.ones(10**7)
rows = list(range(1000))
"""


def _percentiles(values: list[float]) -> str:
    values = sorted(values)
    return (f"median {statistics.median(values):.3f} ms, p95 {values[int(len(values) * 0.95)]:.3f} ms, "
            f"max {values[-1]:.3f} ms")


def _run_cells(shell, count: int) -> list[float]:
    timings = []
    for i in range(count):
        started = time.perf_counter()
        shell.run_cell(f"v = {i}", store_history=True)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=500, help="cells per measurement (default 500)")
    parser.add_argument("--no-tf", action="store_true", help="do not import TensorFlow and Keras")
    args = parser.parse_args()
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from kerasmagic import leak_watch
    from kerasmagic.probes import tensorflow as tf_probe

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    shell.user_ns.update({f"var_{i}": i for i in range(60)})
    if not args.no_tf:
        result = shell.run_cell(SESSION)
        assert result.success, result
    shell.run_line_magic("load_ext", "kerasmagic")
    watch = leak_watch.active_watch()
    shell.run_cell("v = 0", store_history=True)  # first cell: NVML's one-time start (about 20 ms without a driver)

    # 1. The hooks alone, as IPython calls them around each cell.
    hooks = []
    for i in range(args.cells):
        shell.run_cell(f"w = {i}", store_history=True)
        hooks.append(watch.last_cost_s * 1000)
    registry = tf_probe.custom_gradient_entries() if tf_probe.module() else "TF not imported"
    print(f"TensorFlow {getattr(tf_probe.module(), '__version__', 'not imported')}; "
          f"CustomGradient entries {registry}; {len(shell.user_ns)} names in the namespace; {os.cpu_count()} CPUs")
    print(f"leak watch hooks (pre_run_cell + post_run_cell), {args.cells} cells: {_percentiles(hooks)}")

    # 2. A whole trivial cell, with the extension loaded and unloaded (noisier: the shell's own work).
    loaded = _run_cells(shell, args.cells)
    shell.run_line_magic("unload_ext", "kerasmagic")
    unloaded = _run_cells(shell, args.cells)
    print(f"run_cell('v = i') with kerasmagic loaded:   {_percentiles(loaded)}")
    print(f"run_cell('v = i') with kerasmagic unloaded: {_percentiles(unloaded)}")
    print("target: the hooks well under 1 ms per cell; no gc.collect(), no gc.get_objects()")


if __name__ == "__main__":
    main()

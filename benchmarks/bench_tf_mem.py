"""Benchmark 3: the cost of one ``tf_mem()`` snapshot (no ``--who``), TF running. Target <= 5 ms.

    python benchmarks/bench_tf_mem.py
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    import keras
    import numpy as np
    from IPython.core.interactiveshell import InteractiveShell

    from kerasmagic import tf_mem

    shell = InteractiveShell.instance()
    shell.user_ns["np"], shell.user_ns["keras"] = np, keras
    # A session with something in it: two trained models and a large array in the namespace.
    shell.run_cell(
        "models = []\n"
        "for _ in range(2):\n"
        "    m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256), keras.layers.Dense(1)])\n"
        "    m.compile('adam', 'mse'); m.fit(np.ones((64, 64)), np.ones(64), verbose=0); models.append(m)\n"
        "big = np.ones(10**7)"
    )
    tf_mem(shell)  # first call initialises NVML (about 20 ms without a driver), once per process
    timings = []
    for _ in range(200):
        started = time.perf_counter()
        tf_mem(shell)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    print(f"tf_mem() snapshot, 200 calls: median {statistics.median(timings):.2f} ms, "
          f"p95 {timings[int(len(timings) * 0.95)]:.2f} ms, max {timings[-1]:.2f} ms (target <= 5 ms)")
    started = time.perf_counter()
    tf_mem(shell, who=True)
    print(f"tf_mem(who=True) once: {(time.perf_counter() - started) * 1000:.0f} ms (scans every live object)")


if __name__ == "__main__":
    main()

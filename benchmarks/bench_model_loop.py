"""Benchmark 1: the 40-model loop, four ways, each in its own fresh process; and the same models
run one per notebook cell in a real kernel (issue 20).

The loop part prints RSS growth per model (least-squares slope over models 10-40), time per model
for the first and last five, and the last layer name. Target: fresh_model() <= 1 MB/model.

``--cells N`` runs N small CNNs through a real ipykernel (jupyter_client), three ways, each in a
new kernel: one ``%%fresh_model`` cell per model; the same with the heap trim after each cell
turned off (kerasmagic before issue 20's fix); and all N models in one cell, ``fresh_model()``
around each. Per model it prints the kernel's RSS growth (read from /proc outside the kernel), and
from glibc's ``mallinfo2`` the heap in use and the free heap (resident or trimmed). The difference
between one cell per model and one cell for all is what each cell leaves: on 2026-11-25 (2-core
EPYC, TF 2.21) +1.40 MiB against +0.66 MiB per model, the +0.70 MiB of heap in use per cell being
the stack traces TensorFlow keeps of each run of a cell (``result.tf_stack_traces``); the trim
after the cell took the untrimmed row's +1.53 MiB to +1.40 MiB and hands back about 2.5 MiB after
each fit cell (tests/core/test_fresh_heap_trim.py).

    python benchmarks/bench_model_loop.py [--models 40]
    python benchmarks/bench_model_loop.py --cells 12
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

from kerasmagic.demo import STRATEGIES, format_table, run_in_subprocess

MiB = 2**20

_SETUP = """
import ctypes, gc, json
libc = ctypes.CDLL("libc.so.6")
class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = _MallInfo2
import numpy as np, keras
rng = np.random.default_rng(0)
x = rng.random((256, 28, 28, 1), dtype=np.float32); y = rng.integers(0, 10, 256)
def make():
    model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
"""
_CELL = "%%fresh_model model -q\nmodel = make()\nhistory = model.fit(x, y, epochs=1, batch_size=32, verbose=0)"
_ONE_CELL = ("from kerasmagic import fresh_model\nfor i in range({n}):\n    with fresh_model('model'):\n"
             "        model = make()\n        history = model.fit(x, y, epochs=1, batch_size=32, verbose=0)")
_HEAP = "gc.collect(); info = libc.mallinfo2(); print(json.dumps([info.uordblks, info.fordblks]))"

CELL_WAYS = {
    "cells": "one %%fresh_model cell per model",
    "cells-untrimmed": "the same, no heap trim after the cell (before)",
    "one-cell": "all models in one cell, fresh_model() each",
}


def run_cells(way: str, models: int) -> dict[str, float]:
    """``models`` small CNNs in a new kernel, ``way`` (a key of CELL_WAYS); per-model figures in MiB."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))
    from kernel_session import KernelSession

    session = KernelSession()
    try:
        pid = int(session.execute("import os; print(os.getpid())"))

        def rss() -> int:
            with open(f"/proc/{pid}/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        session.execute("%load_ext kerasmagic")
        session.execute(_SETUP, timeout=300)
        if way == "cells-untrimmed":
            session.execute("import kerasmagic.fresh\nkerasmagic.fresh.trim_heap = lambda: 'turned off'")
        for _ in range(2):  # first runs pay for imports and TF's one-time setup
            session.execute(_CELL, timeout=300)
        heap_before = json.loads(session.execute(_HEAP))
        rss_before = rss()
        if way == "one-cell":
            session.execute(_ONE_CELL.format(n=models), timeout=60 * models)
        else:
            for _ in range(models):
                session.execute(_CELL, timeout=300)
        heap_after = json.loads(session.execute(_HEAP))
        rss_after = rss()
        return {"rss": (rss_after - rss_before) / models / MiB,
                "heap_in_use": (heap_after[0] - heap_before[0]) / models / MiB,
                "heap_free": (heap_after[1] - heap_before[1]) / models / MiB}
    finally:
        session.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--strategies", nargs="+", default=["nothing", "del+gc", "clear_session", "fresh_model"],
                        choices=list(STRATEGIES))
    parser.add_argument("--cells", type=int, metavar="N", help="run N models one per cell in a kernel instead")
    args = parser.parse_args()
    import importlib.metadata as md

    versions = (f"TF {md.version('tensorflow-cpu')}, Keras {md.version('keras')}, "
                f"Python {platform.python_version()}")
    if args.cells:
        print(f"# {args.cells} small CNNs in a real kernel, three ways, a new kernel each; {versions}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (RSS and heap figures do not "
              "depend on load)")
        print(f"{'how':50} {'RSS/model':>10} {'heap in use/model':>18} {'free heap/model':>16}")
        for way, words in CELL_WAYS.items():
            r = run_cells(way, args.cells)
            print(f"{words:50} {r['rss']:+9.2f}M {r['heap_in_use']:+17.2f}M {r['heap_free']:+15.2f}M", flush=True)
        return
    print(f"# {args.models} small CNNs per strategy; {versions}")
    results = [run_in_subprocess(strategy, args.models) for strategy in args.strategies]
    print(format_table(results, slope_from=9))


if __name__ == "__main__":
    main()

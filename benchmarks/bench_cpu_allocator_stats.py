"""What ``TF_CPU_ALLOCATOR_USE_BFC=1`` (the remedy for missing TF CPU figures) costs, with oneDNN off.

Without oneDNN (TensorFlow leaves it off on AMD CPUs; ``TF_ENABLE_ONEDNN_OPTS=0`` does the same on
Intel) TF's CPU allocator is plain malloc and keeps no statistics. With the variable it is a BFC pool
that does, as oneDNN's allocator does. Each configuration runs in its own interpreter (TF reads both
variables when it starts), alternating, ``--rounds`` times; each process builds, compiles and fits
``--fits`` small Keras models, then deletes a 256 MiB tensor:

    python benchmarks/bench_cpu_allocator_stats.py [--fits 12] [--rounds 2]

Per configuration: the median time per fit (fits 2+; the first traces), RSS after the fits, whether
``get_memory_info('CPU:0')`` works and what it says for the 256 MiB tensor, and how much of it RSS
gives back when the tensor is deleted (the pool keeps it for reuse; malloc returns it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

#: One process's work; prints one JSON line.
_CHILD = r"""
import gc, json, os, time
import numpy as np, psutil
import keras, tensorflow as tf
process = psutil.Process()
rng = np.random.default_rng(0)
x, y = rng.random((2048, 64), dtype=np.float32), rng.integers(0, 10, 2048)
fit_s = []
for _ in range(int(os.environ["BENCH_FITS"])):
    keras.backend.clear_session()
    started = time.perf_counter()
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=2, batch_size=64, verbose=0)
    fit_s.append(time.perf_counter() - started)
del model
gc.collect()
rss_after_fits = process.memory_info().rss
def info():
    try:
        return tf.config.experimental.get_memory_info("CPU:0")["current"]
    except ValueError:
        return None
before = info()
big = tf.ones((64, 1024, 1024))          # exactly 256 MiB
float(big[0, 0, 0])
rss_with = process.memory_info().rss
tensor = info()
del big
gc.collect()
print(json.dumps({"fit_s": fit_s, "rss_after_fits": rss_after_fits,
                  "tensor_in_use": None if tensor is None else tensor - before,
                  "rss_returned": rss_with - process.memory_info().rss}))
"""

CONFIGS = {
    "oneDNN off, malloc (AMD's default)": {"TF_ENABLE_ONEDNN_OPTS": "0"},
    "oneDNN off, TF_CPU_ALLOCATOR_USE_BFC=1": {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPU_ALLOCATOR_USE_BFC": "1"},
}

MiB = 2**20


def _run(env: dict[str, str], fits: int) -> dict:
    ours = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPU_ALLOCATOR_USE_BFC")
    environment = {k: v for k, v in os.environ.items() if k not in ours}
    environment.update(env, TF_CPP_MIN_LOG_LEVEL="3", BENCH_FITS=str(fits))
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=environment, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):  # alternating, so that a busy machine slows both alike
        for name, env in CONFIGS.items():
            runs[name].append(_run(env, args.fits))
    print(f"{args.fits} small Keras fits per process (Dense 256, 2048x64, 2 epochs), {args.rounds} processes each")
    print(f"{'configuration':40s} {'s/fit (median, fits 2+)':>24s} {'RSS after fits':>15s} "
          f"{'256 MiB tensor in use':>22s} {'RSS back on delete':>19s}")
    for name, results in runs.items():
        per_fit = statistics.median(s for r in results for s in r["fit_s"][1:])
        spread = ", ".join(f"{statistics.median(r['fit_s'][1:]):.3f}" for r in results)
        rss = statistics.median(r["rss_after_fits"] for r in results) / MiB
        tensor = results[0]["tensor_in_use"]
        returned = statistics.median(r["rss_returned"] for r in results) / MiB
        shown = "n/a (no statistics)" if tensor is None else f"{tensor / MiB:.1f} MiB"
        print(f"{name:40s} {per_fit:24.3f} {rss:11.0f} MiB {shown:>22s} {returned:15.0f} MiB"
              f"   (s/fit per process: {spread})")


if __name__ == "__main__":
    main()

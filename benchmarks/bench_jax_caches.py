"""What clearing JAX's caches costs and frees on Keras' JAX backend, per model of a loop.

Why ``clear_tf`` keeps JAX's compiled functions unless asked (``--jax-caches``): each strategy
runs in its own fresh process, trains the same small models one after another, and prints the
time per model and the RSS slope over the second half of the loop.

    python benchmarks/bench_jax_caches.py [MODELS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

STRATEGIES = {
    "clear_session": "keras.backend.clear_session() per model",
    "fresh_model": "kerasmagic.fresh_model() per model (JAX caches kept, the default)",
    "fresh_model_jax_caches": "kerasmagic.fresh_model(clear_jax_caches=True) per model",
}

LOOP = r"""
import contextlib, json, sys, time
import numpy as np, keras, psutil
import kerasmagic

strategy, models = sys.argv[1], int(sys.argv[2])
x = np.random.default_rng(0).random((512, 64), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 2, 512)
seconds, rss = [], []
for _ in range(models):
    started = time.perf_counter()
    if strategy == "clear_session":
        keras.backend.clear_session()
        block = contextlib.nullcontext()
    else:
        block = kerasmagic.fresh_model(namespace={}, clear_jax_caches=strategy.endswith("jax_caches"))
    with block:
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    del model
    seconds.append(time.perf_counter() - started)
    rss.append(psutil.Process().memory_info().rss)
print(json.dumps({"seconds": seconds, "rss": rss}))
"""


def run(strategy: str, models: int) -> dict:
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", LOOP, strategy, str(models)], capture_output=True,
                          text=True, env=env, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import numpy as np

    models = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    half = models // 2
    print(f"Keras on JAX (CPU), {models} small models in a loop; figures over models {half + 1}-{models}")
    print(f"{'strategy':<70} {'s/model':>8} {'RSS MB/model':>13} {'RSS at end':>11}")
    for strategy, label in STRATEGIES.items():
        result = run(strategy, models)
        seconds = float(np.mean(result["seconds"][half:]))
        slope = float(np.polyfit(range(models - half), np.array(result["rss"][half:]) / 1e6, 1)[0])
        print(f"{label:<70} {seconds:>8.2f} {slope:>+13.2f} {result['rss'][-1] / 1e6:>9.0f} MB")


if __name__ == "__main__":
    main()

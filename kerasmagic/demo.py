"""The headless demo: the same model loop the usual way and with kerasmagic, measured.

``python -m kerasmagic.demo`` trains a small CNN many times in one process per strategy
(each strategy gets its own fresh interpreter so that none inherits another's leftovers)
and prints RSS growth per model, time per model and the last layer name. The benchmark
``benchmarks/bench_model_loop.py`` runs the same code with 40 models.

Example:
    $ python -m kerasmagic.demo --models 15
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

STRATEGIES = {
    "nothing": "nothing between models",
    "del+gc": "del model; gc.collect()",
    "clear_session": "keras.backend.clear_session()",
    "fresh_model": "kerasmagic.fresh_model()",
    "isolate": "kerasmagic.run_isolated() (a fresh process per model)",
}


def _build_and_fit(keras, np, seed: int) -> tuple[Any, str]:
    rng = np.random.default_rng(seed)
    x = rng.random((256, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 256)
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    return model, model.layers[-1].name


def _isolated_job(seed: int) -> str:
    """Runs inside an isolation worker; returns only the layer name (the model stays there)."""
    import keras
    import numpy as np

    return _build_and_fit(keras, np, seed)[1]


def run_loop(strategy: str, models: int) -> dict[str, Any]:
    """Train ``models`` models with ``strategy`` in *this* process; returns per-model RSS and times.

    Example:
        >>> run_loop("fresh_model", 3)["layer_names"]       # doctest: +SKIP
        ['dense_1', 'dense_1', 'dense_1']
    """
    import gc

    import keras
    import numpy as np

    from .probes.process import rss_bytes

    rss, seconds, names = [], [], []
    model = None
    namespace: dict[str, Any] = {}
    for index in range(models):
        started = time.perf_counter()
        if strategy == "isolate":
            from .isolation import run_isolated

            names.append(run_isolated(_isolated_job, args=(index,), quiet=True).value)
        else:
            if strategy == "fresh_model":
                from .fresh import fresh_model

                # As in a notebook: the previous model lives in a namespace under a name, and
                # naming it lets the clean delete it before the next model is built.
                with fresh_model(*(["model"] if "model" in namespace else []), namespace=namespace):
                    namespace["model"], name = _build_and_fit(keras, np, index)
            else:
                if strategy == "clear_session":
                    keras.backend.clear_session()
                elif strategy == "del+gc":
                    del model
                    model = None
                    gc.collect()
                model, name = _build_and_fit(keras, np, index)
            names.append(name)
        seconds.append(time.perf_counter() - started)
        rss.append(rss_bytes())
    return {"strategy": strategy, "rss_bytes": rss, "seconds": seconds, "layer_names": names}


def slope_mb_per_model(rss: list[int], start: int) -> float:
    """Least-squares RSS growth per model over ``rss[start:]``, in MB (10^6 bytes)."""
    points = rss[start:]
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mean_x = (n - 1) / 2
    mean_y = sum(points) / n
    covariance = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(points))
    variance = sum((i - mean_x) ** 2 for i in range(n))
    return covariance / variance / 1e6


def run_in_subprocess(strategy: str, models: int) -> dict[str, Any]:
    """One strategy in a fresh interpreter, so no strategy inherits another's leftovers."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    completed = subprocess.run(
        [sys.executable, "-m", "kerasmagic.demo", "--child", strategy, "--models", str(models)],
        capture_output=True, text=True, env=env, check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"strategy {strategy!r} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def format_table(results: list[dict[str, Any]], slope_from: int) -> str:
    header = ("strategy", f"RSS growth/model (models {slope_from + 1}+)", "RSS after", "s/model first 5", "s/model last 5", "last layer name")
    rows = []
    for r in results:
        seconds = r["seconds"]
        rows.append((
            STRATEGIES[r["strategy"]],
            f"{slope_mb_per_model(r['rss_bytes'], slope_from):+.2f} MB",
            f"{r['rss_bytes'][-1] / 1e6:.0f} MB",
            f"{sum(seconds[:5]) / len(seconds[:5]):.2f}",
            f"{sum(seconds[-5:]) / len(seconds[-5:]):.2f}",
            r["layer_names"][-1],
        ))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a small CNN in a loop, the usual way and with kerasmagic.")
    parser.add_argument("--models", type=int, default=15, help="models per strategy (default 15)")
    parser.add_argument("--strategies", nargs="+", choices=list(STRATEGIES),
                        default=["nothing", "clear_session", "fresh_model", "isolate"])
    parser.add_argument("--child", choices=list(STRATEGIES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.models < 6:
        parser.error("--models must be at least 6 (the growth is fitted from model 5 on)")
    if args.child:
        print(json.dumps(run_loop(args.child, args.models)))
        return 0
    slope_from = 4 if args.models < 20 else 9
    print(f"kerasmagic demo: {args.models} small CNNs (build + compile + fit) per strategy, "
          "each strategy in its own fresh process\n", flush=True)
    results = []
    for strategy in args.strategies:
        print(f"  running: {STRATEGIES[strategy]} …", flush=True)
        results.append(run_in_subprocess(strategy, args.models))
    print()
    print(format_table(results, slope_from))
    print("\nRSS growth is the least-squares slope of the process's RSS over the models, after warm-up.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
from collections.abc import Sequence
from typing import Any

__all__ = ['cv_fold', 'format_cv_table', 'format_table', 'main', 'registry_story', 'run_cv', 'run_in_subprocess',
           'run_loop', 'slope_mb_per_model']

STRATEGIES = {
    "nothing": "nothing between models",
    "del+gc": "del model; gc.collect()",
    "clear_session": "keras.backend.clear_session()",
    "fresh_model": "kerasmagic.fresh_model()",
    "isolate": "kerasmagic.run_isolated() (a forked process per model)",
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


CV_STRATEGIES = {
    "clear_session": "in-process, clear_session() per fold",
    "fresh_model": "in-process, kerasmagic.fresh_model() per fold",
    "isolate": "kerasmagic.isolated_map(): a forked process per fold",
    "multiprocessing": "multiprocessing spawn + timeout per fold (by hand)",
}
CV_FOLDS = 5


def _cv_data(np):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 32)).astype("float32")
    y = (x[:, :4].sum(axis=1) > 0).astype("int32")
    return x, y


def cv_fold(fold: int, seed: int = 0) -> float:
    """Train on every fold but ``fold`` and return the accuracy on ``fold`` (runs anywhere)."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(seed)
    x, y = _cv_data(np)
    test = np.arange(len(x)) % CV_FOLDS == fold
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x[~test], y[~test], epochs=3, batch_size=64, verbose=0)
    return float(model.evaluate(x[test], y[test], verbose=0)[1])


def _cv_fold_into_queue(fold: int, queue) -> None:
    """The module-level target that multiprocessing's spawn needs (a notebook cannot provide one)."""
    queue.put(cv_fold(fold))


def run_cv(strategy: str) -> dict[str, Any]:
    """A ``CV_FOLDS``-fold cross-validation in this process with ``strategy``; kernel RSS after each fold.

    Example:
        >>> run_cv("fresh_model")["scores"]       # doctest: +SKIP
        [0.96, 0.95, 0.97, 0.96, 0.95]
    """
    from .probes.process import rss_bytes

    if strategy in ("clear_session", "fresh_model", "isolate"):
        # Paid once, as in a notebook kernel; isolation's template imports what the kernel has.
        import keras

    start_rss = rss_bytes()
    rss, seconds, scores = [], [], []
    if strategy == "isolate":
        from .isolation import isolated_map

        folds = isolated_map(cv_fold, range(CV_FOLDS), quiet=True, timeout=600, progress=False)
        return {"strategy": strategy, "start_rss": start_rss, "scores": list(folds),
                "rss_bytes": [job.kernel_rss_after_bytes for job in folds.jobs],
                "seconds": [job.wall_s for job in folds.jobs]}
    for fold in range(CV_FOLDS):
        started = time.perf_counter()
        if strategy == "clear_session":
            keras.backend.clear_session()
            scores.append(cv_fold(fold))
        elif strategy == "fresh_model":
            from .fresh import fresh_model

            with fresh_model(namespace={}):
                scores.append(cv_fold(fold))
        else:
            import multiprocessing

            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            process = context.Process(target=_cv_fold_into_queue, args=(fold, queue))
            process.start()
            scores.append(queue.get(timeout=600))
            process.join(timeout=60)
        seconds.append(time.perf_counter() - started)
        rss.append(rss_bytes())
    return {"strategy": strategy, "start_rss": start_rss, "rss_bytes": rss, "seconds": seconds, "scores": scores}


def format_cv_table(results: list[dict[str, Any]]) -> str:
    """Lesson 5's results (from :func:`run_cv`) as an aligned text table.

    Example:
        >>> print(format_cv_table([run_cv("fresh_model")]))     # doctest: +SKIP
    """
    header = ("how each fold runs", "kernel RSS growth (folds 2-5)", "s/fold (first)", "s/fold (rest)", "mean accuracy")
    rows = []
    for r in results:
        rows.append((
            CV_STRATEGIES[r["strategy"]],
            f"{(r['rss_bytes'][-1] - r['rss_bytes'][0]) / 1e6:+.1f} MB",
            f"{r['seconds'][0]:.2f}",
            f"{sum(r['seconds'][1:]) / len(r['seconds'][1:]):.2f}",
            f"{sum(r['scores']) / len(r['scores']):.3f}",
        ))
    return _table(header, rows)


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
    from .registry_purge import entries_pin_graphs

    tf = sys.modules.get("tensorflow")
    return {"strategy": strategy, "rss_bytes": rss, "seconds": seconds, "layer_names": names,
            "tensorflow": getattr(tf, "__version__", None), "registry_pins_graphs": entries_pin_graphs()}


def registry_story(results: list[dict[str, Any]]) -> str:
    """What ``clear_session()`` does about the loop's growth on the TensorFlow that ran it.

    Example:
        >>> print(registry_story([{"tensorflow": "2.22.0", "registry_pins_graphs": False}]))
        TensorFlow 2.22.0 carries the upstream fix (PR 109334): clear_session() alone keeps this loop flat. ...
    """
    ran = next((r for r in results if r.get("tensorflow")), None)
    if ran is None:
        return "TensorFlow did not run in this process (isolated models only)."
    if ran["registry_pins_graphs"]:
        return (f"TensorFlow {ran['tensorflow']}: clear_session() resets the layer names, but each traced training "
                "step's gradient-registry entry keeps its graph, weights and optimizer slots alive (tensorflow "
                "issue 97697, fixed in 2.22): fresh_model() purges the dead entries.")
    return (f"TensorFlow {ran['tensorflow']} carries the upstream fix (PR 109334): clear_session() alone keeps this "
            "loop flat. What kerasmagic still finds and frees there: models kept by the output cache, History.model "
            "and the last exception, TensorFlow 1 graphs, allocator pools (only a new process returns them: "
            "--isolate), and a kernel about to run out of memory (the guard).")


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


def run_in_subprocess(strategy: str, models: int, lesson: str = "loop") -> dict[str, Any]:
    """One strategy in a fresh interpreter, so no strategy inherits another's leftovers."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    completed = subprocess.run(
        [sys.executable, "-m", "kerasmagic.demo", "--child", strategy, "--lesson", lesson, "--models", str(models)],
        capture_output=True, text=True, env=env, check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"strategy {strategy!r} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def format_table(results: list[dict[str, Any]], slope_from: int) -> str:
    """Lesson 1's results (from :func:`run_loop`) as an aligned text table.

    Example:
        >>> print(format_table([run_loop("fresh_model", 6)], slope_from=4))   # doctest: +SKIP
    """
    header = ("strategy", f"RSS growth/model (models {slope_from + 1}+)", "RSS after", "s/model first 5",
              "s/model last 5", "last layer name")
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
    return _table(header, rows)


def _table(header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m kerasmagic.demo [--models N] [--strategies ...]``.

    Example:
        >>> main(["--models", "8", "--cv-strategies"])          # lesson 1 only  # doctest: +SKIP
        0
    """
    parser = argparse.ArgumentParser(
        description="Train models in a loop and cross-validate, the usual way and with kerasmagic.")
    parser.add_argument("--models", type=int, default=15, help="models per strategy in lesson 1 (default 15)")
    parser.add_argument("--strategies", nargs="+", choices=list(STRATEGIES),
                        default=["nothing", "clear_session", "fresh_model"], help="lesson 1's strategies")
    parser.add_argument("--cv-strategies", nargs="*", choices=list(CV_STRATEGIES), default=list(CV_STRATEGIES),
                        help="lesson 5's strategies (none: skip lesson 5)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--lesson", choices=["loop", "cv"], default="loop", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.models < 6:
        parser.error("--models must be at least 6 (the growth is fitted from model 5 on)")
    if args.child:
        result = run_loop(args.child, args.models) if args.lesson == "loop" else run_cv(args.child)
        print(json.dumps(result))
        return 0
    slope_from = 4 if args.models < 20 else 9
    print("kerasmagic demo: every strategy runs in its own fresh Python process, "
          "so none inherits another's leftovers.\n")
    print(f"Lesson 1 — {args.models} small CNNs in a loop (build + compile + fit):", flush=True)
    results = [run_in_subprocess(strategy, args.models) for strategy in args.strategies]
    print(format_table(results, slope_from))
    print("RSS growth: least-squares slope of the process's RSS over the models, after warm-up.")
    print(registry_story(results) + "\n")
    if args.cv_strategies:
        print(f"Lesson 5 — {CV_FOLDS}-fold cross-validation of an MLP (3 epochs per fold):", flush=True)
        cv_results = [run_in_subprocess(strategy, args.models, lesson="cv") for strategy in args.cv_strategies]
        print(format_cv_table(cv_results))
        print("Isolated folds give every byte back to the OS when their process ends; the kernel stays flat.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Isolation overhead and a 10-fold CV loop, measured (prints figures; not a test).

What it compares, for the same small Keras fit:
- in-process (the baseline: no isolation at all);
- ``run_isolated`` with a warm pool (the worker had finished importing when the job came);
- ``run_isolated`` back to back (the next worker imports while the previous job runs);
- a cold ``multiprocessing`` spawn per job, what users write today (module-level target).
Then a large array sent both ways (our out-of-band buffer files vs a pickle through a pipe),
and a 10-fold cross-validation loop, isolated, with the kernel's RSS after every fold.

    $ python benchmarks/bench_isolation.py [--repeats 3] [--folds 10] [--array-mib 512]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def fit_small(seed: int) -> float:
    """One small fit; the job every variant runs. Returns the last loss."""
    import keras
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.random((512, 20), dtype=np.float32)
    y = (x.sum(axis=1, keepdims=True) > 10).astype("float32")
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    history = model.fit(x, y, epochs=2, batch_size=64, verbose=0)
    return float(history.history["loss"][-1])


def _spawn_target(seed: int, results) -> None:
    results.put(fit_small(seed))


def _pipe_target(conn) -> None:
    conn.send_bytes(b"ready")
    array = pickle.loads(conn.recv_bytes())
    conn.send_bytes(str(array.shape).encode())


def cold_spawn(seed: int) -> float:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_spawn_target, args=(seed, results))
    process.start()
    value = results.get(timeout=300)
    process.join(60)
    return value


def _timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def overhead(repeats: int) -> list[tuple[str, float, str]]:
    from kerasmagic.isolation import run_isolated
    from kerasmagic.isolation.pool import default_pool, worker_spec

    fit_small(0)  # warm this process's TF so in-process is measured at its best
    in_process = statistics.median(_timed(fit_small, i) for i in range(repeats))

    warm, waits, dispatch, trivial = [], [], [], []
    for i in range(repeats):
        default_pool().prestart(worker_spec())
        default_pool().wait_until_warm(timeout=180)
        started = time.perf_counter()
        result = run_isolated(fit_small, args=(i,), quiet=True)
        warm.append(time.perf_counter() - started)
        waits.append(result.wait_s)
        dispatch.append(warm[-1] - result.run_s)  # everything but the job's own run in the worker
        default_pool().wait_until_warm(timeout=180)
        trivial.append(_timed(lambda: run_isolated("x = 1", quiet=True)))
    warm_median = statistics.median(warm)

    back_to_back = [_timed(lambda i=i: run_isolated(fit_small, args=(i,), quiet=True)) for i in range(repeats)]
    cold = statistics.median(_timed(cold_spawn, i) for i in range(repeats))
    return [
        ("in-process", in_process, "baseline"),
        ("isolated, warm pool", warm_median,
         f"overhead {warm_median - in_process:+.2f} s (wait for worker {statistics.median(waits):.3f} s)"),
        ("  of which isolation itself", statistics.median(dispatch),
         "wall minus the job's run time in the worker: send, wait, ship back, process exit"),
        ("  of which first fit in a process", warm_median - statistics.median(dispatch) - in_process,
         "TF/Keras one-time setup any fresh process pays on its first fit"),
        ("isolated trivial job, warm", statistics.median(trivial), "`x = 1`: the fixed cost of one isolated job"),
        ("isolated, back to back", statistics.median(back_to_back),
         f"overhead {statistics.median(back_to_back) - in_process:+.2f} s (next worker still importing)"),
        ("cold multiprocessing spawn", cold, f"overhead {cold - in_process:+.2f} s"),
    ]


def array_transfer(mib: int) -> list[tuple[str, float, str]]:
    import multiprocessing

    import numpy as np

    from kerasmagic.isolation import run_isolated
    from kerasmagic.isolation.pool import default_pool, worker_spec

    array = np.ones(mib * 2**20 // 8)

    default_pool().prestart(worker_spec())
    default_pool().wait_until_warm(timeout=180)
    result = run_isolated(np.shape, args=(array,), quiet=True)
    ours = result.ship_in_s + result.run_s

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_pipe_target, args=(child,))
    process.start()
    parent.recv_bytes()  # the child is up: time the transfer alone
    started = time.perf_counter()
    parent.send_bytes(pickle.dumps(array, protocol=5))
    parent.recv_bytes()
    piped = time.perf_counter() - started
    process.join(60)
    return [
        (f"{mib} MiB array, out-of-band files", ours, f"encode {result.ship_in_s:.2f} s + decode/run {result.run_s:.2f} s"),
        (f"{mib} MiB array, pickle through a pipe", piped, "pickle.dumps + send + recv + loads"),
    ]


def cross_validation(folds: int) -> tuple[list[tuple[int, float, float, float, bool]], int]:
    from kerasmagic.isolation import run_isolated
    from kerasmagic.probes.process import rss_bytes

    rows = []
    start_rss = rss_bytes()
    for fold in range(folds):
        result = run_isolated(fit_small, args=(fold,), quiet=True)
        rows.append((fold, result.value, result.wall_s, rss_bytes() - start_rss, result.warm))
    return rows, rss_bytes() - start_rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--array-mib", type=int, default=512)
    parser.add_argument("--only-overhead", action="store_true")
    args = parser.parse_args()

    import keras  # noqa: F401 - as in a notebook: the kernel uses Keras, so workers preload it

    from kerasmagic.isolation import shutdown_default_pool
    from kerasmagic.isolation.pool import default_pool

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, keras {keras.__version__}")
    try:
        print("\nOverhead of one small fit (median of", args.repeats, "runs)")
        for name, seconds, note in overhead(args.repeats):
            print(f"  {name:<36} {seconds:6.2f} s   {note}")
        if args.only_overhead:
            return
        print("\nShipping a large array into a worker")
        for name, seconds, note in array_transfer(args.array_mib):
            print(f"  {name:<40} {seconds:6.2f} s   {note}")
        idle, rss = default_pool().idle_cost()
        print(f"\nPool cost: {idle} idle worker(s), RSS {rss / 2**20:.0f} MiB")
        print(f"\n{args.folds}-fold cross-validation, isolated (kernel RSS relative to before the loop)")
        print(f"  {'fold':>4}  {'loss':>7}  {'wall s':>6}  {'kernel RSS':>10}  warm")
        rows, growth = cross_validation(args.folds)
        for fold, loss, wall, delta, warm in rows:
            print(f"  {fold:>4}  {loss:7.4f}  {wall:6.2f}  {delta / 2**20:+8.1f} MB  {warm}")
        print(f"  kernel RSS growth over the loop: {growth / 2**20:+.1f} MB (target <= 20 MB)")
    finally:
        shutdown_default_pool()


if __name__ == "__main__":
    main()

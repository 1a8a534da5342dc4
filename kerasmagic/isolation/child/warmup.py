"""Warming a spare job process up before its job arrives (``configure_pool(warm_spare=True)``).

A child forked from a template starts with the frameworks imported but nothing run: no
TensorFlow runtime, no traced function, cold Python caches (autograph's conversions, the
ABC and protocol checks Keras' trainer makes). Its first ``fit()`` pays for all of that, and
in-process the kernel paid for it once. Measured on a 2-core AMD EPYC (TF 2.21, Keras 3.15,
a 64-128-1 MLP, 3 epochs of 512 rows; CPU seconds of the fit, median of 4):

| the fit ran in | CPU s |
|---|---|
| a bare fork of a template | 1.02 |
| a fork that only started TF's runtime first | 1.04 |
| a fork that ran a 4-2-1 model's fit first, then ``clear_session()`` | 0.84 |
| the kernel itself, after a first fit | 0.89 |

The template cannot do this itself: starting the runtime starts thread pools, and even
entering a graph (``tf.Graph().as_default()``) starts TF's ``tf_graph_runner`` thread; no
process with threads may fork (:mod:`kerasmagic.isolation.fork_safety`). A spare is a child,
about to become a job, so it may: it warms itself up while the previous job runs, and the
next job finds it ready.

What a job in a warmed spare cannot do, and a bare fork can: change what TensorFlow fixes
when its runtime starts (``tf.config.threading.set_*_parallelism_threads``,
``tf.config.set_visible_devices``, ``set_memory_growth``; they raise ``RuntimeError``). So
spares are off by default, and never warm up where TensorFlow sees a GPU (the warm-up would
map the card's memory in a process that may wait for minutes).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

__all__ = ["warm_up"]


def _quietly(fn: Callable[[], None]) -> None:
    """Run ``fn`` with fds 1 and 2 on /dev/null: they are the job's pipes already, and
    TensorFlow's warm-up chatter must not read as the job's output."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        fn()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _tensorflow_keras() -> None:
    # Imported in a spare only, where the template imported them already.
    import numpy as np
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    model.fit(np.zeros((8, 4), "float32"), np.zeros(8, "float32"), epochs=1, batch_size=8, verbose=0)
    model.predict(np.zeros((8, 4), "float32"), verbose=0)
    del model
    # Names, seeds and Keras' global state as a fresh process has them (dense, not dense_2).
    keras.backend.clear_session()


def warm_up() -> float:
    """Warm the frameworks this process has imported up; the seconds it took (0.0: nothing to do).

    Only Keras on TensorFlow is warmed today (the case measured above); it runs only where
    the template imported both, and never where TensorFlow sees a GPU.

    Example (in a spare, before it says ready; here it would start this process's runtime):
        >>> seconds = warm_up()    # doctest: +SKIP
    """
    keras = sys.modules.get("keras")
    if keras is None or "tensorflow" not in sys.modules:
        return 0.0
    try:
        if keras.backend.backend() != "tensorflow":
            return 0.0
    except Exception:  # noqa: BLE001 - an odd Keras: the job runs unwarmed, as a bare fork would
        return 0.0
    started = time.perf_counter()
    try:
        _quietly(_tensorflow_keras)
    except Exception:  # noqa: BLE001, S110 - a failed warm-up costs the job its speed, never its run
        pass  # and says nothing: anything printed now would read as the job's first output
    return time.perf_counter() - started

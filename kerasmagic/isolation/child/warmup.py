"""In a job's process, before its job: the warm spare's warm-up, and JAX's persistent compilation cache.

A spare (:mod:`kerasmagic.isolation.spare`) is a child forked ahead of its job. It creates its
device context and runs a small Keras fit on the job's backend, then clears Keras' session, with
fds 1 and 2 on /dev/null: they are the job's pipes already, and nothing of the warm-up may read as
the job's output. Measured before the job arrives, so the job pays none of it:

| where (job: a small MLP fit) | cold fork | warmed spare | in-process |
|---|---|---|---|
| H200, Keras on torch | 1.27-2.88 s | 0.59-0.70 s (a different model's fit) | 0.50 s |
| 2-core EPYC, TF CPU (CPU s) | 1.02 s | 0.84 s | 0.89 s |

On JAX most of a new process's cost is XLA compiling the job's own functions, which a different
model's warm-up does not remove (H200: 4.25 s context only, 3.97 s with a different fit, 0.79 s
with the same shapes). JAX's persistent compilation cache carries the compiled code from one job
to the next (:func:`use_compilation_cache`), in a folder the pool owns.

The template cannot warm itself: a runtime starts threads, and no process with threads may fork.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["JAX_CACHE_ENV", "JAX_CACHE_MAX_BYTES", "use_compilation_cache", "warm_up"]

#: The variable that carries the pool's JAX cache folder to a job's process (set at its fork).
JAX_CACHE_ENV = "KERASMAGIC_JAX_CACHE_DIR"
#: The most the pool's JAX cache may hold on disk; JAX evicts the least recently used entries past
#: it. Measured on CPU: a small Keras fit left 11 entries, 58 KiB; a jitted MLP step 5, 22 KiB.
JAX_CACHE_MAX_BYTES = 1 << 30


def use_compilation_cache() -> str:
    """Point JAX's persistent compilation cache at the pool's folder (``$KERASMAGIC_JAX_CACHE_DIR``),
    caching every compiled function however small or quick: a job's small fit compiles in well
    under JAX's default threshold of one second, and those are the ones every job repeats.
    Returns the folder ("" when there is none, or JAX is not imported).

    Example:
        >>> use_compilation_cache()      # in a job's process with JAX imported   # doctest: +SKIP
        '/tmp/kerasmagic-isolated-4242-jaxcache'
    """
    folder = os.environ.get(JAX_CACHE_ENV, "")
    jax = sys.modules.get("jax")
    if not folder or jax is None:
        return ""
    try:
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    except Exception:  # noqa: BLE001 - an older JAX without these options: the job compiles, as before
        return ""
    try:
        jax.config.update("jax_compilation_cache_max_size", JAX_CACHE_MAX_BYTES)
    except Exception:  # noqa: BLE001, S110 - an older JAX: no cap, the folder still goes with the pool
        pass
    return folder


@contextmanager
def output_to(target_fd: int) -> Iterator[None]:
    """Send fds 1 and 2 to ``target_fd`` for the block, then back: what a template's imports and a
    spare's warm-up print must never reach a cell (the job's pipes are fds 1 and 2 already)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(target_fd, 1)
    os.dup2(target_fd, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def _quietly(fn: Callable[[], None]) -> None:
    """Run ``fn`` with fds 1 and 2 on /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with output_to(devnull):
            fn()
    finally:
        os.close(devnull)


def _device_context(backend: str) -> None:
    """Create the backend's GPU context now, where it has one (the largest part on a GPU)."""
    if backend == "torch":
        torch = sys.modules["torch"]  # imported by the template (warm_up checks)
        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
    elif backend == "jax":
        sys.modules["jax"].numpy.zeros(1).block_until_ready()


def _small_fit() -> None:
    # Imported in a spare only, where the template imported Keras already.
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(np.zeros((64, 8), "float32"), np.zeros(64, "float32"), epochs=1, batch_size=32, verbose=0)
    model.predict(np.zeros((8, 8), "float32"), verbose=0)
    del model
    # Names, seeds and Keras' global state as a fresh process has them (dense, not dense_2).
    keras.backend.clear_session()


def warm_up() -> float:
    """Warm this process's Keras backend up: its device context and a small fit; the seconds it
    took (0.0: nothing to warm, Keras is not imported).

    Never raises and never prints: a failed warm-up costs the job its speed, never its run.

    Example (in a spare, before it says ready; here it would start this process's runtime):
        >>> seconds = warm_up()    # doctest: +SKIP
    """
    keras = sys.modules.get("keras")
    if keras is None:
        return 0.0
    try:
        backend = str(keras.backend.backend())
    except Exception:  # noqa: BLE001 - an odd Keras: the job runs unwarmed, as a bare fork would
        return 0.0
    if backend not in ("tensorflow", "torch", "jax") or backend not in sys.modules:
        return 0.0
    started = time.perf_counter()

    def run() -> None:
        _device_context(backend)
        _small_fit()

    try:
        _quietly(run)
    except Exception:  # noqa: BLE001, S110 - anything printed now would read as the job's first output
        pass
    return time.perf_counter() - started

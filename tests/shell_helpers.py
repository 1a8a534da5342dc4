"""Running cells in the tests' real ``InteractiveShell``, as a user would.

A plain module beside the root ``conftest.py``: pytest puts this folder on ``sys.path`` for
that conftest (its rootdir-relative "prepend" import), so ``from shell_helpers import run``
works under ``pytest`` and ``python -m pytest`` alike (``tests.conftest`` needed the
repository root on ``sys.path``, which only ``python -m`` adds).
"""

from __future__ import annotations

from typing import Any

__all__ = ["REGISTRY_FIX_REASON", "error_of", "registry_pins_graphs", "run"]


def run(shell: Any, cell: str) -> Any:
    """Run ``cell`` as a user would (history on, so Out[] and _ fill), failing on any error."""
    result = shell.run_cell(cell, store_history=True)
    if not result.success:
        raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}\n{cell}")
    return result.result


#: Why a registry-purge test runs on one side of TensorFlow 2.22 only (its twin runs on the other).
REGISTRY_FIX_REASON = ("TensorFlow 2.22 carries the upstream custom_gradient fix (PR 109334): its registry "
                       "entries pin no graph, the purge stands down, and the twin test checks that side")


def registry_pins_graphs() -> bool:
    """True on the TensorFlow under test when its CustomGradient entries pin graphs (before 2.22)."""
    import tensorflow  # noqa: F401 - the tests asking this run with TensorFlow; the answer needs it imported

    from kerasmagic.registry_purge import entries_pin_graphs

    return bool(entries_pin_graphs())


def error_of(result: Any) -> BaseException | None:
    """The exception a ``run_cell`` result carries, raised before or during execution."""
    return result.error_before_exec or result.error_in_exec


#: A small compiled Keras model factory and data, run in a shell by the `keras_shell` fixture.
MAKE_MODEL = """
import gc, weakref
import numpy as np
import keras

def make_model(width=64):
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(width, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model

x = np.random.default_rng(0).random((256, 16), dtype=np.float32)
y = x.sum(axis=1, keepdims=True)
"""

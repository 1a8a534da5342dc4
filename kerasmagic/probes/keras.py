"""Keras, observed from outside: Keras 3 (any backend) and legacy tf-keras.

Keras 3 keeps its global state per thread (``global_state.GLOBAL_STATE_TRACKER`` is a
``threading.local``), so name counters read here are the calling thread's: call these from
the kernel's main thread, never from the sampler.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from .availability import Unavailable, guarded

__all__ = ['backend', 'callback_classes', 'history_classes', 'iter_models', 'keras3', 'model_classes',
           'model_footprint', 'name_counters', 'optimizer_state_origin', 'optimizer_state_read', 'snapshot',
           'status', 'tf_keras', 'variable_bytes', 'version']


def keras3():
    """The imported Keras 3 module, or None (never imports it).

    Example:
        >>> keras3() is None or keras3().__version__.startswith("3")
        True
    """
    keras = sys.modules.get("keras")
    if keras is None or not str(getattr(keras, "__version__", "0")).startswith("3"):
        return None
    return keras


def tf_keras():
    """The imported legacy ``tf_keras`` module (``TF_USE_LEGACY_KERAS=1``), or None.

    Example:
        >>> tf_keras()                    # doctest: +SKIP
        <module 'tf_keras' ...>
    """
    return sys.modules.get("tf_keras")


def status() -> str | Unavailable:
    """``"imported"`` when Keras 3 or tf_keras is loaded in this process, else why not.

    Example:
        >>> status()                      # in a process that never imported Keras  # doctest: +SKIP
        Unavailable(reason='not_imported', detail='Keras is not imported in this process')
    """
    if keras3() is None and tf_keras() is None:
        return Unavailable("not_imported", "Keras is not imported in this process")
    return "imported"


def version() -> dict[str, str]:
    """The version of each imported Keras, keyed by package.

    Example:
        >>> version()                     # doctest: +SKIP
        {'keras': '3.15.1'}
    """
    versions = {}
    if keras3() is not None:
        versions["keras"] = keras3().__version__
    if tf_keras() is not None:
        versions["tf_keras"] = getattr(tf_keras(), "__version__", "unknown")
    return versions


def backend() -> str | Unavailable:
    """Keras' backend (``tensorflow``, ``jax``, ``torch``); tf_keras is always ``tensorflow``.

    Example:
        >>> backend()                     # doctest: +SKIP
        'tensorflow'
    """
    if keras3() is not None:
        return keras3().backend.backend()
    if tf_keras() is not None:
        return "tensorflow (tf-keras)"
    return Unavailable("not_imported", "Keras is not imported in this process")


def name_counters() -> dict[str, int]:
    """Keras's layer-name counters: ``{"dense": 80}`` is why the next layer is ``dense_80``.

    Read on the main thread: Keras 3 keeps them in thread-local state.

    Example:
        >>> name_counters()               # after building two Dense layers  # doctest: +SKIP
        {'dense': 2}
    """
    counters: dict[str, int] = {}
    if keras3() is not None:
        global_state = sys.modules["keras.src.backend.common.global_state"]
        uids = global_state.get_global_attribute("object_name_uids") or {}
        counters.update({str(k): int(v) for k, v in uids.items()})
    legacy = tf_keras()
    if legacy is not None:
        legacy_backend = sys.modules.get("tf_keras.src.backend")
        per_graph = getattr(legacy_backend, "PER_GRAPH_OBJECT_NAME_UIDS", None)
        tf_ops = sys.modules.get("tensorflow.python.framework.ops")
        if per_graph is not None and tf_ops is not None:
            graph = tf_ops.get_default_graph()
            for key, value in per_graph.get(graph, {}).items():
                name = _legacy_counter_name(key)
                counters[name] = max(counters.get(name, 0), int(value))
    return counters


def _legacy_counter_name(key: Any) -> str:
    """tf-keras keys its counters ``(namespace, name)``: ``('', 'dense')`` is the ``dense`` users
    see in ``dense_2``; a model's own namespace (layers named inside it) reads ``model/dense``.

    Example:
        >>> _legacy_counter_name(("", "dense")), _legacy_counter_name(("encoder", "dense")), _legacy_counter_name("x")
        ('dense', 'encoder/dense', 'x')
    """
    if isinstance(key, tuple) and len(key) == 2:
        namespace, name = key
        return f"{namespace}/{name}" if namespace else str(name)
    return str(key)


def model_classes() -> tuple[type, ...]:
    """The Model base classes of every imported Keras, for isinstance checks.

    Example:
        >>> isinstance(object(), model_classes())
        False
    """
    classes = []
    if keras3() is not None:
        classes.append(keras3().Model)
    legacy = tf_keras()
    if legacy is not None and hasattr(legacy, "Model"):
        classes.append(legacy.Model)
    return tuple(classes)


def history_classes() -> tuple[type, ...]:
    """The ``History`` callback classes of every imported Keras (a History pins its model).

    Example:
        >>> isinstance(object(), history_classes())
        False
    """
    classes = []
    if keras3() is not None:
        classes.append(keras3().callbacks.History)
    legacy = tf_keras()
    if legacy is not None:
        classes.append(legacy.callbacks.History)
    return tuple(classes)


def callback_classes() -> tuple[type, ...]:
    """The ``Callback`` base classes of every imported Keras (a callback holds ``.model``).

    Example:
        >>> isinstance(object(), callback_classes())
        False
    """
    classes = []
    if keras3() is not None:
        classes.append(keras3().callbacks.Callback)
    legacy = tf_keras()
    if legacy is not None:
        classes.append(legacy.callbacks.Callback)
    return tuple(classes)


def variable_bytes(variables) -> int:
    """Bytes of a list of variables (weights, optimizer slots), read from shape and dtype.

    Example:
        >>> variable_bytes([])
        0
    """
    total = 0
    for variable in variables:
        size = 1
        for dim in variable.shape:
            size *= int(dim or 0)
        dtype = variable.dtype
        itemsize = getattr(dtype, "size", None)
        if itemsize is None:
            import numpy as np

            itemsize = np.dtype(str(dtype)).itemsize
        total += size * itemsize
    return total


def model_footprint(model) -> dict[str, Any]:
    """Name, class, weight bytes and optimizer-state bytes of one Keras model.

    Example:
        >>> model_footprint(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))  # doctest: +SKIP
        {'name': 'sequential', 'class': 'Sequential', 'weight_bytes': 40, 'optimizer_bytes': 0}
    """
    optimizer = getattr(model, "optimizer", None)
    optimizer_variables = getattr(optimizer, "variables", None) if optimizer is not None else None
    if callable(optimizer_variables):  # tf-keras exposes variables() as a method
        optimizer_variables = optimizer_variables()
    return {
        "name": getattr(model, "name", "?"),
        "class": type(model).__name__,
        "weight_bytes": guarded(lambda: variable_bytes(model.weights), "sizing weights"),
        "optimizer_bytes": guarded(
            lambda: variable_bytes(optimizer_variables or []), "sizing optimizer state"
        ),
    }


def _is_restored_optimizer(optimizer) -> bool:
    """tf-keras' stand-in for the optimizer of a SavedModel loaded with ``compile=False``: never
    "built", yet it holds the file's slot variables (Adam's moments: twice the weights; issue 20)."""
    return type(optimizer).__name__ == "RestoredOptimizer" and bool(getattr(optimizer, "variables", None))


def optimizer_state_origin(model) -> str:
    """Where a model's optimizer state came from: ``none``, ``not_built``, ``trained`` or ``restored``.

    ``restored`` means the optimizer holds its slot variables although this process never
    built a training step for the model: they came with it, which is what
    ``load_model(path, compile=True)`` does (Keras 3 calls ``optimizer.build()`` while
    loading, then reads the saved slots). Those bytes serve only further training; for
    inference ``compile=False`` skips them. ``train_function`` is how we tell: ``fit`` and
    ``train_on_batch`` set it on their first step, loading leaves it None.

    Example:
        >>> model = keras.models.load_model("trained.keras")         # doctest: +SKIP
        >>> optimizer_state_origin(model)                             # doctest: +SKIP
        'restored'
        >>> optimizer_state_origin(object())
        'none'
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return "none"
    if _is_restored_optimizer(optimizer):
        return "restored"
    if not getattr(optimizer, "built", False):
        return "not_built"
    if getattr(model, "train_function", None) is None:
        return "restored"
    return "trained"


def optimizer_state_read(model) -> dict[str, Any] | None:
    """What a model's optimizer state holds, read from its variables: its slot variables (Adam's
    moments, momentum), how many hold values, whether they came back from a file (``restored_slots``),
    beside the scalars (step counter, learning rate). None without a built optimizer.

    A freshly built optimizer's slots are all zeros; restored slots are not. So this tells "the
    file's optimizer state came with the model" from "an empty optimizer of the same size was
    built": a Keras 3 ``.h5`` load restores only the scalars (12 B), ``model_from_json`` +
    ``load_weights`` + ``compile`` restores nothing. Reads every slot once (about a copy of them).

    Example:
        >>> optimizer_state_read(keras.models.load_model("trained.keras"))     # doctest: +SKIP
        {'optimizer': 'Adam', 'slots': 4, 'slot_bytes': 2048, 'filled_slots': 4, ..., 'restored_slots': 4, ...}
        >>> optimizer_state_read(object()) is None
        True
    """
    import numpy as np

    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not (getattr(optimizer, "built", False) or _is_restored_optimizer(optimizer)):
        return None
    variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
    scalars = {id(v) for v in (getattr(optimizer, "_iterations", None), getattr(optimizer, "_learning_rate", None))
               if v is not None}
    slots = [v for v in variables if id(v) not in scalars]
    filled = [v for v in slots if np.any(np.asarray(v.numpy() if hasattr(v, "numpy") else v))]
    iterations = getattr(optimizer, "_iterations", None)
    step = int(np.asarray(iterations.numpy())) if iterations is not None else None
    # Keras loads an optimizer's variables all together or not at all (it skips them, warning, when
    # the counts differ): a step counter past 0 or any slot holding a value means the saved state came
    # back, zeros included (a model trained on all-zero gradients has zero moments).
    restored = bool(filled) or bool(step)
    return {
        "optimizer": type(optimizer).__name__,
        "slots": len(slots),
        "slot_bytes": variable_bytes(slots),
        "filled_slots": len(filled),
        "filled_slot_bytes": variable_bytes(filled),
        "scalar_bytes": variable_bytes([v for v in variables if id(v) in scalars]),
        "iterations": step,
        "restored_slots": len(slots) if restored else 0,
        "restored_slot_bytes": variable_bytes(slots) if restored else 0,
    }


def iter_models(objects) -> Iterator[Any]:
    """The Keras models among ``objects``.

    Example:
        >>> list(iter_models([1, "a", None]))
        []
    """
    classes = model_classes()
    if not classes:
        return
    for obj in objects:
        if isinstance(obj, classes):
            yield obj


def snapshot() -> dict[str, Any]:
    """Keras facts of the calling thread as JSON-able values.

    Example:
        >>> snapshot()["status"]   # before `import keras`
        Unavailable(reason='not_imported', detail='Keras is not imported in this process')
    """
    state = status()
    if isinstance(state, Unavailable):
        return {"status": state}
    return {
        "status": state,
        "version": guarded(version, "reading the Keras version"),
        "backend": guarded(backend, "reading the Keras backend"),
        "name_counters": guarded(name_counters, "reading Keras name counters"),
    }

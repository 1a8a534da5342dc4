"""How a value crosses between the kernel and a worker, one name at a time.

- Modules travel by name and are imported again on the other side.
- Keras models travel through their own ``.keras`` format (a file in the job folder): it
  carries architecture, weights and optimizer state, and it is what Keras promises to load.
- A Keras ``History`` comes back as an :class:`IsolatedHistory` (a real one holds the model).
- Everything else goes through cloudpickle with pickle protocol 5: buffers of 1 MiB and
  more (numpy arrays, pandas blocks) are written *out of band* to files in the job folder
  (``/dev/shm`` when it has room) and mapped copy-on-write on the other side, so a large
  array is written once and never copied through a pipe.

Each name is encoded on its own, so that a failure names the one value that cannot travel.
An encoded value (a *spec*) is a small dict whose ``format`` says how it travels (``pickle``,
``keras``, ``history``, ``module``); it rides inside the job's messages
(:mod:`kerasmagic.isolation.messages`), whose own discriminator is ``kind``.
"""

from __future__ import annotations

import importlib
import io
import mmap
import os
import pickle
import re
import shutil
import sys
import tempfile
import types
from typing import Any

from .leftovers import owned_prefix
from .result import IsolatedHistory, ShippedName

#: Buffers at least this large go to files; smaller ones stay inside the pickle.
OUT_OF_BAND_MIN_BYTES = 1 << 20
#: Pickles at least this large are written to a file instead of the message.
INLINE_MAX_BYTES = 1 << 20
#: Use /dev/shm (RAM) for the job folder only when it has this much room (Docker gives 64 MB).
_SHM_MIN_FREE_BYTES = 2 << 30


#: Frameworks whose import takes GPU memory or a large CPU pool. A value coming back from a
#: worker never imports one of them into a kernel that has not imported it itself.
GUARDED_FRAMEWORKS = frozenset({"tensorflow", "keras", "tf_keras", "jax", "jaxlib", "torch"})


class FrameworkNotImported(Exception):
    """Rebuilding a value would import ``module`` (a framework) into a kernel that lacks it."""

    def __init__(self, module: str) -> None:
        super().__init__(module)
        self.module = module


def _refuse_unimported(module_name: str) -> None:
    top = module_name.split(".")[0]
    if top in GUARDED_FRAMEWORKS and top not in sys.modules:
        raise FrameworkNotImported(top)


class _GuardedUnpickler(pickle.Unpickler):
    """An unpickler that refuses, instead of importing, a framework the kernel has not imported.

    Every class or function a pickle names goes through ``find_class``, which is where the
    import would happen; cloudpickle's by-value functions import the modules they use through
    its ``subimport`` helpers, which are wrapped with the same check.
    """

    def find_class(self, module: str, name: str) -> Any:
        _refuse_unimported(module)
        found = super().find_class(module, name)
        if module.split(".")[0] == "cloudpickle" and name in ("subimport", "dynamic_subimport"):
            def guarded(module_name: str, *args: Any) -> Any:
                _refuse_unimported(module_name)
                return found(module_name, *args)

            return guarded
        return found


class ShippingError(Exception):
    """A value that cannot travel; ``reason`` says why in words a user can act on."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def make_job_directory() -> str:
    """A private folder for one job's files, in RAM (/dev/shm) when it has room."""
    parent = None
    if os.path.isdir("/dev/shm"):
        try:
            if shutil.disk_usage("/dev/shm").free >= _SHM_MIN_FREE_BYTES:
                parent = "/dev/shm"
        except OSError:
            parent = None
    # Named after this kernel: a later template removes the folders of kernels that are gone.
    return tempfile.mkdtemp(prefix=owned_prefix("isolated"), dir=parent)


def _keras_model_module(value: Any) -> str | None:
    """``"keras"`` or ``"tf_keras"`` when ``value`` is a model of an imported Keras; never imports."""
    for module_name in ("keras", "tf_keras"):
        module = sys.modules.get(module_name)
        model_class = getattr(module, "Model", None) if module is not None else None
        if isinstance(model_class, type) and isinstance(value, model_class):
            return module_name
    return None


def _is_keras_history(value: Any) -> bool:
    for module_name in ("keras", "tf_keras"):
        module = sys.modules.get(module_name)
        callbacks = getattr(module, "callbacks", None) if module is not None else None
        history_class = getattr(callbacks, "History", None)
        if isinstance(history_class, type) and isinstance(value, history_class):
            return True
    return False


def why_unpicklable(value: Any, exc: BaseException) -> str:
    """Turn a pickling exception into a reason a user can act on.

    Example:
        >>> why_unpicklable((i for i in []), TypeError("cannot pickle 'generator' object"))
        'generator objects cannot be pickled'
    """
    text = str(exc)
    match = re.search(r"cannot pickle '([^']+)' object", text)
    if match:
        inner = match.group(1)
        if inner.split(".")[-1] == type(value).__name__:
            return f"{inner} objects cannot be pickled"
        return f"it holds a {inner!r} object, which cannot be pickled"
    return f"pickling failed with {type(exc).__name__}: {text}"


def _float_list(values: Any) -> list:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return list(values)


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]


def _pickle(name: str, value: Any, directory: str) -> dict[str, Any]:
    import cloudpickle  # deferred: `import kerasmagic.isolation` must stay cheap

    stem = os.path.join(directory, f"{_file_stem(name)}-{os.getpid()}-{id(value):x}")
    buffer_paths: list[str] = []

    def keep_small_write_large(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True  # true: keep it inside the pickle
        path = f"{stem}.buf{len(buffer_paths)}"
        with open(path, "wb") as handle:
            handle.write(raw)
        buffer_paths.append(path)
        return False

    try:
        data = cloudpickle.dumps(value, protocol=5, buffer_callback=keep_small_write_large)
    except Exception as exc:  # noqa: BLE001 - any pickling failure becomes a named, explained error
        for path in buffer_paths:
            os.unlink(path)
        raise ShippingError(name, why_unpicklable(value, exc)) from None
    size = len(data) + sum(os.path.getsize(p) for p in buffer_paths)
    spec: dict[str, Any] = {"format": "pickle", "buffers": buffer_paths, "size_bytes": size}
    if len(data) >= INLINE_MAX_BYTES:
        path = f"{stem}.pickle"
        with open(path, "wb") as handle:
            handle.write(data)
        spec["path"] = path
    else:
        spec["data"] = data
    return spec


def encode(name: str, value: Any, directory: str) -> dict[str, Any]:
    """A picklable description of ``value`` (small) plus files in ``directory`` (large parts).

    Raises:
        ShippingError: the value cannot travel; ``reason`` says why.

    Example:
        >>> folder = make_job_directory()
        >>> spec = encode("x", [1, 2, 3], folder)
        >>> spec["format"], decode(spec)
        ('pickle', [1, 2, 3])
        >>> shutil.rmtree(folder)         # the runner removes a job's folder when the job ends
    """
    if isinstance(value, types.ModuleType):
        return {"format": "module", "name": value.__name__, "size_bytes": 0}
    keras_module = _keras_model_module(value)
    if keras_module is not None:
        path = os.path.join(directory, f"{_file_stem(name)}-{os.getpid()}-{id(value):x}.keras")
        try:
            value.save(path)
        except Exception as exc:  # noqa: BLE001 - fall back to pickling, which names its own failure
            try:
                return _pickle(name, value, directory)
            except ShippingError:
                raise ShippingError(name, f"saving the Keras model failed ({type(exc).__name__}: {exc})") from None
        return {"format": "keras", "module": keras_module, "path": path, "size_bytes": os.path.getsize(path)}
    if _is_keras_history(value):
        return {
            "format": "history",
            "history": {str(k): _float_list(v) for k, v in dict(value.history).items()},
            "epoch": list(getattr(value, "epoch", [])),
            "params": dict(getattr(value, "params", None) or {}),
            "size_bytes": 0,
        }
    return _pickle(name, value, directory)


def _map_file(path: str) -> Any:
    size = os.path.getsize(path)
    if size == 0:
        return bytearray()
    with open(path, "rb") as handle:
        # Copy-on-write: the array is writable, nothing is copied until it is written, and
        # the mapping outlives the file (the job folder is deleted right after decoding).
        return mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)


def decode(spec: dict[str, Any], *, guard: bool = False) -> Any:
    """Rebuild a value from :func:`encode`'s description (in the other process).

    With ``guard`` (the kernel's side), a value whose rebuilding would import one of
    :data:`GUARDED_FRAMEWORKS` that this process has not imported raises
    :class:`FrameworkNotImported` instead, and nothing is imported.
    """
    format_ = spec["format"]
    if format_ == "module":
        if guard:
            _refuse_unimported(spec["name"])
        return importlib.import_module(spec["name"])
    if format_ == "keras":
        if guard:
            _refuse_unimported(spec["module"])
        module = importlib.import_module(spec["module"])
        # safe_mode=False: the file was written a moment ago by this user's own session, and
        # safe mode would refuse models with Lambda layers.
        return module.saving.load_model(spec["path"], safe_mode=False) if hasattr(module, "saving") \
            else module.models.load_model(spec["path"], safe_mode=False)
    if format_ == "history":
        return IsolatedHistory(spec["history"], spec["epoch"], spec["params"])
    if "path" in spec:
        with open(spec["path"], "rb") as handle:
            data = handle.read()
    else:
        data = spec["data"]
    buffers = [_map_file(p) for p in spec["buffers"]]
    if guard:
        return _GuardedUnpickler(io.BytesIO(data), buffers=buffers).load()
    return pickle.loads(data, buffers=buffers)


def describe(name: str, spec: dict[str, Any]) -> ShippedName:
    """How ``spec`` travelled, for the report."""
    how = spec["format"]
    if how == "pickle" and spec.get("buffers"):
        how = f"pickle + {len(spec['buffers'])} out-of-band buffer file(s)"
    elif how == "keras":
        how = ".keras file"
    elif how == "module":
        how = "module, imported by name"
    elif how == "history":
        how = "History → IsolatedHistory"
    return ShippedName(name, how, int(spec.get("size_bytes", 0)))

"""Who keeps Keras models and large arrays alive in a notebook session.

The places a notebook hides references, each reproduced in a real shell by ``tests/core/``: the user's
variables (and containers one level down), IPython's output cache (``Out[n]``, ``_n``,
``_``/``__``/``___`` and the copies in ``user_ns_hidden`` and on the display hook),
``History.model``, and the last exception's traceback frames (``LAST_EXCEPTION_HOLDERS``:
``sys.last_*``, IPython's ``InteractiveTB.tb`` and ``SyntaxTB``, ``last_execution_result.error_in_exec``).
Which names are IPython's rather than the user's is decided by :mod:`kerasmagic.ipython_names`.
"""

from __future__ import annotations

import gc
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .ipython_names import OUTPUT_CACHE_ALIASES, is_ipython_name, is_output_cache_name
from .probes import keras as keras_probe
from .probes.availability import Unavailable
from .tables import Report, Section, format_bytes

__all__ = ['LAST_EXCEPTION_HOLDERS', 'OUTPUT_CACHE_ALIASES', 'HeavyObject', 'Holder', 'HolderReport', 'collect_heavy',
           'describe', 'exception_holders', 'find_holders', 'is_heavy', 'is_output_cache_name',
           'iter_namespace_references', 'iter_references', 'last_exception_refs', 'live_models', 'pins_heavy',
           'quiet_scan', 'running_shell', 'tensor_device', 'tensor_nbytes', 'user_variable_names']

#: Arrays and tensors smaller than this are not worth listing.
LARGE_OBJECT_BYTES = 1 << 20

#: Every place Python and IPython keep the last exception, and so the locals of its frames, as
#: (owner, attribute): owner ``sys`` is the sys module, ``shell.X`` the shell's attribute X.
#: ``%tf_mem --who`` reports what these hold and ``%clear_tf`` drops them: one table for both.
LAST_EXCEPTION_HOLDERS: tuple[tuple[str, str], ...] = (
    ("sys", "last_exc"),
    ("sys", "last_value"),
    ("sys", "last_traceback"),
    ("sys", "last_type"),
    ("shell.InteractiveTB", "tb"),
    ("shell.SyntaxTB", "tb"),
    ("shell.SyntaxTB", "last_syntax_error"),
    ("shell.last_execution_result", "error_in_exec"),
)


def _isinstance(obj: Any, classes: tuple[type, ...]) -> bool:
    """``isinstance`` for any user object: one whose ``__class__`` raises (a lazy proxy, a
    half-initialised object) is judged by ``type(obj)`` instead of breaking a report."""
    if not classes:
        return False
    try:
        return isinstance(obj, classes)
    except Exception:  # noqa: BLE001 - a raising __class__ property
        return issubclass(type(obj), classes)


def tensor_nbytes(obj: Any) -> int | None:
    """Bytes of a numpy array or a TF/torch/JAX tensor, or None if ``obj`` is none of those.

    Looks at the type's module instead of importing frameworks.

    Example:
        >>> import numpy as np
        >>> tensor_nbytes(np.zeros(1000, dtype=np.float32)), tensor_nbytes("text")
        (4000, None)
    """
    module = type(obj).__module__ or ""
    root = module.split(".", 1)[0]
    try:
        if root == "numpy" and hasattr(obj, "nbytes"):
            return int(obj.nbytes)
        if root == "tensorflow" and hasattr(obj, "dtype") and hasattr(obj, "shape"):
            count = obj.shape.num_elements()
            return None if count is None else int(count * obj.dtype.size)
        if root == "torch" and hasattr(obj, "element_size"):
            return int(obj.nelement() * obj.element_size())
        if root in ("jax", "jaxlib") and hasattr(obj, "nbytes"):
            return int(obj.nbytes)
        if root == "keras" and hasattr(obj, "value") and hasattr(obj, "shape"):
            return tensor_nbytes(obj.value)
    except Exception:  # noqa: BLE001 - a half-built tensor must not break a report
        return None
    return None


def tensor_device(obj: Any) -> str | None:
    """Where a TF/torch/JAX tensor lives (``GPU:0``, ``cuda:1``, ``gpu:0``), None for host memory.

    Host memory (numpy, a tensor on a CPU device) is None: only a device worth naming is named.

    Example:
        >>> import numpy as np
        >>> tensor_device(np.zeros(3)) is None
        True
    """
    root = (type(obj).__module__ or "").split(".", 1)[0]
    try:
        if root == "tensorflow":
            name = str(getattr(obj, "device", "") or "").rsplit("device:", 1)[-1]
        elif root == "torch":
            name = str(getattr(obj, "device", "") or "")
        elif root in ("jax", "jaxlib") and callable(getattr(obj, "devices", None)):
            name = ", ".join(sorted(f"{d.platform}:{d.id}" for d in obj.devices()))
        elif root == "keras" and hasattr(obj, "value"):
            return tensor_device(obj.value)
        else:
            return None
    except Exception:  # noqa: BLE001 - a deleted or half-built tensor must not break a report
        return None
    return name if name and not name.lower().startswith("cpu") else None


def is_heavy(obj: Any) -> bool:
    """A Keras model, or an array/tensor of at least ``LARGE_OBJECT_BYTES``."""
    if _isinstance(obj, keras_probe.model_classes()):
        return True
    size = tensor_nbytes(obj)
    return size is not None and size >= LARGE_OBJECT_BYTES


def pins_heavy(obj: Any) -> bool:
    """``obj`` is heavy or keeps something heavy alive one level down (``History.model``, a list of models).

    The output cache is purged by this test: a displayed ``History`` pins its model.

    Example:
        >>> pins_heavy([1, 2, 3]), pins_heavy("text")
        (False, False)
    """
    return any(is_heavy(value) for _, value in _children("", obj))


def describe(obj: Any) -> dict[str, Any]:
    """What an object is and how many bytes it keeps alive."""
    if _isinstance(obj, keras_probe.model_classes()):
        footprint = keras_probe.model_footprint(obj)
        total = 0
        for key in ("weight_bytes", "optimizer_bytes"):
            if not isinstance(footprint[key], Unavailable):
                total += footprint[key]
        return {"kind": "model", "label": f"{footprint['class']} '{footprint['name']}'", "bytes": total, **footprint}
    size = tensor_nbytes(obj)
    shape = tuple(getattr(obj, "shape", ()) or ())
    device = tensor_device(obj)
    label = f"{type(obj).__name__}{list(shape)}" + (f" on {device}" if device else "")
    return {"kind": "tensor", "label": label, "bytes": size, "device": device}


@dataclass
class Holder:
    """One reference: ``where`` (e.g. ``Out[4]``) holds ``obj`` of ``kind``."""

    where: str
    kind: str  # variable, output_cache, history, exception, unreachable
    obj: Any = field(repr=False)


def _history_model(obj: Any) -> Any:
    if _isinstance(obj, keras_probe.history_classes()):
        return getattr(obj, "model", None)
    return None


def _safe_repr(key: Any) -> str:
    """A dict key for a label; user objects may have a ``__repr__`` that raises or is huge."""
    try:
        text = repr(key)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not break a report
        return f"<{type(key).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _children(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    """The value itself, History.model, and items of small containers one level down."""
    try:
        yield from _unguarded_children(name, value)
    except Exception:  # noqa: BLE001 - an odd container (a dict subclass that raises) is skipped
        return


def _unguarded_children(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    yield name, value
    model = _history_model(value)
    if model is not None:
        yield f"{name}.model", model
    if isinstance(value, (list, tuple)) and len(value) <= 1000:
        for index, item in enumerate(value):
            yield f"{name}[{index}]", item
            model = _history_model(item)
            if model is not None:
                yield f"{name}[{index}].model", model
    elif isinstance(value, dict) and len(value) <= 1000:
        for key, item in list(value.items()):
            label = f"{name}[{_safe_repr(key)}]"
            yield label, item
            model = _history_model(item)
            if model is not None:
                yield f"{label}.model", model


def user_variable_names(shell) -> list[str]:
    """Names the user defined, ``_private`` ones included: not IPython's (``is_ipython_name``).

    Example:
        >>> shell = get_ipython(); shell.run_cell("_m = 1; m = 2")     # doctest: +SKIP
        >>> {"_m", "m"} <= set(user_variable_names(shell))              # doctest: +SKIP
        True
    """
    return [name for name in list(shell.user_ns) if not is_ipython_name(name, shell)]


def _exception_owner(shell, owner: str) -> Any:
    if owner == "sys":
        return sys
    if shell is None:
        return None
    obj = shell
    for part in owner.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


def last_exception_refs(shell) -> list[tuple[str, Any, str, Any]]:
    """The entries of ``LAST_EXCEPTION_HOLDERS`` that hold something now, as
    (where, owner object, attribute, value); ``where`` reads e.g. ``shell.InteractiveTB.tb``."""
    found = []
    for owner_name, attribute in LAST_EXCEPTION_HOLDERS:
        owner = _exception_owner(shell, owner_name)
        try:
            value = getattr(owner, attribute, None) if owner is not None else None
        except Exception:  # noqa: BLE001 - a broken property must not break a report
            value = None
        if value is not None:
            found.append((f"{owner_name}.{attribute}", owner, attribute, value))
    return found


def _tracebacks(value: Any) -> Iterator[types.TracebackType]:
    """The tracebacks an exception or traceback keeps alive, chained exceptions included."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if type(item) is types.TracebackType:
            yield item
        elif issubclass(type(item), BaseException):
            stack.extend((item.__context__, item.__cause__, item.__traceback__))


def exception_holders(shell=None) -> Iterator[tuple[str, Any]]:
    """Locals of the frames the last exception keeps alive, as (where, value).

    Every holder in ``LAST_EXCEPTION_HOLDERS`` is followed (``shell`` for IPython's); a frame's
    label names the holders that reach it, e.g. ``... via sys.last_value, shell.InteractiveTB.tb``.
    """
    refs = last_exception_refs(shell)
    exception = next((value for _, _, _, value in refs if issubclass(type(value), BaseException)), None)
    label = type(exception).__name__ if exception is not None else "exception"
    frames: dict[int, tuple[types.FrameType, list[str]]] = {}
    for where, _owner, _attribute, value in refs:
        for newest in _tracebacks(value):
            tb: types.TracebackType | None = newest
            while tb is not None:
                _frame, via = frames.setdefault(id(tb.tb_frame), (tb.tb_frame, []))
                if where not in via:
                    via.append(where)
                tb = tb.tb_next
    for frame, via in frames.values():
        # A module-level frame's locals are the user namespace itself, not something the exception
        # keeps: its globals. Its code is "<module>", but "<cell line: 0>" on IPython 7.34.
        if frame.f_locals is frame.f_globals:
            continue
        for local_name, local_value in list(frame.f_locals.items()):
            yield (f"last exception ({label}): frame {frame.f_code.co_name}() local {local_name!r} "
                   f"via {', '.join(via)}", local_value)


def iter_namespace_references(namespace: dict[str, Any]) -> Iterator[Holder]:
    """What a script's variables hold (one level into containers, as for a notebook's).

    Dunder names (``__builtins__``, ``__name__``) are the interpreter's, not the user's.

    Example:
        >>> [h.where for h in iter_namespace_references({"pair": [1, 2], "__name__": "x"})]
        ['pair', 'pair[0]', 'pair[1]']
    """
    for name, value in list(namespace.items()):
        if name.startswith("__") and name.endswith("__"):
            continue
        for where, item in _children(name, value):
            yield Holder(where, "history" if where.endswith(".model") else "variable", item)


def iter_references(shell) -> Iterator[Holder]:
    """Every place in a notebook session that can hold a heavy object, with its label."""
    if shell is None:
        return
    user_ns = shell.user_ns
    for name in user_variable_names(shell):
        for where, value in _children(name, user_ns[name]):
            kind = "history" if where.endswith(".model") else "variable"
            yield Holder(where, kind, value)
    output_hist = getattr(getattr(shell, "history_manager", None), "output_hist", {}) or {}
    for number, value in list(output_hist.items()):
        for where, item in _children(f"Out[{number}]", value):
            yield Holder(where, "output_cache", item)
    for name, value in list(user_ns.items()):
        if is_output_cache_name(name):
            for where, item in _children(name, value):
                yield Holder(where, "output_cache", item)
    for name, value in list(shell.user_ns_hidden.items()):
        if is_output_cache_name(name):
            yield Holder(f"user_ns_hidden[{name!r}]", "output_cache", value)
    displayhook = getattr(shell, "displayhook", None)
    for name in OUTPUT_CACHE_ALIASES:
        value = getattr(displayhook, name, None)
        if value is not None:
            yield Holder(f"displayhook.{name}", "output_cache", value)
    last_result = getattr(shell, "last_execution_result", None)
    if last_result is not None and getattr(last_result, "result", None) is not None:
        yield Holder("last_execution_result.result", "output_cache", last_result.result)
    for where, value in exception_holders(shell):
        yield Holder(where, "exception", value)


@dataclass
class HeavyObject:
    """A model or large tensor with every place that holds it."""

    obj: Any = field(repr=False)
    info: dict[str, Any]
    holders: list[Holder]

    def to_dict(self) -> dict[str, Any]:
        info = {k: v for k, v in self.info.items()}
        info["holders"] = [{"where": h.where, "kind": h.kind} for h in self.holders]
        return info


class HolderReport(Report):
    """What keeps Keras models and large arrays alive, and where (``%tf_mem --who``).

    Example:
        >>> report = find_holders(get_ipython())      # doctest: +SKIP
        >>> print(report)                             # doctest: +SKIP
        Who holds what
        Sequential 'sequential' (1.2 MiB): Out[3], _3, model
    """

    def __init__(self, objects: list[HeavyObject], unreachable_models: list[HeavyObject] | None):
        # A report kept in a variable or in Out[] must not become one more holder itself.
        for item in [*objects, *(unreachable_models or [])]:
            item.obj = None
            for holder in item.holders:
                holder.obj = None
        self.objects = objects
        self.unreachable_models = unreachable_models

    def _title(self) -> str:
        return "Who holds what"

    def _sections(self) -> list[Section]:
        section = Section("Models and large arrays, largest first")
        for item in self.objects:
            places = ", ".join(h.where for h in item.holders)
            section.add(item.info["label"], format_bytes(item.info["bytes"]), places)
        if not self.objects:
            section.notes.append("nothing in your namespace, output cache, histories or last exception")
        sections = [section]
        if self.unreachable_models is not None:
            hidden = Section("Models alive but not reachable from the notebook")
            for item in self.unreachable_models:
                hidden.add(item.info["label"], format_bytes(item.info["bytes"]), "held by a closure, graph or cycle")
            if self.unreachable_models:
                hidden.notes.append("`%clear_tf` collects cycles and purges TF's gradient registry")
            sections.append(hidden)
        return sections

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": [o.to_dict() for o in self.objects],
            "unreachable_models": None
            if self.unreachable_models is None
            else [o.to_dict() for o in self.unreachable_models],
        }


@contextmanager
def quiet_scan() -> Iterator[None]:
    """Ignore warnings while we look at the user's objects.

    isinstance() reads an object's ``__class__``, and some objects warn on any attribute
    access (torch's deprecated ``torch.distributed.reduce_op`` printed a FutureWarning into
    the user's cell): such warnings are about our scan, not the user's code.

    Example:
        >>> import warnings
        >>> with quiet_scan():
        ...     warnings.warn("not shown")
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def collect_heavy(shell) -> list[HeavyObject]:
    """Group every heavy object reachable from the session by identity, with its holders."""
    by_id: dict[int, HeavyObject] = {}
    with quiet_scan():
        for holder in iter_references(shell):
            if not is_heavy(holder.obj):
                continue
            entry = by_id.get(id(holder.obj))
            if entry is None:
                entry = by_id[id(holder.obj)] = HeavyObject(holder.obj, describe(holder.obj), [])
            if all(h.where != holder.where for h in entry.holders):
                entry.holders.append(holder)
    return sorted(by_id.values(), key=lambda o: -(o.info["bytes"] or 0))


def find_holders(shell=None, census: bool = True) -> HolderReport:
    """Find what keeps models and large arrays alive (``%tf_mem --who``).

    Args:
        shell: the IPython shell (defaults to the running one); without one only the
            last exception and, with ``census``, unreachable models are reported.
        census: also scan every live object for Keras models nobody in the notebook
            can reach (about 200 ms in a session of 1.8 M objects).

    Example:
        >>> from kerasmagic import find_holders
        >>> print(find_holders())          # doctest: +SKIP
    """
    if shell is None:
        shell = running_shell()
    objects = collect_heavy(shell) if shell is not None else []
    unreachable = None
    if census:
        reachable = {id(o.obj) for o in objects}
        unreachable = [
            HeavyObject(model, describe(model), [])
            for model in live_models()
            if id(model) not in reachable
        ]
    return HolderReport(objects, unreachable)


def live_models() -> list[Any]:
    """Every live Keras model in the process (a full ``gc`` scan: use sparingly).

    A model's own inner models (Keras 3's ``Sequential`` builds a ``Functional`` in
    ``_functional``) are part of it, not separate models, and are left out.

    Example:
        >>> [m.name for m in live_models()]          # doctest: +SKIP
        ['sequential']
    """
    classes = keras_probe.model_classes()
    if not classes:
        return []
    with quiet_scan():
        try:
            models = [obj for obj in gc.get_objects() if isinstance(obj, classes)]
        except Exception:  # noqa: BLE001 - some object's __class__ raises: the slower, guarded scan
            models = [obj for obj in gc.get_objects() if _isinstance(obj, classes)]
    inner = {id(getattr(model, "_functional", None)) for model in models}
    return [model for model in models if id(model) not in inner]


def running_shell():
    """The running IPython shell, or None in a plain script (IPython is not imported for it)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    return ipython.get_ipython()

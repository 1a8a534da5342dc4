"""Who keeps Keras models, large arrays, DataFrames and TF1 graphs alive in a notebook session.

One search (:class:`HolderSearch`) from the notebook's roots serves ``%tf_mem --who`` and ``%clear_tf``.
The places a notebook hides references, each reproduced in a real shell by ``tests/core/``: the user's
variables (and what they hold: items, attributes, partials, closures, bound methods), IPython's
output cache (``Out[n]``, ``_n``, ``_``/``__``/``___`` and the copies in ``user_ns_hidden`` and on the display hook),
``History.model``, and the last exception's traceback frames (``LAST_EXCEPTION_HOLDERS``:
``sys.last_*``, IPython's ``InteractiveTB.tb`` and ``SyntaxTB``, ``last_execution_result.error_in_exec``).
Which names are IPython's rather than the user's is decided by :mod:`kerasmagic.ipython_names`.
"""

from __future__ import annotations

import functools
import gc
import mmap
import sys
import time
import types
import warnings
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .ipython_names import OUTPUT_CACHE_ALIASES, is_ipython_name, is_output_cache_name
from .probes import keras as keras_probe
from .probes.availability import Unavailable, guarded
from .tables import Report, Section, format_bytes

__all__ = ['LAST_EXCEPTION_HOLDERS', 'OUTPUT_CACHE_ALIASES', 'HeavyObject', 'Holder', 'HolderReport', 'HolderSearch',
           'caller_globals', 'collect_heavy', 'describe', 'exception_holders', 'find_holders', 'graph_ops', 'is_heavy',
           'is_output_cache_name', 'iter_namespace_references', 'iter_references', 'iter_roots',
           'last_exception_refs', 'live_models', 'namespace_roots', 'note_origin', 'origin_of', 'pins_heavy',
           'quiet_scan', 'root_namespaces', 'running_shell', 'session_search', 'tensor_device', 'tensor_nbytes',
           'user_variable_names']

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
    """``obj`` is heavy or keeps something heavy alive (``History.model``, a list of models, an
    object's attribute, a closure): the same search as ``%tf_mem --who``, from ``obj`` alone.

    Example:
        >>> pins_heavy([1, 2, 3]), pins_heavy("text")
        (False, False)
    """
    return bool(HolderSearch(roots=[("value", "variable", obj)]).heavy)


def describe(obj: Any) -> dict[str, Any]:
    """What an object is and how many bytes it keeps alive (``None`` where that is not known).

    Example:
        >>> import numpy as np
        >>> describe(np.zeros((512, 1024)))["label"], describe(np.zeros((512, 1024)))["bytes"]
        ('ndarray[512, 1024]', 4194304)
    """
    if _isinstance(obj, keras_probe.model_classes()):
        footprint = keras_probe.model_footprint(obj)
        total = 0
        for key in ("weight_bytes", "optimizer_bytes"):
            if not isinstance(footprint[key], Unavailable):
                total += footprint[key]
        return {"kind": "model", "label": f"{footprint['class']} '{footprint['name']}'", "bytes": total, **footprint}
    cls = type(obj)
    module = str(cls.__module__ or "")
    if module == "tensorflow.python.client.session":
        graph = getattr(obj, "graph", None)
        closed = " (closed)" if getattr(obj, "_closed", False) else ""
        return {"kind": "session", "label": f"{cls.__name__}{closed}, its graph {graph_ops(graph)} ops",
                "bytes": None, "graph_ops": graph_ops(graph)}
    if module == "tensorflow.python.framework.ops" and cls.__name__ == "Graph":
        return {"kind": "graph", "label": f"Graph, {graph_ops(obj)} ops", "bytes": None, "graph_ops": graph_ops(obj)}
    if isinstance(obj, _BUFFER_TYPES):
        try:
            length: int | None = len(obj)  # type: ignore[arg-type]  # one of _BUFFER_TYPES
        except (TypeError, ValueError):  # a closed mmap
            length = None
        return {"kind": "buffer", "label": f"{cls.__name__}[{format_bytes(length)}]", "bytes": length, "device": None}
    if _package(module) == "pandas":
        shape = "x".join(str(n) for n in getattr(obj, "shape", ()))
        return {"kind": "table", "label": f"{cls.__name__}[{shape}]", "bytes": _heavy_size(obj, _TABLE)}
    size = tensor_nbytes(obj)
    dims = tuple(getattr(obj, "shape", ()) or ())
    device = tensor_device(obj)
    label = f"{cls.__name__}{list(dims)}" + (f" on {device}" if device else "")
    return {"kind": "tensor", "label": label, "bytes": size, "device": device}


def graph_ops(graph: Any) -> int | str:
    """Ops in a TF1 graph, read from its node map (O(1)) as ``probes.tensorflow`` counts the default one.

    Example:
        >>> graph_ops(None)
        '?'
    """
    try:
        nodes = getattr(graph, "_nodes_by_id", None)
        return len(nodes) if nodes is not None else len(graph.get_operations())
    except Exception:  # noqa: BLE001 - not a graph, or one being torn down
        return "?"


@dataclass
class Holder:
    """One reference: ``where`` (e.g. ``Out[4]``) holds ``obj`` of ``kind``."""

    where: str
    kind: str  # variable, output_cache, history, module, exception, unreachable
    obj: Any = field(repr=False)
    #: The root the path starts from (``history`` of ``history.model``): what deleting frees it.
    root: str = ""


def _safe_repr(key: Any) -> str:
    """A dict key for a label; user objects may have a ``__repr__`` that raises or is huge."""
    try:
        text = repr(key)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not break a report
        return f"<{type(key).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


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
    namespace = getattr(shell, "user_ns", None)
    for frame, via in frames.values():
        # A module-level frame's locals are the user namespace itself, not something the exception
        # keeps: its globals. Its code is "<module>", but "<cell line: 0>" on IPython 7.34.
        if frame.f_locals is frame.f_globals:
            continue
        for local_name, local_value in list(frame.f_locals.items()):
            # A frame of a magic holding the notebook's namespace (`namespace = shell.user_ns`)
            # keeps nothing the namespace does not: naming it would repeat every variable.
            if local_value is namespace or local_value is frame.f_globals:
                continue
            yield (f"last exception ({label}): frame {frame.f_code.co_name}() local {local_name!r} "
                   f"via {', '.join(via)}", local_value)


def iter_namespace_references(namespace: dict[str, Any]) -> Iterator[Holder]:
    """Every place a script's variables hold a heavy object (the search ``%tf_mem --who`` does).

    Dunder names (``__builtins__``, ``__name__``) are the interpreter's, not the user's.

    Example:
        >>> import numpy as np
        >>> [h.where for h in iter_namespace_references({"pair": [1, np.ones(2**18)], "__name__": "x"})]
        ['pair[1]']
    """
    for item in HolderSearch(namespace=namespace, roots=list(namespace_roots(namespace))).heavy:
        for holder in item.holders:
            yield Holder(holder.where, holder.kind, item.obj, holder.root)


def namespace_roots(namespace: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """A script's variables as the search's roots, ``(name, "variable", value)``; dunders left out.

    Example:
        >>> list(namespace_roots({"x": 1, "__name__": "m"}))
        [('x', 'variable', 1)]
    """
    for name, value in list(namespace.items()):
        if not (name.startswith("__") and name.endswith("__")):
            yield name, "variable", value


def iter_references(shell) -> Iterator[Holder]:
    """Every place in a notebook session that holds a heavy object, with its label (the search
    ``%tf_mem --who`` does: variables and what they hold, the output cache, the last exception)."""
    if shell is None:
        return
    for item in HolderSearch(shell).heavy:
        for holder in item.holders:
            yield Holder(holder.where, holder.kind, item.obj, holder.root)


@dataclass
class HeavyObject:
    """A model or large tensor with every place that holds it."""

    obj: Any = field(repr=False)
    info: dict[str, Any]
    holders: list[Holder]
    #: How many references to it the search walked (items, attributes, roots): what it can account for
    #: of the object's reference count (:mod:`kerasmagic.remedies` tells "held elsewhere" by it).
    walked_refs: int = 0

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

    def __init__(self, objects: list[HeavyObject], unreachable_models: list[HeavyObject] | None,
                 search: HolderSearch | None = None):
        # A report kept in a variable or in Out[] must not become one more holder itself.
        for item in [*objects, *(unreachable_models or [])]:
            item.obj = None
            for holder in item.holders:
                holder.obj = None
        self.objects = objects
        self.unreachable_models = unreachable_models
        #: What the search cost: objects visited, whether it stopped at its budget, seconds.
        self.search = {"visited": search.visited, "truncated": search.truncated, "seconds": search.seconds,
                       "budget": search.budget} if search is not None else None

    def _title(self) -> str:
        return "Who holds what"

    def _sections(self) -> list[Section]:
        section = Section("Models, arrays, tables and graphs, largest first")
        for item in self.objects:
            places = ", ".join(h.where for h in item.holders)
            section.add(item.info["label"], format_bytes(item.info["bytes"]), places)
        if not self.objects:
            section.notes.append("nothing reachable from your variables (their attributes, items and closures), "
                                 "the output cache or the last exception")
        if self.search is not None and self.search["truncated"]:
            section.notes.append(
                f"the search stopped after {self.search['visited']:,} objects (its budget): holders further "
                "down than that are not listed")
        sections = [section]
        if self.unreachable_models is not None:
            hidden = Section("Models alive but not reachable from the notebook")
            for item in self.unreachable_models:
                hidden.add(item.info["label"], format_bytes(item.info["bytes"]),
                           "held outside the notebook: a cycle, a graph, a registry")
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
            "search": self.search,
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


# --- the holder search: one walk from the notebook's roots to every heavy object -------------------

#: Packages whose objects the search does not walk into: a model's layers, an optimizer's slots or a
#: DataFrame's blocks are part of the heavy object, and IPython's or our own objects are no place a
#: user put something. Heavy objects of these packages are still found wherever the user holds them.
_OPAQUE_PACKAGES = frozenset({
    "keras", "tf_keras", "tensorflow", "torch", "jax", "jaxlib", "numpy", "pandas", "scipy", "IPython",
    "ipykernel", "ipywidgets", "traitlets", "zmq", "tornado", "jupyter_client", "comm", "asyncio", "threading",
    "logging", "kerasmagic", "_pytest", "pytest", "pluggy", "sqlite3", "matplotlib", "abc", "typing",
})

#: Packages whose objects may be arrays or tensors (sized one by one by ``tensor_nbytes``).
_ARRAY_PACKAGES = frozenset({"numpy", "tensorflow", "torch", "jax", "jaxlib", "keras", "tf_keras"})

#: Values that hold nothing (or nothing a user can act on): never followed.
_ATOM_TYPES: tuple[type, ...] = (
    int, float, complex, str, range, slice, memoryview, type(None), type(Ellipsis),
    types.ModuleType, types.CodeType, types.FrameType, types.TracebackType, types.BuiltinFunctionType,
    types.GeneratorType, types.CoroutineType, types.CellType, types.GetSetDescriptorType,
    types.MemberDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType, property,
    staticmethod, classmethod,
)

#: How many references (items, attributes, closure cells) one search may look at: with it the search
#: stays under 0.5 s in a session of 1.8 M objects on a 2-core machine (``benchmarks/bench_tf_mem.py``
#: prints it); a search that stops early says so in its report.
SEARCH_BUDGET_OBJECTS = 250_000
#: A big container is read this many items at a time, the rest queued behind what was found so far:
#: a list of 300 000 records must not use up the budget before ``exp.model`` is looked at.
_CHUNK = 1_000
#: Holders listed per object, and direct holders followed back to the roots.
_MAX_HOLDERS = 30

# What the search does with an object, decided once per type.
_ATOM, _MODEL, _ARRAY, _TABLE, _SESSION, _GRAPH, _CALLBACK, _TF_FUNCTION = range(8)
_OPAQUE, _MAPPING, _SEQUENCE, _SET, _PARTIAL, _METHOD, _FUNCTION, _CLASS, _WALK = range(8, 17)
#: Raw buffers (``bytes``, ``bytearray``, ``mmap``): heavy from ``LARGE_OBJECT_BYTES`` on, never walked.
_BUFFER = 17
#: The categories whose objects are heavy (reported) rather than walked.
_HEAVY_CATEGORIES = frozenset({_MODEL, _ARRAY, _TABLE, _SESSION, _GRAPH, _BUFFER})
#: The buffer types: a list of 2 MiB ``bytearray`` chunks holds memory as surely as a list of arrays.
_BUFFER_TYPES: tuple[type, ...] = (bytes, bytearray, mmap.mmap)


def _package(module: Any) -> str:
    return str(module or "").split(".", 1)[0]


def _category(cls: type, models: tuple[type, ...], callbacks: tuple[type, ...]) -> int:
    """What the search does with objects of ``cls`` (cached per search: Keras may be imported later)."""
    if issubclass(cls, _BUFFER_TYPES):
        return _BUFFER
    if issubclass(cls, _ATOM_TYPES):
        return _ATOM
    if models and issubclass(cls, models):
        return _MODEL
    if callbacks and issubclass(cls, callbacks):
        return _CALLBACK
    module = str(getattr(cls, "__module__", "") or "")
    package = _package(module)
    if package == "pandas":
        return _TABLE if hasattr(cls, "memory_usage") else _OPAQUE
    if package == "tensorflow":
        if module == "tensorflow.python.client.session" and cls.__name__ in ("Session", "InteractiveSession"):
            return _SESSION
        if module == "tensorflow.python.framework.ops" and cls.__name__ == "Graph":
            return _GRAPH  # not FuncGraph: those are tf.function's own, inside a traced function
        if hasattr(cls, "python_function"):
            return _TF_FUNCTION
    if package in _ARRAY_PACKAGES:
        return _ARRAY
    if package in _OPAQUE_PACKAGES and not issubclass(cls, (dict, list, tuple, set, frozenset, deque)):
        return _OPAQUE
    if issubclass(cls, (dict, types.MappingProxyType)):
        return _MAPPING
    if issubclass(cls, (list, tuple, deque)):
        return _SEQUENCE
    if issubclass(cls, (set, frozenset)):
        return _SET
    if issubclass(cls, functools.partial):
        return _PARTIAL
    if issubclass(cls, types.MethodType):
        return _METHOD
    if issubclass(cls, types.FunctionType):
        return _FUNCTION
    if issubclass(cls, type):
        return _CLASS
    if package in _OPAQUE_PACKAGES:
        return _OPAQUE
    return _WALK


_attribute_labels: dict[type, dict[str, str]] = {}


def _attribute_label(cls: type, name: str) -> str:
    """``._model`` reads ``.model`` where the class has that property for it (a Keras callback)."""
    labels = _attribute_labels.get(cls)
    if labels is None:
        labels = {}
        if len(_attribute_labels) < 10_000:  # the classes of a long session: bounded
            _attribute_labels[cls] = labels
    label = labels.get(name)
    if label is None:
        public = name.lstrip("_")
        if public != name and public and isinstance(getattr(cls, public, None), property):
            label = f".{public}"
        else:
            label = f".{name}"
        labels[name] = label
    return label


_slot_names: dict[type, tuple[str, ...]] = {}


def _slots_of(cls: type) -> tuple[str, ...]:
    names = _slot_names.get(cls)
    if names is None:
        found: list[str] = []
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            found.extend(n for n in ((slots,) if isinstance(slots, str) else slots)
                         if n not in ("__dict__", "__weakref__"))
        names = tuple(found)
        if len(_slot_names) < 10_000:
            _slot_names[cls] = names
    return names


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    """An object's own attributes: its ``__dict__`` and ``__slots__``, never properties (they run code)."""
    cls = type(obj)
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001 - no __dict__, or one that raises
        namespace = None
    found = []
    if isinstance(namespace, dict):
        labels = _attribute_labels.get(cls) or {}
        found = [(labels.get(name) or _attribute_label(cls, str(name)), value) for name, value in namespace.items()]
    for name in _slots_of(cls):
        try:
            value = object.__getattribute__(obj, name)
        except AttributeError:  # an unset slot
            continue
        found.append((_attribute_label(cls, name), value))
    return found


def _function_edges(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    if _package(getattr(function, "__module__", "")) in _OPAQUE_PACKAGES:
        return  # a library's function: its closure is the library's
    closure = function.__closure__ or ()
    for name, cell in zip(function.__code__.co_freevars, closure, strict=False):
        try:
            yield f" (closure variable {name!r})", cell.cell_contents
        except ValueError:  # an empty cell: the variable is not assigned yet
            continue
    for index, value in enumerate(function.__defaults__ or ()):
        yield f".__defaults__[{index}]", value
    for name, value in (function.__kwdefaults__ or {}).items():
        yield f".__kwdefaults__[{name!r}]", value


_KEY, _INDEX = "key", "index"
_SET_MEMBER = " (a member of the set)"
_CONTAINER_CATEGORIES = frozenset({_MAPPING, _SEQUENCE, _SET})


def _piece(piece: Any) -> str:
    """A path piece as the user writes it: ``['name']``, ``[3]``, ``.model``."""
    if isinstance(piece, tuple):
        kind, key = piece
        return f"[{key}]" if kind == _INDEX else f"[{_safe_repr(key)}]"
    return piece


def _edges(obj: Any, category: int) -> list[Any]:
    """What ``obj`` holds, each with the piece of path a user would write to reach it: (piece, value)
    pairs, but a dict's (key, value) items and a list's or set's bare items (see ``_piece_of``)."""
    # Containers' pieces are (kind, key) and written out only for a path that is reported: formatting
    # every key of a 200 000-entry dict would be most of the search's cost.
    if category == _MAPPING:
        return list(obj.items())
    if category in (_SEQUENCE, _SET):
        return list(obj)
    if category == _PARTIAL:
        found = [(".func", obj.func)]
        found += [(f".args[{index}]", value) for index, value in enumerate(obj.args)]
        found += [(f".keywords[{name!r}]", value) for name, value in obj.keywords.items()]
        return found + list(_attributes(obj))
    if category == _METHOD:
        return [(".__self__", obj.__self__), (".__func__", obj.__func__)]
    if category == _FUNCTION:
        return list(_function_edges(obj))
    if category == _CLASS:
        if _package(getattr(obj, "__module__", "")) in _OPAQUE_PACKAGES:
            return []
        return [(f".{name}", value) for name, value in list(vars(obj).items())
                if not (name.startswith("__") and name.endswith("__"))]
    if category == _CALLBACK:
        # A History or another callback: its model, then (a user's subclass) its own attributes.
        found = [(".model", getattr(obj, "model", None))]
        if _package(type(obj).__module__) not in _OPAQUE_PACKAGES:
            found += [(label, value) for label, value in _attributes(obj) if label != ".model"]
        return found
    if category == _TF_FUNCTION:
        return [(".python_function", getattr(obj, "python_function", None))]
    if category == _WALK:
        return list(_attributes(obj))
    return []


def _heavy_size(obj: Any, category: int) -> int | None:
    """Bytes of an array, table or buffer, None if ``obj`` is not one (or too small to list)."""
    if category == _ARRAY:
        size = tensor_nbytes(obj)
    elif category == _BUFFER:
        try:
            size = len(obj)
        except (TypeError, ValueError):  # a closed mmap
            return None
    else:  # _TABLE
        try:
            usage = obj.memory_usage(index=True, deep=False)
            size = int(usage.sum()) if hasattr(usage, "sum") else int(usage)
        except Exception:  # noqa: BLE001 - an Index subclass or a half-built frame
            return None
    return size if size is not None and size >= LARGE_OBJECT_BYTES else None


#: Where each model was created, where known (a measured cell): id -> (weak reference, "cell [N]").
_origins: dict[int, tuple[Any, str]] = {}


def note_origin(obj: Any, where: str) -> None:
    """Remember that ``obj`` (a model) was created in ``where`` (e.g. ``cell [4]``), to tell models apart.

    Kept by weak reference: a noted model is never kept alive by it.

    Example:
        >>> note_origin(model, "cell [4]"); origin_of(model)      # doctest: +SKIP
        'cell [4]'
    """
    try:
        ref = weakref.ref(obj)
    except TypeError:
        return
    for key in [key for key, (old, _) in _origins.items() if old() is None]:
        del _origins[key]
    _origins[id(obj)] = (ref, where)


def origin_of(obj: Any) -> str | None:
    """Where ``obj`` was created, if :func:`note_origin` was told.

    Example:
        >>> origin_of(object()) is None
        True
    """
    entry = _origins.get(id(obj))
    return entry[1] if entry is not None and entry[0]() is obj else None


def iter_roots(shell=None, namespace: dict[str, Any] | None = None) -> Iterator[tuple[str, str, Any]]:
    """The notebook's roots as (where, kind, value): variables, ``Out[n]``/``_n`` and IPython's hidden
    copies, ``__main__``'s globals where they are not the notebook's namespace, the last exception.

    Without a shell the roots are ``namespace`` (default ``__main__``'s globals) and the last exception.

    Example:
        >>> [where for where, _, _ in iter_roots(namespace={"x": 1, "__name__": "m"})][:1]
        ['x']
    """
    if shell is not None:
        user_ns = shell.user_ns
        for name in user_variable_names(shell):
            if name in user_ns:
                yield name, "variable", user_ns[name]
        output_hist = getattr(getattr(shell, "history_manager", None), "output_hist", {}) or {}
        for number, value in list(output_hist.items()):
            yield f"Out[{number}]", "output_cache", value
        for name, value in list(user_ns.items()):
            if is_output_cache_name(name):
                yield name, "output_cache", value
        for name, value in list(shell.user_ns_hidden.items()):
            if is_output_cache_name(name):
                yield f"user_ns_hidden[{name!r}]", "output_cache", value
        displayhook = getattr(shell, "displayhook", None)
        for name in OUTPUT_CACHE_ALIASES:
            value = getattr(displayhook, name, None)
            if value is not None:
                yield f"displayhook.{name}", "output_cache", value
        last_result = getattr(shell, "last_execution_result", None)
        if last_result is not None and getattr(last_result, "result", None) is not None:
            yield "last_execution_result.result", "output_cache", last_result.result
    main = sys.modules.get("__main__")
    main_globals = getattr(main, "__dict__", None)
    if namespace is None and shell is None:
        namespace = main_globals
    if namespace is not None and (shell is None or namespace is not shell.user_ns):
        yield from namespace_roots(namespace)
    if shell is not None and isinstance(main_globals, dict) and main_globals is not shell.user_ns \
            and main_globals is not namespace:
        # A kernel's __main__ is normally the notebook's namespace; where it is another module (an
        # embedding app, a script that started IPython), its globals hold things too.
        for name, value in list(main_globals.items()):
            if not (name.startswith("__") and name.endswith("__")):
                yield f"__main__.{name}", "module", value
    for where, value in exception_holders(shell):
        yield where, "exception", value


def root_namespaces(shell=None, namespace: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The dicts whose entries :func:`iter_roots` gives as roots: the notebook's namespace (and
    ``__main__``'s globals where they are another module), or a script's ``namespace``.

    The search recognises them by identity wherever they are reached again (``ns = shell.user_ns``
    kept as a module global, ``g = globals()`` in a cell): what they hold is listed once, by its root
    name, never again as ``__main__.ns['model']``.

    Example:
        >>> namespace = {"x": 1}
        >>> root_namespaces(namespace=namespace)[0] is namespace
        True
    """
    main_globals = getattr(sys.modules.get("__main__"), "__dict__", None)
    found: list[Any] = []
    if shell is not None:
        found += [shell.user_ns, getattr(shell, "user_global_ns", None), main_globals]
    found.append(namespace if namespace is not None or shell is not None else main_globals)
    return [item for item in found if isinstance(item, dict)]


class HolderSearch:
    """One walk from the notebook's roots to every model, array, tensor, DataFrame, Session and Graph.

    It follows what a user can write down: variables, ``Out[n]``, items of lists and dicts, object
    attributes (``exp.model``), ``functools.partial`` arguments, closure variables, bound methods'
    ``__self__`` and a callback's ``.model``; it does not walk into frameworks' own objects (a
    model's layers are part of the model). ``%tf_mem --who`` reports it and ``%clear_tf`` frees and
    lists what it found: one truth for both.

    Example:
        >>> search = HolderSearch(namespace={"exp": {"data": np.ones(2**18)}})     # doctest: +SKIP
        >>> [h.where for h in search.heavy[0].holders]                            # doctest: +SKIP
        ["exp['data']"]
    """

    def __init__(self, shell=None, namespace: dict[str, Any] | None = None,
                 budget: int = SEARCH_BUDGET_OBJECTS, roots: list[tuple[str, str, Any]] | None = None) -> None:
        started = time.perf_counter()
        self.budget = budget
        #: References looked at (the budget counts these), not objects.
        self.visited = 0
        self.truncated = False
        self.root_values: dict[str, Any] = {}
        # child id -> [(parent id or None for a root, path piece, root kind, root order)]
        self._parents: dict[int, list[tuple[int | None, Any, str, int]]] = {}
        self._heavy: dict[int, tuple[Any, int | None, int]] = {}
        self._namespaces = {id(item) for item in root_namespaces(shell, namespace)} if roots is None \
            else {id(namespace)} if namespace is not None else set()
        # The walk allocates a tuple per reference; in a session of 1.8 M objects the collections
        # those allocations trigger cost more than the walk. It makes no garbage: collect none.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with quiet_scan():
                self._walk(iter(roots) if roots is not None else iter_roots(shell, namespace))
                self.heavy = self._group()
        finally:
            if collecting:
                gc.enable()
        self._parents = {}
        self._heavy = {}
        self.seconds = time.perf_counter() - started

    def _walk(self, roots: Iterator[tuple[str, str, Any]]) -> None:
        models, callbacks = keras_probe.model_classes(), keras_probe.callback_classes()
        categories: dict[type, int] = {cls: _ATOM for cls in (int, float, str, bool, type(None))}
        parents = self._parents
        heavy = self._heavy
        # id -> object for everything walked: keeps each alive, so that no id is reused during the walk.
        seen: dict[int, Any] = {}
        queue: deque[Any] = deque()

        def category_of(value: Any) -> int:
            cls = type(value)
            category = categories.get(cls)
            if category is None:
                category = categories[cls] = _category(cls, models, callbacks)
            return category

        def heavy_enough(key: int, value: Any, category: int) -> bool:
            if key in heavy:
                return True
            size = None
            if category in (_ARRAY, _TABLE, _BUFFER):
                size = _heavy_size(value, category)
                if size is None:
                    return False
            heavy[key] = (value, size, category)
            return True

        namespaces = self._namespaces
        for order, (where, kind, value) in enumerate(roots):
            self.root_values[where] = value
            try:
                category = category_of(value)
                key = id(value)
                if key in namespaces:  # `me = globals()`: its entries are roots already
                    continue
                if category == _ATOM or (category in _HEAVY_CATEGORIES and not heavy_enough(key, value, category)):
                    continue
            except Exception:  # noqa: BLE001, S112 - an odd object must not break the report
                continue
            parents.setdefault(key, []).append((None, where, kind, order))
            if key not in seen:
                seen[key] = value
                if category not in _HEAVY_CATEGORIES and category != _OPAQUE:
                    queue.append((value, None, 0))
        while queue:
            if self.visited >= self.budget:
                self.truncated = True
                break
            obj, edges, start = queue.popleft()
            parent = id(obj)
            holds = categories[type(obj)]
            if edges is None:
                try:
                    edges = _edges(obj, holds)
                except Exception:  # noqa: BLE001, S112 - a container or object that raises is skipped
                    continue
            if len(edges) - start > _CHUNK:
                queue.append((obj, edges, start + _CHUNK))
            chunk = edges[start:start + _CHUNK] if start or len(edges) > _CHUNK else edges
            self.visited += len(chunk) or 1
            # A dict's items are (key, value), a list's and a set's bare values, everything else
            # (piece, value): the piece of a container's item is made only for an item worth an edge.
            pairs = holds not in _CONTAINER_CATEGORIES or holds == _MAPPING
            for offset, item in enumerate(chunk):
                child = item[1] if pairs else item
                known_category = categories.get(type(child))
                if known_category == _ATOM:  # the common case first: ints, strings
                    continue
                try:
                    category = known_category if known_category is not None else category_of(child)
                    if category == _ATOM or category == _OPAQUE:
                        continue
                    key = id(child)
                    if key in namespaces:  # the notebook's namespace reached again: its entries are roots
                        continue
                    if category in _HEAVY_CATEGORIES and not heavy_enough(key, child, category):
                        continue
                except Exception:  # noqa: BLE001, S112 - a child whose __class__ or size raises
                    continue
                piece: Any
                if holds == _MAPPING:
                    piece = (_KEY, item[0])
                elif holds == _SEQUENCE:
                    piece = (_INDEX, start + offset)
                elif holds == _SET:
                    piece = _SET_MEMBER
                else:
                    piece = item[0]
                edge = (parent, piece, "", 0)
                known = parents.get(key)
                if known is not None:
                    known.append(edge)
                    continue
                parents[key] = [edge]
                seen[key] = child
                if category not in _HEAVY_CATEGORIES:
                    queue.append((child, None, 0))
        seen.clear()

    def _paths(self, target: int) -> list[Holder]:
        """One path from each root to ``target`` through each of its direct holders, shortest first."""
        found: dict[str, tuple[int, str, str]] = {}
        for first in self._parents.get(target, [])[:_MAX_HOLDERS]:
            queue = deque([(first, "")])
            expanded = {target}
            while queue and len(found) < _MAX_HOLDERS:
                (parent, piece, kind, order), suffix = queue.popleft()
                path = _piece(piece) + suffix
                if parent is None:
                    found.setdefault(path, (order, kind, piece))
                    continue
                if parent in expanded:
                    continue
                expanded.add(parent)
                queue.extend((edge, path) for edge in self._parents.get(parent, ()))
        holders = []
        for path, (_order, kind, root) in sorted(found.items(), key=lambda item: (item[1][0], len(item[0]))):
            if kind == "variable" and path.endswith(".model"):
                kind = "history"
            holders.append(Holder(path, kind, None, root))
        return holders

    def _group(self) -> list[HeavyObject]:
        objects = []
        for key, (obj, size, _) in self._heavy.items():
            info = describe(obj)
            if size is not None:
                info["bytes"] = size
            objects.append(HeavyObject(obj, info, self._paths(key), len(self._parents.get(key, ()))))
        objects.sort(key=lambda o: -(o.info["bytes"] or 0))
        _label_apart(objects)
        return objects

    def output_cache_values_holding_heavy(self) -> set[int]:
        """Ids of the output-cache values that lead to something heavy: what ``%clear_tf`` drops."""
        return {id(self.root_values[h.root]) for item in self.heavy for h in item.holders
                if h.kind == "output_cache" and h.root in self.root_values}

    def root_variables(self, obj: Any) -> list[str]:
        """The notebook variables to delete so that nothing of the notebook holds ``obj`` any more
        (``model`` and ``history`` for a model that ``history.model`` holds too).

        Example:
            >>> HolderSearch(namespace={"pair": [m]}).root_variables(m)      # doctest: +SKIP
            ['pair']
        """
        for item in self.heavy:
            if item.obj is obj:
                return list(dict.fromkeys(h.root for h in item.holders if h.kind in ("variable", "history")))
        return []


def _weights_of(model: Any) -> list[Any]:
    return list(model.weights)


def _label_apart(objects: list[HeavyObject]) -> None:
    """Models that share a label get the cell that created them (where known) or their address;
    weights shared with a larger model listed above are said once (``shared_bytes``)."""
    models = [o for o in objects if o.info.get("kind") == "model"]
    for item in models:
        origin = origin_of(item.obj)
        if origin is not None:
            item.info["origin"] = origin
            item.info["label"] += f" from {origin}"
    labels: dict[str, int] = {}
    for item in models:
        labels[item.info["label"]] = labels.get(item.info["label"], 0) + 1
    for item in models:
        if labels[item.info["label"]] > 1:
            item.info["label"] += f" at 0x{id(item.obj):x}"
    counted: dict[int, str] = {}
    for item in models:
        weights = guarded(functools.partial(_weights_of, item.obj), "listing weights")
        if not isinstance(weights, list):
            continue
        shared, owners = 0, []
        for variable in weights:
            owner = counted.get(id(variable))
            if owner is None:
                counted[id(variable)] = item.info["name"]
                continue
            size = guarded(functools.partial(keras_probe.variable_bytes, [variable]), "sizing a weight")
            shared += size if isinstance(size, int) else 0
            if owner not in owners:
                owners.append(owner)
        if owners:
            item.info["shared_bytes"] = shared
            item.info["label"] += f" (shares {format_bytes(shared)} of weights with {', '.join(map(repr, owners))})"


def caller_globals(depth: int = 1) -> dict[str, Any]:
    """Where a script's variables live: the globals of the module whose code called the public
    function that asks (``measure()``, ``clear_tf()``, ``fresh_model()`` without IPython).

    ``depth``: how far up from the public function's own frame the caller is; 1 where the public
    function calls this itself (a ``with`` block's ``__enter__`` too: the user's code calls it).

    Example:
        >>> def public():
        ...     return caller_globals()
        >>> public() is globals()
        True
    """
    return sys._getframe(depth + 1).f_globals


def session_search(shell, namespace: dict[str, Any] | None) -> HolderSearch:
    """The search of a session: in IPython the notebook's roots (``namespace`` is not needed there);
    in a script the variables of ``namespace`` (the caller's globals) and the last exception. The one
    search ``measure()`` and ``clear_tf()`` both read models' holders from, so that a script's module
    global is a holder to both.

    Example:
        >>> import numpy as np
        >>> data = np.ones(2**18)
        >>> [h.where for h in session_search(None, {"data": data}).heavy[0].holders]
        ['data']
    """
    if shell is not None:
        return HolderSearch(shell)
    return HolderSearch(namespace={} if namespace is None else namespace)


def collect_heavy(shell, namespace: dict[str, Any] | None = None) -> list[HeavyObject]:
    """Every heavy object reachable from the session, each with every place that holds it.

    Example:
        >>> [o.info["label"] for o in collect_heavy(get_ipython())]      # doctest: +SKIP
        ["Sequential 'sequential' from cell [3]", 'DataFrame[1000000x25]']
    """
    return HolderSearch(shell, namespace).heavy


def find_holders(shell=None, census: bool = True) -> HolderReport:
    """Find what keeps models and large arrays alive (``%tf_mem --who``).

    Args:
        shell: the IPython shell (defaults to the running one); without one only
            unreachable models (with ``census``) are reported.
        census: also scan every live object for Keras models nobody in the notebook
            can reach (about 200 ms in a session of 1.8 M objects).

    Example:
        >>> from kerasmagic import find_holders
        >>> print(find_holders())          # doctest: +SKIP
    """
    if shell is None:
        shell = running_shell()
    search = HolderSearch(shell) if shell is not None else None
    objects = search.heavy if search is not None else []
    unreachable = None
    if census:
        reachable = {id(o.obj) for o in objects}
        unreachable = [
            HeavyObject(model, describe(model), [])
            for model in live_models()
            if id(model) not in reachable
        ]
        _label_apart(unreachable)
    return HolderReport(objects, unreachable, search)


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

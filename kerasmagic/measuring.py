"""``%%tf_mem`` and ``measure()``: deltas and exact peaks for one cell or block."""

from __future__ import annotations

import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

from .holders import caller_globals, graph_ops, note_origin, quiet_scan, running_shell, session_search
from .probes import jax_devices as jax_probe
from .probes import keras as keras_probe
from .probes import nvml as nvml_probe
from .probes import process as process_probe
from .probes import tensorflow as tf_probe
from .probes import torch_cuda as torch_probe
from .probes.availability import Unavailable, guarded
from .probes.sample import keep_largest
from .records import NOT_WIRE, Record, wire
from .tables import Report, Section, format_bytes, format_value

__all__ = ['CellMeasurement', 'measure']


def _tf_in_use() -> dict[str, Any]:
    stats = tf_probe.allocator_stats()
    if isinstance(stats, Unavailable):
        return {}
    return {device: s["in_use_bytes"] for device, s in stats.items()}


def _gpu_process_bytes() -> dict[str, Any]:
    devices = nvml_probe.devices()
    if isinstance(devices, Unavailable):
        return {}
    return {
        f"GPU {d['index']}": d["process_used_bytes"] for d in devices if not isinstance(d, Unavailable)
    }


def _counters() -> dict[str, Any]:
    return {
        "graph_op_count": guarded(tf_probe.default_graph_op_count, "counting graph ops"),
        "custom_gradient_entries": guarded(tf_probe.custom_gradient_entries, "reading the registry"),
        "name_counters": guarded(keras_probe.name_counters, "reading name counters")
        if keras_probe.status() == "imported"
        else {},
    }


def _tf_peaks() -> dict[str, Any]:
    stats = tf_probe.allocator_stats()
    if isinstance(stats, Unavailable):
        return {}
    return {device: s["peak_bytes"] for device, s in stats.items()}


def _torch_peaks() -> dict[str, Any]:
    stats = torch_probe.allocator_stats()
    if isinstance(stats, Unavailable):
        return {}
    return {f"torch {device}": s["peak_allocated_bytes"] for device, s in stats.items()}


def _reset_torch_peaks() -> None:
    cuda = torch_probe.started_cuda()  # never start CUDA for the user
    if cuda is not None:
        for index in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(index)


def _jax_peaks() -> dict[str, Any]:
    stats = jax_probe.allocator_stats()
    if isinstance(stats, Unavailable):
        return {}
    return {f"JAX {device}": s["peak_bytes"] for device, s in stats.items() if isinstance(s["peak_bytes"], int)}


def _safe(probe, what: str) -> dict[str, Any]:
    """A dict-returning probe, or an empty dict (the report shows the figure as missing)."""
    value = guarded(probe, what)
    return value if isinstance(value, dict) else {}


def _models_in_reach(shell, namespace: dict[str, Any] | None, graphs: dict[str, Any] | None = None,
                     graph_ids: dict[str, int] | None = None) -> dict[int, tuple[Any, list[str]]]:
    """The Keras models the session can reach, by identity, each with where it is held; and, into
    ``graphs``, the ops of each TF1 graph the notebook holds other than the default one (a Session's
    graph too), keyed by where it is held: a cell that grows ``runner.graph`` shows it.

    In IPython that is the search ``%tf_mem --who`` does (variables and what they hold, the output
    cache, the last exception); in a script, from the variables of ``namespace``. No scan of every
    object: a measured cell stays cheap in a big session, and Keras' own inner models (a loaded
    ``Sequential`` keeps a ``Functional`` alive) are not mistaken for the user's.
    """
    classes = keras_probe.model_classes()
    if not classes and (graphs is None or tf_probe.module() is None):
        return {}
    search = session_search(shell, namespace)
    found: dict[int, tuple[Any, list[str]]] = {}
    tf_ops = sys.modules.get("tensorflow.python.framework.ops") if graphs is not None else None
    default = tf_ops.get_default_graph() if tf_ops is not None else None
    counted = set()  # a Session's graph that is held by name too is one graph, named by that name
    for item in sorted(search.heavy, key=lambda item: item.info["kind"] != "graph"):
        kind = item.info["kind"]
        if kind == "model" and _isinstance_any(item.obj, classes):
            found[id(item.obj)] = (item.obj, [h.where for h in item.holders])
        elif graphs is not None and kind in ("graph", "session") and item.holders:
            graph = item.obj if kind == "graph" else getattr(item.obj, "graph", None)
            if graph is not None and graph is not default and id(graph) not in counted:
                counted.add(id(graph))
                where = item.holders[0].where + ("" if kind == "graph" else ".graph")
                graphs.setdefault(where, graph_ops(graph))
                if graph_ids is not None:
                    # Its identity too: a graph that only changed the name holding it gained no ops.
                    graph_ids[where] = id(graph)
    return found


def _isinstance_any(obj: Any, classes: tuple[type, ...]) -> bool:
    with quiet_scan():
        return bool(classes) and isinstance(obj, classes)


def _guarded_models_in_reach(shell, namespace: dict[str, Any] | None, graphs: dict[str, Any] | None = None,
                             graph_ids: dict[str, int] | None = None) -> dict[int, tuple[Any, list[str]]]:
    found = guarded(lambda: _models_in_reach(shell, namespace, graphs, graph_ids), "finding models")
    return found if isinstance(found, dict) else {}


def _new_model_facts(model: Any, held_by: list[str]) -> dict[str, Any]:
    # Guarded: the block's own result (or exception) must never be replaced by ours.
    facts = guarded(lambda: keras_probe.model_footprint(model), "sizing a new model")
    if isinstance(facts, Unavailable):
        facts = {"name": getattr(model, "name", "?"), "class": type(model).__name__,
                 "weight_bytes": facts, "optimizer_bytes": facts}
    facts["held_by"] = held_by[:3]
    facts["optimizer_state"] = guarded(lambda: keras_probe.optimizer_state_origin(model),
                                       "reading the optimizer's state")
    if facts["optimizer_state"] == "restored":
        # What came with it, read from the optimizer's own variables: not every load path that
        # leaves a built optimizer restored its state (a Keras 3 .h5 restores only the scalars).
        facts["optimizer_read"] = guarded(lambda: keras_probe.optimizer_state_read(model),
                                          "reading the optimizer's variables")
    return facts


def _optimizer_note(model: dict[str, Any], weights: Any) -> str:
    """What the optimizer of a model loaded in this cell holds, as read from its variables."""
    read = model.get("optimizer_read")
    name = model["name"]
    if not isinstance(read, dict):
        return (f"'{name}' has a built optimizer of {format_bytes(model.get('optimizer_bytes'))} that this process "
                "never trained; whether its state was restored could not be read "
                f"({read.detail if isinstance(read, Unavailable) else 'no optimizer variables'}).")
    ratio = (f" ({read['restored_slot_bytes'] / weights:.1f}x the weights)"
             if isinstance(weights, int) and weights and read["restored_slot_bytes"] else "")
    optimizer, step = read["optimizer"], read["iterations"]
    if optimizer == "RestoredOptimizer" and read["restored_slots"]:
        # tf-keras loads a SavedModel's optimizer variables even with compile=False: that advice would
        # change nothing; saving without them does (checked in tests/core/test_new_models.py).
        return (f"'{name}' came with its optimizer's variables although loaded with compile=False: a SavedModel "
                f"brings its {read['restored_slots']} slot variables ({format_bytes(read['restored_slot_bytes'])}"
                f"{ratio}) in a RestoredOptimizer that only training could use. For inference, save it with "
                "model.save(path, include_optimizer=False) and load that.")
    if read["restored_slots"]:
        return (f"'{name}' came with its optimizer state: {read['restored_slots']} slot variables of its "
                f"{optimizer} ({read['filled_slots']} holding non-zero values), "
                f"{format_bytes(read['restored_slot_bytes'])}{ratio}, at step {step}; "
                "load_model(..., compile=True) restores it for further training. For inference, "
                "load_model(path, compile=False) leaves it out.")
    if not read["slots"]:
        return (f"'{name}' has a built {optimizer} without slot variables: only its step counter and learning rate "
                f"({format_bytes(read['scalar_bytes'])}, step {step}) came with it, not a saved optimizer state; "
                "training goes on with fresh slots.")
    return (f"'{name}' has a {optimizer} with {read['slots']} slot variables ({format_bytes(read['slot_bytes'])}), "
            f"all zeros, step {step}: no saved optimizer state is in it; training starts from a fresh optimizer.")


def _new_models_section(models: list[dict[str, Any]]) -> Section:
    section = Section("New models in this cell")
    for model in models:
        weights, optimizer = model.get("weight_bytes"), model.get("optimizer_bytes")
        total = weights + optimizer if isinstance(weights, int) and isinstance(optimizer, int) else weights
        held = ", ".join(model.get("held_by") or []) or "no variable of the notebook"
        section.add(f"{model['class']} '{model['name']}'", format_bytes(total),
                    f"weights {format_bytes(weights)}, optimizer state {format_bytes(optimizer)}; held by {held}")
        if model.get("optimizer_state") == "restored" and isinstance(optimizer, int) and optimizer > 0:
            section.notes.append(_optimizer_note(model, weights))
    return section


#: ``measure`` blocks running now, outermost first (nested blocks fold their peaks outward).
_active_measures: list[measure] = []


def _delta(after: Any, before: Any) -> Any:
    if isinstance(after, (int, float)) and isinstance(before, (int, float)):
        return after - before
    return Unavailable("not_supported", "not measured on both sides")


@dataclass(eq=False, repr=False)
class CellMeasurement(Record, Report):
    """Deltas and peaks of one cell (``%%tf_mem``) or ``with measure():`` block.

    ``rss_peak_method`` is ``"exact"`` (the kernel's VmHWM, reset at the start) or
    ``"sampled"``. TF peaks are TF's own per-device counters, reset at the start.

    Example:
        >>> with measure() as m:
        ...     block = b"x" * (100 * 2**20); del block    # written, so really resident
        >>> m.rss_peak_above_start_bytes > 90 * 2**20
        True
    """

    label: str = "cell"
    error: str | None = None
    wall_s: float = 0.0
    rss_before_bytes: int = 0
    rss_after_bytes: int = field(default=0, metadata=wire(then=("rss_delta_bytes",)))
    rss_peak_bytes: int = field(default=0, metadata=wire(then=("rss_peak_above_start_bytes",)))
    rss_peak_method: str = "exact"
    tf_before: dict[str, Any] = field(default_factory=dict, metadata=wire("tf_in_use_before_bytes"))
    tf_after: dict[str, Any] = field(default_factory=dict, metadata=wire("tf_in_use_after_bytes"))
    tf_peak: dict[str, Any] = field(default_factory=dict, metadata=wire("tf_peak_bytes"))
    gpu_before: dict[str, Any] = field(default_factory=dict, metadata=wire("gpu_process_before_bytes"))
    gpu_after: dict[str, Any] = field(default_factory=dict, metadata=wire("gpu_process_after_bytes"))
    #: The GPU frameworks' own peaks over the block, per device (``torch cuda:0``, ``JAX gpu:0``):
    #: torch's counters are reset at the start as TF's are; JAX's cannot be, so its peak since
    #: the process started counts only where the block raised it.
    gpu_peak: dict[str, Any] = field(default_factory=dict, metadata=wire("gpu_framework_peak_bytes"))
    counters_before: dict[str, Any] = field(default_factory=dict)
    counters_after: dict[str, Any] = field(default_factory=dict)
    #: Where each held TF1 graph is, and which graph it is (``where -> id``), before and after: a graph
    #: that only changed the name holding it gained no ops. Stays in this process.
    _graph_ids_before: dict[str, int] = field(default_factory=dict, metadata=NOT_WIRE)
    _graph_ids_after: dict[str, int] = field(default_factory=dict, metadata=NOT_WIRE)
    #: Keras models reachable after the block that were not before it (created or loaded
    #: in it): name, class, weight_bytes, optimizer_bytes, held_by, optimizer_state (see
    #: ``probes.keras.optimizer_state_origin``).
    new_models: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rss_delta_bytes(self) -> int:
        return self.rss_after_bytes - self.rss_before_bytes

    @property
    def rss_peak_above_start_bytes(self) -> int:
        return self.rss_peak_bytes - self.rss_before_bytes

    def _title(self) -> str:
        status = f" (raised {self.error})" if self.error else ""
        return f"kerasmagic: {self.label} took {self.wall_s:.2f} s{status}"

    def _sections(self) -> list[Section]:
        process = Section("Process")
        process.add("RSS change", format_bytes(self.rss_delta_bytes, signed=True),
                    f"{format_bytes(self.rss_before_bytes)} → {format_bytes(self.rss_after_bytes)}")
        process.add("RSS peak", format_bytes(self.rss_peak_bytes),
                    f"{format_bytes(self.rss_peak_above_start_bytes, signed=True)} above start; "
                    + ("exact (kernel VmHWM)" if self.rss_peak_method == "exact" else "sampled every 2 ms"))
        sections = [process]
        devices = sorted(set(self.tf_after) | set(self.tf_before))
        if devices:
            tf = Section("TensorFlow allocator")
            for device in devices:
                before, after = self.tf_before.get(device, 0), self.tf_after.get(device)
                if isinstance(after, Unavailable):  # no statistics (a CPU without oneDNN): why, and the remedy
                    tf.add_missing(f"{device} in use change, peak", after, "TF allocator")
                    continue
                tf.add(f"{device} in use change", format_bytes(_delta(after, before), signed=True),
                       f"{format_bytes(before)} → {format_bytes(after)}")
                tf.add(f"{device} peak", format_bytes(self.tf_peak.get(device)), "TF allocator, this cell")
            sections.append(tf)
        if self.gpu_after or self.gpu_peak:
            gpu = Section("GPU")
            for device, after in self.gpu_after.items():
                before = self.gpu_before.get(device, 0)
                gpu.add(f"{device} change", format_bytes(_delta(after, before), signed=True),
                        f"{format_bytes(before)} → {format_bytes(after)}, NVML, this process")
            for device, peak in self.gpu_peak.items():
                whose = "torch allocator" if device.startswith("torch") else "JAX allocator"
                gpu.add(f"{device} peak", format_bytes(peak), f"{whose}, this cell")
            sections.append(gpu)
        graph = Section("Graph and Keras state")
        counters = (("graph_op_count", "legacy graph ops"), ("custom_gradient_entries", "CustomGradient entries"))
        for key, label in counters:
            before, after = self.counters_before.get(key), self.counters_after.get(key)
            if isinstance(after, int):
                new = _delta(after, before) if isinstance(before, int) else after
                graph.add(label, format_value(after), f"{format_value(new):>} new")
        held_before = self.counters_before.get("held_graph_ops") or {}
        ids_before = self._graph_ids_before
        ops_by_graph = {ids_before[where]: ops for where, ops in held_before.items() if where in ids_before}
        ids_after = self._graph_ids_after
        for where, after in (self.counters_after.get("held_graph_ops") or {}).items():
            # A graph the notebook holds besides the default one (a TF1 Session's): its growth
            # after a clean reset the default graph is still growth. Matched by identity first, so
            # that `g2 = g` (the same graph under a new name) is not "4509 new" ops.
            graph_id = ids_after.get(where)
            before = ops_by_graph[graph_id] if graph_id in ops_by_graph else held_before.get(where)
            new = _delta(after, before) if isinstance(before, int) else after
            graph.add(f"graph ops, {where}", format_value(after), f"{format_value(new):>} new")
        names_after = self.counters_after.get("name_counters") or {}
        names_before = self.counters_before.get("name_counters") or {}
        if isinstance(names_after, dict):
            grown = {k: v for k, v in names_after.items()
                     if v != (names_before.get(k) if isinstance(names_before, dict) else None)}
            if grown:
                graph.add("name counters", ", ".join(f"{k}={v}" for k, v in sorted(grown.items())[:5]),
                          "changed in this cell")
        sections.append(graph)
        if self.new_models:
            sections.append(_new_models_section(self.new_models))
        return sections


class measure:  # noqa: N801 - lower case on purpose: used like a function, `with measure():`
    """Measure a block: RSS change and exact peak, TF allocator change and peak, GPU, graph.

    The measurement is filled in even when the block raises; the exception propagates
    unchanged. ``new_models`` lists the Keras models the block created or loaded that
    the notebook (or, in a script, ``namespace``) can reach afterwards.

    Args:
        label: the name the report gives the block.
        namespace: where a script's variables live (default: the globals of the module
            that enters the block); ignored in IPython, whose namespace is walked instead.

    Example:
        >>> from kerasmagic import measure
        >>> with measure("my block") as m:
        ...     data = [0] * 10_000_000
        >>> print(m)                       # doctest: +SKIP
        >>> m.rss_delta_bytes > 0
        True
    """

    def __init__(self, label: str = "cell", namespace: dict[str, Any] | None = None) -> None:
        self.result = CellMeasurement(label)
        self._namespace = namespace
        self._peak = process_probe.PeakRss()
        self._tf_peak_carried: dict[str, Any] = {}
        self._gpu_peak_carried: dict[str, Any] = {}
        self._jax_peaks_before: dict[str, Any] = {}
        self._t0 = 0.0
        self._shell: Any = None
        # Weak, so that measuring a block never keeps a model alive that the block deletes.
        self._models_before: dict[int, weakref.ref] = {}

    def __enter__(self) -> CellMeasurement:
        result = self.result
        # Every probe is guarded: a failing probe costs a figure, never the user's cell.
        result.counters_before = _counters()
        self._shell = running_shell()
        if self._shell is None and self._namespace is None:
            self._namespace = caller_globals()
        result.counters_before["held_graph_ops"] = {}
        reachable = _guarded_models_in_reach(self._shell, self._namespace, result.counters_before["held_graph_ops"],
                                             result._graph_ids_before)
        self._models_before = {key: weakref.ref(model) for key, (model, _) in reachable.items()}
        result.gpu_before = _safe(_gpu_process_bytes, "reading NVML")
        result.tf_before = _safe(_tf_in_use, "reading TensorFlow's allocator")
        # TF's peak counters are per process, like VmHWM: keep what the blocks around this one
        # have seen before resetting them for this one.
        peaks = _safe(_tf_peaks, "reading TensorFlow's peaks")
        for outer in _active_measures:
            outer._fold_tf_peaks(peaks)
        guarded(tf_probe.reset_peaks, "resetting TensorFlow's peaks")
        torch_peaks = _safe(_torch_peaks, "reading torch's peaks")
        for outer in _active_measures:
            keep_largest(outer._gpu_peak_carried, torch_peaks)
        guarded(_reset_torch_peaks, "resetting torch's peaks")
        self._jax_peaks_before = _safe(_jax_peaks, "reading JAX's peaks")
        started = guarded(self._peak.start, "starting the RSS peak")
        result.rss_before_bytes = self._peak.start_rss_bytes or process_probe.rss_bytes()
        result.rss_peak_method = self._peak.method if not isinstance(started, Unavailable) else str(started)
        _active_measures.append(self)
        self._t0 = time.perf_counter()
        return result

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        result = self.result
        result.wall_s = time.perf_counter() - self._t0
        if self in _active_measures:
            _active_measures.remove(self)
        peak = guarded(self._peak.stop, "reading the RSS peak")
        result.rss_after_bytes = process_probe.rss_bytes()
        result.rss_peak_bytes = peak if isinstance(peak, int) else result.rss_after_bytes
        stats = guarded(tf_probe.allocator_stats, "reading TensorFlow's allocator")
        if isinstance(stats, dict):
            result.tf_after = {d: s["in_use_bytes"] for d, s in stats.items()}
            self._fold_tf_peaks({d: s["peak_bytes"] for d, s in stats.items()})
            result.tf_peak = dict(self._tf_peak_carried)
            # A device without statistics says why in to_dict() too, rather than being left out.
            result.tf_peak.update({d: s["in_use_bytes"] for d, s in stats.items()
                                   if isinstance(s["in_use_bytes"], Unavailable) and d not in result.tf_peak})
        result.gpu_after = _safe(_gpu_process_bytes, "reading NVML")
        keep_largest(self._gpu_peak_carried, _safe(_torch_peaks, "reading torch's peaks"))
        result.gpu_peak = dict(self._gpu_peak_carried)
        for device, peak in _safe(_jax_peaks, "reading JAX's peaks").items():
            before = self._jax_peaks_before.get(device)
            result.gpu_peak[device] = peak if not isinstance(before, int) or peak > before else Unavailable(
                "not_supported", f"no new high: at most the process's earlier peak, {format_bytes(before)}")
        result.counters_after = _counters()
        result.counters_after["held_graph_ops"] = {}
        reachable = _guarded_models_in_reach(self._shell, self._namespace, result.counters_after["held_graph_ops"],
                                             result._graph_ids_after)
        new = [model for key, (model, _) in reachable.items()
               if key not in self._models_before or self._models_before[key]() is not model]
        for model in new:  # so that --who can tell two models named alike apart
            note_origin(model, result.label)
        result.new_models = [_new_model_facts(model, reachable[id(model)][1]) for model in new]
        del new
        self._models_before = {}
        if exc_type is not None:
            result.error = exc_type.__name__
        return False

    def _fold_tf_peaks(self, peaks: dict[str, Any]) -> None:
        for device, value in peaks.items():
            if isinstance(value, int):
                known = self._tf_peak_carried.get(device)
                self._tf_peak_carried[device] = max(value, known) if isinstance(known, int) else value

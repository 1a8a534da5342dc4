"""``tf_mem()``: one snapshot of what this process holds, each number labelled with its source."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .holders import HolderReport, collect_heavy, find_holders, running_shell
from .probes import keras as keras_probe
from .probes import nvml as nvml_probe
from .probes import process as process_probe
from .probes import tensorflow as tf_probe
from .probes.availability import Unavailable, guarded, to_jsonable
from .records import Record
from .tables import Report, Section, format_bytes, format_value

__all__ = ['MemorySnapshot', 'session_facts', 'tf_mem']


def _model_facts(shell) -> list[dict[str, Any]]:
    """The models reachable from the notebook, with sizes and holders (JSON-able)."""
    if shell is None or not keras_probe.model_classes():
        return []
    heavy = guarded(lambda: collect_heavy(shell), "finding models") or []
    return [to_jsonable(item.to_dict()) for item in heavy if item.info["kind"] == "model"]


def session_facts(shell=None) -> dict[str, Any]:
    """Keras and graph facts that must be read on the kernel's main thread, JSON-able.

    Keras 3 keeps name counters in thread-local state, so a background thread would see
    none; call this from the main thread (e.g. an IPython ``post_run_cell`` hook).

    Example:
        >>> facts = session_facts()
        >>> sorted(facts)
        ['keras', 'models', 'tensorflow_graph']
    """
    if shell is None:
        shell = running_shell()
    models = _model_facts(shell)
    graph: dict[str, Any] = {}
    if tf_probe.module() is not None:
        graph = {
            "graph_op_count": guarded(tf_probe.default_graph_op_count, "counting graph ops"),
            "custom_gradient_entries": guarded(tf_probe.custom_gradient_entries, "reading the registry"),
            "executing_eagerly": guarded(tf_probe.executing_eagerly, "reading the execution mode"),
        }
    else:
        graph = {"status": Unavailable("not_imported", "TensorFlow is not imported in this process")}
    return to_jsonable({"keras": keras_probe.snapshot(), "tensorflow_graph": graph, "models": models})


@dataclass(eq=False, repr=False)
class MemorySnapshot(Record, Report):
    """What the process holds right now (the result of ``tf_mem()`` / ``%tf_mem``).

    Attributes hold plain JSON-able dicts; ``to_dict()`` gives all of them.

    Example:
        >>> snap = tf_mem()
        >>> snap.process["rss_bytes"] > 0
        True
    """

    ts: float = field(default_factory=time.time, kw_only=True)  # first on the wire, last in __init__
    process: dict[str, Any]
    tensorflow: dict[str, Any]
    keras: dict[str, Any]
    nvml: dict[str, Any]
    models: list[dict[str, Any]]
    holders: HolderReport | None

    def _title(self) -> str:
        return "kerasmagic: memory of this kernel"

    def _sections(self) -> list[Section]:
        process = Section("Process")
        process.add("RSS", format_bytes(self.process["rss_bytes"]), "OS (/proc/self/statm)")
        limit = self.process["container_limit_bytes"]
        if not isinstance(limit, Unavailable):
            process.add("container limit", format_bytes(limit), "cgroup")
        process.add("system available", format_bytes(self.process["system_available_bytes"]), "OS")
        sections = [process, self._tensorflow_section(), self._gpu_section(), self._keras_section()]
        if self.holders is not None:
            sections.extend(self.holders._sections())
        return sections

    def _tensorflow_section(self) -> Section:
        section = Section("TensorFlow")
        tf = self.tensorflow
        if isinstance(tf["status"], Unavailable) and tf["status"].reason == "not_imported":
            section.notes.append("not imported: only process memory is measured")
            return section
        section.add("version", format_value(tf.get("version")), "tf.__version__")
        mode = tf.get("executing_eagerly")
        section.add("mode", "eager" if mode is True else ("graph (TF1)" if mode is False else str(mode)), "")
        allocator = tf.get("allocator")
        if isinstance(allocator, Unavailable):
            section.add("allocator", str(allocator), "")
        else:
            for device, stats in (allocator or {}).items():
                section.add(f"{device} in use", format_bytes(stats["in_use_bytes"]), "TF allocator")
                section.add(f"{device} peak", format_bytes(stats["peak_bytes"]), "TF allocator")
                section.add(
                    f"{device} held, unused",
                    "≥ " + format_bytes(stats["held_unused_min_bytes"]),
                    "TF pool high-water − in use",
                )
        section.add("legacy graph ops", format_value(tf.get("graph_op_count")), "default graph")
        section.add(
            "CustomGradient entries",
            format_value(tf.get("custom_gradient_entries")),
            "TF gradient registry (each can pin a graph)",
        )
        return section

    def _gpu_section(self) -> Section:
        section = Section("GPU")
        devices = self.nvml["devices"]
        if isinstance(devices, Unavailable):
            section.notes.append(f"no GPU view: {devices.detail or devices.reason}")
            return section
        tf_allocator = self.tensorflow.get("allocator")
        for device in devices:
            if isinstance(device, Unavailable):
                section.notes.append(str(device))
                continue
            index = device["index"]
            section.add(
                f"GPU {index} ({device['name']}) used, all processes",
                f"{format_bytes(device['used_bytes'])} / {format_bytes(device['total_bytes'])}",
                "NVML",
            )
            section.add(f"GPU {index} this process", format_bytes(device["process_used_bytes"]), "NVML")
            tf_stats = tf_allocator.get(f"GPU:{index}") if isinstance(tf_allocator, dict) else None
            if tf_stats:
                section.add(f"GPU {index} TF in use", format_bytes(tf_stats["in_use_bytes"]), "TF allocator")
            section.add(f"GPU {index} utilisation", format_value(device["utilisation_pct"]) + " %", "NVML")
        return section

    def _keras_section(self) -> Section:
        section = Section("Keras")
        keras = self.keras
        if isinstance(keras["status"], Unavailable):
            section.notes.append("not imported")
            return section
        versions = keras.get("version") or {}
        section.add("version", ", ".join(f"{k} {v}" for k, v in versions.items()), "")
        section.add("backend", format_value(keras.get("backend")), "keras.backend.backend()")
        counters = keras.get("name_counters")
        if isinstance(counters, dict) and counters:
            top = sorted(counters.items(), key=lambda kv: -kv[1])[:4]
            section.add("name counters", ", ".join(f"{k}={v}" for k, v in top), "next layer gets name_N")
        for model in self.models:
            section.add(
                f"model {model['label']}",
                format_bytes(model["bytes"]),
                "weights + optimizer; held by " + ", ".join(h["where"] for h in model["holders"]),
            )
        return section


def tf_mem(shell=None, who: bool = False) -> MemorySnapshot:
    """Snapshot the process, TensorFlow's allocator, NVML and Keras (``%tf_mem``).

    Never imports or starts a framework; a probe that fails reports why. Without ``who``
    it costs about a millisecond.

    Args:
        shell: the IPython shell whose namespace is searched for models (default: the
            running one, if any).
        who: also list what keeps models and large arrays alive (``%tf_mem --who``).

    Example:
        >>> from kerasmagic import tf_mem
        >>> snap = tf_mem()
        >>> print(snap)                     # doctest: +SKIP
        >>> snap.to_dict()["process"]["rss_bytes"] > 0
        True
    """
    if shell is None:
        shell = running_shell()
    return MemorySnapshot(
        process=process_probe.snapshot(),
        tensorflow=tf_probe.snapshot(),
        keras=keras_probe.snapshot(),
        nvml=nvml_probe.snapshot(),
        models=_model_facts(shell),
        holders=find_holders(shell) if who else None,
    )

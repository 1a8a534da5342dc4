"""``tf_mem()``: one snapshot of what this process holds, each number labelled with its source."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from . import session_runs
from .guard import GuardSettings, active_guard, current_settings
from .holders import HolderReport, collect_heavy, find_holders, running_shell
from .limits import MemoryLimit, memory_limit
from .probes import jax_devices as jax_probe
from .probes import keras as keras_probe
from .probes import nvml as nvml_probe
from .probes import process as process_probe
from .probes import tensorflow as tf_probe
from .probes import torch_cuda as torch_probe
from .probes.availability import Unavailable, guarded, to_jsonable
from .probes.sample import cuda_context
from .records import Record
from .registry_purge import entries_pin_graphs
from .tables import Report, Section, format_bytes, format_value

__all__ = ['MemorySnapshot', 'child_processes_note', 'jax_advice', 'session_facts', 'tf_mem']

#: A pool's unused part below this is not worth a paragraph of advice.
_WORTH_A_NOTE_BYTES = 64 * 2**20

#: Why the context estimate is an upper bound once TensorFlow's pool is among those subtracted.
_TF_UPPER_BOUND = ": an upper bound, as TF reports only a lower bound of its pool"

#: The pools a context estimate subtracts, in words (codes: kerasmagic.probes.sample.CONTEXT_POOLS).
_POOL_WORDS = {"torch_reserved": "torch reserved", "jax_pool": "JAX pool", "tf_pool": "TF pool (at least)"}

#: What needs a new process, and where (``%%fresh_model`` in a plain string: no formatting here).
_NEW_PROCESS = "restart the kernel, or run the work with %%fresh_model --isolate."


def jax_advice(stats: dict[str, Any], preallocation: str) -> tuple[str, str]:
    """Why a JAX pool holds more than it uses, and the remedy: ``(why, remedy)``, in the words the
    sidebar uses too (labextension/src/gpu.ts, ``jaxAdvice``).

    The pool is the evidence (:func:`kerasmagic.probes.jax_devices.pool_story`): the sample's
    ``preallocation`` says what is set now, which a backend started earlier never read.

    Example:
        >>> pool = {"in_use_bytes": 536870912, "pool_bytes": 538968064, "limit_bytes": 63763906560}
        >>> jax_advice(pool, "XLA_PYTHON_CLIENT_PREALLOCATE=false")[0]
        "the pool's high-water mark: it grew on demand and never shrinks"
    """
    story = jax_probe.pool_story(stats, preallocation)
    named = jax_probe.named_now(story, preallocation)
    if story.startswith("preallocated"):
        why = "preallocated when JAX started: the pool is its whole limit"
    elif story.startswith("grown"):
        why = "the pool's high-water mark: it grew on demand and never shrinks"
    else:
        why = "pool − in use"
    if story == "preallocated":
        # A fraction is no remedy for held memory: XLA_PYTHON_CLIENT_MEM_FRACTION=.25 preallocates that
        # share up front, unused or not; only no preallocation takes what is used (background.md).
        remedy = ("XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used (XLA_PYTHON_CLIENT_MEM_FRACTION=.25 "
                  "still preallocates, a quarter of the GPU instead of 75 %), but only if set before JAX starts: "
                  "restart the kernel with it set, or run the work with %%fresh_model --isolate.")
    elif story == "preallocated_off_now":
        remedy = (f"The environment now has {named}, but the pool is JAX's whole limit, so that was set after JAX "
                  f"started and only a new process reads it: {_NEW_PROCESS}")
    elif story == "preallocated_fraction_now":
        remedy = (f"The environment now has {named}: the pool, JAX's whole limit "
                  f"({format_bytes(stats.get('limit_bytes'))}), is that fraction of the GPU only if it was set before "
                  "JAX started; set after, only a new process reads it. XLA_PYTHON_CLIENT_PREALLOCATE=false takes "
                  "only what is used, but only if set before JAX starts: restart the kernel with it set, or run the "
                  "work with %%fresh_model --isolate.")
    elif story == "grown":
        remedy = ("XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory when arrays are deleted (allocations get "
                  "slower), but only in a new process: restart the kernel with it set, or run the work with "
                  "%%fresh_model --isolate.")
    elif story == "grown_platform_now":
        remedy = (f"The environment now has {named}, but JAX keeps a pool, so that was set after JAX started and "
                  f"only a new process reads it: {_NEW_PROCESS}")
    else:
        remedy = "Only a new process gives it back: " + _NEW_PROCESS
    return why, remedy


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


def child_processes_note(children: dict[str, Any] | Unavailable, spares: int = 0) -> str:
    """A sentence on kerasmagic's isolation template among this kernel's child processes, or "".

    Example:
        >>> child_processes_note({"count": 1, "rss_bytes": 700 * 2**20, "isolation_count": 1,
        ...                       "isolation_rss_bytes": 700 * 2**20})[:52]
        "kerasmagic's isolation template holds 700 MiB RSS ou"
    """
    if not isinstance(children, dict) or not children.get("isolation_count"):
        return ""
    jobs = children["isolation_count"] - 1 - spares  # a warm spare is a fork of the template too
    with_jobs = f" with {jobs} running job{'s' if jobs != 1 else ''}" if jobs > 0 else ""
    if spares:
        with_jobs += f" and {spares} warm spare{'s' if spares != 1 else ''}"
    return (f"kerasmagic's isolation template holds {format_bytes(children['isolation_rss_bytes'])} RSS{with_jobs} "
            "outside this kernel: it waits for the next isolated job until its idle timeout; "
            "kerasmagic.shutdown_default_pool() ends it now.")


def _warm_spares() -> list[dict[str, Any]]:
    """The isolation pool's warm spares, where isolation is loaded (never imported for this)."""
    pool = sys.modules.get("kerasmagic.isolation.pool")
    found = getattr(pool, "_default_pool", None) if pool is not None else None
    if found is None:
        return []
    try:
        return to_jsonable(found.spare_states())
    except Exception:  # noqa: BLE001 - a snapshot never fails for a figure
        return []


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
    torch: dict[str, Any] = field(default_factory=dict)
    jax: dict[str, Any] = field(default_factory=dict)
    #: The limit the memory guard measures against (:func:`kerasmagic.limits.memory_limit`).
    limit: MemoryLimit | Unavailable | None = None
    #: The guard's settings, and whether it runs in this process (``running``).
    guard: dict[str, Any] = field(default_factory=dict)
    #: What TensorFlow 1's ``Session.run`` calls of the last such cell showed (:mod:`kerasmagic.session_runs`).
    session_runs: list[dict[str, Any]] = field(default_factory=list)
    #: This kernel's child processes: their RSS, and kerasmagic's isolation template's share of it
    #: (:func:`kerasmagic.probes.process.child_processes_memory`).
    children: dict[str, Any] | Unavailable = field(default_factory=dict)
    #: The isolation pool's warm spares (:meth:`kerasmagic.isolation.pool.WorkerPool.spare_states`):
    #: child processes waiting for the next isolated job, each with its RSS and GPU memory.
    spares: list[dict[str, Any]] = field(default_factory=list)

    def _title(self) -> str:
        return "kerasmagic: memory of this kernel"

    def _sections(self) -> list[Section]:
        process = Section("Process")
        process.add("RSS", format_bytes(self.process["rss_bytes"]), "OS (/proc/self/statm)")
        self._limit_rows(process)
        process.add("system available", format_bytes(self.process["system_available_bytes"]), "OS")
        if isinstance(self.children, dict) and self.children.get("count"):
            process.add("child processes", f"{self.children['count']}, {format_bytes(self.children['rss_bytes'])} RSS",
                        "OS (/proc), not in the RSS above; pages shared with this kernel counted again")
            note = child_processes_note(self.children, len(self.spares))
            if note:
                process.notes.append(note)
        if self.spares:
            # Loaded already: the spares came from it (import kerasmagic never loads isolation).
            from .isolation.result import spare_words  # noqa: PLC0415
        for spare in self.spares:
            process.add("warm spare", format_bytes(spare.get("rss_bytes")),
                        f"{spare_words(spare)}; configure_pool(warm_spare=False) ends it")
        sections = [process, self._tensorflow_section(), self._gpu_section(), self._keras_section()]
        if self.holders is not None:
            sections.extend(self.holders._sections())
        return sections

    def _limit_rows(self, process: Section) -> None:
        limit = self.limit
        cgroup_limit = self.process["container_limit_bytes"]
        if isinstance(limit, MemoryLimit):
            process.add("memory limit", format_bytes(limit.limit_bytes), f"{limit.source}: {limit.where}")
            if limit.shmem_bytes:
                process.add("tmpfs counted", format_bytes(limit.shmem_bytes),
                            "tmpfs / /dev/shm the cgroup counts against the limit, in no RSS")
            process.add("headroom", f"{format_bytes(limit.headroom_bytes)} ({limit.used_pct:.0f} % used)",
                        "limit − RSS − tmpfs" if limit.shmem_bytes else "limit − RSS")
            if limit.note:
                process.notes.append(limit.note)
            if limit.source != "cgroup" and not isinstance(cgroup_limit, Unavailable):
                process.add("container limit", format_bytes(cgroup_limit), "cgroup")
            if isinstance(limit.cgroup, Unavailable) and limit.cgroup.reason == "error":
                process.notes.append(f"cgroup limit unknown: {limit.cgroup.detail}")
        elif isinstance(limit, Unavailable):
            process.add_missing("memory limit", limit)
        if self.guard:
            settings = GuardSettings(**{k: self.guard[k] for k in ("enabled", "warn_pct", "stop_pct")})
            running = "" if self.guard.get("running") else "; runs only in a kernel"
            process.add("memory guard", str(settings).split(":", 1)[0] + running, str(settings).split(": ", 1)[1])

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
                if isinstance(stats["in_use_bytes"], Unavailable):
                    # No statistics (a CPU without oneDNN): one row, and why with the remedy.
                    section.add_missing(f"{device} in use, peak, held", stats["in_use_bytes"], "TF allocator")
                    continue
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
            # From TF 2.22 the entries keep no graph: a count, not memory held.
            "TF gradient registry (each can pin a graph)" if entries_pin_graphs()
            else "TF gradient registry (these pin no graph on this TensorFlow)",
        )
        section.notes.extend(finding["text"] for finding in self.session_runs)
        return section

    def _gpu_section(self) -> Section:
        section = Section("GPU")
        devices = self.nvml["devices"]
        if isinstance(devices, Unavailable):
            section.notes.append(f"no GPU view: {devices.detail or devices.reason}")
        else:
            tf_allocator = self.tensorflow.get("allocator")
            for device in devices:
                if isinstance(device, Unavailable):
                    section.notes.append(str(device))
                    continue
                self._nvml_device_rows(section, device, tf_allocator)
        self._torch_rows(section)
        self._jax_rows(section)
        self._context_row(section)
        if self._nvml_cannot_see_us():
            section.notes.append(
                "NVML lists the GPU's processes by host PID, which this container cannot see, so it cannot "
                "say which is this kernel: "
                + ("the framework figures above are this process's own view."
                   if self._framework_gpu_views() else "no framework has started the GPU here to ask instead.")
            )
        return section

    def _framework_gpu_views(self) -> list[str]:
        """The frameworks whose allocator has GPU numbers in this snapshot."""
        views = []
        tf_allocator = self.tensorflow.get("allocator")
        if isinstance(tf_allocator, dict) and any(device.startswith("GPU:") for device in tf_allocator):
            views.append("TensorFlow")
        for name, facts in (("torch", self.torch), ("JAX", self.jax)):
            allocator = (facts or {}).get("allocator")
            if isinstance(allocator, dict) and allocator:
                views.append(name)
        return views

    def _nvml_cannot_see_us(self) -> bool:
        devices = self.nvml["devices"]
        return isinstance(devices, list) and any(
            isinstance(d, dict) and isinstance(d.get("process_used_bytes"), Unavailable)
            and d["process_used_bytes"].reason == "not_supported" for d in devices
        )

    def _context_row(self, section: Section) -> None:
        """What NVML counts for this process beyond every framework's pool: CUDA contexts, libraries
        (the rule is :func:`~kerasmagic.probes.sample.cuda_context`, which the sidebar gets as codes)."""
        context = cuda_context(self._nvml_process_total(), (self.torch or {}).get("allocator"),
                               (self.jax or {}).get("allocator"), self.tensorflow.get("allocator"))
        if context is None:
            return
        upper = context["upper_bound"]
        # TF reports its pool only as at least its high-water mark: less subtracted than
        # the pool may hold, so what is left is at most the context.
        section.add("CUDA context and libraries", ("≤ " if upper else "≈ ") + format_bytes(context["context_bytes"]),
                    "NVML this process − " + " − ".join(_POOL_WORDS[pool] for pool in context["pools"])
                    + (_TF_UPPER_BOUND if upper else ""))

    @staticmethod
    def _nvml_device_rows(section: Section, device: dict[str, Any], tf_allocator: Any) -> None:
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
            unused = tf_stats.get("held_unused_min_bytes")
            section.add(f"GPU {index} TF held, unused", "≥ " + format_bytes(unused), "TF pool high-water − in use")
            if isinstance(unused, int) and unused >= _WORTH_A_NOTE_BYTES:
                section.notes.append(
                    f"TensorFlow keeps {format_bytes(unused)} of GPU {index} in its pool until the process "
                    "ends. Memory growth (tf.config.experimental.set_memory_growth, or "
                    "TF_FORCE_GPU_ALLOW_GROWTH=true) takes only what is used, but only if set before TF "
                    "first touches the GPU: restart the kernel, or run the work with %%fresh_model --isolate."
                )
        section.add(f"GPU {index} utilisation", format_value(device["utilisation_pct"]) + " %", "NVML")

    def _torch_rows(self, section: Section) -> None:
        allocator = (self.torch or {}).get("allocator")
        if not isinstance(allocator, dict):
            return
        for device, stats in allocator.items():
            section.add(f"torch {device} allocated", format_bytes(stats["allocated_bytes"]), "torch allocator")
            section.add(f"torch {device} reserved", format_bytes(stats["reserved_bytes"]),
                        "torch caching allocator (allocated + cached)")
            section.add(f"torch {device} peak allocated", format_bytes(stats["peak_allocated_bytes"]),
                        "torch, since start or reset_peak_memory_stats()")
            unused = stats["held_unused_bytes"]
            section.add(f"torch {device} held, unused", format_bytes(unused), "reserved − allocated")
            if unused >= _WORTH_A_NOTE_BYTES:
                section.notes.append(
                    f"torch keeps {format_bytes(unused)} of freed blocks cached on {device}: %clear_tf hands "
                    "them back (torch.cuda.empty_cache()), no restart needed."
                )

    def _jax_rows(self, section: Section) -> None:
        allocator = (self.jax or {}).get("allocator")
        if not isinstance(allocator, dict):
            return
        for device, stats in allocator.items():
            section.add(f"JAX {device} in use", format_bytes(stats["in_use_bytes"]), "JAX allocator")
            section.add(f"JAX {device} peak", format_bytes(stats["peak_bytes"]), "JAX allocator")
            section.add(f"JAX {device} pool / limit",
                        f"{format_bytes(stats['pool_bytes'])} / {format_bytes(stats['limit_bytes'])}",
                        "JAX allocator (XLA BFC pool)")
            unused = stats["held_unused_bytes"]
            section.add(f"JAX {device} held, unused", format_bytes(unused), "pool − in use")
            if isinstance(unused, int) and unused >= _WORTH_A_NOTE_BYTES:
                why, remedy = jax_advice(stats, self.jax.get("preallocation", ""))
                section.notes.append(
                    f"JAX holds {format_bytes(unused)} of {device} that it does not use ({why}). {remedy}")

    def _nvml_process_total(self) -> int | None:
        devices = self.nvml["devices"]
        if isinstance(devices, Unavailable):
            return None
        used = [d["process_used_bytes"] for d in devices
                if not isinstance(d, Unavailable) and isinstance(d.get("process_used_bytes"), int)]
        return sum(used) if used else None

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
        torch=torch_probe.snapshot(),
        jax=jax_probe.snapshot(),
        limit=guarded(memory_limit, "reading the memory limit"),
        guard={**current_settings().to_dict(), "running": active_guard() is not None},
        session_runs=session_runs.findings(),
        children=guarded(process_probe.child_processes_memory, "reading the child processes"),
        spares=_warm_spares(),
    )

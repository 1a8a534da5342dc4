"""``clear_tf()`` / ``%clear_tf``: free what a Keras/TensorFlow session holds, and say what it could not.

The order matters: references first (named variables, then the hidden holders IPython
keeps), then the framework state that pins graphs (Keras' session, the legacy default
graph, TF's gradient registry), then one garbage collection that frees it all, then
``malloc_trim`` to hand glibc's freed heap back to the OS.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import sys
import threading
import time
import types
import weakref
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from . import events
from .errors import KerasMagicUsageError, check_seed
from .holders import (
    HolderSearch,
    caller_globals,
    describe,
    last_exception_refs,
    live_models,
    pins_heavy,
    running_shell,
    session_search,
)
from .ipython_names import OUTPUT_CACHE_ALIASES, ipython_role, is_output_cache_name
from .probes import keras as keras_probe
from .probes import process as process_probe
from .probes import sample as sample_probe
from .probes import tensorflow as tf_probe
from .probes import torch_cuda as torch_probe
from .probes.availability import Unavailable, guarded
from .records import Record, wire
from .registry_purge import (
    PurgeResult,
    entries_pin_graphs,
    entries_tied_to_their_variables,
    purge_dead_custom_gradients,
)
from .remedies import RetainedWalk
from .snapshot import child_processes_note
from .tables import Report, Section, format_bytes

__all__ = ['CleanReport', 'CleanStep', 'clear_tf', 'trim_heap']


#: The steps that remove references: what they list is what ``CleanReport.dropped`` gives.
STEP_DELETE_NAMED = "delete named variables"
STEP_DROP_HIDDEN = "drop hidden holders"
STEP_CLEAR_JAX = "clear JAX's compiled functions"
STEP_EMPTY_TORCH_CACHE = "return torch's cached GPU blocks"
_REFERENCE_STEPS = (STEP_DELETE_NAMED, STEP_DROP_HIDDEN)


@dataclass
class CleanStep(Record):
    """One step of a clean: what it did, and the RSS and TF allocator change around it.

    Example:
        >>> step = CleanStep("garbage collection", detail="812 objects collected", seconds=0.02)
        >>> step.to_dict()["detail"], step.skipped
        ('812 objects collected', None)
    """

    name: str
    detail: str = ""
    items: list[str] = field(default_factory=list)
    rss_freed_bytes: int = 0
    tf_freed_bytes: int = 0
    #: This process's GPU memory per NVML, summed over devices; None without a GPU view.
    gpu_freed_bytes: int | None = None
    seconds: float = 0.0
    skipped: str | None = None


def _settings_as_text(settings: dict[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in settings.items()}


@dataclass(eq=False, repr=False)
class CleanReport(Record, Report):
    """What ``clear_tf()`` freed step by step, and what is still held and why.

    Example:
        >>> report = clear_tf()
        >>> report.rss_freed_bytes >= 0 or True
        True
        >>> [step.name for step in report.steps][:2]          # doctest: +SKIP
        ['delete named variables', 'drop hidden holders']
    """

    seconds: float = 0.0
    rss_before_bytes: int = 0
    rss_after_bytes: int = field(default=0, metadata=wire(then=("rss_freed_bytes",)))
    tf_before_bytes: int = field(default=0, metadata=wire("tf_in_use_before_bytes"))
    tf_after_bytes: int = field(default=0, metadata=wire("tf_in_use_after_bytes", then=("tf_freed_bytes",)))
    gpu_before_bytes: int | None = field(default=None, metadata=wire("gpu_process_before_bytes"))
    gpu_after_bytes: int | None = field(default=None, metadata=wire("gpu_process_after_bytes",
                                                                    then=("gpu_freed_bytes",)))
    models_tracked: int = 0
    models_freed: int = 0
    #: Of ``models_tracked``: those alive before the clean that nothing of the notebook held (a cycle,
    #: a closure, TF's gradient registry); the garbage collection frees those it can.
    models_unreachable: int = 0
    steps: list[CleanStep] = field(default_factory=list)
    registry: PurgeResult | None = None
    preserved_settings: dict[str, Any] = field(default_factory=dict, metadata=wire(convert=_settings_as_text))
    still_held: list[str] = field(default_factory=list)
    #: Each "Still held" line that names a command, with what the command frees and how it was measured.
    still_held_evidence: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rss_freed_bytes(self) -> int:
        return self.rss_before_bytes - self.rss_after_bytes

    @property
    def tf_freed_bytes(self) -> int:
        return self.tf_before_bytes - self.tf_after_bytes

    @property
    def gpu_freed_bytes(self) -> int | None:
        """What this process gave back to its GPUs (NVML), or None without a GPU view."""
        if self.gpu_before_bytes is None or self.gpu_after_bytes is None:
            return None
        return self.gpu_before_bytes - self.gpu_after_bytes

    @property
    def dropped(self) -> list[str]:
        """Every hidden entry and variable this clean removed."""
        return [item for step in self.steps if step.name in _REFERENCE_STEPS for item in step.items]

    def summary(self) -> str:
        """A few sentences for narrow places (the sidebar): what was freed, dropped, still held.

        Example:
            >>> print(clear_tf().summary())          # doctest: +SKIP
            Cleaned in 0.33 s: RSS -21.0 MiB, TF in use -17.1 MiB; 1 of 2 models freed.
            Dropped: variable model, Out[5], _5.
            Still held:
            · Sequential 'sequential_3' (4.66 MiB) held by history.model
        """
        first = f"Cleaned in {self.seconds:.2f} s: RSS {format_bytes(-self.rss_freed_bytes, signed=True)}"
        if self.tf_before_bytes or self.tf_after_bytes:
            first += f", TF in use {format_bytes(-self.tf_freed_bytes, signed=True)}"
        if self.gpu_freed_bytes is not None:
            first += f", GPU {format_bytes(-self.gpu_freed_bytes, signed=True)}"
        if self.models_tracked:
            first += f"; {self.models_freed} of {self.models_tracked} models freed"
            if self.models_unreachable:
                first += f" ({self.models_unreachable} held by nothing of the notebook)"
        lines = [first + "."]
        if self.registry is not None and self.registry.purged:
            lines.append(f"{self.registry.purged} dead CustomGradient entries purged.")
        if self.dropped:
            lines.append("Dropped: " + ", ".join(self.dropped) + ".")
        if self.still_held:
            lines.append("Still held:")
            lines.extend(f"· {item}" for item in self.still_held)
        return "\n".join(lines)

    def _title(self) -> str:
        title = (
            f"kerasmagic: cleaned in {self.seconds:.2f} s — RSS {format_bytes(-self.rss_freed_bytes, signed=True)}"
            f" ({format_bytes(self.rss_before_bytes)} → {format_bytes(self.rss_after_bytes)})"
        )
        if self.gpu_freed_bytes is not None:
            title += (f"; GPU {format_bytes(-self.gpu_freed_bytes, signed=True)}"
                      f" ({format_bytes(self.gpu_before_bytes)} → {format_bytes(self.gpu_after_bytes)}, NVML)")
        return title

    def _sections(self) -> list[Section]:
        steps = Section("Steps")
        for step in self.steps:
            if step.skipped:
                steps.add(step.name, "skipped", step.skipped)
                continue
            freed = format_bytes(-step.rss_freed_bytes, signed=True)
            detail = step.detail
            if step.tf_freed_bytes:
                detail += f"; TF in use {format_bytes(-step.tf_freed_bytes, signed=True)}"
            if step.gpu_freed_bytes:
                detail += f"; GPU {format_bytes(-step.gpu_freed_bytes, signed=True)}"
            steps.add(step.name, freed, detail.strip("; "))
        dropped = Section("Dropped")
        dropped.notes.extend(self.dropped)
        summary = Section("Result")
        if self.models_tracked:
            how = "checked by weak references"
            if self.models_unreachable:
                how += (f"; {self.models_unreachable} of them were alive but not reachable from the notebook, "
                        "left for the garbage collection")
            summary.add("models freed", f"{self.models_freed} of {self.models_tracked}", how)
        # Only what clear_session() would really have changed: the non-default settings.
        changed = {k: v for k, v in self.preserved_settings.items() if _KERAS_DEFAULTS.get(k, object()) != v}
        if changed:
            summary.add(
                "kept settings", ", ".join(f"{k}={v}" for k, v in changed.items()),
                "clear_session() would have reset them",
            )
        held = Section("Still held")
        held.notes.extend(self.still_held)
        return [steps, dropped, summary, held]


#: What ``clear_session()`` resets these settings to.
_KERAS_DEFAULTS = {"dtype_policy": "float32", "traceback_filtering": True, "interactive_logging": True}


def _tf_in_use_total() -> int:
    return sample_probe.allocator_total(sample_probe.tf_part()) or 0


def _gpu_process_total() -> int | None:
    """This process's GPU memory per NVML over all devices; None where NVML has no view (or fails)."""
    gpu = guarded(sample_probe.gpu_part, "reading NVML")  # a lost GPU must not fail the clean
    values = [v for v in sample_probe.gpu_device_values(gpu).values() if isinstance(v, int)]
    return sum(values) if values else None


@contextmanager
def _measured_step_reporting_failure(report: CleanReport, name: str) -> Iterator[CleanStep]:
    """Run a step, recording its RSS/TF change and time; an ``Exception`` from the step is
    caught here and recorded in the report (``skipped = "failed: ..."``) so that the
    remaining steps still run. ``KeyboardInterrupt`` and the like propagate."""
    step = CleanStep(name)
    report.steps.append(step)
    rss, tf, gpu, started = process_probe.rss_bytes(), _tf_in_use_total(), _gpu_process_total(), time.perf_counter()
    failure = None
    try:
        yield step
    except Exception as exc:  # noqa: BLE001 - swallowed on purpose: the report says this step failed
        failure = f"failed: {type(exc).__name__}: {exc}"  # the text only: the exception would pin its frames
    finally:
        step.seconds = time.perf_counter() - started
        step.rss_freed_bytes = rss - process_probe.rss_bytes()
        step.tf_freed_bytes = tf - _tf_in_use_total()
        gpu_after = _gpu_process_total() if gpu is not None else None
        step.gpu_freed_bytes = gpu - gpu_after if gpu is not None and gpu_after is not None else None
    if failure is not None:
        step.skipped = failure


# --- step 1: named variables ---------------------------------------------------------------


def _validate_names(names: tuple[str, ...], namespace: dict[str, Any], in_ipython: bool) -> tuple[str, ...]:
    """The names, each once, after checking every one: nothing is deleted unless all are valid.

    IPython's own names are refused (deleting ``_oh`` breaks every later cell with a value,
    ``_dh`` breaks ``%cd``), except its output-cache names ``_``, ``_N``: deleting one drops that
    output and its copies, which IPython recreates as it goes.
    """
    for name in names:
        # Before dict.fromkeys(): an unhashable "name" must get this message, not a TypeError.
        if not isinstance(name, str) or not name.isidentifier():
            raise KerasMagicUsageError(f"{name!r} is not a variable name; pass names like clear_tf('model')")
    names = tuple(dict.fromkeys(names))
    for name in names:
        role = ipython_role(name)
        if role is not None and not is_output_cache_name(name):
            raise KerasMagicUsageError(
                f"refusing to delete {name!r}: IPython needs it ({role}); nothing was deleted; "
                "name only your own variables (%who lists them)")
        if name not in namespace:
            where = "(%who lists your variables)" if in_ipython else (
                "(without IPython names are looked up in the caller's module globals: "
                "pass namespace=locals() from inside a function)")
            raise KerasMagicUsageError(f"no variable named {name!r}; nothing was deleted {where}")
    return names


def _delete_named(shell, namespace: dict[str, Any], names: tuple[str, ...], step: CleanStep) -> None:
    """Delete each name, and the output-cache copies of its object (the ``%xdel`` purge).

    Unlike ``%xdel`` we never delete *other* user variables bound to the same object: the
    user did not name them. They are reported as still holding it instead.
    """
    for name in names:
        obj = namespace.pop(name)
        kind = _frees_nothing(obj)
        step.items.append(f"variable {name}" + (f" (a {kind}: deleting it frees no memory)" if kind else ""))
        if shell is None or (isinstance(obj, _SHARED_VALUE_TYPES) and not pins_heavy(obj)):
            # Small ints, True, short strings are shared by every cell that produced the same
            # value: an Out[] entry that "is" them is not a copy of this variable.
            continue
        for entry in _drop_cache_entries(shell, lambda value, held=obj: value is held):
            step.items.append(f"{entry} (same object as {name})")
    step.detail = f"{len(names)} variable(s)"


#: Values that Python shares between unrelated expressions (interned, cached or immutable).
_SHARED_VALUE_TYPES = (int, float, complex, bool, str, bytes, type(None), tuple, frozenset, range)


def _frees_nothing(obj: Any) -> str | None:
    """'module', 'function' or 'class' when deleting a name bound to ``obj`` frees no memory."""
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
        return "function"
    if isinstance(obj, type):
        return "class"
    return None


# --- step 2: hidden holders ------------------------------------------------------------------


def _drop_cache_entries(shell, matches) -> list[str]:
    """Remove output-cache entries whose value ``matches``; returns their labels."""
    dropped = []
    output_hist = shell.history_manager.output_hist if shell.history_manager else {}
    for number in [n for n, v in list(output_hist.items()) if matches(v)]:
        del output_hist[number]
        dropped.append(f"Out[{number}]")
    for namespace, label in ((shell.user_ns, ""), (shell.user_ns_hidden, "user_ns_hidden")):
        for name in [n for n, v in list(namespace.items()) if is_output_cache_name(n) and matches(v)]:
            where = f"{label}[{name!r}]" if label else name
            if name in OUTPUT_CACHE_ALIASES:
                namespace[name] = ""  # IPython itself resets these to '' when it flushes
            else:
                del namespace[name]
            dropped.append(where)
    displayhook = shell.displayhook
    for name in OUTPUT_CACHE_ALIASES:
        if matches(getattr(displayhook, name, None)):
            setattr(displayhook, name, "")
            dropped.append(f"displayhook.{name}")
    last = shell.last_execution_result
    if last is not None and getattr(last, "result", None) is not None and matches(last.result):
        last.result = None
        dropped.append("last_execution_result.result")
    return dropped


def _drop_last_exception(shell) -> list[str]:
    """Forget the last exception everywhere Python and IPython keep it (and its frames): every
    holder of ``LAST_EXCEPTION_HOLDERS``, the table ``%tf_mem --who`` reports from."""
    dropped = []
    refs = last_exception_refs(shell)
    value = next((v for _, _, _, v in refs if issubclass(type(v), BaseException)), None)
    for where, owner, attribute, _ in refs:
        if owner is sys:
            delattr(sys, attribute)
        else:
            setattr(owner, attribute, None)
        dropped.append(where)
    del refs
    if dropped and value is not None:
        dropped.insert(0, f"last exception {type(value).__name__} (its frames' locals; %debug can no longer open it)")
    return dropped


def _drop_hidden(shell, step: CleanStep) -> None:
    # The output-cache entries `%tf_mem --who` lists as holding something heavy, found by the same
    # search (an entry holding a list of models, an object whose attribute is a DataFrame); only
    # their ids are kept, so nothing outlives the search but the cache entries themselves.
    pinning = HolderSearch(shell).output_cache_values_holding_heavy() if shell is not None else set()
    exception_items = _drop_last_exception(shell)
    cache_items = _drop_cache_entries(shell, lambda value: id(value) in pinning) if shell is not None else []
    step.items.extend(cache_items + exception_items)
    exception = "the last exception" if exception_items else "no exception"
    step.detail = f"{len(cache_items)} output-cache entries, {exception}"


# --- step 3: Keras / legacy graph -----------------------------------------------------------


def _keras_settings() -> dict[str, Any]:
    """Global Keras settings that ``clear_session()`` silently resets."""
    keras = keras_probe.keras3()
    if keras is None:
        return {}
    settings: dict[str, Any] = {
        "dtype_policy": keras.config.dtype_policy().name,
        "traceback_filtering": keras.config.is_traceback_filtering_enabled(),
        "interactive_logging": keras.config.is_interactive_logging_enabled(),
    }
    # keras.utils.set_random_seed() records the seed here; there is no public getter.
    global_state = sys.modules.get("keras.src.backend.common.global_state")
    seed = global_state.get_global_attribute("global_random_seed") if global_state is not None else None
    if seed is not None:
        settings["random_seed"] = seed
    return settings


def _restore_keras_settings(settings: dict[str, Any], new_seed: int | None) -> None:
    keras = keras_probe.keras3()
    if keras is None:
        if new_seed is not None and tf_probe.module() is not None:
            tf_probe.module().random.set_seed(new_seed)
        return
    if "dtype_policy" in settings:
        keras.config.set_dtype_policy(settings["dtype_policy"])
    if settings.get("traceback_filtering") is False:
        keras.config.disable_traceback_filtering()
    if settings.get("interactive_logging") is False:
        keras.config.disable_interactive_logging()
    if new_seed is not None:
        keras.utils.set_random_seed(new_seed)
    elif settings.get("random_seed") is not None:
        # Restore only Keras' record of the seed: re-seeding every RNG would silently
        # rewind the user's random streams, which clear_session() never did either.
        global_state = sys.modules["keras.src.backend.common.global_state"]
        global_state.set_global_attribute("global_random_seed", settings["random_seed"])


def _inside_graph_block() -> bool:
    """True inside ``with tf.Graph().as_default():``, where reset_default_graph() asserts."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    stack = getattr(ops, "_default_graph_stack", None)
    if stack is None:
        return False
    try:
        return not stack.is_cleared()
    except AttributeError:
        return False


def _reset_keras_global_state() -> list[str]:
    """Replace each thread-local tracker Keras' ``clear_session()`` replaces; returns their names.

    Read from the module, never assumed: Keras 3.15 has ``GLOBAL_STATE_TRACKER`` and
    ``GLOBAL_SETTINGS_TRACKER``; Keras 3.16 dropped the second and resets the distribution
    through ``set_distribution(None)`` first, which we do too where it exists.
    """
    global_state: Any = sys.modules["keras.src.backend.common.global_state"]  # private: untyped
    reset = []
    # First, as Keras 3.16 does: through its own API the backend can undo what the distribution
    # started (torch leaves its DTensor mode); a new tracker alone would not.
    distribution_lib = sys.modules.get("keras.src.distribution.distribution_lib")
    set_distribution = getattr(distribution_lib, "set_distribution", None)
    if set_distribution is not None:
        set_distribution(None)
    for name, value in list(vars(global_state).items()):
        if name.startswith("GLOBAL_") and name.endswith("_TRACKER") and isinstance(value, threading.local):
            setattr(global_state, name, threading.local())
            reset.append(name)
    return reset


def _clear_keras_session(step: CleanStep, settings: dict[str, Any], new_seed: int | None) -> None:
    keras = keras_probe.keras3()
    ops_before = tf_probe.default_graph_op_count()
    actions = []
    nested = _inside_graph_block()
    if keras is not None:
        if nested and keras.backend.backend() == "tensorflow":
            # Do what clear_session() does minus reset_default_graph(): inside a graph block
            # that assertion would fire, and the graph is the user's to keep.
            reset = _reset_keras_global_state()
            actions.append(f"Keras global state reset ({', '.join(reset)})")
        else:
            # free_memory=False: we collect once, after the registry purge, not twice. On
            # torch this also resets dynamo's compiled-function cache.
            keras.backend.clear_session(free_memory=False)
            actions.append(f"keras.backend.clear_session() ({keras.backend.backend()} backend)")
    legacy = keras_probe.tf_keras()
    if legacy is not None and not nested:
        legacy.backend.clear_session()
        actions.append("tf_keras.backend.clear_session()")
    tf = tf_probe.module()
    if tf is not None and not nested and keras is None and legacy is None:
        tf.compat.v1.reset_default_graph()
        actions.append("tf.compat.v1.reset_default_graph()")
    if nested:
        actions.append("legacy graph kept: you are inside `with tf.Graph().as_default()`")
    _restore_keras_settings(settings, new_seed)
    ops_after = tf_probe.default_graph_op_count()
    if isinstance(ops_before, int) and isinstance(ops_after, int) and ops_before != ops_after:
        actions.append(f"legacy graph {ops_before} → {ops_after} ops")
    step.detail = "; ".join(actions) or "no Keras or TensorFlow imported"


def _clear_jax_caches(step: CleanStep, asked: bool) -> None:
    jax = sys.modules.get("jax")
    if jax is None or not hasattr(jax, "clear_caches"):
        step.skipped = "JAX not imported"
    elif not asked:
        # Measured on Keras 3.15's JAX backend (CPU, 30 small models, bench_jax_caches.py):
        # clearing made each next model 1.66 s instead of 0.78 s (everything recompiled) and
        # freed about 5 MB; RSS stayed flat either way. So it is the user's call.
        step.skipped = ("kept (clearing recompiles everything for the next model; "
                        "%clear_tf --jax-caches or clear_jax_caches=True clears them)")
    else:
        jax.clear_caches()
        step.detail = "jax.clear_caches() (compiled functions)"


def _return_torch_cached_blocks(step: CleanStep) -> None:
    # After the collection, not before: a model freed only by that collection leaves its
    # tensors in torch's cache, and an earlier empty_cache() would return none of them
    # (measured on an H100: 64 MiB allocated, 866 MiB reserved until a second empty_cache()).
    cuda = torch_probe.started_cuda()
    if "torch" not in sys.modules:
        step.skipped = "torch not imported"
    elif cuda is not None:
        cuda.empty_cache()
        step.detail = "torch.cuda.empty_cache() (cached CUDA blocks)"
    else:
        step.skipped = "torch: CUDA not in use, no cached blocks to return"


# --- steps 5-6: gc and malloc_trim -----------------------------------------------------------


def trim_heap() -> str | None:
    """Hand the heap glibc holds free back to the OS (``malloc_trim(0)``); None, or why it could not.

    Freed C and Python memory stays in glibc's heap, counted in RSS, until something trims it: a
    Keras ``fit`` frees most of what it allocated, and without a trim that heap stays resident
    after the cell (0.35-0.45 MiB per fitted small model, measured in a kernel; issue 20).

    Example:
        >>> trim_heap() in (None, "malloc_trim exists on glibc (Linux) only", "not glibc (musl?): no malloc_trim")
        True
    """
    if not sys.platform.startswith("linux"):
        return "malloc_trim exists on glibc (Linux) only"
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return "not glibc (musl?): no malloc_trim"
    libc.malloc_trim(0)
    return None


def _malloc_trim(step: CleanStep) -> None:
    skipped = trim_heap()
    if skipped:
        step.skipped = skipped
    else:
        step.detail = "freed glibc heap handed back to the OS"


# --- what is still held ------------------------------------------------------------------------


def _still_held(shell, namespace: dict[str, Any], report: CleanReport, survivors: list[Any]) -> list[str]:
    """What is still alive after the clean, and why: the holder search (what ``--who`` lists; in a
    script, from the module's globals), then the models that survived with no holder there, then TF's
    pool and registry."""
    held = []
    reachable: set[int] = set()
    search = session_search(shell, namespace)
    lines = []
    for item in search.heavy:
        reachable.add(id(item.obj))
        places = ", ".join(h.where for h in item.holders)
        names = list(dict.fromkeys(h.root for h in item.holders if h.kind in ("variable", "history")))
        lines.append((f"{item.info['label']} ({format_bytes(item.info['bytes'])}) held by {places}", names))
    walk = RetainedWalk(shell, namespace, search=search)
    del search
    said: set[str] = set()
    for line, names in lines:
        # What frees it, only where measured: deleting its holders frees its own memory (a model whose
        # weights a kept model shares, or a view of a kept array, frees nothing and gets no command).
        freed = walk.freed_by(names) if names else None
        if freed is not None and freed.command in said:
            line += f" — freed by the same `{freed.command}`"
        elif freed is not None and (freed.retained_bytes or freed.unsized):
            said.add(freed.command)
            line += f" — `{freed.command}` {freed.phrase()} (measured now)"
            report.still_held_evidence.append({"held": line, **freed.to_dict()})
        held.append(line)
    session = "the notebook" if shell is not None else "the script's variables"
    for model in survivors:
        if id(model) not in reachable:
            info = describe(model)
            held.append(f"{info['label']} ({format_bytes(info['bytes'])}) alive, but nothing of {session} holds "
                        "it: a closure, a graph or a framework's registry does")
    stats = tf_probe.allocator_stats()
    if not isinstance(stats, Unavailable):
        for device, s in stats.items():
            if isinstance(s["in_use_bytes"], Unavailable):
                # Neither what the steps freed from TF nor what its pool holds can be said: why, and the remedy.
                held.append(s["in_use_bytes"].detail)
                continue
            unused = s["held_unused_min_bytes"]
            if isinstance(unused, int) and unused >= 1 << 20:
                held.append(
                    f"TensorFlow's {device} pool keeps at least {format_bytes(unused)} for reuse; "
                    "only a new process returns it (`%%fresh_model --isolate`)"
                )
    registry = report.registry
    if registry is not None and registry.kept_alive:
        held.append(f"{registry.kept_alive} CustomGradient entries kept: their models are still alive")
    # Only where the entries still pin graphs: from TF 2.22 on they hold no memory to warn about.
    if (registry is not None and registry.skipped is not None and registry.skipped.reason != "not_imported"
            and entries_pin_graphs()):
        held.append(f"gradient registry not purged: {registry.skipped.detail}")
    # Not this kernel's memory, but the machine's: a report that leaves it out hides hundreds of MiB.
    template = child_processes_note(guarded(process_probe.child_processes_memory, "reading the child processes"))
    if template:
        held.append(template)
    return held


def _other_threads_may_trace() -> bool:
    """A user thread (e.g. ``threading.Thread(target=model.fit)``) might trace a gradient
    while live entries are out of the registry: then leave them in place (they are purged
    by the next clean instead). Daemon threads are ours, IPython's or TensorFlow's."""
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def _describe_purge(step: CleanStep, result: PurgeResult) -> None:
    if result.skipped is not None:
        step.skipped = result.skipped.detail
        return
    step.detail = f"{result.purged} purged, {result.kept_alive} kept (variables alive)" + (
        f", {result.kept_unknown} kept (unknown layout)" if result.kept_unknown else "")


def _models_to_track(shell, namespace: dict[str, Any], names: tuple[str, ...]) -> tuple[list[weakref.ref], int]:
    """Weak references to every model alive now, and how many of them the notebook cannot reach.

    Every live model, not only the notebook's: the garbage collection frees models nobody holds
    but a cycle (a History and its model), and "freed 0 of 1" while it freed 6 more would mislead.
    """
    alive = guarded(live_models, "finding live models")
    models = list(alive) if isinstance(alive, list) else []
    for name in names:
        if any(isinstance(namespace[name], cls) for cls in keras_probe.model_classes()):
            models.append(namespace[name])
    reachable: set[int] = set()
    # In a script too: its module's globals hold models as a notebook's variables do.
    search = guarded(lambda: session_search(shell, namespace), "finding models")
    if isinstance(search, HolderSearch):
        reachable = {id(item.obj) for item in search.heavy if item.info["kind"] == "model"}
        models.extend(item.obj for item in search.heavy if item.info["kind"] == "model")
    del search
    reachable.update(id(namespace[name]) for name in names)
    unique = {id(model): model for model in models}
    unreachable = sum(1 for key in unique if key not in reachable)
    return [weakref.ref(model) for model in unique.values()], unreachable


def _drop_references(report: CleanReport, shell, namespace: dict[str, Any], names: tuple[str, ...],
                     purge_hidden: bool) -> None:
    """Steps 1-2: the named variables, then the hidden holders IPython keeps."""
    with _measured_step_reporting_failure(report, STEP_DELETE_NAMED) as step:
        if names:
            _delete_named(shell, namespace, names, step)
        else:
            step.skipped = "no names given"
    with _measured_step_reporting_failure(report, STEP_DROP_HIDDEN) as step:
        if purge_hidden:
            _drop_hidden(shell, step)
        else:
            step.skipped = "turned off (purge_hidden=False)"


def _clear_frameworks(report: CleanReport, seed: int | None, clear_jax_caches: bool) -> None:
    """Steps 3-4: Keras' session and the legacy graph (the user's settings kept), JAX's compiled functions."""
    settings = guarded(_keras_settings, "reading Keras settings")
    report.preserved_settings = settings if isinstance(settings, dict) else {}
    with _measured_step_reporting_failure(report, "clear Keras session and legacy graph") as step:
        _clear_keras_session(step, report.preserved_settings, seed)
    with _measured_step_reporting_failure(report, STEP_CLEAR_JAX) as step:
        _clear_jax_caches(step, clear_jax_caches)


def _purge_and_collect(report: CleanReport, purge_registry: bool) -> None:
    """Steps 5-8: TF's dead gradient-registry entries, one garbage collection, torch's cache, ``malloc_trim``."""
    with _measured_step_reporting_failure(report, "purge dead CustomGradient entries") as step:
        if purge_registry:
            report.registry = purge_dead_custom_gradients()
            _describe_purge(step, report.registry)
        else:
            step.skipped = "turned off (purge_registry=False)"
    with _measured_step_reporting_failure(report, "garbage collection") as step:
        if (purge_registry and report.registry is not None and report.registry.skipped is None
                and not _other_threads_may_trace()):
            # Entries of models that are dead but not yet collected ride on their variables
            # through this one collection, so that model, entry and graph go together.
            with entries_tied_to_their_variables() as tied:
                collected = gc.collect()
            report.registry = report.registry.merged_with(tied)
            step.detail = (f"{collected} objects collected; {tied.purged} CustomGradient entries "
                           "went with their models")
        else:
            step.detail = f"{gc.collect()} objects collected"
    with _measured_step_reporting_failure(report, STEP_EMPTY_TORCH_CACHE) as step:
        _return_torch_cached_blocks(step)
    with _measured_step_reporting_failure(report, "malloc_trim") as step:
        _malloc_trim(step)


def clear_tf(
    *names: str,
    shell=None,
    seed: int | None = None,
    purge_hidden: bool = True,
    purge_registry: bool = True,
    namespace: dict[str, Any] | None = None,
    clear_jax_caches: bool = False,
) -> CleanReport:
    """Free what a Keras/TensorFlow session holds and report what each step freed.

    Steps: delete ``names`` (and the output-cache copies of their objects); drop hidden
    holders (output-cache entries holding models or large tensors, the last exception);
    ``keras.backend.clear_session()`` keeping the dtype policy, random seed, traceback
    filtering and logging settings it would reset; reset the legacy graph; purge dead
    ``CustomGradient-*`` entries from TF's gradient registry; one ``gc.collect()``;
    ``malloc_trim(0)``. It never deletes a variable you did not name.

    Args:
        *names: variables to delete, e.g. ``"model", "history"``.
        shell: the IPython shell (default: the running one); without one, ``names`` are
            looked up in ``namespace`` or the caller's globals.
        seed: call ``keras.utils.set_random_seed(seed)`` after the clean.
        purge_hidden: drop output-cache entries and the last exception (default True).
        purge_registry: purge dead gradient-registry entries (default True).
        namespace: where ``names`` live when there is no shell.
        clear_jax_caches: also ``jax.clear_caches()`` (default False: on Keras' JAX backend
            it made the next model recompile everything, about 2x slower, and freed about 5 MB).

    Raises:
        KerasMagicUsageError: a name is not a variable, or is one IPython needs (``_oh``,
            ``get_ipython``, ...), or ``namespace`` is not a dict; nothing was deleted.

    Example:
        >>> from kerasmagic import clear_tf
        >>> report = clear_tf("model", seed=0)        # doctest: +SKIP
        >>> print(report)                             # doctest: +SKIP
    """
    if namespace is not None and not isinstance(namespace, MutableMapping):
        raise KerasMagicUsageError(
            f"namespace must be a dict of variables, e.g. globals(); got {type(namespace).__name__}")
    if shell is None:
        shell = running_shell()
    if namespace is None:
        namespace = shell.user_ns if shell is not None else caller_globals()
    check_seed(seed)
    seed = None if seed is None else int(seed)  # Keras refuses numpy integers
    names = _validate_names(names, namespace, in_ipython=shell is not None)

    report = CleanReport()
    started = time.perf_counter()
    report.rss_before_bytes = process_probe.rss_bytes()
    report.tf_before_bytes = _tf_in_use_total()
    report.gpu_before_bytes = _gpu_process_total()
    tracked, report.models_unreachable = _models_to_track(shell, namespace, names)
    report.models_tracked = len(tracked)
    _drop_references(report, shell, namespace, names, purge_hidden)
    _clear_frameworks(report, seed, clear_jax_caches)
    _purge_and_collect(report, purge_registry)
    report.models_freed = sum(1 for ref in tracked if ref() is None)
    survivors = [model for model in (ref() for ref in tracked) if model is not None]
    report.rss_after_bytes = process_probe.rss_bytes()
    report.tf_after_bytes = _tf_in_use_total()
    report.gpu_after_bytes = _gpu_process_total() if report.gpu_before_bytes is not None else None
    held = guarded(functools.partial(_still_held, shell, namespace, report, survivors), "listing what is still held")
    report.still_held = held if isinstance(held, list) else []
    del survivors, held
    # The search and walk of the Still held lines allocate and free many small objects: hand that heap
    # back too, or each clean (each %%fresh_model run) leaves it in RSS.
    trim_heap()
    report.seconds = time.perf_counter() - started
    events.publish("clear_tf", report.to_dict())
    return report

"""Purge dead ``CustomGradient-*`` entries from TensorFlow's process-global gradient registry.

Why: each traced Keras train step registers one (SGD) or two (Adam) custom gradients via
``ReplicaContext.all_reduce``; the registered closure keeps the traced graph, and through
its captured resource handles the model's weights and optimizer slots, alive forever
(tensorflow issue 97697, keras issues 20245 and 20552). ``clear_session()`` never touches
the registry, so RSS grows ~9.5 MB per model in a loop.

Safety rule: an entry is deleted only when the graph its closure captured has variables
and every one of them is dead (``FuncGraph._weak_variables``, walked up through outer
graphs). A model that is still alive keeps its entries and keeps training. Anything we
cannot judge (unknown closure layout, no graph, no variables) is kept.

This reads private TensorFlow attributes, so it is guarded: it runs only on TF versions
we have tested (2.16–2.21) and stands down from 2.22, which carries the upstream fix (PR 109334).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .probes import tensorflow as tf_probe
from .probes.availability import Unavailable

__all__ = ['FIXED_UPSTREAM_FROM', 'PurgeResult', 'SUPPORTED_TF', 'entries_a_clean_frees', 'entries_pin_graphs',
           'entries_tied_to_their_variables', 'purge_dead_custom_gradients', 'support']

#: The first TensorFlow whose custom gradients no longer keep their traced graph: 2.22 carries
#: the upstream fix (tensorflow PR 109334). Measured on 2.22.0rc0 (seed-001 CNN loop, 30 models):
#: ``clear_session()`` alone grows +0.09 MB/model (2.21: +7.60), and the entries' closures hold
#: no graph. The entries are still registered (two per Adam fit); they just pin nothing.
FIXED_UPSTREAM_FROM = (2, 22)

#: Tested here on 2.16–2.21; from :data:`FIXED_UPSTREAM_FROM` on there is nothing to purge and we
#: stand down.
SUPPORTED_TF = ((2, 16), FIXED_UPSTREAM_FROM)


@dataclass
class PurgeResult:
    """What the purge did: entries deleted, kept (alive or unknown), or why it stood down."""

    purged: int = 0
    kept_alive: int = 0
    kept_unknown: int = 0
    skipped: Unavailable | None = None
    purged_keys: list[str] = field(default_factory=list)

    def merged_with(self, later: PurgeResult) -> PurgeResult:
        """This pass followed by ``later``: purges add up, what is kept is what ``later`` kept."""
        return PurgeResult(
            purged=self.purged + later.purged,
            kept_alive=later.kept_alive,
            kept_unknown=later.kept_unknown,
            skipped=later.skipped,
            purged_keys=self.purged_keys + later.purged_keys,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "purged": self.purged,
            "kept_alive": self.kept_alive,
            "kept_unknown": self.kept_unknown,
            "skipped": self.skipped.to_dict() if self.skipped else None,
        }


def _closure_values(fn: Any) -> dict[str, Any]:
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    if code is None:
        return {}
    values = {}
    for name, cell in zip(code.co_freevars, closure, strict=False):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return values


def _captured_graph(grad_fn: Any) -> Any:
    """The graph the custom gradient was traced in, found through its closures."""
    tape_grad_fn = _closure_values(grad_fn).get("tape_grad_fn")
    if tape_grad_fn is None:
        return None
    captured = _closure_values(tape_grad_fn)
    for name in ("result", "variables"):
        for item in captured.get(name) or ():
            graph = getattr(item, "graph", None)
            if graph is not None:
                return graph
    return None


def _graph_variable_refs(graph: Any) -> list[weakref.ref] | None:
    refs: list[weakref.ref] = []
    seen = 0
    while graph is not None and seen < 32:
        weak_variables = getattr(graph, "_weak_variables", None)
        if weak_variables is None and not refs:
            return None  # not a FuncGraph layout we know
        refs.extend(weak_variables or ())
        graph = getattr(graph, "outer_graph", None)
        seen += 1
    return refs


def _custom_gradient_entries(registry: dict) -> Iterator[tuple[str, list[weakref.ref] | None]]:
    """Each ``CustomGradient-*`` key with weak references to its graphs' variables (None: unknown layout)."""
    for key in [k for k in list(registry) if k.startswith("CustomGradient-")]:
        entry = registry.get(key)
        graph = _captured_graph(entry.get("type") if isinstance(entry, dict) else None)
        yield key, (_graph_variable_refs(graph) if graph is not None else None)


def entries_pin_graphs() -> bool | None:
    """Whether this TensorFlow's ``CustomGradient`` entries keep their traced graphs alive.

    True before :data:`FIXED_UPSTREAM_FROM` (each entry pins a graph and, through it, a model's
    weights and optimizer slots), False from it on, None when TensorFlow is not imported. Reports
    ask this before they call registry entries memory: on 2.22 they are a count, not a leak.

    Example:
        >>> entries_pin_graphs() in (True, False, None)
        True
    """
    if tf_probe.module() is None:
        return None
    return tf_probe.version_tuple() < FIXED_UPSTREAM_FROM


def support() -> Unavailable | None:
    """None when the purge may run here, else why it stands down."""
    if tf_probe.module() is None:
        return Unavailable("not_imported", "TensorFlow is not imported: nothing to purge")
    version = tf_probe.version_tuple()
    low, high = SUPPORTED_TF
    if version >= FIXED_UPSTREAM_FROM:
        return Unavailable(
            "not_supported",
            f"TensorFlow {tf_probe.version()} carries the upstream fix (tensorflow PR 109334): its "
            "CustomGradient entries keep no graph, so there is nothing to purge",
        )
    if not (low <= version < high):
        return Unavailable(
            "not_supported",
            f"TensorFlow {tf_probe.version()} is older than the tested range "
            f"{low[0]}.{low[1]}–{high[0]}.{high[1] - 1}: its private registry layout is not known here",
        )
    registry = tf_probe.gradient_registry()
    if isinstance(registry, Unavailable):
        return registry
    return None


def purge_dead_custom_gradients() -> PurgeResult:
    """Delete registry entries whose graphs' variables are all dead (about 0.2 ms).

    Example:
        >>> result = purge_dead_custom_gradients()
        >>> result.purged, result.kept_alive            # doctest: +SKIP
        (78, 2)
    """
    result = PurgeResult(skipped=support())
    registry = tf_probe.gradient_registry()
    if result.skipped is not None or isinstance(registry, Unavailable):  # support() saw the registry too
        return result
    for key, refs in _custom_gradient_entries(registry):
        if not refs:
            result.kept_unknown += 1
            continue
        if any(ref() is not None for ref in refs):
            result.kept_alive += 1
            continue
        registry.pop(key, None)
        result.purged += 1
        result.purged_keys.append(key)
    return result


def entries_a_clean_frees(kept_variable_ids: set[int]) -> tuple[int, int] | None:
    """How many ``CustomGradient`` entries a clean would free now, of how many: those whose graphs'
    variables are dead or belong to no model that outlives the clean (``kept_variable_ids``: the ids of
    the variables, Keras' and their TensorFlow values, of the models the notebook keeps). None where
    the purge stands down (TensorFlow not imported, or a release with the upstream fix). Reads only.

    Example:
        >>> entries_a_clean_frees(set()) is None or True
        True
    """
    if support() is not None:
        return None
    registry = tf_probe.gradient_registry()
    if isinstance(registry, Unavailable):
        return None
    freeable = total = 0
    for _key, refs in _custom_gradient_entries(registry):
        total += 1
        if not refs:
            continue  # a layout we do not know: the purge keeps it, so does this count
        alive = [ref() for ref in refs]
        if not any(id(variable) in kept_variable_ids for variable in alive if variable is not None):
            freeable += 1
        del alive
    return freeable, total


#: The attribute under which a live variable carries the registry entries of its graphs
#: while ``entries_tied_to_their_variables`` runs.
_TIED_ATTRIBUTE = "_kerasmagic_tied_gradient_entries"


@contextmanager
def entries_tied_to_their_variables() -> Iterator[PurgeResult]:
    """For the span of one ``gc.collect()``, let registry entries live exactly as long as their variables.

    Why: a model that has just been deleted is still alive in reference cycles, so its
    variables look alive and the plain purge must keep its entries; after a collection
    frees the model, its entries pin its graphs, which need a *second* collection (about
    0.35 s in a 1.8 M-object session). Instead, each entry whose variables are alive is
    taken out of the registry and hung on every one of those variables. A collection
    then frees a dead model, its variables, the entry and the graph in one pass; the
    entries of variables that survive are put back afterwards, also if the collection
    is interrupted. Between the two, TensorFlow cannot trace a gradient through those
    entries: the collection runs on the caller's thread and traces nothing.

    Example:
        >>> import gc
        >>> with entries_tied_to_their_variables() as tied:   # doctest: +SKIP
        ...     gc.collect()
        >>> tied.purged, tied.kept_alive                       # doctest: +SKIP
        (4, 2)
    """
    result = PurgeResult(skipped=support())
    registry = tf_probe.gradient_registry()
    if result.skipped is not None or isinstance(registry, Unavailable):  # support() saw the registry too
        yield result
        return
    tied: list[tuple[str, list[weakref.ref]]] = []
    try:
        # A helper, so that no variable stays bound in this suspended generator's frame.
        _tie_live_entries(registry, tied)
        yield result
    finally:
        for key, refs in tied:
            survivors = [v for v in (ref() for ref in refs) if v is not None]
            if not survivors:
                result.purged += 1
                result.purged_keys.append(key)
                continue
            registry[key] = survivors[0].__dict__[_TIED_ATTRIBUTE][key]
            result.kept_alive += 1
            for variable in survivors:
                carried = variable.__dict__.get(_TIED_ATTRIBUTE, {})
                carried.pop(key, None)
                if not carried:
                    variable.__dict__.pop(_TIED_ATTRIBUTE, None)


def _tie_live_entries(registry: dict, tied: list[tuple[str, list[weakref.ref]]]) -> None:
    for key, refs in _custom_gradient_entries(registry):
        entry = registry[key]
        variables = list({id(v): v for v in (ref() for ref in refs or ()) if v is not None}.values())
        if not variables or not all(_can_carry(v) for v in variables):
            continue  # dead ones are the plain purge's job; odd ones we leave alone
        for variable in variables:
            variable.__dict__.setdefault(_TIED_ATTRIBUTE, {})[key] = entry
        tied.append((key, [weakref.ref(v) for v in variables]))
        del registry[key]


def _can_carry(variable: Any) -> bool:
    """Plain instance dicts only: we write to ``__dict__`` directly, past any ``__setattr__``."""
    return isinstance(getattr(variable, "__dict__", None), dict)

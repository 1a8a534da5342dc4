"""Remedies proven before they are shown: what deleting names (or a plain ``%clear_tf``) would free.

Before any report tells a user to delete, close or rebind a variable, it asks this module what that
would free: the memory reachable *only* through those names. One holder search (the walk
``%tf_mem --who`` makes, :class:`~kerasmagic.holders.HolderSearch`) lists every model, array, tensor,
DataFrame, buffer, Session and Graph the notebook reaches, each with every root that reaches it.
An object is freed by ``%clear_tf NAMES`` when each of its roots is one of ``NAMES`` or one of the hidden
holders every ``%clear_tf`` drops (the output cache, the last exception). Its bytes: an array's or a
buffer's length, a DataFrame's ``memory_usage``, a Keras model's weights and optimizer state less the
weights a model that stays alive shares with it (a frozen base held by its own name), a numpy view
only where its base goes with it.

Nothing here deletes anything: :class:`RetainedWalk` measures, :func:`prove` picks the names that free a
real share of a growth (:data:`REAL_SHARE`), each with its figure; where none does it says what was
measured and offers the safe default, a plain ``%clear_tf`` (it deletes no variable of the user's).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .holders import HolderSearch
from .probes import keras as keras_probe
from .probes import tensorflow as tf_probe
from .probes.availability import guarded
from .tables import format_bytes

__all__ = ['HOW_MEASURED', 'REAL_SHARE', 'Proof', 'Retained', 'RetainedWalk', 'prove', 'tf_keeps_a_pool']

#: A name is advised only if deleting it frees at least this share of the growth being explained
#: (or, for a cell that leaves models behind, at least one of those models): a 319-byte log is no fix.
REAL_SHARE = 0.2
#: ... and never less than this: below it, a figure is noise next to RSS.
_MIN_BYTES = 2**20
#: How the figures are measured, as every report's data says it.
HOW_MEASURED = ("retained-size walk: the objects reachable only through these names (and the output cache "
                "and last exception a %clear_tf drops), from the holder search of %tf_mem --who")
#: The hidden holders every ``%clear_tf`` drops, by the holder search's kinds.
_DROPPED_BY_EVERY_CLEAN = frozenset({"output_cache", "exception"})
#: Root kinds a ``%clear_tf NAME`` removes when NAME is named.
_NAMED_KINDS = frozenset({"variable", "history"})


def tf_keeps_a_pool() -> bool:
    """Whether TensorFlow's allocator keeps freed tensors in a pool of its own (a BFC allocator with
    statistics: oneDNN's CPU pool, any GPU): what a freed model gives back then stays in this process.

    Example:
        >>> tf_keeps_a_pool() in (True, False)
        True
    """
    if tf_probe.module() is None or not tf_probe.runtime_started():
        return False
    stats = guarded(tf_probe.allocator_stats, "reading TensorFlow's allocator")
    return isinstance(stats, dict) and any(isinstance(s.get("in_use_bytes"), int) for s in stats.values())


@dataclass
class Retained:
    """What one action frees, measured now: ``names`` deleted by ``%clear_tf`` (none: a plain one).

    ``host_bytes`` (numpy, pandas, buffers) go back to the OS; ``tf_bytes`` (TensorFlow tensors, Keras
    weights and optimizer state) go back to TensorFlow, which returns them to the OS unless it keeps a
    pool (``tf_pooled``). ``rss_bytes`` is what RSS should fall by.

    Example:
        >>> Retained(("models",), host_bytes=3 * 2**20).to_dict()["command"]
        '%clear_tf models'
    """

    names: tuple[str, ...]
    host_bytes: int = 0
    tf_bytes: int = 0
    tf_pooled: bool = False
    models: int = 0
    #: What is freed, largest first: ``label (size) held by ...``.
    objects: list[str] = field(default_factory=list)
    #: Objects freed whose size this walk does not measure (a TF1 Graph, a Session).
    unsized: list[str] = field(default_factory=list)

    @property
    def retained_bytes(self) -> int:
        return self.host_bytes + self.tf_bytes

    @property
    def rss_bytes(self) -> int:
        return self.host_bytes + (0 if self.tf_pooled else self.tf_bytes)

    @property
    def command(self) -> str:
        return "%clear_tf" + "".join(f" {name}" for name in self.names)

    def phrase(self) -> str:
        """``frees 1.00 GiB``: the figure, as a sentence says it. A model's figure is its weights and
        optimizer state, so it is a floor: the graphs TensorFlow traced for it go with it, unmeasured.

        Example:
            >>> Retained(("a",), host_bytes=2**30).phrase()
            'frees 1.00 GiB'
            >>> Retained(("models",), tf_bytes=6 * 2**20, models=2).phrase()[:60]
            "frees at least 6.00 MiB (2 Keras models' weights and optimiz"
        """
        parts = []
        if self.models:
            whose = "1 Keras model's" if self.models == 1 else f"{self.models} Keras models'"
            parts.append(f"{whose} weights and optimizer state; "
                         f"{'its' if self.models == 1 else 'their'} traced graphs are not measured")
        if self.tf_pooled and self.tf_bytes:
            parts.append(f"{format_bytes(self.tf_bytes)} of it goes back to TensorFlow's pool, not to the OS")
        extra = f" ({'; '.join(parts)})" if parts else ""
        unsized = f", and {', '.join(self.unsized)} (size not measured)" if self.unsized else ""
        floor = "at least " if self.models or self.unsized else ""
        return f"frees {floor}{format_bytes(self.retained_bytes)}{extra}{unsized}"

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "names": list(self.names), "retained_bytes": self.retained_bytes,
                "host_bytes": self.host_bytes, "tf_bytes": self.tf_bytes, "tf_pooled": self.tf_pooled,
                "rss_bytes": self.rss_bytes, "models": self.models, "objects": list(self.objects[:10]),
                "unsized": list(self.unsized), "how_measured": HOW_MEASURED}


@dataclass
class _Item:
    """One heavy object as the walk keeps it: no reference to the object itself."""

    key: int
    label: str
    kind: str
    holders: list[str]
    #: (kind, root) of each path that reaches it.
    roots: frozenset[tuple[str, str]]
    #: Bytes by what holds them: a model's variables by id, an array's memory by its owner's id.
    parts: dict[int, int]
    tf: bool
    sized: bool


class RetainedWalk:
    """One holder search, kept as labels and sizes, that answers "what would deleting these free?".

    ``search``: a search made already (its objects are let go here, its report is no longer usable).

    Example:
        >>> import numpy as np
        >>> walk = RetainedWalk(namespace={"a": np.ones(2**18), "b": [np.ones(2**18)], "c": None})
        >>> walk.freed_by(["a"]).host_bytes, walk.freed_by(["c"]).host_bytes
        (2097152, 0)
    """

    def __init__(self, shell=None, namespace: dict[str, Any] | None = None,
                 search: HolderSearch | None = None) -> None:
        if search is None:
            namespace_roots = None if shell is not None else [
                (k, "variable", v) for k, v in (namespace or {}).items()
                if not (k.startswith("__") and k.endswith("__"))]
            search = HolderSearch(shell, roots=namespace_roots)
            del namespace_roots  # its tuples are references the walk did not take
        #: The search stopped at its budget: a holder past it is unknown, so nothing is proven.
        self.truncated = search.truncated
        self.visited = search.visited
        self.seconds = search.seconds
        self.tf_pooled = tf_keeps_a_pool()
        # The search keeps each root's value (root_values): one more reference for each root an object is.
        as_root = Counter(id(value) for value in search.root_values.values())
        if shell is None and namespace:
            as_root.update(id(value) for value in namespace.values())  # the namespace itself holds each
        owners: dict[int, int] = {}  # an ndarray base's id -> the views of it found
        for heavy in search.heavy:
            base = getattr(heavy.obj, "base", None) if type(heavy.obj).__module__ == "numpy" else None
            if base is not None and type(base).__module__ == "numpy" and hasattr(base, "nbytes"):
                owners[id(base)] = owners.get(id(base), 0) + 1
        base = None  # a local left bound would be one more reference to what is counted below
        self._held_elsewhere: set[int] = set()
        items: list[_Item] = []
        for heavy in search.heavy:
            obj = heavy.obj
            kind = heavy.info.get("kind", "")
            parts: dict[int, int] = {}
            sized = True
            if kind == "model":
                parts = _model_parts(obj)
            elif kind in ("session", "graph"):
                sized = False
            else:
                size = heavy.info.get("bytes")
                base = getattr(obj, "base", None) if type(obj).__module__ == "numpy" else None
                if base is not None and type(base).__module__ == "numpy" and hasattr(base, "nbytes"):
                    # A view: its memory is its base's, freed only with the base.
                    parts = {id(base): int(base.nbytes)}
                elif isinstance(size, int):
                    parts = {id(obj): size}
                    # References the walk did not see (a small view's .base, a library's cache): its memory
                    # outlives every name the walk knows. Counted here: heavy.obj, obj, getrefcount's argument.
                    unseen = sys.getrefcount(obj) - 3 - as_root.get(id(obj), 0) - owners.get(id(obj), 0)
                    if unseen > heavy.walked_refs:
                        self._held_elsewhere.add(id(obj))
            roots = frozenset((h.kind, h.root) for h in heavy.holders)
            # The search lists a bounded number of holders: with that many, more may exist.
            capped = len(heavy.holders) >= 30
            framework = kind == "model" or (type(obj).__module__ or "").split(".")[0] in (
                "tensorflow", "keras", "tf_keras")
            obj = base = None
            items.append(_Item(id(heavy.obj), heavy.info.get("label", "?"), kind, [h.where for h in heavy.holders],
                               roots if not capped else frozenset({("unknown", "")}), parts, framework, sized))
        # A base held by more than its views (a DataFrame's block, an object the walk does not enter)
        # is not freed by deleting the views: its memory is claimed by nobody.
        heavy_ids = {id(heavy.obj) for heavy in search.heavy}
        for heavy in search.heavy:
            base = getattr(heavy.obj, "base", None) if type(heavy.obj).__module__ == "numpy" else None
            if base is not None and id(base) in owners and id(base) not in heavy_ids:
                # Its references: each view's .base, this local and getrefcount's argument.
                if sys.getrefcount(base) - 2 - owners[id(base)] > 0:
                    self._held_elsewhere.add(id(base))
            base = None
        search.heavy = []
        self._items = items

    def _freed_items(self, names: Iterable[str]) -> tuple[list[_Item], list[_Item]]:
        named = set(names)
        freed: list[_Item] = []
        kept: list[_Item] = []
        for item in self._items:
            gone = bool(item.roots) and all(
                kind in _DROPPED_BY_EVERY_CLEAN or (kind in _NAMED_KINDS and root in named)
                for kind, root in item.roots)
            (freed if gone else kept).append(item)
        return freed, kept

    def freed_by(self, names: Iterable[str] = (), ignore: frozenset[int] = frozenset()) -> Retained:
        """What ``%clear_tf NAMES`` would free now (``names`` empty: a plain ``%clear_tf``); objects
        whose id is in ``ignore`` are left out of the figure (they are freed all the same)."""
        names = tuple(dict.fromkeys(names))
        result = Retained(names, tf_pooled=self.tf_pooled)
        if self.truncated:
            return result
        freed, kept = self._freed_items(names)
        freed = [item for item in freed if item.key not in ignore]
        kept_parts = set(self._held_elsewhere)
        for item in kept:
            kept_parts.update(item.parts)
        counted: set[int] = set()
        for item in freed:
            size = 0
            for key, value in item.parts.items():
                if key in kept_parts or key in counted:
                    continue
                counted.add(key)
                size += value
            if item.tf:
                result.tf_bytes += size
            else:
                result.host_bytes += size
            result.models += item.kind == "model"
            if not item.sized:
                result.unsized.append(item.label)
            elif size:
                result.objects.append(f"{item.label} ({format_bytes(size)}) held by {', '.join(item.holders[:3])}")
        return result

    def kept_variable_ids(self, names: Iterable[str] = ()) -> set[int]:
        """Ids of the variables (Keras' and their TensorFlow values) of the models ``%clear_tf NAMES`` keeps."""
        _freed, kept = self._freed_items(names)
        return {key for item in kept if item.kind == "model" for key in item.parts}

    def holders_of_models(self) -> list[str]:
        """The variables that reach a Keras model, each once."""
        return list(dict.fromkeys(root for item in self._items if item.kind == "model"
                                  for kind, root in sorted(item.roots) if kind in _NAMED_KINDS))


@dataclass
class Proof:
    """The remedy chosen for a growth, with its evidence.

    ``named`` is the ``%clear_tf NAMES`` proven to free a real share (None: no name is), ``default`` what
    a plain ``%clear_tf`` frees; ``candidates`` what each name looked at would free on its own.

    Example:
        >>> Proof(None, Retained(()), 0, {}).sentence()[:60]
        'A plain `%clear_tf` (it deletes none of your variables) is s'
    """

    named: Retained | None
    default: Retained
    explained_bytes: int | float
    candidates: dict[str, int]
    truncated: bool = False
    #: When the walk was made, as the sentences say it: ``now``, or ``after cell [7] ran`` for
    #: advice kept and shown later (the leak watch's, read in a later cell or by the sidebar).
    when: str = "now"

    @property
    def names(self) -> list[str]:
        return list(self.named.names) if self.named is not None else []

    def sentence(self) -> str:
        """The remedy in words: the proven names with their figure, or the safe default with its own."""
        if self.truncated:
            return ("The holder search stopped at its budget, so no remedy is proven; a plain `%clear_tf` "
                    "(it deletes none of your variables) is safe.")
        if self.named is not None:
            return f"`{self.named.command}` {self.named.phrase()} (measured {self.when})."
        if self.default.retained_bytes or self.default.unsized:
            return (f"A plain `%clear_tf` (it deletes none of your variables) {self.default.phrase()}, "
                    f"held only by the output cache or the last exception (measured {self.when}).")
        return ("A plain `%clear_tf` (it deletes none of your variables) is safe, but it frees no object this "
                "walk can size now (what it does free, collected cycles and heap handed back, is known only "
                "after it runs).")

    def measured(self) -> str:
        """What the walk found for the names it looked at: ``models retains 319 B``."""
        if not self.candidates:
            return ""
        shown = ", ".join(f"`{name}` {format_bytes(size)}" for name, size in list(self.candidates.items())[:4])
        return f"Deleting each would free only: {shown} (measured {self.when})."

    def to_dict(self) -> dict[str, Any]:
        return {"named": self.named.to_dict() if self.named is not None else None,
                "default": self.default.to_dict(), "explained_bytes": self.explained_bytes,
                "candidates_bytes": dict(self.candidates), "truncated": self.truncated,
                "how_measured": HOW_MEASURED}


def _model_parts(model: Any) -> dict[int, int]:
    """A model's variables (weights, then optimizer state) by id, with their bytes."""
    parts: dict[int, int] = {}

    def read() -> None:
        optimizer = getattr(model, "optimizer", None)
        slots = getattr(optimizer, "variables", None) if optimizer is not None else None
        if callable(slots):  # tf-keras exposes variables() as a method
            slots = slots()
        for variable in [*model.weights, *(slots or [])]:
            parts[id(variable)] = keras_probe.variable_bytes([variable])
            # Keras 3 wraps a tf.Variable: TensorFlow's graphs (and so its gradient registry) see that one.
            value = getattr(variable, "_value", None)
            if value is not None and id(value) not in parts:
                parts[id(value)] = 0

    guarded(read, "sizing a model's variables")
    return parts


def prove(shell, explained_bytes: int | float, candidates: Iterable[str] = (), *,
          models_left: bool = False, walk: RetainedWalk | None = None,
          current: frozenset[int] = frozenset()) -> Proof:
    """Which of ``candidates`` (variable names) to advise deleting for a growth of ``explained_bytes``.

    A name is advised only if ``%clear_tf NAME`` frees at least :data:`REAL_SHARE` of the growth
    (and 1 MiB) more than a plain ``%clear_tf``, or, with ``models_left``, at least one Keras model
    more. What a name frees of ``current`` (ids of the objects the cell's last run made: the model in
    use) does not count for it: the leftover of a re-run is an older object. Names that free something
    only together (``model`` and ``history`` both hold a model) are
    advised together, each of them needed. The safe default's figure is always measured.

    Example:
        >>> import numpy as np
        >>> namespace = {"log": [{"loss": 0.1}], "data": np.ones(2**20)}
        >>> proof = prove(None, 8 * 2**20, ["log", "data"], walk=RetainedWalk(namespace=namespace))
        >>> proof.names, proof.candidates
        (['data'], {'log': 0, 'data': 8388608})
    """
    walk = walk if walk is not None else RetainedWalk(shell)
    default = walk.freed_by(())
    if walk.truncated:
        return Proof(None, default, explained_bytes, {}, truncated=True)
    namespace = getattr(shell, "user_ns", None)
    names = [name for name in dict.fromkeys(candidates)
             if name.isidentifier() and (namespace is None or name in namespace)]
    threshold = max(_MIN_BYTES, REAL_SHARE * max(explained_bytes or 0, 0))

    base = walk.freed_by((), current)

    def worth(retained: Retained) -> bool:
        more = retained.retained_bytes - base.retained_bytes
        return more >= threshold or (models_left and retained.models > base.models and more > 0)

    alone = {name: walk.freed_by([name], current) for name in names}
    measured = {name: retained.retained_bytes - base.retained_bytes for name, retained in alone.items()}
    chosen = [name for name in names if worth(alone[name])]
    if not chosen and len(names) > 1 and worth(walk.freed_by(names, current)):
        chosen = list(names)
    # Each name must be needed: one whose removal from the set frees no less is dropped.
    for name in list(chosen):
        if len(chosen) > 1:
            without = [n for n in chosen if n != name]
            if walk.freed_by(without).retained_bytes >= walk.freed_by(chosen).retained_bytes:
                chosen = without
    named = walk.freed_by(chosen) if chosen else None
    return Proof(named, default, explained_bytes, measured)

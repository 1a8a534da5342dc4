"""Per-cell growth ("leak watch"): which cell keeps more memory each time it runs, and by how much.

``%load_ext kerasmagic`` starts a :class:`LeakWatch` on the shell: IPython's ``pre_run_cell``
and ``post_run_cell`` events read the same cheap figures the live sampler reads (RSS,
TensorFlow's allocator in use, this process's GPU memory per NVML) plus the size of
TensorFlow's ``CustomGradient`` registry and the Keras models in the user's variables, and
record the change for the cell that ran. No garbage collection and no heap walk: about
0.1 ms per cell (``benchmarks/bench_leak_watch.py``).

A cell is keyed by its id where the frontend sends one (JupyterLab and Notebook 7 put
``cellId`` in the execute request's metadata; ipykernel hands it to IPython as
``ExecutionInfo.cell_id``), else by a hash of its source (terminal IPython, classic
Notebook). A cell whose memory (RSS or TensorFlow in use) grew by more than
:data:`NOISE_BYTES` on each of its last :data:`MIN_RUNS` or more re-runs is *flagged*:
"cell [12] grows 9.60 MiB per run (5 runs)", with the fix. A cell's first run never counts (it
creates what later runs reuse), so a cell is flagged from its 4th run on. The fix is chosen by
what holds the growth (:func:`advice`): the names to delete, ``%%fresh_model``, or ``--isolate``
only where nothing in-process can free it. Beside that rule, a single run that left much behind
(:data:`ONE_RUN_BYTES`, :data:`ONE_RUN_MODELS`) is named at once, with who holds it. The watch
keeps the last :data:`KEEP_RUNS` runs of the last :data:`KEEP_CELLS` cells.

``%tf_mem --cells`` and :func:`cell_growth` show it as text (HTML in a notebook); the
sidebar's "Leak watch" section gets it as the protocol's ``cell_growth`` message.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from . import events, session_runs
from .holders import HolderSearch, collect_heavy, graph_ops
from .probes import keras as keras_probe
from .probes import tensorflow as tf_probe
from .probes.availability import guarded
from .probes.sample import allocator_total, gpu_device_values, gpu_framework_imported, memory_sample
from .registry_purge import entries_a_clean_frees
from .remedies import RetainedWalk, prove
from .tables import Report, Section, format_bytes

__all__ = ['FIX_TEXT', 'FRESH_CELL_TEXT', 'KEEP_CELLS', 'KEEP_RUNS', 'MIN_RUNS', 'NOISE_BYTES', 'ONE_RUN_BYTES',
           'ONE_RUN_MODELS', 'RULE',
           'CellGrowthReport', 'CellRun', 'LeakWatch', 'active_watch', 'cell_growth', 'growth_sentence',
           'advice', 'one_run_sentence', 'start', 'stop']

logger = logging.getLogger(__name__)

#: A run "grew" when RSS or TensorFlow in use rose by more than this (1 MiB): below it is noise.
NOISE_BYTES = 2**20
#: A cell is flagged when it grew on each of its last this-many runs (or more).
MIN_RUNS = 3
#: Runs kept per cell, and cells kept (the least recently run cell is forgotten first).
KEEP_RUNS = 20
KEEP_CELLS = 200
#: A single run is named ("cell [3] grew +201 MiB and left 6 live models, held by `models`") when it
#: left more than this behind (RSS or TF in use), whatever the run-over-run rule says: a student who
#: ran a heavy cell once must not read "no cell grows" and think nothing stayed.
ONE_RUN_BYTES = 100 * 2**20
#: ... or this many more live Keras models after its first run (one new model is what a model cell is
#: for). A re-run that leaves any more models is named too: the previous run's model is still held.
ONE_RUN_MODELS = 2
#: Modules whose first import alone grows a process by hundreds of MiB, once: a run that imported one
#: is not named for its growth (there is nothing to free; its models are still named).
_FRAMEWORKS = ("tensorflow", "torch", "jax", "keras")
#: At most this many references are looked at when counting the models in the user's variables.
_MODEL_SCAN_LIMIT = 2000

#: What to do about a flagged cell, by the protocol's ``fix`` code, where no measurement is at hand
#: (a report built from old data): each flag's own ``fix_text`` says what was measured when it was flagged.
FIX_TEXT = {
    # TensorFlow's CustomGradient entries that pin only graphs of models the notebook no longer keeps.
    "fresh_model": "Fix: start the cell with %%fresh_model: the clean it runs first frees the previous run's "
                   "models and the dead TensorFlow graphs they leave.",
    # Each run leaves one more model reachable from the user's variables (a list of models or Histories).
    "keep_models": "Fix: each run keeps one more Keras model alive (a list of models or of History objects "
                   "holds them): keep only what you need from each, e.g. history.history.",
    # Nothing found in the process holds the growth.
    "isolate": "Fix: nothing kerasmagic can reach in this process holds what this cell keeps (your variables, "
               "the output cache and the last exception hold none of it, and no CustomGradient entry a clean "
               "could free pins it): %%fresh_model --isolate runs the cell in a new process, which gives back "
               "all it used when it ends.",
}
#: The ``isolate`` fix for a cell that already starts with ``%%fresh_model``: adding it again is no
#: fix, and part of what such a cell keeps per run is TensorFlow's stack-trace cache (issue 20).
FRESH_CELL_TEXT = (
    "Fix: this cell already starts with %%fresh_model, and nothing kerasmagic can reach in this process holds "
    "what it still keeps (your variables, the output cache and the last exception hold none of it). Part of it "
    "is TensorFlow's when the cell traces ops: it keeps their stack traces, with the cell's compiled code, for "
    "its error messages until the process ends (the %%fresh_model report counts them). %%fresh_model --isolate "
    "runs the cell in a new process, which gives back all it used when it ends."
)

#: The figures recorded per run, as they are named on the wire.
_FIGURES = ("rss_bytes", "tf_in_use_bytes", "gpu_bytes", "custom_gradient_entries", "live_models")

#: Containers the model count looks one level into, and types that never are a model.
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
_PLAIN_TYPES = (str, int, float, bool, bytes, complex, type(None))


# ---- reading the figures -------------------------------------------------------------------------


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class _Scan:
    """What one bounded look at the user's variables saw: the models, and every object it passed
    (so that after a run, what is new can be told from what was there)."""

    models: set[int] | None
    seen: set[int]
    #: Length of each of the user's top-level lists, dicts, sets and tuples (``Out`` included): a name
    #: whose container gains items on every growing run is what keeps the growth.
    lengths: dict[str, int] = field(default_factory=dict)
    #: Weak references to the models found, by id: what a run made can be told apart on its next run.
    model_refs: dict[int, Any] = field(default_factory=dict)


def _scan(shell) -> _Scan:
    """Keras models in the user's variables: top-level names, one level inside lists, tuples,
    dicts and sets (``Out`` included), and a ``History``'s model; and the ids of every value it
    looked at. A bounded look at references, never a heap walk; ``models`` is None before Keras
    is imported.

    Example:
        >>> scan = _scan(None)          # no shell: nothing to look at
        >>> scan.models, scan.seen, scan.lengths
        (None, set(), {})
    """
    classes = keras_probe.model_classes()
    seen: set[int] = set()
    if shell is None:
        return _Scan(None, seen)
    histories = keras_probe.history_classes() if classes else ()
    wanted = classes + histories
    # IPython's input history (In, _ih) and directory history hold strings: never models.
    history = getattr(shell, "history_manager", None)
    skip = {id(getattr(history, "input_hist_parsed", None)), id(getattr(history, "input_hist_raw", None)),
            id(shell.user_ns.get("_dh"))}
    found: set[int] = set()
    refs: dict[int, Any] = {}
    budget = _MODEL_SCAN_LIMIT

    def keep(model: Any) -> None:
        found.add(id(model))
        if id(model) not in refs:
            try:
                refs[id(model)] = weakref.ref(model)
            except TypeError:  # a model class without weak references: its run is told by counts only
                pass
    # One issubclass per type, not one isinstance per value (Keras' classes make isinstance slow).
    kinds: dict[type, bool] = dict.fromkeys(_PLAIN_TYPES, False)

    def note(value: Any) -> None:
        seen.add(id(value))
        if not wanted:
            return
        kind = type(value)
        hit = kinds.get(kind)
        if hit is None:
            hit = kinds[kind] = issubclass(kind, wanted)
        if not hit:
            return
        if isinstance(value, classes):
            keep(value)
        else:  # a History: its model
            model = getattr(value, "model", None)
            if isinstance(model, classes):
                seen.add(id(model))
                keep(model)

    lengths: dict[str, int] = {}

    for name, value in list(shell.user_ns.items()):
        budget -= 1
        if budget <= 0:
            break
        if type(value) in _CONTAINERS:
            seen.add(id(value))
            if id(value) in skip:
                continue
            skip.add(id(value))  # Out and _oh are one dict: look once
            if not name.startswith("_"):  # Out, not _oh; the user's own _private lists are rare
                lengths[name] = len(value)
            items = value.values() if type(value) is dict else value
            if len(items) > budget:
                continue  # a big container is data, not models: its length says so, skip it
            if type(value) in (list, tuple) and value and (
                    type(value[0]) in _PLAIN_TYPES and type(value[-1]) in _PLAIN_TYPES):
                continue  # numbers or strings at both ends: data (a list of models is one kind)
            budget -= len(items)
            for item in list(items):
                note(item)
        else:
            note(value)
    return _Scan(found if classes else None, seen, lengths, refs)


def _tf1_graph(value: Any) -> Any:
    """The TF1 graph a name holds (a Graph, a Session's graph, or one an item or attribute holds)."""
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except Exception:  # noqa: BLE001 - no __dict__, or one that raises
        attributes = {}
    attributes = attributes if type(attributes) is dict and not isinstance(value, type) else {}
    for item in [value, *(value if type(value) in (list, tuple) else ()), *attributes.values()]:
        if _is_tf1(item):
            return item if type(item).__name__ == "Graph" else getattr(item, "graph", None)
    return None


def _tf1_holders(shell) -> list[str]:
    """The user's names that hold a TensorFlow 1 ``Session`` or ``Graph`` (directly, in a container,
    or as an attribute of an object of theirs): such a cell is freed by closing and dropping them,
    and cannot run isolated (a Graph does not pickle). Read only when a cell is flagged: it looks
    into every object's attributes (about 0.7 ms in a 600-name session).

    Example:
        >>> _tf1_holders(None)
        []
    """
    if shell is None or "tensorflow" not in sys.modules:
        return []
    return [name for name, value in list(shell.user_ns.items())[:_MODEL_SCAN_LIMIT]
            if not name.startswith("_") and _holds_tf1(value)]


#: TensorFlow 1's graph-mode objects, by class name (``tf.compat.v1.Session`` and friends).
_TF1_CLASSES = frozenset({"Session", "InteractiveSession", "Graph"})


def _is_tf1(value: Any) -> bool:
    """A TF1 Session or Graph with ops in it. An eager notebook's objects hold the global default Graph
    too (a ``tf.data`` dataset keeps it as ``_graph``), empty: no graph-mode story without ops."""
    kind = type(value)
    if not (kind.__name__ in _TF1_CLASSES and (kind.__module__ or "").startswith("tensorflow")):
        return False
    graph = value if kind.__name__ == "Graph" else getattr(value, "graph", None)
    ops = graph_ops(graph)
    return isinstance(ops, int) and ops > 0


def _holds_tf1(value: Any) -> bool:
    """``value`` is a TF1 Session or Graph with ops, or holds one one level down (an item, or an
    attribute of a user object such as ``tc.sess``; never inside TensorFlow's own objects). Judged by
    class name and module: TF is never imported."""
    if _is_tf1(value):
        return True
    try:
        if type(value) in (list, tuple, set, frozenset) and len(value) <= 100:
            return any(_is_tf1(item) for item in value)
        if type(value) is dict and len(value) <= 100:
            return any(_is_tf1(item) for item in value.values())
        if (type(value).__module__ or "").split(".", 1)[0] in ("tensorflow", "keras", "tf_keras"):
            return False
        # Past the object's own __getattribute__: some warn on any attribute read (torch's reduce_op).
        attributes = object.__getattribute__(value, "__dict__")
        if type(attributes) is dict and not issubclass(type(value), type) and len(attributes) <= 100:
            return any(_is_tf1(item) for item in attributes.values())
    except Exception:  # noqa: BLE001 - an odd user object must not break the watch
        return False
    return False


def _model_count(shell) -> int | None:
    """How many Keras models :func:`_scan` finds; None before Keras is imported.

    Example:
        >>> _model_count(None) is None     # no shell, no Keras imported in a doctest process
        True
    """
    models = _scan(shell).models
    return None if models is None else len(models)


def read_figures(shell) -> dict[str, int | float | None]:
    """The figures a run's change is taken of; None where there is no number. Cheap: RSS, TF's
    allocator, NVML (only once a GPU framework is imported), the registry's size, the models.

    Example:
        >>> figures = read_figures(None)
        >>> sorted(figures), figures["rss_bytes"] > 0, figures["tf_in_use_bytes"]
        (['custom_gradient_entries', 'gpu_bytes', 'live_models', 'rss_bytes', 'tf_in_use_bytes'], True, None)
    """
    return _read(shell)[0]


def _read(shell) -> tuple[dict[str, int | float | None], _Scan | None, frozenset[str]]:
    """The figures, the scan they counted the models from, and the frameworks imported so far."""
    sample = memory_sample(gpu=gpu_framework_imported())
    gpu = gpu_device_values(sample["gpu"], "process_used_bytes")
    registry = guarded(tf_probe.custom_gradient_entries, "reading the registry") if tf_probe.module() else None
    scanned = guarded(lambda: _scan(shell), "counting models")
    scan = scanned if isinstance(scanned, _Scan) else None
    models = None if scan is None or scan.models is None else len(scan.models)
    figures: dict[str, int | float | None] = {
        "rss_bytes": _number(sample["rss_bytes"]),
        "tf_in_use_bytes": allocator_total(sample["tf"]),
        "gpu_bytes": sum(gpu.values()) if gpu else None,
        "custom_gradient_entries": _number(registry),
        "live_models": models,
    }
    return figures, scan, frozenset(name for name in _FRAMEWORKS if name in sys.modules)


# ---- what is kept per run and per cell ------------------------------------------------------------


@dataclass(frozen=True)
class CellRun:
    """One run of a cell: the change of each figure (None where it had no number before or after)."""

    execution_count: int | None
    ts: float
    rss_bytes: int | None
    tf_in_use_bytes: int | None
    gpu_bytes: int | None
    custom_gradient_entries: int | None
    live_models: int | None
    #: The cell's first recorded run: it may create what later runs reuse, so it never counts as a leak.
    first: bool = False
    #: The watch's count of runs of any cell: two runs of a cell with consecutive numbers ran alone.
    seq: int = 0
    #: The user's containers (top-level names) that gained items in this run.
    grown: tuple[str, ...] = ()

    @property
    def growth_bytes(self) -> int | None:
        """The larger of the RSS and TF-in-use changes: what decides whether the run grew.

        Example:
            >>> CellRun(1, 0.0, 3 * 2**20, 2**20, None, 0, 0).growth_bytes == 3 * 2**20
            True
        """
        values = [v for v in (self.rss_bytes, self.tf_in_use_bytes) if v is not None]
        return max(values) if values else None

    @property
    def grew(self) -> bool:
        """Whether this run left more memory behind than :data:`NOISE_BYTES` (never a first run)."""
        growth = self.growth_bytes
        return not self.first and growth is not None and growth > NOISE_BYTES

    def figures(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in _FIGURES}


def _ordinal(number: int) -> str:
    """``4th``, ``3rd``.

    Example:
        >>> _ordinal(4), _ordinal(3), _ordinal(2), _ordinal(11)
        ('4th', '3rd', '2nd', '11th')
    """
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


#: The rule in words, as every report and document gives it (a cell's first run never counts).
RULE = f"a cell's first run never counts, so a cell is flagged from its {_ordinal(MIN_RUNS + 1)} run on"


def _first_line(source: str, limit: int = 60) -> str:
    """The cell's first line that says something, cut to ``limit`` characters.

    Example:
        >>> _first_line("\\n\\n  leak.append(bytearray(2 * 2**20))  # 2 MiB\\nprint(1)")
        'leak.append(bytearray(2 * 2**20))  # 2 MiB'
    """
    for line in source.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[:limit - 1] + "…"
    return ""


def _mean(values: list[int | float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    return sum(numbers) / len(numbers) if numbers and len(numbers) == len(values) else None


class _Cell:
    """The runs of one cell (the last :data:`KEEP_RUNS`) and what they say."""

    def __init__(self, key: str, cell_id: str | None) -> None:
        self.key = key
        self.cell_id = cell_id
        self.first_line = ""
        self.runs_seen = 0
        self.runs: deque[CellRun] = deque(maxlen=KEEP_RUNS)
        #: What the last run left behind when it is worth naming on its own (:func:`one_run_sentence`).
        self.one_run: dict[str, Any] | None = None
        #: What that run made, by weak reference: named only while some of it is alive.
        self.one_run_left: _Left | None = None
        #: The Keras models this cell's runs made (the last 50 still alive), by weak reference: the
        #: leftovers a re-run names, never another cell's models.
        self.made_models: list[weakref.ref] = []
        #: What holds the growth, read when the cell was last flagged (:meth:`LeakWatch._evidence`).
        self.evidence: dict[str, Any] | None = None
        #: The notebook as the evidence and the one run's finding were read: the cleans run so far
        #: (None where a clean changes nothing the advice says) and the ids of the names they speak
        #: of (:meth:`LeakWatch._changes_since`).
        self.evidence_state: tuple[int | None, dict[str, int]] | None = None
        self.one_run_state: tuple[int | None, dict[str, int]] | None = None

    def add(self, run: CellRun, source: str, one_run: dict[str, Any] | None = None,
            left: _Left | None = None) -> None:
        self.runs.append(run)
        self.runs_seen += 1
        self.first_line = _first_line(source)
        self.one_run = one_run
        self.one_run_left = left

    def one_run_now(self) -> dict[str, Any] | None:
        """The last run's own finding, unless everything it made is gone since (``del a``): a freed
        allocation is not blamed. A run whose growth nothing of the notebook held stays named."""
        if self.one_run is None:
            return None
        left = self.one_run_left
        alive = left.alive() if left is not None else None
        made = left is not None and bool(left.refs or left.unreferenced)
        if made and alive == 0:
            return None
        return {**self.one_run, "left_alive": alive, "sentence": one_run_sentence(self.one_run)}

    @property
    def streak(self) -> list[CellRun]:
        """The last runs that each grew, oldest first (empty when the last run did not grow)."""
        streak: list[CellRun] = []
        for run in reversed(self.runs):
            if not run.grew:
                break
            streak.append(run)
        return streak[::-1]

    def summary(self) -> dict[str, Any]:
        """This cell as the report and the protocol's ``cell_growth`` message give it."""
        streak = self.streak
        last = self.runs[-1]
        per_run = None
        growth = None
        fix: str | None = None
        fix_text: str | None = None
        held_by: list[str] = []
        if streak:
            per_run = {name: _mean([getattr(run, name) for run in streak]) for name in _FIGURES}
            growth = _mean([run.growth_bytes for run in streak])
            fix, fix_text, held_by = advice(per_run, self.evidence if len(streak) >= MIN_RUNS else None)
        summary = {
            "key": self.key,
            "cell_id": self.cell_id,
            "execution_count": last.execution_count,
            "first_line": self.first_line,
            "runs": self.runs_seen,
            "streak": len(streak),
            "flagged": len(streak) >= MIN_RUNS,
            "growth_per_run_bytes": growth,
            "per_run": per_run,
            "last": last.figures(),
            "last_ts": last.ts,
            "fix": fix,
            "fix_text": fix_text,
            "held_by": held_by,
            "one_run": self.one_run_now(),
            "evidence": _wire_evidence(self.evidence) if streak and len(streak) >= MIN_RUNS else None,
        }
        # The flag's words travel with it: the sidebar shows them rather than wording them again.
        summary["sentence"] = growth_sentence(summary) if summary["flagged"] else None
        return summary

    def streak_ran_alone(self) -> bool:
        """Whether a growing run of the streak came right after the cell's own previous run (nothing
        else ran between): only then is the growth shown to be this cell's."""
        runs = list(self.runs)
        length = len(self.streak)
        return any(runs[i].seq == runs[i - 1].seq + 1 for i in range(max(len(runs) - length, 1), len(runs)))

    def streak_containers(self) -> list[str]:
        """The containers that gained items on every growing run of the streak."""
        streak = self.streak
        if not streak:
            return []
        common = set(streak[0].grown).intersection(*(run.grown for run in streak[1:]))
        return [name for name in streak[-1].grown if name in common]


def _measured_after(execution_count: int | None) -> str:
    """When the leak watch's walk was made, as its advice says it (it is read in a later cell).

    Example:
        >>> _measured_after(7), _measured_after(None)
        ('after cell [7] ran', 'after that run')
    """
    return f"after cell [{execution_count}] ran" if execution_count is not None else "after that run"


def _wire_evidence(evidence: dict[str, Any] | None) -> dict[str, Any] | None:
    """The evidence of a flag as it travels: what holds the growth, what each remedy frees, how measured."""
    if not evidence:
        return None
    keys = ("containers", "held_by", "models_held_by", "tf1", "graph_ops", "alone", "fresh_model", "proof",
            "registry_entries_freeable", "registry_entries")
    return {key: evidence.get(key) for key in keys}


def _code_names(names: list[str]) -> str:
    return " ".join(name for name in names if name.isidentifier())


def advice(per_run: dict[str, Any], evidence: dict[str, Any] | None) -> tuple[str, str, list[str]]:
    """The fix for a growing cell, chosen by what holds the memory: ``(code, sentence, holders)``.

    Every remedy that names a variable was proven when the cell was flagged (``evidence["proof"]``,
    :func:`kerasmagic.remedies.prove`): deleting those names frees a real share of the growth, and the
    sentence carries the figure. Where no name is proven the sentence says what was measured and
    offers a plain ``%clear_tf`` (it deletes no variable) with its own figure. ``%%fresh_model`` is
    advised only where TensorFlow's registry holds entries that a clean frees now (counted then);
    ``--isolate`` only where nothing in-process holds the growth and the cell grew when run alone. A
    TensorFlow 1 story is told only where a graph with ops exists.

    Example:
        >>> proof = {"named": {"command": "%clear_tf leak", "names": ["leak"]}}
        >>> code, text, held = advice({"live_models": 0, "custom_gradient_entries": 0, "tf_in_use_bytes": 0},
        ...                           {"containers": ["leak"], "held_by": [], "tf1": [], "alone": True,
        ...                            "models_held_by": [], "proof": proof,
        ...                            "remedy_text": "`%clear_tf leak` frees 6.00 MiB (measured now)."})
        >>> code, held
        ('delete', ['leak'])
        >>> text
        'Fix: `leak` gains items on every run and holds what grows: `%clear_tf leak` frees 6.00 MiB (measured now).'

    """
    evidence = evidence or {}
    proof = evidence.get("proof") or {}
    named = list((proof.get("named") or {}).get("names") or [])
    remedy = evidence.get("remedy_text") or ""
    measured = evidence.get("measured_text") or ""
    tf1 = evidence.get("tf1") or []
    if tf1 or evidence.get("tf1_source"):
        ops = evidence.get("graph_ops") or {}
        held = ", ".join(f"`{name}` ({ops[name]} ops)" if isinstance(ops.get(name), int) else f"`{name}`"
                         for name in tf1[:3])
        # No command to follow blindly: the graph is the notebook's working state (its later cells run
        # it), and its memory is not measured by the walk, only its ops are.
        return ("tf1_graph",
                "Fix: this cell adds ops to a TensorFlow 1 graph on every run"
                + (f" (held by {held})" if held else "") + ": build the graph once, before this cell, and feed "
                "changing values through placeholders (feed_dict). Its memory goes only with the graph: close "
                "the Session and drop the names that hold the graph when you no longer need them (a graph's "
                "memory is not measured here, only its ops). (--isolate cannot help: a tf.Graph cannot be sent "
                "to another process.)", tf1)
    containers = list(evidence.get("containers") or [])
    if (per_run.get("live_models") or 0) >= 0.5:
        if named:
            return ("keep_models",
                    f"Fix: each run keeps one more Keras model alive, held by {_held_by(named)}: keep only what "
                    f"you need from each (e.g. history.history). {remedy}", named)
        default = proof.get("default") or {}
        if default.get("models"):
            # The models are held by the output cache (an echoed History's .model) or the last exception.
            return ("keep_models",
                    "Fix: each run keeps one more Keras model alive, held by the output cache or the last "
                    "exception (an echoed History keeps its .model): end the cell with `;` so that nothing is "
                    f"echoed. {' '.join(filter(None, [measured, remedy]))}", [])
        return "keep_models", " ".join(filter(None, [FIX_TEXT["keep_models"], measured, remedy])), []
    fresh_cell = bool(evidence.get("fresh_model"))
    freeable = evidence.get("registry_entries_freeable") or 0
    registry_grew = (per_run.get("custom_gradient_entries") or 0) > 0
    if registry_grew and freeable and not fresh_cell:
        return ("fresh_model",
                f"Fix: start the cell with %%fresh_model: {freeable} of TensorFlow's "
                f"{evidence.get('registry_entries')} CustomGradient entries pin graphs of models the notebook no "
                f"longer keeps (counted {evidence.get('when') or 'now'}), and the clean %%fresh_model runs before "
                "each run frees them with "
                "their graphs; a plain `%clear_tf` frees them once (the graphs' memory is not measured here)."
                + (f" {remedy}" if named else ""), named)
    if named:
        grows = [name for name in named if name in containers]
        what = (f"{_held_by(grows)} {'gains items' if len(grows) == 1 else 'gain items'} on every run and "
                f"{'holds' if len(grows) == 1 else 'hold'} what grows" if grows else
                f"{_held_by(named)} {'holds' if len(named) == 1 else 'hold'} what grows")
        return "delete", f"Fix: {what}: {remedy}", named
    held_by = list(dict.fromkeys([*containers, *(evidence.get("held_by") or [])]))
    if held_by or (proof.get("default") or {}).get("retained_bytes"):
        return ("clear_tf",
                "Not proven to be any one variable: " + " ".join(filter(None, [measured, remedy])), [])
    if not evidence.get("alone", True):
        return ("run_alone",
                "Not shown to be this cell: it grew only with other cells run between its runs. Run it "
                "several times in a row: if it does not grow then, it is not a leak. " + remedy, [])
    return "isolate", FRESH_CELL_TEXT if fresh_cell else FIX_TEXT["isolate"], []


def _measure_again(when: str, changes: list[str]) -> str:
    """The words for advice the notebook has moved past (:meth:`LeakWatch._as_of_now`).

    Example:
        >>> _measure_again("after cell [6] ran", ["`models` was deleted"])[:72]
        'Measured after cell [6] ran; since then `models` was deleted, so its adv'
    """
    return (f"Measured {when}; since then {' and '.join(changes)}, so its advice is not repeated: run the "
            "cell again to measure it anew, or `%tf_mem --who` for what is held now.")


def _held(names: list[str]) -> str:
    return f" (held by {_held_by(names)})" if names else ""


def cell_label(execution_count: Any) -> str:
    """``cell [12]``, as the notebook numbers it.

    Example:
        >>> cell_label(12), cell_label(None)
        ('cell [12]', 'cell [?]')
    """
    return f"cell [{execution_count if isinstance(execution_count, int) else '?'}]"


def growth_sentence(summary: dict[str, Any]) -> str:
    """The flag's sentence: ``cell [12] grows 9.60 MiB per run (5 runs)``.

    Example:
        >>> growth_sentence({"execution_count": 12, "growth_per_run_bytes": 9.6 * 2**20, "streak": 5})
        'cell [12] grows 9.60 MiB per run (5 runs)'
    """
    return (f"{cell_label(summary['execution_count'])} grows {format_bytes(summary['growth_per_run_bytes'])} "
            f"per run ({summary['streak']} runs)")


def _held_by(names: list[str]) -> str:
    """```models```, ```a`, `b``` and ```a`, `b`, `c` and 2 more``: the holders a sentence names.

    Example:
        >>> _held_by(["models"]), _held_by(["a", "b", "c", "d", "e"])
        ('`models`', '`a`, `b`, `c` and 2 more')
    """
    shown = ", ".join(f"`{name}`" for name in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def one_run_sentence(one_run: dict[str, Any]) -> str:
    """What one run left behind, as the leak watch names it.

    Example:
        >>> one_run_sentence({"execution_count": 3, "growth_bytes": 201 * 2**20, "new_models": 6,
        ...                   "first": True, "held_by": ["models"]})
        'cell [3] grew +201 MiB and left 6 live models, held by `models`'
        >>> one_run_sentence({"execution_count": 7, "growth_bytes": 0, "new_models": 1, "first": False,
        ...                   "held_by": ["histories"]})
        'cell [7] left 1 more live model than its previous run, held by `histories`'
    """
    parts = []
    growth = one_run.get("growth_bytes")
    if isinstance(growth, (int, float)) and growth > NOISE_BYTES:
        parts.append(f"grew {format_bytes(growth, signed=True)}")
    models = one_run.get("new_models") or 0
    if models > 0:
        plural = "s" if models != 1 else ""
        parts.append(f"left {models} live model{plural}" if one_run.get("first")
                     else f"left {models} more live model{plural} than its previous run")
    sentence = f"{cell_label(one_run.get('execution_count'))} {' and '.join(parts) or 'ran'}"
    held_by = one_run.get("held_by") or []
    if held_by:
        return f"{sentence}, held by {_held_by(held_by)}"
    return f"{sentence}; none of your variables holds it (TensorFlow's pool, the C heap or a framework's cache)"


def _count_change(value: float) -> str:
    rounded = round(value, 1)
    return f"{rounded:+g}" if rounded else "±0"


def details(figures: dict[str, Any] | None) -> str:
    """What changed, in the sidebar's words; figures without a number are left out, counts
    only when they moved.

    Example:
        >>> details({"rss_bytes": 9.6 * 2**20, "tf_in_use_bytes": 0, "gpu_bytes": None,
        ...          "custom_gradient_entries": 2.0, "live_models": 0.0})
        'RSS +9.60 MiB · TF in use ±0 B · +2 CustomGradient entries'
    """
    if not figures:
        return ""
    parts = []
    for name, label in (("rss_bytes", "RSS"), ("tf_in_use_bytes", "TF in use"), ("gpu_bytes", "GPU (this kernel)")):
        if figures.get(name) is not None:
            parts.append(f"{label} {format_bytes(figures[name], signed=True)}")
    for name, label in (("custom_gradient_entries", "CustomGradient entries"), ("live_models", "Keras models")):
        value = figures.get(name)
        if value is not None and abs(value) >= 0.05:
            parts.append(f"{_count_change(value)} {label}")
    return " · ".join(parts)


# ---- the report --------------------------------------------------------------------------------------


class CellGrowthReport(Report):
    """What the leak watch knows: flagged cells first, then the most recently run ones.

    ``cells`` holds one summary dict per cell (``to_dict()["cells"]``: ``key``, ``cell_id``,
    ``execution_count``, ``first_line``, ``runs``, ``streak``, ``flagged``,
    ``growth_per_run_bytes``, ``per_run``, ``last``, ``fix``).

    Example:
        >>> report = CellGrowthReport([], watching=False, watched_cells=0)
        >>> report.flagged, report.to_dict()["watching"]
        ([], False)
    """

    def __init__(self, cells: list[dict[str, Any]], *, watching: bool, watched_cells: int,
                 session_runs: list[dict[str, Any]] | None = None) -> None:
        self.cells = cells
        #: What TensorFlow 1's Session.run calls of the last such cell showed (shown as text; the
        #: sidebar's ``cell_growth`` message does not carry it).
        self.session_runs = list(session_runs or [])
        self.watching = watching
        self.watched_cells = watched_cells
        self.ts = time.time()

    @property
    def flagged(self) -> list[dict[str, Any]]:
        """The flagged cells, the largest growth first."""
        return [cell for cell in self.cells if cell["flagged"]]

    @property
    def single_runs(self) -> list[dict[str, Any]]:
        """Cells whose last run left enough behind to be named on its own, latest first
        (:data:`ONE_RUN_BYTES`, :data:`ONE_RUN_MODELS`); a flagged cell is said in its flag."""
        return [cell for cell in self.cells if cell.get("one_run") and not cell["flagged"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "watching": self.watching,
            "threshold_bytes": NOISE_BYTES,
            "min_runs": MIN_RUNS,
            "watched_cells": self.watched_cells,
            "cells": [dict(cell) for cell in self.cells],
        }

    def _title(self) -> str:
        return "kerasmagic: memory growth per cell (leak watch)"

    def _sections(self) -> list[Section]:
        if not self.watching:
            off = Section("Leak watch")
            off.notes.append("not running: %load_ext kerasmagic starts it (and %unload_ext stops it)")
            return [off]
        flagged = Section(f"Cells that grew on each of their last {MIN_RUNS}+ re-runs (flagged from the "
                          f"{_ordinal(MIN_RUNS + 1)} run on)")
        for cell in self.flagged:
            flagged.add(cell_label(cell["execution_count"]),
                        f"{format_bytes(cell['growth_per_run_bytes'], signed=True)} / run",
                        f"{cell['streak']} runs in a row · per run: {details(cell['per_run'])}"
                        + (f" · {cell['first_line']}" if cell["first_line"] else ""))
            flagged.notes.append(f"{cell['sentence']}. {cell.get('fix_text') or FIX_TEXT.get(cell['fix'], '')}")
        if not flagged.rows:
            flagged.notes.append(
                f"none: no cell grew by more than {format_bytes(NOISE_BYTES)} on {MIN_RUNS} re-runs in a row "
                f"({RULE}; {self.watched_cells} cells watched)")
        single = Section("What one run left behind")
        for cell in self.single_runs:
            one_run = cell["one_run"]
            single.add(cell_label(one_run["execution_count"]),
                       format_bytes(one_run["growth_bytes"], signed=True),
                       f"{details(cell['last'])}" + (f" · {cell['first_line']}" if cell["first_line"] else ""))
            remedy = one_run.get("remedy_text") or ""
            single.notes.append(f"{one_run['sentence']}." + (f" {remedy}" if remedy else ""))
        recent = Section("Last run of the other recent cells")
        for cell in self.cells:
            if cell["flagged"] or cell.get("one_run"):
                continue
            recent.add(cell_label(cell["execution_count"]),
                       format_bytes((cell["last"] or {}).get("rss_bytes"), signed=True),
                       f"{details(cell['last'])} · {cell['runs']} run{'s' if cell['runs'] != 1 else ''}"
                       + (f" · {cell['first_line']}" if cell["first_line"] else ""))
        sections = [flagged, single, recent] if single.rows else [flagged, recent]
        if self.session_runs:
            runs = Section("TensorFlow 1: Session.run")
            runs.notes.extend(finding["text"] for finding in self.session_runs)
            sections.insert(1, runs)
        return sections


# ---- the watch -----------------------------------------------------------------------------------------


def _holder_root(where: str, kind: str) -> str | None:
    """The name a user acts on for one of the holder search's places: ``models[3]`` is ``models``,
    ``hist.model`` is ``hist``, ``Out[4]`` stays; IPython's copies of an output (``_4``, ``_``,
    ``user_ns_hidden``, the display hook) are said once, as its ``Out[n]``.

    Example:
        >>> _holder_root("models[3]", "variable"), _holder_root("hist.model", "history")
        ('models', 'hist')
        >>> _holder_root("Out[4]", "output_cache"), _holder_root("_4", "output_cache")
        ('Out[4]', None)
        >>> _holder_root("Out[5].model", "output_cache")
        'Out[5]'

    """
    if kind == "output_cache":
        # Out[4].model, Out[4][0]: the user's handle is the output, Out[4].
        if not where.startswith("Out["):
            return None
        return where[:where.index("]") + 1] if "]" in where else None
    if kind == "exception":
        return "the last exception"
    root = where.split("[", 1)[0].split(".", 1)[0]
    return root or None


def _starts_with_fresh_model(source: str) -> bool:
    r"""The cell runs in this process under ``%%fresh_model`` (not ``--isolate``, which runs elsewhere).

    Example:
        >>> _starts_with_fresh_model("%%fresh_model -q model\nmodel = make()"), _starts_with_fresh_model("x = 1")
        (True, False)
        >>> _starts_with_fresh_model("\n%%fresh_model --isolate\nx = 1")
        False
    """
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return first.split()[:1] == ["%%fresh_model"] and "--isolate" not in first.split()


def _uses_tf1(source: str) -> bool:
    """The cell's code calls TensorFlow 1's graph mode (``tf.compat.v1.Session``, ``placeholder``...);
    other ``tf.compat.v1`` calls (``logging.set_verbosity``) are not graph mode.

    Example:
        >>> _uses_tf1("sess = tf.compat.v1.Session()"), _uses_tf1("model.fit(x, y)")
        (True, False)
        >>> _uses_tf1("tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)")
        False
    """
    return any(word in source for word in ("Session(", "placeholder(", "disable_eager_execution", "disable_v2_behavior",
                                           "Graph().as_default", "get_default_graph("))


@dataclass
class _Left:
    """What a run left alive, as the holder search saw it after the run: who holds the objects it made,
    who holds the Keras models (all, and those older than the run), and weak references to what it made."""

    held_by: list[str] = field(default_factory=list)
    models_held_by: list[str] = field(default_factory=list)
    old_models_held_by: list[str] = field(default_factory=list)
    refs: list[weakref.ref] = field(default_factory=list)
    #: Objects the run made that take no weak reference (a bytearray): their end cannot be seen.
    unreferenced: int = 0
    ids: frozenset[int] = frozenset()

    def alive(self) -> int | None:
        """How many of the objects the run made are alive now (None: some cannot be told)."""
        if self.unreferenced:
            return None
        return sum(1 for ref in self.refs if ref() is not None)


def _holders(shell, before: _Scan | None, after: _Scan | None, search: HolderSearch | None = None,
             previous: frozenset[int] = frozenset()) -> _Left:
    """Who holds what the run created, and who holds the Keras models alive now: root names,
    largest object first, of the holder search's places (models and large arrays). ``previous``: the
    ids of the models the cell's previous run made, still alive: the older models a re-run leaves."""
    left = _Left()
    if shell is None:
        return left
    heavy = search.heavy if search is not None else collect_heavy(shell)
    known = before.seen if before is not None else set()
    old_models = (before.models or set()) if before is not None else set()
    new_models = (after.models or set()) - old_models if after is not None and before is not None else set()
    ids = set()
    for item in heavy:
        roots = [root for root in (_holder_root(h.where, h.kind) for h in item.holders) if root is not None]
        if item.info.get("kind") == "model":
            left.models_held_by.extend(root for root in roots if root not in left.models_held_by)
            if id(item.obj) in (previous or old_models):
                left.old_models_held_by.extend(root for root in roots if root not in left.old_models_held_by)
        if id(item.obj) in known and id(item.obj) not in new_models:
            continue
        ids.add(id(item.obj))
        try:
            left.refs.append(weakref.ref(item.obj))
        except TypeError:  # bytes, bytearray: no weak reference
            left.unreferenced += 1
        left.held_by.extend(root for root in roots if root not in left.held_by)
    left.ids = frozenset(ids)
    return left


def _cell_id(shell, info: Any) -> str | None:
    """The frontend's cell id: IPython's ``ExecutionInfo.cell_id`` (ipykernel passes the execute
    request's ``metadata["cellId"]``), else that metadata read from the kernel's parent message."""
    cell_id = getattr(info, "cell_id", None)
    if isinstance(cell_id, str) and cell_id:
        return cell_id
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent()
    except Exception:  # noqa: BLE001 - an older or odd kernel: fall back to the source hash
        return None
    metadata = parent.get("metadata") if isinstance(parent, dict) else None
    cell_id = metadata.get("cellId") if isinstance(metadata, dict) else None
    return cell_id if isinstance(cell_id, str) and cell_id else None


def _source_key(source: str) -> str:
    return "sha1:" + hashlib.sha1(source.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:16]


class LeakWatch:
    """Records every cell's growth on ``shell`` through IPython's ``pre_run_cell`` / ``post_run_cell``.

    Example:
        >>> from IPython.core.interactiveshell import InteractiveShell
        >>> shell = InteractiveShell.instance()          # doctest: +SKIP
        >>> watch = LeakWatch(shell); watch.start()      # doctest: +SKIP
        >>> for _ in range(4):                           # doctest: +SKIP
        ...     shell.run_cell("leak.append(bytearray(2 * 2**20))", store_history=True)
        >>> print(watch.report())                        # doctest: +SKIP
    """

    def __init__(self, shell) -> None:
        self.shell = shell
        self._cells: OrderedDict[str, _Cell] = OrderedDict()
        self._pending: tuple[str, str | None, str, tuple] | None = None
        self._started = False
        self._seq = 0
        #: Cleans (``%clear_tf``, ``%%fresh_model``, their API) seen since the watch started: advice
        #: measured before the last one is not repeated as if it still held.
        self._cleans = 0
        self._unsubscribe: Any = None
        #: What recording a run cost the kernel, pre and post together, for the last run.
        self.last_cost_s = 0.0

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        if not self._started:
            self.shell.events.register("pre_run_cell", self.pre_run_cell)
            self.shell.events.register("post_run_cell", self.post_run_cell)
            self._unsubscribe = events.subscribe(self._on_event)
            self._started = True

    def _on_event(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "clear_tf":
            self._cleans += 1

    def stop(self) -> None:
        if self._started:
            for event, callback in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
                try:
                    self.shell.events.unregister(event, callback)
                except ValueError:
                    pass  # someone unregistered it already
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
            self._started = False
        self._pending = None

    # ---- IPython events ---------------------------------------------------------------------------
    def pre_run_cell(self, info=None) -> None:
        """Read the figures before the cell; never raises into the user's cell."""
        started = time.perf_counter()
        try:
            source = getattr(info, "raw_cell", None) or ""
            cell_id = _cell_id(self.shell, info)
            key = cell_id or _source_key(source)
            self._pending = (key, cell_id, source, _read(self.shell))
        except Exception:  # the watch must never break a cell (logged at debug level)
            logger.debug("kerasmagic.leak_watch: reading the figures before a cell failed", exc_info=True)
            self._pending = None
        self.last_cost_s = time.perf_counter() - started

    def post_run_cell(self, result=None) -> None:
        """Record the run begun in :meth:`pre_run_cell`; a second call for the same run does nothing
        (the live channel calls it too, so that its message includes the run whatever the hook order)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return  # no pre_run_cell seen (the cell that ran %load_ext), or recorded already
        started = time.perf_counter()
        try:
            self._record(pending, result)
        except Exception:  # the watch must never break a cell (logged at debug level)
            logger.debug("kerasmagic.leak_watch: recording a cell's run failed", exc_info=True)
        self.last_cost_s += time.perf_counter() - started

    def _record(self, pending: tuple[str, str | None, str, tuple], result: Any) -> None:
        key, cell_id, source, (before, scan_before, frameworks_before) = pending
        after, scan_after, frameworks_after = _read(self.shell)
        changes = {name: (after[name] - before[name] if after[name] is not None and before[name] is not None
                          else None) for name in _FIGURES}
        count = getattr(result, "execution_count", None)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell(key, cell_id)
        else:
            self._cells.move_to_end(key)
        self._seq += 1
        grown: tuple[str, ...] = ()
        if scan_before is not None and scan_after is not None:
            grown = tuple(name for name, length in scan_after.lengths.items()
                          if length > scan_before.lengths.get(name, length))
        run = CellRun(execution_count=count if isinstance(count, int) else None, ts=time.time(),
                      first=cell.runs_seen == 0, seq=self._seq, grown=grown, **changes)
        previous = frozenset(id(model) for model in (ref() for ref in cell.made_models) if model is not None)
        one_run, left = self._one_run(run, scan_before, scan_after, imported=frameworks_after - frameworks_before,
                                      previous=previous)
        cell.add(run, source, one_run, left)
        if one_run is not None:
            proven = (one_run["proof"].get("named") or {}).get("names") or []
            cell.one_run_state = self._state([*one_run["held_by"], *proven], by_clean=not proven)
        if scan_before is not None and scan_after is not None and scan_after.models is not None:
            made = scan_after.models - (scan_before.models or set())
            alive = [ref for ref in cell.made_models if ref() is not None]
            cell.made_models = (alive + [ref for key, ref in scan_after.model_refs.items() if key in made])[-50:]
        if len(cell.streak) >= MIN_RUNS:
            # Flagged by this run: find out, once per flagged run, what holds the growth.
            cell.evidence = self._evidence(cell, source, scan_before, scan_after, previous)
            # The names the advice speaks of, not every holder the search saw (a `model` another cell
            # rebinds must not make this advice stale).
            advised = cell.summary()
            cell.evidence_state = self._state(advised["held_by"], by_clean=not advised["held_by"])
        while len(self._cells) > KEEP_CELLS:
            self._cells.popitem(last=False)

    def _evidence(self, cell: _Cell, source: str, before: _Scan | None, after: _Scan | None,
                  previous: frozenset[int] = frozenset()) -> dict[str, Any]:
        """What holds a flagged cell's growth, and what each remedy would free, measured now: the
        advice (:func:`advice`) is chosen from this."""
        search = HolderSearch(self.shell)  # one search for both: each leaves heap behind in the kernel
        left = _holders(self.shell, before, after, search, previous)
        streak = cell.streak
        explained = sum(run.growth_bytes or 0 for run in streak)
        models_grew = (_mean([run.live_models for run in streak]) or 0) >= 0.5
        containers = cell.streak_containers()
        # The models this cell's earlier runs made are its leftovers: their holders, not every model's
        # (a list of models another cell filled is a bystander here).
        candidates = [*containers, *left.held_by, *(left.old_models_held_by if models_grew and previous else [])]
        walk = RetainedWalk(self.shell, search=search)
        del search
        proof = prove(self.shell, explained, candidates, models_left=models_grew, walk=walk, current=left.ids)
        proof.when = _measured_after(cell.runs[-1].execution_count)  # read later, in another cell
        entries = guarded(lambda: entries_a_clean_frees(walk.kept_variable_ids()), "reading the registry")
        tf1 = _tf1_holders(self.shell)
        default_ops = tf_probe.default_graph_op_count() if tf_probe.module() is not None else None
        return {
            "containers": containers,
            "held_by": left.held_by,
            "models_held_by": left.models_held_by,
            "tf1": tf1,
            "tf1_source": _uses_tf1(source) and isinstance(default_ops, int) and default_ops > 0,
            "fresh_model": _starts_with_fresh_model(source),
            "alone": cell.streak_ran_alone(),
            "proof": proof.to_dict(),
            "remedy_text": proof.sentence(),
            "measured_text": proof.measured(),
            "registry_entries_freeable": entries[0] if isinstance(entries, tuple) else None,
            "registry_entries": entries[1] if isinstance(entries, tuple) else None,
            "graph_ops": {name: graph_ops(_tf1_graph(self.shell.user_ns.get(name))) for name in tf1},
            "when": proof.when,
        }

    def _one_run(self, run: CellRun, before: _Scan | None, after: _Scan | None, imported: frozenset[str],
                 previous: frozenset[int] = frozenset()) -> tuple[dict[str, Any] | None, _Left | None]:
        """What this run left that is worth naming on its own, with who holds it and what frees it
        (measured now); None if nothing. Also what it made, by weak reference: a run whose objects
        are all gone by the time the report is read is not named (:meth:`_Cell.summary`).

        Only such a run pays for the holder search (the bounded look at the session's references
        that ``%tf_mem --who`` makes), so a plain cell still costs a fraction of a millisecond.
        """
        growth = run.growth_bytes
        models = run.live_models or 0
        heavy_growth = growth is not None and growth > ONE_RUN_BYTES and not imported
        many_models = models >= (ONE_RUN_MODELS if run.first else 1)
        if not (heavy_growth or many_models):
            return None, None
        search = HolderSearch(self.shell)
        left = _holders(self.shell, before, after, search, previous)
        # A re-run that leaves one more model: the extra one is an older run's (the cell's own new model
        # replaced it in the cell's variables), so it is named by who holds the older models.
        rerun_models = many_models and not run.first
        held_by = left.old_models_held_by if rerun_models else left.held_by
        proof = prove(self.shell, growth or 0, held_by, models_left=many_models,
                      current=left.ids if rerun_models else frozenset(),
                      walk=RetainedWalk(self.shell, search=search))
        proof.when = _measured_after(run.execution_count)  # read later, in another cell
        del search
        return {
            "execution_count": run.execution_count,
            "first": run.first,
            "growth_bytes": growth,
            "new_models": max(models, 0),
            "held_by": held_by,
            "imported": sorted(imported),
            "proof": proof.to_dict(),
            "remedy_text": proof.sentence(),
            "measured_text": proof.measured(),
        }, left

    # ---- reading -----------------------------------------------------------------------------------
    @property
    def watched_cells(self) -> int:
        return len(self._cells)

    def summaries(self, recent: int | None = 10) -> list[dict[str, Any]]:
        """Flagged cells (largest growth first), then cells whose last run is named on its own
        (``one_run``, latest first), then up to ``recent`` other cells, latest run first."""
        summaries = [self._as_of_now(cell, cell.summary()) for cell in reversed(self._cells.values())]
        flagged = sorted((s for s in summaries if s["flagged"]), key=lambda s: -(s["growth_per_run_bytes"] or 0))
        named = [s for s in summaries if not s["flagged"] and s["one_run"]]
        others = [s for s in summaries if not s["flagged"] and not s["one_run"]]
        return flagged + named + (others if recent is None else others[:recent])

    def _state(self, names: list[str], *, by_clean: bool) -> tuple[int | None, dict[str, int]]:
        """``by_clean``: the advice quotes what a plain clean frees (the output cache's, the
        registry's entries), which the next clean frees and makes old; advice that names variables
        stays true through a clean that leaves them."""
        namespace = self.shell.user_ns
        return self._cleans if by_clean else None, {name: id(namespace[name]) for name in dict.fromkeys(names)
                                                    if name.isidentifier() and name in namespace}

    def _changes_since(self, state: tuple[int | None, dict[str, int]] | None) -> list[str]:
        """What changed since advice was measured that makes it stale: a clean ran (where the advice
        quotes what a clean frees), a name it speaks of was deleted or bound to something else."""
        if state is None:
            return []
        cleans, ids = state
        namespace = self.shell.user_ns
        changes = ["a clean (`%clear_tf` or `%%fresh_model`) ran"] if cleans is not None and self._cleans != cleans \
            else []
        gone = [name for name in ids if name not in namespace]
        rebound = [name for name, ident in ids.items() if name in namespace and id(namespace[name]) != ident]
        if gone:
            changes.append(f"{_held_by(gone)} {'was' if len(gone) == 1 else 'were'} deleted")
        if rebound:
            changes.append(f"{_held_by(rebound)} {'was' if len(rebound) == 1 else 'were'} bound to something else")
        return changes

    def _as_of_now(self, cell: _Cell, summary: dict[str, Any]) -> dict[str, Any]:
        """A summary whose advice is not repeated where the notebook changed since it was measured
        (it was followed, or something else freed or rebound what it names): a user who ran
        `%clear_tf models` was told again that `%clear_tf models` frees 63.9 MiB, and the command
        then failed, `models` being gone."""
        if summary["flagged"] and summary["fix"]:
            changes = self._changes_since(cell.evidence_state)
            if changes:
                when = (cell.evidence or {}).get("when") or "then"
                summary["fix"] = "measure_again"
                summary["fix_text"] = _measure_again(when, changes)
                summary["held_by"] = []
                summary["evidence"] = None  # what it measured then is not shown as if it held
        one_run = summary.get("one_run")
        if one_run:
            state = cell.one_run_state
            changes = self._changes_since(state)
            if changes and state is not None:
                namespace = self.shell.user_ns
                cleaned = state[0] is not None and state[0] != self._cleans
                # A holder still there and still the same object is named; Out[n] only if no clean ran.
                held = [name for name in one_run.get("held_by") or []
                        if (name in state[1] and name in namespace and id(namespace[name]) == state[1][name])
                        or (not name.isidentifier() and not cleaned)]
                # Its proof is left out (optional on the wire): what it measured then is not shown as if it held.
                one_run = {**{key: value for key, value in one_run.items() if key != "proof"}, "held_by": held,
                           "remedy_text": _measure_again(_measured_after(one_run.get("execution_count")), changes),
                           "measured_text": ""}
                one_run["sentence"] = one_run_sentence(one_run)
                summary["one_run"] = one_run
        return summary

    def report(self, recent: int | None = 10) -> CellGrowthReport:
        return CellGrowthReport(self.summaries(recent), watching=self._started, watched_cells=len(self._cells),
                                session_runs=session_runs.findings())

    def clear(self) -> None:
        """Forget every cell's runs."""
        self._cells.clear()


# Kept across importlib.reload of this module: a fresh None would forget the running one, whose
# hooks stay registered, and the next load would register a second set (issue 33).
_watch: LeakWatch | None = globals().get("_watch")


def active_watch() -> LeakWatch | None:
    """The leak watch ``%load_ext kerasmagic`` started, or None.

    Example:
        >>> active_watch() is None      # nothing loaded in a plain Python process
        True
    """
    return _watch


def start(shell) -> LeakWatch:
    """Start watching ``shell``'s cells (what ``%load_ext kerasmagic`` does); idempotent."""
    global _watch
    if _watch is not None and _watch.shell is shell and _watch.started:
        return _watch
    stop()
    _watch = LeakWatch(shell)
    _watch.start()
    return _watch


def stop() -> None:
    """Stop the watch and forget what it recorded (what ``%unload_ext kerasmagic`` does)."""
    global _watch
    watch, _watch = _watch, None
    if watch is not None:
        watch.stop()


def cell_growth(recent: int | None = 10) -> CellGrowthReport:
    """Which cells grow memory each time they run (``%tf_mem --cells``).

    After ``%load_ext kerasmagic`` every cell run is recorded (the change in RSS, TensorFlow
    in use, this process's GPU memory, CustomGradient registry entries and Keras models in
    your variables). A cell whose RSS or TensorFlow in use grew by more than 1 MiB on each of
    its last 3 or more re-runs is flagged, with the fix (its first run never counts: a cell is
    flagged from its 4th run on). A single run that left more than 100 MiB or several new
    models behind is named at once, with who holds it. ``recent`` other cells (the most
    recently run; None: all) are listed after the flagged ones.

    Example:
        >>> import kerasmagic
        >>> report = kerasmagic.cell_growth()
        >>> report.flagged, report.watching    # in a process where %load_ext kerasmagic never ran
        ([], False)
        >>> print(report)                        # doctest: +SKIP
        kerasmagic: memory growth per cell (leak watch)
        Cells that grew on each of their last 3+ re-runs (flagged from the 4th run on)
          cell [12]  +9.60 MiB / run  5 runs in a row · per run: RSS +9.60 MiB · +1 models · leak.append(...)
          · cell [12] grows 9.60 MiB per run (5 runs). Fix: ...
    """
    watch = _watch
    if watch is None:
        return CellGrowthReport([], watching=False, watched_cells=0)
    return watch.report(recent)

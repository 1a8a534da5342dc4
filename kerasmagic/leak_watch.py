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
:data:`NOISE_BYTES` on each of its last :data:`MIN_RUNS` or more runs is *flagged*:
"cell [12] grows 9.60 MiB per run (5 runs)", with the fix. The watch keeps the last
:data:`KEEP_RUNS` runs of the last :data:`KEEP_CELLS` cells.

``%tf_mem --cells`` and :func:`cell_growth` show it as text (HTML in a notebook); the
sidebar's "Leak watch" section gets it as the protocol's ``cell_growth`` message.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from .probes import keras as keras_probe
from .probes import tensorflow as tf_probe
from .probes.availability import guarded
from .probes.sample import allocator_total, gpu_device_values, gpu_framework_imported, memory_sample
from .tables import Report, Section, format_bytes

__all__ = ['FIX_TEXT', 'KEEP_CELLS', 'KEEP_RUNS', 'MIN_RUNS', 'NOISE_BYTES', 'CellGrowthReport', 'CellRun',
           'LeakWatch', 'active_watch', 'cell_growth', 'growth_sentence', 'start', 'stop']

logger = logging.getLogger(__name__)

#: A run "grew" when RSS or TensorFlow in use rose by more than this (1 MiB): below it is noise.
NOISE_BYTES = 2**20
#: A cell is flagged when it grew on each of its last this-many runs (or more).
MIN_RUNS = 3
#: Runs kept per cell, and cells kept (the least recently run cell is forgotten first).
KEEP_RUNS = 20
KEEP_CELLS = 200
#: At most this many references are looked at when counting the models in the user's variables.
_MODEL_SCAN_LIMIT = 2000

#: What to do about a flagged cell, by the protocol's ``fix`` code.
FIX_TEXT = {
    # Models, CustomGradient entries or TF in use grew: what the clean before the cell frees.
    "fresh_model": "Fix: start the cell with %%fresh_model, which frees the previous run's models and dead "
                   "TensorFlow graphs before it runs.",
    # Each run leaves one more model reachable from the user's variables (a list of models or Histories).
    "keep_models": "Fix: each run keeps one more Keras model alive (a list of models or of History objects "
                   "holds them): keep only what you need from each, e.g. history.history, then %%fresh_model "
                   "frees the rest.",
    # Only RSS grew: TF's pool, the C heap, or what the cell keeps itself.
    "isolate": "Fix: %%fresh_model --isolate runs the cell in a new process, the only way to get this "
               "memory back (unless the cell keeps it on purpose, e.g. a list it appends to).",
}

#: The figures recorded per run, as they are named on the wire.
_FIGURES = ("rss_bytes", "tf_in_use_bytes", "gpu_bytes", "custom_gradient_entries", "live_models")

#: Containers the model count looks one level into, and types that never are a model.
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
_PLAIN_TYPES = (str, int, float, bool, bytes, complex, type(None))


# ---- reading the figures -------------------------------------------------------------------------


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _model_count(shell) -> int | None:
    """Keras models in the user's variables: top-level names, one level inside lists, tuples,
    dicts and sets (``Out`` included), and a ``History``'s model. A bounded look at references,
    never a heap walk; None before Keras is imported.

    Example:
        >>> _model_count(None) is None     # no Keras imported in a doctest process
        True
    """
    classes = keras_probe.model_classes()
    if not classes or shell is None:
        return None
    histories = keras_probe.history_classes()
    wanted = classes + histories
    # IPython's input history (In, _ih) and directory history hold strings: never models.
    history = getattr(shell, "history_manager", None)
    skip = {id(getattr(history, "input_hist_parsed", None)), id(getattr(history, "input_hist_raw", None)),
            id(shell.user_ns.get("_dh"))}
    found: set[int] = set()
    budget = _MODEL_SCAN_LIMIT
    # One issubclass per type, not one isinstance per value (Keras' classes make isinstance slow).
    kinds: dict[type, bool] = dict.fromkeys(_PLAIN_TYPES, False)

    def note(value: Any) -> None:
        kind = type(value)
        hit = kinds.get(kind)
        if hit is None:
            hit = kinds[kind] = issubclass(kind, wanted)
        if not hit:
            return
        if isinstance(value, classes):
            found.add(id(value))
        else:  # a History: its model
            model = getattr(value, "model", None)
            if isinstance(model, classes):
                found.add(id(model))

    for value in list(shell.user_ns.values()):
        budget -= 1
        if budget <= 0:
            break
        if type(value) in _CONTAINERS:
            if id(value) in skip:
                continue
            skip.add(id(value))  # Out and _oh are one dict: look once
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
    return len(found)


def read_figures(shell) -> dict[str, int | float | None]:
    """The figures a run's change is taken of; None where there is no number. Cheap: RSS, TF's
    allocator, NVML (only once a GPU framework is imported), the registry's size, the models.

    Example:
        >>> figures = read_figures(None)
        >>> sorted(figures), figures["rss_bytes"] > 0, figures["tf_in_use_bytes"]
        (['custom_gradient_entries', 'gpu_bytes', 'live_models', 'rss_bytes', 'tf_in_use_bytes'], True, None)
    """
    sample = memory_sample(gpu=gpu_framework_imported())
    gpu = gpu_device_values(sample["gpu"], "process_used_bytes")
    registry = guarded(tf_probe.custom_gradient_entries, "reading the registry") if tf_probe.module() else None
    models = guarded(lambda: _model_count(shell), "counting models")
    return {
        "rss_bytes": _number(sample["rss_bytes"]),
        "tf_in_use_bytes": allocator_total(sample["tf"]),
        "gpu_bytes": sum(gpu.values()) if gpu else None,
        "custom_gradient_entries": _number(registry),
        "live_models": _number(models),
    }


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

    def add(self, run: CellRun, source: str) -> None:
        self.runs.append(run)
        self.runs_seen += 1
        self.first_line = _first_line(source)

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
        fix = None
        if streak:
            per_run = {name: _mean([getattr(run, name) for run in streak]) for name in _FIGURES}
            growth = _mean([run.growth_bytes for run in streak])
            if (per_run.get("live_models") or 0) >= 0.5:
                fix = "keep_models"
            elif ((per_run.get("custom_gradient_entries") or 0) > 0
                  or (per_run.get("tf_in_use_bytes") or 0) > NOISE_BYTES):
                fix = "fresh_model"
            else:
                fix = "isolate"
        return {
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
        }


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

    def __init__(self, cells: list[dict[str, Any]], *, watching: bool, watched_cells: int) -> None:
        self.cells = cells
        self.watching = watching
        self.watched_cells = watched_cells
        self.ts = time.time()

    @property
    def flagged(self) -> list[dict[str, Any]]:
        """The flagged cells, the largest growth first."""
        return [cell for cell in self.cells if cell["flagged"]]

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
        flagged = Section(f"Cells that grew on each of their last {MIN_RUNS}+ runs")
        for cell in self.flagged:
            flagged.add(cell_label(cell["execution_count"]),
                        f"{format_bytes(cell['growth_per_run_bytes'], signed=True)} / run",
                        f"{cell['streak']} runs in a row · per run: {details(cell['per_run'])}"
                        + (f" · {cell['first_line']}" if cell["first_line"] else ""))
            flagged.notes.append(f"{growth_sentence(cell)}. {FIX_TEXT[cell['fix']]}")
        if not flagged.rows:
            flagged.notes.append(
                f"none: no cell grew by more than {format_bytes(NOISE_BYTES)} on each of its last {MIN_RUNS} runs "
                f"({self.watched_cells} cells watched)")
        recent = Section("Last run of the other recent cells")
        for cell in self.cells:
            if cell["flagged"]:
                continue
            recent.add(cell_label(cell["execution_count"]),
                       format_bytes((cell["last"] or {}).get("rss_bytes"), signed=True),
                       f"{details(cell['last'])} · {cell['runs']} run{'s' if cell['runs'] != 1 else ''}"
                       + (f" · {cell['first_line']}" if cell["first_line"] else ""))
        return [flagged, recent]


# ---- the watch -----------------------------------------------------------------------------------------


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
        self._pending: tuple[str, str | None, str, dict[str, Any]] | None = None
        self._started = False
        #: What recording a run cost the kernel, pre and post together, for the last run.
        self.last_cost_s = 0.0

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        if not self._started:
            self.shell.events.register("pre_run_cell", self.pre_run_cell)
            self.shell.events.register("post_run_cell", self.post_run_cell)
            self._started = True

    def stop(self) -> None:
        if self._started:
            for event, callback in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
                try:
                    self.shell.events.unregister(event, callback)
                except ValueError:
                    pass  # someone unregistered it already
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
            self._pending = (key, cell_id, source, read_figures(self.shell))
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

    def _record(self, pending: tuple[str, str | None, str, dict[str, Any]], result: Any) -> None:
        key, cell_id, source, before = pending
        after = read_figures(self.shell)
        changes = {name: (after[name] - before[name] if after[name] is not None and before[name] is not None
                          else None) for name in _FIGURES}
        count = getattr(result, "execution_count", None)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell(key, cell_id)
        else:
            self._cells.move_to_end(key)
        run = CellRun(execution_count=count if isinstance(count, int) else None, ts=time.time(),
                      first=cell.runs_seen == 0, **changes)
        cell.add(run, source)
        while len(self._cells) > KEEP_CELLS:
            self._cells.popitem(last=False)

    # ---- reading -----------------------------------------------------------------------------------
    @property
    def watched_cells(self) -> int:
        return len(self._cells)

    def summaries(self, recent: int | None = 10) -> list[dict[str, Any]]:
        """Flagged cells (largest growth first), then up to ``recent`` other cells, latest run first."""
        summaries = [cell.summary() for cell in reversed(self._cells.values())]
        flagged = sorted((s for s in summaries if s["flagged"]), key=lambda s: -(s["growth_per_run_bytes"] or 0))
        others = [s for s in summaries if not s["flagged"]]
        return flagged + (others if recent is None else others[:recent])

    def report(self, recent: int | None = 10) -> CellGrowthReport:
        return CellGrowthReport(self.summaries(recent), watching=self._started, watched_cells=len(self._cells))

    def clear(self) -> None:
        """Forget every cell's runs."""
        self._cells.clear()


_watch: LeakWatch | None = None


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
    its last 3 or more runs is flagged, with the fix. ``recent`` other cells (the most
    recently run; None: all) are listed after the flagged ones.

    Example:
        >>> import kerasmagic
        >>> report = kerasmagic.cell_growth()
        >>> report.flagged, report.watching    # in a process where %load_ext kerasmagic never ran
        ([], False)
        >>> print(report)                        # doctest: +SKIP
        kerasmagic: memory growth per cell (leak watch)
        Cells that grew on each of their last 3+ runs
          cell [12]  +9.60 MiB / run  5 runs in a row · per run: RSS +9.60 MiB · +1 models · leak.append(...)
          · cell [12] grows 9.60 MiB per run (5 runs). Fix: ...
    """
    watch = _watch
    if watch is None:
        return CellGrowthReport([], watching=False, watched_cells=0)
    return watch.report(recent)

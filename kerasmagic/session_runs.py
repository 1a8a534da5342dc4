"""TensorFlow 1's ``Session.run``, timed per cell while kerasmagic is loaded.

In graph mode (``tf.compat.v1``) a loop that builds new ops on every iteration and calls
``sess.run`` gets slower with each call: the graph only grows, and a run that fetches new ops
makes TensorFlow extend its copy of the graph and prune a new executor from the whole, larger
graph (measured on TF 2.21: 26 → 71 ms per call over 300 iterations of 10 ops each, where the
same graph built once runs in well under a millisecond). Nothing in a memory figure shows it.

While kerasmagic is loaded, ``BaseSession.run`` is wrapped (only once the user has imported
TensorFlow: the module is looked up in ``sys.modules``, never imported) and each call notes its
time and the graph's version (O(1)); ``%unload_ext kerasmagic`` puts the original back. After
each cell, two patterns are looked for:

- **slowdown**: the time per call grew severalfold while the graph grew, in one cell or across
  consecutive cells ("Session.run got 17× slower across cells [4]–[9] (2.9 → 51 ms per call)
  while the default graph grew to 3505 ops");
- **rebuilt**: the ops built between successive calls have the same op types each time and
  differ only in constants: a hyperparameter baked into the graph ("cell [5] rebuilt the same
  10-op graph 300 times with only constants changed (`learning_rate`: 0.01 … 3)").

The cost per call is one attribute read, two clock reads and a few list operations: +2.8 µs on a
2-core AMD EPYC, 3 % of the cheapest ``sess.run`` there is (a 4-op graph fed a placeholder, 90 µs;
``benchmarks/bench_session_run.py``). TensorFlow is wrapped from the cell after the one that
imported it: the cell that imports it is not timed.
"""

from __future__ import annotations

import logging
import re
import statistics
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ['KEEP_BATCHES', 'MIN_CALLS', 'MIN_REBUILDS', 'SLOWDOWN', 'SessionRunWatch', 'active_watch', 'findings',
           'start', 'stop']

logger = logging.getLogger(__name__)

#: The module that defines ``BaseSession``; the wrapper is installed once it is in ``sys.modules``.
_SESSION_MODULE = "tensorflow.python.client.session"
#: A cell's (or a series of cells') calls are judged only from this many calls on.
MIN_CALLS = 10
#: ... and named when the time per call grew by this factor or more while the graph grew.
SLOWDOWN = 3.0
#: ... and by at least this much per call: a 0.05 → 0.2 ms change is not worth a sentence.
_MIN_SLOWDOWN_S = 1e-3
#: Calls timed at each end of a cell: the fastest of the first ones is compared with the median of the
#: last ones, so that one slow call (a busy machine) neither makes nor hides a slowdown.
_ENDS = 5
#: Successive same-shaped graph builds that make the "rebuilt" pattern.
MIN_REBUILDS = 3
#: Op ranges kept per graph and cell; the ops of the last :data:`_COMPARED_BATCHES` are compared
#: op by op (types, constants) after the cell, at most :data:`_COMPARED_OPS` ops in all.
KEEP_BATCHES = 1000
_COMPARED_BATCHES = 50
_COMPARED_OPS = 20000
#: Cells remembered with Session.run calls, for the slowdown across cells.
_KEEP_CELLS = 50
#: Op names that say nothing about what a constant is (``mul/y`` is Python's ``lr * t``).
_GENERIC_NAMES = frozenset({"Const", "x", "y", "a", "b", "value", "values", "shape", "begin", "end", "size"})


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


class _GraphRuns:
    """The calls of one cell on one graph: how many, how long at each end, which ops came between."""

    __slots__ = ('batches', 'batches_seen', 'calls', 'first_s', 'graph', 'last_s', 'last_version',
                 'total_s', 'version_first', '__weakref__')

    def __init__(self, graph: Any, version: int) -> None:
        self.graph = weakref.ref(graph)
        self.calls = 0
        self.total_s = 0.0
        self.first_s: list[float] = []
        self.last_s: deque[float] = deque(maxlen=_ENDS)
        self.version_first = version
        self.last_version = version
        #: (previous version, this version]: the op ids built between two calls (ids only grow).
        self.batches: deque[tuple[int, int]] = deque(maxlen=KEEP_BATCHES)
        self.batches_seen = 0

    def note(self, version: int, seconds: float) -> None:
        if self.calls and version > self.last_version:
            self.batches.append((self.last_version, version))
            self.batches_seen += 1
        self.last_version = version
        self.calls += 1
        self.total_s += seconds
        if len(self.first_s) < _ENDS:
            self.first_s.append(seconds)
        self.last_s.append(seconds)


def _op_count(graph: Any) -> int | None:
    nodes = getattr(graph, "_nodes_by_id", None)
    try:
        return len(nodes) if nodes is not None else len(graph.get_operations())
    except Exception:  # noqa: BLE001 - a TF without these: no count rather than a broken cell
        return None


def _graph_label(graph: Any) -> str:
    ops = sys.modules.get("tensorflow.python.framework.ops")
    try:
        if ops is not None and ops.get_default_graph() is graph:
            return "the default graph"
    except Exception:  # inside an odd graph context: name it generically
        logger.debug("kerasmagic.session_runs: reading the default graph failed", exc_info=True)
    return "the Session's graph"


def _constant_bytes(op: Any) -> bytes | None:
    try:
        return bytes(op.get_attr("value").SerializeToString())
    except Exception:  # noqa: BLE001 - a constant we cannot read is compared as unknown
        return None


def _constant_text(op: Any) -> str:
    """A scalar constant's value as the user wrote it (``0.01``); ``…`` for anything larger."""
    tf = sys.modules.get("tensorflow")
    try:
        value = tf.make_ndarray(op.get_attr("value")) if tf is not None else None
    except Exception:  # noqa: BLE001
        return "…"
    if value is None or getattr(value, "size", 2) != 1:
        return "…"
    item = value.reshape(()).item()
    return f"{item:.4g}" if isinstance(item, float) else str(item)


def _base_name(name: str) -> str:
    """``learning_rate_3`` → ``learning_rate``; ``scope_7/mul/y`` → ``mul/y`` (TF's uniquifying suffixes).

    Example:
        >>> _base_name("learning_rate_3"), _base_name("train_7/mul/y"), _base_name("Const_12")
        ('learning_rate', 'train/mul/y', 'Const')
    """
    return "/".join(re.sub(r"_\d+$", "", part) for part in name.split("/"))


def _ops_in(graph: Any, ranges: list[tuple[int, int]]) -> list[list[Any]]:
    """The ops of each (low, high] range of graph versions: the graph's version counts the ops added
    to it (none is ever removed), so the ops added between two versions are those positions in
    creation order."""
    ops = graph.get_operations()
    ids = [getattr(op, "_id", 0) for op in ops[ranges[0][0]:ranges[-1][1]]]
    if ids != sorted(ids):  # get_operations() is in creation order today; sort if that ever changes
        ops = sorted(ops, key=lambda op: op._id)
    return [list(ops[low:high]) for low, high in ranges]


def _rebuilt(graph: Any, runs: _GraphRuns) -> dict[str, Any] | None:
    """Whether the ops built between successive calls are one graph built again and again: the
    same op types in the same order, only constants differing (or nothing at all). Reads the ops
    of the last :data:`_COMPARED_BATCHES` batches (their ids are kept; the ops live in the graph),
    and the same number of ops just before the cell's first call (the loop's first build)."""
    batches = list(runs.batches)
    if len(batches) < MIN_REBUILDS - 1:
        return None
    size = batches[-1][1] - batches[-1][0]
    same = 0  # consecutive batches, from the last back, of the same size (cheap: ids only)
    for low, high in reversed(batches):
        if high - low != size:
            break
        same += 1
    compared = batches[-min(same, _COMPARED_BATCHES, max(_COMPARED_OPS // max(size, 1), MIN_REBUILDS)):]
    # All batches since the first call are one shape: the ops before that call may be the first build.
    first_build = same == len(batches) == runs.batches_seen and runs.version_first - size >= 0
    ranges = ([(runs.version_first - size, runs.version_first)] if first_build else []) + compared
    by_batch = _ops_in(graph, ranges)
    types = [tuple(op.type for op in ops) for ops in by_batch]
    if first_build and types[0] != types[-1]:
        by_batch, types, first_build = by_batch[1:], types[1:], False
    builds = same + int(first_build)
    if builds < MIN_REBUILDS or not types[-1] or any(kinds != types[-1] for kinds in types):
        return None
    changed: list[int] = []
    for position, kind in enumerate(types[0]):
        if kind != "Const":
            continue
        seen = {_constant_bytes(ops[position]) for ops in by_batch}
        if len(seen) > 1 or None in seen:
            changed.append(position)
    constants = []
    for position in changed[:3]:
        name = _base_name(by_batch[-1][position].name)
        texts = [_constant_text(ops[position]) for ops in by_batch]
        shown = texts if len(texts) <= 3 else [texts[0], texts[1], "…", texts[-1]]
        constants.append({"name": name, "generic": name.split("/")[-1] in _GENERIC_NAMES, "values": shown})
    return {"ops_per_build": size, "builds": builds, "compared": len(by_batch),
            "constants_changed": len(changed), "constants": constants}


def _cell_label(numbers: list[int | None]) -> str:
    known = [n for n in numbers if isinstance(n, int)]
    if not known:
        return "a cell"
    if len(set(known)) == 1:
        return f"cell [{known[0]}]"
    return f"cells [{known[0]}]–[{known[-1]}]"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


class SessionRunWatch:
    """Times ``Session.run`` per cell of ``shell`` and names a growing graph's slowdown.

    Example:
        >>> from IPython.core.interactiveshell import InteractiveShell
        >>> watch = SessionRunWatch(InteractiveShell.instance()); watch.start()   # doctest: +SKIP
        >>> # ... cells that build ops in a loop and call sess.run ...
        >>> [finding["text"] for finding in watch.findings()]                     # doctest: +SKIP
        ['Session.run got 24× slower in cell [3] (2.9 → 71 ms per call over 300 calls) while the default ...']
    """

    def __init__(self, shell) -> None:
        self.shell = shell
        self._lock = threading.Lock()
        self._started = False
        self._execution_count: int | None = None
        #: This cell's calls, per graph (by id; the record keeps a weak reference).
        self._current: dict[int, _GraphRuns] | None = None
        self._cells: deque[dict[str, Any]] = deque(maxlen=_KEEP_CELLS)
        self._findings: list[dict[str, Any]] = []
        self._finding_graphs: list[weakref.ref | None] = []
        self._original: Callable[..., Any] | None = None
        self._wrapper: Callable[..., Any] | None = None

    @property
    def started(self) -> bool:
        return self._started

    @property
    def installed(self) -> bool:
        """Whether ``BaseSession.run`` is wrapped now (TensorFlow was imported and a cell ran since)."""
        return self._original is not None

    def start(self) -> None:
        if not self._started:
            self.shell.events.register("pre_run_cell", self.pre_run_cell)
            self.shell.events.register("post_run_cell", self.post_run_cell)
            self._started = True
            self._install()

    def stop(self) -> None:
        if self._started:
            for event, callback in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
                try:
                    self.shell.events.unregister(event, callback)
                except ValueError:
                    pass  # someone unregistered it already
            self._started = False
        self._uninstall()
        self._current = None

    # ---- the wrapper -----------------------------------------------------------------------------
    def _install(self) -> None:
        """Wrap ``BaseSession.run`` once TensorFlow's session module is imported (never import it)."""
        if self._original is not None:
            return
        module = sys.modules.get(_SESSION_MODULE)
        base = getattr(module, "BaseSession", None)
        original = getattr(base, "run", None)
        if base is None or not callable(original):
            return
        watch = weakref.ref(self)
        clock = time.perf_counter

        def run(session, *args, **kwargs):
            me = watch()
            graph = getattr(session, "_graph", None)
            if me is None or me._current is None or graph is None:
                return original(session, *args, **kwargs)
            version = graph.version
            started = clock()
            try:
                return original(session, *args, **kwargs)
            finally:
                me._note(graph, version, clock() - started)

        run.__wrapped__ = original  # type: ignore[attr-defined]
        run.__doc__ = original.__doc__
        run.__name__ = "run"
        run.__qualname__ = getattr(original, "__qualname__", "run")
        base.run = run
        self._original, self._wrapper = original, run

    def _uninstall(self) -> None:
        original, wrapper, self._original, self._wrapper = self._original, self._wrapper, None, None
        if original is None:
            return
        module = sys.modules.get(_SESSION_MODULE)
        base = getattr(module, "BaseSession", None)
        if base is not None and base.__dict__.get("run") is wrapper:
            base.run = original
        # Wrapped again by someone else since: their wrapper calls ours, which now passes every call
        # through (it finds no current cell), so nothing of ours runs.

    def _note(self, graph: Any, version: int, seconds: float) -> None:
        current = self._current
        if current is None:
            return
        with self._lock:
            runs = current.get(id(graph))
            if runs is None or runs.graph() is not graph:
                runs = current[id(graph)] = _GraphRuns(graph, version)
            runs.note(version, seconds)

    # ---- IPython events ---------------------------------------------------------------------------
    def pre_run_cell(self, info=None) -> None:
        """Start timing this cell's calls; never raises into the user's cell."""
        try:
            self._install()
            self._current = {}
            count = getattr(self.shell, "execution_count", None)
            self._execution_count = count if isinstance(count, int) else None
        except Exception:  # the watch must never break a cell (logged at debug level)
            logger.debug("kerasmagic.session_runs: preparing a cell failed", exc_info=True)

    def post_run_cell(self, result=None) -> None:
        """Record this cell's calls and look for the two patterns; never raises into the user's cell."""
        current, self._current = self._current, None
        if not current:
            return
        count = getattr(result, "execution_count", None)
        count = count if isinstance(count, int) else self._execution_count
        try:
            self._record(count, current)
        except Exception:  # the watch must never break a cell (logged at debug level)
            logger.debug("kerasmagic.session_runs: recording a cell's calls failed", exc_info=True)

    def _record(self, count: int | None, current: dict[int, _GraphRuns]) -> None:
        findings = []
        for runs in current.values():
            graph = runs.graph()
            cell = {"execution_count": count, "graph": weakref.ref(graph) if graph is not None else None,
                    "calls": runs.calls, "total_s": runs.total_s,
                    # The fastest of the first calls: a call slowed by a busy machine makes no slowdown.
                    "first_s": min(runs.first_s, default=0.0),
                    "last_s": _median(list(runs.last_s)), "version_first": runs.version_first,
                    "version_last": runs.last_version, "ops": _op_count(graph) if graph is not None else None}
            self._cells.append(cell)
            finding = self._slowdown_in_cell(cell, runs, graph)
            if finding is None:
                finding = self._slowdown_across_cells(graph)
            if finding is not None:
                findings.append(finding)
            if graph is not None:
                rebuilt = _rebuilt(graph, runs)
                if rebuilt is not None:
                    findings.append(self._rebuilt_finding(count, rebuilt))
        # Each finding remembers its graph (weakly): one about a graph that is gone, or emptied by a
        # reset, is no longer told (issue 29: no "close the Session ... rebuild" for a 0-op graph).
        self._findings = findings
        self._finding_graphs = [weakref.ref(graph) if graph is not None else None
                                for graph in (runs.graph() for runs in current.values())]

    def _slowdown_in_cell(self, cell: dict[str, Any], runs: _GraphRuns, graph: Any) -> dict[str, Any] | None:
        if runs.calls < MIN_CALLS or runs.last_version <= runs.version_first:
            return None
        return self._slowdown([cell], graph, calls=runs.calls)

    def _slowdown_across_cells(self, graph: Any) -> dict[str, Any] | None:
        """The latest cells on this graph in a row (its ops growing from one to the next) taken together."""
        if graph is None:
            return None
        series: list[dict[str, Any]] = []
        for cell in reversed(self._cells):
            ref = cell["graph"]
            if ref is None or ref() is not graph:
                continue
            if series and cell["version_last"] > series[-1]["version_first"]:
                break  # the graph did not grow between these cells (ids only grow): not one series
            series.append(cell)
        series.reverse()
        calls = sum(cell["calls"] for cell in series)
        if len(series) < 2 or calls < MIN_CALLS or series[-1]["version_last"] <= series[0]["version_first"]:
            return None
        return self._slowdown(series, graph, calls=calls)

    def _slowdown(self, series: list[dict[str, Any]], graph: Any, *, calls: int) -> dict[str, Any] | None:
        first, last = series[0]["first_s"], series[-1]["last_s"]
        if first <= 0 or last < first * SLOWDOWN or last - first < _MIN_SLOWDOWN_S:
            return None
        ops = series[-1]["ops"]
        label = _graph_label(graph)
        cells = _cell_label([cell["execution_count"] for cell in series])
        where = f"in {cells}" if len(series) == 1 else f"across {cells}"
        grew = f"while {label} grew to {ops} ops" if ops is not None else f"while {label} grew"
        text = (f"Session.run got {last / first:.0f}× slower {where} ({_ms(first)} → {_ms(last)} per call over "
                f"{calls} calls) {grew}: each run fetches newly built ops, so TensorFlow prepares a run over the "
                "whole, larger graph again. Build the graph once and feed changing values through placeholders "
                "(feed_dict); or close the Session, reset the graph with %clear_tf and rebuild it.")
        return {"kind": "slowdown", "execution_counts": [cell["execution_count"] for cell in series],
                "calls": calls, "first_call_s": first, "last_call_s": last, "graph_ops": ops, "graph": label,
                "text": text}

    @staticmethod
    def _rebuilt_finding(count: int | None, rebuilt: dict[str, Any]) -> dict[str, Any]:
        cell = _cell_label([count])
        size, builds = rebuilt["ops_per_build"], rebuilt["builds"]
        if rebuilt["constants_changed"]:
            named = [c for c in rebuilt["constants"] if not c["generic"]] or rebuilt["constants"]
            shown = "; ".join(f"`{c['name']}`: {', '.join(c['values'])}" for c in named)
            guess = "" if any(not c["generic"] for c in rebuilt["constants"]) else " (a hyperparameter?)"
            what = (f"with only constants changed{guess} ({shown}): feed "
                    f"{'it' if rebuilt['constants_changed'] == 1 else 'them'} through a placeholder "
                    "(tf.compat.v1.placeholder + feed_dict) and build the graph once, before the loop")
        else:
            what = "with nothing changed: build it once, before the loop, and run it again"
        text = f"{cell} rebuilt the same {size}-op graph {builds} times {what}."
        return {"kind": "rebuilt", "execution_counts": [count], "ops_per_build": size, "builds": builds,
                "constants_changed": rebuilt["constants_changed"], "constants": rebuilt["constants"],
                "text": text}

    # ---- reading -----------------------------------------------------------------------------------
    def findings(self) -> list[dict[str, Any]]:
        """What the last cell that called ``Session.run`` showed (JSON-able dicts with ``text``), while
        its graph is alive and has ops."""
        graphs = [ref() for ref in self._finding_graphs if ref is not None]
        if self._finding_graphs and not any(isinstance(_op_count(graph), int) and _op_count(graph)
                                            for graph in graphs if graph is not None):
            return []
        return [dict(finding) for finding in self._findings]

    def clear(self) -> None:
        """Forget every cell's calls."""
        self._cells.clear()
        self._findings = []
        self._finding_graphs = []


# Kept across importlib.reload of this module: a fresh None would forget the running one, whose
# hooks stay registered, and the next load would register a second set (issue 33).
_watch: SessionRunWatch | None = globals().get("_watch")


def active_watch() -> SessionRunWatch | None:
    """The watch ``%load_ext kerasmagic`` started, or None.

    Example:
        >>> active_watch() is None      # nothing loaded in a plain Python process
        True
    """
    return _watch


def start(shell) -> SessionRunWatch:
    """Time ``Session.run`` per cell of ``shell`` (what ``%load_ext kerasmagic`` does); idempotent."""
    global _watch
    if _watch is not None and _watch.shell is shell and _watch.started:
        return _watch
    stop()
    _watch = SessionRunWatch(shell)
    _watch.start()
    return _watch


def stop() -> None:
    """Put ``Session.run`` back and forget what was recorded (what ``%unload_ext kerasmagic`` does)."""
    global _watch
    watch, _watch = _watch, None
    if watch is not None:
        watch.stop()


def findings() -> list[dict[str, Any]]:
    """What TensorFlow 1's ``Session.run`` calls of the last such cell showed: a slowdown as the
    graph grew, a graph rebuilt with only constants changed. Empty when kerasmagic is not
    loaded, TensorFlow not imported, or nothing was found.

    Example:
        >>> findings()          # in a process where %load_ext kerasmagic never ran
        []
    """
    watch = _watch
    return [] if watch is None else watch.findings()

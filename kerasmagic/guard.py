"""The memory guard: a running cell is stopped with an exception before the OOM killer ends the kernel.

While kerasmagic is loaded in a kernel, a small daemon thread (:data:`THREAD_NAME`) reads the
kernel's memory (its RSS, plus tmpfs the cgroup counts that is in no RSS) once a second between
cells (ten times a second above :data:`FAST_PCT` of the limit), at least every
:data:`CELL_INTERVAL_S` while a cell runs and faster when the room left or the growth rate says
the stop level is near, and compares it with :func:`kerasmagic.limits.memory_limit`. Past the warning level (85 %
by default) the running cell's output gets one line; past the stop level (95 %) the running
cell gets a :class:`~kerasmagic.errors.KernelMemoryLimitError` (a ``MemoryError``) raised in
the main thread through ``PyThreadState_SetAsyncExc``: the kernel and every variable survive.

Why and its limits (docs/design/decisions.md, "The memory guard"): an asynchronous exception is raised
only when the main thread next runs Python bytecode, so a cell inside one long C call (a single
``np.ones`` of 10 GiB) is stopped after that call returns, if the OOM killer has not acted first.

What it can and cannot stop (issue 33):

- a stop due inside an import, a with block's ``__exit__`` or a ``finally`` block (of any frame
  between the cell and the line running) waits for it to end: a module half-imported stays
  broken for the kernel's life, a cleanup cut short leaves a lock held. It waits no longer where
  waiting is worse: under a limit the OOM killer enforces (a cgroup's, the machine's) it lands
  half way from the stop level to the limit, and in cleanup code while the cell's own threads
  grow (a ``finally`` may be waiting for them in ``t.join()``); the message says what it cut;
- under a limit the OOM killer enforces, a cell whose growth rate would pass the limit within
  :data:`RUSH_S` is stopped from the warning level up (a stop lands only between two steps, and
  at 95 % of 1 GiB a 64 MiB step leaves none); the message gives the rate;
- a stop the cell's code catches (``except Exception``) is raised again, as
  :class:`~kerasmagic.errors.KernelMemoryLimitInterrupt` (no ``Exception``), once memory grows on;
- Python threads the cell started get the stop too (a cell waiting in ``t.join()`` runs no
  bytecode until the thread ends); threads started before the cell, threads inside one long C
  call (TensorFlow's own, a ``tf.data`` pipeline), and child processes cannot be stopped: the
  guard then only warns, and the OOM killer may still act.

A false reading must never stop a cell: the guard reads RSS (``/proc/self/statm``) and tmpfs,
never the cgroup's usage, which counts page cache; it acts only on two consecutive readings past
a level (the second :data:`CONFIRM_S` after the first; under a limit the OOM killer enforces, one
reading is enough where the cell's last step was larger than the room left), only while a cell
runs, only when that cell itself grew by :data:`GROWTH_BYTES` or more (a kernel already near the
limit can still run ``del x``), and stops a cell again only when a stop landed, was caught, and
the cell grew on. No stop lands in IPython's own code (showing a stop's traceback), and one not
landed when the cell ends is withdrawn.

Each reading also goes to the kernel's post-mortem record (:mod:`kerasmagic.postmortem`).
"""

from __future__ import annotations

import ast
import ctypes
import inspect
import linecache
import logging
import math
import numbers
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, replace
from typing import Any

from . import events
from .cell_numbers import running_cell_number
from .errors import KerasMagicUsageError, KernelMemoryLimitError, KernelMemoryLimitInterrupt, _ArmedStop
from .leak_watch import _first_line
from .limits import MemoryLimit, memory_limit
from .tables import format_bytes

__all__ = ['CONFIRM_S', 'ENV_VAR', 'FAST_PCT', 'GROWTH_BYTES', 'THREAD_NAME', 'GuardSettings', 'MemoryGuard',
           'active_guard', 'assess', 'limit_state', 'memory_guard', 'raise_hint', 'start', 'stop']

logger = logging.getLogger(__name__)

THREAD_NAME = "kerasmagic-guard"
#: ``KERASMAGIC_MEMORY_GUARD=off`` starts kernels with the guard off.
ENV_VAR = "KERASMAGIC_MEMORY_GUARD"
#: Above this share of the limit the guard reads ten times a second.
FAST_PCT = 75.0
SLOW_INTERVAL_S = 1.0
FAST_INTERVAL_S = 0.1
#: While a cell runs, at least this often: two readings give its growth rate.
CELL_INTERVAL_S = 0.25
#: Where the rate says the stop level is less than this far away, read at a quarter of the time
#: left (never more often than MIN_INTERVAL_S).
RATE_HORIZON_S = 2.0
MIN_INTERVAL_S = 0.01
#: The fastest a cell is taken to grow until readings give its rate: touching fresh pages runs at
#: a few GiB a second (a list of 64 MiB ``np.ones``: 4 GiB/s on a loaded 2-core machine).
FASTEST_GROWTH = 8 * 2**30
#: While a cell does not grow, it is read no more often than this, however little room is left
#: (a long cell in a kernel sitting near a small limit: 20 readings a second, not 100).
FLAT_INTERVAL_S = 0.05
#: Under a limit the OOM killer enforces, a cell whose growth rate reaches the limit sooner than
#: this, on two readings in a row, is stopped from the warning level up.
RUSH_S = 0.25
#: The confirming second reading comes this soon after a first one past the stop level: a
#: cell growing 64 MiB a step must not take its next step before the guard acts.
CONFIRM_S = 0.05
#: A cell must have grown by this much to be warned about or stopped.
GROWTH_BYTES = 16 * 2**20
#: A stopped cell that goes on growing by this much caught the stop: it is stopped again at once
#: (at 95 % of 1 GiB, three 16 MiB steps are left before the OOM killer).
SWALLOWED_GROWTH_BYTES = 4 * 2**20


@dataclass(frozen=True)
class GuardSettings:
    """Whether the guard acts, and at which shares of the limit it warns and stops.

    Example:
        >>> print(GuardSettings())
        on: warns at 85 % of the limit, stops the running cell at 95 %
    """

    enabled: bool = True
    warn_pct: float = 85.0
    stop_pct: float = 95.0

    def __str__(self) -> str:
        if not self.enabled:
            return "off: the kernel may be killed by the out-of-memory killer (%tf_mem --guard on)"
        return (f"on: warns at {self.warn_pct:g} % of the limit, stops the running cell at "
                f"{self.stop_pct:g} %")

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "warn_pct": self.warn_pct, "stop_pct": self.stop_pct}


_OFF_WORDS = ("off", "0", "false", "no")
_ON_WORDS = ("", "on", "1", "true", "yes")


def _initial_settings() -> GuardSettings:
    value = os.environ.get(ENV_VAR, "")
    if value.strip().lower() not in _OFF_WORDS + _ON_WORDS:
        # Bad input gets one line: a typo must not switch the guard off, nor pass unsaid.
        print(f"kerasmagic: {ENV_VAR}={value!r} is neither on nor off; the memory guard is on ({ENV_VAR}=off "
              "starts kernels with it off)", file=sys.stderr)
    return GuardSettings(enabled=value.strip().lower() not in _OFF_WORDS)


_settings_lock = threading.Lock()
_settings = _initial_settings()


def check_pct(value: Any, what: str) -> float:
    """A level in percent of the limit: a finite number above 0 and at most 100.

    Example:
        >>> check_pct(90, "the stop level")
        90.0
        >>> check_pct(float("nan"), "the stop level")
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: the stop level is a percentage of the limit ... got nan; e.g. 95
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not 0 < float(value) <= 100:
        raise KerasMagicUsageError(f"{what} is a percentage of the limit above 0 and at most 100, got {value!r}; "
                                   "e.g. 95")
    return float(value)


def memory_guard(enabled: bool | None = None, *, warn_pct: float | None = None,
                 stop_pct: float | None = None) -> GuardSettings:
    """Switch the memory guard on or off and set its levels (``%tf_mem --guard``); returns the settings.

    Arguments left at None keep their value. The warning level must be below the stop level.

    Example:
        >>> import kerasmagic
        >>> kerasmagic.memory_guard(warn_pct=80, stop_pct=90).stop_pct
        90.0
        >>> kerasmagic.memory_guard(False).enabled
        False
        >>> print(kerasmagic.memory_guard(True, warn_pct=85, stop_pct=95))
        on: warns at 85 % of the limit, stops the running cell at 95 %
    """
    global _settings
    if enabled is not None and not isinstance(enabled, bool):
        raise KerasMagicUsageError(f"enabled is True or False, got {enabled!r}")
    with _settings_lock:
        settings = _settings
        warn = settings.warn_pct if warn_pct is None else check_pct(warn_pct, "the warning level")
        stop_at = settings.stop_pct if stop_pct is None else check_pct(stop_pct, "the stop level")
        if warn >= stop_at:
            raise KerasMagicUsageError(f"the warning level ({warn:g} %) must be below the stop level ({stop_at:g} %)")
        _settings = replace(settings, enabled=settings.enabled if enabled is None else enabled,
                            warn_pct=warn, stop_pct=stop_at)
        return _settings


def current_settings() -> GuardSettings:
    return _settings


def assess(rss: int, limit: int, settings: GuardSettings, cell_growth: int | None) -> str:
    """What one reading calls for: ``"ok"``, ``"fast"`` (read ten times a second), ``"warn"`` or
    ``"stop"``; ``cell_growth`` is None while no cell runs.

    Example:
        >>> on = GuardSettings()
        >>> [assess(r, 100 * 2**20, on, 50 * 2**20) for r in (50 * 2**20, 80 * 2**20, 90 * 2**20, 96 * 2**20)]
        ['ok', 'fast', 'warn', 'stop']
        >>> assess(96 * 2**20, 100 * 2**20, on, None), assess(96 * 2**20, 100 * 2**20, on, 0)
        ('fast', 'fast')
    """
    pct = 100.0 * rss / limit
    acts = settings.enabled and cell_growth is not None and cell_growth >= GROWTH_BYTES
    if acts and pct >= settings.stop_pct:
        return "stop"
    if acts and pct >= settings.warn_pct:
        return "warn"
    return "fast" if pct >= min(FAST_PCT, settings.warn_pct) else "ok"


def raise_hint(limit: MemoryLimit) -> str:
    """How to give the kernel more room, for the limit's source: a limit set in this kernel or by
    ``KERASMAGIC_MEMORY_LIMIT`` can be raised from a cell; a cgroup's (the container's) cannot.

    Example:
        >>> from kerasmagic.limits import MemoryLimit
        >>> print(raise_hint(MemoryLimit(2**30, "user", "set by you", 0, {})))  # off is not "no limit"
        raise the limit (%tf_mem --limit 2GiB; --limit off drops yours and goes back to the environment's, the
        cgroup's or the host's)
        >>> raise_hint(MemoryLimit(2**30, "environment", "KERASMAGIC_MEMORY_LIMIT=1GiB", 0, {}))
        'raise the limit (%tf_mem --limit 2GiB overrides KERASMAGIC_MEMORY_LIMIT=1GiB)'
        >>> raise_hint(MemoryLimit(2**30, "cgroup", "cgroup v1 /k", 0, {}))
        "ask for more memory (the cgroup's limit, cgroup v1 /k, cannot be raised from the kernel)"
    """
    bigger = f"{max(1, math.ceil(limit.limit_bytes * 2 / 2**30))}GiB"
    if limit.source == "user":
        return (f"raise the limit (%tf_mem --limit {bigger}; --limit off drops yours and goes back to the "
                "environment's, the cgroup's or the host's)")
    if limit.source == "environment":
        return f"raise the limit (%tf_mem --limit {bigger} overrides {limit.where})"
    if limit.source == "cgroup":
        return f"ask for more memory (the cgroup's limit, {limit.where}, cannot be raised from the kernel)"
    return "close other programs (the limit is the host's memory)"


@dataclass
class _Cell:
    """The cell running now, as pre_run_cell saw it (read by the guard thread)."""

    number: int | None
    first_line: str
    start_rss: int
    parent: dict[str, Any] | None
    warned: bool = False
    fired: bool = False
    #: The Python threads alive when the cell started: the ones alive at a stop but not here are the cell's.
    threads_before: frozenset[int] = frozenset()
    #: What counted against the limit when the last stop was raised; the stops raised so far.
    fired_at: int | None = None
    stops: int = 0
    #: ``_ArmedStop.landed`` when the last stop was raised: a higher count says it landed.
    landed_before: int = 0
    #: A stop was due while the cell was importing a module ("import") or in cleanup code, a with
    #: block's ``__exit__`` or a ``finally`` block ("cleanup"): it is delivered when that ends.
    deferred: str = ""


#: importlib's own functions that run a module's code; where one is on the main thread's stack, an
#: import is under way (``import x``, ``importlib.import_module``, ``__import__`` all pass here).
_IMPORT_FUNCTIONS = frozenset({"_find_and_load", "_find_and_load_unlocked", "_load_unlocked", "_load",
                               "exec_module", "_call_with_frames_removed", "_handle_fromlist", "_gcd_import"})


#: Cleanup code a stop must not cut short: a with block's exit (a lock released, a file closed).
_CLEANUP_FUNCTIONS = frozenset({"__exit__", "__aexit__"})
_DEFERRED_WORDS = {"import": "; it was due inside an import and waited for the import to end",
                   "cleanup": "; it was due inside cleanup code (a with block's __exit__ or a finally block) "
                              "and waited for it to end"}
#: Limits the OOM killer enforces (a cgroup's, the machine's): past them the kernel dies, so a stop
#: waits for an import or cleanup only up to a ceiling. A limit set in the kernel or its environment
#: kills nothing when passed: there the stop waits for as long as it takes.
HARD_LIMIT_SOURCES = frozenset({"cgroup", "host"})
def _landed_words(place: str, why: str, stop_pct: float) -> str:
    """What a stop that could not wait did: ``place`` ``"import"`` or ``"cleanup"``, ``why``
    ``"ceiling"`` (half way from the stop level to a limit the OOM killer enforces) or ``"threads"``
    (the cell's own threads grow, and a cleanup may be waiting for them).

    Example:
        >>> words = _landed_words("cleanup", "threads", 95)
        >>> "the rest of it did not run" in words, words.endswith("the cell's own threads were growing")
        (True, True)
    """
    reason = ("the cell's own threads were growing" if why == "threads" else
              f"memory was half way from {stop_pct:g} % to a limit the OOM killer enforces")
    if place == "import":
        return (f"; it was due inside an import and landed there ({reason}): that module may be half-imported, so "
                "save what you need and restart the kernel before you use it")
    return (f"; it landed inside cleanup code (a with block's __exit__ or a finally block), and the rest of it did "
            f"not run: {reason}")


#: The line spans of each code object's ``finally`` blocks, found once per code object: a stop is
#: due within a second, so only the running functions' own source is parsed, never whole files.
_finally_spans_by_code: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], ...]] = weakref.WeakKeyDictionary()
#: A code object's source longer than this is not parsed (a module's own code, run outside an
#: import): it counts as outside a finally block.
_MAX_PARSED_LINES = 2000


def _last_line(code: Any) -> int:
    """The last source line of ``code``: where its last statement ends (3.11+ knows each
    instruction's end line; before, the last line with an instruction, which may end earlier)."""
    positions = getattr(code, "co_positions", None)
    if positions is not None:
        ends = [end for _, end, *_ in positions() if end]
    else:
        ends = [line for *_, line in code.co_lines() if line]
    return max(ends, default=code.co_firstlineno)


def _finally_spans(code: Any, lines: list[str]) -> tuple[tuple[int, int], ...]:
    """The first and last line of each ``finally`` block in ``code``'s own source (``lines``: its
    file's, as linecache gives them); none where that source does not parse on its own.

    Example:
        >>> lines = [line + chr(10) for line in ("try:", "    x = 1", "finally:", "    x = 2", "    x = 3")]
        >>> _finally_spans(compile("".join(lines), "<example>", "exec"), lines)
        ((4, 5),)
    """
    spans = _finally_spans_by_code.get(code)
    if spans is not None:
        return spans
    first = max(code.co_firstlineno, 1)
    last = _last_line(code)
    spans = ()
    if last - first < _MAX_PARSED_LINES:
        # The first line's indent comes off every line that has it (a method's source is indented;
        # a string's lines at column 0 stay as they are, where textwrap.dedent would give up). A
        # statement may end a line or two after its last instruction (a closing bracket): a few
        # more are tried before giving up, which counts as outside a finally block.
        head = lines[first - 1] if first <= len(lines) else ""
        indent = head[:len(head) - len(head.lstrip())]
        for extra in range(3):
            block = [line[len(indent):] if line.startswith(indent) else line for line in lines[first - 1:last + extra]]
            try:
                tree = ast.parse("".join(block))
            except (SyntaxError, ValueError):
                continue
            spans = tuple((node.finalbody[0].lineno + first - 1,
                           (node.finalbody[-1].end_lineno or node.finalbody[-1].lineno) + first - 1)
                          for node in ast.walk(tree)
                          if isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)) and node.finalbody)
            break
    _finally_spans_by_code[code] = spans
    return spans


def _in_finally_block(frame: Any) -> bool:
    """Whether ``frame`` runs a line of a ``finally`` block: an exception raised there skips the rest
    of the block (issue 33, item 10), so a stop waits for it. The source is the one linecache has
    (IPython puts each cell's there); a frame without source (``%%time``'s ``<timed exec>``, a string
    given to ``exec``) counts as outside."""
    code = frame.f_code
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    line = frame.f_lineno
    return bool(lines) and line is not None and any(
        start <= line <= end for start, end in _finally_spans(code, lines))


def _cell_threads(cell: _Cell) -> list[threading.Thread]:
    """The Python threads the running cell started and that still run (never kerasmagic's own)."""
    return [thread for thread in threading.enumerate()
            if thread.ident is not None and thread.ident not in cell.threads_before
            and thread is not threading.main_thread() and not thread.name.startswith("kerasmagic")]


def _landing_words(thread_ident: int) -> str:
    """Where the main thread is as the stop is raised, in words (no cleanup code runs there: the
    stop waited for any)."""
    frame = sys._current_frames().get(thread_ident)
    if frame is None:
        return ""
    code = frame.f_code
    return f"; raised in {code.co_name} ({os.path.basename(code.co_filename)}, line {frame.f_lineno})"


def _is_import_frame(code: Any) -> bool:
    """Whether ``code`` is importlib's machinery that runs a module (the frozen bootstrap, or
    ``importlib._bootstrap`` where it is not frozen).

    Example:
        >>> import importlib._bootstrap as bootstrap
        >>> _is_import_frame(bootstrap._find_and_load.__code__), _is_import_frame(_is_import_frame.__code__)
        (True, False)
    """
    filename = code.co_filename
    return code.co_name in _IMPORT_FUNCTIONS and ("importlib._bootstrap" in filename
                                                   or filename.endswith(("importlib/_bootstrap.py",
                                                                         "importlib/_bootstrap_external.py")))


def _run_code_codes(shell) -> set[Any]:
    """The code objects of ``run_code``, the IPython frame right below a cell's own code."""
    codes = set()
    for owner in (type(shell), *type(shell).__mro__):
        method = owner.__dict__.get("run_code")
        code = getattr(method, "__code__", None)
        if code is not None:
            codes.add(code)
    return codes


class MemoryGuard:
    """The guard thread and the IPython hooks that tell it which cell runs.

    Example:
        >>> guard = MemoryGuard(get_ipython())          # doctest: +SKIP
        >>> guard.start(); guard.readings               # doctest: +SKIP
        1
    """

    def __init__(self, shell, record: Any = None) -> None:
        self.shell = shell
        self.record = record
        self._cell: _Cell | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._main_ident: int = threading.main_thread().ident or 0
        self._run_code = _run_code_codes(shell)
        self._past_warn = self._past_stop = False
        self._previous: tuple[float, int, _Cell | None] | None = None
        self.readings = 0
        self.fired = 0
        #: Stops that were due inside an import or cleanup code and waited for it to end.
        self.deferred = 0
        self.warnings = 0
        #: The last warning or stop, as the live channel's ``event`` carried it.
        self.last_event: dict[str, Any] | None = None
        #: The last reading's level and the limit it was measured against.
        self.level = "ok"
        self.last_limit: MemoryLimit | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------
    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def start(self) -> None:
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        for event, hook in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(event, hook)
            except ValueError:
                pass
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    # ---- IPython hooks (main thread) ---------------------------------------------------------------
    def pre_run_cell(self, info=None) -> None:
        """A cell starts: remember it, and write it into the record before it can take all memory."""
        try:
            kernel = getattr(self.shell, "kernel", None)
            parent = kernel.get_parent("shell") if kernel is not None else None
            cell = _Cell(number=running_cell_number(self.shell),
                         first_line=_first_line(getattr(info, "raw_cell", None) or ""),
                         start_rss=memory_limit().used_bytes, parent=parent if isinstance(parent, dict) else None,
                         threads_before=frozenset(t.ident for t in threading.enumerate() if t.ident is not None))
            self._cell = cell
            self._past_warn = self._past_stop = False
            if self.record is not None:
                self.record.cell_started(cell.number, cell.first_line)
        except Exception:  # the guard must never break a cell
            logger.debug("kerasmagic.guard: noting a cell's start failed", exc_info=True)
        with self._cond:
            self._cond.notify_all()  # read now: the cell's growth starts from here

    def post_run_cell(self, result=None) -> None:
        cell, self._cell = self._cell, None
        if cell is not None and cell.fired:
            # A stop raised but not landed yet (the cell ended first, or a second one came while
            # IPython showed the first) is withdrawn: it must not land in IPython's own code or
            # in the next cell.
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main_ident), None)
        try:
            if self.record is not None:
                self.record.cell_ended()
        except Exception:  # the guard must never break a cell
            logger.debug("kerasmagic.guard: noting a cell's end failed", exc_info=True)

    # ---- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                interval = self.tick()
            except Exception:  # a failing reading must not end the guard
                logger.debug("kerasmagic.guard: a reading failed", exc_info=True)
                interval = SLOW_INTERVAL_S
            with self._cond:
                if self._stopping:
                    return
                self._cond.wait(interval)
                if self._stopping:
                    return

    def tick(self) -> float:
        """One reading: record it, act on it; returns the seconds until the next one."""
        limit = memory_limit()
        used = limit.used_bytes
        self.last_limit = limit
        self.readings += 1
        cell = self._cell
        settings = _settings
        now = time.monotonic()
        previous, self._previous = self._previous, (now, used, cell)
        rate = None  # bytes per second this cell grows, from the last two readings in it
        if previous is not None and cell is not None and previous[2] is cell and now > previous[0]:
            rate = (used - previous[1]) / (now - previous[0])
        level = assess(used, limit.limit_bytes, settings, None if cell is None else used - cell.start_rss)
        self.level = level
        if self.record is not None:
            self.record.sample(time.time(), used, limit.to_dict(), near=level != "ok")
        step = used - previous[1] if rate is not None and previous is not None else 0
        return min(self._act(cell, limit, level, step, rate), self._paced(cell, limit, used, rate))

    @staticmethod
    def _paced(cell: _Cell | None, limit: MemoryLimit, used: int, rate: float | None) -> float:
        """How soon to read again while a cell runs: as soon as the measured rate says the stop
        level is near (issue 33, item 5), and, under a limit the OOM killer enforces, as soon as
        the room left to the stop level could be gone at :data:`FASTEST_GROWTH` (a cell that grew
        4 GiB/s from 8 % of a 1 GiB cgroup was past it before a second reading 0.25 s later, seen
        under load); :data:`FLAT_INTERVAL_S` at the most often while the cell does not grow.
        Never more often than :data:`MIN_INTERVAL_S`; a large limit far away keeps
        :data:`CELL_INTERVAL_S`.

        Example:
            >>> from kerasmagic.limits import MemoryLimit
            >>> cell = _Cell(number=1, first_line="", start_rss=0, parent=None)
            >>> small = MemoryLimit(2**30, "cgroup", "a test", 81 * 2**20, {})
            >>> round(MemoryGuard._paced(cell, small, small.used_bytes, None), 3)  # no rate yet
            0.027
            >>> round(MemoryGuard._paced(cell, small, small.used_bytes, 0.0), 3)  # flat
            0.05
        """
        if cell is None:
            return SLOW_INTERVAL_S
        room = limit.limit_bytes * _settings.stop_pct / 100 - used
        interval = CELL_INTERVAL_S
        if room > 0 and limit.source in HARD_LIMIT_SOURCES:
            interval = min(interval, room / FASTEST_GROWTH / 4)
            if rate is not None and rate <= 0:
                interval = max(interval, FLAT_INTERVAL_S)
        if rate is not None and rate > 0 and room > 0 and room / rate < RATE_HORIZON_S:
            interval = min(interval, room / rate / 4)
        return max(MIN_INTERVAL_S, interval)

    def _act(self, cell: _Cell | None, limit: MemoryLimit, level: str, step: int = 0,
             rate: float | None = None) -> float:
        """Warn or stop for one reading's ``level``; ``step`` is what the cell grew since the
        reading before, ``rate`` how fast (bytes a second). Returns the seconds until the next
        reading."""
        # Under a limit the OOM killer enforces, a cell that will pass it before the stop level can
        # be acted on is stopped now, from the warning level up: a stop lands only between two
        # steps (never inside one C call), so at 95 % of 1 GiB a cell growing 64 MiB a step has
        # none left to land in (issue 33, item 5; seen under load). A limit set in the kernel kills
        # nothing when passed: there only the levels count.
        hard = limit.source in HARD_LIMIT_SOURCES and level in ("warn", "stop")
        room = limit.limit_bytes - limit.used_bytes
        rushing = hard and rate is not None and rate > 0 and room / rate < RUSH_S
        urgent = level == "stop" or rushing
        if urgent and cell is not None:
            # Two readings in a row (a moment's peak is no reason to stop), or, past the stop
            # level, one where a step like the last would pass the limit: no time for a second.
            # Below the stop level always two: one fast reading is also what a single large
            # allocation that ends short of the limit looks like (np.load, read_csv).
            no_time = hard and level == "stop" and step >= room
            early = None if level == "stop" else rate
            if cell.fired and self._swallowed(cell, limit):
                self._interrupt(cell, limit, early)  # confirmed already: no second reading to wait for
            elif (self._past_stop or no_time) and not cell.fired:
                if not cell.warned:
                    # Memory that grows faster than the readings can jump past the warning band
                    # (seen in CI under load): the warning, with what grew, still comes first.
                    cell.warned = True
                    self._warn(cell, limit)
                self._interrupt(cell, limit, early)
            self._past_stop = True
            return CONFIRM_S if not cell.fired else FAST_INTERVAL_S
        self._past_stop = False
        if level == "warn" and cell is not None:
            if self._past_warn and not cell.warned:
                cell.warned = True
                self._warn(cell, limit)
            self._past_warn = True
            return FAST_INTERVAL_S
        self._past_warn = False
        return FAST_INTERVAL_S if level == "fast" else SLOW_INTERVAL_S

    @staticmethod
    def _swallowed(cell: _Cell, limit: MemoryLimit) -> bool:
        """The cell caught the stop and goes on growing: a stop that nothing stopped, given again
        (issue 33, item 3: ``except Exception`` around an append, then the OOM killer). Only a
        stop that landed can have been caught: one still waiting for a long C call to return is
        not given twice."""
        return (cell.fired_at is not None and _ArmedStop.landed > cell.landed_before
                and limit.used_bytes >= cell.fired_at + SWALLOWED_GROWTH_BYTES)

    # ---- acting --------------------------------------------------------------------------------------
    def _growth_words(self, cell: _Cell, limit: MemoryLimit) -> str:
        label = f"cell [{cell.number}]" if cell.number is not None else "the running cell"
        return f"{label} grew {format_bytes(limit.used_bytes - cell.start_rss, signed=True)}"

    def _warn(self, cell: _Cell, limit: MemoryLimit) -> None:
        settings = _settings
        _end_warm_spares()
        sooner = (" (sooner if it grows fast enough to pass the limit first)"
                  if limit.source in HARD_LIMIT_SOURCES else "")
        text = (f"kerasmagic: memory at {format_bytes(limit.used_bytes)} of a {format_bytes(limit.limit_bytes)} limit "
                f"({limit.used_pct:.0f} %, {limit.where}); {self._growth_words(cell, limit)} so far. At "
                f"{settings.stop_pct:g} %{sooner} the guard stops the cell (%tf_mem --guard off to let it run).")
        self.warnings += 1
        self._publish("guard_warning", cell, limit, text)
        self._emit(cell, text)

    def _publish(self, kind: str, cell: _Cell, limit: MemoryLimit, text: str) -> None:
        """The warning or the stop to the sidebar and ``%tf_mem --live`` too (a mark on the timeline),
        not only to the cell's output (issue 33, item 7)."""
        payload = {"kind": kind, "execution_count": cell.number, "used_bytes": limit.used_bytes,
                   "limit_bytes": limit.limit_bytes, "used_pct": round(limit.used_pct, 1), "ts": time.time(),
                   "text": text}
        self.last_event = payload
        try:
            events.publish(kind, payload)
        except Exception:  # the guard must never fail for a listener's sake
            logger.debug("kerasmagic.guard: publishing %s failed", kind, exc_info=True)

    def _main_thread_place(self) -> str:
        """Where the main thread is: ``"cell"`` (the cell's own code, the only place a stop may
        land), ``"import"`` (inside an import the cell started), ``"cleanup"`` (inside a with
        block's ``__exit__`` or a ``finally`` block) or ``"outside"`` (IPython's code before or
        after the cell)."""
        frame = sys._current_frames().get(self._main_ident)
        frames = []
        while frame is not None and frame.f_code not in self._run_code:
            frames.append(frame)
            frame = frame.f_back
        # The frame right above run_code runs the cell's own code, a module's code (no function's:
        # its name varies, "<module>" or Colab's "<cell line: 0>"); a function there is IPython at
        # work for the cell (showing the traceback of a stop that landed): no stop may land in it.
        if frame is None or not frames or frames[-1].f_code.co_flags & inspect.CO_OPTIMIZED:
            return "outside"
        # Imports first: a module's own code is never searched for finally blocks (parsing a large
        # module's source would hold the GIL while memory grows).
        if any(_is_import_frame(each.f_code) for each in frames):
            return "import"
        if any(each.f_code.co_name in _CLEANUP_FUNCTIONS or _in_finally_block(each) for each in frames):
            return "cleanup"
        return "cell"

    def _interrupt(self, cell: _Cell, limit: MemoryLimit, early_rate: float | None = None) -> None:
        """Raise the stop in the running cell (and the threads it started), or defer it where it
        must wait; ``early_rate``: stopped below the stop level, as growth at that rate would
        pass a hard limit first."""
        if self._cell is not cell:
            return  # the cell is ending: nothing to stop
        place = self._main_thread_place()
        if place == "outside":
            return
        settings = _settings
        workers = _cell_threads(cell)
        landed_in = ""
        if place in ("import", "cleanup"):
            # An exception raised inside a module's code leaves that module half-initialised while
            # the modules it imported stay registered: TensorFlow, pandas or JAX then fail on every
            # later import until a restart (issue 33). One raised in a with block's __exit__ or a
            # finally block skips the rest of the cleanup (a lock stays held). The stop waits, except
            # where waiting is worse: under a limit the OOM killer enforces, past the ceiling half
            # way from the stop level to the limit (a dead kernel loses everything); and for cleanup
            # while the cell's own threads run (the growth may be theirs, and a finally block may
            # be waiting for them in t.join()).
            hard = limit.source in HARD_LIMIT_SOURCES
            past_ceiling = hard and limit.used_pct >= (settings.stop_pct + 100) / 2
            if not cell.deferred:
                cell.deferred = place
                self.deferred += 1
                logger.debug("kerasmagic.guard: stop deferred to the end of an %s", place)
            if not past_ceiling and not (place == "cleanup" and workers):
                return
            landed_in = place
            deferred_words = _landed_words(place, "ceiling" if past_ceiling else "threads", settings.stop_pct)
        else:
            deferred_words = _DEFERRED_WORDS.get(cell.deferred, "")
        label = f"cell [{cell.number}]" if cell.number is not None else "the running cell"
        again = cell.fired
        grew = format_bytes(limit.used_bytes - cell.start_rss, signed=True)
        if early_rate is None:
            level_words = f"{limit.used_pct:.0f} % ≥ {settings.stop_pct:g} %"
        else:
            seconds = (limit.limit_bytes - limit.used_bytes) / early_rate
            level_words = (f"{limit.used_pct:.0f} %, below {settings.stop_pct:g} %: growing "
                           f"{format_bytes(int(early_rate))}/s, it would pass the limit in {seconds:.2f} s")
        message = (f"{label} was stopped by kerasmagic's memory guard at {format_bytes(limit.used_bytes)} of a "
                   f"{format_bytes(limit.limit_bytes)} limit ({level_words}; "
                   f"{limit.where}); it grew {grew}{deferred_words}{_landing_words(self._main_ident)}")
        if again:
            message += (f". Stopped again: the cell's code caught the first stop (KernelMemoryLimitError is a "
                        f"MemoryError, which except Exception catches) and kept growing; this one "
                        f"({KernelMemoryLimitInterrupt.__name__}, like KeyboardInterrupt) only except "
                        "BaseException catches")
        if workers:
            message += (f"; also raised in the thread{'s' if len(workers) > 1 else ''} this cell started ("
                        f"{', '.join(t.name for t in workers[:5])})")
        message += (f". The kernel and your variables are intact: free memory (del, %clear_tf), {raise_hint(limit)}, "
                    "or switch the guard off (%tf_mem --guard off).")
        KernelMemoryLimitError.arm(message, cell=cell.number, rss_bytes=limit.used_bytes,
                                   limit_bytes=limit.limit_bytes)
        # The message took time to build: the main thread may have entered an import or cleanup
        # since. Checked once more right before raising (best effort: the stop lands at the main
        # thread's next bytecode, which no outside check can see ahead of).
        if self._cell is not cell or (not landed_in and self._main_thread_place() != "cell"):
            return
        raised = KernelMemoryLimitInterrupt if again else KernelMemoryLimitError
        # Noted before raising: it may land at once, and a cell that ends meanwhile must see
        # ``fired`` to withdraw a stop that has not landed.
        cell.landed_before = _ArmedStop.landed
        cell.fired = True
        cell.fired_at = limit.used_bytes
        # The cell's own threads get the stop too: a cell waiting in t.join() runs no bytecode, so the
        # exception cannot land in it until the thread that grows ends (issue 33, item 4).
        for thread in workers:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0), ctypes.py_object(raised))
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main_ident), ctypes.py_object(raised))
        cell.stops += 1
        self.fired += 1
        self._publish("guard_stop", cell, limit, message)

    def _emit(self, cell: _Cell, text: str) -> None:
        """One line in the running cell's output: sent with the cell's own request as its parent
        (a thread's print would go to whichever request ipykernel saw last, e.g. a sidebar's)."""
        kernel = getattr(self.shell, "kernel", None)
        if kernel is not None and cell.parent:
            try:
                kernel.session.send(kernel.iopub_socket, "stream", {"name": "stderr", "text": text + "\n"},
                                    parent=cell.parent, ident=kernel._topic("stream"))
                return
            except Exception:
                logger.debug("kerasmagic.guard: sending the warning failed", exc_info=True)
        print(text, file=sys.stderr)


# Kept across importlib.reload of this module: a fresh None would forget the running one, whose
# hooks stay registered, and the next load would register a second set (issue 33).
_guard: MemoryGuard | None = globals().get("_guard")


def _end_warm_spares() -> None:
    """Memory runs short: the isolation pool's warm spares (a process each, waiting for a job that
    may not come) go first. Only where isolation is loaded already: the guard imports nothing."""
    pool = sys.modules.get("kerasmagic.isolation.pool")
    if pool is not None:
        try:
            pool.end_default_spares()
        except Exception:  # a warning must still reach the cell
            logger.exception("kerasmagic: ending the isolation pool's warm spares failed")


def active_guard() -> MemoryGuard | None:
    """The guard ``%load_ext kerasmagic`` started in this kernel, or None.

    Example:
        >>> active_guard() is None       # in a plain Python process
        True
    """
    return _guard


def limit_state() -> dict[str, Any]:
    """The limit, what counts against it, the headroom and the guard's state: what the live sample
    carries as ``memory_limit`` for the sidebar and ``%tf_mem --live``.

    Example:
        >>> state = limit_state()
        >>> state["limit_bytes"] > 0, state["guard"]["running"]
        (True, False)
    """
    running = _guard
    limit = running.last_limit if running is not None and running.last_limit is not None else memory_limit()
    settings = _settings
    return {
        "limit_bytes": limit.limit_bytes, "used_bytes": limit.used_bytes, "rss_bytes": limit.rss_bytes,
        "shmem_bytes": limit.shmem_bytes, "headroom_bytes": limit.headroom_bytes,
        "used_pct": round(limit.used_pct, 1), "source": limit.source, "where": limit.where,
        "guard": {**settings.to_dict(), "running": running is not None,
                  "level": running.level if running is not None else None,
                  "warnings": running.warnings if running is not None else 0,
                  "stops": running.fired if running is not None else 0,
                  "last_event": running.last_event if running is not None else None},
    }


def start(shell, record: Any = None) -> MemoryGuard:
    """Start the guard on ``shell`` (what ``%load_ext kerasmagic`` does in a kernel); idempotent."""
    global _guard
    if _guard is not None:
        return _guard
    _guard = MemoryGuard(shell, record)
    _guard.start()
    return _guard


def stop() -> None:
    """Stop the guard and join its thread (what ``%unload_ext kerasmagic`` does)."""
    global _guard
    guard, _guard = _guard, None
    if guard is not None:
        guard.stop()

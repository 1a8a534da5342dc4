"""The memory guard: a running cell is stopped with an exception before the OOM killer ends the kernel.

While kerasmagic is loaded in a kernel, a small daemon thread (:data:`THREAD_NAME`) reads the
kernel's RSS once a second (ten times a second above :data:`FAST_PCT` of the limit) and
compares it with :func:`kerasmagic.limits.memory_limit`. Past the warning level (85 %
by default) the running cell's output gets one line; past the stop level (95 %) the running
cell gets a :class:`~kerasmagic.errors.KernelMemoryLimitError` (a ``MemoryError``) raised in
the main thread through ``PyThreadState_SetAsyncExc``: the kernel and every variable survive.

Why and its limits (docs/design/decisions.md, "The memory guard"): an asynchronous exception is raised
only when the main thread next runs Python bytecode, so a cell inside one long C call (a single
``np.ones`` of 10 GiB) is stopped after that call returns, if the OOM killer has not acted first.

A false reading must never stop a cell: the guard reads RSS (``/proc/self/statm``), never the
cgroup's usage, which counts page cache; it acts only on two consecutive readings past a level
(the second :data:`CONFIRM_S` after the first), only while a cell runs, only when that cell
itself grew by :data:`GROWTH_BYTES` or more (a kernel already near the limit can still run
``del x``), and at most once per cell.

Each reading also goes to the kernel's post-mortem record (:mod:`kerasmagic.postmortem`).
"""

from __future__ import annotations

import ctypes
import logging
import math
import numbers
import os
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from .cell_numbers import running_cell_number
from .errors import KerasMagicUsageError, KernelMemoryLimitError
from .leak_watch import _first_line
from .limits import MemoryLimit, memory_limit
from .probes.process import rss_bytes
from .tables import format_bytes

__all__ = ['CONFIRM_S', 'ENV_VAR', 'FAST_PCT', 'GROWTH_BYTES', 'THREAD_NAME', 'GuardSettings', 'MemoryGuard',
           'active_guard', 'assess', 'memory_guard', 'start', 'stop']

logger = logging.getLogger(__name__)

THREAD_NAME = "kerasmagic-guard"
#: ``KERASMAGIC_MEMORY_GUARD=off`` starts kernels with the guard off.
ENV_VAR = "KERASMAGIC_MEMORY_GUARD"
#: Above this share of the limit the guard reads ten times a second.
FAST_PCT = 75.0
SLOW_INTERVAL_S = 1.0
FAST_INTERVAL_S = 0.1
#: The confirming second reading comes this soon after a first one past the stop level: a
#: cell growing 64 MiB a step must not take its next step before the guard acts.
CONFIRM_S = 0.05
#: A cell must have grown by this much to be warned about or stopped.
GROWTH_BYTES = 16 * 2**20


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


def _initial_settings() -> GuardSettings:
    return GuardSettings(enabled=os.environ.get(ENV_VAR, "").strip().lower() not in ("off", "0", "false", "no"))


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


@dataclass
class _Cell:
    """The cell running now, as pre_run_cell saw it (read by the guard thread)."""

    number: int | None
    first_line: str
    start_rss: int
    parent: dict[str, Any] | None
    warned: bool = False
    fired: bool = False


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
        self.readings = 0
        self.fired = 0
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
                         start_rss=rss_bytes(), parent=parent if isinstance(parent, dict) else None)
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
            error = getattr(result, "error_in_exec", None)
            if not isinstance(error, KernelMemoryLimitError):
                # The cell ended before the exception was raised: withdraw it, it must not land
                # in IPython's own code or the next cell.
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
        rss = limit.rss_bytes
        self.last_limit = limit
        self.readings += 1
        cell = self._cell
        settings = _settings
        level = assess(rss, limit.limit_bytes, settings, None if cell is None else rss - cell.start_rss)
        self.level = level
        if self.record is not None:
            self.record.sample(time.time(), rss, limit.to_dict(), near=level != "ok")
        if level == "stop" and cell is not None:
            if self._past_stop and not cell.fired:
                if not cell.warned:
                    # Memory that grows faster than the readings can jump past the warning band
                    # (seen in CI under load): the warning, with what grew, still comes first.
                    cell.warned = True
                    self._warn(cell, limit)
                self._interrupt(cell, limit)
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

    # ---- acting --------------------------------------------------------------------------------------
    def _growth_words(self, cell: _Cell, limit: MemoryLimit) -> str:
        label = f"cell [{cell.number}]" if cell.number is not None else "the running cell"
        return f"{label} grew {format_bytes(limit.rss_bytes - cell.start_rss, signed=True)}"

    def _warn(self, cell: _Cell, limit: MemoryLimit) -> None:
        settings = _settings
        text = (f"kerasmagic: memory at {format_bytes(limit.rss_bytes)} of a {format_bytes(limit.limit_bytes)} limit "
                f"({limit.used_pct:.0f} %, {limit.where}); {self._growth_words(cell, limit)} so far. At "
                f"{settings.stop_pct:g} % the guard stops the cell (%tf_mem --guard off to let it run).")
        self._emit(cell, text)

    def _main_thread_in_cell(self) -> bool:
        """Whether the main thread is inside the cell's code now (below IPython's run_code), not in
        IPython's own code before or after it: only there may the exception land."""
        frame = sys._current_frames().get(self._main_ident)
        top = frame
        while frame is not None:
            if frame.f_code in self._run_code:
                return frame is not top
            frame = frame.f_back
        return False

    def _interrupt(self, cell: _Cell, limit: MemoryLimit) -> None:
        if self._cell is not cell or not self._main_thread_in_cell():
            return  # the cell is ending: nothing to stop
        settings = _settings
        label = f"cell [{cell.number}]" if cell.number is not None else "the running cell"
        message = (f"{label} was stopped by kerasmagic's memory guard at {format_bytes(limit.rss_bytes)} of a "
                   f"{format_bytes(limit.limit_bytes)} limit ({limit.used_pct:.0f} % ≥ {settings.stop_pct:g} %; "
                   f"{limit.where}); it grew {format_bytes(limit.rss_bytes - cell.start_rss, signed=True)}. The kernel "
                   "and your variables are intact: free memory (del, %clear_tf), raise the limit (%tf_mem --limit), "
                   "or switch the guard off (%tf_mem --guard off).")
        KernelMemoryLimitError.arm(message, cell=cell.number, rss_bytes=limit.rss_bytes,
                                   limit_bytes=limit.limit_bytes)
        cell.fired = True
        self.fired += 1
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main_ident),
                                                   ctypes.py_object(KernelMemoryLimitError))

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


_guard: MemoryGuard | None = None


def active_guard() -> MemoryGuard | None:
    """The guard ``%load_ext kerasmagic`` started in this kernel, or None.

    Example:
        >>> active_guard() is None       # in a plain Python process
        True
    """
    return _guard


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

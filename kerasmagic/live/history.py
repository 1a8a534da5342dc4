"""What the kernel remembers for the sidebar's timeline: samples, cell runs and marks.

A page reload (or a second tab) opens a new comm and would start from an empty chart; the
protocol's ``history`` message (1.3) gives it the last 15 minutes back, and a panel shown again
after it was hidden gets the samples it missed. The kernel samples from ``%load_ext`` on, whether
or not anyone looks (1 Hz then), so the record has no blind spots: where it has a hole, the
kernel could not sample (busy in C code holding the GIL, stopped, or dead), and the sidebar
draws a gap there. Everything here is bounded: the last :data:`KEEP_SAMPLES` samples, the last
:data:`KEEP_RUNS` cell runs (each with its RSS at start and end and its peak, since 1.5) and the
last :data:`KEEP_MARKS` marks. The sampler thread, the main thread and (with
kernel subshells) a subshell thread all touch it, so every access holds one lock, and a
reader gets copies.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

__all__ = ["KEEP_MARKS", "KEEP_RUNS", "KEEP_SAMPLES", "SEND_SAMPLES", "WINDOW_S", "KernelHistory"]

#: How far back ``history`` reaches.
WINDOW_S = 15 * 60.0
#: Samples kept: 15 minutes at 2 a second. At a faster interval the window is shorter.
KEEP_SAMPLES = 1800
#: At most this many samples go into one ``history`` message (evenly thinned, the newest kept):
#: 15 minutes at 1 Hz, about 350 KB of JSON.
SEND_SAMPLES = 900
#: Cell runs kept (the sidebar keeps as many).
KEEP_RUNS = 500
#: Marks (clear_tf, fresh_model, ...) kept.
KEEP_MARKS = 100


class KernelHistory:
    """Bounded, thread-safe memory of samples, cell runs and marks, on the kernel's clock.

    Example:
        >>> history = KernelHistory()
        >>> run = history.run_started(execution_count=3, cell_id="c-1", ts=100.0)
        >>> history.run_ended(run, ok=False, ts=102.5)["status"]
        'error'
        >>> history.add_mark("clear_tf", 101.0)
        >>> message = history.message(now=110.0)
        >>> message["method"], message["cell_runs"][0]["ended_ts"], message["marks"]
        ('history', 102.5, [{'kind': 'clear_tf', 'ts': 101.0}])
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[dict[str, Any]] = deque(maxlen=KEEP_SAMPLES)
        self._runs: deque[dict[str, Any]] = deque(maxlen=KEEP_RUNS)
        self._marks: deque[dict[str, Any]] = deque(maxlen=KEEP_MARKS)

    def add_sample(self, sample: dict[str, Any]) -> None:
        """Keep a ``sample`` message as it was sent (it is never changed afterwards)."""
        with self._lock:
            self._samples.append(sample)

    def run_started(self, execution_count: int | None, cell_id: str | None, ts: float | None = None,
                    **figures: Any) -> dict[str, Any]:
        """Record a cell's start (with its memory ``figures``: ``rss_start_bytes``); returns the
        run (pass it to :meth:`run_ended`)."""
        run = {"execution_count": execution_count, "cell_id": cell_id,
               "started_ts": time.time() if ts is None else ts, "ended_ts": None, "status": "running",
               **figures}
        with self._lock:
            self._runs.append(run)
        return dict(run)

    def run_ended(self, run: dict[str, Any], ok: bool, ts: float | None = None, **figures: Any) -> dict[str, Any]:
        """Record the end of ``run`` (what :meth:`run_started` returned) with its memory
        ``figures`` (``rss_end_bytes``, ``peak_rss_bytes``, ...); returns the ended run."""
        ended = dict(run, **figures, ended_ts=time.time() if ts is None else ts, status="ok" if ok else "error")
        with self._lock:
            # Replaced, not changed in place: a reader's copy of the list stays as it was.
            for index in range(len(self._runs) - 1, -1, -1):
                known = self._runs[index]
                if known["started_ts"] == run["started_ts"] and known["execution_count"] == run["execution_count"]:
                    self._runs[index] = ended
                    break
        return dict(ended)

    def ended_ts(self, execution_count: int | None) -> float | None:
        """When the last run of cell ``execution_count`` ended (None: not seen ending).

        Example:
            >>> history = KernelHistory()
            >>> _ = history.run_ended(history.run_started(3, None, ts=4.0), ok=True, ts=5.0)
            >>> history.ended_ts(3), history.ended_ts(4)
            (5.0, None)
        """
        with self._lock:
            ended = [r["ended_ts"] for r in self._runs
                     if r["execution_count"] == execution_count and r["ended_ts"] is not None]
        return ended[-1] if ended else None

    def highest_rss_between(self, start_ts: float, end_ts: float) -> int | None:
        """The highest ``rss_bytes`` of the samples taken from ``start_ts`` to ``end_ts``."""
        with self._lock:
            values = [s["rss_bytes"] for s in self._samples
                      if start_ts <= s.get("ts", 0) <= end_ts and isinstance(s.get("rss_bytes"), int)]
        return max(values, default=None)

    def add_mark(self, kind: str, ts: float) -> None:
        """Mark a moment on the timeline (``clear_tf``, ``fresh_model``, ...)."""
        with self._lock:
            self._marks.append({"kind": kind, "ts": ts})

    def message(self, now: float | None = None, after_ts: float | None = None) -> dict[str, Any]:
        """The protocol's ``history`` message: the last :data:`WINDOW_S` seconds, oldest first;
        only the samples newer than ``after_ts`` where given (what a frontend does not have)."""
        now = time.time() if now is None else now
        since = now - WINDOW_S
        with self._lock:
            samples = [s for s in self._samples
                       if s.get("ts", 0) >= since and (after_ts is None or s.get("ts", 0) > after_ts)]
            runs = [dict(r) for r in self._runs
                    if (r["ended_ts"] is None or r["ended_ts"] >= since)]
            marks = [dict(m) for m in self._marks if m["ts"] >= since]
        return {"method": "history", "ts": now, "samples": _thin(samples, SEND_SAMPLES),
                "cell_runs": runs, "marks": marks}


def _thin(items: list[Any], limit: int) -> list[Any]:
    """At most ``limit`` of ``items``, evenly spread, the newest always kept.

    Example:
        >>> _thin(list(range(10)), 4)
        [0, 3, 6, 9]
        >>> _thin([1, 2], 4)
        [1, 2]
    """
    if len(items) <= limit:
        return items
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]

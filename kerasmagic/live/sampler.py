"""The background sampler: process, TensorFlow-allocator and NVML numbers on a schedule.

It runs in its own daemon thread because messages from a frontend wait behind a running
cell: only a push from another thread keeps the sidebar live during ``fit()``. It reads only
thread-safe sources (Keras facts are thread-local and are read on the main thread instead).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..guard import limit_state
from ..probes import tensorflow as tf_probe
from ..probes.availability import Unavailable, guarded, to_jsonable
from ..probes.process import host_memory, process_tree_memory
from ..probes.sample import gpu_allocator_parts, gpu_context_part, memory_sample

__all__ = ["THREAD_NAME", "CpuMeter", "ProcessTreeMeter", "Sampler", "take_sample"]

THREAD_NAME = "kerasmagic-live-sampler"

#: Readings closer together than this give no new CPU figure (a sample taken on open right
#: before a scheduled one would measure a few milliseconds: noise, not load).
_MIN_CPU_WINDOW_S = 0.1


class CpuMeter:
    """This process's CPU use between two readings, in percent of one core (all threads).

    ``time.process_time()`` over ``time.monotonic()``: under a microsecond per reading, where
    psutil's ``cpu_percent`` costs about 50 µs. The first reading after :meth:`reset` has
    nothing to compare with and is unavailable.

    Example:
        >>> meter = CpuMeter()
        >>> meter.read().reason
        'not_started'
        >>> _ = sum(range(10**6)); time.sleep(0.2)
        >>> meter.read() >= 0
        True
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None
        self._value: float | Unavailable = self._first()

    @staticmethod
    def _first() -> Unavailable:
        return Unavailable("not_started", "the first sample has no previous one to measure CPU use against")

    def reset(self) -> None:
        """Forget the previous reading: after a long sleep an average over it would mislead."""
        with self._lock:
            self._last = None
            self._value = self._first()

    def read(self) -> float | Unavailable:
        wall, cpu = time.monotonic(), time.process_time()
        with self._lock:
            if self._last is None:
                self._last = (wall, cpu)
                return self._value
            elapsed = wall - self._last[0]
            if elapsed < _MIN_CPU_WINDOW_S:
                return self._value  # too short to say anything new; keep the baseline
            self._value = round(max(0.0, 100 * (cpu - self._last[1]) / elapsed), 2)
            self._last = (wall, cpu)
            return self._value


class ProcessTreeMeter:
    """The kernel's PSS and its child processes' RSS and PSS (a sample's ``process_tree``,
    protocol 1.6), read seldom and carried over in between.

    PSS makes Linux walk the page tables (about 15 ms for a 1.2 GiB process with TensorFlow;
    RSS is 10 µs): the meter reads at most every :attr:`MIN_INTERVAL_S`, and less often where
    a read costs more, so that on schedule it takes at most :attr:`CPU_SHARE` of one core. Each
    reading carries its own ``ts``; a sample carries it with ``stale`` (whether the meter still
    counts it as describing the process: the sidebar gives the age of a stale one, and has no
    rule of its own) and ``period_s`` (:meth:`for_sample`). A reading that has become
    wrong is taken again sooner (at most every :attr:`STALE_REREAD_S`, and within
    :attr:`STALE_CPU_SHARE` of one core: a map whose short jobs end every second must not have
    the tree walked every second), whatever the schedule:
    when a child it counted has exited (six children's 1.57 GiB stayed on the panel for over
    3 minutes after they ended, issue 31 item 3) or when RSS moved by :attr:`JUMP_BYTES` and
    :attr:`JUMP_SHARE` since (a PSS of 1.05 GiB beside an RSS of 66.5 MiB).

    Example:
        >>> meter = ProcessTreeMeter()
        >>> first = meter.read(); first is meter.read()      # the second is carried over
        True
        >>> sorted(first)                                    # doctest: +SKIP
        ['children_count', 'children_pss_bytes', 'children_rss_bytes', 'pss_bytes', 'ts']
    """

    MIN_INTERVAL_S = 5.0
    #: The soonest a wrong reading is taken again ...
    STALE_REREAD_S = 1.0
    #: ... and the most of one core such re-reads may take (ten times the schedule's share).
    STALE_CPU_SHARE = 0.005
    #: RSS moved by both of these since the reading: its PSS no longer describes the process.
    JUMP_BYTES = 64 * 2**20
    JUMP_SHARE = 0.1
    #: 0.05 % of one core at most: the sampler's whole budget is 0.1 % (bench_sampler.py).
    CPU_SHARE = 0.0005

    def __init__(self, read: Callable[[], Any] = process_tree_memory) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._value: dict[str, Any] | None = None
        self._read_at = -float("inf")
        self._next_due = 0.0
        self._child_pids: list[int] = []
        self._cost_s = 0.0
        self._period_s = self.MIN_INTERVAL_S

    def read(self, rss_bytes: int | None = None) -> dict[str, Any] | None:
        """The latest reading, taken now if it is due or has become wrong (``rss_bytes``: the
        process's RSS now, to tell a jump)."""
        with self._lock:
            return self._read_locked(rss_bytes)

    def _read_locked(self, rss_bytes: int | None) -> dict[str, Any] | None:
        """:meth:`read`, with the lock held."""
        now = time.monotonic()
        due = self._value is None or now >= self._next_due
        soonest = max(self.STALE_REREAD_S, self._cost_s / self.STALE_CPU_SHARE)
        if due or (now - self._read_at >= soonest and self._stale(rss_bytes)):
            started = time.perf_counter()
            value = to_jsonable(guarded(self._read, "reading PSS and child processes"))
            cost = self._cost_s = time.perf_counter() - started
            # No reading, no children to watch: a pid gone since must not make every sample re-read.
            self._child_pids = []
            if isinstance(value, dict) and value.get("status") != "unavailable":
                pids = value.pop("child_pids", [])
                self._child_pids = [pid for pid in pids if isinstance(pid, int)]
                value = {"ts": time.time(), **value}
            self._value = value
            self._read_at = now
            self._period_s = max(self.MIN_INTERVAL_S, cost / self.CPU_SHARE)
            self._next_due = now + self._period_s
        return self._value

    def for_sample(self, rss_bytes: int | None = None) -> dict[str, Any] | None:
        """The latest reading (:meth:`read`) as a sample carries it: with ``stale``, whether it
        no longer describes the process (a child it counted is gone, or RSS jumped, and the
        re-read waits for its CPU share), and ``period_s``, its reading period now.

        Example:
            >>> reading = ProcessTreeMeter().for_sample()
            >>> reading["stale"], reading["period_s"] >= ProcessTreeMeter.MIN_INTERVAL_S
            (False, True)
        """
        # One locked section: the sampler thread and a sidebar's own request both read, and a
        # reading must go out with its own staleness, not the next one's.
        with self._lock:
            value = self._read_locked(rss_bytes)
            if not isinstance(value, dict) or value.get("status") == "unavailable":
                return value
            return {**value, "stale": self._stale(rss_bytes), "period_s": round(self._period_s, 1)}

    def _stale(self, rss_bytes: int | None) -> bool:
        """Whether the last reading no longer holds: a child it counted is gone, or RSS jumped."""
        if any(not os.path.exists(f"/proc/{pid}") for pid in self._child_pids):
            return True
        was = self._value.get("rss_bytes") if isinstance(self._value, dict) else None
        if not isinstance(rss_bytes, int) or not isinstance(was, int):
            return False
        moved = abs(rss_bytes - was)
        return moved >= self.JUMP_BYTES and moved >= self.JUMP_SHARE * max(was, 1)

    def refresh_soon(self) -> None:
        """Make the next read a fresh one, unless the last is younger than
        :attr:`MIN_INTERVAL_S` (a sidebar just shown wants current figures)."""
        with self._lock:
            self._next_due = min(self._next_due, self._read_at + self.MIN_INTERVAL_S)


def take_sample(seq: int, cpu: CpuMeter | None = None, tree: ProcessTreeMeter | None = None) -> dict[str, Any]:
    """One ``sample`` message (see docs/reference/protocol.md), with ``host`` and, given a meter,
    ``cpu_pct`` (protocol 1.3), ``torch`` / ``jax`` for the frameworks imported (1.4),
    given a tree meter, ``process_tree`` (1.6), and ``gpu_context`` where NVML's figure has a
    framework's pool to subtract (1.7); never raises.

    Example:
        >>> sample = take_sample(1, CpuMeter())
        >>> sample["method"], sample["rss_bytes"] > 0, sample["host"]["total_bytes"] > 0
        ('sample', True, True)
        >>> sample["cpu_pct"]["reason"]
        'not_started'
    """
    started = time.perf_counter()
    message = {"method": "sample", "seq": seq, **memory_sample(), **gpu_allocator_parts()}
    context = guarded(lambda: gpu_context_part(message), "estimating the CUDA context")
    if isinstance(context, dict):  # since 1.7, only where there is a pool to subtract from NVML's figure
        message["gpu_context"] = context
    if cpu is not None:
        message["cpu_pct"] = to_jsonable(guarded(cpu.read, "reading CPU time"))
    message["host"] = to_jsonable(guarded(host_memory, "reading host memory"))
    # The limit that bites and the guard's state (issue 33, item 7): a kernel at 96 % of its cgroup
    # must not look like one on a host with 19 GiB free.
    message["memory_limit"] = to_jsonable(guarded(limit_state, "reading the memory limit"))
    # Lesson 6's story is the registry growing by 2 per trial inside one cell: a count per sample, so
    # the chart can draw it. ``list(dict)`` copies under the GIL, so this thread reads a consistent key set.
    entries = (guarded(tf_probe.custom_gradient_entries, "counting CustomGradient entries")
               if tf_probe.module() else None)
    if isinstance(entries, int):
        message["custom_gradient_entries"] = entries
    if tree is not None:
        rss = message.get("rss_bytes")
        message["process_tree"] = tree.for_sample(rss if isinstance(rss, int) else None)
    message["sample_cost_s"] = time.perf_counter() - started
    return message


class Sampler:
    """Calls ``send(sample)`` every ``interval_s`` while active, from a named daemon thread.

    Ticks are scheduled on deadlines (``t0 + k * interval``) so the rate does not drift by
    the cost of a sample; a tick that is already late is skipped rather than bursted. While
    inactive the thread waits on a condition with no timeout: no wake-ups, no CPU.

    Example:
        >>> got = []
        >>> sampler = Sampler(got.append, interval_s=0.1)
        >>> sampler.set_active(True)
        >>> while len(got) < 3:   # three ticks, however long a loaded machine takes
        ...     time.sleep(0.05)
        >>> sampler.stop(); [sample["seq"] for sample in got[:3]]
        [1, 2, 3]
    """

    def __init__(self, send: Callable[[dict[str, Any]], None], interval_s: float = 1.0) -> None:
        self._send = send
        self._interval_s = float(interval_s)
        self._cond = threading.Condition()
        self._active = False
        self._stopping = False
        self._seq = 0
        self._seq_lock = threading.Lock()
        self._next_due = 0.0
        self.cpu = CpuMeter()
        self.tree = ProcessTreeMeter()
        #: Whether samples carry ``process_tree``: only while someone looks (the record with
        #: no panel open does not pay for PSS).
        self.tree_wanted = False
        self.errors = 0
        self.last_error = ""
        self._thread: threading.Thread | None = None

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @property
    def active(self) -> bool:
        """True while sampling is wanted (a visible listener); False while the thread sleeps."""
        return self._active

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()

    def set_active(self, active: bool) -> None:
        """Start (or wake) sampling, or put the thread to sleep without a timeout."""
        with self._cond:
            if active and not self._active:
                self._next_due = time.monotonic()
                self.cpu.reset()
            self._active = active
            if active:
                self._ensure_thread()
            self._cond.notify_all()

    def set_interval(self, interval_s: float) -> None:
        with self._cond:
            self._interval_s = float(interval_s)
            self._next_due = min(self._next_due, time.monotonic() + self._interval_s)
            self._cond.notify_all()

    def take(self) -> dict[str, Any]:
        """Take one sample outside the schedule (e.g. right after a clear), numbered in order."""
        return dict(take_sample(self._next_seq(), self.cpu, self._tree()), interval_s=self._interval_s)

    def _tree(self) -> ProcessTreeMeter | None:
        return self.tree if self.tree_wanted else None

    def _next_seq(self) -> int:
        with self._seq_lock:
            self._seq += 1
            return self._seq

    def _deliver(self, sample: dict[str, Any]) -> None:
        try:
            self._send(sample)
        except Exception as exc:  # noqa: BLE001 - a broken comm must not kill the sampler
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._active:
                    self._cond.wait()
                if self._stopping:
                    return
                delay = self._next_due - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue  # re-check stop/active/deadline: we may have been woken early
                interval = self._interval_s
            # The interval it was taken at (1.5): a longer silence before it is a gap.
            self._deliver(dict(take_sample(self._next_seq(), self.cpu, self._tree()), interval_s=interval))
            with self._cond:
                now = time.monotonic()
                self._next_due += interval
                if self._next_due <= now:
                    self._next_due = now + interval

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop and join the thread; afterwards no kerasmagic sampler thread is left."""
        with self._cond:
            self._stopping = True
            self._active = False
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._thread = None

"""The kernel end of the ``kerasmagic.live`` comm channel (contract: docs/reference/protocol.md).

``%load_ext kerasmagic`` calls :func:`register`; inside an ipykernel it registers the comm
target, an IPython ``post_run_cell`` hook and an event subscription. Outside a kernel (plain
IPython, scripts) it does nothing: ``comm.create_comm`` there returns a dummy that talks to
no one. :func:`unregister` undoes all of it and joins the sampler thread.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import events, leak_watch
from .._version import __version__
from ..cell_numbers import running_cell_number
from ..compat import kernel_comm_manager
from ..probes import Unavailable, nvml, process, to_jsonable
from ..probes import tensorflow as tf_probe
from ..registry_purge import entries_pin_graphs
from . import jobs as isolated_jobs
from .history import KernelHistory
from .protocol import (
    PROTOCOL_VERSION,
    TARGET_NAME,
    ProtocolError,
    check_version,
    echo,
    shorten,
    speaks_at_least,
    validate,
)
from .sampler import Sampler

__all__ = ["register", "unregister", "active_channel", "LiveChannel"]

logger = logging.getLogger(__name__)

#: An error reply's ``message`` never exceeds this many characters (plus the length note).
_MESSAGE_LIMIT = 500

#: The protocol minor version that added the ``isolated_*`` messages.
_JOBS_MINOR = 1
#: The protocol minor version that added the ``cell_growth`` message (the leak watch).
_CELLS_MINOR = 2
#: The protocol minor version that added ``cell_run`` and ``history`` (the timeline).
_TIMELINE_MINOR = 3
#: The protocol minor version that added ``postmortem`` (why the previous kernel died).
_POSTMORTEM_MINOR = 5

#: How often the kernel samples while no panel or view looks: the record a panel replays when it
#: opens or is shown again has no blind spots, at about 0.04 % of a core with TensorFlow running
#: (``benchmarks/bench_sampler.py``, 2-core Xeon). A panel that looks may ask for a faster interval.
RECORD_INTERVAL_S = 1.0

_channel: LiveChannel | None = None


def _comm_manager(shell):
    # Looked up at call time: ipykernel swaps comm.get_comm_manager in when it starts, and
    # ipykernel < 6.18 has its own manager (compat).
    return kernel_comm_manager(shell.kernel)


def _in_kernel(shell) -> bool:
    return getattr(shell, "kernel", None) is not None


def _last_cell(shell) -> int:
    """The number of the cell that ran last, as ``In[n]`` numbers it (0: none yet).

    IPython has counted ``execution_count`` on by the time ``post_run_cell`` and comm
    handlers run (9.x counts it up as a cell starts): it is already the next cell's number.
    """
    return max(int(getattr(shell, "execution_count", 1) or 1) - 1, 0)


def _facts(shell) -> dict[str, Any]:
    """The protocol's ``facts`` message from the core's main-thread ``session_facts``."""
    # The core's reports load with the first look, as the magics load them: %load_ext stays fast.
    from ..snapshot import session_facts  # noqa: PLC0415

    facts = session_facts(shell)
    keras = facts.get("keras") or {}
    graph = facts.get("tensorflow_graph") or {}
    not_imported = graph.get("status")
    models = []
    for model in facts.get("models") or []:
        models.append(
            {
                "name": str(model.get("name", "?")),
                "class": str(model.get("class", "?")),
                "weight_bytes": model.get("weight_bytes"),
                "optimizer_bytes": model.get("optimizer_bytes"),
                "held_by": [h.get("where", "?") for h in model.get("holders") or []],
            }
        )
    counters = keras.get("name_counters")
    return to_jsonable(
        {
            "method": "facts",
            "ts": time.time(),
            "execution_count": _last_cell(shell),
            "tf_status": tf_probe.status(),
            "keras_status": keras.get("status", "unknown"),
            "graph_op_count": graph.get("graph_op_count", not_imported),
            "custom_gradient_entries": graph.get("custom_gradient_entries", not_imported),
            "custom_gradients_pin_graphs": entries_pin_graphs(),
            "name_counters": counters if isinstance(counters, dict) else {},
            "live_models": models,
        }
    )


class LiveChannel:
    """All frontends listening to one kernel, and the sampler that feeds them.

    Example:
        >>> channel = LiveChannel(get_ipython())      # doctest: +SKIP
        >>> channel.listener_count, channel.visible_count   # doctest: +SKIP
        (0, 0)
    """

    def __init__(self, shell, interval_s: float = 1.0) -> None:
        self.shell = shell
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._listeners: dict[str, dict[str, Any]] = {}  # comm_id -> {"comm", "visible", "jobs"}
        # In-kernel views (``%tf_mem --live``): always visible while registered.
        self._local: dict[int, Callable[[dict[str, Any]], None]] = {}
        # Targets whose failure was logged already: the sampler broadcasts every interval, and
        # a dead frontend must not print a traceback per tick into the notebook.
        self._failing: set[Any] = set()
        #: Samples, cell runs and marks of the last minutes, for a sidebar that attaches later.
        self.history = KernelHistory()
        # The runs begun in pre_run_cell and not ended yet (a cell can run a cell: a stack), each
        # with the kernel's high-water mark at its start.
        self._running: list[tuple[dict[str, Any], int | None]] = []
        #: The last ``facts`` read on the main thread: what a comm opened on another thread
        #: (a kernel subshell, while a cell runs) gets until the main thread is free again.
        self.last_facts: dict[str, Any] | None = None
        #: The interval the frontends asked for, used while one of them looks.
        self._view_interval_s = float(interval_s)
        self._recording = False
        self.sampler = Sampler(self._on_sample, interval_s=max(interval_s, RECORD_INTERVAL_S))
        #: Isolated jobs (running and the last few finished), kept for sidebars that attach later.
        self.isolated = isolated_jobs.IsolatedJobs()
        self._unsubscribe = events.subscribe(self._on_event)
        #: The ``postmortem`` message of this notebook's previous kernel, if it died: every
        #: sidebar that attaches to this kernel gets it.
        self.previous_death: dict[str, Any] | None = None

    # ---- bookkeeping ------------------------------------------------------------------
    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    @property
    def view_count(self) -> int:
        """In-kernel views (``add_listener``) registered now; ``%tf_mem --live`` keeps at most one."""
        return len(self._local)

    @property
    def visible_count(self) -> int:
        return sum(1 for entry in self._listeners.values() if entry["visible"]) + len(self._local)

    def add_listener(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Feed ``callback`` every message the frontends get; returns the function that stops it.

        While at least one listener is registered the sampler runs, as for a visible sidebar.

        Example:
            >>> stop = active_channel().add_listener(print)   # doctest: +SKIP
            >>> stop()                                        # doctest: +SKIP
        """
        key = id(callback)
        with self._lock:
            self._local[key] = callback
        self._update_sampler()

        def remove() -> None:
            with self._lock:
                self._local.pop(key, None)
            self._failing.discard(("view", key))
            self._update_sampler()

        return remove

    def note_previous_death(self, message: dict[str, Any]) -> None:
        """Keep the ``postmortem`` message for sidebars that attach later, and send it to those
        attached now.

        Example:
            >>> active_channel().note_previous_death({"method": "postmortem", "ts": 1.0, "died_ts": 0.5,
            ...                                       "execution_count": 12, "text": "..."})   # doctest: +SKIP
        """
        death = to_jsonable(message)
        # Decided under the lock with `_open`'s own check: a sidebar whose open a subshell serves
        # while `%load_ext` runs here on the main thread may have looked for a death just before
        # this one was known (its open then missed it, and the broadcast skipped it as not ready).
        with self._lock:
            self.previous_death = death
            entries = [entry for entry in self._listeners.values()
                       if entry.get("postmortem_due") and entry.get("postmortem_sent") is not death]
            for entry in entries:
                entry["postmortem_sent"] = death
            local = list(self._local.items())
        self._feed_local_views(local, death)
        self._send_to_each([entry["comm"] for entry in entries], death)

    def start_recording(self) -> None:
        """Sample from now on whether or not anyone looks (what ``%load_ext`` does).

        Example:
            >>> active_channel().start_recording()   # doctest: +SKIP
        """
        self._recording = True
        self._update_sampler()

    @property
    def looking(self) -> bool:
        """True while a visible sidebar or an in-kernel view follows the samples."""
        return self.visible_count > 0

    def _update_sampler(self) -> None:
        # The panel's interval while someone looks; the record's (never faster) otherwise.
        looking = self.looking
        interval = self._view_interval_s if looking else max(self._view_interval_s, RECORD_INTERVAL_S)
        if interval != self.sampler.interval_s:
            self.sampler.set_interval(interval)
        if looking and not self.sampler.tree_wanted:
            self.sampler.tree.refresh_soon()
        self.sampler.tree_wanted = looking
        self.sampler.set_active(self._recording or looking)

    def _send(self, comm, data: dict[str, Any], metadata: dict | None = None) -> None:
        # The sampler thread, the main thread and event publishers all send: one at a time.
        with self._send_lock:
            comm.send(data=data, metadata=metadata)

    def _targets(self, visible_only: bool, feature: str | None = None) -> list[Any]:
        """The comms a pushed message goes to; call with ``self._lock`` held."""
        return [e["comm"] for e in self._listeners.values()
                if e["ready"] and (feature is None or e.get(feature)) and (e["visible"] or not visible_only)]

    def broadcast(self, data: dict[str, Any], visible_only: bool = True) -> None:
        with self._lock:
            targets = self._targets(visible_only)
            local = list(self._local.items())
        self._feed_local_views(local, data)
        self._send_to_each(targets, data)

    def _feed_local_views(self, local: list[tuple[int, Callable[[dict[str, Any]], None]]],
                          message: dict[str, Any]) -> None:
        for key, callback in local:
            try:
                callback(message)
            except Exception:  # noqa: BLE001 - a broken view must not starve the sidebar
                self._log_failure(("view", key), "an in-kernel live view %r failed", callback)

    def _send_to_each(self, targets: list[Any], message: dict[str, Any]) -> None:
        """Send to every frontend comm; one that fails is logged, the others still get it."""
        for comm in targets:
            try:
                self._send(comm, message)
            except Exception:  # noqa: BLE001 - one dead frontend must not starve the others
                self._log_failure(("comm", getattr(comm, "comm_id", id(comm))),
                                  "sending to frontend comm %s failed", getattr(comm, "comm_id", "?"))

    def _log_failure(self, key: Any, what: str, *args: Any) -> None:
        """Log a failing broadcast target with its traceback: a warning the first time, then debug."""
        if key in self._failing:
            logger.debug("kerasmagic.live: " + what + " again", *args, exc_info=True)
            return
        self._failing.add(key)
        logger.warning("kerasmagic.live: " + what + "; the other listeners still get messages",
                       *args, exc_info=True)

    def _error(self, comm, exc: ProtocolError) -> None:
        message = {
            "method": "error",
            "code": exc.code,
            "message": shorten(str(exc), _MESSAGE_LIMIT),
            "ts": time.time(),
        }
        if exc.request_method:
            message["request_method"] = exc.request_method  # ProtocolError cut it already
        self._send(comm, message)

    # ---- comm callbacks -----------------------------------------------------------------
    def on_open(self, comm, msg: dict[str, Any]) -> None:
        """The comm target's callback: never raises (ipykernel would close the comm silently,
        which a sidebar reads as "extension not loaded")."""
        try:
            self._open(comm, msg)
        except Exception as exc:  # a bug here answers, it never escapes
            logger.exception("kerasmagic.live: opening comm %s failed", getattr(comm, "comm_id", "?"))
            self._fail_open(comm, exc)

    def _fail_open(self, comm, exc: Exception) -> None:
        try:
            self._error(comm, ProtocolError(
                "bad_message", f"opening the channel failed: {type(exc).__name__}: {shorten(str(exc))}", "open"))
        except Exception:
            logger.warning("kerasmagic.live: could not send the error reply", exc_info=True)
        if getattr(comm, "comm_id", None) in self._listeners:
            return  # subscribed already: the comm works, only a push failed
        try:
            comm.close(data={"reason": "error"})
        except Exception:
            logger.warning("kerasmagic.live: could not close the failed comm", exc_info=True)

    def _open(self, comm, msg: dict[str, Any]) -> None:
        content = msg.get("content")
        content = content if isinstance(content, dict) else {}
        metadata = msg.get("metadata")
        # Metadata that is not an object carries no version: refused like a missing version.
        peer_version = metadata.get("protocol_version") if isinstance(metadata, dict) else None
        try:
            check_version(peer_version)
        except ProtocolError as exc:
            self._error(comm, exc)
            comm.close(data={"reason": "protocol_mismatch"})
            return
        options: dict[str, Any] = {}
        try:
            options = _open_options(content.get("data"))
        except ProtocolError as exc:
            self._error(comm, exc)  # open anyway with defaults; the frontend logs the error
        with self._lock:
            self._listeners[comm.comm_id] = {
                "comm": comm,
                # Not a target of broadcasts until hello and history are out: a sample taken
                # meanwhile by the sampler thread must not reach the page before them.
                "ready": False,
                "visible": bool(options.get("visible", True)),
                # The newest sample this frontend has (by ts): shown again, it gets the rest.
                "sent_ts": None,
                # A 1.0 frontend does not know the isolated_* methods: it would log each one.
                "jobs": speaks_at_least(peer_version, _JOBS_MINOR),
                "cells": speaks_at_least(peer_version, _CELLS_MINOR),
                "timeline": speaks_at_least(peer_version, _TIMELINE_MINOR),
                "postmortem": speaks_at_least(peer_version, _POSTMORTEM_MINOR),
            }
        comm.on_msg(self.on_msg)
        comm.on_close(self.on_close)
        _route_as_addressed(comm)
        if "interval_s" in options:
            self._view_interval_s = float(options["interval_s"])
        self._send(
            comm,
            {
                "method": "hello",
                "protocol_version": PROTOCOL_VERSION,
                "package_version": _package_version(),
                "pid": _pid(),
                "interval_s": self._view_interval_s,
                "ts": time.time(),
            },
            metadata={"protocol_version": PROTOCOL_VERSION},
        )
        entry = self._listeners.get(comm.comm_id)
        if entry is not None and entry.get("timeline"):
            self._send_history(comm, entry)
        if entry is not None and entry.get("postmortem"):
            with self._lock:  # see note_previous_death: told exactly once, whichever comes first
                entry["postmortem_due"] = True
                death = self.previous_death
                if death is entry.get("postmortem_sent"):
                    death = None  # told already, by note_previous_death
                elif death is not None:
                    entry["postmortem_sent"] = death
            if death is not None:
                self._send(comm, death)
        self._push_now(comm)
        if entry is not None:
            entry["ready"] = True
        self._update_sampler()

    def _send_history(self, comm, entry: dict[str, Any]) -> None:
        """The record since what this frontend has (all of it on open), oldest first."""
        message = to_jsonable(self.history.message(after_ts=entry.get("sent_ts")))
        if message["samples"]:
            entry["sent_ts"] = message["samples"][-1]["ts"]
        self._send(comm, message)

    def on_msg(self, msg: dict[str, Any]) -> None:
        content: dict[str, Any] = msg.get("content") or {}
        comm_id = content.get("comm_id", "")  # "": no listener has it
        entry = self._listeners.get(comm_id)
        if entry is None:
            return
        comm = entry["comm"]
        try:
            data = validate(content.get("data"))
            self._dispatch(comm, entry, data)
        except ProtocolError as exc:
            self._error(comm, exc)
        except Exception as exc:  # a handler bug answers, it never kills the kernel
            logger.exception("kerasmagic.live: handling a message on comm %s failed", comm_id)
            self._error(comm, ProtocolError("bad_message", f"{type(exc).__name__}: {shorten(str(exc))}"))

    def _dispatch(self, comm, entry: dict[str, Any], data: dict[str, Any]) -> None:
        method = data["method"]
        if method == "visibility":
            shown = data["visible"] and not entry["visible"]
            entry["visible"] = data["visible"]
            self._update_sampler()
            if shown and entry.get("timeline"):
                # What the kernel recorded while the panel was hidden: drawn, not skipped.
                self._send_history(comm, entry)
            if data["visible"]:
                self._push_now(comm)
        elif method == "configure":
            self._view_interval_s = float(data["interval_s"])
            self._update_sampler()
        elif method == "refresh":
            self._push_now(comm)
        elif method == "clear":
            request_id = data["request_id"]
            # clear_tf changes Keras' per-thread state: only the main thread may run it (after
            # the running cell), whichever thread the request arrived on.
            self._on_main(lambda: self._clear(comm, request_id))
        elif method == "open":
            raise ProtocolError("bad_message", "this comm is already open", method)

    def on_close(self, msg: dict[str, Any]) -> None:
        content: dict[str, Any] = msg.get("content") or {}
        comm_id = content.get("comm_id", "")
        with self._lock:
            self._listeners.pop(comm_id, None)
        self._failing.discard(("comm", comm_id))
        self._update_sampler()

    # ---- threads ------------------------------------------------------------------------------
    @staticmethod
    def _on_main_thread() -> bool:
        return threading.current_thread() is threading.main_thread()

    def _on_main(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the kernel's main thread: now if we are on it, else as soon as it is
        free (ipykernel's main event loop runs it after the running cell)."""
        if self._on_main_thread():
            work()
            return
        loop = getattr(getattr(self.shell, "kernel", None), "io_loop", None)
        if loop is None:  # not an ipykernel we know; running it here is what 1.2 did
            work()
            return
        loop.add_callback(self._guarded, work)

    @staticmethod
    def _guarded(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # an exception here would land in the kernel's event loop log only
            logger.exception("kerasmagic.live: work handed to the main thread failed")

    # ---- pushes ---------------------------------------------------------------------------
    def _on_sample(self, sample: dict[str, Any]) -> None:
        """The sampler's tick: keep it for the history, send it to whoever looks."""
        self.history.add_sample(sample)
        self._note_sent(sample)
        self.broadcast(sample)

    def _note_sent(self, sample: dict[str, Any], comm_id: str | None = None) -> None:
        with self._lock:
            for key, entry in self._listeners.items():
                if (comm_id is None and entry["ready"] and entry["visible"]) or key == comm_id:
                    entry["sent_ts"] = max(entry["sent_ts"] or 0.0, sample["ts"])

    def _take_sample(self) -> dict[str, Any]:
        sample = self.sampler.take()
        self.history.add_sample(sample)
        return sample

    def _push_now(self, comm) -> None:
        """Facts, a sample, the isolated jobs and the leak watch, to one frontend.

        Off the main thread (a comm served by a kernel subshell while a cell runs) the facts are
        the last main-thread reading, as its ``execution_count`` and ``ts`` say, and fresh ones
        follow once the main thread is free.
        """
        on_main = self._on_main_thread()
        facts = self._facts_or_error() if on_main else self.last_facts
        if facts is not None:
            self._send(comm, facts)
        sample = self._take_sample()
        self._note_sent(sample, getattr(comm, "comm_id", None))
        self._send(comm, sample)
        entry = self._listeners.get(getattr(comm, "comm_id", ""))
        if entry is not None and entry.get("jobs"):
            self._send(comm, self.isolated.snapshot())
        cells = self._cell_growth() if entry is not None and entry.get("cells") else None
        if cells is not None:
            self._send(comm, cells)
        if not on_main:
            self._on_main(lambda: self._send_fresh_facts(comm))

    def _send_fresh_facts(self, comm) -> None:
        if getattr(comm, "comm_id", None) in self._listeners:  # still subscribed
            self._send(comm, self._facts_or_error())

    def messages_now(self) -> list[dict[str, Any]]:
        """A ``facts`` and a ``sample`` message taken now; call it on the main thread.

        Example:
            >>> [m["method"] for m in active_channel().messages_now()]   # doctest: +SKIP
            ['facts', 'sample']
        """
        return [self._facts_or_error(), self._take_sample()]

    def _facts_or_error(self) -> dict[str, Any]:
        """Facts read now, on the main thread (Keras keeps its state per thread); kept as
        :attr:`last_facts` for comms served on another thread."""
        facts = self._read_facts()
        # "as of cell [8]" gives the time [8] ran, not when these facts were read (issue 29, item 7).
        ended = self.history.ended_ts(facts.get("execution_count"))
        if ended is not None:
            facts["cell_ended_ts"] = ended
        self.last_facts = facts
        return facts

    def _read_facts(self) -> dict[str, Any]:
        try:
            return _facts(self.shell)
        except Exception as exc:  # noqa: BLE001 - facts are best effort; say why they are missing
            missing = Unavailable("error", f"reading session facts failed: {type(exc).__name__}: {exc}")
            return to_jsonable(
                {
                    "method": "facts",
                    "ts": time.time(),
                    "execution_count": _last_cell(self.shell),
                    "tf_status": missing,
                    "keras_status": missing,
                    "graph_op_count": missing,
                    "custom_gradient_entries": missing,
                    "name_counters": {},
                    "live_models": [],
                }
            )

    def pre_run_cell(self, info=None) -> None:
        """IPython hook: a cell starts; remember it for the timeline and tell who looks."""
        try:
            stored = bool(getattr(info, "store_history", False))
            count = running_cell_number(self.shell) if stored else None
            run = self.history.run_started(count, leak_watch._cell_id(self.shell, info),
                                           rss_start_bytes=_number(process.rss_bytes))
            # Kept off the message: only the end needs it (see _cell_figures).
            self._running.append((run, _number(process.high_water_rss_bytes)))
        except Exception:  # the timeline must never break a cell
            logger.debug("kerasmagic.live: recording a cell's start failed", exc_info=True)
            return
        # To hidden sidebars too (two small messages a cell): one shown later gets no history
        # again, and must not keep a run "running" whose end it never heard.
        self._broadcast_to("timeline", {"method": "cell_run", "ts": run["started_ts"], "run": run},
                           visible_only=False)

    def _end_run(self, result: Any) -> None:
        if not self._running:
            return  # no start seen: the cell that ran %load_ext kerasmagic, or a blank cell
        run, high_water_at_start = self._running.pop()
        try:
            ended = self.history.run_ended(run, ok=bool(getattr(result, "success", True)),
                                           **self._cell_figures(run, high_water_at_start))
        except Exception:  # the timeline must never break a cell
            logger.debug("kerasmagic.live: recording a cell's end failed", exc_info=True)
            return
        self._broadcast_to("timeline", {"method": "cell_run", "ts": ended["ended_ts"], "run": ended},
                           visible_only=False)

    def _cell_figures(self, run: dict[str, Any], high_water_at_start: int | None) -> dict[str, Any]:
        """A finished cell's RSS at its end and its peak (protocol 1.5).

        The kernel's high-water mark (VmHWM) only rises, so one that rose during the cell is
        the cell's exact peak, however short. One that did not rise says only that the peak
        was below the old high; the samples taken during the cell then bound it from below.
        """
        end = _number(process.rss_bytes)
        high_water = _number(process.high_water_rss_bytes)
        if high_water is not None and high_water_at_start is not None and high_water > high_water_at_start:
            return {"rss_end_bytes": end, "peak_rss_bytes": high_water, "peak_exact": True}
        seen = [v for v in (run.get("rss_start_bytes"), end,
                            self.history.highest_rss_between(run["started_ts"], time.time())) if v is not None]
        return {"rss_end_bytes": end, "peak_rss_bytes": max(seen, default=None), "peak_exact": False}

    def post_run_cell(self, result=None) -> None:
        """IPython hook: end the cell's run on the timeline; then, only when someone looks,
        push main-thread facts and the leak watch."""
        self._end_run(result)
        if self.visible_count == 0:
            return
        self.broadcast(self._facts_or_error())
        watch = leak_watch.active_watch()
        if watch is not None:
            watch.post_run_cell(result)  # records this cell's run now if its own hook has not yet
        cells = self._cell_growth()
        if cells is not None:
            self._broadcast_to("cells", cells, visible_only=True)

    def _cell_growth(self) -> dict[str, Any] | None:
        """The ``cell_growth`` message (flagged cells, then the recent ones), or None without a watch."""
        watch = leak_watch.active_watch()
        if watch is None:
            return None
        for _ in range(3):
            try:
                data = watch.report().to_dict()
                break
            except RuntimeError:
                # Off the main thread, the main thread's hooks may change the watch while we read
                # it ("mutated during iteration"): read again, it is a few dict lookups.
                continue
        else:
            return None
        data.pop("watching", None)
        return to_jsonable({"method": "cell_growth", **data})

    def _broadcast_to(self, feature: str, message: dict[str, Any], visible_only: bool) -> None:
        """A message of a later minor version, to the frontends whose entry says they speak it,
        and to the in-kernel views (``%tf_mem --live``), which speak every version of this kernel."""
        with self._lock:
            targets = self._targets(visible_only, feature)
            local = list(self._local.items())
        self._feed_local_views(local, message)
        self._send_to_each(targets, message)

    def _clear(self, comm, request_id: str) -> None:
        from ..clean import clear_tf  # noqa: PLC0415 - as session_facts above

        try:
            report = clear_tf(shell=self.shell)
            reply = {
                "method": "clear_result",
                "request_id": request_id,
                "ok": True,
                "ts": time.time(),
                "report": to_jsonable(report.to_dict()),
                "text": report.summary(),
            }
        except Exception as exc:  # noqa: BLE001 - report the failure to the button that asked
            reply = {
                "method": "clear_result",
                "request_id": request_id,
                "ok": False,
                "ts": time.time(),
                "report": None,
                "text": f"clear_tf failed: {type(exc).__name__}: {exc}",
            }
        self._send(comm, reply)
        self.broadcast(self._facts_or_error())
        self.broadcast(self._take_sample())

    def _on_event(self, kind: str, payload: dict[str, Any]) -> None:
        if kind in isolated_jobs.KINDS:
            # Their own small messages, not an `event` with the whole report (or 4 samples a second).
            message = self.isolated.on_event(kind, payload)
            if message is not None:
                self._broadcast_jobs(to_jsonable(message), visible_only=kind == "isolated_sample")
            return
        text = payload.get("text") if isinstance(payload, dict) else None
        message = {"method": "event", "kind": kind, "ts": time.time(), "payload": to_jsonable(payload)}
        self.history.add_mark(kind, message["ts"])  # the same ts: a sidebar merges it with the live event
        if isinstance(text, str):
            message["text"] = text
        self.broadcast(message, visible_only=False)

    def _broadcast_jobs(self, message: dict[str, Any], visible_only: bool) -> None:
        """An ``isolated_*`` message to the frontends that speak 1.1+ (samples: visible ones only).

        Hidden sidebars still get started/done, so their list stays right; what they missed of
        the samples comes with the ``isolated_jobs`` snapshot when they are shown again.
        """
        with self._lock:
            targets = self._targets(visible_only, "jobs")
        self._send_to_each(targets, message)

    # ---- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        self._unsubscribe()
        self.sampler.stop()
        with self._lock:
            comms = [e["comm"] for e in self._listeners.values()]
            self._listeners.clear()
            self._local.clear()
        for comm in comms:
            try:
                comm.close(data={"reason": "unloaded"})
            except Exception:  # the frontend may be gone already
                logger.warning("kerasmagic.live: closing comm %s failed", getattr(comm, "comm_id", "?"),
                               exc_info=True)
        self._failing.clear()


def _open_options(data: Any) -> dict[str, Any]:
    """The validated ``open`` message from a ``comm_open``'s data; empty data means defaults.

    Example:
        >>> _open_options({"method": "open", "visible": False})["visible"]
        False
        >>> _open_options({})
        {}
        >>> _open_options({"method": "refresh"})
        Traceback (most recent call last):
        ...
        kerasmagic.live.protocol.ProtocolError: comm_open data must be an 'open' message, got method 'refresh'
    """
    if data is None or (isinstance(data, dict) and not data):
        return {}
    if isinstance(data, dict) and data.get("method") == "open":
        return validate(data)
    if isinstance(data, dict):
        got = f"method {echo(data['method'])}" if "method" in data else "an object without 'method'"
    else:
        got = f"{type(data).__name__} {echo(data)}"
    raise ProtocolError("bad_message", f"comm_open data must be an 'open' message, got {got}", "open")


def _route_as_addressed(comm) -> None:
    """Let the frontend's messages on ``comm`` go to the shell it sent them to.

    ipykernel 7 sends a comm's incoming messages to the subshell its *last outgoing* message
    was sent from (so that a widget's reply reaches the loop that waits for it). Ours go out
    from the main thread (facts after each cell) as well as from a subshell, so after a cell
    a sidebar's ``visibility`` or ``refresh`` would wait behind the next running cell even
    though the sidebar sent it to its subshell. No request of ours waits for a reply on a
    loop: the frontend's addressing is right. ``clear`` still runs on the main thread
    (:meth:`LiveChannel._on_main`).

    Example:
        >>> class Comm:
        ...     def _reply_subshell_for(self, data, default):
        ...         return "where-we-last-sent"
        >>> comm = Comm(); _route_as_addressed(comm)
        >>> comm._reply_subshell_for({}, "sidebar-subshell")
        'sidebar-subshell'
    """
    if callable(getattr(comm, "_reply_subshell_for", None)):
        comm._reply_subshell_for = lambda data, default: default


def _number(read: Callable[[], Any]) -> int | None:
    """``read()`` where it gives a byte count; None where it cannot (a probe's Unavailable)."""
    try:
        value = read()
    except Exception:  # noqa: BLE001 - a figure of the timeline, never a broken cell
        return None
    return value if isinstance(value, int) else None


def _package_version() -> str:
    return __version__


def _pid() -> int:
    return os.getpid()


def active_channel() -> LiveChannel | None:
    """The channel registered in this kernel, or None (outside a kernel, or not loaded).

    Example:
        >>> active_channel() is None      # in a plain Python process
        True
    """
    return _channel


def register(shell) -> None:
    """Register the comm target and hooks; a no-op outside an ipykernel or when done already.

    Example:
        >>> register(get_ipython())     # what %load_ext kerasmagic does  # doctest: +SKIP
    """
    global _channel
    if _channel is not None or not _in_kernel(shell):
        return
    channel = LiveChannel(shell)
    _comm_manager(shell).register_target(TARGET_NAME, channel.on_open)
    shell.events.register("pre_run_cell", channel.pre_run_cell)
    shell.events.register("post_run_cell", channel.post_run_cell)
    channel.start_recording()
    _channel = channel


def unregister(shell) -> None:
    """Undo :func:`register`: target, hook, event subscription, open comms, live views,
    sampler thread, and NVML if it was started.

    Example:
        >>> unregister(get_ipython())   # what %unload_ext kerasmagic does  # doctest: +SKIP
    """
    global _channel
    channel = _channel
    if channel is None:
        return
    _channel = None
    try:
        _comm_manager(shell).unregister_target(TARGET_NAME, channel.on_open)
    except Exception:  # the manager may already be gone at kernel shutdown
        logger.warning("kerasmagic.live: unregistering the comm target failed", exc_info=True)
    for event, hook in (("pre_run_cell", channel.pre_run_cell), ("post_run_cell", channel.post_run_cell)):
        try:
            shell.events.unregister(event, hook)
        except ValueError:
            pass  # the hook was never registered (register ran on another shell)
    widget = sys.modules.get(f"{__package__}.widget")
    if widget is not None:  # only loaded when a `%tf_mem --live` view was shown
        widget.stop_current()
    channel.close()  # joins the sampler thread: nothing reads NVML after this
    nvml.shutdown()  # nvmlShutdown only if NVML was started; a later sample re-initialises it

"""``%tf_mem --live``: a live view for frontends without the JupyterLab sidebar.

Classic Notebook, VS Code, Colab and Kaggle render ipywidgets but cannot load our JupyterLab
extension. The view is fed by the same channel and sampler thread as the sidebar (it registers
as a listener, so the sampler runs while a view is open): the same numbers, and the same cell
runs marked ``[n]`` on its chart. It comes in two kinds, and says which one it is:

* ``widgets``: an ``ipywidgets.VBox`` updated from the sampler thread (widget state changes
  are comm messages, which ipykernel sends from any thread), with a Stop button. Works with
  ipywidgets 7 and 8.
* ``display``: one output updated in place through its display id, for frontends that cannot
  render widgets (Colab with ipywidgets 8 and no custom widget manager; no ipywidgets at all).
  Frontends that route display updates by id keep it live after the cell ends (classic
  Notebook 6 and JupyterLab 4.6 do: tests/ui/test_live_view.py).

``auto`` (the default) picks ``widgets`` where they render (:func:`kerasmagic.compat.widgets_render_here`).
There is at most one running view per kernel: showing a new one stops the previous one (a
re-run cell would otherwise leave orphan listeners that keep the sampler awake), and a widget
view stops when its widget is closed (``widget.close()``, or the frontend closing its comm).
"""

from __future__ import annotations

import html
import threading
import uuid
from collections import deque
from typing import Any, TypeGuard

from ..compat import widgets_render_here
from ..probes.sample import allocator_total, tf_device_missing
from ..tables import format_bytes

__all__ = ["LIVE_MODES", "DisplayLiveView", "LiveView", "show_live", "sparkline_svg", "stop_current"]

_SPARK_WIDTH = 240
_SPARK_HEIGHT = 36
#: The chart of the last samples, with the cell runs that fall in it.
_CHART_WIDTH = 360
_CHART_HEIGHT = 64
#: ``%tf_mem --live MODE``: ``off`` stops the running view.
LIVE_MODES = ("auto", "widgets", "display", "off")

# The one running view of this kernel (see the module docstring).
_current: _LiveViewBase | None = None
_current_lock = threading.Lock()


_MISSING = format_bytes(None)


def _bytes(value: Any) -> str:
    # Protocol values are numbers or JSON "unavailable" objects (their reason goes in the note
    # column): anything that is not a number renders as format_bytes' missing value.
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return _MISSING
    return format_bytes(value)


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _why(value: Any) -> str:
    if isinstance(value, dict) and value.get("status") == "unavailable":
        return str(value.get("detail") or value.get("reason"))
    return ""


def sparkline_svg(values: list[float | None], width: int = _SPARK_WIDTH, height: int = _SPARK_HEIGHT) -> str:
    """An inline SVG polyline of ``values`` (None breaks the line), scaled from 0 to the max.

    Example:
        >>> sparkline_svg([0, 10])[:4]
        '<svg'
        >>> 'points="0.0,35.0 240.0,1.0"' in sparkline_svg([0, 10])
        True
    """
    numbers = [v for v in values if v is not None]
    top = max(numbers) if numbers else 1.0
    top = top if top > 0 else 1.0
    step = width / max(len(values) - 1, 1)
    runs: list[list[str]] = [[]]
    for index, value in enumerate(values):
        if value is None:
            runs.append([])
            continue
        y = 1 + (height - 2) * (1 - value / top)
        runs[-1].append(f"{index * step:.1f},{y:.1f}")
    lines = "".join(
        f'<polyline points="{" ".join(run)}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
        for run in runs
        if run
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" style="color: var(--jp-brand-color1, #1976d2)">{lines}</svg>'
    )


def _rows_html(rows: list[tuple[str, str, str]]) -> str:
    # Every kernel string goes through html.escape: it is data, never markup.
    cells = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(label)}</th>"
        f"<td style='font-variant-numeric:tabular-nums'>{html.escape(value)}</td>"
        f"<td style='opacity:.7;padding-left:1em'>{html.escape(note)}</td></tr>"
        for label, value, note in rows
    )
    return f"<table>{cells}</table>"


def _tf_totals(tf: Any, gpu: bool) -> tuple[float | None, float | None]:
    return allocator_total(tf, "in_use_bytes", gpu=gpu), allocator_total(tf, "held_unused_min_bytes", gpu=gpu)


class _ViewState:
    """The numbers a view shows; filled from the sampler thread, rendered to HTML strings."""

    def __init__(self, history: int) -> None:
        self.rss: deque[float | None] = deque(maxlen=history)
        # (ts, rss) of the same samples, for the chart's time axis and its cell marks.
        self.points: deque[tuple[float, float | None]] = deque(maxlen=history)
        # Cell runs by (started_ts, execution_count), as the sidebar keys them; bounded like the points.
        self.runs: dict[tuple[float, Any], dict[str, Any]] = {}
        self.sample: dict[str, Any] | None = None
        self.facts: dict[str, Any] | None = None
        self.last_event = ""

    def take(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "sample":
            self.sample = message
            rss = message.get("rss_bytes")
            value = float(rss) if _is_number(rss) else None
            self.rss.append(value)
            ts = message.get("ts")
            if _is_number(ts):
                self.points.append((float(ts), value))
        elif method == "facts":
            self.facts = message
        elif method == "event":
            self.last_event = str(message.get("text") or message.get("kind"))
        elif method == "cell_run" and isinstance(message.get("run"), dict):
            self._take_run(message["run"])
        elif method == "history":
            for sample in message.get("samples") or []:
                if isinstance(sample, dict):
                    self.take(sample)
            for run in message.get("cell_runs") or []:
                if isinstance(run, dict):
                    self._take_run(run)

    def _take_run(self, run: dict[str, Any]) -> None:
        started = run.get("started_ts")
        if not _is_number(started):
            return
        self.runs[(float(started), run.get("execution_count"))] = run
        if len(self.runs) > 2 * (self.rss.maxlen or 120):
            oldest = min(self.runs)
            self.runs.pop(oldest)

    def chart_svg(self, width: int = _CHART_WIDTH, height: int = _CHART_HEIGHT) -> str:
        """RSS over the kept samples, each cell run in that time a shaded span labelled ``[n]``
        (a failed one in the error colour), as the sidebar's timeline draws them."""
        points = [(ts, value) for ts, value in self.points]
        if len(points) < 2:
            return sparkline_svg(list(self.rss), width, height)
        first, last = points[0][0], points[-1][0]
        span_s = max(last - first, 1e-6)
        top = max((v for _, v in points if v is not None), default=1.0) or 1.0

        def x_of(ts: float) -> float:
            return (min(max(ts, first), last) - first) / span_s * width

        marks = []
        for (started, number), run in sorted(self.runs.items(), key=lambda item: item[0][0]):
            ended = run.get("ended_ts")
            end = float(ended) if _is_number(ended) else last
            if end < first or started > last:
                continue
            x0, x1 = x_of(started), x_of(end)
            failed = run.get("status") == "error"
            colour = "var(--jp-error-color1, #d32f2f)" if failed else "var(--jp-brand-color2, #90caf9)"
            label = f"[{number}]" if number is not None else "[?]"
            marks.append(
                f'<rect x="{x0:.1f}" y="0" width="{max(x1 - x0, 1.5):.1f}" height="{height}" fill="{colour}" '
                f'opacity="0.25" data-status="{html.escape(str(run.get("status")))}"><title>cell {label}</title></rect>'
                f'<text x="{x0 + 2:.1f}" y="10" font-size="10" fill="currentColor">{label}</text>')
        runs: list[list[str]] = [[]]
        for ts, value in points:
            if value is None:
                runs.append([])
                continue
            runs[-1].append(f"{x_of(ts):.1f},{1 + (height - 2) * (1 - value / top):.1f}")
        lines = "".join(
            f'<polyline points="{" ".join(run)}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
            for run in runs if run)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" style="color: var(--jp-brand-color1, #1976d2)">'
                f'{"".join(marks)}{lines}</svg>')

    def values_html(self) -> str:
        rows: list[tuple[str, str, str]] = []
        sample = self.sample or {}
        rows.append(("Kernel memory (RSS)", _bytes(sample.get("rss_bytes")), _why(sample.get("rss_bytes"))))
        cpu = sample.get("cpu_pct")
        if cpu is not None:
            rows.append(("Kernel CPU", f"{cpu:.0f} %" if _is_number(cpu) else "n/a", _why(cpu)))
        limit = sample.get("memory_limit")
        if isinstance(limit, dict) and _is_number(limit.get("limit_bytes")):
            # The limit that bites, before the host's free memory (issue 33, item 7).
            guard: dict[str, Any] = limit["guard"] if isinstance(limit.get("guard"), dict) else {}
            levels = (f"guard warns at {guard.get('warn_pct', 0):g} %, stops at {guard.get('stop_pct', 0):g} %"
                      if guard.get("enabled") else "guard off")
            rows.append(("Memory limit", f"{_bytes(limit.get('used_bytes'))} of {_bytes(limit.get('limit_bytes'))} "
                         f"({limit.get('used_pct', 0):.0f} %)", f"{limit.get('source')}: {limit.get('where')}"))
            rows.append(("Headroom", _bytes(limit.get("headroom_bytes")), levels))
            last = guard.get("last_event")
            if isinstance(last, dict):
                what = "stopped" if last.get("kind") == "guard_stop" else "warned"
                number = last.get("execution_count")
                rows.append(("Memory guard", f"{what} cell [{number}]" if number is not None else what,
                             f"at {_bytes(last.get('used_bytes'))} ({last.get('used_pct', 0):.0f} %)"))
        host = sample.get("host")
        if isinstance(host, dict) and "available_bytes" in host:
            rows.append(("Host available", _bytes(host.get("available_bytes")),
                         f"of {_bytes(host.get('total_bytes'))}"))
        tf = sample.get("tf")
        in_use, unused = _tf_totals(tf, gpu=False)
        if in_use is None:
            # Not running (the sample's tf says why), or a CPU without statistics (the device's figure says why).
            missing = next((why for device, why in tf_device_missing(tf, "in_use_bytes").items()
                            if "GPU" not in device), None)
            rows.append(("TensorFlow allocator", _MISSING,
                         _why(tf) or (missing.detail if missing is not None else "no CPU allocator statistics")))
        else:
            rows.append(
                ("TensorFlow allocator", f"{_bytes(in_use)} in use / {_bytes(in_use + (unused or 0))} held",
                 f"at least {_bytes(unused or 0)} held but unused")
            )
        gpu = sample.get("gpu")
        if isinstance(gpu, list):
            tf_gpu, _ = _tf_totals(tf, gpu=True)
            for device in gpu:
                if not isinstance(device, dict) or "index" not in device:
                    rows.append(("GPU", _MISSING, _why(device)))
                    continue
                rows.append(
                    (f"GPU {device['index']}",
                     f"TF {_bytes(tf_gpu)} / kernel {_bytes(device.get('process_used_bytes'))} / "
                     f"device {_bytes(device.get('used_bytes'))} of {_bytes(device.get('total_bytes'))}",
                     str(device.get("name", ""))))
        else:
            rows.append(("GPU", _MISSING, _why(gpu)))
        facts = self.facts or {}
        if facts:
            counters = facts.get("name_counters")
            models = facts.get("live_models")
            ops, entries = facts.get("graph_op_count"), facts.get("custom_gradient_entries")
            rows.append(
                ("Graph", f"{ops if not _why(ops) else _MISSING} ops, "
                 f"{entries if not _why(entries) else _MISSING} CustomGradient entries", _why(facts.get("tf_status"))))
            if isinstance(counters, dict) and counters:
                rows.append(("Keras names", ", ".join(f"{k} {v}" for k, v in counters.items()), ""))
            if isinstance(models, list):
                names = ", ".join(str(m.get("name")) for m in models)
                rows.append((f"Live models ({len(models)})", names, ""))
        if self.last_event:
            rows.append(("Last event", self.last_event, ""))
        return _rows_html(rows)


def _widgets():
    import ipywidgets  # only `%tf_mem --live` needs it

    return ipywidgets


class _LiveViewBase:
    """What both kinds of view share: the state, the listener, stopping, the one-view rule."""

    #: Which kind of view this is, and why it was chosen: the view's first line says it.
    kind = ""

    def __init__(self, channel, history: int, why: str) -> None:
        self.why = why
        self._state = _ViewState(history)
        self._lock = threading.Lock()
        self._stop: Any = None
        self._channel = channel

    def _start(self) -> None:
        """Seed from what the kernel remembers, then listen (the sampler wakes for us)."""
        if self._channel is None:
            return
        self._state.take(self._channel.history.message())
        for message in self._channel.messages_now():
            self._state.take(message)
        self._render()
        self._stop = self._channel.add_listener(self._on_message)

    @property
    def running(self) -> bool:
        return self._stop is not None

    def _on_message(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._state.take(message)
            self._render()

    def _title_html(self) -> str:
        state = "live" if self.running else "stopped"
        return (f"<b>kerasmagic {state}</b> <span style='opacity:.7'>({html.escape(self.kind)}: "
                f"{html.escape(self.why)}; RSS over time, cell runs marked [n])</span>")

    def _render(self) -> None:
        raise NotImplementedError

    def _stopped(self) -> None:
        """What the kind of view does once it no longer updates."""

    def stop(self) -> None:
        """Stop updating (idempotent); the view keeps its last values.

        Example:
            >>> view = show_live(get_ipython())   # doctest: +SKIP
            >>> view.stop()                        # doctest: +SKIP
        """
        global _current
        stop, self._stop = self._stop, None
        with _current_lock:
            if _current is self:
                _current = None
        if stop is not None:
            stop()
            with self._lock:
                self._stopped()


class LiveView(_LiveViewBase):
    """A live view of this kernel's memory as ipywidgets, fed by the ``kerasmagic.live`` sampler thread.

    Displaying it shows an ``ipywidgets.VBox`` (title, values table, RSS chart with the cell
    runs, Stop button). ``stop()`` unsubscribes; the sampler sleeps again when nothing else listens.

    Example:
        >>> view = show_live(get_ipython(), mode="widgets")   # doctest: +SKIP
        >>> view                               # the cell shows the live view  # doctest: +SKIP
        >>> view.stop()                        # doctest: +SKIP
    """

    kind = "widgets"

    def __init__(self, channel, history: int = 120, why: str = "ipywidgets") -> None:
        super().__init__(channel, history, why)
        widgets = _widgets()
        self.title = widgets.HTML(value=self._title_html())
        self.values = widgets.HTML(value="<i>waiting for the first sample…</i>")
        self.spark = widgets.HTML(value=sparkline_svg([]))
        self.stop_button = widgets.Button(description="Stop", tooltip="Stop updating this view",
                                          layout=widgets.Layout(width="80px"))
        self.stop_button.on_click(lambda _button: self.stop())
        self.widget = widgets.VBox([self.title, self.values, self.spark, self.stop_button])
        if channel is None:
            self.values.value = "<i>The live view needs a Jupyter kernel (ipykernel).</i>"
            self.stop_button.disabled = True
            return
        self._start()
        self.title.value = self._title_html()  # written before the view ran: now it is live
        # Closing the widget stops the view: from Python (Widget.close sets comm to None) or
        # from the frontend (a comm_close for the VBox's comm, handled on the main thread).
        self.widget.observe(self._on_comm_change, names="comm")
        if self.widget.comm is not None:
            self.widget.comm.on_close(lambda _msg: self.stop())

    def _on_comm_change(self, change) -> None:
        if change["new"] is None:
            self.stop()

    def _render(self) -> None:
        self.values.value = self._state.values_html()
        self.spark.value = self._state.chart_svg()

    def _stopped(self) -> None:
        self.title.value = self._title_html()
        self.stop_button.disabled = True
        self.stop_button.description = "Stopped"

    def _ipython_display_(self) -> None:
        from IPython.display import display  # noqa: PLC0415

        display(self.widget)


class DisplayLiveView(_LiveViewBase):
    """The live view as one HTML output updated in place by its display id: no widgets needed.

    Where it is shown (the cell's value, or ``display(view)``) the same numbers and chart
    appear, rewritten at each sample; ``stop()`` (or ``%tf_mem --live off``) ends the updates.

    Example:
        >>> view = show_live(get_ipython(), mode="display")   # doctest: +SKIP
        >>> view                                  # the cell shows it, then it updates  # doctest: +SKIP
        >>> view.stop()                           # doctest: +SKIP
    """

    kind = "display"

    def __init__(self, channel, history: int = 120, why: str = "updating this output in place") -> None:
        super().__init__(channel, history, why)
        self.display_id = f"kerasmagic-live-{uuid.uuid4().hex}"
        self._shown = False
        self._html = "<i>waiting for the first sample…</i>"
        if channel is None:
            self._html = "<i>The live view needs a Jupyter kernel (ipykernel).</i>"
            return
        self._start()

    def _page(self) -> str:
        return f"<div class='kerasmagic-live'>{self._title_html()}{self._html}</div>"

    def _render(self) -> None:
        self._html = self._state.values_html() + self._state.chart_svg()
        if self._shown:
            self._publish(update=True)

    def _stopped(self) -> None:
        if self._shown:
            self._publish(update=True)

    def _publish(self, update: bool) -> None:
        from IPython.display import HTML, display, update_display  # noqa: PLC0415

        if update:
            update_display(HTML(self._page()), display_id=self.display_id)
        else:
            display(HTML(self._page()), display_id=self.display_id)

    def _ipython_display_(self) -> None:
        with self._lock:
            self._publish(update=False)
            self._shown = True

    def __repr__(self) -> str:
        return f"<kerasmagic live view ({self.kind}; {'live' if self.running else 'stopped'})>"


def stop_current() -> None:
    """Stop this kernel's running view, if any (``%unload_ext kerasmagic`` and ``%tf_mem --live off`` call it).

    Example:
        >>> stop_current()   # no view: nothing to do
    """
    with _current_lock:
        view = _current
    if view is not None:
        view.stop()


def choose_mode(mode: str) -> tuple[str, str]:
    """The kind of view ``mode`` means here (``widgets`` or ``display``), and why.

    Example:
        >>> choose_mode("display")
        ('display', 'asked for with --live display')
    """
    if mode not in LIVE_MODES or mode == "off":
        raise ValueError(f"mode must be one of {', '.join(m for m in LIVE_MODES if m != 'off')}, not {mode!r}")
    if mode != "auto":
        return mode, f"asked for with --live {mode}"
    renders, why = widgets_render_here()
    if renders:
        return "widgets", why
    return "display", f"updating this output in place: {why}"


def show_live(shell=None, mode: str = "auto") -> LiveView | DisplayLiveView:
    """Return a live view of this kernel fed by the live sampler (see the module docstring for the kinds).

    Registers the live channel if ``%load_ext kerasmagic`` has not (inside a kernel only).
    One view runs per kernel: the previous one (a re-run ``%tf_mem --live`` cell) is stopped.
    Jupyter displays the view when it is a cell's value (``%tf_mem --live`` returns it);
    elsewhere call ``display(view)``.

    Example:
        >>> from kerasmagic.live.widget import show_live
        >>> view = show_live(get_ipython())                  # widgets where they render  # doctest: +SKIP
        >>> view = show_live(get_ipython(), mode="display")  # one output updated in place  # doctest: +SKIP
    """
    from . import channel as channel_module  # noqa: PLC0415

    kind, why = choose_mode(mode)
    if shell is None:
        from IPython import get_ipython  # noqa: PLC0415

        shell = get_ipython()
    global _current
    if channel_module.active_channel() is None and shell is not None:
        channel_module.register(shell)
    with _current_lock:
        previous, _current = _current, None
    if previous is not None:
        previous.stop()
    channel = channel_module.active_channel()
    view: LiveView | DisplayLiveView
    view = LiveView(channel, why=why) if kind == "widgets" else DisplayLiveView(channel, why=why)
    if view.running:
        with _current_lock:
            _current = view
    return view

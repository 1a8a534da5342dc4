"""``%tf_mem --live``: an ipywidgets view for frontends without the JupyterLab sidebar.

Classic Notebook, VS Code and Colab render ipywidgets but not our extension. The view is
fed by the same channel and sampler thread as the sidebar (it registers as a listener, so
the sampler runs while a view is open), and updates its widgets from that thread: widget
state changes are comm messages, which ipykernel sends from any thread.

There is at most one running view per kernel: showing a new one stops the previous one (a
re-run cell would otherwise leave orphan listeners that keep the sampler awake), and a view
stops when its widget is closed (``widget.close()``, or the frontend closing its comm).
"""

from __future__ import annotations

import html
import threading
from collections import deque
from typing import Any

from ..probes.sample import allocator_total, tf_device_missing
from ..tables import format_bytes

__all__ = ["LiveView", "show_live", "sparkline_svg", "stop_current"]

_SPARK_WIDTH = 240
_SPARK_HEIGHT = 36

# The one running view of this kernel (see the module docstring).
_current: LiveView | None = None
_current_lock = threading.Lock()


_MISSING = format_bytes(None)


def _bytes(value: Any) -> str:
    # Protocol values are numbers or JSON "unavailable" objects (their reason goes in the note
    # column): anything that is not a number renders as format_bytes' missing value.
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return _MISSING
    return format_bytes(value)


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
        self.sample: dict[str, Any] | None = None
        self.facts: dict[str, Any] | None = None
        self.last_event = ""

    def take(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "sample":
            self.sample = message
            rss = message.get("rss_bytes")
            self.rss.append(float(rss) if isinstance(rss, (int, float)) else None)
        elif method == "facts":
            self.facts = message
        elif method == "event":
            self.last_event = str(message.get("text") or message.get("kind"))

    def values_html(self) -> str:
        rows: list[tuple[str, str, str]] = []
        sample = self.sample or {}
        rows.append(("Kernel memory (RSS)", _bytes(sample.get("rss_bytes")), _why(sample.get("rss_bytes"))))
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


class LiveView:
    """A live view of this kernel's memory, fed by the ``kerasmagic.live`` sampler thread.

    Displaying it shows an ``ipywidgets.VBox`` (values table + RSS sparkline + Stop button).
    ``stop()`` unsubscribes; the sampler sleeps again when nothing else listens.

    Example:
        >>> view = show_live(get_ipython())   # doctest: +SKIP
        >>> view                               # the cell shows the live view  # doctest: +SKIP
        >>> view.stop()                        # doctest: +SKIP
    """

    def __init__(self, channel, history: int = 120) -> None:
        widgets = _widgets()
        self._state = _ViewState(history)
        self._lock = threading.Lock()
        self.values = widgets.HTML(value="<i>waiting for the first sample…</i>")
        self.spark = widgets.HTML(value=sparkline_svg([]))
        self.stop_button = widgets.Button(description="Stop", tooltip="Stop updating this view",
                                          layout=widgets.Layout(width="80px"))
        self.stop_button.on_click(lambda _button: self.stop())
        self.widget = widgets.VBox(
            [widgets.HTML(value="<b>kerasmagic live</b> (RSS sparkline below)"), self.values, self.spark,
             self.stop_button]
        )
        self._stop = None
        if channel is None:
            self.values.value = "<i>The live view needs a Jupyter kernel (ipykernel).</i>"
            self.stop_button.disabled = True
            return
        for message in channel.messages_now():
            self._state.take(message)
        self._render()
        self._stop = channel.add_listener(self._on_message)
        # Closing the widget stops the view: from Python (Widget.close sets comm to None) or
        # from the frontend (a comm_close for the VBox's comm, handled on the main thread).
        self.widget.observe(self._on_comm_change, names="comm")
        if self.widget.comm is not None:
            self.widget.comm.on_close(lambda _msg: self.stop())

    def _on_comm_change(self, change) -> None:
        if change["new"] is None:
            self.stop()

    @property
    def running(self) -> bool:
        return self._stop is not None

    def _on_message(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._state.take(message)
            self._render()

    def _render(self) -> None:
        self.values.value = self._state.values_html()
        self.spark.value = sparkline_svg(list(self._state.rss))

    def stop(self) -> None:
        """Stop updating (idempotent); the widget keeps its last values."""
        global _current
        stop, self._stop = self._stop, None
        with _current_lock:
            if _current is self:
                _current = None
        if stop is not None:
            stop()
            self.stop_button.disabled = True
            self.stop_button.description = "Stopped"

    def _ipython_display_(self) -> None:
        from IPython.display import display  # noqa: PLC0415

        display(self.widget)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def stop_current() -> None:
    """Stop this kernel's running view, if any (``%unload_ext kerasmagic`` calls it).

    Example:
        >>> stop_current()   # no view: nothing to do
    """
    with _current_lock:
        view = _current
    if view is not None:
        view.stop()


def show_live(shell=None) -> LiveView:
    """Return a :class:`LiveView` of this kernel fed by the live sampler.

    Registers the live channel if ``%load_ext kerasmagic`` has not (inside a kernel only).
    One view runs per kernel: the previous one (a re-run ``%tf_mem --live`` cell) is stopped.
    Jupyter displays the view when it is a cell's value (``%tf_mem --live`` returns it);
    elsewhere call ``display(view)``.

    Example:
        >>> from kerasmagic.live.widget import show_live
        >>> view = show_live(get_ipython())    # doctest: +SKIP
        >>> view                                # doctest: +SKIP
    """
    from . import channel as channel_module  # noqa: PLC0415

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
    view = LiveView(channel_module.active_channel())
    if view.running:
        with _current_lock:
            _current = view
    return view

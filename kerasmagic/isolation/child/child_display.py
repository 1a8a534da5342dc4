"""Rich output from inside a worker: ``display()`` and matplotlib figures travel to the kernel.

There is no IPython shell in a worker, so ``IPython.display.display`` would just print. The
worker replaces it (and the ``display`` builtin IPython gives notebooks) with
:func:`display`, which formats the object with IPython's own ``DisplayFormatter`` and sends
the mimebundle; the kernel shows it with ``display(bundle, raw=True)``. Figures are rendered
to PNG on ``plt.show()`` (our matplotlib backend, :mod:`.mpl_backend`) and at the end of the job.
"""

from __future__ import annotations

import base64
import builtins
import io
import sys
from collections.abc import Callable
from typing import Any

from ..messages import Display

_send: Callable[[Display], None] | None = None
_formatter = None


def install(send: Callable[[Display], None]) -> None:
    """Route ``display()`` and figures through ``send`` for the rest of this (worker) process."""
    global _send
    _send = send
    # Notebooks get `display` without an import (IPython adds the builtin); so do isolated cells.
    builtins.display = display  # type: ignore[attr-defined]
    # IPython.core.display_functions is where display() lives since IPython 8 (compat); the
    # others re-export it, and any of them may have been imported by the cell.
    for module_name in ("IPython.core.display_functions", "IPython.display", "IPython.core.display", "IPython"):
        module: Any = sys.modules.get(module_name)
        if module is not None and hasattr(module, "display"):
            module.display = display


def _format(obj: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    global _formatter
    try:
        if _formatter is None:
            # IPython loads in a job only once it shows something.
            from IPython.core.formatters import DisplayFormatter  # noqa: PLC0415

            _formatter = DisplayFormatter()
        data, metadata = _formatter.format(obj)
    except Exception:  # noqa: BLE001 - an object whose repr fails still shows something
        data, metadata = {"text/plain": repr(obj)}, {}
    return data, metadata


def display(*objs: Any, raw: bool = False, metadata: dict | None = None, **_ignored: Any) -> None:
    """Send each object's mimebundle to the kernel, where the cell shows it.

    Example:
        >>> display(pandas_frame)    # inside an isolated cell; shows as an HTML table  # doctest: +SKIP
    """
    for obj in objs:
        if _is_figure(obj):
            send_figure(obj)
            continue
        if raw and isinstance(obj, dict):
            data, md = obj, metadata or {}
        else:
            data, md = _format(obj)
        _emit(data, md)


def _emit(data: dict[str, Any], metadata: dict[str, Any]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if _send is None:
        print(data.get("text/plain", ""))
        return
    _send(Display(data=data, metadata=metadata))


def _is_figure(obj: Any) -> bool:
    figure_module = sys.modules.get("matplotlib.figure")
    return figure_module is not None and isinstance(obj, figure_module.Figure)


def send_figure(figure: Any) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    _emit({"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"), "text/plain": repr(figure)}, {})


def send_open_figures() -> None:
    """Send every open pyplot figure, then close them (what the inline backend does per cell)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for number in pyplot.get_fignums():
        send_figure(pyplot.figure(number))
    pyplot.close("all")

"""Where a running job's output, displays, memory samples and values go: its sink.

The loop that drives a job hands everything the job sends to the job's sink and never decides
where it goes. The kernel's sink (:class:`CellSink`) writes output into the running cell,
shows displays, publishes samples on the kernel's event bus and rebuilds the values here; a
Ray node's agent drives its jobs into a sink that queues all of it for the kernel instead
(:class:`kerasmagic.isolation.cluster.agent.QueueSink`).

Example:
    >>> from kerasmagic.isolation.result import IsolatedResult
    >>> sink = CellSink(IsolatedResult(), prefix="[3] ")
    >>> sink.output("stdout", "epoch 1\\nepo")
    [3] epoch 1
    >>> sink.output("stdout", "ch 2\\n"); sink.output_ended("stdout")
    [3] epoch 2
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from .. import events
from .messages import Done
from .outcome import bring_back
from .result import IsolatedResult

__all__ = ["CellSink", "JobSink", "show"]


class JobSink(Protocol):
    """What receives a job's output, displays, samples and values while a loop drives it."""

    def output(self, stream: str, text: str) -> None:
        """Text the job printed on ``stream`` (``"stdout"`` or ``"stderr"``), as it arrives."""

    def output_ended(self, stream: str) -> None:
        """``stream`` has ended (or the job has): flush what is left of its last line."""

    def placed(self, where: str) -> None:
        """The job runs on ``where`` (a cluster's node), which its output may be named after."""

    def display(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """A mimebundle the job displayed."""

    def sample(self, reading: dict[str, Any]) -> None:
        """A memory sample of the job's process (the sidebar's ``sample`` shape)."""

    def values(self, done: Done) -> str | None:
        """The job ran through: take its values; a warning naming what did not come back, or None."""


class _Lines:
    """One output stream cut into whole lines, each prefixed (jobs of a map run side by side)."""

    def __init__(self) -> None:
        self.partial = ""

    def take(self, prefix: str, text: str, final: bool = False) -> str:
        if not prefix:
            return text
        text = self.partial + text
        lines = text.split("\n")
        self.partial = "" if final else lines.pop()
        return "".join(f"{prefix}{line}\n" for line in lines if line or not final)


def show(data: dict[str, Any], metadata: dict[str, Any]) -> None:
    """Show a mimebundle in the running cell (IPython's ``display``); its text in a script."""
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is not None and shell_module.InteractiveShell.initialized():
        from IPython.display import display  # noqa: PLC0415 - only where IPython runs: workers load this module too

        display(data, raw=True, metadata=metadata)
    else:
        print(data.get("text/plain", ""))  # a script: the text form is all a terminal can show


class CellSink:
    """The kernel's sink: output into the running cell from the main thread (where ipykernel routes
    it), displays shown there, samples on the event bus (``isolated_sample``), values rebuilt here.

    ``forward=False`` (``quiet``) keeps output and displays out of the cell; the run still keeps
    the end of the output for the report. ``prefix`` starts every line (``"[3] "`` for a map's
    item); on a cluster the node's name joins it once the job is placed (``"[3 @ 10.0.0.7] "``).
    """

    def __init__(self, result: IsolatedResult, *, forward: bool = True, prefix: str = "") -> None:
        self.result = result
        self.forward = forward
        self.prefix = prefix
        self._item_prefix = prefix  # the map's, which a node's name joins
        self._streams: dict[str, _Lines] = {}

    def output(self, stream: str, text: str) -> None:
        self._write(stream, self._lines(stream).take(self.prefix, text))

    def output_ended(self, stream: str) -> None:
        if stream in self._streams:
            self._write(stream, self._streams[stream].take(self.prefix, "", final=True))

    def placed(self, where: str) -> None:
        item = self._item_prefix
        self.prefix = f"{item.rstrip()[:-1]} @ {where}] " if item else f"[{where}] "

    def display(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        if self.forward:
            show(data, metadata)

    def sample(self, reading: dict[str, Any]) -> None:
        payload = {**reading, "job_id": self.result.job_id}
        if self.result.node:
            payload["node"] = self.result.node
        events.publish("isolated_sample", payload)

    def values(self, done: Done) -> str | None:
        return bring_back(done, self.result)

    def _lines(self, stream: str) -> _Lines:
        if stream not in self._streams:
            self._streams[stream] = _Lines()
        return self._streams[stream]

    def _write(self, stream: str, shown: str) -> None:
        if self.forward and shown:
            target = getattr(sys, stream)
            target.write(shown)
            target.flush()

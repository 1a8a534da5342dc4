"""May this process fork now? The checks a template makes before every fork.

A fork of a process that has *imported* TensorFlow, Keras, torch or JAX but never started
their runtimes is safe and costs milliseconds; a fork after a runtime started hangs or fails
(TensorFlow's thread pools, "CUDA error: initialization error"). So a template runs no op, and
before every fork it checks, reading state only and starting nothing (:meth:`ForkSafety.problem`),
that this still holds: no framework runtime started, the CUDA driver never initialised, no
thread started since the imports and none keeps running.

Example:
    >>> ForkSafety().problem() is None     # a process that imported no framework and started no thread
    True
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

from ..probes import jax_devices as jax_probe
from ..probes import torch_cuda as torch_probe

__all__ = ["ForkSafety", "cuda_driver_state", "framework_problems", "thread_states"]

#: What the CUDA driver API returns before ``cuInit`` (CUDA_ERROR_NOT_INITIALIZED).
_CUDA_ERROR_NOT_INITIALIZED = 3


def thread_states() -> dict[int, tuple[str, str]]:
    """This process's threads: ``{tid: (name, state)}`` from ``/proc/self/task`` (Linux).

    Example:
        >>> main = thread_states()[os.getpid()]
        >>> main[1] in "RS"
        True
    """
    states: dict[int, tuple[str, str]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return states
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue  # the thread ended while we looked
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2:].split(" ", 1)[0]
        states[int(tid)] = (name, state)
    return states


def cuda_driver_state() -> str:
    """``"not loaded"``, ``"not initialised"`` or ``"initialised (code N)"``, asking without initialising.

    A child forked from a process whose CUDA driver was initialised cannot use CUDA
    ("CUDA error: initialization error"). Importing torch maps libcuda and starts one of
    its threads even when nothing initialises it (seen on an H100 with torch 2.11), so
    neither the mapping nor the threads tell; ``cuCtxGetCurrent`` does: before ``cuInit``
    it returns CUDA_ERROR_NOT_INITIALIZED, and it initialises nothing itself. The library
    is only looked up if already loaded (``RTLD_NOLOAD``): the check never loads it.

    Example:
        >>> cuda_driver_state()     # a process that never touched CUDA
        'not loaded'
    """
    try:
        with open("/proc/self/maps") as maps:
            mapped = sorted({line.split()[-1] for line in maps if "libcuda.so" in line})
    except OSError:
        mapped = []
    if not mapped:
        return "not loaded"
    try:
        library = ctypes.CDLL(mapped[0], mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        context = ctypes.c_void_p()
        code = library.cuCtxGetCurrent(ctypes.byref(context))
    except (OSError, AttributeError) as exc:
        return f"initialised? (cannot ask: {exc})"
    return "not initialised" if code == _CUDA_ERROR_NOT_INITIALIZED else f"initialised (code {code})"


def _cuda_driver_problem() -> str | None:
    state = cuda_driver_state()
    if state in ("not loaded", "not initialised"):
        return None
    return f"the CUDA driver was {state} in the template"


def framework_problems() -> list[str]:
    """Why forking this process now would not be safe, per framework ([] when it is).

    Each check reads state only; none starts a runtime.

    Example:
        >>> framework_problems()    # a process that imported no framework
        []
    """
    problems = []
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is not None:
        ctx = context.context_safe()
        if ctx is not None and getattr(ctx, "_initialized", False):
            problems.append("TensorFlow's runtime has started in the template")
    if torch_probe.started_cuda() is not None:
        problems.append("torch initialised CUDA in the template")
    if jax_probe.backend_started():
        problems.append("JAX started its backend in the template")
    return problems


class ForkSafety:
    """The template's state right after its imports, and the check made before every fork."""

    #: How long a thread may be seen running before the fork is refused: a framework's
    #: idle pool thread wakes now and then, and OpenBLAS' threads spin for a while after
    #: their last task before they sleep; one that keeps running is doing work.
    BUSY_RETRIES = 100
    BUSY_WAIT_S = 0.005

    def __init__(self) -> None:
        self.settle()
        self.baseline = thread_states()

    @staticmethod
    def busy_threads() -> list[str]:
        return sorted(name for tid, (name, state) in thread_states().items() if tid != os.getpid() and state != "S")

    def settle(self, within: float = 3.0) -> None:
        """Right after the imports, wait (a little) for the framework threads to go to sleep."""
        deadline = time.monotonic() + within
        while self.busy_threads() and time.monotonic() < deadline:
            time.sleep(0.01)

    def problem(self) -> str | None:
        """None when a fork is safe now, else the reason in words."""
        problems = framework_problems()
        for attempt in range(self.BUSY_RETRIES):
            states = thread_states()
            new = sorted(name for tid, (name, _) in states.items() if tid not in self.baseline)
            if new:
                problems.append(f"a thread started after the imports ({new[0]!r})")
                break
            busy = sorted(name for tid, (name, state) in states.items() if tid != os.getpid() and state != "S")
            if not busy:
                break
            if attempt == self.BUSY_RETRIES - 1:
                problems.append(f"a framework thread kept running ({busy[0]!r})")
            time.sleep(self.BUSY_WAIT_S)
        driver = _cuda_driver_problem()
        if driver:
            problems.append(driver)
        return "; ".join(problems) or None

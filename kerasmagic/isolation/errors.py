"""What can go wrong in an isolated run, each as its own exception carrying the partial report.

Every exception raised after a worker was involved has ``.result``: the
:class:`~kerasmagic.isolation.result.IsolatedResult` so far (wall time, peaks, last output),
so that the magic can show the report before it re-raises.
"""

from __future__ import annotations

from typing import Any

from ..errors import KerasMagicUsageError

__all__ = ['IsolatedCellError', 'IsolatedCrash', 'IsolatedInterrupt', 'IsolatedShippingError', 'IsolatedTimeout',
           'IsolationUsageError', 'IsolationWarning']


class _ShownWithoutOurFrames:
    """IPython shows ``_render_traceback_()`` instead of a traceback (as ipyparallel's
    RemoteError does): the user sees what happened in the worker, not our plumbing."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class IsolationUsageError(_ShownWithoutOurFrames, KerasMagicUsageError):
    """Bad input to an isolated run, found before anything ran (the magic shows a UsageError;
    from the Python API in a notebook, IPython shows this one line, not our frames).

    Example:
        >>> raise IsolationUsageError("cannot send 'gen' to the isolated process: ...")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: cannot send 'gen' to the isolated process: ...
    """

    result: Any = None


class IsolatedShippingError(IsolationUsageError):
    """An input reached the worker but could not be rebuilt there; the user's code never ran.

    Not the user's code failing (:class:`IsolatedCellError`) and not a crash
    (:class:`IsolatedCrash`): a class that exists only in the kernel (defined at run time,
    or a custom ``keras.Model`` subclass that is not registered) cannot be unpickled in
    another process. ``name`` is the input, ``exc_type``/``exc_message`` what the worker said.

    Example:
        >>> try:
        ...     run_isolated("y = m.predict(x)", inputs={"m": custom_model, "x": x})  # doctest: +SKIP
        ... except IsolatedShippingError as exc:
        ...     exc.name
        'm'
    """

    def __init__(self, message: str, result: Any = None, name: str | None = None, exc_type: str = "",
                 exc_message: str = "") -> None:
        super().__init__(message)
        self.result = result
        self.name = name
        self.exc_type = exc_type
        self.exc_message = exc_message


class IsolationWarning(UserWarning):
    """Values that did not come back from an isolated run (the others did).

    It is issued without a per-location registry, so Python's default filter shows it every
    time, also the tenth time in a loop; ``warnings.filterwarnings("ignore",
    category=IsolationWarning)`` silences it, and ``result.not_returned`` always lists them.
    """


class IsolatedTimeout(_ShownWithoutOurFrames, TimeoutError):
    """The job ran past its ``timeout``; the worker was killed and gave all of its memory back.

    Example:
        >>> try:
        ...     run_isolated("import time; time.sleep(60)", timeout=1)   # doctest: +SKIP
        ... except IsolatedTimeout as exc:
        ...     exc.result.status
        'timeout'
    """

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class IsolatedCrash(_ShownWithoutOurFrames, RuntimeError):
    """The worker died without finishing the job (segfault, ``os._exit``, the OOM killer).

    ``exit_code`` is the process's exit status, ``signal_name`` the signal that killed it
    (``"SIGKILL"``, ``"SIGSEGV"``) or None, ``last_output`` its last lines of stdout/stderr.

    Example:
        >>> try:
        ...     run_isolated("import os; os._exit(3)")                  # doctest: +SKIP
        ... except IsolatedCrash as exc:
        ...     exc.exit_code
        3
    """

    def __init__(self, message: str, result: Any = None, exit_code: int | None = None,
                 signal_name: str | None = None, last_output: str = "") -> None:
        super().__init__(message)
        self.result = result
        self.exit_code = exit_code
        self.signal_name = signal_name
        self.last_output = last_output


class IsolatedInterrupt(_ShownWithoutOurFrames, KeyboardInterrupt):
    """Ctrl-C (or the notebook's "interrupt kernel") during an isolated run; the worker was killed.

    A ``KeyboardInterrupt``, so ``except KeyboardInterrupt`` catches it. It is raised without
    its context and IPython shows it as one line, ``KeyboardInterrupt: interrupted; the
    isolated worker was killed``: where the signal happened to land in our waiting loop is
    nothing the user can act on.

    Example:
        >>> try:
        ...     run_isolated("import time; time.sleep(600)")             # doctest: +SKIP
        ... except KeyboardInterrupt as exc:                              # Ctrl-C
        ...     exc.result.status
        'interrupted'
    """

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {self}"]


class IsolatedCellError(_ShownWithoutOurFrames, Exception):
    """The user's code raised in the worker; the message carries the worker's traceback.

    ``exc_type`` is the name of the exception raised there (``"ZeroDivisionError"``),
    ``exc_message`` its message, ``child_traceback`` the formatted traceback.

    Example:
        >>> try:
        ...     run_isolated("1 / 0")                                     # doctest: +SKIP
        ... except IsolatedCellError as exc:
        ...     exc.exc_type
        'ZeroDivisionError'
    """

    def __init__(self, message: str, result: Any = None, exc_type: str = "", exc_message: str = "",
                 child_traceback: str = "") -> None:
        super().__init__(message)
        self.result = result
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.child_traceback = child_traceback

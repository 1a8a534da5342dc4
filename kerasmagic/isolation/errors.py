"""What can go wrong in an isolated run, each as its own exception carrying the partial report.

Every exception raised after a worker was involved has ``.result``: the
:class:`~kerasmagic.isolation.result.IsolatedResult` so far (wall time, peaks, last output),
so that the magic can show the report before it re-raises.
"""

from __future__ import annotations

import signal
from typing import Any

from ..errors import KerasMagicUsageError

__all__ = ['IsolatedCellError', 'IsolatedCrash', 'IsolatedInterrupt', 'IsolatedShippingError', 'IsolatedTimeout',
           'IsolationUsageError', 'IsolationWarning', 'describe_exit', 'shorten_message']

#: Signals a process gets for its own fault, each with what it means: (the noun, the verb phrase).
_FAULT_SIGNALS: dict[int, tuple[str, str]] = {
    signal.SIGSEGV: ("segmentation fault", "died of a segmentation fault"),
    signal.SIGBUS: ("bus error", "died of a bus error"),
    signal.SIGFPE: ("floating-point exception", "died of a floating-point exception"),
    signal.SIGILL: ("illegal instruction", "died on an illegal instruction"),
    signal.SIGABRT: ("abort", "aborted"),
}
#: A job's error message longer than this is shortened where it is shown (the whole stays in
#: ``exc_message``): a 20 MB message printed into a cell (twice, with its traceback) hangs the browser.
LONG_MESSAGE_CHARS = 4000


def describe_exit(code: int | None, *, verb: bool = False) -> str:
    """A process's end in words, from its exit status (negative: the signal that ended it).

    ``verb`` gives the phrase that follows "the worker ..." in a sentence; without, the short
    form a summary row shows.

    Example:
        >>> describe_exit(3), describe_exit(-9), describe_exit(-11)
        ('exited with code 3', 'killed by signal 9 (SIGKILL)', 'segmentation fault (signal 11, SIGSEGV)')
        >>> describe_exit(-9, verb=True), describe_exit(-11, verb=True)
        ('was killed by signal 9 (SIGKILL)', 'died of a segmentation fault (signal 11, SIGSEGV)')
    """
    if code is None:
        return "ended, its exit status unknown"
    if code >= 0:
        return f"exited with code {code}"
    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = ""
    which = f"signal {number}, {name}" if name else f"signal {number}"
    if number in _FAULT_SIGNALS:
        noun, phrase = _FAULT_SIGNALS[number]
        return f"{phrase if verb else noun} ({which})"
    named = f"signal {number} ({name})" if name else f"signal {number}"
    return f"{'was ' if verb else ''}killed by {named}"


def shorten_message(text: str, limit: int = LONG_MESSAGE_CHARS) -> str:
    """``text`` as shown in a cell: whole up to ``limit`` characters, else its start and end
    around a note of what was left out (the whole is in the exception's ``exc_message``).

    Example:
        >>> shorten_message("short")
        'short'
        >>> print(shorten_message("a" * 30 + "z" * 30, limit=20))
        aaaaaaaaaaaaaaa
        … [40 of its 60 characters left out here; exc_message holds all of them] …
        zzzzz
    """
    if len(text) <= limit:
        return text
    head, tail = text[:limit * 3 // 4], text[-(limit // 4):]
    left_out = len(text) - len(head) - len(tail)
    return f"{head}\n… [{left_out:,} of its {len(text):,} characters left out here; exc_message holds all of them] …" \
           f"\n{tail}"


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


class IsolatedOutOfMemory(IsolatedCrash):
    """The job reached its ``memory_limit``; its worker was killed, the kernel was not.

    An :class:`IsolatedCrash` (code that catches crashes catches it too), with the status
    ``"out_of_memory"``; ``result.child_rss_peak_bytes`` is the last reading, and
    ``result.memory_limit_how`` says whether a cgroup held the limit or only the watch.

    Example:
        >>> try:
        ...     run_isolated("x = bytearray(2**31)", memory_limit="1GiB")   # doctest: +SKIP
        ... except IsolatedOutOfMemory as exc:
        ...     exc.result.status
        'out_of_memory'
    """


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

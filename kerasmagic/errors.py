"""Exceptions kerasmagic raises for bad input, and the checks shared by every entry point;
the magics turn them into ``UsageError``."""

import math
import numbers
import threading
from typing import Any, ClassVar

__all__ = ['KerasMagicUsageError', 'KernelMemoryLimitError', 'KernelMemoryLimitInterrupt', 'check_seed',
           'check_timeout']


class KerasMagicUsageError(ValueError):
    """Bad input from the user; the message says what to do instead. In IPython it shows as that
    one line (``_render_traceback_``), not as a traceback through kerasmagic's checks: the magics
    say it as a ``UsageError``, the Python API the same way.

    Example:
        >>> raise KerasMagicUsageError("no variable named 'modle'; %who lists your variables")
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: no variable named 'modle'; %who lists your variables
        >>> KerasMagicUsageError("say what to do")._render_traceback_()
        ['KerasMagicUsageError: say what to do']
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class _ArmedStop:
    """What the guard's two stops share: Python makes them from the class alone (the guard raises it
    from another thread), so the message and the figures are read from what :meth:`arm` set."""

    _armed: ClassVar[dict[str, Any]] = {}
    _armed_lock: ClassVar[threading.Lock] = threading.Lock()
    #: How many stops Python has made in the main thread so far: one is made only where it lands,
    #: so the guard can tell a stop that landed in the cell (and was caught) from one still waiting
    #: for a long C call or a ``t.join()`` to end (one that lands in a thread the cell started does
    #: not count: the cell itself may still wait).
    landed: ClassVar[int] = 0

    cell: int | None
    rss_bytes: int | None
    limit_bytes: int | None

    def __init__(self, *args: Any) -> None:
        with _ArmedStop._armed_lock:
            armed = dict(_ArmedStop._armed)
            if threading.current_thread() is threading.main_thread():
                _ArmedStop.landed += 1
        if not args:
            args = (armed.get("message", "the kernel's memory limit is near"),)
        super().__init__(*args)
        self.cell = armed.get("cell")
        self.rss_bytes = armed.get("rss_bytes")
        self.limit_bytes = armed.get("limit_bytes")

    @classmethod
    def arm(cls, message: str, *, cell: int | None, rss_bytes: int, limit_bytes: int) -> None:
        """Set what the next instance made without arguments says (the guard, before raising)."""
        with _ArmedStop._armed_lock:
            _ArmedStop._armed = {"message": message, "cell": cell, "rss_bytes": rss_bytes,
                                 "limit_bytes": limit_bytes}


class KernelMemoryLimitError(_ArmedStop, MemoryError):
    """Raised in the running cell by the memory guard, before the out-of-memory killer would end the
    kernel; the message names the cell, the figure and the limit. The kernel and its variables survive.

    ``cell``, ``rss_bytes`` and ``limit_bytes`` carry the figures. The guard raises the class from
    another thread (``PyThreadState_SetAsyncExc`` takes a class, not an instance), so the details
    are armed beforehand and read when Python makes the instance.

    Example:
        >>> try:                                     # doctest: +SKIP
        ...     chunks = [bytearray(2**26) for _ in range(1000)]
        ... except kerasmagic.KernelMemoryLimitError as exc:
        ...     print(exc)
        cell [12] was stopped by kerasmagic's memory guard at 973 MiB of a 1.00 GiB limit (95 % ≥ 95 %; ...
    """



class KernelMemoryLimitInterrupt(_ArmedStop, BaseException):
    """The memory guard's second stop, for a cell whose code caught the first one (``except
    Exception:`` catches :class:`KernelMemoryLimitError`, a ``MemoryError``) and kept growing.

    Like ``KeyboardInterrupt`` it is no ``Exception``, so ``except Exception`` lets it through;
    the message says the first stop was caught. The kernel and its variables survive.

    Example:
        >>> issubclass(KernelMemoryLimitInterrupt, Exception)
        False
        >>> KernelMemoryLimitError.arm("stopped again", cell=3, rss_bytes=1, limit_bytes=2)
        >>> str(KernelMemoryLimitInterrupt()), KernelMemoryLimitInterrupt().cell
        ('stopped again', 3)
    """


def check_seed(seed: Any) -> None:
    """A random seed as Keras takes it: an integer from 0 to 2**32 - 1 (None: keep yours).

    One rule for ``clear_tf``, ``fresh_model``, the isolated entry points and the magics, so
    that a bad seed fails the same way everywhere, before anything runs.

    Example:
        >>> check_seed(42)
        >>> check_seed(-3)
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: the seed must be an integer from 0 to 2**32 - 1, got -3; e.g. --seed 42
    """
    # numbers.Integral: a numpy integer (np.int64 from a loop over np.arange) is a fine seed.
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                             or not 0 <= int(seed) < 2**32):
        raise KerasMagicUsageError(f"the seed must be an integer from 0 to 2**32 - 1, got {seed!r}; e.g. --seed 42")


def check_timeout(timeout: Any) -> None:
    """A timeout in seconds: a finite number > 0 (None: no timeout). ``True`` and NaN are refused.

    Example:
        >>> check_timeout(600)
        >>> check_timeout(float("nan"))
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: the timeout must be a finite number of seconds > 0, e.g. 600; got nan
        >>> check_timeout(10**400)
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: the timeout must be a finite number of seconds > 0, e.g. 600; got a
        number too large for a float (about 401 digits)
    """
    if timeout is None:
        return
    words = "the timeout must be a finite number of seconds > 0, e.g. 600"
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise KerasMagicUsageError(f"{words}; got {timeout!r}")
    try:
        seconds = float(timeout)
    except OverflowError:  # 10**400: an int (or Fraction) no float holds; its repr may be thousands of digits
        raise KerasMagicUsageError(f"{words}; got a number too large for a float "
                                   f"(about {_decimal_digits(timeout)} digits)") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise KerasMagicUsageError(f"{words}; got {timeout!r}")


def _decimal_digits(number: Any) -> int:
    """Roughly how many digits ``number`` has before its point, without printing it (``str()`` of
    an int past 4300 digits raises).

    Example:
        >>> _decimal_digits(10**400)
        401
    """
    whole = abs(int(number))
    return max(1, int(whole.bit_length() * math.log10(2)) + 1)

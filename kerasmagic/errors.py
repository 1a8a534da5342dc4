"""Exceptions kerasmagic raises for bad input, and the checks shared by every entry point;
the magics turn them into ``UsageError``."""

import math
import numbers
from typing import Any

__all__ = ['KerasMagicUsageError', 'check_seed', 'check_timeout']


class KerasMagicUsageError(ValueError):
    """Bad input from the user; the message says what to do instead.

    Example:
        >>> raise KerasMagicUsageError("no variable named 'modle'; %who lists your variables")
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: no variable named 'modle'; %who lists your variables
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
    """
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise KerasMagicUsageError(f"the timeout must be a finite number of seconds > 0, e.g. 600; got {timeout!r}")

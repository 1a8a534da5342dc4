"""Exceptions kerasmagic raises for bad input; the magics turn them into ``UsageError``."""

__all__ = ['KerasMagicUsageError']


class KerasMagicUsageError(ValueError):
    """Bad input from the user; the message says what to do instead.

    Example:
        >>> raise KerasMagicUsageError("no variable named 'modle'; %who lists your variables")
        Traceback (most recent call last):
        ...
        kerasmagic.errors.KerasMagicUsageError: no variable named 'modle'; %who lists your variables
    """

"""The typed "not available" value every probe returns instead of raising."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = ['Unavailable', 'guarded', 'to_jsonable']

T = TypeVar("T")


@dataclass(frozen=True)
class Unavailable:
    """A value a probe could not give, and why.

    It is falsy, so ``if value:`` reads naturally, and it serialises to the wire format
    ``{"status": "unavailable", "reason": ..., "detail": ...}``. ``reason`` is one of
    ``not_installed`` (the package is not importable), ``not_imported`` (installed, but not
    imported: we never import it for the user), ``not_started`` (imported, but its runtime
    is not running: probing would start it), ``no_device`` (no such device or driver),
    ``not_supported`` (this platform or version cannot give the number) or ``error`` (the
    probe failed; ``detail`` says why), as docs/reference/protocol.md lists them.

    Example:
        >>> Unavailable("not_imported", "tensorflow is not imported in this kernel")
        Unavailable(reason='not_imported', detail='tensorflow is not imported in this kernel')
    """

    reason: str
    detail: str = ""

    def __bool__(self) -> Literal[False]:  # Literal: type checkers then know `value or default`
        return False

    def to_dict(self) -> dict[str, str]:
        return {"status": "unavailable", "reason": self.reason, "detail": self.detail}

    def __str__(self) -> str:
        return f"n/a ({self.detail or self.reason.replace('_', ' ')})"


def guarded(fn: Callable[[], T], what: str) -> T | Unavailable:
    """Call ``fn`` and turn any exception into ``Unavailable("error")``.

    This is the one choke point where probe failures stop: a probe must never raise into
    the user's cell or kill the sampler thread.

    Example:
        >>> guarded(lambda: 1 / 0, "division")
        Unavailable(reason='error', detail='division failed: ZeroDivisionError: division by zero')
    """
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - this is the designated catch-all boundary
        return Unavailable("error", f"{what} failed: {type(exc).__name__}: {exc}")


def to_jsonable(value: Any) -> Any:
    """Recursively convert probe values (including ``Unavailable``) to JSON-able data.

    An object with a ``to_dict()`` (a record) becomes its wire form, made JSON-able in turn.

    Example:
        >>> to_jsonable({"rss": 1, "gpu": Unavailable("no_device"), "shape": (2, 3)})
        {'rss': 1, 'gpu': {'status': 'unavailable', 'reason': 'no_device', 'detail': ''}, 'shape': [2, 3]}
    """
    if isinstance(value, Unavailable):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    return value

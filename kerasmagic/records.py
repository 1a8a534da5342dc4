"""Records: dataclasses whose wire form (``to_dict()``) follows from their fields.

A record lists each field once, in the order it travels. :func:`wire_dict` turns it into
its wire form: every field under its own name, made JSON-able (nested records through their
own ``to_dict()``, an ``Unavailable`` as its wire object, containers copied), except where
the field's metadata says otherwise:

- ``field(metadata=NOT_WIRE)``: the field stays in this process (a returned model, output
  kept for an error message);
- ``field(metadata=wire(name=..., convert=..., then=(...)))``: it travels under another
  name, or through a converter of its own, or is followed on the wire by derived values
  (properties) named in ``then``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from .probes.availability import to_jsonable

__all__ = ['NOT_WIRE', 'Record', 'wire', 'wire_dict']

#: The metadata of a field that is not part of the wire form.
NOT_WIRE: Mapping[str, Any] = MappingProxyType({"wire": False})


def wire(name: str | None = None, *, convert: Callable[[Any], Any] | None = None,
         then: Iterable[str] = ()) -> dict[str, Any]:
    """Field metadata: travel as ``name``, converted by ``convert``, followed by ``then``.

    Example:
        >>> from dataclasses import dataclass, field
        >>> @dataclass
        ... class Span(Record):
        ...     start: int
        ...     end: int = field(metadata=wire("stop", then=("length",)))
        ...     note: str = field(default="", metadata=NOT_WIRE)
        ...     @property
        ...     def length(self) -> int:
        ...         return self.end - self.start
        >>> Span(2, 5, note="kept here").to_dict()
        {'start': 2, 'stop': 5, 'length': 3}
    """
    return {"wire": True, "wire_name": name, "wire_convert": convert, "wire_then": tuple(then)}


def wire_dict(record: Any, *, value: Callable[[Any], Any] = to_jsonable) -> dict[str, Any]:
    """The wire form of a dataclass ``record``; ``value`` converts each field without a converter.

    The default makes every value JSON-able; a record that travels pickled (an isolation
    job) passes ``value=lambda v: v`` to send its values as they are.

    Example:
        >>> from dataclasses import dataclass
        >>> from kerasmagic.probes import Unavailable
        >>> @dataclass
        ... class Reading:
        ...     source: str
        ...     bytes: object
        >>> wire_dict(Reading("nvml", Unavailable("no_device", "no driver")))
        {'source': 'nvml', 'bytes': {'status': 'unavailable', 'reason': 'no_device', 'detail': 'no driver'}}
    """
    result: dict[str, Any] = {}
    for item in fields(record):
        meta = item.metadata
        if not meta.get("wire", True):
            continue
        convert = meta.get("wire_convert") or value
        result[meta.get("wire_name") or item.name] = convert(getattr(record, item.name))
        for derived in meta.get("wire_then", ()):
            result[derived] = value(getattr(record, derived))
    return result


class Record:
    """Base of the dataclass records: ``to_dict()`` is their wire form (:func:`wire_dict`)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able wire form: what events, the sidebar and saved reports get."""
        return wire_dict(self)

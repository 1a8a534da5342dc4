"""Probes: one module per source, each observing without importing or starting anything.

Every value is either a plain JSON-able number/string or an :class:`Unavailable` that says
why it is missing. Probes never raise into the caller.
"""

from .availability import Unavailable, guarded, to_jsonable

__all__ = ["Unavailable", "guarded", "to_jsonable"]

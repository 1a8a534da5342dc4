"""A tiny in-process publish/subscribe for what kerasmagic does (cleans, fresh cells).

The live channel subscribes so that the sidebar can show a clean's report the moment it
happens; the core never imports the channel (a lower layer must not know a higher one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ['publish', 'subscribe']

Listener = Callable[[str, dict[str, Any]], None]

_listeners: list[Listener] = []
_lock = threading.Lock()
logger = logging.getLogger(__name__)


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(kind, payload)`` on every event; returns the unsubscribe function.

    Example:
        >>> seen = []
        >>> stop = subscribe(lambda kind, payload: seen.append(kind))
        >>> publish("clear_tf", {})
        >>> stop(); seen
        ['clear_tf']
    """
    with _lock:
        _listeners.append(listener)

    def unsubscribe() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return unsubscribe


def publish(kind: str, payload: dict[str, Any]) -> None:
    """Send an event to every listener; a failing listener never breaks the caller."""
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(kind, payload)
        except Exception:  # a broken frontend must not break %clear_tf
            logger.warning("kerasmagic.events: a listener failed on %r", kind, exc_info=True)

"""The ``kerasmagic.live`` wire protocol: names, version, and validation of both directions.

The written contract is ``docs/protocol.md``; the JSON fixtures in
``tests/protocol_fixtures/`` are checked against :func:`validate` here and against the
TypeScript guards in ``src/protocol.ts``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "TARGET_NAME",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "check_version",
    "validate",
]

TARGET_NAME = "kerasmagic.live"
#: Bumped independently of the package version: major = incompatible, minor = additive.
PROTOCOL_VERSION = "1.0.0"

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0


class ProtocolError(ValueError):
    """A message that does not follow the protocol; ``code`` goes into the error reply."""

    def __init__(self, code: str, message: str, request_method: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_method = request_method


def _major(version: Any) -> int | None:
    if not isinstance(version, str):
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def check_version(peer_version: Any) -> None:
    """Raise :class:`ProtocolError` unless ``peer_version`` has our major version.

    Example:
        >>> check_version("1.3.0")
        >>> check_version("2.0.0")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        kerasmagic.live.protocol.ProtocolError: this kernel's kerasmagic speaks protocol 1.0.0, the frontend 2.0.0: ...
    """
    if _major(peer_version) != _major(PROTOCOL_VERSION):
        raise ProtocolError(
            "protocol_mismatch",
            f"this kernel's kerasmagic speaks protocol {PROTOCOL_VERSION}, the frontend "
            f"{peer_version if peer_version is not None else '(none)'}: upgrade the older side "
            "(pip install -U kerasmagic, then restart the kernel and reload the page)",
        )


# ---- field kinds -------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_unavailable(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("status") == "unavailable"
        and isinstance(value.get("reason"), str)
        and isinstance(value.get("detail", ""), str)
    )


def _number_or_unavailable(value: Any) -> bool:
    return _is_number(value) or _is_unavailable(value)


def _str_or_unavailable(value: Any) -> bool:
    return isinstance(value, str) or _is_unavailable(value)


def _tf(value: Any) -> bool:
    if _is_unavailable(value):
        return True
    if not isinstance(value, dict) or not isinstance(value.get("devices"), dict):
        return False
    return all(
        isinstance(dev, dict)
        and all(
            _number_or_unavailable(dev.get(k))
            for k in ("in_use_bytes", "peak_bytes", "held_unused_min_bytes")
        )
        for dev in value["devices"].values()
    )


def _gpu(value: Any) -> bool:
    if _is_unavailable(value):
        return True
    if not isinstance(value, list):
        return False
    for dev in value:
        if _is_unavailable(dev):
            continue
        if not isinstance(dev, dict) or not _is_number(dev.get("index")):
            return False
        if not all(
            _number_or_unavailable(dev.get(k))
            for k in ("used_bytes", "total_bytes", "process_used_bytes")
        ):
            return False
    return True


def _models(value: Any) -> bool:
    if _is_unavailable(value):
        return True
    return isinstance(value, list) and all(
        isinstance(m, dict)
        and isinstance(m.get("name"), str)
        and _number_or_unavailable(m.get("weight_bytes"))
        and _number_or_unavailable(m.get("optimizer_bytes"))
        for m in value
    )


def _counters(value: Any) -> bool:
    if _is_unavailable(value):
        return True
    return isinstance(value, dict) and all(_is_number(v) for v in value.values())


def _interval(value: Any) -> bool:
    return _is_number(value) and MIN_INTERVAL_S <= value <= MAX_INTERVAL_S


_BOOL = lambda v: isinstance(v, bool)  # noqa: E731
_STR = lambda v: isinstance(v, str)  # noqa: E731
_NUM = _is_number
_ANY = lambda v: True  # noqa: E731
_DICT_OR_NULL = lambda v: v is None or isinstance(v, dict)  # noqa: E731

# method -> (required fields, optional fields); each field maps to its check.
_TO_KERNEL: dict[str, tuple[dict, dict]] = {
    "open": ({}, {"visible": _BOOL, "interval_s": _interval}),
    "visibility": ({"visible": _BOOL}, {}),
    "configure": ({"interval_s": _interval}, {}),
    "clear": ({"request_id": _STR}, {}),
    "refresh": ({}, {}),
}
_TO_FRONTEND: dict[str, tuple[dict, dict]] = {
    "hello": (
        {"protocol_version": _STR, "package_version": _STR, "pid": _NUM, "interval_s": _NUM, "ts": _NUM},
        {},
    ),
    "sample": (
        {"seq": _NUM, "ts": _NUM, "rss_bytes": _number_or_unavailable, "tf": _tf, "gpu": _gpu,
         "sample_cost_s": _NUM},
        {},
    ),
    "facts": (
        {"ts": _NUM, "execution_count": _NUM, "tf_status": _str_or_unavailable,
         "keras_status": _str_or_unavailable, "graph_op_count": _number_or_unavailable,
         "custom_gradient_entries": _number_or_unavailable, "name_counters": _counters,
         "live_models": _models},
        {},
    ),
    "event": ({"kind": _STR, "ts": _NUM, "payload": _ANY}, {"text": _STR}),
    "clear_result": (
        {"request_id": _STR, "ok": _BOOL, "ts": _NUM, "report": _DICT_OR_NULL, "text": _STR},
        {},
    ),
    "error": ({"code": _STR, "message": _STR, "ts": _NUM}, {"request_method": _STR}),
}
_DIRECTIONS = {"to_kernel": _TO_KERNEL, "to_frontend": _TO_FRONTEND}


def validate(data: Any, direction: str = "to_kernel") -> dict[str, Any]:
    """Return ``data`` if it is a valid message in ``direction``, else raise ProtocolError.

    Unknown extra fields are allowed (a newer minor version may add them).

    Example:
        >>> validate({"method": "visibility", "visible": True})["visible"]
        True
        >>> validate({"method": "explode"})
        Traceback (most recent call last):
        ...
        kerasmagic.live.protocol.ProtocolError: unknown method 'explode'
    """
    methods = _DIRECTIONS[direction]
    if not isinstance(data, dict):
        raise ProtocolError("bad_message", f"a message must be a JSON object, got {type(data).__name__}")
    method = data.get("method")
    if not isinstance(method, str):
        raise ProtocolError("bad_message", "a message needs a string 'method'")
    if method not in methods:
        raise ProtocolError("unknown_method", f"unknown method {method!r}", method)
    required, optional = methods[method]
    for name, check in required.items():
        if name not in data:
            raise ProtocolError("bad_message", f"{method}: missing field {name!r}", method)
        if not check(data[name]):
            raise ProtocolError("bad_message", f"{method}: bad value for {name!r}: {data[name]!r}", method)
    for name, check in optional.items():
        if name in data and not check(data[name]):
            raise ProtocolError("bad_message", f"{method}: bad value for {name!r}: {data[name]!r}", method)
    return data

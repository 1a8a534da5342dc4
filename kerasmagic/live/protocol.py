"""The ``kerasmagic.live`` wire protocol: names, version, and validation of both directions.

Every message is defined once, in the JSON Schema ``protocol.schema.json`` beside this module
(draft 2020-12, shipped in the wheel): the sidebar's TypeScript types are generated from it,
and the tests hold to it the JSON fixtures in ``tests/protocol_fixtures/``, a real kernel's
messages, ``docs/reference/protocol.md`` and the tables below (same methods, same required and optional
fields). The kernel checks what it receives with these small checks rather than the schema, so
that ``jsonschema`` stays a test dependency; the same fixtures also run through
:func:`validate` here and the TypeScript guards in ``labextension/src/protocol.ts``.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable
from typing import Any

__all__ = [
    "TARGET_NAME",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "check_version",
    "echo",
    "speaks_at_least",
    "shorten",
    "validate",
]

TARGET_NAME = "kerasmagic.live"
#: Bumped independently of the package version: major = incompatible, minor = additive.
PROTOCOL_VERSION = "1.7.0"

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0

#: How much of a peer's value an error reply echoes (a frontend may send megabytes).
ECHO_LIMIT = 80


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` if it is short, else its first ``limit`` characters and its length.

    Example:
        >>> shorten("abc")
        'abc'
        >>> shorten("x" * 1000, 5)
        'xxxxx… (1000 characters)'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def _about_digits(value: int) -> int:
    return int(abs(value).bit_length() * math.log10(2)) + 1


class _ShortRepr(reprlib.Repr):
    """A repr that never builds a big string, nor fails on a huge int."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxstring = self.maxlong = self.maxother = ECHO_LIMIT
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = 4

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 4 * ECHO_LIMIT:  # more digits than we show, maybe more than str() allows
            return f"<an integer of about {_about_digits(x)} digits>"
        return super().repr_int(x, level)


_short_repr = _ShortRepr()


def echo(value: Any, limit: int = ECHO_LIMIT) -> str:
    """A repr of a peer's ``value`` for an error message, cut to about ``limit`` characters.

    Example:
        >>> echo("explode")
        "'explode'"
        >>> echo("x" * 10_000_000, 3)
        "'xxx'… (10000000 characters)"
        >>> echo(10**400)
        'an integer of about 401 digits'
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of about {_about_digits(value)} digits"
    try:
        text = _short_repr.repr(value)
    except Exception:  # noqa: BLE001 - a repr is a courtesy; the type still helps
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}…"


class ProtocolError(ValueError):
    """A message that does not follow the protocol; ``code`` goes into the error reply.

    ``request_method`` is the peer's method name, cut to :data:`ECHO_LIMIT` characters.
    """

    def __init__(self, code: str, message: str, request_method: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_method = shorten(request_method) if isinstance(request_method, str) else None


def _major(version: Any) -> int | None:
    if not isinstance(version, str):
        return None
    head = version.partition(".")[0]
    # ASCII digits only ("¹".isdigit() is true, int("¹") fails), and few of them (int() refuses
    # more than 4300 digits; no real major has more than a handful).
    if not (head.isascii() and head.isdigit() and len(head) <= 9):
        return None
    return int(head)


def speaks_at_least(peer_version: Any, minor: int) -> bool:
    """Whether a peer of our major speaks minor version ``minor`` or later (a later minor
    adds methods: the kernel sends them only to a frontend that knows them).

    Example:
        >>> speaks_at_least("1.1.0", 1), speaks_at_least("1.0.0", 1), speaks_at_least("1", 1)
        (True, False, False)
    """
    if _major(peer_version) != _major(PROTOCOL_VERSION):
        return False
    parts = peer_version.split(".")
    second = parts[1] if len(parts) > 1 else ""
    if not (second.isascii() and second.isdigit() and len(second) <= 9):
        return False
    return int(second) >= minor


def check_version(peer_version: Any) -> None:
    """Raise :class:`ProtocolError` unless ``peer_version`` has our major version.

    Example:
        >>> check_version("1.3.0")
        >>> check_version("2.0.0")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        kerasmagic.live.protocol.ProtocolError: this kernel's kerasmagic speaks protocol 1.7.0, the frontend 2.0.0: ...
    """
    if _major(peer_version) != _major(PROTOCOL_VERSION):
        raise ProtocolError(
            "protocol_mismatch",
            f"this kernel's kerasmagic speaks protocol {PROTOCOL_VERSION}, the frontend "
            f"{_peer_version(peer_version)}: upgrade the older side "
            "(pip install -U kerasmagic, then restart the kernel and reload the page)",
        )


def _peer_version(value: Any) -> str:
    if value is None:
        return "(none)"
    return shorten(value) if isinstance(value, str) else echo(value)


# ---- field kinds -------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a double (JSON allows 10**400): not a number here
        return False


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


def _entry_count(value: Any) -> bool:
    """A count of registry entries: an integer, never negative (bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number_or_null(value: Any) -> bool:
    return value is None or _is_number(value)


def _node(value: Any) -> bool:
    return value is None or (
        isinstance(value, dict) and isinstance(value.get("ip"), str) and isinstance(value.get("hostname"), str)
    )


#: A job's optional fields (since 1.4): torch's ``max_memory_allocated`` and JAX's
#: ``peak_bytes_in_use`` in the worker, summed over devices.
_JOB_ALLOCATOR_PEAKS = ("torch_peak_bytes", "jax_peak_bytes")


def _job(value: Any) -> bool:
    """One isolated job as the sidebar shows it (docs/reference/protocol.md, ``isolated_*``)."""
    if not isinstance(value, dict):
        return False
    checks = {"job_id": _STR, "label": _STR, "status": _STR, "on": _STR, "node": _node, "started_ts": _NUM,
              "wall_s": _number_or_null, "rss_peak_bytes": _number_or_null, "gpu_peak_bytes": _number_or_null}
    if not all(name in value and check(value[name]) for name, check in checks.items()):
        return False
    # Since 1.4, optional: the worker's allocator peaks, present only where they have a number.
    if not all(_is_number(value[name]) for name in _JOB_ALLOCATOR_PEAKS if name in value):
        return False
    if "map_progress" in value and not _map_progress(value["map_progress"]):
        return False
    if "spare" in value and not isinstance(value["spare"], str):
        return False
    if "spares" in value and not _spares(value["spares"]):
        return False
    return "error" not in value or isinstance(value["error"], str)


def _spares(value: Any) -> bool:
    """Optional on a finished job (ignored by frontends before it): the isolation pool's warm spares
    then, each ``{"pid", "device", "state", "rss_bytes", "gpu_bytes"}`` (a figure it lacks is null)."""
    return isinstance(value, list) and all(
        isinstance(spare, dict) and _is_number(spare.get("pid")) and spare.get("state") in ("warming", "ready")
        and (spare.get("device") is None or isinstance(spare.get("device"), str))
        and _number_or_null(spare.get("rss_bytes")) and _number_or_null(spare.get("gpu_bytes"))
        for spare in value)


def _map_progress(value: Any) -> bool:
    """Optional on a job (1.6, ignored by older frontends): its ``isolated_map``'s counts and time left."""
    return isinstance(value, dict) and all(
        _is_number(value.get(name)) for name in ("total", "done", "running", "failed", "left", "elapsed_s")
    ) and _number_or_null(value.get("eta_s"))


def _jobs(value: Any) -> bool:
    return isinstance(value, list) and all(_job(job) for job in value)


def _figures(value: Any) -> bool:
    """A cell's figures (``last``, ``per_run``): each a number or null."""
    return isinstance(value, dict) and all(_number_or_null(v) for v in value.values())


def _cell(value: Any) -> bool:
    """One cell of a ``cell_growth`` message (docs/reference/protocol.md)."""
    if not isinstance(value, dict):
        return False
    checks = {"key": _STR, "cell_id": _str_or_null, "execution_count": _number_or_null, "runs": _NUM,
              "streak": _NUM, "flagged": _BOOL, "growth_per_run_bytes": _number_or_null,
              "per_run": lambda v: v is None or _figures(v), "last": _figures, "fix": _str_or_null}
    if not all(name in value and check(value[name]) for name, check in checks.items()):
        return False
    return all(name not in value or check(value[name])
               for name, check in (("first_line", _STR), ("last_ts", _NUM)))


def _cells(value: Any) -> bool:
    return isinstance(value, list) and all(_cell(cell) for cell in value)


def _process_tree(value: Any) -> bool:
    """A sample's ``process_tree`` (since 1.6): the kernel's PSS and its child processes' RSS
    and PSS as of ``ts``, or unavailable."""
    if _is_unavailable(value):
        return True
    return (
        isinstance(value, dict)
        and _is_number(value.get("ts"))
        and _is_number(value.get("children_count"))
        and _is_number(value.get("children_rss_bytes"))
        and all(_number_or_unavailable(value.get(k)) for k in ("pss_bytes", "children_pss_bytes"))
        # Optional, later 1.7 kernels: the RSS it was read at, whether it is stale, its period.
        and all(k not in value or _is_number(value[k]) for k in ("rss_bytes", "period_s"))
        and isinstance(value.get("stale", False), bool)
    )


def _memory_limit(value: Any) -> bool:
    """A sample's ``memory_limit``: the limit, what counts against it, the headroom and the guard's
    levels and state, or unavailable."""
    if _is_unavailable(value):
        return True
    guard = value.get("guard") if isinstance(value, dict) else None
    return (
        isinstance(value, dict)
        and all(_is_number(value.get(k)) for k in ("limit_bytes", "used_bytes", "headroom_bytes", "used_pct"))
        and isinstance(value.get("source"), str)
        and isinstance(guard, dict)
        and isinstance(guard.get("enabled"), bool)
        and all(_is_number(guard.get(k)) for k in ("warn_pct", "stop_pct", "warnings", "stops"))
    )


def _gpu_context(value: Any) -> bool:
    """A sample's ``gpu_context`` (since 1.7): NVML's figure for the kernel less the pools."""
    return (isinstance(value, dict) and _is_number(value.get("context_bytes"))
            and isinstance(value.get("upper_bound"), bool) and isinstance(value.get("pools"), list)
            and all(isinstance(pool, str) for pool in value["pools"]))


def _host(value: Any) -> bool:
    """A sample's ``host`` (since 1.3): the machine's memory, or unavailable."""
    if _is_unavailable(value):
        return True
    return isinstance(value, dict) and _is_number(value.get("total_bytes")) and _is_number(
        value.get("available_bytes"))


def _framework_devices(value: Any, fields: tuple[str, ...], check: Callable[[Any], bool]) -> bool:
    """A framework allocator's ``{"status", "devices": {name: {field: value}}}`` (since 1.4)."""
    if not isinstance(value, dict) or not isinstance(value.get("status"), str):
        return False
    devices = value.get("devices")
    return isinstance(devices, dict) and all(
        isinstance(device, dict) and all(check(device.get(field)) for field in fields)
        for device in devices.values())


_TORCH_FIELDS = ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "held_unused_bytes")
_JAX_FIELDS = ("in_use_bytes", "peak_bytes", "pool_bytes", "limit_bytes", "held_unused_bytes")


def _torch(value: Any) -> bool:
    """A sample's ``torch`` (since 1.4): the CUDA caching allocator per device, or unavailable."""
    return _is_unavailable(value) or _framework_devices(value, _TORCH_FIELDS, _is_number)


def _jax(value: Any) -> bool:
    """A sample's ``jax`` (since 1.4): the pool per device (a figure JAX lacks is null) and the
    preallocation setting, or unavailable."""
    if _is_unavailable(value):
        return True
    return _framework_devices(value, _JAX_FIELDS, _number_or_null) and isinstance(value.get("preallocation"), str)


def _run(value: Any) -> bool:
    """One cell run (``cell_run``'s ``run``, ``history``'s ``cell_runs``; since 1.3)."""
    if not isinstance(value, dict):
        return False
    checks = {"execution_count": _number_or_null, "cell_id": _str_or_null, "started_ts": _NUM,
              "ended_ts": _number_or_null, "status": _STR}
    # Since 1.5, optional: the kernel's RSS at the cell's start and end, and its peak.
    figures = {"rss_start_bytes": _number_or_null, "rss_end_bytes": _number_or_null,
               "peak_rss_bytes": _number_or_null, "peak_exact": _BOOL}
    return (all(name in value and check(value[name]) for name, check in checks.items())
            and all(check(value[name]) for name, check in figures.items() if name in value))


def _runs(value: Any) -> bool:
    return isinstance(value, list) and all(_run(run) for run in value)


def _marks(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(mark, dict) and isinstance(mark.get("kind"), str) and _is_number(mark.get("ts"))
        for mark in value)


def _samples(value: Any) -> bool:
    """``history``'s samples: each a valid ``sample`` message."""
    if not isinstance(value, list):
        return False
    for sample in value:
        try:
            validate(sample, "to_frontend")
        except ProtocolError:
            return False
        if sample["method"] != "sample":
            return False
    return True


def _interval(value: Any) -> bool:
    return _is_number(value) and MIN_INTERVAL_S <= value <= MAX_INTERVAL_S


_BOOL = lambda v: isinstance(v, bool)  # noqa: E731
_STR = lambda v: isinstance(v, str)  # noqa: E731
_NUM = _is_number
_ANY = lambda v: True  # noqa: E731
_DICT_OR_NULL = lambda v: v is None or isinstance(v, dict)  # noqa: E731
_str_or_null = lambda v: v is None or isinstance(v, str)  # noqa: E731

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
        # Since 1.3 (a 1.2 frontend ignores them): cpu_pct, host; since 1.4: torch, jax;
        # since 1.5: interval_s, the interval the sample was taken at; since 1.6: process_tree;
        # since 1.7: gpu_context, and memory_limit (the limit, headroom and guard); later 1.7 kernels:
        # custom_gradient_entries, where TensorFlow is imported.
        {"cpu_pct": _number_or_unavailable, "host": _host, "torch": _torch, "jax": _jax, "interval_s": _NUM,
         "process_tree": _process_tree, "gpu_context": _gpu_context, "memory_limit": _memory_limit,
         "custom_gradient_entries": _entry_count},
    ),
    "facts": (
        {"ts": _NUM, "execution_count": _NUM, "tf_status": _str_or_unavailable,
         "keras_status": _str_or_unavailable, "graph_op_count": _number_or_unavailable,
         "custom_gradient_entries": _number_or_unavailable, "name_counters": _counters,
         "live_models": _models},
        # Since 1.7: whether this TensorFlow's CustomGradient entries keep their graphs (null: no TF).
        {"custom_gradients_pin_graphs": lambda v: v is None or isinstance(v, bool),
         # Later 1.7 kernels: when the cell `execution_count` ended, for "as of cell [n], <time>".
         "cell_ended_ts": _NUM},
    ),
    "event": ({"kind": _STR, "ts": _NUM, "payload": _ANY}, {"text": _STR}),
    "clear_result": (
        {"request_id": _STR, "ok": _BOOL, "ts": _NUM, "report": _DICT_OR_NULL, "text": _STR},
        {},
    ),
    "error": ({"code": _STR, "message": _STR, "ts": _NUM}, {"request_method": _STR}),
    # Since 1.1, only to a frontend that opened with 1.1 or later.
    "isolated_started": ({"ts": _NUM, "job": _job}, {}),
    "isolated_sample": (
        {"ts": _NUM, "job_id": _STR, "rss_bytes": _number_or_null, "rss_peak_bytes": _number_or_null,
         "gpu_peak_bytes": _number_or_null},
        {name: _NUM for name in _JOB_ALLOCATOR_PEAKS},  # since 1.4
    ),
    "isolated_done": ({"ts": _NUM, "job": _job}, {}),
    "isolated_jobs": ({"ts": _NUM, "jobs": _jobs}, {}),
    # Since 1.2, only to a frontend that opened with 1.2 or later.
    "cell_growth": (
        {"ts": _NUM, "threshold_bytes": _NUM, "min_runs": _NUM, "watched_cells": _NUM, "cells": _cells},
        {},
    ),
    # Since 1.3, only to a frontend that opened with 1.3 or later.
    "cell_run": ({"ts": _NUM, "run": _run}, {}),
    # Since 1.5: why this notebook's previous kernel died (kerasmagic.postmortem).
    "postmortem": ({"ts": _NUM, "died_ts": _number_or_null, "execution_count": _number_or_null, "text": _STR}, {}),
    "history": ({"ts": _NUM, "samples": _samples, "cell_runs": _runs, "marks": _marks}, {}),
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
        raise ProtocolError("unknown_method", f"unknown method {echo(method)}", method)
    required, optional = methods[method]
    for name, check in required.items():
        if name not in data:
            raise ProtocolError("bad_message", f"{method}: missing field {name!r}", method)
        if not check(data[name]):
            raise ProtocolError("bad_message", f"{method}: bad value for {name!r}: {echo(data[name])}", method)
    for name, check in optional.items():
        if name in data and not check(data[name]):
            raise ProtocolError("bad_message", f"{method}: bad value for {name!r}: {echo(data[name])}", method)
    return data

"""A job's folder crossing between machines: its files as bytes, its paths rebased.

Locally a job's values are files in one folder that the kernel and the worker share
(``/dev/shm``); on a cluster the worker's node has its own disk, so the files the job's
specs name travel as bytes through Ray's object store and are written into a folder on
the other side, and every path in the specs is rewritten to point there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from ..messages import Done


def spec_paths(spec: dict[str, Any]) -> Iterator[str]:
    """The files one encoded value lives in (see :func:`kerasmagic.isolation.shipping.encode`).

    Example:
        >>> list(spec_paths({"format": "pickle", "path": "/j/x.pickle", "buffers": ["/j/x.buf0"]}))
        ['/j/x.pickle', '/j/x.buf0']
    """
    if spec.get("path"):
        yield spec["path"]
    yield from spec.get("buffers") or []


def _rebased(path: str, moves: dict[str, str]) -> str:
    for old, new in moves.items():
        if os.path.dirname(path) == old:
            return os.path.join(new, os.path.basename(path))
    return path


def rebase_spec(spec: dict[str, Any], moves: dict[str, str]) -> dict[str, Any]:
    """A copy of ``spec`` whose files are looked for in the new folders ``moves`` names.

    Example:
        >>> rebase_spec({"format": "keras", "path": "/a/m.keras"}, {"/a": "/b"})["path"]
        '/b/m.keras'
    """
    rebased = dict(spec)
    if spec.get("path"):
        rebased["path"] = _rebased(spec["path"], moves)
    if spec.get("buffers"):
        rebased["buffers"] = [_rebased(path, moves) for path in spec["buffers"]]
    return rebased


def job_specs(call: dict[str, Any] | None, inputs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every encoded value a job carries: a code job's inputs, a function job's function and arguments."""
    yield from inputs.values()
    if call:
        yield call["function"]
        yield from call.get("args") or []
        yield from (call.get("kwargs") or {}).values()


def rebase_job(call: dict[str, Any] | None, inputs: dict[str, Any],
               moves: dict[str, str]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The job's ``call`` and ``inputs`` with every spec rebased (see :func:`rebase_spec`)."""
    new_inputs = {name: rebase_spec(spec, moves) for name, spec in inputs.items()}
    if not call:
        return call, new_inputs
    new_call = {
        "function": rebase_spec(call["function"], moves),
        "args": [rebase_spec(spec, moves) for spec in call.get("args") or []],
        "kwargs": {key: rebase_spec(spec, moves) for key, spec in (call.get("kwargs") or {}).items()},
    }
    return new_call, new_inputs


def read_files(paths: Iterator[str] | list[str]) -> dict[str, bytes]:
    """The named files' contents by file name (a job's files all sit in one folder).

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "a.buf0"), "wb") as handle:
        ...     _ = handle.write(b"xyz")
        >>> read_files([os.path.join(folder, "a.buf0")])
        {'a.buf0': b'xyz'}
    """
    files = {}
    for path in paths:
        with open(path, "rb") as handle:
            files[os.path.basename(path)] = handle.read()
    return files


def write_files(files: dict[str, bytes], directory: str) -> None:
    """Write :func:`read_files`' result into ``directory``; names never leave it."""
    for name, data in files.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"a job file name must be a plain file name, got {name!r}")
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)


def returned_specs(final: Done) -> Iterator[dict[str, Any]]:
    """The encoded values a finished job sends back: its return value and its named outputs."""
    if final.value is not None:
        yield final.value
    yield from final.outputs.values()


def rebase_final(final: Done, moves: dict[str, str]) -> Done:
    """A copy of a job's ``done`` message whose values are read from the new folder."""
    return dataclasses.replace(
        final, value=None if final.value is None else rebase_spec(final.value, moves),
        outputs={name: rebase_spec(spec, moves) for name, spec in final.outputs.items()})

"""The checkpoint file of an ``isolated_map(..., checkpoint="cv.kmrun")``: what survives a lost kernel.

One file per map, append-only: a header (the format, the function's and the items'
fingerprints) and one record per finished item (its value, a summary of its report, its
last output, its attempts). Each record is written with one ``write()`` on a file opened
with ``O_APPEND``, so a kernel killed at any moment leaves whole records plus at most one
record cut short at the end; that one is dropped at the next resume (its item runs again).
A complete record whose checksum does not match, or a file that does not start like one of
ours, is refused as a whole: nothing is half-read.

Two kernels never write one checkpoint at once: ``<file>.lock`` is held with ``flock`` for
the whole map and says who holds it (pid, host, since when); the lock goes with its
process, so a killed kernel leaves no stale lock.

Example:
    >>> book = Checkpoint.open("cv.kmrun", fingerprint, resume=True)   # doctest: +SKIP
    >>> book.done                                                      # doctest: +SKIP
    {0: <ItemRecord 0 ok>, 1: <ItemRecord 1 ok>}
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import IsolationUsageError

__all__ = ["Checkpoint", "CheckpointError", "ItemRecord", "fingerprint_call", "store_value"]

#: The file's first bytes: what tells our checkpoint from any other file.
MAGIC = b"KERASMAGIC-MAP\x00"
FORMAT_VERSION = 1
_RECORD_MARK = b"KR"
_HEADER = struct.Struct("<II")  # payload length, crc32 of the payload
_RECORD = struct.Struct("<2sII")  # mark, payload length, crc32 of the payload
_META_LEN = struct.Struct("<I")


class CheckpointError(IsolationUsageError):
    """A checkpoint that cannot be used as it is: someone else's file, a damaged one, another
    function's or another item list's, or one another kernel is running. Nothing ran.

    Example:
        >>> try:
        ...     isolated_map(fold, range(10), checkpoint="cv.kmrun")   # doctest: +SKIP
        ... except CheckpointError as exc:
        ...     print(exc)
        cv.kmrun was written for a different function ...
    """


@dataclass
class ItemRecord:
    """One item as the checkpoint holds it: its value, its report's summary, its attempts."""

    index: int
    status: str
    value: Any = None
    report: dict[str, Any] = field(default_factory=dict)
    output_tail: str = ""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    finished_ts: float = 0.0

    def __repr__(self) -> str:
        return f"<ItemRecord {self.index} {self.status}>"


# --- fingerprints ----------------------------------------------------------------------------

def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _value_digest(value: Any) -> str:
    """The digest of a value's pickle (cloudpickle for what plain pickle cannot take).

    Large buffers (numpy arrays, a data set a function uses) are hashed where they are, through
    pickle 5's out-of-band buffers: a fingerprint never copies a 10 GiB array in the kernel.
    """
    for dumps in (pickle.dumps, _cloudpickle_dumps):
        buffers: list[pickle.PickleBuffer] = []
        try:
            data = dumps(value, protocol=5, buffer_callback=buffers.append)
        except Exception:  # noqa: BLE001, S112 - lambdas, notebook classes: cloudpickle takes those
            continue
        hasher = hashlib.blake2b(data, digest_size=16)
        for buffer in buffers:
            try:
                hasher.update(buffer.raw())
            except BufferError:  # not contiguous: its bytes, copied (rare: a strided view)
                hasher.update(bytes(buffer))
        return hasher.hexdigest()
    # The map itself says what cannot be sent; here it only has no digest of its own.
    return _digest(f"unpicklable {type(value).__module__}.{type(value).__qualname__}".encode())


def _cloudpickle_dumps(value: Any, **options: Any) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(value, **options)


def _code_digest(code: Any, into: Any) -> None:
    """Feed what a code object does into ``into``; not where it was written (a notebook cell's
    file name holds the kernel's pid, and line numbers move when a cell above grows)."""
    into.update(code.co_code)
    into.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
                      code.co_kwonlyargcount, code.co_flags)).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_digest(const, into)
        else:
            into.update(repr(const).encode())


def _names_used(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= _names_used(const)
    return names


def function_fingerprint(fn: Callable[..., Any], _seen: set[int] | None = None) -> dict[str, Any]:
    """What identifies a function across kernels: its code, and the globals it uses, by name.

    Example:
        >>> def square(x):
        ...     return x * x
        >>> sorted(function_fingerprint(square))
        ['code', 'globals', 'name']
    """
    seen = _seen if _seen is not None else set()
    seen.add(id(fn))
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    inner = getattr(fn, "func", None)  # functools.partial: the function and what it binds
    if inner is not None and hasattr(fn, "args"):
        wrapped = function_fingerprint(inner, seen)
        bound = _value_digest((getattr(fn, "args", ()), getattr(fn, "keywords", {})))
        return {"name": f"partial({wrapped['name']})", "code": _digest((wrapped["code"] + bound).encode()),
                "globals": wrapped["globals"]}
    code = getattr(fn, "__code__", None)
    if code is None:  # a callable object: its pickle is what is shipped
        return {"name": name, "code": _value_digest(fn), "globals": {}}
    hasher = hashlib.blake2b(digest_size=16)
    _code_digest(code, hasher)
    hasher.update(_value_digest((getattr(fn, "__defaults__", None), getattr(fn, "__kwdefaults__", None))).encode())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            hasher.update(_value_digest(cell.cell_contents).encode())
        except ValueError:  # an empty cell
            hasher.update(b"<empty cell>")
    used: dict[str, str] = {}
    namespace = getattr(fn, "__globals__", {})
    home = getattr(fn, "__module__", None)
    for global_name in sorted(_names_used(code)):
        if global_name in namespace:
            used[global_name] = _global_digest(namespace[global_name], home, seen)
    owner = getattr(fn, "__self__", None)  # a bound method: its class's other methods and its instance count
    if owner is not None and not isinstance(owner, type(os)):
        used["self"] = _global_digest(owner if isinstance(owner, type) else type(owner), home, seen) + \
            ("" if isinstance(owner, type) else " " + _value_digest(owner))
    return {"name": name, "code": hasher.hexdigest(), "globals": used}


def _fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    return _digest(json.dumps(fingerprint, sort_keys=True).encode())


def _global_digest(value: Any, home: str | None, seen: set[int]) -> str:
    """What one global a function reads stands for in its fingerprint. Whatever a resume could run
    differently counts (issue 33, item 8): a helper's own globals, a ``functools.partial``'s bound
    arguments, the methods of a class defined beside the function (a notebook class)."""
    if isinstance(value, type(os)):
        return f"module {value.__name__}"
    if id(value) in seen:
        return "(recursive)"
    if getattr(value, "func", None) is not None and hasattr(value, "args") and hasattr(value, "keywords"):
        return "partial " + _fingerprint_digest(function_fingerprint(value, seen))
    if hasattr(value, "__code__") and getattr(value, "__module__", None) == home:
        # A helper defined beside it (a notebook function): its code and what it reads count.
        return "function " + _fingerprint_digest(function_fingerprint(value, seen))
    if isinstance(value, type) and value.__module__ == home:
        seen.add(id(value))
        parts = {}
        for attribute, member in sorted(vars(value).items()):
            if attribute in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            inner = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
            parts[attribute] = (_fingerprint_digest(function_fingerprint(inner, seen)) if hasattr(inner, "__code__")
                                else _value_digest(inner))
        bases = [f"{base.__module__}.{base.__qualname__}" for base in value.__bases__]
        return "class " + _digest(json.dumps([bases, parts], sort_keys=True).encode())
    if isinstance(value, type) or callable(value) and getattr(value, "__module__", "__main__") != "__main__":
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
    return _value_digest(value)


def fingerprint_call(fn: Callable[..., Any], items: list[Any]) -> dict[str, Any]:
    """The header's fingerprint of one map: the function's, and one digest per item.

    Example:
        >>> print_count = fingerprint_call(len, [1, 2, 3])["item_count"]
        >>> print_count
        3
    """
    return {"function": function_fingerprint(fn), "items": [_value_digest(item) for item in items],
            "item_count": len(items)}


def _function_change(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """In words, how the function changed since the checkpoint was written; None if it did not."""
    if old == new:
        return None
    if old.get("code") != new.get("code"):
        renamed = f" ({old.get('name')} then, {new.get('name')} now)" if old.get("name") != new.get("name") else ""
        return f"the code of {new.get('name')} differs{renamed}"
    changed = sorted(name for name in set(old.get("globals", {})) | set(new.get("globals", {}))
                     if old.get("globals", {}).get(name) != new.get("globals", {}).get(name))
    return f"what it uses changed: {', '.join(changed)}" if changed else "its fingerprint differs"


def _items_change(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    if old["items"] == new["items"]:
        return None
    if old["item_count"] != new["item_count"]:
        return f"{old['item_count']} items then, {new['item_count']} now"
    changed = [i for i, (a, b) in enumerate(zip(old["items"], new["items"], strict=True)) if a != b]
    shown = ", ".join(f"[{i}]" for i in changed[:5]) + (" …" if len(changed) > 5 else "")
    return f"item{'s' if len(changed) > 1 else ''} {shown} differ{'' if len(changed) > 1 else 's'}"


# --- values ----------------------------------------------------------------------------------

def store_value(value: Any) -> bytes:
    """The bytes a value is kept as, checked to load back; raises ``TypeError`` saying why not.

    cloudpickle, so that an instance of a class defined in the notebook loads in a new kernel.

    Example:
        >>> pickle.loads(store_value({"acc": 0.91}))
        {'acc': 0.91}
    """
    try:
        import cloudpickle  # the map ships with it already

        data = cloudpickle.dumps(value, protocol=5)
    except ImportError:
        data = pickle.dumps(value, protocol=5)
    except Exception as exc:  # noqa: BLE001 - whatever pickling raises is the reason to show
        raise TypeError(f"{type(exc).__name__}: {exc}") from None
    try:
        pickle.loads(data)
    except Exception as exc:  # noqa: BLE001 - a value that pickles but cannot be rebuilt is no better
        raise TypeError(f"it pickles but does not load back ({type(exc).__name__}: {exc})") from None
    return data


# --- the lock --------------------------------------------------------------------------------

class _Lock:
    """``<checkpoint>.lock``, held with flock while a map runs; it says who holds it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self, checkpoint: str) -> None:
        import fcntl  # POSIX only: loaded where a lock is taken

        for _ in range(5):  # the holder may remove the file between our open and our flock
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise CheckpointError(f"{checkpoint} is being run by another process: {holder}. Two maps writing "
                                      "one checkpoint would lose items; wait until that one ends (or stop it), "
                                      "or give this map another checkpoint path") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            since = time.time()
            identity = {"pid": os.getpid(), "host": socket.gethostname(), "since_ts": since}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(identity).encode(), 0)
            self.fd = fd
            return
        raise CheckpointError(f"could not take the lock {self.path}: it kept being replaced; run the map again")

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # before the unlock, so that a waiter re-checks the inode and retries
        os.close(self.fd)
        self.fd = None


def _read_holder(fd: int) -> str:
    try:
        identity = json.loads(os.pread(fd, 4096, 0).decode())
        since = datetime.datetime.fromtimestamp(identity["since_ts"], datetime.timezone.utc)
        ago = time.time() - identity["since_ts"]
        return (f"pid {identity['pid']} on host {identity['host']}, since {since:%Y-%m-%d %H:%M:%S} UTC "
                f"({ago:.0f} s ago)")
    except (ValueError, KeyError, TypeError, OSError):
        return "a process that has not written who it is yet"


# --- the file --------------------------------------------------------------------------------

def _describe_start(data: bytes, size: int) -> str:
    if not data:
        return "an empty file"
    kinds = {b"PK\x03\x04": "a zip file", b"\x89HDF": "an HDF5 file", b"\x80": "a Python pickle",
             b"{": "JSON or text", b"\x93NUMPY": "a numpy .npy file"}
    kind = next((name for prefix, name in kinds.items() if data.startswith(prefix)), None)
    return f"a file of {size:,} bytes starting {data[:16]!r}" + (f" ({kind})" if kind else "")


class Checkpoint:
    """An open checkpoint: its records read and checked, its lock held, ready to append.

    Use :meth:`open`; :meth:`write` appends an item's record, :meth:`close` lets it go.
    """

    def __init__(self, path: str, lock: _Lock, fd: int, done: dict[int, ItemRecord], notes: list[str]) -> None:
        self.path = path
        self._lock = lock
        self._fd: int | None = fd
        self.done = done
        self.notes = notes

    @classmethod
    def open(cls, path: str, fingerprint: dict[str, Any], *, resume: Any = True) -> Checkpoint:
        """Open (or create) ``path`` for this map: its lock taken, what it holds checked and read.

        Raises :class:`CheckpointError` before any item runs: a path that cannot be written,
        someone else's or a damaged file, another function or item list (unless
        ``resume="restart"``), another process holding it.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            raise CheckpointError(f"checkpoint={path!r} is a folder; give a file path such as {path}/run.kmrun")
        lock = _Lock(path + ".lock")
        try:
            lock.acquire(path)
        except CheckpointError:
            raise
        except OSError as exc:
            raise _unwritable(path, exc) from None
        try:
            return cls._open_locked(path, lock, fingerprint, resume)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _open_locked(cls, path: str, lock: _Lock, fingerprint: dict[str, Any], resume: Any) -> Checkpoint:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise _unwritable(path, exc) from None
        try:
            size = os.fstat(fd).st_size
            notes: list[str] = []
            if size and resume == "restart":
                with open(path, "rb") as handle:
                    start = handle.read(len(MAGIC))
                if start != MAGIC:  # "restart" discards a checkpoint of ours, never someone's file
                    raise CheckpointError(
                        f"resume='restart' starts over in {path}, but it is not a kerasmagic map checkpoint: it is "
                        f"{_describe_start(start, size)}. Nothing was changed; give the map another checkpoint path")
            if size == 0 or resume == "restart":
                if size and resume == "restart":
                    notes.append(f"resume='restart': {path} started over (what it held was discarded)")
                os.ftruncate(fd, 0)
                _write_all(fd, _header_bytes(fingerprint))
                return cls(path, lock, fd, {}, notes)
            with open(path, "rb") as handle:
                data = handle.read()
            header, records, end, torn = _parse(path, data)
            _refuse_changed(path, header, fingerprint, records)
            if torn:
                os.ftruncate(fd, end)
                notes.append(f"{path}: the last record was cut short (the kernel died while writing it); "
                             "its item runs again")
            done = {record.index: record for record in records if record.status == "ok"}
            return cls(path, lock, fd, done, notes)
        except BaseException:
            os.close(fd)
            raise

    def write(self, record: ItemRecord, value_bytes: bytes | None) -> None:
        """Append one item's record in one write (a record is whole or, at the very end, cut short)."""
        if self._fd is None:
            raise CheckpointError(f"{self.path} is closed: the map that opened it has ended")
        meta = json.dumps({"index": record.index, "status": record.status, "report": record.report,
                           "output_tail": record.output_tail, "attempts": record.attempts,
                           "finished_ts": record.finished_ts, "has_value": value_bytes is not None},
                          default=str).encode()
        payload = _META_LEN.pack(len(meta)) + meta + (value_bytes or b"")
        end = os.fstat(self._fd).st_size
        try:
            _write_all(self._fd, _RECORD.pack(_RECORD_MARK, len(payload), zlib.crc32(payload)) + payload)
        except BaseException:
            # A record cut short in the middle (a full disk) would make the file damaged once the next
            # one is appended after it: the file goes back to its last whole record.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)
            raise
        if record.status == "ok":
            self.done[record.index] = record

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._lock.release()


def _unwritable(path: str, exc: OSError) -> CheckpointError:
    return CheckpointError(f"cannot write the checkpoint {path!r} ({type(exc).__name__}: {exc.strerror or exc}); "
                           "nothing ran. Give a path in a folder you can write")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _header_bytes(fingerprint: dict[str, Any]) -> bytes:
    header = json.dumps({"format": FORMAT_VERSION, "created_ts": time.time(), "host": socket.gethostname(),
                         "fingerprint": fingerprint}).encode()
    return MAGIC + _HEADER.pack(len(header), zlib.crc32(header)) + header


def _parse(path: str, data: bytes) -> tuple[dict[str, Any], list[ItemRecord], int, bool]:
    """Check the whole file, then read it: (header, records, end of the last whole record, torn)."""
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{path} is not a kerasmagic map checkpoint: it is {_describe_start(data, len(data))}. "
                              "Nothing was read or changed; give the map another checkpoint path (or move that file "
                              "away if it is yours to lose)")
    offset = len(MAGIC)

    def damaged(what: str) -> CheckpointError:
        return CheckpointError(f"{path} is damaged: {what}. Nothing was read from it and nothing was changed; move it "
                               "away (its finished items are lost) or pass resume='restart' to start over in it")

    if len(data) < offset + _HEADER.size:
        raise damaged(f"its header ends at byte {len(data)}")
    length, crc = _HEADER.unpack_from(data, offset)
    offset += _HEADER.size
    header_bytes = data[offset:offset + length]
    if len(header_bytes) != length or zlib.crc32(header_bytes) != crc:
        raise damaged("its header's checksum does not match")
    header = json.loads(header_bytes)
    if header.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is a checkpoint of format {header.get('format')!r}; this kerasmagic reads "
                              f"format {FORMAT_VERSION}. Use the kerasmagic that wrote it, or resume='restart'")
    offset += length
    raw: list[tuple[int, bytes]] = []
    torn = False
    while offset < len(data):
        if len(data) - offset < _RECORD.size:
            torn = True
            break
        mark, length, crc = _RECORD.unpack_from(data, offset)
        if mark != _RECORD_MARK:
            raise damaged(f"at byte {offset:,} there is {data[offset:offset + 8]!r}, not the start of a record "
                          f"(after {len(raw)} whole record(s))")
        payload = data[offset + _RECORD.size:offset + _RECORD.size + length]
        if len(payload) < length:
            torn = True  # the last write was cut short: the only damage a killed kernel can do
            break
        if zlib.crc32(payload) != crc:
            raise damaged(f"record {len(raw) + 1} (at byte {offset:,}, {length:,} bytes) fails its checksum")
        raw.append((offset, payload))
        offset += _RECORD.size + length
    end = offset
    records = []
    for at, payload in raw:  # every record checked first: only then is anything unpickled
        (meta_len,) = _META_LEN.unpack_from(payload, 0)
        meta = json.loads(payload[_META_LEN.size:_META_LEN.size + meta_len])
        record = ItemRecord(meta["index"], meta["status"], None, meta.get("report", {}), meta.get("output_tail", ""),
                            meta.get("attempts", []), meta.get("finished_ts", 0.0))
        if meta.get("has_value"):
            record.value = _ValueBytes(at, payload[_META_LEN.size + meta_len:])
        records.append(record)
    return header, records, end, torn


@dataclass
class _ValueBytes:
    """A stored value not loaded yet: loading waits until the fingerprints are found to match."""

    offset: int
    data: bytes


def _refuse_changed(path: str, header: dict[str, Any], fingerprint: dict[str, Any], records: list[ItemRecord]) -> None:
    old = header.get("fingerprint") or {}
    done = len({record.index for record in records if record.status == "ok"})
    keep = (f"pass resume='restart' to discard its {done} finished item(s) and start over, or give a new "
            "checkpoint path to keep that file")
    how = _function_change(old.get("function", {}), fingerprint["function"])
    if how:
        raise CheckpointError(f"{path} was written for a different function: {how}. Its results would not be this "
                              f"function's; {keep}")
    how = _items_change(old, fingerprint)
    if how:
        raise CheckpointError(f"{path} was written for a different item list: {how}; {keep}")
    for record in records:
        if isinstance(record.value, _ValueBytes):
            stored = record.value
            try:
                record.value = pickle.load(io.BytesIO(stored.data))
            except Exception as exc:  # noqa: BLE001 - a value that does not load here is reported, not half-used
                raise CheckpointError(f"{path}: item [{record.index}]'s stored value does not load in this kernel "
                                      f"({type(exc).__name__}: {exc}); import what it needs first, or pass "
                                      "resume='restart'") from None

"""Retrying a map's items, and why an item's process died, in words.

An item whose process crashed, was killed or ran out of memory is worth running again in a
fresh fork: the next process starts clean. An item whose code raised would most likely raise
again, so it is retried only when ``retry_on`` asks for it (``"error"``, or the exception's
type, e.g. ``"ValueError"``).

Example:
    >>> policy = RetryPolicy.of(2, None)
    >>> policy.should_retry("crash", None, attempts=1), policy.should_retry("error", None, attempts=1)
    (True, False)
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..death_watch import KernelLog
from ..tables import format_bytes
from .errors import IsolatedCellError, IsolationUsageError, describe_exit

__all__ = ["RetryPolicy", "attempt_record", "death_cause", "kernel_log_mark"]

#: What ``retries=`` re-runs when ``retry_on`` is not given: a process that did not end by itself.
DEFAULT_RETRY_ON = ("crash", "out_of_memory")
_STATUSES = ("crash", "out_of_memory", "timeout", "error")
#: The runner's words when a memory cgroup's OOM killer (not kerasmagic's own watch) ended the job.
_CGROUP_OOM_WORDS = "out-of-memory killer of its cgroup"


@dataclass(frozen=True)
class RetryPolicy:
    """How many more times an item may run, and after which failures.

    Example:
        >>> RetryPolicy.of(1, ["timeout", "ValueError"]).should_retry("error", "ValueError", attempts=1)
        True
    """

    retries: int
    statuses: frozenset[str]
    exception_types: frozenset[str]

    @classmethod
    def of(cls, retries: Any, retry_on: Any) -> RetryPolicy:
        """Check ``retries=`` and ``retry_on=`` as a user gave them."""
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise IsolationUsageError(f"retries is how many more times a failed item may run: an integer >= 0, "
                                      f"got {retries!r}")
        if retry_on is None:
            chosen: Iterable[Any] = DEFAULT_RETRY_ON
        elif isinstance(retry_on, (str, type)):
            chosen = [retry_on]
        else:
            chosen = list(retry_on)
        statuses, types = set(), set()
        for entry in chosen:
            if isinstance(entry, type) and issubclass(entry, BaseException):
                types.add(entry.__name__)
            elif isinstance(entry, str) and entry in _STATUSES:
                statuses.add(entry)
            elif isinstance(entry, str) and entry.isidentifier() and entry[:1].isupper():
                types.add(entry)
            else:
                raise IsolationUsageError(
                    f"retry_on takes {', '.join(repr(s) for s in _STATUSES)} or exception types (ValueError or "
                    f"'ValueError', retried when the item's code raised one); got {entry!r}")
        return cls(retries, frozenset(statuses), frozenset(types))

    def should_retry(self, status: str, exc_type: str | None, *, attempts: int) -> bool:
        """Whether an item that ended with ``status`` after ``attempts`` runs gets another."""
        if attempts > self.retries:
            return False
        if status in self.statuses:
            return True
        return status == "error" and exc_type is not None and exc_type in self.exception_types


_FAULT_STACK = re.compile(r"Fatal Python error: [^\n]*\n(?:.*\n)*?.*\(most recent call first\):\n"
                          r'\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
_PACKAGE_DIRS = ("site-packages", "dist-packages")
#: What an attempt keeps of its job's output (the checkpoint stores it with the attempt).
_OUTPUT_TAIL_CHARS = 3000
#: faulthandler's line naming every extension module loaded (with the job's item prefix, if any).
_EXTENSION_MODULES = re.compile(r"^(?:\[[^\]\n]*\] )?Extension modules: [^\n]*\n?", re.MULTILINE)


def _without_module_lists(output: str) -> str:
    """``output`` without the list of extension modules faulthandler prints after a fault's stack:
    one line of thousands of characters in a process that imported pandas or TensorFlow, which
    would push what the job printed before it died out of the kept tail, and that says nothing
    about the job."""
    return _EXTENSION_MODULES.sub("", output)


def fault_site(output: str) -> str | None:
    """Where a job died of a fault, from the stack Python's faulthandler wrote to its output:
    the package and the last Python frame; None without such a stack.

    Example:
        >>> fault_site('Fatal Python error: Segmentation fault\\n\\nStack (most recent call first):\\n'
        ...            '  File "/v/lib/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute\\n')
        'in tensorflow: its last Python frame is quick_execute (tensorflow/python/eager/execute.py:53)'
    """
    dumps = list(_FAULT_STACK.finditer(output or ""))
    if not dumps:
        return None
    found = dumps[-1]  # the last dump is the one that killed it
    parts = found["path"].split(os.sep)
    where = next((i for i, part in enumerate(parts) if part in _PACKAGE_DIRS), None)
    frame = f"its last Python frame is {found['function']}"
    if where is not None and where + 1 < len(parts):
        package = parts[where + 1].split(".")[0]
        return f"in {package}: {frame} ({'/'.join(parts[where + 1:])}:{found['line']})"
    return f"{frame} ({os.path.basename(found['path'])}:{found['line']})"


#: The kernel log as this kernel reads it for its jobs, opened at the first job (see :func:`kernel_log_mark`).
_kernel_log: KernelLog | None = None


def kernel_log_mark() -> int:
    """Where the kernel log is now: taken as each local job starts (``JobRun.kernel_log_since``)
    and passed to :func:`attempt_record` as ``kernel_log_since``, so that only a kill line written
    after it can name the job's pid (pids are reused; an older line is about another process).

    Example:
        >>> kernel_log_mark() >= 0
        True
    """
    global _kernel_log
    if _kernel_log is None:
        _kernel_log = KernelLog()
    return _kernel_log.mark()


def _sigkill_cause(pid: int | None, since: int | None) -> str:
    """A job's SIGKILL, from evidence about that process: the kernel log naming its pid after the
    job started (``since``, a :func:`kernel_log_mark`) is the OOM killer's own word. A cgroup's
    counter (this kernel's) counts every process in it, so it never says alone that the job was
    the one killed (issue 33, item 9).

    Example:
        >>> _sigkill_cause(None, None).startswith("killed by signal 9 (SIGKILL): whether the out-of-memory killer")
        True
    """
    log = _kernel_log if since is not None else None
    line = log.kill_line(pid, since) if log is not None and since is not None and isinstance(pid, int) else None
    if line:
        return f"killed by signal 9 (SIGKILL): the out-of-memory killer (the kernel log: \"{line.split(')', 1)[0]})\")"
    if since is None:
        how = "its machine's kernel log is not read from here"  # a Ray node's, or no mark was taken
    elif isinstance(pid, int) and log is not None and log.readable:
        how = "the kernel log does not name it"
    else:
        how = "the kernel log could not be read"
    return ("killed by signal 9 (SIGKILL): whether the out-of-memory killer did it is unknown (it had no memory "
            f"cgroup of its own, and {how}); the OOM killer of this kernel's cgroup or the machine, or someone's "
            "kill -9")


def death_cause(result: Any, error: BaseException | None, *, timeout: float | None = None,
                output: str = "", kernel_log_since: int | None = None) -> str:
    """Why a job ended, in words a user acts on: never just ``crash``.

    ``result`` is the job's :class:`IsolatedResult`, ``error`` what it failed with. On a
    cluster the node is named. ``kernel_log_since`` (a :func:`kernel_log_mark` taken before the
    job started) lets the kernel log name a SIGKILL's killer; without it the log is not read.

    Example:
        >>> from kerasmagic.isolation.result import IsolatedResult
        >>> job = IsolatedResult("x", status="crash", exit_code=-11, signal_name="SIGSEGV", child_rss_peak_bytes=2**20)
        >>> death_cause(job, None)
        'segmentation fault (signal 11, SIGSEGV); peak RSS 1.00 MiB'
    """
    status = result.status
    text = str(error) if error is not None else ""
    if status == "ok":
        cause = "ok"
    elif status == "error":
        if isinstance(error, IsolatedCellError) and error.exc_type:
            first = (error.exc_message.strip().splitlines() or [""])[0][:200]
            cause = f"raised {error.exc_type}: {first}"
        else:
            cause = f"raised {result.error or type(error).__name__}"
    elif status == "timeout":
        cause = f"timeout after {timeout:g} s" if timeout is not None else (result.error or "timeout")
    elif status == "out_of_memory":
        code = result.exit_code if result.exit_code is not None else -signal.SIGKILL
        if _CGROUP_OOM_WORDS in text:
            cause = f"killed by signal {-code}: the out-of-memory killer (cgroup oom_kill rose); {result.error}"
        else:
            cause = f"killed by kerasmagic's memory watch: {result.error}"
    elif status == "crash":
        code = result.exit_code
        if code is not None and code == -signal.SIGKILL:
            cause = _sigkill_cause(result.worker_pid, kernel_log_since)
        elif code is not None:
            cause = describe_exit(code)
            site = fault_site(output or result.last_output) if code < 0 else None
            if site:
                cause += f" {site}" if site.startswith("in ") else f": {site}"
        else:
            cause = result.error or (text.splitlines()[0] if text else "ended without a result")
    else:
        cause = status
    if result.node and "on node" not in cause:
        cause += f" on node {result.node.get('ip', '?')} ({result.node.get('hostname', '?')})"
    if status in ("crash", "out_of_memory", "timeout") and result.child_rss_peak_bytes:
        cause += f"; peak RSS {format_bytes(result.child_rss_peak_bytes)}"
    return cause


def attempt_record(number: int, result: Any, error: BaseException | None, *, timeout: float | None,
                   output: str = "", kernel_log_since: int | None = None) -> dict[str, Any]:
    """One attempt as the map keeps it (and the checkpoint stores it): JSON-able. ``output`` is
    the job's output as the kernel kept it (more than ``result.last_output``'s last lines);
    ``kernel_log_since`` is as for :func:`death_cause`.

    Example:
        >>> from kerasmagic.isolation.result import IsolatedResult
        >>> attempt_record(1, IsolatedResult("x", wall_s=0.5), None, timeout=None)["cause"]
        'ok'
    """
    gpu = [v for v in (result.child_gpu_peak or {}).values() if isinstance(v, int) and not isinstance(v, bool)]
    return {
        "attempt": number,
        "status": result.status,
        "cause": death_cause(result, error, timeout=timeout, output=output, kernel_log_since=kernel_log_since),
        "wall_s": round(result.wall_s, 4),
        "run_s": round(result.run_s, 4),
        "rss_peak_bytes": result.child_rss_peak_bytes,
        "gpu_peak_bytes": max(gpu) if gpu else None,
        "exit_code": result.exit_code,
        "worker_pid": result.worker_pid,
        "signal": result.signal_name,
        "node": dict(result.node) if result.node else None,
        # The kernel's tail of the job's output (8 KiB) holds more than the report's last 12 lines:
        # a fault's stack alone can fill those.
        "output_tail": _without_module_lists(output or result.last_output or "")[-_OUTPUT_TAIL_CHARS:],
        "finished_ts": result.finished_ts,
    }

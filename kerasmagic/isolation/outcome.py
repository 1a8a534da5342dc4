"""How an isolated job ends, in one place: what its report records from the job's messages, the
exception each kind of ending raises (in words that say what happened and what to do), and the
values a job that ran through brings back.

Every ending is a function that fills the report (:class:`~kerasmagic.isolation.result.IsolatedResult`)
and returns the exception; the run fails with it (:meth:`~kerasmagic.isolation.runner.JobRun.fail`),
and its status follows from the exception's type (:func:`status_of`). The local loop
(:mod:`kerasmagic.isolation.local`) and the Ray driver (:mod:`kerasmagic.isolation.cluster.remote`)
both end their jobs through these, so a job fails in the same words wherever it ran.

Example:
    >>> from kerasmagic.isolation.result import IsolatedResult
    >>> result = IsolatedResult("a job")
    >>> error = crashed(result, pid=42, code=-11, output="")
    >>> status_of(error), result.error
    ('crash', 'segmentation fault (signal 11, SIGSEGV)')
    >>> print(error)
    the isolated worker (pid 42) died of a segmentation fault (signal 11, SIGSEGV) before the job finished; it
    printed nothing
"""

from __future__ import annotations

import re
import signal
import sys
import time
import warnings
from typing import Any

from ..probes.availability import guarded
from ..probes.sample import gpu_device_values, keep_largest, tf_device_missing, tf_device_values
from ..tables import format_bytes
from .errors import (
    IsolatedCellError,
    IsolatedCrash,
    IsolatedInterrupt,
    IsolatedOutOfMemory,
    IsolatedShippingError,
    IsolatedTimeout,
    IsolationWarning,
    describe_exit,
    shorten_message,
)
from .gpu_figures import gpu_devices_of
from .job_memory import JobMemoryLimit
from .messages import CHANNEL_LOST_EXIT, Done, JobEnded, Raised
from .result import IsolatedResult
from .shipping import FrameworkNotImported, decode, describe
from .spec import WorkerSpec, env_overrides

__all__ = [
    "CHANNEL_LOST_GRACE_S", "TAIL_CHARS", "bring_back", "cannot_start", "code_raised", "crashed",
    "died_before_the_job", "error_line", "import_failed", "input_not_rebuilt", "interrupted", "interruption",
    "last_lines", "node_crashed", "not_placed_in_time", "out_of_memory", "ray_shut_down", "record_end",
    "record_exit", "record_sample", "relay_ended_without_result", "status_of", "summary_line", "timed_out",
    "timed_out_on_node", "warn",
]

#: How much of a job's output its run keeps (its report's ``last_output`` is the end of it).
TAIL_CHARS = 8192
#: How long a job whose channel closed without its last message may run on: nothing it makes
#: can come back any more (it closed the descriptor, or it is dying and the exit is on its way).
CHANNEL_LOST_GRACE_S = 2.0

#: The status each kind of ending gives the report (the first match, in this order, wins).
_STATUS: tuple[tuple[type[BaseException], str], ...] = (
    (IsolatedOutOfMemory, "out_of_memory"),
    (IsolatedCrash, "crash"),
    (IsolatedTimeout, "timeout"),
    (IsolatedInterrupt, "interrupted"),
    (IsolatedCellError, "error"),
    (IsolatedShippingError, "error"),
)


def status_of(error: BaseException) -> str:
    """The report's ``status`` for a job that failed with ``error``.

    Example:
        >>> status_of(IsolatedOutOfMemory("...")), status_of(IsolatedTimeout("..."))
        ('out_of_memory', 'timeout')
    """
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return "crash"


def last_lines(text: str, count: int = 12) -> str:
    """The last ``count`` lines of a job's output (progress bars' ``\\r`` count as line ends).

    Example:
        >>> last_lines("epoch 1\\repoch 2\\ndone\\n", count=2)
        'epoch 2\\ndone'
    """
    return "\n".join(text.replace("\r", "\n").rstrip().splitlines()[-count:])


def signal_name(number: int) -> str:
    """``"SIGKILL"`` for 9; ``"signal N"`` for a number Python does not name.

    Example:
        >>> signal_name(9), signal_name(200)
        ('SIGKILL', 'signal 200')
    """
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def error_line(raised: Raised) -> str:
    """The job's error in one short line (the sidebar's and the map summary's): type and message start.

    Example:
        >>> error_line(Raised(stage="code", exc_type="ValueError", exc_message="bad item\\nmore", traceback=""))
        'ValueError: bad item…'
    """
    message = raised.exc_message
    first = (message[:301].splitlines() or [""])[0][:300]
    return f"{raised.exc_type}: {first}{'…' if len(message) > len(first) else ''}"


def summary_line(error: BaseException) -> str:
    """An error's first line, for a report that has none yet (a job that failed on a cluster).

    Example:
        >>> summary_line(IsolatedCrash("the node died\\nits last output: ..."))
        'the node died'
    """
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def _shown(output: str, what: str = "its last output") -> str:
    return f"; {what}:\n{output}" if output.strip() else ""


# --- what the job's messages tell the report -----------------------------------------------------


def record_sample(result: IsolatedResult, reading: dict[str, Any], memory_limit: JobMemoryLimit | None = None) -> None:
    """Fold one memory sample of the job's process (the protocol's shape) into its report's peaks.

    Example:
        >>> result = IsolatedResult()
        >>> record_sample(result, {"rss_bytes": 100, "tf": {"devices": {"CPU:0": {"peak_bytes": 9}}}})
        >>> result.samples, result.child_rss_peak_bytes, result.child_tf_peak
        (1, 100, {'CPU:0': 9})
    """
    result.samples += 1
    rss = reading.get("rss_bytes")
    if isinstance(rss, int):
        result.child_rss_peak_bytes = max(result.child_rss_peak_bytes or 0, rss)
        if memory_limit is not None:
            memory_limit.reading(rss)  # the job's own reading counts toward the peak
    keep_largest(result.child_tf_peak, tf_device_values(reading.get("tf"), "peak_bytes"))
    for device, why in tf_device_missing(reading.get("tf"), "in_use_bytes").items():
        result.child_tf_peak.setdefault(device, why)  # the report says why there is no peak
    keep_largest(result.child_gpu_peak, gpu_device_values(reading.get("gpu"), "process_used_bytes"))
    result.fold_allocators(reading.get("allocators"))


def record_end(result: IsolatedResult, ended: JobEnded, launched_ts: float,
               memory_limit: JobMemoryLimit | None = None) -> None:
    """The job's last message: its final sample (the exact peak RSS, PSS and USS) and how soon its
    first line ran after its process was asked for."""
    final_sample = ended.final_sample
    record_sample(result, final_sample, memory_limit)
    exact_peak = final_sample.get("rss_peak_bytes")
    if isinstance(exact_peak, int) and exact_peak:  # VmHWM; an unavailable object off Linux
        result.child_rss_peak_bytes = max(result.child_rss_peak_bytes or 0, exact_peak)
        result.child_rss_peak_method = "exact"
    result.child_pss_bytes = final_sample.get("pss_bytes")
    result.child_uss_bytes = final_sample.get("uss_bytes")
    if ended.first_line_ts:
        result.start_latency_s = max(0.0, ended.first_line_ts - launched_ts)


def record_exit(result: IsolatedResult, code: int | None, output: str) -> None:
    """How the job's process ended (the signal by name), and the end of what it printed."""
    result.exit_code = code
    if code is not None and code < 0:
        result.signal_name = signal_name(-code)
    result.last_output = output


# --- a job that did not run through --------------------------------------------------------------


def cannot_start(result: IsolatedResult, exc: BaseException) -> IsolatedCrash:
    """No process could be started for the job (spawning it failed)."""
    return IsolatedCrash(
        f"could not start an isolated worker ({type(exc).__name__}: {exc}); nothing ran. Check that "
        f"{sys.executable} still runs and that the machine has free memory and processes/open files "
        "to spare (ulimit -u, ulimit -n), then run it again", result)


def import_failed(result: IsolatedResult, spec: WorkerSpec, error: str | None, log: str) -> IsolatedCrash:
    """The job's process could not import what it must: Python's exception (``error``) when it
    said one, else what it printed (``log``)."""
    modules = ", ".join(spec.preload) or "Python"
    overrides = sorted(env_overrides(spec)) if error else []
    cause = f"{error}" if error else f"it printed:\n{log}"
    where = f" (its environment differs from the kernel's in {', '.join(overrides)})" if overrides else ""
    result.last_output = log if not error else ""
    return IsolatedCrash(
        f"the isolated process could not import {modules}{where}: {cause}; nothing ran and the "
        "namespace is unchanged. Fix the environment (--env / env=) or install what is missing", result,
        last_output=log)


def died_before_the_job(result: IsolatedResult, pid: int, code: int | None, exc: BaseException) -> IsolatedCrash:
    """The process died after it was ready, before it received the job (sending it failed)."""
    return IsolatedCrash(
        f"the isolated worker (pid {pid}) {describe_exit(code, verb=True)} after it was ready, before it "
        f"received the job ({type(exc).__name__}); nothing ran and the namespace is unchanged: run it again, a "
        "fresh worker takes it (if this repeats, something on this machine kills idle processes, e.g. the "
        "out-of-memory killer)", result, exit_code=code, signal_name=result.signal_name,
        last_output=result.last_output)


def timed_out(result: IsolatedResult, timeout: float, *, starting: bool, importing: tuple[str, ...],
              elapsed_s: float, output: str) -> IsolatedTimeout:
    """The job's timeout passed: while its process was still ``starting`` (it waited ``elapsed_s``
    for one importing ``importing``), or while it ran (for ``elapsed_s``). ``output`` is the
    job's own (never a template's import log: TensorFlow's banner is not what the job printed)."""
    result.last_output = output
    shown = _shown(output, "its output so far")
    if starting:
        result.wait_s = elapsed_s
        what = "the template" if result.worker_state in ("cold", "starting") else "the worker"
        result.error = f"no worker was ready within {timeout:g} s"
        message = (f"no isolated worker was ready within the timeout of {timeout:g} s ({what} was still "
                   f"starting: importing {', '.join(importing) or 'Python'}); nothing ran. Raise the "
                   f"timeout, or look at what slows the start (a sitecustomize, PYTHONPATH){shown}")
    else:
        result.run_s = elapsed_s
        result.error = f"ran past its timeout of {timeout:g} s; killed"
        message = (f"the isolated job ran past its timeout of {timeout:g} s and its worker was killed "
                   f"(all of its memory is back); raise the timeout or make the job shorter{shown}")
    return IsolatedTimeout(message, result)


def out_of_memory(result: IsolatedResult, limit: JobMemoryLimit, growth: int | None, *, by: str, at_limit: bool,
                  pid: int | None) -> IsolatedOutOfMemory:
    """The job reached its ``memory_limit=`` (``by`` says who stopped it). ``at_limit``: ``growth`` is
    the reading that reached the limit, else the last one before a kill."""
    limit_text = format_bytes(limit.limit_bytes)
    if at_limit and growth:
        at = f"at {format_bytes(growth)} of its {limit_text} limit"
    else:
        at = f"at its {limit_text} limit" + (f" (last reading {format_bytes(growth)})" if growth else "")
    started = limit.start_rss_bytes
    counted = (f" (the limit counts what the job added to the {format_bytes(started)} it started with, "
               "shared with its template)") if started else ""
    result.error = f"out of memory {at}"
    shown = _shown(result.last_output)
    whose = f" (pid {pid})" if pid is not None else ""
    return IsolatedOutOfMemory(
        f"the isolated job ran out of memory {at}: {by}{whose}, and all of its memory is back; the kernel "
        f"and your variables are unchanged{counted}. Raise memory_limit, or make the job use less (smaller "
        f"batches, fewer copies of the data){shown}", result, exit_code=result.exit_code,
        signal_name=result.signal_name, last_output=result.last_output)


def interrupted(result: IsolatedResult, who: str) -> IsolatedInterrupt:
    """Ctrl-C: the job (``who``: "the isolated worker (pid N)", "the isolated job on node X") was killed."""
    return IsolatedInterrupt(f"interrupted; {who} was killed", result)


def crashed(result: IsolatedResult, pid: int, code: int | None, output: str, *, killed_without_result: bool = False,
            memory_limit: JobMemoryLimit | None = None) -> IsolatedCrash:
    """The job's process ended without its last message: it died (a signal, ``os._exit``), its cgroup's
    OOM killer ended it, or it closed its channel (and exited, or ran on and was killed).

    Example:
        >>> result = IsolatedResult()
        >>> crashed(result, pid=7, code=74, output="").args[0].startswith("the isolated job closed its channel")
        True
    """
    # The job's cgroup counts the kills of every process in it: the worker's death is the OOM
    # killer's only where the worker died of SIGKILL. A worker that exited or aborted after a child
    # (a subprocess, a compiler) was OOM-killed ended by itself, and is told so.
    # An exit status not read (a worker not reaped in time, under memory pressure) does not rule
    # the OOM killer out: it is taken as the counter says, as before.
    oom_in_cgroup = memory_limit is not None and memory_limit.oom_killed()
    if memory_limit is not None and oom_in_cgroup and code in (-signal.SIGKILL, None):
        return out_of_memory(result, memory_limit, memory_limit.peak_growth_bytes or None,
                             by="the out-of-memory killer of its cgroup ended its worker", at_limit=False, pid=pid)
    child_killed = ("; the out-of-memory killer of its cgroup killed another of its processes (one it started)"
                    if oom_in_cgroup and code is not None else "")
    shown = f"{child_killed}; its last output:\n{output}" if output else f"{child_killed}; it printed nothing"
    closed = ("closed its channel to the kernel (did it close file descriptors it had not opened, e.g. "
              "os.closerange(3, ...)?)")
    if killed_without_result:
        result.error = "closed its channel to the kernel and ran on; killed"
        message = (f"the isolated job {closed} and ran on; nothing it made could come back, so its worker "
                   f"(pid {pid}) was killed {CHANNEL_LOST_GRACE_S:g} s later")
    elif code == CHANNEL_LOST_EXIT:
        result.error = "closed its channel to the kernel; nothing came back"
        message = (f"the isolated job {closed}, so nothing it made could come back; its worker "
                   f"(pid {pid}) ended without sending it (exit code {code})")
    else:
        result.error = describe_exit(code)
        hint = ", what the out-of-memory killer sends" if result.signal_name == "SIGKILL" else ""
        message = f"the isolated worker (pid {pid}) {describe_exit(code, verb=True)}{hint} before the job finished"
    return IsolatedCrash(f"{message}{shown}", result, exit_code=code, signal_name=result.signal_name,
                         last_output=result.last_output)


def input_not_rebuilt(result: IsolatedResult, raised: Raised) -> IsolatedShippingError:
    """An input reached the job's process but could not be rebuilt there; the code did not run."""
    name = raised.name or "an input"
    result.error = error_line(raised)
    return IsolatedShippingError(
        f"{name!r} reached the isolated process but could not be rebuilt there ({raised.exc_type}: "
        f"{shorten_message(raised.exc_message)}); the code did not run and the namespace is unchanged. "
        "A class that exists only in this kernel (defined at run time, or a keras.Model subclass without "
        "@keras.saving.register_keras_serializable) cannot be rebuilt in another process: define it in "
        "a module on sys.path, or build the object inside the isolated code",
        result, name=name, exc_type=raised.exc_type, exc_message=raised.exc_message)


def code_raised(result: IsolatedResult, raised: Raised) -> IsolatedCellError:
    """The user's code raised: the worker's traceback, its message shown once (shortened if long)."""
    result.error = error_line(raised)
    message, traceback = raised.exc_message, raised.traceback.rstrip()
    shortened = shorten_message(message)
    if shortened != message and shortened in traceback:
        # Shown once, at the end of the traceback (the worker shortened it there), not twice.
        headline = (f"the isolated code raised {raised.exc_type} (its message, {len(message):,} characters, "
                    "is shortened at the end of the traceback; exc.exc_message holds all of it)")
    else:
        headline = f"the isolated code raised {raised.exc_type}: {shortened}"
    return IsolatedCellError(f"{headline}\n\nTraceback in the worker process:\n{traceback}", result,
                             exc_type=raised.exc_type, exc_message=message, child_traceback=raised.traceback)


def interruption(runs: list[Any], not_started: str) -> IsolatedInterrupt:
    """What a Ctrl-C during a drive raises: the interrupted job's error, or why nothing came back
    (``not_started``: the words for "no job had started yet")."""
    stopped = [run.error for run in runs if isinstance(run.error, IsolatedInterrupt)]
    if stopped:
        return stopped[0]
    finished = [run for run in runs if run.phase == "over"]
    if finished:
        return IsolatedInterrupt(f"interrupted after the isolated job finished (pid {finished[-1].result.worker_pid}); "
                                 "its values were not brought back", finished[-1].result)
    return IsolatedInterrupt(not_started)


# --- a job that ran through: its values ---------------------------------------------------------


def _framework_hint(module: str) -> str:
    return f"rebuilding it would import {module} into the kernel, which has not imported it"


def _framework_advice(modules: list[str]) -> str:
    imports = " / ".join(f"`import {m}`" for m in modules)
    its = "its" if len(modules) == 1 else "their"
    return (f" (isolation keeps {', '.join(modules)} and {its} memory out of the kernel: run {imports} in the "
            "kernel first to get such values back, or return plain values: numpy arrays, "
            "model.get_weights(), a saved file's path)")


def bring_back(done: Done, result: IsolatedResult) -> str | None:
    """Rebuild the job's value and outputs into ``result``; a warning naming what did not come back.

    Example:
        >>> result = IsolatedResult()
        >>> bring_back(Done(outputs={"x": {"format": "pickle", "data": __import__("pickle").dumps(3), "buffers": []}}),
        ...            result), result.outputs
        (None, {'x': 3})
    """
    started = time.perf_counter()
    warn_about = dict(result.not_returned)  # what the worker could not send
    frameworks: list[str] = []  # refused, not imported: named once in the warning with what to do
    if done.value is not None:
        value = _rebuild("value", done.value, result, warn_about, frameworks)
        if value is not _NOT_REBUILT:
            result.value = value
    for name, spec in done.outputs.items():
        if spec["format"] == "module" and spec["name"] not in sys.modules:
            # Importing TensorFlow into the kernel because the cell imported it would undo
            # the point of isolating it; the user imports it here when they need it. A cell's
            # own `import` is not worth a warning: the report lists it.
            result.not_returned[name] = (f"module {spec['name']!r} is not imported in the kernel; "
                                         "import it there if needed")
            continue
        value = _rebuild(name, spec, result, warn_about, frameworks)
        if value is not _NOT_REBUILT:
            result.outputs[name] = value
    result.ship_out_s = time.perf_counter() - started
    if not warn_about:
        return None
    listing = "; ".join(f"{name}: {why}" for name, why in warn_about.items())
    advice = _framework_advice(frameworks) if frameworks else ""
    return f"these values did not come back from the isolated process: {listing}{advice}"


_NOT_REBUILT = object()


def _rebuild(name: str, spec: dict[str, Any], result: IsolatedResult, warn_about: dict[str, str],
             frameworks: list[str]) -> Any:
    """One value decoded (and listed as returned), or ``_NOT_REBUILT`` with the reason noted."""
    try:
        value = decode(spec, guard=True)
    except FrameworkNotImported as exc:  # a model, a tensor, a function using tf...
        warn_about[name] = result.not_returned[name] = _framework_hint(exc.module)
        if exc.module not in frameworks:
            frameworks.append(exc.module)
        return _NOT_REBUILT
    except Exception as exc:  # noqa: BLE001 - one bad value must not lose the others
        warn_about[name] = result.not_returned[name] = \
            f"rebuilding it in the kernel failed: {type(exc).__name__}: {exc}"
        return _NOT_REBUILT
    result.returned.append(describe(name, spec))
    devices = guarded(lambda: gpu_devices_of(value), "finding the value's devices")  # a report, never a failure
    if isinstance(devices, list) and devices:
        result.returned_on_gpu[name] = devices
    return value


def warn(label: str, message: str) -> None:
    """Issue the job's :class:`IsolationWarning` (values that did not come back).

    ``warn_explicit`` with no registry: Python's default filter shows it every time (a
    location-based warning shows once per line, so a loop would hide later failures), and it
    names the job, not a line of kerasmagic. Issued after the job's cleanup: under ``-W error``
    it raises, and nothing may be left behind then.
    """
    warnings.warn_explicit(message, IsolationWarning, f"<{label}>", 0, module="kerasmagic.isolation")


# --- on a Ray cluster -------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ray_failure(exc: BaseException) -> str:
    """Ray's error in a sentence: which kind of death, without Ray's multi-page traceback."""
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the exception the task raised
    died = cause if isinstance(cause, BaseException) and "RayTaskError" in type(exc).__name__ else exc
    if "ActorDied" in type(died).__name__ and "NodeAgent" in str(died):
        return (f"this node's kerasmagic agent died during the job ({type(died).__name__}: killed, or out of "
                "memory); the next job on the node starts a new agent")
    if isinstance(cause, BaseException) and "RayTaskError" in type(exc).__name__:
        hint = (" (the node cannot import what the job needs: the notebook's environment, kerasmagic included, "
                "must exist on every node; see docs/guide/scale-out.md, Limits)"
                ) if isinstance(cause, ImportError) else ""
        return f"the relay task failed there with {type(cause).__name__}: {_ANSI.sub('', str(cause))[:300]}{hint}"
    name = type(exc).__name__
    text = _ANSI.sub("", str(exc)).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    if "NodeDied" in name or "node" in first.lower() and "died" in first.lower():
        return f"its node died or was removed ({name})"
    if "WorkerCrashed" in name or "ActorDied" in name or "ActorUnavailable" in name:
        return f"the process running it on the node died ({name}: {first[:200]})"
    return f"{name}: {first[:300]}"


def node_crashed(result: IsolatedResult, where: str, exc: BaseException, output: str) -> IsolatedCrash:
    """The relay or its node failed (``exc``, Ray's error): where, why, and what to do."""
    reason = ray_failure(exc)
    result.last_output = output
    advice = ("fix the node's environment, then run it again" if reason.startswith("the relay task failed")
              else "run it again" if reason.startswith("this node's kerasmagic agent died")
              else "its memory on that node went with its process; run it again (Ray places it on a live node)")
    return IsolatedCrash(
        f"the isolated job on node {where} ended without a result: {reason}. "
        f"{advice[0].upper()}{advice[1:]}{_shown(output)}", result, last_output=output)


def relay_ended_without_result(result: IsolatedResult, where: str, output: str) -> IsolatedCrash:
    """The job's event stream ended without its final event."""
    return IsolatedCrash(f"the job's relay on node {where} ended without a result; its last output:\n"
                         f"{output or '(none)'}", result, last_output=output)


def no_agent_after_restart(result: IsolatedResult, node_id: str) -> IsolatedCrash:
    """The node still had no agent after one was started for it."""
    return IsolatedCrash(
        f"node {node_id[:8]} has no kerasmagic agent even after one was started for it "
        "(it may be dying, or the agent fails to start there: is kerasmagic installed on it?)", result)


def not_placed_in_time(result: IsolatedResult, timeout: float, asked: str, offered: str) -> IsolatedTimeout:
    """No node took the job within its timeout."""
    return IsolatedTimeout(
        f"no node took the isolated job within its timeout of {timeout:g} s: the cluster may have no "
        f"free node with what it asks for ({asked}; the cluster has {offered}). "
        "Ask for less, wait for busy nodes (a longer timeout), or add nodes", result)


def timed_out_on_node(result: IsolatedResult, timeout: float, where: str) -> IsolatedTimeout:
    """The job ran past its timeout on its node (the kernel's deadline, the agent's report overdue)."""
    return IsolatedTimeout(
        f"the isolated job on node {where} ran past its timeout of {timeout:g} s (waiting for "
        "the cluster's resources included) and was killed there; raise the timeout or make the job shorter",
        result)


def ray_shut_down(result: IsolatedResult, where: str, output: str, pending_s: float | None = None) -> IsolatedCrash:
    """``ray.shutdown()`` ran while the job did (issue 23, fault 2): nothing of Ray is called again.
    ``pending_s``: the shutdown had not finished after that many seconds (issue 33, item 11)."""
    result.last_output = output
    then = ("call ray.init(...) and run it again" if pending_s is None else
            f"ray.shutdown() had not finished after {pending_s:g} s: wait for it to return, then call "
            "ray.init(...) and run it again")
    return IsolatedCrash(
        f"Ray was shut down (ray.shutdown()) while the isolated job ran on node {where}: this "
        "process's connection to the cluster ended, and the job's agent ends its process with it. Nothing was "
        f"started again: {then}" + _shown(output), result, last_output=output)


def from_node(error: BaseException, result: IsolatedResult, where: str) -> BaseException:
    """The error the node's agent reported, carrying the kernel's report and naming the node."""
    error.result = result  # type: ignore[attr-defined]
    if isinstance(error, (IsolatedCrash, IsolatedTimeout)):
        error.args = (f"{error.args[0]} (on node {where})",) + tuple(error.args[1:])
    return error

"""The worker side of one isolated job: receive it, run it, send back what it made, exit.

A job runs in one of two kinds of process, which then behave the same:
- a child forked from the template (:mod:`kerasmagic.isolation.template`), the usual case:
  :func:`serve_forked_job`;
- a fresh interpreter, when no template may fork (its fork-safety check failed), started as
  ``python -m kerasmagic.isolation.child.worker --channel-fd N --watch-fd M --parent-pid P
  --preload tensorflow,keras --learned jax --warmup-log PATH`` (never forked from the kernel: a fork
  after TensorFlow's runtime started hangs).

Either dies with the kernel (:mod:`kerasmagic.isolation.lifeline`): ``PR_SET_PDEATHSIG``
(Linux), EOF on the lifeline pipe whose write end only its parent holds, and a change of
``os.getppid()``. On the way out it removes the job's folder and ends its whole process group
(what the job started too); a fresh interpreter, whose parent is the kernel itself, also removes
every other file the dead kernel left (as a template does). It imports nothing from the
template's module.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import faulthandler
import linecache
import os
import random
import shutil
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

# All loaded already: `python -m kerasmagic.isolation.child.worker` and the template's fork
# both come through kerasmagic.isolation, which imports them.
from ...probes import process
from ...probes.availability import to_jsonable
from ...probes.sample import gpu_framework_imported, memory_sample
from ..errors import LONG_MESSAGE_CHARS, shorten_message
from ..gpu_figures import allocator_peaks
from ..job import Job
from ..leftovers import our_folders, remove_kernel_files
from ..lifeline import PARENT_GONE_EXIT, parent_gone, watch_parent
from ..messages import CHANNEL_LOST_EXIT, JOB_CHANNEL, Done, ImportFailed, Message, Raised, Ready, RunJob, Sample, dumps
from ..shipping import ShippingError, decode, encode
from ..spec import imported_since, modules_present, preload
from . import child_display
from .warmup import output_to, use_compilation_cache, warm_up

CELL_FILENAME = "<isolated cell>"

_send_lock = threading.Lock()
#: The running job's folder: removed by whoever sees the kernel gone (here, the watch thread).
_job_directory: str | None = None
#: A fresh interpreter's kernel (its parent) and the folders of its files, worked out beforehand.
_kernel: tuple[int, list[str]] | None = None


_ending = threading.Lock()


def _kernel_gone() -> None:
    # The watch thread and the parent-death SIGTERM can both get here: one is enough.
    if not _ending.acquire(blocking=False):
        return
    if _job_directory:
        shutil.rmtree(_job_directory, ignore_errors=True)
    if _kernel is not None and parent_gone(_kernel[0], within=2.0):
        # With no template (fork=False, or one that refused), nobody else removes what the dead
        # kernel left now: a map's shared folder, its items not started (issue 23, fault 5).
        remove_kernel_files(*_kernel)
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # what the job started, and this process
    except OSError:
        pass
    os._exit(PARENT_GONE_EXIT)


def _die_with_parent(parent_pid: int, watch_fd: int) -> None:
    watch_parent(parent_pid, watch_fd, _kernel_gone)


def safe_str(value: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` raises.

    Example:
        >>> class Broken(Exception):
        ...     def __str__(self): raise RuntimeError("no")
        >>> safe_str(Broken())
        '<str() of Broken raised RuntimeError: no>'
    """
    try:
        return str(value)
    except Exception as exc:  # noqa: BLE001 - the user's __str__ may do anything
        return f"<str() of {type(value).__name__} raised {type(exc).__name__}: {exc}>"


def _send(conn: Connection, message: Message) -> None:
    # The sender's pid: a process the job forked shares the channel, and its messages must
    # not count as the job's (its "done" would otherwise win).
    message.sender = os.getpid()
    data = dumps(message)
    with _send_lock:
        conn.send_bytes(data)


def _preload(modules: list[str], learned: list[str], log_path: str) -> float:
    """Import the frameworks with fd 1/2 sent to a log: import chatter must not reach a cell."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with output_to(log_fd):
            return preload(modules, learned)
    finally:
        os.close(log_fd)


def _memory_sample() -> dict[str, Any]:
    """One sample in the protocol's shape (:mod:`kerasmagic.probes.sample`), with this pid and
    ``allocators``: torch's and JAX's own peaks (read each time: a job that is killed still
    leaves the last ones)."""
    # NVML only once a framework that can use a GPU is imported: a plain job never starts it.
    return {"pid": os.getpid(), **memory_sample(gpu=gpu_framework_imported()), "allocators": allocator_peaks()}


def _final_sample() -> dict[str, Any]:
    """The last sample, with the exact peak RSS (``VmHWM``) and PSS/USS: a forked child shares
    the template's pages, which its RSS counts again."""
    return {**_memory_sample(), "rss_peak_bytes": to_jsonable(process.high_water_rss_bytes()),
            **process.pss_uss_bytes()}


class _Sampler:
    def __init__(self, conn: Connection, interval_s: float) -> None:
        self._conn = conn
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kerasmagic-isolation-sampler", daemon=True)

    def start(self) -> _Sampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                _send(self._conn, Sample(reading=_memory_sample()))
            except (OSError, EOFError):
                return  # the parent went away; the watch thread ends us
            except Exception:  # noqa: BLE001, S112 - a failing probe must not end the job, nor fill its output
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _run_code(code: str, namespace: dict[str, Any], display_last: bool) -> None:
    linecache.cache[CELL_FILENAME] = (len(code), None, code.splitlines(True), CELL_FILENAME)
    tree = ast.parse(code, CELL_FILENAME)
    last = None
    # display_last is the kernel's decision, by IPython's rule for a last `;` (comments after it included).
    final = tree.body[-1] if display_last and tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    exec(compile(tree, CELL_FILENAME, "exec"), namespace)  # noqa: S102 - running the user's cell is the point
    if last is not None:
        value = eval(compile(last, CELL_FILENAME, "eval"), namespace)  # noqa: S307
        if value is not None:
            child_display.display(value)


def _set_seed(seed: int) -> None:
    if "keras" in sys.modules:
        sys.modules["keras"].utils.set_random_seed(seed)
        return
    if "tf_keras" in sys.modules:
        sys.modules["tf_keras"].utils.set_random_seed(seed)
        return
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed)
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(seed)


#: kerasmagic/isolation/: this subpackage and the kernel-side code it uses (shipping's decode).
_ISOLATION_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _format_user_traceback(exc: BaseException) -> str:
    # Skip our leading frames (_run_job, _run_code, decode): the user sees only their code.
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and \
            os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_ISOLATION_FOLDER):
        tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:  # noqa: BLE001 - a broken __str__ breaks the formatter too
        lines = traceback.format_tb(tb)
        return "".join(["Traceback (most recent call last):\n", *lines, f"{type(exc).__name__}: {safe_str(exc)}\n"])


def _failure(exc: BaseException, stage: str, name: str | None = None) -> Raised:
    """The error message: ``stage`` says whose fault it is (our shipping, or the user's code).

    The message travels whole once; in the traceback a long one is shortened (the kernel
    shows the traceback, and 20 MB of it would hang the notebook, twice over).
    """
    message = safe_str(exc)
    formatted = _format_user_traceback(exc)
    if len(message) > LONG_MESSAGE_CHARS:
        formatted = formatted.replace(message, shorten_message(message))
    return Raised(stage=stage, name=name, exc_type=type(exc).__name__, exc_message=message, traceback=formatted)


def _enter_directory(cwd: str | None) -> None:
    # A kernel whose working directory was deleted sends None: the worker keeps its own.
    if cwd:
        try:
            os.chdir(cwd)
        except OSError:
            pass


def _decode_inputs(job: Job, namespace: dict[str, Any]) -> tuple[Any, list, dict] | Raised:
    """Rebuild the inputs (or the function and its arguments); a failure is ours to report."""
    name = None
    try:
        for name, spec in job.inputs.items():
            namespace[name] = decode(spec)
        if job.mode != "function" or job.call is None:
            return None, [], {}
        call = job.call
        name = "the function"
        function = decode(call["function"])
        args = []
        for index, spec in enumerate(call["args"]):
            name = f"args[{index}]"
            args.append(decode(spec))
        kwargs = {}
        for key, spec in call["kwargs"].items():
            name = f"kwargs[{key!r}]"
            kwargs[key] = decode(spec)
        return function, args, kwargs
    except BaseException as exc:  # noqa: BLE001 - reported as a shipping failure, not the user's code
        return _failure(exc, "inputs", name)


def _collect_outputs(job: Job, namespace: dict[str, Any]) -> tuple[dict, Any, dict[str, str]]:
    outputs: dict[str, Any] = {}
    value_spec: Any = None
    not_returned: dict[str, str] = {}
    if job.mode == "function":
        try:
            value_spec = encode("value", namespace["__value__"], job.directory)
        except ShippingError as exc:
            not_returned["value"] = exc.reason
        return outputs, value_spec, not_returned
    for name in job.outputs:
        if name not in namespace:
            if name in job.required_outputs:
                not_returned[name] = "the code did not assign it"
            continue
        try:
            outputs[name] = encode(name, namespace[name], job.directory)
        except ShippingError as exc:
            not_returned[name] = exc.reason
    return outputs, value_spec, not_returned


def _run_job(conn: Connection, request: RunJob) -> None:
    """Run one job and send its last message (``done`` or ``error``, with the final sample)."""
    job = request.job
    _adopt_kernel_paths(request)
    # A job that dies of a fault (a segfault in a framework's C++) leaves its Python stack on its
    # stderr, so that the kernel can say where it died (issue 22); the signal still ends it.
    try:
        faulthandler.enable(file=2, all_threads=False)
    except (OSError, ValueError, RuntimeError):  # fd 2 closed or not writable: no stack, nothing else lost
        pass
    modules_before = set(sys.modules)
    sampler = _Sampler(conn, request.sample_interval_s).start()
    child_display.install(lambda message: _send(conn, message))
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    started = time.perf_counter()
    failure, first_line_ts = _execute(job, namespace)
    run_s = time.perf_counter() - started
    _flush_quietly()
    sampler.stop()
    last = _last_message(job, namespace, failure, run_s, first_line_ts)
    last.imported = imported_since(modules_before)
    try:
        _send(conn, last)
    except OSError:
        # The job closed the channel's descriptor (os.closerange(3, ...)) or the kernel's end
        # went away: nothing can go back. The exit code says which to the kernel, no traceback.
        os._exit(CHANNEL_LOST_EXIT)


def _flush_quietly() -> None:
    """Flush Python's stdout/stderr; the job may have closed fd 1 or 2 under them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _adopt_kernel_paths(request: RunJob) -> None:
    """The kernel's working directory and ``sys.path``: the job imports what the notebook would."""
    _enter_directory(request.cwd)
    for entry in reversed(request.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _execute(job: Job, namespace: dict[str, Any]) -> tuple[Raised | None, float]:
    """Rebuild the inputs, then run the code or call the function: the failure message (None
    when it ran through) and when the user's first line ran."""
    first_line_ts = time.time()
    decoded = _decode_inputs(job, namespace)
    if isinstance(decoded, Raised):
        return decoded, first_line_ts
    function, args, kwargs = decoded
    first_line_ts = time.time()
    try:
        if job.seed is not None:
            _set_seed(job.seed)
        if job.mode == "code":
            _run_code(job.code, namespace, job.display_last)
        else:
            namespace["__value__"] = function(*args, **kwargs)
        child_display.send_open_figures()
    except BaseException as exc:  # noqa: BLE001 - the user's exception, whatever it is, goes to the kernel
        return _failure(exc, "code"), first_line_ts
    return None, first_line_ts


def _last_message(job: Job, namespace: dict[str, Any], failure: Raised | None, run_s: float,
                  first_line_ts: float) -> Done | Raised:
    """``done`` with the encoded outputs, or the failure; either with the final sample."""
    outputs, value_spec, not_returned = ({}, None, {}) if failure else _collect_outputs(job, namespace)
    message = failure or Done(outputs=outputs, value=value_spec)
    message.not_returned, message.run_s, message.final_sample = not_returned, run_s, _final_sample()
    message.first_line_ts = first_line_ts
    return message


def _serve(conn: Connection, ready: Ready) -> None:
    """Say ready, take one job, run it, exit (the same for a forked child and a fresh worker)."""
    global _job_directory
    _send(conn, ready)
    try:
        request = JOB_CHANNEL.loads(conn.recv_bytes())
    except (EOFError, OSError):
        os._exit(0)  # the pool closed us while idle
    if isinstance(request, RunJob):
        _job_directory = request.job.directory
        _run_job(conn, request)
    _flush_quietly()
    # os._exit: skip interpreter teardown (TF's can take seconds); the OS takes everything back.
    os._exit(0)


def serve_forked_job(channel_fd: int, watch_fd: int, template_pid: int, asked: list[str] | None = None,
                     warm: bool = False) -> None:
    """The body of a child forked from the template (called by it, right after the fork);
    ``asked``: the modules the template was asked to import (its report lists those it has);
    ``warm``: a spare, which warms its Keras backend up before it says ready."""
    _die_with_parent(template_pid, watch_fd)
    use_compilation_cache()  # before anything compiles: the warm-up's code is cached too
    warm_up_s = warm_up() if warm else 0.0
    _serve(Connection(channel_fd), Ready(pid=os.getpid(), rss_bytes=process.rss_bytes(), import_s=0.0, forked=True,
                                         modules=modules_present(asked or []), warm_up_s=warm_up_s))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kerasmagic.isolation.child.worker")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--watch-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("--learned", default="")
    parser.add_argument("--warmup-log", required=True)
    args = parser.parse_args(argv)
    global _kernel
    _kernel = args.parent_pid, our_folders()
    _die_with_parent(args.parent_pid, args.watch_fd)
    conn = Connection(args.channel_fd)
    modules = [m for m in args.preload.split(",") if m]
    learned = [m for m in args.learned.split(",") if m]
    try:
        import_s = _preload(modules, learned, args.warmup_log)
    except BaseException as exc:  # noqa: BLE001 - the kernel shows the cause, not the log's chatter
        _send(conn, ImportFailed(error=f"{type(exc).__name__}: {safe_str(exc)}", traceback=_format_user_traceback(exc)))
        os._exit(1)
    use_compilation_cache()
    _serve(conn, Ready(pid=os.getpid(), rss_bytes=process.rss_bytes(), import_s=import_s, forked=False,
                       modules=modules_present(modules + learned)))


if __name__ == "__main__":
    main()

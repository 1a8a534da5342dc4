"""Running one job on a worker: send it, stream its output, watch its memory, bring values back.

The kernel's main thread does all of it in one ``selectors`` loop over three file
descriptors (the message channel, the worker's stdout pipe and its stderr pipe): output is
written to ``sys.stdout``/``sys.stderr`` from the main thread, which is where ipykernel
routes it into the running cell, and a Ctrl-C (``KeyboardInterrupt``) lands in that loop.
"""

from __future__ import annotations

import codecs
import os
import pickle
import selectors
import shutil
import signal
import subprocess
import sys
import time
import warnings
from typing import Any

from .. import events
from ..probes.process import rss_bytes
from .errors import IsolatedCellError, IsolatedCrash, IsolatedInterrupt, IsolatedTimeout, IsolationWarning
from .pool import Worker, WorkerPool, WorkerSpec, default_pool
from .result import IsolatedResult
from .shipping import FrameworkNotImported, decode, describe

SAMPLE_INTERVAL_S = 0.25
_TAIL_CHARS = 8192
_EXIT_GRACE_S = 10.0


class Job:
    """Everything a worker needs, already encoded (so that nothing runs if a name cannot travel)."""

    def __init__(self, mode: str, directory: str, *, code: str = "", inputs: dict[str, Any] | None = None,
                 outputs: list[str] | None = None, required_outputs: list[str] | None = None,
                 call: tuple | None = None, seed: int | None = None, display_last: bool = False) -> None:
        self.mode = mode
        self.directory = directory
        self.code = code
        self.inputs = inputs or {}
        self.outputs = outputs or []
        self.required_outputs = required_outputs or []
        self.call = call
        self.seed = seed
        self.display_last = display_last

    def message(self) -> dict[str, Any]:
        return {
            "kind": "job",
            "mode": self.mode,
            "code": self.code,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "required_outputs": self.required_outputs,
            "call": self.call,
            "seed": self.seed,
            "display_last": self.display_last,
            "directory": self.directory,
            "cwd": os.getcwd(),
            "sys_path": [p for p in sys.path if p],
            "sample_interval_s": SAMPLE_INTERVAL_S,
        }


class _Stream:
    """One of the worker's output pipes: chunks are decoded and written as they arrive."""

    def __init__(self, fd: int, target_name: str) -> None:
        self.fd = fd
        self.target_name = target_name
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.open = True


class _Session:
    """The kernel's side of one running job."""

    def __init__(self, worker: Worker, result: IsolatedResult, forward_output: bool) -> None:
        self.worker = worker
        self.result = result
        self.forward_output = forward_output
        self.tail = ""
        self.final: dict[str, Any] | None = None
        self.channel_open = True
        self.selector = selectors.DefaultSelector()
        self.selector.register(worker.conn.fileno(), selectors.EVENT_READ, "channel")
        for stream, name in ((worker.process.stdout, "stdout"), (worker.process.stderr, "stderr")):
            os.set_blocking(stream.fileno(), False)
            self.selector.register(stream.fileno(), selectors.EVENT_READ, _Stream(stream.fileno(), name))

    def pump(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            if key.data == "channel":
                self._read_channel()
            else:
                self._read_stream(key.data)

    def _read_stream(self, stream: _Stream) -> None:
        try:
            chunk = os.read(stream.fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            stream.open = False
            self.selector.unregister(stream.fd)
            return
        text = stream.decoder.decode(chunk)
        if self.result.first_output_ts is None:
            self.result.first_output_ts = time.time()
        self.tail = (self.tail + text)[-_TAIL_CHARS:]
        if self.forward_output and text:
            target = getattr(sys, stream.target_name)
            target.write(text)
            target.flush()

    def _read_channel(self) -> None:
        try:
            message = pickle.loads(self.worker.conn.recv_bytes())
        except (EOFError, OSError):
            self.channel_open = False
            self.selector.unregister(self.worker.conn.fileno())
            return
        kind = message.get("kind")
        if kind == "sample":
            self._record_sample(message)
            events.publish("isolated_sample", {k: v for k, v in message.items() if k != "kind"})
        elif kind == "display":
            _show(message["data"], message.get("metadata") or {}, self.forward_output)
        elif kind in ("done", "error"):
            self.final = message
            self._record_sample(message["final_sample"])
            if message["final_sample"].get("rss_peak_bytes"):
                self.result.child_rss_peak_bytes = max(
                    self.result.child_rss_peak_bytes or 0, message["final_sample"]["rss_peak_bytes"])
                self.result.child_rss_peak_method = "exact"

    def _record_sample(self, sample: dict[str, Any]) -> None:
        result = self.result
        result.samples += 1
        rss = sample.get("rss_bytes")
        if isinstance(rss, int):
            result.child_rss_peak_bytes = max(result.child_rss_peak_bytes or 0, rss)
        for device, values in (sample.get("tf") or {}).items():
            peak = values.get("peak_bytes")
            if isinstance(peak, int):
                result.child_tf_peak[device] = max(result.child_tf_peak.get(device, 0), peak)
        for device, used in (sample.get("gpu") or {}).items():
            if isinstance(used, int):
                result.child_gpu_peak[device] = max(result.child_gpu_peak.get(device, 0), used)

    def streams_open(self) -> bool:
        return any(isinstance(key.data, _Stream) for key in self.selector.get_map().values())

    def close(self) -> None:
        self.selector.close()


def _show(data: dict[str, Any], metadata: dict[str, Any], forward: bool) -> None:
    if not forward:
        return
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is not None and shell_module.InteractiveShell.initialized():
        from IPython.display import display

        display(data, raw=True, metadata=metadata)
    else:
        print(data.get("text/plain", ""))  # a script: the text form is all a terminal can show


def _last_lines(text: str, count: int = 12) -> str:
    return "\n".join(text.replace("\r", "\n").rstrip().splitlines()[-count:])


def run_job(job: Job, spec: WorkerSpec, result: IsolatedResult, *, timeout: float | None = None,
            forward_output: bool = True, pool: WorkerPool | None = None) -> IsolatedResult:
    """Run an encoded job on a worker and fill ``result``; raises the isolation errors.

    The job folder is removed at the end, whatever happens.
    """
    __tracebackhide__ = True  # noqa: F841
    pool = pool or default_pool()
    started = time.perf_counter()
    result.frameworks = list(spec.preload)
    worker: Worker | None = None
    session: _Session | None = None
    try:
        try:
            worker, state = pool.acquire(spec)
        except (OSError, subprocess.SubprocessError) as exc:
            result.status = "crash"
            raise IsolatedCrash(
                f"could not start an isolated worker ({type(exc).__name__}: {exc}); nothing ran. Check that "
                f"{sys.executable} still runs and that the machine has free memory and processes/open files "
                "to spare (ulimit -u, ulimit -n), then run it again", result) from None
        result.worker_pid = worker.pid
        result.worker_state = state
        result.warm = state == "ready"
        _wait_until_ready(worker, result)
        result.wait_s = time.perf_counter() - started
        pool.replenish(spec)  # the next job's worker imports while this one runs

        run_started = time.perf_counter()
        session = _Session(worker, result, forward_output)
        try:
            worker.conn.send_bytes(pickle.dumps(job.message(), protocol=5))
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it died after it was ready
            _died_before_the_job(worker, session, result, exc)
        deadline = None if timeout is None else run_started + timeout
        while session.channel_open and session.final is None:
            if deadline is not None and time.perf_counter() >= deadline:
                _stop(worker, session)
                result.status = "timeout"
                result.run_s = time.perf_counter() - run_started
                raise IsolatedTimeout(
                    f"the isolated job ran past its timeout of {timeout:g} s and its worker was killed "
                    "(all of its memory is back); raise the timeout or make the job shorter",
                    result)
            wait = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.perf_counter()))
            session.pump(wait)
        result.run_s = time.perf_counter() - run_started
        # Let the worker exit by itself and drain the last of its output.
        _finish(worker, session)
        result.last_output = _last_lines(session.tail)
        code = worker.process.returncode
        result.exit_code = code
        if code is not None and code < 0:
            result.signal_name = _signal_name(-code)
        final = session.final
        if final is None:
            result.status = "crash"
            how = f"was killed by {result.signal_name}" if result.signal_name else f"exited with code {code}"
            hint = " (SIGKILL is what the out-of-memory killer sends)" if result.signal_name == "SIGKILL" else ""
            output = f"; its last output:\n{result.last_output}" if result.last_output else "; it printed nothing"
            raise IsolatedCrash(f"the isolated worker (pid {worker.pid}) {how}{hint} before the job finished{output}",
                                result, exit_code=code, signal_name=result.signal_name, last_output=result.last_output)
        result.run_s = final.get("run_s", result.run_s)
        result.not_returned.update(final.get("not_returned") or {})
        if final["kind"] == "error":
            result.status = "error"
            result.error = f"{final['exc_type']}: {final['exc_message']}"
            raise IsolatedCellError(
                f"the isolated code raised {final['exc_type']}: {final['exc_message']}\n\n"
                f"Traceback in the worker process:\n{final['traceback'].rstrip()}",
                result, exc_type=final["exc_type"], exc_message=final["exc_message"],
                child_traceback=final["traceback"])
        _bring_back(final, result)
        return result
    except KeyboardInterrupt:
        if worker is not None:
            _stop(worker, session)
        result.status = "interrupted"
        if session is not None and not result.run_s:
            result.run_s = time.perf_counter() - run_started
        # A fresh exception without context: where the signal landed (our selectors loop, a
        # sleep) is plumbing; the user sees one line and the magic shows the partial report.
        who = f"the isolated worker (pid {worker.pid})" if worker is not None else "the isolated worker"
        raise IsolatedInterrupt(f"interrupted; {who} was killed", result) from None
    except IsolatedCellError as exc:
        exc.result = result
        raise
    finally:
        if session is not None:
            if not result.last_output:
                result.last_output = _last_lines(session.tail)
            session.close()
        if worker is not None:
            pool.release(worker)
        shutil.rmtree(job.directory, ignore_errors=True)
        result.wall_s = time.perf_counter() - started
        result.pool_size = pool.size
        result.pool_idle_workers, result.pool_idle_rss_bytes = pool.idle_cost()
        result.kernel_rss_after_bytes = rss_bytes()
        result.finished_ts = time.time()
        events.publish("isolated_done", result.to_dict())


def _wait_until_ready(worker: Worker, result: IsolatedResult) -> None:
    while not worker.ready:
        if not worker.alive():
            result.status = "crash"
            code = worker.process.returncode
            result.exit_code = code
            log = worker.warmup_log_tail()
            raise IsolatedCrash(
                f"the isolated worker died while importing {', '.join(worker.spec.preload) or 'Python'} "
                f"(exit code {code}) before it could take the job; its output:\n{log}",
                result, exit_code=code, last_output=log)
        time.sleep(0.02)
    result.worker_import_s = worker.ready_info.get("import_s")
    result.child_rss_start_bytes = worker.ready_info.get("rss_bytes")


def _died_before_the_job(worker: Worker, session: _Session, result: IsolatedResult, exc: OSError) -> None:
    try:
        code = worker.process.wait(timeout=2.0)
    except subprocess.TimeoutExpired:  # alive, but its channel is broken: it cannot take the job
        _stop(worker, session)
        code = worker.process.returncode
    else:
        _stop(worker, session)  # drain what it printed
    result.status = "crash"
    result.exit_code = code
    if code is not None and code < 0:
        result.signal_name = _signal_name(-code)
    result.last_output = _last_lines(session.tail)
    how = f"was killed by {result.signal_name}" if result.signal_name else f"exited with code {code}"
    raise IsolatedCrash(
        f"the isolated worker (pid {worker.pid}) {how} after it was ready, before it received the job "
        f"({type(exc).__name__}); nothing ran and the namespace is unchanged: run it again, a fresh "
        "worker takes it (if this repeats, something on this machine kills idle processes, e.g. the "
        "out-of-memory killer)", result, exit_code=code, signal_name=result.signal_name,
        last_output=result.last_output) from None


def _stop(worker: Worker, session: _Session | None) -> None:
    worker.kill()
    if session is not None:
        deadline = time.perf_counter() + 1.0
        while session.streams_open() and time.perf_counter() < deadline:
            session.pump(0.05)


def _finish(worker: Worker, session: _Session) -> None:
    deadline = time.perf_counter() + _EXIT_GRACE_S
    while worker.process.poll() is None and time.perf_counter() < deadline:
        session.pump(0.05)
    if worker.process.poll() is None:
        worker.kill()
    # A grandchild the job started may hold the pipes open: drain briefly, never wait on it.
    deadline = time.perf_counter() + 1.0
    while session.streams_open() and time.perf_counter() < deadline:
        session.pump(0.05)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _framework_hint(module: str) -> str:
    return f"rebuilding it would import {module} into the kernel, which has not imported it"


def _framework_advice(modules: list[str]) -> str:
    imports = " / ".join(f"`import {m}`" for m in modules)
    its = "its" if len(modules) == 1 else "their"
    return (f" (isolation keeps {', '.join(modules)} and {its} memory out of the kernel: run {imports} in the "
            "kernel first to get such values back, or return plain values: numpy arrays, "
            "model.get_weights(), a saved file's path)")


def _bring_back(final: dict[str, Any], result: IsolatedResult) -> None:
    started = time.perf_counter()
    warn_about = dict(result.not_returned)  # what the worker could not send
    frameworks: list[str] = []  # refused, not imported: named once in the warning with what to do
    if final.get("value") is not None:
        try:
            result.value = decode(final["value"], guard=True)
            result.returned.append(describe("value", final["value"]))
        except FrameworkNotImported as exc:
            warn_about["value"] = result.not_returned["value"] = _framework_hint(exc.module)
            frameworks.append(exc.module)
        except Exception as exc:  # noqa: BLE001 - reported as a warning, as for named outputs
            warn_about["value"] = result.not_returned["value"] = \
                f"rebuilding it in the kernel failed: {type(exc).__name__}: {exc}"
    for name, spec in final.get("outputs", {}).items():
        if spec["kind"] == "module" and spec["name"] not in sys.modules:
            # Importing TensorFlow into the kernel because the cell imported it would undo
            # the point of isolating it; the user imports it here when they need it. A cell's
            # own `import` is not worth a warning: the report lists it.
            result.not_returned[name] = f"module {spec['name']!r} is not imported in the kernel; import it there if needed"
            continue
        try:
            result.outputs[name] = decode(spec, guard=True)
            result.returned.append(describe(name, spec))
        except FrameworkNotImported as exc:  # a model, a tensor, a function using tf...
            warn_about[name] = result.not_returned[name] = _framework_hint(exc.module)
            if exc.module not in frameworks:
                frameworks.append(exc.module)
        except Exception as exc:  # noqa: BLE001 - one bad value must not lose the others
            warn_about[name] = result.not_returned[name] = \
                f"rebuilding it in the kernel failed: {type(exc).__name__}: {exc}"
    result.ship_out_s = time.perf_counter() - started
    if warn_about:
        listing = "; ".join(f"{name}: {why}" for name, why in warn_about.items())
        # warn_explicit with no registry: Python's default filter shows it every time (a
        # location-based warning shows once per line, so a loop would hide later failures),
        # and it names the run, not a line of kerasmagic.
        advice = _framework_advice(frameworks) if frameworks else ""
        warnings.warn_explicit(f"these values did not come back from the isolated process: {listing}{advice}",
                               IsolationWarning, f"<{result.label}>", 0, module="kerasmagic.isolation")

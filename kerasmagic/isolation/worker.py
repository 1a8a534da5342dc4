"""The worker: a fresh interpreter that imports the frameworks, waits for one job, runs it, exits.

Started by the pool as ``python -m kerasmagic.isolation.worker --channel-fd N --watch-fd M
--parent-pid P --preload tensorflow,keras --warmup-log PATH`` (never forked from the
kernel: a fork after TensorFlow's runtime started hangs).

It dies with its parent three ways: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux), EOF on
the watch pipe whose write end only the parent holds, and a change of ``os.getppid()``.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import ctypes
import linecache
import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

#: Exit status of a worker that found its parent gone.
PARENT_GONE_EXIT = 75
CELL_FILENAME = "<isolated cell>"

_send_lock = threading.Lock()


def _die_with_parent(parent_pid: int, watch_fd: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the watch pipe below still covers us
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(PARENT_GONE_EXIT)

    def watch() -> None:
        while True:
            readable, _, _ = select.select([watch_fd], [], [], 1.0)
            if readable and not os.read(watch_fd, 1):
                os._exit(PARENT_GONE_EXIT)  # EOF: the only write end died with the parent
            if os.getppid() != parent_pid:
                os._exit(PARENT_GONE_EXIT)

    threading.Thread(target=watch, name="kerasmagic-isolation-watch-parent", daemon=True).start()


def _send(conn: Connection, message: dict[str, Any]) -> None:
    data = pickle.dumps(message, protocol=5)
    with _send_lock:
        conn.send_bytes(data)


def _preload(modules: list[str], log_path: str) -> float:
    """Import the frameworks with fd 1/2 sent to a log: import chatter must not reach a cell."""
    started = time.perf_counter()
    saved = os.dup(1), os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    try:
        import IPython.core.display_functions  # noqa: F401 - display() is patched per job
        import IPython.core.formatters  # noqa: F401

        for name in modules:
            __import__(name)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
    return time.perf_counter() - started


def _read_hwm_bytes() -> int | None:
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _memory_sample() -> dict[str, Any]:
    from kerasmagic.probes import nvml, process
    from kerasmagic.probes import tensorflow as tf_probe

    sample: dict[str, Any] = {"ts": time.time(), "pid": os.getpid(), "rss_bytes": process.rss_bytes(), "tf": {}, "gpu": {}}
    # allocator_stats() never starts TF's runtime: before the job's first op there is none.
    stats = tf_probe.allocator_stats()
    if isinstance(stats, dict):
        for device, values in stats.items():
            sample["tf"][device] = {"in_use_bytes": values["in_use_bytes"], "peak_bytes": values["peak_bytes"]}
    if "tensorflow" in sys.modules or "torch" in sys.modules or "jax" in sys.modules:
        devices = nvml.devices()
        if isinstance(devices, list):
            for device in devices:
                if isinstance(device, dict):
                    sample["gpu"][f"GPU:{device['index']}"] = device["process_used_bytes"]
    return sample


class _Sampler:
    def __init__(self, conn: Connection, interval_s: float) -> None:
        self._conn = conn
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kerasmagic-isolation-sampler", daemon=True)

    def start(self) -> "_Sampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                _send(self._conn, {"kind": "sample", **_memory_sample()})
            except (OSError, EOFError):
                return  # the parent went away; the watch thread ends us
            except Exception:  # noqa: BLE001 - a failing probe must not end the job
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _run_code(code: str, namespace: dict[str, Any], display_last: bool) -> None:
    linecache.cache[CELL_FILENAME] = (len(code), None, code.splitlines(True), CELL_FILENAME)
    tree = ast.parse(code, CELL_FILENAME)
    last = None
    if display_last and tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, CELL_FILENAME, "exec"), namespace)  # noqa: S102 - running the user's cell is the point
    if last is not None:
        value = eval(compile(last, CELL_FILENAME, "eval"), namespace)  # noqa: S307
        if value is not None:
            from .child_display import display

            display(value)


def _set_seed(seed: int) -> None:
    if "keras" in sys.modules:
        sys.modules["keras"].utils.set_random_seed(seed)
        return
    if "tf_keras" in sys.modules:
        sys.modules["tf_keras"].utils.set_random_seed(seed)
        return
    import random

    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed)
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(seed)


def _format_user_traceback(exc: BaseException) -> str:
    # Skip our leading frames (_run_job, _run_code, decode): the user sees only their code.
    our_folder = os.path.dirname(os.path.abspath(__file__))
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and \
            os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == our_folder:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _run_job(conn: Connection, job: dict[str, Any]) -> None:
    from . import child_display
    from .shipping import ShippingError, decode, encode

    try:
        os.chdir(job["cwd"])
    except OSError:
        pass
    for entry in reversed(job["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    sampler = _Sampler(conn, job["sample_interval_s"]).start()
    child_display.install(lambda message: _send(conn, message))
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    value_spec = None
    failure = None
    started = time.perf_counter()
    try:
        if job["seed"] is not None:
            _set_seed(job["seed"])
        for name, spec in job["inputs"].items():
            namespace[name] = decode(spec)
        if job["mode"] == "code":
            _run_code(job["code"], namespace, job["display_last"])
        else:
            call = job["call"]
            function = decode(call["function"])
            args = [decode(spec) for spec in call["args"]]
            kwargs = {key: decode(spec) for key, spec in call["kwargs"].items()}
            namespace["__value__"] = function(*args, **kwargs)
        child_display.send_open_figures()
    except BaseException as exc:  # noqa: BLE001 - the user's exception, whatever it is, goes to the kernel
        failure = {
            "kind": "error",
            "exc_type": type(exc).__name__,
            "exc_message": str(exc),
            "traceback": _format_user_traceback(exc),
        }
    run_s = time.perf_counter() - started
    sys.stdout.flush()
    sys.stderr.flush()
    sampler.stop()
    outputs, not_returned = {}, {}
    if failure is None:
        if job["mode"] == "function":
            try:
                value_spec = encode("value", namespace["__value__"], job["directory"])
            except ShippingError as exc:
                not_returned["value"] = exc.reason
        else:
            wanted = job["outputs"]
            for name in wanted:
                if name not in namespace:
                    if name in job["required_outputs"]:
                        not_returned[name] = "the code did not assign it"
                    continue
                try:
                    outputs[name] = encode(name, namespace[name], job["directory"])
                except ShippingError as exc:
                    not_returned[name] = exc.reason
    final = _memory_sample()
    final["rss_peak_bytes"] = _read_hwm_bytes()
    message = failure or {"kind": "done", "outputs": outputs, "value": value_spec}
    message.update({"not_returned": not_returned, "run_s": run_s, "final_sample": final})
    _send(conn, message)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kerasmagic.isolation.worker")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--watch-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("--warmup-log", required=True)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid, args.watch_fd)
    conn = Connection(args.channel_fd)
    modules = [m for m in args.preload.split(",") if m]
    import_s = _preload(modules, args.warmup_log)
    from kerasmagic.probes.process import rss_bytes

    _send(conn, {"kind": "ready", "pid": os.getpid(), "import_s": import_s, "rss_bytes": rss_bytes()})
    try:
        job = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        os._exit(0)  # the pool closed us while idle
    if job.get("kind") == "job":
        _run_job(conn, job)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: skip interpreter teardown (TF's can take seconds); the OS takes everything back.
    os._exit(0)


if __name__ == "__main__":
    main()

"""Isolation tests run real worker processes; one pool serves the whole session."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def worker_children() -> list:
    import psutil

    # Forked job processes carry their template's command line.
    return [p for p in psutil.Process().children(recursive=True)
            if any(f"kerasmagic.isolation.{kind}" in " ".join(_cmdline(p)) for kind in ("child.worker", "template"))]


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except Exception:  # noqa: BLE001 - a process that just exited has no command line
        return []


@pytest.fixture
def list_workers():
    """The function listing this process's live workers (conftest modules are not importable by name)."""
    return worker_children


@pytest.fixture(scope="session", autouse=True)
def isolation_pool():
    """One pool for every test; at the end no worker may be left alive."""
    from kerasmagic.isolation import configure_pool, shutdown_default_pool

    configure_pool(size=2, idle_timeout=300)
    yield
    shutdown_default_pool()
    left = worker_children()
    assert not left, f"workers left running: {[p.pid for p in left]}"


@pytest.fixture
def isolated_shell(ipython):
    """The session's InteractiveShell with an empty user namespace."""
    ipython.reset(new_session=False)
    yield ipython
    ipython.reset(new_session=False)


class RecordingStream:
    """Stands in for sys.stdout: remembers each chunk and when it arrived."""

    def __init__(self) -> None:
        self.chunks: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        import time

        self.chunks.append((time.time(), text))
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.chunks)


@pytest.fixture
def recording_stdout():
    """A context manager factory; see :func:`_recording_stdout`."""
    return _recording_stdout


@contextlib.contextmanager
def _recording_stdout():
    """Swap sys.stdout inside the test body (pytest's capture resets it between phases)."""
    stream, saved = RecordingStream(), sys.stdout
    sys.stdout = stream
    try:
        yield stream
    finally:
        sys.stdout = saved


@pytest.fixture
def dying_pool():
    """A real pool whose job processes are really SIGKILLed between "ready" and the job."""
    import os
    import signal
    import threading
    import time

    from kerasmagic.isolation.pool import WorkerPool

    class _PoolWhoseWorkerDiesAfterReady(WorkerPool):
        """A real pool whose job process is really SIGKILLed between being ready and taking the job
        (the window in which a machine's OOM killer or a stray `kill` can hit it)."""

        def launch(self, spec, directory, fixed=()):
            from kerasmagic.isolation.pool import Launch

            inner = super().launch(spec, directory, fixed)
            outer = Launch(state=inner.state)

            def kill_once_ready():
                worker = inner.future.result(timeout=120)
                assert worker.conn.poll(120)  # its "ready" message is there, not yet read
                os.kill(worker.pid, signal.SIGKILL)
                while worker.poll() is None:
                    time.sleep(0.01)
                outer.future.set_result(worker)

            threading.Thread(target=kill_once_ready, name="test-killer").start()
            return outer

    return _PoolWhoseWorkerDiesAfterReady

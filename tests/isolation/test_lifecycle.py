"""No worker outlives the kernel: not after shutdown, not after the parent is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from process_checks import gone

from kerasmagic.isolation import configure_pool, run_isolated, shutdown_default_pool
from kerasmagic.isolation.pool import WorkerPool, default_pool, worker_spec

pytestmark = pytest.mark.isolation

_PARENT = textwrap.dedent("""
    import sys, time
    from kerasmagic.isolation.pool import default_pool, worker_spec
    pool = default_pool()
    pool.prestart(worker_spec())
    assert pool.wait_until_warm(timeout=120)
    print(pool.pids()[0], flush=True)
    time.sleep(600)
""")


def test_worker_dies_when_its_parent_is_killed():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, cwd=repo)
    try:
        worker_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(worker_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.time() + 5
        while psutil.pid_exists(worker_pid) and time.time() < deadline:
            time.sleep(0.05)
        assert not psutil.pid_exists(worker_pid), "the worker outlived its parent"
    finally:
        parent.kill()
        parent.stdout.close()


def test_shutdown_leaves_no_worker(list_workers):
    run_isolated("x = 1")
    assert default_pool().pids()  # the replacement waits
    shutdown_default_pool()
    time.sleep(0.1)
    assert list_workers() == []


def test_a_pool_that_shut_down_leaves_no_reader_thread(monkeypatch):
    """A template's reader thread wakes when the handle closes its channel; on a loaded
    machine it may run only later. The pool's shutdown waits for it: here it is held for
    0.5 s, as a busy scheduler would, and must still be gone when shutdown() returns."""
    import threading

    from kerasmagic.isolation.template import TemplateHandle

    ended = TemplateHandle._ended

    def ended_late(self):
        time.sleep(0.5)
        ended(self)

    monkeypatch.setattr(TemplateHandle, "_ended", ended_late)
    pool = WorkerPool(size=1)
    try:
        pool.prestart(worker_spec())
        assert pool.wait_until_warm(timeout=120)
        names = {f"kerasmagic-isolation-template-{pid}" for pid in pool.template_pids()}
        assert names
    finally:
        pool.shutdown()
    # This pool's readers only: the session's own pool may be up, with a reader of its own.
    assert [t.name for t in threading.enumerate() if t.name in names] == []


def test_idle_timeout_stops_the_pool():
    pool = WorkerPool(size=1, idle_timeout=3)
    try:
        pool.prestart(worker_spec())
        assert pool.wait_until_warm(timeout=60)
        pid = pool.pids()[0]
        deadline = time.time() + 10
        while pool.pids() and time.time() < deadline:
            time.sleep(0.1)
        # Killed, then forgotten: it may still be a zombie, or a moment from reaped, when pids()
        # no longer lists it (psutil.pid_exists said True in CI under load).
        assert pool.pids() == [] and gone(pid), pid
    finally:
        pool.shutdown()


def test_fork_off_runs_every_job_in_a_fresh_interpreter():
    configure_pool(fork=False)
    try:
        shutdown_default_pool()
        result = run_isolated("import os\npid = os.getpid()")
        assert result.worker_state == "fresh" and result.origin == "fresh"
        assert "forking is off" in result.worker_note and result.pool_idle_workers == 0
        assert result.outputs["pid"] == result.worker_pid
        assert default_pool().pids() == []  # no template, and the job's process is gone
    finally:
        configure_pool(fork=True)
        shutdown_default_pool()


def test_prestart_pool_makes_the_first_job_warm():
    from kerasmagic.isolation import prestart_pool

    shutdown_default_pool()
    prestart_pool()
    assert default_pool().wait_until_warm(timeout=120)
    result = run_isolated("x = 1", quiet=True)
    assert result.worker_state == "warm", result.worker_state
    assert result.origin == "forked" and result.worker_pid not in default_pool().template_pids()


# --- what a job starts in a session of its own (issue 23, fault 6) -------------------------------


def start_escapee(then: str) -> int:
    """Start a sleeper in a new session (out of the job's process group), then end as asked."""
    import os
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    if then == "sigkill":
        print(child.pid, flush=True)
        time.sleep(0.5)  # the kernel reads the pid from the output before the worker dies
        os.kill(os.getpid(), 9)
    return child.pid


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ended_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def test_a_process_a_job_started_in_its_own_session_ends_with_the_job():
    pid = run_isolated(start_escapee, args=("return",)).value
    try:
        assert _ended_within(pid, 10), f"process {pid} that the job started outlived it"
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_and_with_a_job_that_was_killed():
    from kerasmagic.isolation import IsolatedCrash

    with pytest.raises(IsolatedCrash) as caught:
        run_isolated(start_escapee, args=("sigkill",), quiet=True)
    pid = int(caught.value.last_output.split()[0])
    try:
        assert _ended_within(pid, 10), f"process {pid} that the killed job started outlived it"
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)

"""Defects a review found in the fork-based isolation, each reproduced as it was found."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import psutil
import pytest

from kerasmagic.isolation import IsolatedCrash, IsolatedTimeout, IsolationWarning, isolated_map, run_isolated
from kerasmagic.isolation.pool import WorkerPool, default_pool

pytestmark = pytest.mark.isolation


def fail_on_two(k):
    import time

    if k == 2:
        raise ValueError("two")
    time.sleep(0.3)
    return k


def _until(condition, within: float = 15.0) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _our_job_folders() -> list[str]:
    pid = os.getpid()
    return glob.glob(f"/dev/shm/kerasmagic-isolated-{pid}-*") + \
        glob.glob(os.path.join(tempfile.gettempdir(), f"kerasmagic-isolated-{pid}-*"))


def test_jobs_abandoned_by_a_failing_map_leave_the_pools_books():
    for _ in range(3):
        with pytest.raises(Exception, match="two"):
            isolated_map(fail_on_two, range(8), workers=2, progress=False)
    # A launch abandoned while its fork reply was in flight used to stay "running" forever.
    assert _until(lambda: default_pool().running() == 0), default_pool().running()
    assert _our_job_folders() == []


def test_warnings_as_errors_leave_nothing_running(list_workers):
    with warnings.catch_warnings():
        warnings.simplefilter("error", IsolationWarning)
        with pytest.raises(IsolationWarning):
            run_isolated("gen = (i for i in range(3))\nok = 1", quiet=True)
    assert default_pool().running() == 0
    assert {p.pid for p in list_workers()} <= set(default_pool().template_pids())
    assert _our_job_folders() == []


def test_a_job_dying_after_ready_does_not_break_the_next_job(dying_pool):
    from kerasmagic.isolation.job import Job
    from kerasmagic.isolation.local import LocalBackend
    from kerasmagic.isolation.pool import worker_spec
    from kerasmagic.isolation.result import IsolatedResult
    from kerasmagic.isolation.runner import JobRun, drive
    from kerasmagic.isolation.shipping import make_job_directory

    pool = dying_pool(size=2)
    try:
        runs = [JobRun(Job("code", make_job_directory(), code="x = 1", outputs=["x"]), worker_spec(),
                       IsolatedResult(f"job {i}")) for i in range(3)]
        drive(runs, LocalBackend(pool), at_once=2, stop_on_error=False)  # used to raise KeyError: fd already registered
    finally:
        pool.shutdown()
    assert [type(run.error) for run in runs] == [IsolatedCrash] * 3
    assert all("before it received the job" in str(run.error) for run in runs)


def test_a_failure_inside_the_launch_is_an_error_not_a_hang(monkeypatch):
    from kerasmagic.isolation.template import TemplateHandle

    def no_descriptors(self, spec, directory, *args, **kwargs):  # the fork's signature, spares' warm/env too
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(TemplateHandle, "fork", no_descriptors)
    started = time.perf_counter()
    with pytest.raises(IsolatedCrash, match="Too many open files"):
        run_isolated("x = 1", quiet=True, timeout=60)
    assert time.perf_counter() - started < 30  # not the timeout: the launch failed at once


def test_a_failed_fork_runs_that_job_fresh_and_spares_the_others(tmp_path):
    site = tmp_path / "fork_fails_once"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import os
        if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1":  # set for templates only
            real_fork, calls = os.fork, []
            def fork():
                calls.append(1)
                if len(calls) == 2:
                    raise OSError(12, "Cannot allocate memory")
                return real_fork()
            os.fork = fork
    """))
    result = isolated_map(fail_on_two, [0, 1], workers=2, env={"PYTHONPATH": str(site)}, on_error="collect",
                          progress=False, timeout=120)
    assert list(result) == [0, 1]
    origins = sorted((job.origin, job.worker_note) for job in result.jobs)
    assert origins[0] == ("forked", "")
    assert origins[1][0] == "fresh" and "fork() failed" in origins[1][1] and "Cannot allocate" in origins[1][1]


def test_a_slow_template_times_out_every_job_waiting_for_it(tmp_path):
    site = tmp_path / "slow_start"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import time\ntime.sleep(6)\n")
    result = isolated_map(fail_on_two, [0, 1], workers=2, env={"PYTHONPATH": str(site)}, timeout=2,
                          on_error="collect", progress=False)
    assert [job.status for job in result.jobs] == ["timeout", "timeout"]  # not one "could not import"
    assert all(isinstance(value, IsolatedTimeout) for value in result)


def test_the_sweep_spares_a_live_kernel_whose_pid_is_not_ours():
    from kerasmagic.isolation.pool import sweep_orphans

    # A kernel in another container (another PID namespace) sharing /dev/shm: its pid does
    # not exist here, but it holds its owner lock.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{dead.pid}-")
    lock = os.path.join(tempfile.gettempdir(), f"kerasmagic-kernel-{dead.pid}-owner.lock")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({lock!r}, os.O_CREAT | os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert folder not in sweep_orphans() and os.path.isdir(folder)
        holder.kill()
        holder.wait()
        removed = sweep_orphans()  # the lock went with its kernel
        assert folder in removed and not os.path.exists(folder) and not os.path.exists(lock)
    finally:
        holder.kill()
        holder.stdout.close()
        if os.path.isdir(folder):
            os.rmdir(folder)


def test_finished_jobs_leave_no_zombie_in_the_template():
    for _ in range(3):
        run_isolated("x = 1", quiet=True)
    for pid in default_pool().template_pids():
        assert _until(lambda pid=pid: not [c for c in psutil.Process(pid).children()
                                   if c.status() == psutil.STATUS_ZOMBIE], within=5)


def test_a_new_pool_does_not_sweep_its_own_kernels_files():
    folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{os.getpid()}-")
    try:
        WorkerPool(size=1).shutdown()
        assert os.path.isdir(folder)
    finally:
        os.rmdir(folder)

"""A kernel that dies leaves nothing in /dev/shm or the temporary folder (issue 23, fault 5): a
dead kernel that is still a zombie counts as gone for the sweep of a new template."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import time
import uuid

import psutil
import pytest

from kerasmagic.isolation.leftovers import our_folders

pytestmark = pytest.mark.isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _files_of(pid: int) -> list[str]:
    """Every file or folder of ours named after kernel ``pid``, in every folder we use."""
    return sorted(path for folder in our_folders() for path in glob.glob(os.path.join(folder, f"kerasmagic-*-{pid}-*")))


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_dead_kernel_that_is_still_a_zombie_counts_as_gone_for_a_new_templates_sweep():
    # A kernel SIGKILLed under a Jupyter server stays a zombie until the server collects it; its
    # template removed its owner locks, so only the pid could tell, and a zombie's pid exists.
    from kerasmagic.isolation.pool import default_pool, worker_spec

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert _gone(zombie.pid, within=20)
        assert psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE
        folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{zombie.pid}-", dir=our_folders()[-1])
        fd, log = tempfile.mkstemp(prefix=f"kerasmagic-template-{zombie.pid}-", suffix=".log")
        os.close(fd)
        pool = default_pool()
        before = set(pool.template_pids())
        spec = worker_spec(env={"KERASMAGIC_SWEEP_TEST": uuid.uuid4().hex})  # a new template starts
        pool.prestart(spec)
        assert pool.wait_until_warm(spec, timeout=120)
        assert set(pool.template_pids()) - before, "no new template was started"
        assert psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE  # still: its number is not reused
        assert [p for p in (folder, log) if os.path.exists(p)] == [], "a zombie kernel's files outlived the sweep"
    finally:
        zombie.wait(10)
        for path in _files_of(zombie.pid):
            if os.path.isdir(path):
                os.rmdir(path)
            else:
                os.unlink(path)

"""A kernel that dies leaves nothing in /dev/shm or the temporary folder (issue 23, fault 5): not
in the middle of an ``isolated_map`` with large items, not while its template still imports, and
a dead kernel that is still a zombie counts as gone for the sweep of a new template."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import psutil
import pytest
from process_checks import gone

from kerasmagic.isolation.leftovers import our_folders

pytestmark = pytest.mark.isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _files_of(pid: int) -> list[str]:
    """Every file or folder of ours named after kernel ``pid``, in every folder we use."""
    return sorted(path for folder in our_folders() for path in glob.glob(os.path.join(folder, f"kerasmagic-*-{pid}-*")))


def _left_after(paths: list[str], within: float) -> list[str]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(os.path.exists(p) for p in paths):
        time.sleep(0.05)
    return [p for p in paths if os.path.exists(p)]


def _driver(script: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO, env={**os.environ, **env})


def _read_until(process: subprocess.Popen, marker: str, within: float = 120) -> str:
    """The driver's first line with ``marker``; fails after ``within`` seconds, even when the
    driver hangs without printing (a blocking read would wait for it forever)."""
    import selectors

    seen = []
    deadline = time.monotonic() + within
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line)
            if marker in line:
                return line
    pytest.fail(f"the driver never printed {marker!r} in {within:.0f} s: {''.join(seen)[-3000:]}")


_MAP_DRIVER = textwrap.dedent("""
    import numpy as np
    from kerasmagic import isolated_map
    from kerasmagic.isolation import configure_pool

    configure_pool(fork=FORK)
    WEIGHTS = np.ones(5 << 20, dtype=np.uint8)   # the function's global: 5 MiB in the shared folder

    def fold(item):
        import time
        print("fold started", int(WEIGHTS.sum()) + len(item), flush=True)
        time.sleep(300)

    isolated_map(fold, [np.full(25 << 20, k, dtype=np.uint8) for k in range(4)], workers=1, progress=False)
""")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_a_kernel_killed_mid_map_leaves_neither_the_shared_folder_nor_items_not_started(fork):
    # Issue 23, fault 5: the map makes the shared folder and every item's folder up front, 105 MiB
    # here; the template (or the fresh worker) removed only its own job's, and the dead kernel
    # stayed a zombie, so no sweep could tell it was gone.
    kernel = _driver(f"FORK = {fork}\n" + _MAP_DRIVER)
    try:
        _read_until(kernel, "fold started")
        mine = _files_of(kernel.pid)
        folders = [p for p in mine if "-isolated-" in p]
        assert len(folders) == 5, f"expected the shared folder and 4 items' folders: {mine}"
        size = sum(os.path.getsize(os.path.join(root, name))
                   for folder in folders for root, _, names in os.walk(folder) for name in names)
        assert size >= 100 << 20, f"only {size} bytes in the map's folders: {mine}"
        ours = [p.pid for p in psutil.Process(kernel.pid).children(recursive=True)]
        kernel.send_signal(signal.SIGKILL)  # not reaped until the end: a zombie, as under a Jupyter server
        for pid in ours:
            assert gone(pid, within=20), f"pid {pid} outlived the killed kernel"
        started = time.monotonic()
        left = _left_after(mine, within=10)
        assert left == [], f"left behind by the killed kernel: {left}"
        assert psutil.Process(kernel.pid).status() == psutil.STATUS_ZOMBIE
        print(f"all gone {time.monotonic() - started:.2f} s after its processes")
    finally:
        kernel.kill()
        kernel.wait(10)
        kernel.stdout.close()


_SLOW_IMPORT = """
import os, time
with open(os.environ["KERASMAGIC_TEST_IMPORTING"], "w") as marker:
    marker.write(str(os.getpid()))
time.sleep(300)
"""


def test_a_kernel_killed_while_its_template_imports_leaves_no_folder_lock_or_log(tmp_path):
    # A kill during a cold start: the template was ended by SIGTERM's default action, which left
    # the job's folder, the kernel's owner locks and the template's log for a later template.
    module = f"kerasmagic_slow_import_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(_SLOW_IMPORT)
    marker = tmp_path / "importing"
    kernel = _driver(textwrap.dedent(f"""
        from kerasmagic.isolation import run_isolated
        print("starting", flush=True)
        run_isolated("x = 1", preload=[{module!r}])
    """), PYTHONPATH=os.pathsep.join([str(tmp_path), REPO]), KERASMAGIC_TEST_IMPORTING=str(marker))
    try:
        _read_until(kernel, "starting")
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        template = int(marker.read_text())
        mine = _files_of(kernel.pid)
        kinds = {os.path.basename(p).split("-")[1] for p in mine}
        assert {"isolated", "kernel", "template"} <= kinds, mine
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(10)
        assert gone(template, within=20), "the template outlived its kernel"
        left = _left_after(mine, within=10)
        assert left == [], f"left behind by a kernel killed during a cold start: {left}"
    finally:
        kernel.kill()
        kernel.wait(10)
        kernel.stdout.close()


def test_a_dead_kernel_that_is_still_a_zombie_counts_as_gone_for_a_new_templates_sweep():
    # A kernel SIGKILLed under a Jupyter server stays a zombie until the server collects it; its
    # template removed its owner locks, so only the pid could tell, and a zombie's pid exists.
    from kerasmagic.isolation.pool import WorkerPool, worker_spec

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    pool = None
    try:
        assert gone(zombie.pid, within=20)
        assert psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE
        folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{zombie.pid}-", dir=our_folders()[-1])
        fd, log = tempfile.mkstemp(prefix=f"kerasmagic-template-{zombie.pid}-", suffix=".log")
        os.close(fd)
        # A pool of its own (it sweeps when made, its template when it starts): the session's
        # pool would retire its template for this spec, and later tests would pay a cold start.
        pool = WorkerPool(size=1)
        spec = worker_spec(env={"KERASMAGIC_SWEEP_TEST": uuid.uuid4().hex})
        pool.prestart(spec)
        assert pool.wait_until_warm(spec, timeout=120)
        assert pool.template_pids(), "no template was started"
        assert psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE  # still: its number is not reused
        assert [p for p in (folder, log) if os.path.exists(p)] == [], "a zombie kernel's files outlived the sweep"
    finally:
        if pool is not None:
            pool.shutdown()
        zombie.wait(10)
        for path in _files_of(zombie.pid):
            if os.path.isdir(path):
                os.rmdir(path)
            else:
                os.unlink(path)


def test_a_stray_sigterm_to_a_template_leaves_its_live_kernels_files_alone():
    # The template ends on any SIGTERM (the death signal is one); it removed the live kernel's
    # owner locks then, and must never remove the files of a kernel that is still running.
    from kerasmagic.isolation.leftovers import owner_lock_path
    from kerasmagic.isolation.pool import WorkerPool, worker_spec
    from kerasmagic.isolation.shipping import make_job_directory

    pool = WorkerPool(size=1)  # its own: the session's would retire its template for this spec
    spec = worker_spec(env={"KERASMAGIC_SIGTERM_TEST": uuid.uuid4().hex})
    pool.prestart(spec)
    assert pool.wait_until_warm(spec, timeout=120)
    (template,) = pool.template_pids()
    folder = make_job_directory()
    locks = [owner_lock_path(where, os.getpid()) for where in our_folders()]
    try:
        assert all(os.path.exists(lock) for lock in locks)
        os.kill(template, signal.SIGTERM)
        assert gone(template, within=20)
        assert os.path.isdir(folder), "a live kernel's job folder was removed"
        assert [lock for lock in locks if not os.path.exists(lock)] == [], "a live kernel's owner lock was removed"
    finally:
        pool.shutdown()
        os.rmdir(folder)


_NAMESAKE = textwrap.dedent("""
    import os, sys, time
    os.getpid = lambda: PID   # a kernel with this number in another PID namespace
    from kerasmagic.isolation.leftovers import hold_owner_lock
    hold_owner_lock()
    print("holding", flush=True)
    time.sleep(300)
""")


def test_a_dead_kernels_files_stay_while_a_namesake_in_another_namespace_lives():
    # Containers that share /dev/shm often start their kernels with the same small pid. Both
    # hold the number's owner lock; when one dies, its files must not go while the other lives
    # (it lost the race for an exclusive lock before, held none, and lost its files).
    from kerasmagic.isolation.leftovers import remove_kernel_files

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)  # a number no process here has now: the namesakes borrow it
    number = dead.pid
    namesakes = [_driver(_NAMESAKE.replace("PID", str(number))) for _ in range(2)]
    folder = None
    try:
        for namesake in namesakes:
            _read_until(namesake, "holding", within=60)
        folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{number}-", dir=our_folders()[-1])
        namesakes[0].kill()
        namesakes[0].wait(10)
        assert remove_kernel_files(number, our_folders()) == []
        assert os.path.isdir(folder), "a live namesake's job folder was removed"
        namesakes[1].kill()
        namesakes[1].wait(10)
        assert folder in remove_kernel_files(number, our_folders())
        assert _files_of(number) == []
    finally:
        for namesake in namesakes:
            namesake.kill()
            namesake.wait(10)
            namesake.stdout.close()
        if folder is not None and os.path.isdir(folder):
            os.rmdir(folder)
        for path in _files_of(number):
            os.unlink(path)

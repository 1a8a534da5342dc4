"""The death watcher's evidence from the kernel log: only a kill line written while the process
lived can name it.

CI's README-outputs run once told a kernel killed with SIGKILL between cells that the OOM killer
had killed it "at 1.03 GiB of a 256 MiB limit": the kernel log still held the line from an
earlier test whose process had had the same pid (a 2-core machine wraps a 32768-pid space in a
CI run). These tests OOM-kill a real process in a real memory cgroup and check that a reader
opened before the kill names it and one opened, or marked, after it does not: that is the pid
reuse, seen from the reader's side.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from kerasmagic import death_watch
from kerasmagic.isolation import job_memory

pytestmark = pytest.mark.unit

#: A process that grows until the OOM killer of the cgroup it moves itself into kills it.
GROW_IN = """\
import sys
with open(sys.argv[1] + "/cgroup.procs", "w") as procs:
    procs.write("0")
blocks = []
while True:
    block = bytearray(16 * 2**20)
    block[::4096] = b"y" * len(block[::4096])
    blocks.append(block)
"""


def _log_unreadable() -> str | None:
    """Why the kernel log cannot be read here, or None."""
    if not os.access("/dev/kmsg", os.R_OK):
        return "the kernel log cannot be read here (it needs root or CAP_SYSLOG; CI runs as root)"
    if not death_watch._in_the_hosts_pid_namespace():
        return "a container of its own pid namespace: the log names the host's pids, and is not read"
    return None


def _swap_on() -> bool:
    with open("/proc/meminfo") as meminfo:
        return any(line.startswith("SwapTotal:") and int(line.split()[1]) > 0 for line in meminfo)


@pytest.fixture
def oom_killed_pid():
    """The pid of a process the OOM killer has just killed, with a kernel log reader opened
    before it started: (pid, that reader)."""
    why = _log_unreadable()
    if why is not None:
        pytest.skip(why)
    if _swap_on():
        pytest.skip("swap is on: a cgroup at its limit pages out instead of calling its OOM killer (CI has none)")
    try:
        folder, _ = job_memory._make_cgroup(64 * 2**20)
    except (OSError, job_memory._NoCgroup) as exc:
        pytest.skip(f"no memory cgroup can be made here (it needs root and a memory controller): {exc}")
    before = death_watch.KernelLog()
    try:
        child = subprocess.Popen([sys.executable, "-c", GROW_IN, folder])
        assert child.wait(120) == -9, "the OOM killer did not kill the growing process"
    finally:
        job_memory._remove(folder, within_s=10)
    yield child.pid, before
    before.close()


def _named(log: death_watch.KernelLog, pid: int, since: int = 0) -> str | None:
    """The log's line for ``pid``; the kernel may write it a moment after the process is reaped."""
    deadline = time.monotonic() + 5
    while (line := log.kill_line(pid, since)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return line


def test_a_reader_opened_before_the_kill_names_the_process(oom_killed_pid):
    pid, before = oom_killed_pid
    line = _named(before, pid)
    assert line is not None and f"Killed process {pid} " in line, line


def test_a_reader_opened_after_the_kill_never_takes_it_for_a_later_process_with_that_pid(oom_killed_pid):
    pid, before = oom_killed_pid
    assert _named(before, pid) is not None  # the line is in the log
    after = death_watch.KernelLog()  # a watcher started for the pid's next owner
    try:
        assert after.readable
        assert after.kill_line(pid) is None
    finally:
        after.close()
    # A job forked after a mark: the same line, older than the mark, is not about it.
    mark = before.mark()
    assert before.kill_line(pid, since=mark) is None
    assert before.kill_line(pid, since=0) is not None


def test_a_forked_child_never_reads_its_parents_log_position():
    # A fork shares the open file's position: a child that read would take lines from the parent.
    why = _log_unreadable()
    if why is not None or not os.access("/dev/kmsg", os.W_OK):
        pytest.skip(why or "writing a line to the kernel log needs root (CI runs as root)")
    log = death_watch.KernelLog()
    pid = os.fork()
    if pid == 0:
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write("kerasmagic test: a line for the parent to read\n")
        os._exit(0 if log.mark() == 0 else 1)  # 0: the child read nothing
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0, "the forked child read the parent's kernel log"
        assert log.mark() > 0, "the parent lost the line the child wrote"
    finally:
        log.close()


def test_in_a_pid_namespace_of_its_own_the_log_is_not_read():
    # A privileged container can read /dev/kmsg, whose lines name the host's pids: a host
    # process's kill could carry the number of a kernel in the container.
    why = _log_unreadable()
    if why is not None:
        pytest.skip(why)
    code = "from kerasmagic.death_watch import KernelLog; print(KernelLog().readable)"
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here (util-linux)")
    run = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if run.returncode != 0 and run.stderr.startswith("unshare:"):
        pytest.skip(f"a pid namespace cannot be made here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"
    assert death_watch.KernelLog().readable  # and where pids are the host's, it is

"""A checkpointed isolated_map survives its kernel: a real ipykernel is SIGKILLed in the middle of a
6-item map, and a new kernel resumes it; two kernels on one checkpoint are kept apart by its lock.

The function is defined in the notebook (as a user would), so its fingerprint must match across
two kernels whose cell files differ (they carry each kernel's pid).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import psutil
import pytest

from kerasmagic.isolation.checkpoint import CheckpointError, _parse

from kernel_session import KernelSession

pytestmark = [pytest.mark.kernel, pytest.mark.isolation]

SETUP = """
import os, time
from kerasmagic import isolated_map

def fold(k):
    import os, time
    open(os.path.join(RUNS, f"ran-{k}-{os.getpid()}"), "w").close()
    time.sleep(SECONDS)
    return {"fold": k, "score": k / 10}
"""


def _setup(runs, seconds: float) -> str:
    return SETUP + f"RUNS, SECONDS = {str(runs)!r}, {seconds!r}\n"

MAP = "result = isolated_map(fold, range(6), workers=1, checkpoint={path!r}, progress=False)\n"


def _pid(session: KernelSession) -> int:
    return session.manager.provisioner.process.pid


def _records(path) -> int:
    try:
        return len(_parse(str(path), path.read_bytes())[1])
    except (OSError, CheckpointError):
        return 0


def _runs(folder) -> dict[int, int]:
    counts: dict[int, int] = {}
    for name in os.listdir(folder):
        k = int(name.split("-")[1])
        counts[k] = counts.get(k, 0) + 1
    return counts


def _kill_tree(pid: int) -> list[psutil.Process]:
    """SIGKILL the kernel alone (what the OOM killer or a crash does); return its descendants."""
    descendants = psutil.Process(pid).children(recursive=True)
    os.kill(pid, signal.SIGKILL)
    return descendants


def _end_leftovers(processes: list[psutil.Process]) -> None:
    """The dead kernel's workers end by themselves; any still alive after a grace period is ended here."""
    gone, alive = psutil.wait_procs(processes, timeout=15)
    for process in alive:
        process.kill()
    psutil.wait_procs(alive, timeout=5)


def test_a_map_killed_with_its_kernel_resumes_in_a_new_kernel(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    first = KernelSession(cwd=str(tmp_path))
    leftovers: list[psutil.Process] = []
    try:
        first.execute(_setup(runs, 0.6), timeout=60)
        first.client.execute(MAP.format(path=str(path)))  # not waited for: the kernel dies in it
        deadline = time.monotonic() + 120
        while _records(path) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _records(path) >= 3, "the map did not finish 3 items in 120 s"
        leftovers = _kill_tree(_pid(first))
    finally:
        first.shutdown()  # the manager's cleanup (ports, connection file); the kernel is dead or ends now
        _end_leftovers(leftovers)
    done = _records(path)
    assert 3 <= done < 6, f"{done} items were recorded before the kill"
    ran_before = _runs(runs)

    second = KernelSession(cwd=str(tmp_path))
    try:
        second.execute(_setup(runs, 0.6), timeout=60)  # the same globals: else a changed function
        out = second.execute("import json\n" + MAP.format(path=str(path)) + "print(json.dumps(list(result)))\n"
                             "print(json.dumps(result.restored))", timeout=120)
    finally:
        second.shutdown()
    lines = out.strip().splitlines()
    assert f"{done} of 6 done, resuming at item {done}" in out, out
    assert json.loads(lines[-2]) == [{"fold": k, "score": k / 10} for k in range(6)]
    assert json.loads(lines[-1]) == [k < done for k in range(6)]
    ran_after = _runs(runs)
    for k in range(done):  # what was recorded did not run again
        assert ran_after[k] == ran_before[k] == 1, (k, ran_before, ran_after)
    for k in range(done, 6):
        assert ran_after[k] == ran_before.get(k, 0) + 1
    assert _records(path) == 6


def test_a_second_kernel_on_a_running_checkpoint_is_told_who_holds_it(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = tmp_path / "cv.kmrun"
    holder, second = KernelSession(cwd=str(tmp_path)), KernelSession(cwd=str(tmp_path))
    try:
        holder.execute(_setup(runs, 1.0), timeout=60)
        second.execute(_setup(runs, 1.0), timeout=60)
        msg_id = holder.client.execute(MAP.format(path=str(path)))
        deadline = time.monotonic() + 60
        while _records(path) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        shown = second.outputs(MAP.format(path=str(path)), timeout=60)
        errors = [m["content"] for m in shown if m["msg_type"] == "error"]
        assert errors and errors[0]["ename"] == "CheckpointError", shown
        message = "\n".join(errors[0]["traceback"])
        assert f"is being run by another process: pid {_pid(holder)} on host {socket.gethostname()}, since " \
            in message, message
        assert "UTC" in message and "wait until that one ends" in message
        assert "kerasmagic/isolation" not in message  # one line for the user, not our frames
        # The holder goes on undisturbed and finishes; then the checkpoint is free again.
        reply = holder.client.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = holder.client.get_shell_msg(timeout=120)
        assert reply["content"]["status"] == "ok" and _records(path) == 6
        assert not (tmp_path / "cv.kmrun.lock").exists()
        out = second.execute(MAP.format(path=str(path)) + "print(result.restored)", timeout=60)
        assert "6 of 6 done" in out and "[True, True, True, True, True, True]" in out
    finally:
        holder.shutdown()
        second.shutdown()

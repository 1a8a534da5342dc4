"""isolated_map(retries=...): an item whose process died runs again in a fresh fork, and each
attempt says why it ended (a real segfault, a real SIGKILL, a real cgroup's OOM killer)."""

from __future__ import annotations

import os

import pytest

import kerasmagic.isolation.job_memory as job_memory
from kerasmagic.isolation import IsolatedCellError, IsolatedCrash, IsolatedOutOfMemory, IsolatedTimeout, isolated_map
from kerasmagic.isolation.retries import death_cause

pytestmark = pytest.mark.isolation


def segfault_once(item):
    """Segfaults the first time it runs for ``value`` (a marker file remembers), then returns it."""
    import os
    import signal

    folder, value = item
    marker = os.path.join(folder, f"tried-{value}")
    if value == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        print("about to touch a freed pointer", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    return value * 10


def always_segfault(item):
    import os
    import signal

    print(f"attempt in pid {os.getpid()}", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)


def kill_myself(item):
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def raise_once(item):
    import os

    folder, value = item
    marker = os.path.join(folder, f"raised-{value}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError(f"flaky item {value}")
    return value


def sleep_long(item):
    import time

    time.sleep(30)


def allocate_once_too_much(item):
    """The first attempt allocates 2 GiB in one go (faster than any watch); the next returns at once."""
    import os

    folder, value = item
    marker = os.path.join(folder, "grew")
    if not os.path.exists(marker):
        open(marker, "w").close()
        block = bytearray(2048 * 2**20)
        block[::4096] = b"y" * len(block[::4096])
    return value


def test_an_item_that_segfaults_once_succeeds_on_its_retry(tmp_path):
    items = [(str(tmp_path), value) for value in range(3)]
    result = isolated_map(segfault_once, items, retries=1, workers=2, progress=False)
    assert list(result) == [0, 10, 20]
    assert [len(tries) for tries in result.attempts] == [1, 2, 1]
    first = result.attempts[1][0]
    assert first["status"] == "crash" and first["signal"] == "SIGSEGV"
    assert first["cause"].startswith("segmentation fault (signal 11, SIGSEGV): its last Python frame is "
                                     "segfault_once (test_map_retries.py:"), first["cause"]
    assert "about to touch a freed pointer" in first["output_tail"]
    assert "Fatal Python error: Segmentation fault" in first["output_tail"]  # the stack, in its output
    assert result.attempts[1][1]["status"] == "ok"
    frame = result.to_frame()
    assert list(frame["attempts"]) == [1, 2, 1] and list(frame["status"]) == ["ok"] * 3
    assert "attempt 2 of 2" in result.jobs[1].label  # what the sidebar's jobs list shows


def test_without_retries_the_crash_is_reported_in_words(tmp_path):
    items = [(str(tmp_path), value) for value in range(3)]
    with pytest.raises(IsolatedCrash) as info:
        isolated_map(segfault_once, items, progress=False)
    mapped = info.value.map_result
    assert mapped.attempts[1][0]["cause"].startswith("segmentation fault (signal 11, SIGSEGV)")
    assert "crash: crash" not in str(mapped)
    assert "crash: segmentation fault (signal 11, SIGSEGV)" in str(mapped)


def test_an_item_that_fails_every_attempt_lists_each_attempts_cause():
    result = isolated_map(always_segfault, ["a"], retries=2, on_error="collect", progress=False)
    error = result[0]
    assert isinstance(error, IsolatedCrash)
    assert [t["attempt"] for t in error.attempts] == [1, 2, 3]
    assert "all 3 attempts failed" in str(error)
    assert str(error).count("segmentation fault (signal 11, SIGSEGV)") >= 3
    pids = {t["worker_pid"] for t in result.attempts[0]}
    assert len(pids) == 3 and None not in pids  # each attempt ran in a fresh process
    assert "attempts: 1. segmentation fault" in str(result)


def test_a_sigkill_without_a_cgroup_count_says_what_it_can_and_cannot_tell():
    result = isolated_map(kill_myself, [0], on_error="collect", progress=False)
    cause = result.attempts[0][0]["cause"]
    # Issue 33, item 9: "no memory cgroup counted an OOM kill" was said while this kernel's cgroup
    # counted two: only what is known about this process is said.
    assert cause.startswith("killed by signal 9 (SIGKILL): whether the out-of-memory killer did it is unknown"), cause
    assert "no memory cgroup counted" not in cause, cause


def test_a_python_exception_is_not_retried_unless_asked(tmp_path):
    items = [(str(tmp_path), 0)]
    result = isolated_map(raise_once, items, retries=3, on_error="collect", progress=False)
    assert isinstance(result[0], IsolatedCellError) and len(result.attempts[0]) == 1
    assert result.attempts[0][0]["cause"] == "raised ValueError: flaky item 0"
    # The marker is there now: a retry that is allowed for ValueError finds the item mended.
    (tmp_path / "raised-0").unlink()
    asked = isolated_map(raise_once, items, retries=1, retry_on=[ValueError], progress=False)
    assert list(asked) == [0] and len(asked.attempts[0]) == 2


def test_a_timeout_is_said_with_its_seconds_and_retried_only_when_asked():
    result = isolated_map(sleep_long, [0], timeout=1, retries=1, on_error="collect", progress=False)
    assert isinstance(result[0], IsolatedTimeout) and len(result.attempts[0]) == 1
    assert result.attempts[0][0]["cause"].startswith("timeout after 1 s")
    asked = isolated_map(sleep_long, [0], timeout=1, retries=1, retry_on="timeout", on_error="collect",
                         progress=False)
    assert [t["cause"][:15] for t in asked.attempts[0]] == ["timeout after 1"] * 2


def _can_make_cgroups() -> str | None:
    try:
        folder, _ = job_memory._make_cgroup(300 * 2**20)
    except (OSError, job_memory._NoCgroup) as exc:
        return str(exc)
    os.rmdir(folder)
    return None


def test_an_item_killed_by_its_cgroups_oom_killer_says_so_and_its_retry_succeeds(tmp_path, monkeypatch):
    why = _can_make_cgroups()
    if why is not None:
        pytest.skip(f"no memory cgroup can be made here (the test needs root and a writable memory controller): {why}")
    # The watch is made blind (as where /proc cannot be read): only the real cgroup's OOM killer acts.
    monkeypatch.setattr(job_memory, "_rss_of", lambda pid: None)
    result = isolated_map(allocate_once_too_much, [(str(tmp_path), 5)], memory_limit="300MiB", retries=1,
                          quiet=True, progress=False)
    assert list(result) == [5]
    first = result.attempts[0][0]
    assert first["status"] == "out_of_memory"
    assert first["cause"].startswith("killed by signal 9: the out-of-memory killer (cgroup oom_kill rose); "
                                     "out of memory at its 300 MiB limit"), first["cause"]
    assert result.attempts[0][1]["status"] == "ok"

    (tmp_path / "grew").unlink()
    with pytest.raises(IsolatedOutOfMemory) as info:
        isolated_map(allocate_once_too_much, [(str(tmp_path), 5)], memory_limit="300MiB", quiet=True,
                     progress=False)
    assert "the out-of-memory killer (cgroup oom_kill rose)" in info.value.map_result.attempts[0][0]["cause"]


# A kernel stand-in: a process in a 400 MiB cgroup whose isolated job, with no cgroup of its own,
# grows past it; the OOM killer of the kernel's cgroup takes the job (the largest process there).
IN_THE_KERNELS_CGROUP = """
import sys
with open(sys.argv[1] + "/cgroup.procs", "w") as procs:
    procs.write("0")
from kerasmagic.isolation import isolated_map
def grow(item):
    block = bytearray(1024 * 2**20)
    block[::4096] = b"y" * len(block[::4096])
    return item
result = isolated_map(grow, [0], on_error="collect", progress=False, quiet=True)
print(result.attempts[0][0]["cause"])
"""


def test_a_job_the_kernels_own_cgroup_oom_kills_is_told_from_evidence_about_the_job():
    # Issue 33, item 9: such a job was told "no memory cgroup counted an OOM kill" while the kernel's
    # cgroup counted it. Now the kernel log naming the job's pid says so, where it can be read.
    import subprocess
    import sys

    why = _can_make_cgroups()
    if why is not None:
        pytest.skip(f"no memory cgroup can be made here (the test needs root and a writable memory controller): {why}")
    folder, _ = job_memory._make_cgroup(400 * 2**20)
    try:
        run = subprocess.run([sys.executable, "-c", IN_THE_KERNELS_CGROUP, folder], capture_output=True, text=True,
                             timeout=180)
    finally:
        job_memory._remove(folder, within_s=10)
    cause = run.stdout.strip()
    assert run.returncode == 0, run.stderr[-2000:]
    if os.access("/dev/kmsg", os.R_OK):
        assert cause.startswith('killed by signal 9 (SIGKILL): the out-of-memory killer (the kernel log: "Memory '
                                'cgroup out of memory: Killed process'), cause
    else:
        assert cause.startswith("killed by signal 9 (SIGKILL): whether the out-of-memory killer did it is "
                                "unknown"), cause
    assert "no memory cgroup counted" not in cause, cause


def crash_in_a_library(item):
    """A fault inside a package's code, as a framework's C++ would crash under its Python."""
    import ctypes

    ctypes.string_at(0)  # reads address 0: a real segmentation fault, in ctypes' own call


def test_a_fault_inside_a_library_is_placed_in_that_library():
    result = isolated_map(crash_in_a_library, [0], on_error="collect", progress=False, quiet=True)
    cause = result.attempts[0][0]["cause"]
    assert cause.startswith("segmentation fault (signal 11, SIGSEGV) in ctypes: its last Python frame is string_at ("
                            "ctypes/__init__.py:") or cause.startswith(
        "segmentation fault (signal 11, SIGSEGV): its last Python frame is string_at (__init__.py:"), cause


def test_the_cause_names_the_node_on_a_cluster():
    from kerasmagic.isolation.result import IsolatedResult

    job = IsolatedResult("x", status="crash", exit_code=-11, signal_name="SIGSEGV",
                         node={"ip": "10.0.0.7", "hostname": "gpu-7"})
    assert death_cause(job, None) == "segmentation fault (signal 11, SIGSEGV) on node 10.0.0.7 (gpu-7)"


def test_the_kept_output_is_what_the_job_printed_not_faulthandlers_module_list():
    # CI: in a template that imported pandas and TensorFlow, faulthandler's one-line list of
    # extension modules filled the kept tail and pushed out what the job printed before its fault.
    from kerasmagic.isolation.result import IsolatedResult
    from kerasmagic.isolation.retries import attempt_record

    modules = ", ".join(f"package{i}._speedups" for i in range(400))
    output = ("about to touch a freed pointer\nFatal Python error: Segmentation fault\n\n"
              "Stack (most recent call first):\n  File \"/work/fold.py\", line 7 in fold\n\n"
              f"Extension modules: {modules} (total: 400)\n")
    job = IsolatedResult("x", status="crash", exit_code=-11, signal_name="SIGSEGV")
    tail = attempt_record(1, job, None, timeout=None, output=output)["output_tail"]
    assert "about to touch a freed pointer" in tail and "line 7 in fold" in tail, tail[:200]
    assert "Extension modules" not in tail

"""The memory guard and the post-mortem in a real kernel inside a real memory cgroup (issue 18).

Each test makes a cgroup v1 child of this process's own memory cgroup with a 1 GiB limit, starts
a real ipykernel through jupyter_client and writes the kernel's pid into the cgroup, so the
kernel sees its limit only in its own cgroup, not at the mount's root (what the probe missed
before). The kernel grows in 64 MiB steps from a Python loop. With the guard on it must stop
the cell before the real OOM killer acts and keep the kernel and its variables; with the guard
off the real OOM killer kills the kernel, and the notebook's next kernel says so.

They skip, saying why, where no memory cgroup can be made (not root, no writable v1 memory
controller). Timeouts are generous: CI's machine has two busy cores.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid

import pytest

from kerasmagic.live.protocol import PROTOCOL_VERSION, validate
from kerasmagic.probes.cgroup import parse_mountinfo, parse_proc_cgroup

from kernel_session import KernelSession

pytestmark = pytest.mark.kernel

LIMIT_BYTES = 2**30
# Grows far past the limit (40 × 64 MiB = 2.5 GiB) at a pace a training loop could have; the
# first line is what the post-mortem quotes.
GROW = """chunks = []
import time
for step in range(40):
    chunks.append(b"x" * (64 * 2**20))
    time.sleep(0.2)
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _own_memory_folder() -> str | None:
    """This process's own cgroup v1 memory folder, or None where there is none."""
    try:
        with open("/proc/self/cgroup") as file:
            paths = parse_proc_cgroup(file.read())
        with open("/proc/self/mountinfo") as file:
            mounts = parse_mountinfo(file.read())
    except OSError:
        return None
    path = paths.get("memory")
    for mount in mounts:
        if mount.version == 1 and "memory" in mount.controllers and path is not None:
            root = mount.root.rstrip("/")
            if root and not (path == root or path.startswith(root + "/")):
                continue
            folder = os.path.join(mount.mount_point, path[len(root):].lstrip("/"))
            return folder if os.path.isdir(folder) else None
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as file:
        file.write(value)


def _oom_kills(folder: str) -> int:
    with open(os.path.join(folder, "memory.oom_control")) as file:
        for line in file:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    raise AssertionError("memory.oom_control has no oom_kill line")


@pytest.fixture
def memory_cgroup():
    """A fresh cgroup v1 memory child with a 1 GiB limit; removed at teardown."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    parent = _own_memory_folder()
    if parent is None:
        pytest.skip("no cgroup v1 memory controller for this process (cgroup v2 only, or none)")
    folder = os.path.join(parent, f"kerasmagic-test-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        os.mkdir(folder)
        _write(os.path.join(folder, "memory.limit_in_bytes"), str(LIMIT_BYTES))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        pytest.skip(f"cannot make a memory cgroup under {parent}: {exc}")
    # Charge what the kernel already uses to the new cgroup too, so that its RSS and the cgroup's
    # count agree (cgroup v1 only; without it the OOM killer acts later than RSS says).
    with contextlib.suppress(OSError):
        _write(os.path.join(folder, "memory.move_charge_at_immigrate"), "1")
    try:
        yield folder
    finally:
        _remove_cgroup(folder, parent)


def _remove_cgroup(folder: str, parent: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError):
            with open(os.path.join(folder, "cgroup.procs")) as file:
                for pid in file.read().split():
                    with contextlib.suppress(OSError):
                        _write(os.path.join(parent, "cgroup.procs"), pid)
        try:
            os.rmdir(folder)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _open_live(session: KernelSession) -> str:
    """The sidebar's channel, opened as a sidebar does."""
    comm_id = uuid.uuid4().hex
    session.client.shell_channel.send(session.client.session.msg(
        "comm_open", {"comm_id": comm_id, "target_name": "kerasmagic.live",
                      "data": {"method": "open", "visible": True, "interval_s": 0.5}},
        metadata={"protocol_version": PROTOCOL_VERSION}))
    return comm_id


def _kernel_pid(session: KernelSession) -> int:
    return session.manager.provisioner.process.pid


def _session(tmp_path, notebook: str) -> KernelSession:
    return KernelSession(env={"JPY_SESSION_NAME": notebook, "KERASMAGIC_RECORD_DIR": str(tmp_path / "records"),
                              "KERASMAGIC_MEMORY_LIMIT": "", "KERASMAGIC_MEMORY_GUARD": ""})


def _into(session: KernelSession, folder: str) -> None:
    _write(os.path.join(folder, "cgroup.procs"), str(_kernel_pid(session)))


def _wait_idle_after_error(session: KernelSession) -> None:
    """KernelSession.execute raises at the error, before the cell's idle: a request sent before
    that idle is aborted by ipykernel (stop_on_error), so wait for it."""
    failed = next(m for m in reversed(session.iopub) if m["msg_type"] == "error")["parent_header"]["msg_id"]
    session.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                     and m["parent_header"].get("msg_id") == failed, timeout=60)


def test_tf_mem_reports_the_own_cgroups_limit_and_the_guard_saves_the_session(memory_cgroup, tmp_path):
    session = _session(tmp_path, f"/tests/guard-{uuid.uuid4().hex}.ipynb")
    try:
        _into(session, memory_cgroup)
        session.execute("%load_ext kerasmagic")
        shown = session.shown("%tf_mem")
        limit_row = next(line for line in shown.splitlines() if "memory limit" in line)
        assert "1.00 GiB" in limit_row, shown
        assert "cgroup v1" in limit_row and os.path.basename(memory_cgroup) in limit_row, shown
        assert "headroom" in shown and "memory guard" in shown, shown

        session.execute("before = 'still here'")
        comm_id = _open_live(session)
        session.comm_data(comm_id, "sample")
        mark = len(session.iopub)
        with pytest.raises(AssertionError) as stopped:
            session.execute(GROW, timeout=240)
        cell = session.last_execution_count
        error = ANSI.sub("", str(stopped.value))
        assert "KernelMemoryLimitError" in error, error
        assert f"cell [{cell}] was stopped by kerasmagic's memory guard" in error, error
        assert "of a 1.00 GiB limit" in error, error
        warnings = [m["content"]["text"] for m in session.iopub[mark:]
                    if m["msg_type"] == "stream" and "kerasmagic: memory at" in m["content"]["text"]]
        assert len(warnings) == 1, warnings
        assert f"cell [{cell}] grew" in warnings[0] and "1.00 GiB limit" in warnings[0], warnings

        # The kernel answers, the variable from before is there, and the OOM killer never acted.
        _wait_idle_after_error(session)
        # Issue 33, item 7: the sidebar (and %tf_mem --live) get the limit, the headroom, the warning
        # and the stop, not only the cell's output.
        live = [m["content"]["data"] for m in session.comm_messages(comm_id)]
        kinds = [m.get("kind") for m in live if m["method"] == "event"]
        assert "guard_warning" in kinds and "guard_stop" in kinds, kinds
        stop = next(m for m in live if m.get("kind") == "guard_stop")
        assert stop["payload"]["execution_count"] == cell and "was stopped" in stop["text"], stop
        sample = session.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"].get("comm_id") == comm_id
                                  and m["content"]["data"].get("method") == "sample"
                                  and m["content"]["data"]["memory_limit"]["guard"]["stops"] >= 1,
                                  timeout=30)["content"]["data"]
        validate(sample, "to_frontend")
        limit = sample["memory_limit"]
        assert limit["limit_bytes"] == LIMIT_BYTES and limit["source"] == "cgroup", limit
        assert limit["guard"]["enabled"] and limit["guard"]["stops"] == 1, limit
        # `%tf_mem --live` shows that sample's limit, headroom and stop as rows of their own.
        from kerasmagic.live.widget import _ViewState

        view = _ViewState(history=3)
        view.take(sample)
        rows = ANSI.sub("", view.values_html())
        assert "Memory limit" in rows and "of 1.00 GiB" in rows and "Headroom" in rows, rows
        assert "Memory guard" in rows and f"stopped cell [{cell}]" in rows, rows
        assert session.execute("print(before)").strip() == "still here"
        assert session.execute("print(isinstance(chunks, list), len(chunks) > 5)").split() == ["True", "True"]
        assert _oom_kills(memory_cgroup) == 0
        session.execute("del chunks")
        assert session.execute("print(1 + 1)").strip() == "2"
    finally:
        session.shutdown()


def test_with_the_guard_off_the_oom_killer_acts_and_the_next_kernel_says_so(memory_cgroup, tmp_path):
    notebook = f"/tests/postmortem-{uuid.uuid4().hex}.ipynb"
    first = _session(tmp_path, notebook)
    try:
        _into(first, memory_cgroup)
        first.execute("%load_ext kerasmagic")
        assert "off" in first.shown("%tf_mem --guard off")
        msg_id = first.client.execute(GROW)
        started = first.wait_for(lambda m: m["msg_type"] == "execute_input"
                                 and m["parent_header"].get("msg_id") == msg_id, timeout=60)
        cell = started["content"]["execution_count"]
        process = first.manager.provisioner.process
        deadline = time.monotonic() + 240
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert process.poll() == -9, "the kernel was not killed by SIGKILL"
        assert _oom_kills(memory_cgroup) >= 1, "the OOM killer did not act"
    finally:
        first.shutdown()

    second = _session(tmp_path, notebook)
    try:
        said = second.execute("%load_ext kerasmagic")
        assert "The previous kernel of this notebook died at" in said, said
        assert f"while cell [{cell}] ran (`chunks = []`)" in said, said
        assert "killed by the out-of-memory killer at" in said and "of a 1.00 GiB limit" in said, said
        # Issue 33, item 9: the figure is the kernel's at the kill (the kernel log's anon-rss, else the
        # last reading near it), not a reading from before the fatal growth ("at 56.9 MiB").
        figure = re.search(r"killed by the out-of-memory killer(?::.*?its last reading:)? at ([\d.]+) (MiB|GiB) of a",
                           said) or re.search(r"its last reading: ([\d.]+) (MiB|GiB) of a", said)
        assert figure and float(figure.group(1)) * (1024 if figure.group(2) == "GiB" else 1) >= 768, said
        # Told once: the record is gone, so a third load (here: unload and load) says nothing more.
        second.execute("%unload_ext kerasmagic")
        threads = "import threading; print([t.name for t in threading.enumerate() if t.name.startswith('kerasmagic')])"
        assert second.execute(threads).strip() == "[]"  # the guard's thread went with %unload_ext
        assert "previous kernel" not in second.execute("%load_ext kerasmagic")
    finally:
        second.shutdown()


def test_a_stop_due_inside_an_import_waits_for_it_and_the_import_works_again(memory_cgroup, tmp_path):
    """Issue 33, item 1: a stop raised inside ``import tensorflow`` left TensorFlow (or JAX, pandas)
    half-initialised for the kernel's life. The limit is set just above the kernel's use, so the
    import itself crosses the stop level half-way (TensorFlow's import grows RSS by 500+ MiB)."""
    _write(os.path.join(memory_cgroup, "memory.limit_in_bytes"), str(3 * 2**30))  # room for TensorFlow
    session = _session(tmp_path, f"/tests/import-{uuid.uuid4().hex}.ipynb")
    try:
        _into(session, memory_cgroup)
        session.execute("%load_ext kerasmagic")
        session.execute("import kerasmagic\nfrom kerasmagic.probes.process import rss_bytes\n"
                        "kerasmagic.set_memory_limit(rss_bytes() + 250 * 2**20)")
        error = ""
        try:
            session.execute("import tensorflow as tf", timeout=240)
        except AssertionError as stopped:
            error = ANSI.sub("", str(stopped))
            _wait_idle_after_error(session)
        # Stopped after the import (or not at all: the cell ended with it), never inside it. IPython
        # hides importlib's frames in what it shows: read where the exception landed in the kernel.
        assert "KernelMemoryLimitError" in error or not error, error
        landed = session.execute("import sys, traceback\ntb = getattr(sys, 'last_traceback', None)\n"
                                 "print([f.filename for f in traceback.extract_tb(tb)][1:] if tb else [])").strip()
        assert landed == "[]" or ("importlib" not in landed and "site-packages" not in landed), landed
        deferred = session.execute("from kerasmagic import guard\nprint(guard.active_guard().deferred)").strip()
        assert deferred == "1", "the stop never came due inside the import: the test proves nothing"
        # The user's re-run, as after any stop: TensorFlow imports and works.
        session.execute("%tf_mem --guard off")
        out = session.execute("import tensorflow as tf\nprint(float(tf.reduce_sum(tf.ones(3))))", timeout=120)
        assert out.strip().splitlines()[-1] == "3.0", out
    finally:
        session.shutdown()


def test_another_process_oom_killed_in_the_cgroup_is_not_the_kernels_death(memory_cgroup, tmp_path):
    """Issue 33, item 2: the next kernel said "killed by the out-of-memory killer" because the
    cgroup's counter had risen, for another process's kill. The kernel is killed with SIGKILL a
    second after another process in its cgroup was OOM-killed: that is what it must say."""
    import signal
    import subprocess
    import sys

    notebook = f"/tests/not-oom-{uuid.uuid4().hex}.ipynb"
    first = _session(tmp_path, notebook)
    try:
        _into(first, memory_cgroup)
        first.execute("%load_ext kerasmagic")
        first.execute("x = 1")
        hog = subprocess.run(["/bin/sh", "-c", f"echo $$ > {memory_cgroup}/cgroup.procs && exec {sys.executable} -c "
                              "'b = b\"x\" * (2 * 2**30)'"], timeout=120)
        assert hog.returncode == -signal.SIGKILL and _oom_kills(memory_cgroup) == 1, hog
        time.sleep(1)
        killed_ts = time.time()
        os.kill(_kernel_pid(first), signal.SIGKILL)
        process = first.manager.provisioner.process
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        first.shutdown()

    second = _session(tmp_path, notebook)
    try:
        said = second.execute("%load_ext kerasmagic")
        assert "The previous kernel of this notebook died at" in said and "between cells" in said, said
        assert "out-of-memory killer" in said and "killed by the out-of-memory killer" not in said, said
        assert "killed with SIGKILL, not by the out-of-memory killer" in said or "not killed by the" in said, said
        # Issue 33, item 9: the sidebar's banner tells the time the sentence tells, the watcher's time
        # of the death (it sent the record's last write, seconds before, and a page that saw the
        # death showed the moment it noticed).
        told = second.comm_data(_open_live(second), "postmortem")
        assert killed_ts - 0.05 <= told["died_ts"] <= killed_ts + 5, (killed_ts, told)
        clock = time.strftime("%H:%M:%S %Z", time.localtime(told["died_ts"]))
        assert f"died at {clock} " in told["text"] and told["text"] in said, (clock, told, said)
    finally:
        second.shutdown()


# Issue 33, items 3, 5 and 6, in one kernel (each phase ended in the OOM killer before the fix).
FAST = "big = [np.ones(64 * 2**20 // 8) for _ in range(40)]"  # 2.5 GiB in about a second
SWALLOWED = """chunks = []
for step in range(160):
    try:
        chunks.append(bytearray(16 << 20))
        time.sleep(0.05)
    except Exception:
        pass
"""


# What the guard saw, for a failure's message.
GUARD_STATE = ("from kerasmagic import guard\ng = guard.active_guard()\n"
               "print(g.readings, g.fired, g.warnings, g.level, g.last_limit, g.last_event)")


def test_fast_swallowed_and_tmpfs_growth_are_stopped_before_the_oom_killer(memory_cgroup, tmp_path):
    session = _session(tmp_path, f"/tests/phases-{uuid.uuid4().hex}.ipynb")
    shm = f"/dev/shm/kerasmagic-test-{uuid.uuid4().hex}"
    try:
        _into(session, memory_cgroup)
        session.execute("%load_ext kerasmagic")
        session.execute("import numpy as np, time\nkept = 'still here'")

        def stopped(code: str) -> str:
            with pytest.raises(AssertionError) as error:
                out = session.execute(code, timeout=180)
                pytest.fail(f"the cell ran to its end; it printed {out!r}, the OOM killer acted "
                            f"{_oom_kills(memory_cgroup)} times, the guard: {session.execute(GUARD_STATE)}")
            _wait_idle_after_error(session)
            assert _oom_kills(memory_cgroup) == 0, "the OOM killer acted"
            return ANSI.sub("", str(error.value))

        # Item 5: from below 75 % to the limit between two once-a-second readings.
        assert "KernelMemoryLimitError" in stopped(FAST)
        # Item 3: the cell catches the first stop and goes on growing: stopped again, uncatchable there.
        error = stopped(SWALLOWED)
        assert "KernelMemoryLimitInterrupt" in error and "Stopped again" in error, error
        session.execute("del chunks")
        # Item 6: 720 MiB in /dev/shm counts against the cgroup's limit but is in no RSS.
        session.execute(f"with open({shm!r}, 'wb') as f:\n    for _ in range(45):\n"
                        "        f.write(b'x' * (16 * 2**20))", timeout=120)
        shown = session.shown("%tf_mem")
        assert "tmpfs counted" in shown, shown
        assert "KernelMemoryLimitError" in stopped(GROW)
        mark = len(session.iopub)
        kept = session.execute("print(kept)").strip()
        assert kept == "still here", [(m["msg_type"], m["parent_header"].get("msg_type"), str(m["content"])[:300])
                                      for m in session.iopub[mark - 12:]]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(shm)
        session.shutdown()


CLEANUP = """import threading, time
lock = threading.Lock()
class Grows:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        held = [bytearray(16 << 20) for _ in range(20)]  # the stop comes due here
        time.sleep(1.0)
        lock.release()
lock.acquire()
with Grows():
    pass
"""


FINALLY = """released = []
kept = []
def tidy():
    try:
        pass
    finally:
        for _ in range(30):
            kept.append(bytearray(16 << 20))  # the stop comes due here
            time.sleep(0.05)
        released.append(True)
tidy()
for _ in range(40):
    kept.append(bytearray(16 << 20))  # and lands here
    time.sleep(0.05)
"""


def test_a_stop_due_inside_a_with_blocks_exit_waits_for_its_cleanup(tmp_path):
    """Issue 33, item 10: the stop landed inside ``__exit__`` and the lock stayed held. A stop due
    there, or in a ``finally`` block, waits for the cleanup to end and lands after it."""
    session = _session(tmp_path, f"/tests/cleanup-{uuid.uuid4().hex}.ipynb")
    try:
        session.execute("%load_ext kerasmagic")
        session.execute("import kerasmagic\nfrom kerasmagic.probes.process import rss_bytes\n"
                        "kerasmagic.set_memory_limit(rss_bytes() + 200 * 2**20)")
        try:
            session.execute(CLEANUP, timeout=120)
        except AssertionError:
            _wait_idle_after_error(session)
        assert session.execute("print(lock.locked())").strip() == "False"  # the cleanup ran whole
        assert session.execute("from kerasmagic import guard\nprint(guard.active_guard().deferred)").strip() == "1"
        # A finally block is found in the cell's source: the stop waits for it, then lands in the
        # loop after it, and says both.
        with pytest.raises(AssertionError) as stopped:
            session.execute(FINALLY, timeout=120)
        _wait_idle_after_error(session)
        error = ANSI.sub("", str(stopped.value))
        # The cell's code is <module>, or <cell line: 0> in the IPython of Colab's stack.
        assert re.search(r"it was due inside cleanup code \(a with block's __exit__ or a finally block\) and "
                         r"waited for it to end; raised in (<module>|<cell line: \d+>) "
                         r"\(.*, line 1[234]\)", error), error
        assert session.execute("print(released)").strip() == "[True]"  # the finally block ran whole
        assert session.execute("print(guard.active_guard().deferred)").strip() == "2"
    finally:
        session.shutdown()


THREADED = """import threading, time
grown = []
def grow():
    for _ in range(80):
        grown.append(bytearray(16 << 20))
        time.sleep(0.1)
worker = threading.Thread(target=grow, name="grower")
worker.start()
"""
# The cell waits for its thread in one of two ways: t.join() runs no bytecode in the main thread (the
# stop never landed), a polling loop does (it landed there, and the thread grew on, to the OOM killer).
WAITS = {"join": "worker.join()", "poll": "while worker.is_alive():\n    time.sleep(0.05)",
         # A cleanup that waits for the thread: the stop does not wait for it (the growth is the
         # thread's), and says it cut the cleanup short.
         "finally": "try:\n    pass\nfinally:\n    worker.join()"}


def test_growth_in_a_thread_the_cell_waits_for_is_stopped_in_that_thread(memory_cgroup, tmp_path):
    """Issue 33, item 4, in a real 1 GiB cgroup: the thread's 80 steps of 16 MiB (1.25 GiB) pass the
    limit, and a thread stopped never reaches its end. (60 steps, 960 MiB, ended just under the limit
    when the stop came late on a loaded machine: no harm, but nothing shown.)"""
    session = _session(tmp_path, f"/tests/thread-{uuid.uuid4().hex}.ipynb")
    try:
        _into(session, memory_cgroup)
        session.execute("%load_ext kerasmagic")
        # Stopped at 80 %, the kernel keeps 200 MiB of room. At 95 %, on a loaded machine, it once
        # did not report idle within a minute of the stop (likely reclaim: with no swap, a cgroup at
        # its limit can only drop file pages, the kernel's code among them).
        session.execute("import kerasmagic\nkerasmagic.memory_guard(warn_pct=70, stop_pct=80)")
        for wait, code in WAITS.items():
            with pytest.raises(AssertionError) as stopped:
                session.execute(THREADED + code, timeout=120)
            _wait_idle_after_error(session)
            error = ANSI.sub("", str(stopped.value))
            assert "also raised in the thread this cell started (grower)" in error, (wait, error)
            if wait == "finally":
                assert ("it landed inside cleanup code (a with block's __exit__ or a finally block), and the rest "
                        "of it did not run: the cell's own threads were growing") in error, error
            session.execute("worker.join(10)")
            kept = int(session.execute("print(len(grown))"))
            assert kept < 80 and session.execute("print(worker.is_alive())").strip() == "False", (wait, kept)
            assert _oom_kills(memory_cgroup) == 0, f"the OOM killer acted ({wait})"
            session.execute("del grown")
    finally:
        session.shutdown()


GROWS_IN_CLEANUP = """grown = []
def tidy():
    try:
        pass
    finally:
        for _ in range(80):
            grown.append(bytearray(16 << 20))
            time.sleep(0.05)
tidy()
"""


def test_cleanup_that_grows_on_is_stopped_half_way_to_a_limit_the_oom_killer_enforces(memory_cgroup, tmp_path):
    """A stop waits for a finally block, but not to the OOM killer: under a cgroup's limit it lands
    half way from the stop level to the limit (here 80 % and 90 % of 1 GiB), and says what it cut."""
    session = _session(tmp_path, f"/tests/ceiling-{uuid.uuid4().hex}.ipynb")
    try:
        _into(session, memory_cgroup)
        session.execute("%load_ext kerasmagic")
        session.execute("import time, kerasmagic\nkerasmagic.memory_guard(warn_pct=70, stop_pct=80)")
        with pytest.raises(AssertionError) as stopped:
            session.execute(GROWS_IN_CLEANUP, timeout=120)
        _wait_idle_after_error(session)
        error = ANSI.sub("", str(stopped.value))
        assert ("it landed inside cleanup code (a with block's __exit__ or a finally block), and the rest of it did "
                "not run: memory was half way from 80 % to a limit the OOM killer enforces") in error, error
        used = re.search(r"at (\d+) MiB of a 1.00 GiB limit \((\d+) %", error)
        assert used and int(used.group(2)) >= 90, error
        assert int(session.execute("print(len(grown))")) < 80 and _oom_kills(memory_cgroup) == 0
        session.execute("del grown")
        # An import that grows on: at the same ceiling, the stop lands in it and says what that costs.
        (tmp_path / "grows_on_import.py").write_text(
            "import time\nchunks = []\nfor _ in range(80):\n    chunks.append(bytearray(16 << 20))\n"
            "    time.sleep(0.05)\n")
        session.execute(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})")
        with pytest.raises(AssertionError) as stopped:
            session.execute("import grows_on_import", timeout=120)
        _wait_idle_after_error(session)
        error = ANSI.sub("", str(stopped.value))
        assert ("it was due inside an import and landed there (memory was half way from 80 % to a limit the OOM "
                "killer enforces): that module may be half-imported, so save what you need and restart the kernel "
                "before you use it") in error, error
        assert _oom_kills(memory_cgroup) == 0
    finally:
        session.shutdown()

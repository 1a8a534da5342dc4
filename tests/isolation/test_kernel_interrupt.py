"""The stop button in a real kernel: ipykernel's interrupt reaches an isolated cell.

ipykernel ignores SIGINT between cells and installs ``default_int_handler`` while one runs;
the interrupt request makes the kernel manager send SIGINT to the kernel process. This is
the path a user's stop button takes, whatever the test runner's own SIGINT disposition is.
"""

from __future__ import annotations

import os
import re
import time
from queue import Empty

import psutil
import pytest

pytestmark = [pytest.mark.isolation, pytest.mark.kernel]


def _collect(client, msg_id: str, timeout: float) -> tuple[str, list[dict]]:
    """The cell's stream text and error messages, until the kernel is idle for it."""
    text, errors = [], []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = client.get_iopub_msg(timeout=0.5)
        except Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            errors.append(msg["content"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(text), errors
    raise TimeoutError("the cell did not finish")


def _run(client, code: str, timeout: float = 120) -> str:
    text, errors = _collect(client, client.execute(code), timeout)
    assert not errors, errors
    return text


def test_the_stop_button_ends_an_isolated_cell_and_its_process():
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
    manager, client = start_new_kernel(kernel_name="python3", env=env, startup_timeout=60)
    try:
        _run(client, "%load_ext kerasmagic\nfrom kerasmagic.isolation import prestart_pool\n"
                     "from kerasmagic.isolation.pool import default_pool\nkept = 1\nprestart_pool()\n"
                     "assert default_pool().wait_until_warm(timeout=120)")
        msg_id = client.execute("%%fresh_model --isolate\nimport os, time\nkept = 2\n"
                                "print('started', os.getpid(), flush=True)\ntime.sleep(60)")
        started_at = None
        job_pid = None
        seen: list[dict] = []
        deadline = time.monotonic() + 120
        while job_pid is None and time.monotonic() < deadline:
            try:
                msg = client.get_iopub_msg(timeout=0.5)
            except Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            seen.append({"type": msg["msg_type"], "content": msg["content"]})
            if msg["msg_type"] == "stream":
                # print() writes each argument on its own (the child's stdout is unbuffered):
                # under load they arrive as separate stream messages, so read them together.
                text = "".join(m["content"]["text"] for m in seen if m["type"] == "stream")
                found = re.search(r"started (\d+)\n", text)
                if found:
                    job_pid, started_at = int(found.group(1)), time.monotonic()
        assert job_pid is not None, f"the isolated cell never started: {seen}"
        manager.interrupt_kernel()
        _, errors = _collect(client, msg_id, timeout=30)
        assert time.monotonic() - started_at < 20  # not the cell's 60 s
        assert [e["ename"] for e in errors] == ["IsolatedInterrupt"], errors  # a KeyboardInterrupt subclass
        assert errors[0]["traceback"] == [f"KeyboardInterrupt: interrupted; the isolated worker (pid {job_pid}) "
                                          "was killed"]  # one line, none of our frames
        deadline = time.monotonic() + 5
        while psutil.pid_exists(job_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not psutil.pid_exists(job_pid), "the job's process outlived the interrupt"
        assert _run(client, "print(kept)").strip() == "1"  # the kernel lives, its namespace untouched
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)

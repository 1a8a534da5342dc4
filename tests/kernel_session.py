"""A real ipykernel driven through jupyter_client, as a frontend drives it: the kernel tests'
one way to run cells and talk on comms (tests/live, tests/stacks)."""

from __future__ import annotations

import os
import time
import uuid
from queue import Empty


class KernelSession:
    """A real ipykernel and a tiny comm client: what the sidebar does, without a browser.

    Every iopub message read is kept in ``self.iopub`` so tests can look at comm traffic
    that arrived while a cell ran.
    """

    def __init__(self, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        from jupyter_client.manager import start_new_kernel

        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
        # The kernel of the Python running the tests (jupyter_client puts sys.executable in
        # the native "python3" spec): in .venv-colab that is Colab's stack.
        for attempt in range(3):
            try:
                self.manager, self.client = start_new_kernel(kernel_name="python3", env=env, cwd=cwd,
                                                             startup_timeout=90)
                break
            except RuntimeError:
                # "Kernel died before replying": two test workers can pick the same free TCP port
                # for their kernels at once, and the second to bind exits with "Address already
                # in use" (seen in CI). start_new_kernel has shut that one down; a new start picks
                # new ports. A kernel that dies for another reason dies three times and says so.
                if attempt == 2:
                    raise
        self.iopub: list[dict] = []
        #: The In[n] number of the last cell run by execute() (from its execute_input message).
        self.last_execution_count: int | None = None
        self._after_error = False

    # ---- reading -------------------------------------------------------------------------
    def _read(self, timeout: float) -> dict | None:
        try:
            msg = self.client.get_iopub_msg(timeout=timeout)
        except Empty:
            return None
        self.iopub.append(msg)
        if msg["msg_type"] == "error":
            # Also for a cell a test sent itself (client.execute): the next execute() waits out
            # the abort that follows an error (see _until_not_aborting).
            self._after_error = True
        return msg

    def wait_for(self, predicate, timeout: float = 20.0) -> dict:
        """Read iopub until a message matches; return it (earlier ones stay in self.iopub)."""
        for msg in self.iopub:
            if predicate(msg) and not msg.get("_seen"):
                msg["_seen"] = True
                return msg
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._read(max(0.05, deadline - time.monotonic()))
            if msg is not None and predicate(msg):
                msg["_seen"] = True
                return msg
        raise TimeoutError("no matching iopub message")

    def _until_not_aborting(self, timeout: float = 60.0) -> None:
        """After a cell's error ipykernel aborts the execute requests queued behind it; in 6.17
        (Colab's) that lasts until a callback scheduled at the error runs, which can come after
        the failed cell's idle: the next cell, sent at that idle, was answered "aborted" and never
        ran (seen under load). A silent empty cell is sent until one is not aborted."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg_id = self.client.execute("", silent=True, store_history=False)
            while True:
                reply = self.client.get_shell_msg(timeout=max(0.05, deadline - time.monotonic()))
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
            if reply["content"]["status"] != "aborted":
                self._after_error = False
                return
            time.sleep(0.05)
        raise TimeoutError("the kernel still aborted requests a minute after an error")

    def _cell_messages(self, code: str, timeout: float):
        """Run a cell; yield its iopub messages until it is idle (a TimeoutError if it is not)."""
        if self._after_error:
            self._until_not_aborting()
        msg_id = self.client.execute(code)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._read(max(0.05, deadline - time.monotonic()))
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "execute_input":
                self.last_execution_count = msg["content"]["execution_count"]
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return
            yield msg
        raise TimeoutError(f"cell did not finish: {code!r}")

    def execute(self, code: str, timeout: float = 60.0) -> str:
        """Run a cell, read iopub until it is idle; return its stdout (errors raise)."""
        out: list[str] = []
        for msg in self._cell_messages(code, timeout):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                raise AssertionError("\n".join(msg["content"]["traceback"]))
        return "".join(out)

    def outputs(self, code: str, timeout: float = 60.0) -> list[dict]:
        """Run a cell; its output messages (stream, error, displays) in the order a notebook shows
        them. An error is one of them: it does not raise."""
        shown = ("stream", "error", "display_data", "execute_result")
        return [msg for msg in self._cell_messages(code, timeout) if msg["msg_type"] in shown]

    def shown(self, code: str, timeout: float = 60.0) -> str:
        """Run a cell; return what a reader of the notebook sees as text: its stdout, then the
        text/plain of every display and of its value (kerasmagic's reports are displays)."""
        mark = len(self.iopub)
        out = self.execute(code, timeout)
        shown = [m["content"]["data"].get("text/plain", "") for m in self.iopub[mark:]
                 if m["msg_type"] in ("display_data", "execute_result")]
        return "\n".join([out, *shown])

    def execute_result(self, code: str, timeout: float = 60.0) -> str | None:
        """Run a cell; return its value's text/plain (None when the cell shows no value)."""
        mark = len(self.iopub)
        self.execute(code, timeout)
        results = [m for m in self.iopub[mark:] if m["msg_type"] == "execute_result"]
        return results[-1]["content"]["data"].get("text/plain") if results else None

    # ---- comms -----------------------------------------------------------------------------
    def open_comm(self, target: str = "kerasmagic.live", data=None, protocol_version="1.0.0") -> str:
        comm_id = uuid.uuid4().hex
        metadata = {} if protocol_version is None else {"protocol_version": protocol_version}
        msg = self.client.session.msg(
            "comm_open",
            {"comm_id": comm_id, "target_name": target,
             "data": data if data is not None else {"method": "open", "visible": True}},
            metadata=metadata,
        )
        self.client.shell_channel.send(msg)
        return comm_id

    def send_comm(self, comm_id: str, data) -> None:
        msg = self.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.client.shell_channel.send(msg)

    def close_comm(self, comm_id: str) -> None:
        msg = self.client.session.msg("comm_close", {"comm_id": comm_id, "data": {}})
        self.client.shell_channel.send(msg)

    def comm_data(self, comm_id: str, method: str | None = None, timeout: float = 20.0) -> dict:
        def match(msg):
            return (
                msg["msg_type"] == "comm_msg"
                and msg["content"].get("comm_id") == comm_id
                and (method is None or msg["content"]["data"].get("method") == method)
            )

        return self.wait_for(match, timeout)["content"]["data"]

    def comm_messages(self, comm_id: str) -> list[dict]:
        return [
            m for m in self.iopub if m["msg_type"] == "comm_msg" and m["content"].get("comm_id") == comm_id
        ]

    def wait_comm_close(self, comm_id: str, timeout: float = 20.0) -> dict:
        return self.wait_for(
            lambda m: m["msg_type"] == "comm_close" and m["content"].get("comm_id") == comm_id, timeout
        )

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)

"""Protocol 1.3 in a real ipykernel: cell runs, the history a reloaded page gets back, CPU and
host memory in samples, and a comm opened on a kernel subshell while a cell runs."""

import uuid

import pytest

from kerasmagic.live.protocol import PROTOCOL_VERSION, validate

pytestmark = pytest.mark.kernel


def _open(kernel, version="1.3.0", subshell_id=None, **open_data) -> str:
    comm_id = uuid.uuid4().hex
    msg = kernel.client.session.msg(
        "comm_open",
        {"comm_id": comm_id, "target_name": "kerasmagic.live",
         "data": {"method": "open", "visible": True, **open_data}},
        metadata={"protocol_version": version},
    )
    if subshell_id is not None:
        msg["header"]["subshell_id"] = subshell_id
    kernel.client.shell_channel.send(msg)
    return comm_id


def _send(kernel, comm_id, data, subshell_id=None) -> None:
    msg = kernel.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
    if subshell_id is not None:
        msg["header"]["subshell_id"] = subshell_id
    kernel.client.shell_channel.send(msg)


def _execute_with_cell_id(kernel, code: str, cell_id: str) -> str:
    """What JupyterLab sends: the cell's id in the execute request's metadata."""
    msg = kernel.client.session.msg(
        "execute_request",
        {"code": code, "silent": False, "store_history": True, "user_expressions": {},
         "allow_stdin": False, "stop_on_error": False},
        metadata={"cellId": cell_id},
    )
    kernel.client.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def _idle(kernel, msg_id, timeout=60.0):
    return kernel.wait_for(lambda m: m["msg_type"] == "status" and m["parent_header"].get("msg_id") == msg_id
                           and m["content"]["execution_state"] == "idle", timeout)


def _methods(kernel, comm_id) -> list[str]:
    return [m["content"]["data"]["method"] for m in kernel.comm_messages(comm_id)]


def _create_subshell(kernel) -> str:
    # Subshells (JEP 91) came with ipykernel 7; the kernel says so in its kernel_info reply. On
    # ipykernel 6 (Colab's 6.17, the hubs' 6.2x) the sidebar waits for the cell, which the
    # page's own waiting state covers (tests/ui).
    asked = kernel.client.kernel_info()
    reply = kernel.client.get_shell_msg(timeout=20)
    while reply["parent_header"].get("msg_id") != asked:  # execute replies nobody read come first
        reply = kernel.client.get_shell_msg(timeout=20)
    info = reply["content"]
    if "kernel subshells" not in info.get("supported_features", []):
        pytest.skip(f"this kernel has no subshells (ipykernel {info.get('implementation_version')}; they came with 7)")
    msg = kernel.client.session.msg("create_subshell_request", {})
    kernel.client.control_channel.send(msg)
    reply = kernel.client.get_control_msg(timeout=20)
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply["content"]["subshell_id"]


def test_cell_runs_are_reported_and_come_back_in_the_history(kernel):
    kernel.execute("%load_ext kerasmagic")
    comm_id = _open(kernel, interval_s=0.2)
    assert kernel.comm_data(comm_id, "hello")["protocol_version"] == PROTOCOL_VERSION
    first = kernel.comm_data(comm_id, "history")
    validate(first, "to_frontend")
    kernel.comm_data(comm_id, "sample")
    assert _methods(kernel, comm_id)[:4] == ["hello", "history", "facts", "sample"]

    ok_id = _execute_with_cell_id(kernel, "import time; time.sleep(0.5)", "cell-ok")
    _idle(kernel, ok_id)
    failing_id = _execute_with_cell_id(kernel, "1 / 0", "cell-bad")
    _idle(kernel, failing_id)
    counts = [m["content"]["execution_count"] for m in kernel.iopub
              if m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] in (ok_id, failing_id)]
    runs = [kernel.comm_data(comm_id, "cell_run") for _ in range(4)]
    for message in runs:
        validate(message, "to_frontend")
    started, ended, started_bad, ended_bad = (m["run"] for m in runs)
    assert (started["status"], started["ended_ts"], started["cell_id"]) == ("running", None, "cell-ok")
    assert started["execution_count"] == ended["execution_count"] == counts[0]
    assert (ended["status"], ended["started_ts"]) == ("ok", started["started_ts"])
    assert ended["ended_ts"] - ended["started_ts"] >= 0.5
    assert (started_bad["cell_id"], ended_bad["status"], ended_bad["execution_count"]) == ("cell-bad", "error",
                                                                                           counts[1])
    # Samples carry the kernel's CPU and the host's memory from the second one on.
    samples = [m["content"]["data"] for m in kernel.comm_messages(comm_id)
               if m["content"]["data"]["method"] == "sample"]
    assert samples[0]["cpu_pct"]["reason"] == "not_started"
    assert any(isinstance(s["cpu_pct"], (int, float)) and s["cpu_pct"] >= 0 for s in samples[1:])
    host = samples[-1]["host"]
    assert host["total_bytes"] >= host["available_bytes"] > 0

    kernel.execute("from kerasmagic import events; events.publish('clear_tf', {'freed_rss_bytes': 5})")
    event = kernel.comm_data(comm_id, "event")

    # A reloaded page (a new comm) gets the last minutes back, before facts and sample.
    again = _open(kernel)
    kernel.comm_data(again, "hello")
    history = kernel.comm_data(again, "history")
    validate(history, "to_frontend")
    kernel.comm_data(again, "sample")
    assert _methods(kernel, again)[:4] == ["hello", "history", "facts", "sample"]
    by_start = {run["started_ts"]: run for run in history["cell_runs"]}
    assert by_start[started["started_ts"]] == ended
    assert by_start[started_bad["started_ts"]] == ended_bad
    assert {"kind": "clear_tf", "ts": event["ts"]} in history["marks"]
    assert len(history["samples"]) >= len(samples) >= 3
    assert [s["seq"] for s in history["samples"]] == sorted(s["seq"] for s in history["samples"])
    assert {s["seq"] for s in samples} <= {s["seq"] for s in history["samples"]}


def test_a_12_frontend_gets_no_13_messages(kernel):
    kernel.execute("%load_ext kerasmagic")
    comm_id = _open(kernel, version="1.2.0")
    kernel.comm_data(comm_id, "hello")
    kernel.execute("x = 1")
    kernel.comm_data(comm_id, "cell_growth")
    kernel.comm_data(comm_id, "cell_growth")  # the one after the cell: the cell's hooks have run
    methods = set(_methods(kernel, comm_id))
    assert "facts" in methods and not methods & {"cell_run", "history"}, methods


def test_the_comm_opens_on_a_subshell_while_a_cell_runs(kernel, tmp_path):
    """What the sidebar does after a page reload while a cell runs: everything it needs comes
    before the cell ends; Keras facts are the last main-thread reading, then fresh ones."""
    kernel.execute("%load_ext kerasmagic")
    looking = _open(kernel)  # a sidebar was looking: the kernel has read facts on the main thread
    kernel.comm_data(looking, "facts")
    kernel.execute("x = 1")
    facts_before = kernel.comm_data(looking, "facts")
    subshell = _create_subshell(kernel)
    # The cell ends, with an error, when the test drops a file (not by an interrupt, which once
    # failed to end a sleep within a minute on a loaded machine; that is not under test here).
    release = tmp_path / "release"
    busy_id = kernel.client.execute(
        f"import os, time\nfor _ in range(1200):\n    if os.path.exists({str(release)!r}): break\n"
        "    time.sleep(0.1)\nraise RuntimeError('released')")
    count = kernel.wait_for(lambda m: m["msg_type"] == "execute_input"
                            and m["parent_header"]["msg_id"] == busy_id)["content"]["execution_count"]
    # Its pre_run_cell has run once the looking sidebar hears of its start.
    started = kernel.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == looking
                              and m["content"]["data"]["method"] == "cell_run"
                              and m["content"]["data"]["run"]["execution_count"] == count)["content"]["data"]["run"]
    assert started["status"] == "running"

    comm_id = _open(kernel, subshell_id=subshell)
    hello = kernel.comm_data(comm_id, "hello", timeout=60)
    history = kernel.comm_data(comm_id, "history", timeout=60)
    cached = kernel.comm_data(comm_id, "facts", timeout=60)
    sample = kernel.comm_data(comm_id, "sample", timeout=60)
    kernel.comm_data(comm_id, "cell_growth", timeout=60)
    # The cell is still running: no idle for it has been read (it would be, it comes first).
    assert not any(m["msg_type"] == "status" and m["parent_header"].get("msg_id") == busy_id
                   and m["content"]["execution_state"] == "idle" for m in kernel.iopub)
    for message in (hello, history, cached, sample):
        validate(message, "to_frontend")
    assert history["cell_runs"][-1] == started
    assert (cached["execution_count"], cached["ts"]) == (facts_before["execution_count"], facts_before["ts"])
    # Served on the subshell: a refresh and a visibility change are answered during the cell too.
    _send(kernel, comm_id, {"method": "visibility", "visible": False}, subshell)
    _send(kernel, comm_id, {"method": "refresh"}, subshell)
    kernel.comm_data(comm_id, "isolated_jobs", timeout=60)  # the open's
    kernel.comm_data(comm_id, "isolated_jobs", timeout=60)  # the refresh's
    # Clear session waits for the main thread: it is answered only after the cell. (The refresh
    # sent after it is answered on the subshell: by then the clear was handled there.)
    _send(kernel, comm_id, {"method": "clear", "request_id": "c-1"}, subshell)
    _send(kernel, comm_id, {"method": "refresh"}, subshell)
    kernel.comm_data(comm_id, "isolated_jobs", timeout=60)
    assert "clear_result" not in _methods(kernel, comm_id)
    release.touch()
    _idle(kernel, busy_id)
    result = kernel.comm_data(comm_id, "clear_result", timeout=60)
    assert result["ok"], result["text"]
    # Each push on the subshell repeated the cached facts; fresh ones follow the cell.
    fresh = kernel.wait_for(lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
                            and m["content"]["data"]["method"] == "facts"
                            and m["content"]["data"]["ts"] > cached["ts"], timeout=60)["content"]["data"]
    assert fresh["execution_count"] > cached["execution_count"]
    # The cell that raised ends on the timeline as an error, sent to the other sidebar too.
    run = history["cell_runs"][-1]
    ended = [m["content"]["data"]["run"] for m in kernel.comm_messages(looking)
             if m["content"]["data"]["method"] == "cell_run"]
    assert [r["status"] for r in ended if r["started_ts"] == run["started_ts"]][-1:] == ["error"]
    assert kernel.execute("print(6 * 7)").strip() == "42"


def test_after_a_cell_the_sidebar_subshell_still_serves_its_messages(kernel, tmp_path):
    """ipykernel would route the comm's messages to where the kernel last sent from (the main
    thread, facts after a cell): a visibility change during the next cell would wait for it."""
    kernel.execute("%load_ext kerasmagic")
    subshell = _create_subshell(kernel)
    # A slow interval: no sample goes out during the cell to change where replies are routed.
    comm_id = _open(kernel, subshell_id=subshell, interval_s=60)
    kernel.comm_data(comm_id, "cell_growth")
    kernel.execute("y = 2")  # facts go out from the main thread after this cell
    kernel.comm_data(comm_id, "facts")
    # The cell ends when the test says so (a file appears), not by an interrupt: on a loaded
    # machine a SIGINT once failed to end a sleep within a minute, and that is not under test.
    release = tmp_path / "release"
    busy_id = kernel.client.execute(
        f"import os, time\nfor _ in range(1200):\n    if os.path.exists({str(release)!r}): break\n"
        "    time.sleep(0.1)")
    kernel.wait_for(lambda m: m["msg_type"] == "execute_input" and m["parent_header"]["msg_id"] == busy_id)
    _send(kernel, comm_id, {"method": "refresh"}, subshell)
    kernel.comm_data(comm_id, "isolated_jobs", timeout=60)  # the open's
    kernel.comm_data(comm_id, "isolated_jobs", timeout=60)  # the refresh's, during the cell
    assert not any(m["msg_type"] == "status" and m["parent_header"].get("msg_id") == busy_id
                   and m["content"]["execution_state"] == "idle" for m in kernel.iopub)
    release.touch()
    _idle(kernel, busy_id)

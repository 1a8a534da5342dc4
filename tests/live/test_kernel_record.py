"""The kernel's record in a real ipykernel (protocol 1.5): sampled from `%load_ext` on whether
or not a panel looks, replayed to a panel that opens or is shown again, hello and history before
any sample, and each cell run with its RSS at start and end and its peak."""

import time
import uuid

import pytest

from kerasmagic.live.protocol import PROTOCOL_VERSION, validate

pytestmark = pytest.mark.kernel

MiB = 2**20


def _open(kernel, visible=True) -> str:
    comm_id = uuid.uuid4().hex
    msg = kernel.client.session.msg(
        "comm_open",
        {"comm_id": comm_id, "target_name": "kerasmagic.live",
         "data": {"method": "open", "visible": visible, "interval_s": 0.5}},
        metadata={"protocol_version": PROTOCOL_VERSION},
    )
    kernel.client.shell_channel.send(msg)
    return comm_id


def _messages(kernel, comm_id) -> list[dict]:
    return [m["content"]["data"] for m in kernel.comm_messages(comm_id)]


def _widest_gap(samples: list[dict]) -> float:
    times = [s["ts"] for s in samples]
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def test_the_kernel_records_with_no_panel_and_a_panel_gets_hello_and_history_first(kernel):
    kernel.execute("%load_ext kerasmagic")
    loaded = time.time()
    time.sleep(4.5)  # nobody looks: the kernel samples anyway (1 Hz)
    comm_id = _open(kernel)
    kernel.comm_data(comm_id, "sample")
    time.sleep(1.5)  # the sampler's own ticks follow, at the panel's 0.5 s
    kernel.execute("pass")
    messages = _messages(kernel, comm_id)
    methods = [m["method"] for m in messages]
    assert methods[:2] == ["hello", "history"], methods[:6]
    for message in messages:
        validate(message, "to_frontend")
    history = messages[1]
    recorded = [s for s in history["samples"] if s["ts"] >= loaded]
    # Four and a half seconds with no panel: at least three samples, none more than ~2 s apart.
    assert len(recorded) >= 3, [s["ts"] - loaded for s in recorded]
    assert _widest_gap(recorded) < 2.5, [round(s["ts"] - loaded, 2) for s in recorded]
    assert all(s["interval_s"] == 1.0 for s in recorded)
    live = [m for m in messages if m["method"] == "sample"]
    assert live and all(s["ts"] > history["samples"][-1]["ts"] for s in live)
    assert 0.5 in {s["interval_s"] for s in live}  # the panel's interval while it looks


def test_a_panel_shown_again_gets_what_it_missed_while_hidden(kernel):
    kernel.execute("%load_ext kerasmagic")
    comm_id = _open(kernel)
    kernel.comm_data(comm_id, "sample")
    kernel.client.shell_channel.send(kernel.client.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"method": "visibility", "visible": False}}))
    kernel.execute("pass")
    hidden_at = len(kernel.comm_messages(comm_id))
    time.sleep(3.5)
    kernel.execute("pass")
    assert not [m for m in _messages(kernel, comm_id)[hidden_at:] if m["method"] == "sample"]
    kernel.client.shell_channel.send(kernel.client.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"method": "visibility", "visible": True}}))
    kernel.execute("pass")
    after = _messages(kernel, comm_id)[hidden_at:]
    replays = [m for m in after if m["method"] == "history"]
    assert len(replays) == 1, [m["method"] for m in after]
    before_hiding = [m for m in _messages(kernel, comm_id)[:hidden_at] if m["method"] in ("sample", "history")]
    last_seen = max(s["ts"] for m in before_hiding for s in (m.get("samples") or [m]))
    missed = replays[0]["samples"]
    # Only what the panel does not have, and all of it: no sample twice, no hole over ~2 s.
    assert missed and min(s["ts"] for s in missed) > last_seen
    assert len(missed) >= 2 and _widest_gap([{"ts": last_seen}, *missed]) < 2.5


def test_a_cell_run_carries_its_rss_change_and_its_peak(kernel):
    kernel.execute("%load_ext kerasmagic")
    comm_id = _open(kernel)
    kernel.comm_data(comm_id, "sample")
    # A passing 300 MiB (written, so it is resident), then 200 MiB kept.
    kernel.execute("spike = b'\\x01' * (300 * 2**20); del spike")
    kernel.execute("kept = b'\\x01' * (200 * 2**20)")
    ended = [m["run"] for m in _messages(kernel, comm_id) if m["method"] == "cell_run" and m["run"]["ended_ts"]]
    spike, kept = ended[-2], ended[-1]
    for run in (spike, kept):
        validate({"method": "cell_run", "ts": run["ended_ts"], "run": run}, "to_frontend")
    # The spike was gone by the cell's end; its peak is the kernel's new high-water mark, exact.
    assert spike["peak_exact"] is True
    assert spike["peak_rss_bytes"] - spike["rss_start_bytes"] >= 290 * MiB
    assert abs(spike["rss_end_bytes"] - spike["rss_start_bytes"]) < 40 * MiB
    # The kept bytes are the cell's change (an outside measurement: the kernel's own VmRSS).
    assert 190 * MiB <= kept["rss_end_bytes"] - kept["rss_start_bytes"] <= 240 * MiB
    status = kernel.execute("print(open('/proc/self/status').read())")
    vm_rss = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    assert abs(vm_rss - kept["rss_end_bytes"]) < 30 * MiB


def test_a_sidebar_of_the_next_kernel_is_told_why_the_previous_one_died(tmp_path):
    from kernel_session import KernelSession

    env = {"JPY_SESSION_NAME": f"/tests/died-{uuid.uuid4().hex}.ipynb",
           "KERASMAGIC_RECORD_DIR": str(tmp_path / "records"), "KERASMAGIC_MEMORY_LIMIT": ""}
    first = KernelSession(env=env)
    try:
        first.execute("%load_ext kerasmagic")
        # The next cell's number, known before it runs: its execute_input may never arrive, as
        # ipykernel sends it from its IOPub thread and os._exit can come first (seen in CI).
        died = first.last_execution_count + 1
        first.client.execute("import os; os._exit(1)")
        process = first.manager.provisioner.process
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process.poll() == 1
    finally:
        first.shutdown()
    second = KernelSession(env=env)
    try:
        said = second.execute("%load_ext kerasmagic")
        comm_id = _open(second)
        second.comm_data(comm_id, "sample")
        messages = _messages(second, comm_id)
        assert [m["method"] for m in messages][:3] == ["hello", "history", "postmortem"]
        postmortem = messages[2]
        validate(postmortem, "to_frontend")
        assert postmortem["execution_count"] == died
        assert postmortem["text"] in said  # the same sentence as the cell's output
        assert f"while cell [{died}] ran" in postmortem["text"] and "exited unexpectedly" in postmortem["text"]
    finally:
        second.shutdown()

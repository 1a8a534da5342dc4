"""The comm channel in a real ipykernel through jupyter_client: what the sidebar relies on."""

import json
import subprocess
import sys

import pytest

from kerasmagic.live.protocol import validate

pytestmark = pytest.mark.kernel

# The live threads (the sampler): the memory guard's thread runs in every kernel that loaded kerasmagic.
THREADS = ("import threading; "
           "print(sorted(t.name for t in threading.enumerate() if t.name.startswith('kerasmagic-live')))")


def _load_and_open(kernel, **open_data):
    kernel.execute("%load_ext kerasmagic")
    comm_id = kernel.open_comm(data={"method": "open", "visible": True, **open_data})
    hello = kernel.comm_data(comm_id, "hello")
    return comm_id, hello


def test_channel_opens_with_hello_facts_and_sample(kernel):
    comm_id, hello = _load_and_open(kernel)
    assert validate(hello, "to_frontend") and hello["protocol_version"].startswith("1.")
    facts = kernel.comm_data(comm_id, "facts")
    sample = kernel.comm_data(comm_id, "sample")
    validate(facts, "to_frontend")
    validate(sample, "to_frontend")
    assert sample["rss_bytes"] > 10_000_000
    assert facts["tf_status"]["reason"] == "not_imported"  # the kernel did not import TF for us
    assert json.loads(kernel.execute(THREADS).replace("'", '"')) == ["kerasmagic-live-sampler"]


def test_samples_arrive_while_a_cell_runs(kernel):
    comm_id, _ = _load_and_open(kernel, interval_s=0.5)
    kernel.comm_data(comm_id, "sample")
    started = len(kernel.iopub)
    kernel.execute("import time; time.sleep(3)")
    during = [m["content"]["data"] for m in kernel.iopub[started:]
              if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id
              and m["content"]["data"]["method"] == "sample"]
    # The cell holds the shell channel for 3 s: only the sampler thread can have sent these.
    assert len(during) >= 4, len(during)
    assert during[-1]["ts"] - during[0]["ts"] >= 1.5
    # ...and the main-thread facts follow the cell (the first facts came on open, after cell 1).
    assert kernel.comm_data(comm_id, "facts")["execution_count"] == 1
    facts = kernel.comm_data(comm_id, "facts")
    assert facts["execution_count"] == 2


def test_facts_name_the_cell_that_just_ran(kernel):
    """ "After cell [N]": N is the cell that ran, as In[N] numbers it (IPython has counted on by then)."""
    comm_id, _ = _load_and_open(kernel)
    opened = kernel.comm_data(comm_id, "facts")
    kernel.execute("x = 1")
    ran = [m for m in kernel.iopub if m["msg_type"] == "execute_input"][-1]["content"]["execution_count"]
    assert opened["execution_count"] == ran - 1  # on open: the %load_ext cell, the last one run
    assert kernel.comm_data(comm_id, "facts")["execution_count"] == ran
    kernel.send_comm(comm_id, {"method": "refresh"})
    assert kernel.comm_data(comm_id, "facts")["execution_count"] == ran


def test_major_version_mismatch_is_refused(kernel):
    kernel.execute("%load_ext kerasmagic")
    comm_id = kernel.open_comm(protocol_version="2.0.0")
    error = kernel.comm_data(comm_id, "error")
    assert error["code"] == "protocol_mismatch" and "2.0.0" in error["message"]
    kernel.wait_comm_close(comm_id)
    no_version = kernel.open_comm(protocol_version=None)
    assert kernel.comm_data(no_version, "error")["code"] == "protocol_mismatch"
    # A refused frontend is no listener, and makes the kernel sample no faster than its record.
    assert kernel.execute(STATE).split() == ["0", "0", "False"]
    assert kernel.execute(INTERVAL).strip() == "1.0"


def test_malformed_messages_get_errors_and_the_kernel_lives(kernel):
    comm_id, _ = _load_and_open(kernel)
    for bad, code in [("nope", "bad_message"), ({"method": "explode"}, "unknown_method"),
                      ({"method": "configure", "interval_s": "fast"}, "bad_message"),
                      ({"method": "configure", "interval_s": -1}, "bad_message"), ({}, "bad_message"),
                      ({"method": "clear"}, "bad_message"), ([1, 2], "bad_message")]:
        kernel.send_comm(comm_id, bad)
        error = kernel.comm_data(comm_id, "error")
        assert error["code"] == code, (bad, error)
        validate(error, "to_frontend")
    assert kernel.execute("print(6 * 7)").strip() == "42"
    kernel.send_comm(comm_id, {"method": "refresh"})
    kernel.comm_data(comm_id, "facts")
    kernel.comm_data(comm_id, "sample")
    assert "kerasmagic-live-sampler" in kernel.execute(THREADS)


def test_clear_request_runs_clear_tf_and_answers(kernel):
    comm_id, _ = _load_and_open(kernel)
    kernel.send_comm(comm_id, {"method": "clear", "request_id": "c-1"})
    result = kernel.comm_data(comm_id, "clear_result", timeout=60)
    validate(result, "to_frontend")
    assert result["request_id"] == "c-1" and result["ok"], result["text"]
    assert result["text"]


def test_hidden_sidebar_stops_samples(kernel):
    comm_id, _ = _load_and_open(kernel, interval_s=0.2)
    kernel.send_comm(comm_id, {"method": "visibility", "visible": False})
    kernel.execute("import time; time.sleep(0.5)")  # the visibility message is handled first
    mark = len(kernel.iopub)
    kernel.execute("import time; time.sleep(1.2)")
    samples = [m for m in kernel.iopub[mark:] if m["msg_type"] == "comm_msg"
               and m["content"]["data"]["method"] == "sample"]
    assert samples == []


def test_unloaded_kernel_closes_the_comm_at_once(kernel):
    # What the sidebar sees in a kernel without `%load_ext kerasmagic`: an immediate close.
    comm_id = kernel.open_comm()
    kernel.wait_comm_close(comm_id)
    assert kernel.comm_messages(comm_id) == []


def test_unload_leaves_no_thread_and_closes_comms(kernel):
    comm_id, _ = _load_and_open(kernel)
    kernel.comm_data(comm_id, "sample")
    kernel.execute("%unload_ext kerasmagic")
    close = kernel.wait_comm_close(comm_id)
    assert close["content"]["data"] == {"reason": "unloaded"}
    assert kernel.execute(THREADS).strip() == "[]"
    # Loading again works and gives a fresh sampler.
    comm2, _ = _load_and_open(kernel)
    kernel.comm_data(comm2, "sample")
    assert "kerasmagic-live-sampler" in kernel.execute(THREADS)


def test_unload_shuts_nvml_down(kernel):
    # The sampler's first sample initialises NVML (or remembers why there is none);
    # `%unload_ext` must undo that: nvmlShutdown when it started, and forget the state.
    comm_id, _ = _load_and_open(kernel)
    kernel.comm_data(comm_id, "sample")
    state = "from kerasmagic.probes import nvml; print(nvml._init_state is None)"
    assert kernel.execute(state).strip() == "False"
    kernel.execute("%unload_ext kerasmagic")
    assert kernel.execute(state).strip() == "True"


STATE = ("from kerasmagic.live import channel as _c; _ch = _c.active_channel(); "
         "print(_ch.listener_count, _ch.visible_count, _ch.looking)")
INTERVAL = "from kerasmagic.live import channel as _c; print(_c.active_channel().sampler.interval_s)"


def test_every_message_on_open_follows_the_protocol(kernel):
    comm_id, _ = _load_and_open(kernel)
    kernel.comm_data(comm_id, "sample")
    kernel.execute("pass")  # post_run_cell pushes facts after it
    messages = [m["content"]["data"] for m in kernel.comm_messages(comm_id)]
    assert [m["method"] for m in messages][:3] == ["hello", "facts", "sample"]
    for message in messages:
        validate(message, "to_frontend")
    assert "facts" in [m["method"] for m in messages[3:]]


def test_hidden_sidebar_gets_no_facts_and_a_closed_one_unsubscribes(kernel):
    comm_id, _ = _load_and_open(kernel)
    kernel.comm_data(comm_id, "sample")
    assert kernel.execute(STATE).split() == ["1", "1", "True"]
    kernel.send_comm(comm_id, {"method": "visibility", "visible": False})
    assert kernel.execute(STATE).split() == ["1", "0", "False"]  # handled before this cell
    mark = len(kernel.iopub)
    kernel.execute("x = 1")
    kernel.execute("y = 2")
    sent = [m["content"]["data"]["method"] for m in kernel.iopub[mark:]
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id]
    assert "facts" not in sent  # nobody looks: no facts are computed or sent after cells
    kernel.close_comm(comm_id)
    assert kernel.execute(STATE).split() == ["0", "0", "False"]


def test_core_events_are_forwarded_even_to_a_hidden_sidebar(kernel):
    comm_id, _ = _load_and_open(kernel)
    kernel.send_comm(comm_id, {"method": "visibility", "visible": False})
    kernel.execute("from kerasmagic import events; events.publish('clear_tf', {'freed_rss_bytes': 5})")
    event = kernel.comm_data(comm_id, "event")
    validate(event, "to_frontend")
    assert event["kind"] == "clear_tf" and event["payload"] == {"freed_rss_bytes": 5}


def test_unload_removes_the_comm_target_and_the_cell_hook(kernel):
    comm_id, _ = _load_and_open(kernel)
    kernel.comm_data(comm_id, "sample")
    hooks = ("print(sum(type(getattr(f, '__self__', None)).__name__ == 'LiveChannel' "
             "for f in get_ipython().events.callbacks['post_run_cell']))")
    assert kernel.execute(hooks).strip() == "1"
    kernel.execute("%unload_ext kerasmagic")
    kernel.wait_comm_close(comm_id)
    assert kernel.execute(hooks).strip() == "0"
    # The kernel's own manager: the comm package's on ipykernel >= 6.18, its own before (compat).
    targets = "print('kerasmagic.live' in get_ipython().kernel.comm_manager.targets)"
    assert kernel.execute(targets).strip() == "False"
    late = kernel.open_comm()  # a sidebar attaching now finds no target: closed at once
    kernel.wait_comm_close(late)
    assert kernel.comm_messages(late) == []


@pytest.mark.shell
def test_outside_a_kernel_load_ext_registers_no_channel():
    # Plain IPython (a real InteractiveShell, no kernel): no comm target, no sampler.
    code = ("get_ipython().run_line_magic('load_ext', 'kerasmagic')\n"
            "from kerasmagic.live.channel import active_channel\n"
            "import threading\n"
            "print('RESULT', active_channel(),\n"
            "      [t.name for t in threading.enumerate() if t.name.startswith('kerasmagic')])\n")
    run = subprocess.run([sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", code],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "RESULT None []" in run.stdout, run.stdout[-3000:]


# ---- malformed input: every mistake gets a short, proper `error` reply -----------------------


def _open_raw(kernel, data, metadata) -> str:
    """A ``comm_open`` with exactly this data and metadata (KernelSession.open_comm builds them)."""
    import uuid

    comm_id = uuid.uuid4().hex
    msg = kernel.client.session.msg("comm_open", {"comm_id": comm_id, "target_name": "kerasmagic.live", "data": data})
    msg["metadata"] = metadata  # set afterwards: Session.msg() only merges a dict into its own
    kernel.client.shell_channel.send(msg)
    return comm_id


def _closed(kernel, comm_id) -> bool:
    return any(m["msg_type"] == "comm_close" and m["content"].get("comm_id") == comm_id for m in kernel.iopub)


def test_error_replies_cut_a_huge_echoed_value(kernel):
    comm_id, _ = _load_and_open(kernel)
    huge = "x" * 10_000_000
    kernel.send_comm(comm_id, {"method": huge})
    error = kernel.comm_data(comm_id, "error", timeout=60)
    validate(error, "to_frontend")
    assert error["code"] == "unknown_method"
    assert len(error["message"]) < 300 and "(10000000 characters)" in error["message"], error["message"][:300]
    assert len(error["request_method"]) < 200 and error["request_method"].startswith("x" * 80)
    kernel.send_comm(comm_id, {"method": "configure", "interval_s": huge})
    error = kernel.comm_data(comm_id, "error", timeout=60)
    assert error["code"] == "bad_message" and len(error["message"]) < 300, error["message"][:300]
    assert error["request_method"] == "configure"
    # The version refusal echoes the frontend's version: cut as well.
    refused = _open_raw(kernel, {"method": "open"}, {"protocol_version": "9" * 1_000_000})
    error = kernel.comm_data(refused, "error", timeout=60)
    assert error["code"] == "protocol_mismatch" and len(error["message"]) < 500, error["message"][:500]
    assert "(1000000 characters)" in error["message"]
    kernel.wait_comm_close(refused)


def test_open_data_that_is_not_an_open_message_gets_bad_message(kernel):
    kernel.execute("%load_ext kerasmagic")
    for bad in ([1, 2], {"method": "refresh"}, "open", 7, {"visible": True},
                {"method": "open", "visible": "yes"}, {"method": "open", "interval_s": 10**400}):
        comm_id = kernel.open_comm(data=bad)
        error = kernel.comm_data(comm_id, "error")
        validate(error, "to_frontend")
        assert (error["code"], error.get("request_method")) == ("bad_message", "open"), (bad, error)
        # As for any malformed message the comm stays open: the kernel opens it with defaults.
        hello = kernel.comm_data(comm_id, "hello")
        assert hello["interval_s"] == 1.0, (bad, hello)
        kernel.comm_data(comm_id, "sample")
        assert not _closed(kernel, comm_id), bad
        assert [m["content"]["data"]["method"] for m in kernel.comm_messages(comm_id)][:2] == ["error", "hello"]
    # Empty data is a plain open with defaults, without an error.
    plain = _open_raw(kernel, {}, {"protocol_version": "1.0.0"})
    kernel.comm_data(plain, "hello")
    assert "error" not in [m["content"]["data"]["method"] for m in kernel.comm_messages(plain)]
    assert kernel.execute(STATE).split()[0] == "8"


def test_malformed_open_metadata_gets_an_error_reply_and_the_kernel_lives(kernel):
    kernel.execute("%load_ext kerasmagic")
    cases = [
        ([1, 2], "protocol_mismatch"),
        ("1.0.0", "protocol_mismatch"),
        ({"protocol_version": "1" * 5000}, "protocol_mismatch"),
        ({"protocol_version": "1" * 5000 + ".0.0"}, "protocol_mismatch"),
        ({"protocol_version": "\u00b9.0.0"}, "protocol_mismatch"),  # a superscript one: isdigit() but not int()
        ({"protocol_version": ["1.0.0"]}, "protocol_mismatch"),
        ({"protocol_version": 10**400}, "protocol_mismatch"),
    ]
    for metadata, code in cases:
        comm_id = _open_raw(kernel, {"method": "open", "visible": True}, metadata)
        error = kernel.comm_data(comm_id, "error")
        validate(error, "to_frontend")
        assert error["code"] == code, (metadata, error)
        assert len(error["message"]) < 500, error["message"][:500]
        assert kernel.wait_comm_close(comm_id)["content"]["data"] == {"reason": "protocol_mismatch"}
        assert [m["content"]["data"]["method"] for m in kernel.comm_messages(comm_id)] == ["error"]
    assert kernel.execute("print(6 * 7)").strip() == "42"
    assert kernel.execute(STATE).split() == ["0", "0", "False"]
    # A well-formed open still works afterwards.
    comm_id = kernel.open_comm()
    kernel.comm_data(comm_id, "hello")
    kernel.comm_data(comm_id, "sample")


LOGGED = """
import logging
from kerasmagic import events
from kerasmagic.live import channel as _c
_records = []
class _Keep(logging.Handler):
    def emit(self, record):
        _records.append(record)
_log = logging.getLogger("kerasmagic.live.channel")
_log.addHandler(_Keep()); _log.propagate = False
_ch = _c.active_channel()
class _DeadComm:
    comm_id = "dead"
    def send(self, *args, **kwargs):
        raise RuntimeError("frontend gone")
    def close(self, *args, **kwargs):
        raise RuntimeError("cannot close")
def _broken_view(message):
    raise RuntimeError("view broke")
_ch._listeners["dead"] = {"comm": _DeadComm(), "visible": True, "ready": True}
_stop = _ch.add_listener(_broken_view)
for _ in range(3):
    events.publish("clear_tf", {"freed_rss_bytes": 1})
class _GoneManager:
    def unregister_target(self, *args):
        raise RuntimeError("manager gone")
_c._comm_manager = lambda shell: _GoneManager()
get_ipython().run_line_magic("unload_ext", "kerasmagic")
for _r in _records:
    print("LOG", _r.levelname, _r.exc_info is not None and str(_r.exc_info[1]))
"""


def test_channel_failures_are_logged_and_the_kernel_lives(kernel):
    comm_id, _ = _load_and_open(kernel)
    out = kernel.execute(LOGGED)
    logged = [line.split(" ", 2)[1:] for line in out.splitlines() if line.startswith("LOG ")]
    reasons = [reason for _, reason in logged]
    # Each failure is logged with its traceback; a target failing on every message is logged once.
    for reason in ("view broke", "frontend gone", "cannot close", "manager gone"):
        assert reasons.count(reason) == 1, (reason, out)
    assert all(level in ("WARNING", "ERROR") for level, _ in logged), out
    # The live frontend still got all three events despite its broken neighbours.
    events = [m for m in kernel.comm_messages(comm_id) if m["content"]["data"]["method"] == "event"]
    assert len(events) == 3
    assert kernel.execute("print(6 * 7)").strip() == "42"
    assert kernel.execute(THREADS).strip() == "[]"

"""The channel's logic with in-memory comms (the real-kernel tests are in tests/kernel)."""

import pytest

from kerasmagic import events
from kerasmagic.live import channel as channel_module
from kerasmagic.live.protocol import PROTOCOL_VERSION, validate

pytestmark = pytest.mark.unit


class FakeComm:
    def __init__(self, comm_id="c1"):
        self.comm_id = comm_id
        self.sent = []
        self.closed = None
        self.msg_cb = self.close_cb = None

    def send(self, data=None, metadata=None):
        self.sent.append(data)

    def close(self, data=None):
        self.closed = data

    def on_msg(self, cb):
        self.msg_cb = cb

    def on_close(self, cb):
        self.close_cb = cb

    def methods(self):
        return [m["method"] for m in self.sent]

    def deliver(self, data):
        self.msg_cb({"content": {"comm_id": self.comm_id, "data": data}})


class FakeEvents:
    def __init__(self):
        self.hooks = []

    def register(self, name, fn):
        self.hooks.append((name, fn))

    def unregister(self, name, fn):
        self.hooks.remove((name, fn))


class FakeShell:
    kernel = object()
    execution_count = 3
    user_ns: dict = {}
    user_ns_hidden: dict = {}

    def __init__(self):
        self.events = FakeEvents()


class FakeManager:
    def __init__(self):
        self.targets = {}

    def register_target(self, name, fn):
        self.targets[name] = fn

    def unregister_target(self, name, fn):
        return self.targets.pop(name)


@pytest.fixture
def live(monkeypatch):
    manager = FakeManager()
    monkeypatch.setattr(channel_module, "_comm_manager", lambda: manager)
    monkeypatch.setattr(
        channel_module,
        "_facts",
        lambda shell: {
            "method": "facts", "ts": 1.0, "execution_count": shell.execution_count,
            "tf_status": "running", "keras_status": "imported", "graph_op_count": 0,
            "custom_gradient_entries": 0, "name_counters": {}, "live_models": [],
        },
    )
    shell = FakeShell()
    channel_module.register(shell)
    yield shell, manager
    channel_module.unregister(shell)


def _open(manager, comm, version=PROTOCOL_VERSION, data=None):
    manager.targets["kerasmagic.live"](
        comm, {"content": {"data": data or {"method": "open", "visible": True}},
               "metadata": {"protocol_version": version}}
    )


def test_outside_a_kernel_register_is_a_no_op():
    class NoKernel:
        pass

    channel_module.register(NoKernel())
    assert channel_module.active_channel() is None


def test_open_says_hello_then_facts_and_sample(live):
    shell, manager = live
    comm = FakeComm()
    _open(manager, comm)
    assert comm.methods()[:3] == ["hello", "facts", "sample"]
    for message in comm.sent:
        validate(message, "to_frontend")
    assert channel_module.active_channel().sampler.thread.is_alive()
    assert ("post_run_cell", channel_module.active_channel().post_run_cell) in shell.events.hooks


def test_major_mismatch_is_refused_and_closed(live):
    _, manager = live
    comm = FakeComm()
    _open(manager, comm, version="2.0.0")
    assert comm.sent[0]["method"] == "error" and comm.sent[0]["code"] == "protocol_mismatch"
    assert comm.closed == {"reason": "protocol_mismatch"}
    assert channel_module.active_channel().listener_count == 0


@pytest.mark.parametrize(
    "data, code",
    [("nope", "bad_message"), ({"method": "explode"}, "unknown_method"),
     ({"method": "configure", "interval_s": -1}, "bad_message"), ({}, "bad_message")],
)
def test_bad_messages_get_an_error_and_the_channel_lives(live, data, code):
    _, manager = live
    comm = FakeComm()
    _open(manager, comm)
    comm.deliver(data)
    assert comm.sent[-1]["method"] == "error" and comm.sent[-1]["code"] == code
    mark = len(comm.sent)
    comm.deliver({"method": "refresh"})
    after = comm.methods()[mark:]  # the sampler thread may interleave its own samples
    assert "facts" in after and "sample" in after[after.index("facts"):]
    assert channel_module.active_channel().sampler.thread.is_alive()


def test_hidden_sidebar_pauses_sampling_and_close_unsubscribes(live):
    _, manager = live
    comm = FakeComm()
    _open(manager, comm)
    channel = channel_module.active_channel()
    comm.deliver({"method": "visibility", "visible": False})
    assert channel.visible_count == 0 and not channel.sampler._active
    channel.post_run_cell(None)
    before = len(comm.sent)
    channel.post_run_cell(None)
    assert len(comm.sent) == before  # nobody looks: no facts are computed or sent
    comm.close_cb({"content": {"comm_id": comm.comm_id}})
    assert channel.listener_count == 0


def test_core_events_are_forwarded(live):
    _, manager = live
    comm = FakeComm()
    _open(manager, comm)
    events.publish("clear_tf", {"freed_rss_bytes": 5})
    assert comm.sent[-1]["method"] == "event" and comm.sent[-1]["kind"] == "clear_tf"
    assert comm.sent[-1]["payload"] == {"freed_rss_bytes": 5}


def test_unregister_closes_comms_and_joins_thread(live):
    shell, manager = live
    comm = FakeComm()
    _open(manager, comm)
    thread = channel_module.active_channel().sampler.thread
    channel_module.unregister(shell)
    assert not thread.is_alive()
    assert comm.closed == {"reason": "unloaded"}
    assert "kerasmagic.live" not in manager.targets and not shell.events.hooks

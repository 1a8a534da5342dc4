"""What a newly opened comm receives first: ``hello``, then ``history``, and only then pushes.

The sampler ticks on its own thread while a comm opens on a subshell or the main thread; a
sample pushed between the two would reach a page still waiting for the replay, which drops
the replay's older points (its series must stay in time order).
"""

from __future__ import annotations

import threading
import time

import pytest

from kerasmagic.live.channel import LiveChannel
from kerasmagic.live.protocol import PROTOCOL_VERSION


class TickingComm:
    """A comm during whose ``hello`` the sampler ticks, on its own thread as it does in a kernel."""

    def __init__(self, channel: LiveChannel, comm_id: str = "c-1") -> None:
        self.channel = channel
        self.comm_id = comm_id
        self.sent: list[dict] = []
        self.tick_finished: bool | None = None
        self.tick_ts = time.time()

    def send(self, data=None, metadata=None):
        self.sent.append(data)
        if data.get("method") == "hello":
            tick = threading.Thread(target=self.channel._on_sample, args=({"method": "sample", "ts": self.tick_ts},))
            tick.start()
            # Before the fix the tick went to this comm and so waited for this send to end: it
            # could not finish here. Now it skips a comm that has no history yet.
            tick.join(timeout=30)
            self.tick_finished = not tick.is_alive()

    def on_msg(self, callback):
        pass

    def on_close(self, callback):
        pass

    def close(self, data=None):
        pass


@pytest.fixture
def channel():
    channel = LiveChannel(shell=None)
    yield channel
    channel.close()


def test_a_tick_during_hello_waits_for_the_history(channel, monkeypatch):
    monkeypatch.setattr(channel, "_push_now", lambda comm: None)  # facts need a shell; not the point
    comm = TickingComm(channel)
    channel._open(comm, {"content": {"data": {"method": "open", "visible": True}},
                         "metadata": {"protocol_version": PROTOCOL_VERSION}})
    assert comm.tick_finished, "the tick waited on a comm that had not had its history"
    methods = [message["method"] for message in comm.sent]
    assert methods[:2] == ["hello", "history"], methods
    # The tick's sample was kept, so the replay carries it.
    assert [sample["ts"] for sample in comm.sent[1]["samples"]] == [comm.tick_ts]
    # From now on pushes reach it.
    later = {"method": "sample", "ts": comm.tick_ts + 1}
    channel._on_sample(later)
    assert comm.sent[-1] == later


def test_a_comm_closed_before_its_history_gets_none(channel, monkeypatch):
    monkeypatch.setattr(channel, "_push_now", lambda comm: None)
    comm = TickingComm(channel, "c-2")
    original = comm.send

    def send_then_close(data=None, metadata=None):
        original(data, metadata)
        if data.get("method") == "hello":
            channel.on_close({"content": {"comm_id": "c-2"}})

    comm.send = send_then_close
    channel._open(comm, {"content": {"data": {"method": "open", "visible": True}},
                         "metadata": {"protocol_version": PROTOCOL_VERSION}})
    assert [message["method"] for message in comm.sent] == ["hello"]

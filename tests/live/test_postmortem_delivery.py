"""The previous kernel's death reaches a sidebar exactly once, however its open and
``%load_ext``'s note of the death interleave.

In a real kernel the sidebar's open is served by a subshell thread while ``%load_ext`` notes
the death on the main thread; here the two are made to meet at chosen points, through a comm
whose ``send`` notes the death as a given message goes out (a fake at the comm's edge only:
the channel is the real one)."""

from __future__ import annotations

import threading
import time

import pytest

from kerasmagic.live.channel import LiveChannel
from kerasmagic.live.protocol import PROTOCOL_VERSION

pytestmark = pytest.mark.unit  # the real channel, a comm stand-in at its edge, no kernel

DEATH = {"method": "postmortem", "ts": 2.0, "died_ts": 1.0, "execution_count": 3,
         "text": "the previous kernel exited unexpectedly while cell [3] ran"}


class NotingComm:
    """A comm that has the "main thread" note the death while it sends a ``during`` message."""

    def __init__(self, channel: LiveChannel, during: str | None) -> None:
        self.comm_id = "sidebar"
        self.channel, self.during = channel, during
        self.sent: list[dict] = []
        self.main_thread: threading.Thread | None = None

    def send(self, data=None, metadata=None) -> None:
        self.sent.append(data)
        if data.get("method") == self.during:
            self.during = None
            self.main_thread = threading.Thread(target=self.channel.note_previous_death, args=(DEATH,))
            self.main_thread.start()
            # Until the note has chosen whom to tell (it does so under the channel's lock, with
            # the death set); its sends wait for this one, as a real comm's would.
            deadline = time.monotonic() + 10
            while self.channel.previous_death is None and time.monotonic() < deadline:
                time.sleep(0.001)
            with self.channel._lock:
                pass

    def on_msg(self, callback) -> None:
        pass

    def on_close(self, callback) -> None:
        pass

    def close(self, data=None) -> None:
        pass

    def methods(self) -> list[str]:
        return [message["method"] for message in self.sent]


@pytest.fixture
def channel():
    live = LiveChannel(shell=None)
    yield live
    live.close()


def _open(channel: LiveChannel, comm: NotingComm) -> None:
    channel._open(comm, {"content": {"data": {"method": "open", "visible": True, "interval_s": 1.0}},
                         "metadata": {"protocol_version": PROTOCOL_VERSION}})


@pytest.mark.parametrize("noted_during", ["hello", "history", "sample"])
def test_a_death_noted_while_the_sidebar_opens_reaches_it_once(channel, noted_during):
    # "sample": %load_ext noted the death while the open sent its first sample, after the open
    # had looked for a death and before it was ready for broadcasts: the death was lost.
    comm = NotingComm(channel, during=noted_during)
    _open(channel, comm)
    assert comm.main_thread is not None, comm.methods()  # the death was noted in the middle of the open
    comm.main_thread.join(10)
    assert comm.methods().count("postmortem") == 1, comm.methods()
    assert comm.methods().index("postmortem") > comm.methods().index("hello")


def test_a_death_noted_before_or_after_the_open_reaches_it_once(channel):
    before = NotingComm(channel, during=None)
    channel.note_previous_death(DEATH)
    _open(channel, before)
    assert before.methods().count("postmortem") == 1
    assert before.methods()[:3] == ["hello", "history", "postmortem"]

    channel.previous_death = None
    before.comm_id = "first"
    channel._listeners["first"] = channel._listeners.pop("sidebar")
    after = NotingComm(channel, during=None)
    _open(channel, after)
    assert "postmortem" not in after.methods()
    channel.note_previous_death(DEATH)
    assert after.methods().count("postmortem") == 1
    assert before.methods().count("postmortem") == 2  # a second, newer death is told again


def test_the_sidebar_hears_a_time_of_death_only_where_the_watcher_saw_it(monkeypatch):
    """The banner tells the post-mortem's time: the watcher's, where it saw the death; a record's last
    write is a last sign of life (the text says "died after ..."), so the page keeps its own time."""
    from kerasmagic import extension
    from kerasmagic.live import channel

    told: list[dict] = []

    class Recorder:
        def note_previous_death(self, message: dict) -> None:
            told.append(message)

    monkeypatch.setattr(channel, "active_channel", lambda: Recorder())
    cell = {"execution_count": 4, "first_line": "x = big()"}
    extension._tell_the_sidebar({"updated_ts": 10.0, "cell": cell, "death": {"died_ts": 12.5}}, "died at ...")
    extension._tell_the_sidebar({"updated_ts": 10.0, "cell": None}, "died after ... (its last sign of life)")
    assert [(m["died_ts"], m["execution_count"]) for m in told] == [(12.5, 4), (None, None)], told

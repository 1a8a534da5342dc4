"""The sampler thread: schedule, pause, failure handling, teardown (no kernel needed)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kerasmagic.live import protocol
from kerasmagic.live.sampler import THREAD_NAME, ProcessTreeMeter, Sampler, take_sample
from kerasmagic.probes import sample as sample_probe

pytestmark = pytest.mark.unit


def _threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_take_sample_follows_the_protocol():
    sample = take_sample(5)
    assert protocol.validate(sample, "to_frontend") is sample
    assert sample["seq"] == 5 and sample["rss_bytes"] > 0


def _wait_until(condition, timeout_s: float = 15.0) -> None:
    """Poll ``condition`` until true; generous because CI runs this on 2 busy shared cores.

    These tests check behaviour (it samples, it stops, an interval change changes the rate),
    not timings: benchmarks/bench_sampler.py measures those.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.01)


def test_samples_on_schedule_then_stops():
    got = []
    interval = 0.05
    sampler = Sampler(got.append, interval_s=interval)
    sampler.set_active(True)
    _wait_until(lambda: len(got) >= 6)
    sampler.stop()
    assert not _threads()
    stopped_at = len(got)
    time.sleep(0.3)
    assert len(got) == stopped_at  # stop() joined the thread: nothing comes after it
    assert [s["seq"] for s in got] == sorted(s["seq"] for s in got)
    # On a schedule, not in a burst: a late tick is skipped and the next one is a full
    # interval later, so n samples span at least (n - 2) intervals however busy the machine.
    assert got[-1]["ts"] - got[0]["ts"] >= (len(got) - 2) * interval * 0.9


def test_inactive_sampler_sends_nothing():
    got = []
    sampler = Sampler(got.append, interval_s=0.02)
    sampler.set_active(True)
    _wait_until(lambda: len(got) >= 2)
    sampler.set_active(False)
    paused_at = len(got)
    time.sleep(0.5)  # 25 ticks' worth at this interval
    assert len(got) <= paused_at + 1  # at most the sample that was being taken
    assert sampler.thread.is_alive() and not sampler.active  # asleep, not gone
    sampler.set_active(True)
    resumed_from = len(got)
    _wait_until(lambda: len(got) > resumed_from)  # and it wakes up again
    sampler.stop()


def test_failing_probe_becomes_unavailable_and_thread_lives(monkeypatch):
    def broken():
        raise RuntimeError("driver on fire")

    monkeypatch.setattr(sample_probe, "gpu_part", broken)
    got = []
    sampler = Sampler(got.append, interval_s=0.02)
    sampler.set_active(True)
    _wait_until(lambda: len(got) >= 2)  # it kept sampling after the first failure
    assert sampler.thread.is_alive()
    sampler.stop()
    assert got[-1]["gpu"]["status"] == "unavailable"
    assert "driver on fire" in got[-1]["gpu"]["detail"]


def test_failing_send_does_not_kill_the_thread():
    calls = []

    def send(sample):
        calls.append(sample)
        raise OSError("socket closed")

    sampler = Sampler(send, interval_s=0.02)
    sampler.set_active(True)
    _wait_until(lambda: len(calls) >= 3)  # three failed sends, and still sampling
    alive = sampler.thread.is_alive()
    sampler.stop()
    assert alive and sampler.errors == len(calls)
    assert "socket closed" in sampler.last_error


def test_interval_change_takes_effect():
    got = []
    sampler = Sampler(got.append, interval_s=10)
    sampler.set_active(True)
    _wait_until(lambda: len(got) == 1)  # the first tick is immediate...
    time.sleep(0.3)
    assert len(got) == 1  # ...and the next one 10 s away
    sampler.set_interval(0.02)
    # At 10 s this would take 40 s; the new interval must apply to the pending tick at once.
    _wait_until(lambda: len(got) >= 5, timeout_s=15)
    sampler.stop()


# ---- the process tree (protocol 1.6): PSS and the child processes, read seldom -------------

_CHILD = ("import os, subprocess, sys, time\n"
          "block = bytearray(os.urandom(1) * (60 * 2**20))  # written: resident\n"
          "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
          "print(grandchild.pid, flush=True)\n"
          "time.sleep(60)\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PSS and /proc children are Linux's")
def test_process_tree_counts_children_and_grandchildren():
    from kerasmagic.probes import process

    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())
        assert {child.pid, grandchild} <= set(process.descendant_pids())
        tree = process.process_tree_memory()
        assert tree["children_count"] >= 2, tree
        # The child wrote 60 MiB: its RSS and its PSS count them (no one shares them).
        assert tree["children_rss_bytes"] >= 60 * 2**20, tree
        assert tree["children_pss_bytes"] >= 60 * 2**20, tree
        # Shared libraries are shared out: this process's PSS is below its RSS.
        assert 0 < tree["pss_bytes"] < process.rss_bytes(), tree
    finally:
        if grandchild is not None:
            os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()
        child.stdout.close()


def test_the_tree_meter_reads_seldom_and_within_its_cpu_share():
    calls = []

    def costly_read():
        calls.append(time.monotonic())
        time.sleep(0.02)  # 20 ms, like PSS of a 1.2 GiB TensorFlow process
        return {"pss_bytes": 1, "children_count": 0, "children_rss_bytes": 0, "children_pss_bytes": 0}

    meter = ProcessTreeMeter(costly_read)
    first = meter.read()
    assert first["ts"] > 0 and first["pss_bytes"] == 1
    # Carried over: at 0.05 % of a core a 20 ms read may come back at most every 40 s.
    assert all(meter.read() is first for _ in range(50))
    assert len(calls) == 1
    # A panel shown again does not force a read younger than MIN_INTERVAL_S either.
    meter.refresh_soon()
    assert meter.read() is first and len(calls) == 1


def test_the_tree_meter_reads_again_when_due(monkeypatch):
    calls = []
    monkeypatch.setattr(ProcessTreeMeter, "MIN_INTERVAL_S", 0.05)
    meter = ProcessTreeMeter(lambda: calls.append(1) or {"pss_bytes": len(calls), "children_count": 0,
                                                         "children_rss_bytes": 0, "children_pss_bytes": 0})
    assert meter.read()["pss_bytes"] == 1
    _wait_until(lambda: meter.read()["pss_bytes"] == 2)
    # A failing read is an unavailable value, never an exception in the sampler thread.
    broken = ProcessTreeMeter(lambda: 1 / 0)
    assert broken.read()["status"] == "unavailable"


def test_samples_carry_the_tree_only_while_someone_looks():
    got = []
    sampler = Sampler(got.append, interval_s=0.05)
    assert "process_tree" not in sampler.take()  # the record, no panel: no PSS read
    sampler.tree_wanted = True
    sample = sampler.take()
    assert protocol.validate(sample, "to_frontend") is sample
    assert "process_tree" in sample
    if sys.platform.startswith("linux"):
        assert sample["process_tree"]["pss_bytes"] > 0
    sampler.stop()


def test_a_visible_listener_makes_the_channel_read_the_tree():
    from kerasmagic.live.channel import LiveChannel

    channel = LiveChannel(shell=None)
    try:
        channel.start_recording()
        assert not channel.sampler.tree_wanted
        got = []
        stop = channel.add_listener(got.append)
        assert channel.sampler.tree_wanted
        _wait_until(lambda: any("process_tree" in m for m in got if m.get("method") == "sample"))
        stop()
        assert not channel.sampler.tree_wanted
    finally:
        channel.close()


def test_the_tree_meter_reads_again_once_a_child_it_counted_is_gone():
    """Issue 31, item 3: six children's memory stayed on the panel for minutes after they ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    calls = []

    def read():
        calls.append(1)
        alive = [child.pid] if child.poll() is None else []
        return {"pss_bytes": 1, "children_count": len(alive), "children_rss_bytes": 0,
                "children_pss_bytes": 0, "rss_bytes": 100, "child_pids": alive}

    meter = ProcessTreeMeter(read)
    first = meter.read(100)
    assert first["children_count"] == 1 and "child_pids" not in first  # the pids are the meter's, not sent
    time.sleep(ProcessTreeMeter.STALE_REREAD_S)
    assert meter.read(100) is first and len(calls) == 1  # nothing changed: carried over
    child.kill()
    child.wait()
    assert meter.read(100)["children_count"] == 0 and len(calls) == 2


def test_the_tree_meter_reads_again_after_a_jump_in_rss():
    """A PSS of 1.05 GiB beside an RSS of 66.5 MiB: the reading from before the jump goes."""
    calls = []
    meter = ProcessTreeMeter(lambda: calls.append(1) or {
        "pss_bytes": len(calls), "children_count": 0, "children_rss_bytes": 0, "children_pss_bytes": 0,
        "rss_bytes": 2**30, "child_pids": []})
    first = meter.read(2**30)
    # Within the re-read floor, and a small move: carried over.
    assert meter.read(2**30 - 2**20) is first
    time.sleep(ProcessTreeMeter.STALE_REREAD_S)
    assert meter.read(2**30 - 2**20) is first and len(calls) == 1
    assert meter.read(66 * 2**20)["pss_bytes"] == 2


def test_stale_re_reads_stay_within_their_cpu_share():
    """A map whose short jobs end every second makes each reading stale at once: a read that costs
    20 ms may then come every 4 s (0.5 % of a core), not every second."""
    calls = []

    def costly_read():
        calls.append(1)
        time.sleep(0.02)
        # A child that is always already gone (its pid was never a process's): always stale.
        return {"pss_bytes": 1, "children_count": 1, "children_rss_bytes": 0, "children_pss_bytes": 0,
                "rss_bytes": 100, "child_pids": [2**22 + 12345]}

    meter = ProcessTreeMeter(costly_read)
    meter.read(100)
    time.sleep(ProcessTreeMeter.STALE_REREAD_S + 0.1)
    meter.read(100)
    assert len(calls) == 1, "a 20 ms read was repeated after 1 s for a stale reading"
    # Held back by its CPU share, the reading goes out marked stale: the sidebar gives its age.
    carried = meter.for_sample(100)
    assert carried["stale"] is True and carried["period_s"] >= ProcessTreeMeter.MIN_INTERVAL_S


def test_a_sample_says_whether_its_reading_still_describes_the_process():
    """The sidebar has no staleness rule of its own: each sample's ``process_tree`` says ``stale``."""
    calls = []
    meter = ProcessTreeMeter(lambda: calls.append(1) or {
        "pss_bytes": len(calls), "children_count": 0, "children_rss_bytes": 0, "children_pss_bytes": 0,
        "rss_bytes": 2**30, "child_pids": []})
    fresh = meter.for_sample(2**30)
    assert fresh["stale"] is False and fresh["period_s"] == ProcessTreeMeter.MIN_INTERVAL_S
    assert protocol.validate({**take_sample(1), "process_tree": fresh}, "to_frontend")
    # RSS fell by 1 GiB within the re-read floor: the same reading, now stale, and not re-read yet.
    moved = meter.for_sample(66 * 2**20)
    assert moved["stale"] is True and moved["pss_bytes"] == 1 and len(calls) == 1
    assert meter.for_sample(2**30)["stale"] is False  # back where it was read: it describes it again

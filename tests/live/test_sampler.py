"""The sampler thread: schedule, pause, failure handling, teardown (no kernel needed)."""

import threading
import time

import pytest

from kerasmagic.live import protocol
from kerasmagic.live.sampler import THREAD_NAME, Sampler, take_sample
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

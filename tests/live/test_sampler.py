"""The sampler thread: schedule, pause, failure handling, teardown (no kernel needed)."""

import threading
import time

import pytest

from kerasmagic.live import protocol, sampler as sampler_module
from kerasmagic.live.sampler import THREAD_NAME, Sampler, take_sample

pytestmark = pytest.mark.unit


def _threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_take_sample_follows_the_protocol():
    sample = take_sample(5)
    assert protocol.validate(sample, "to_frontend") is sample
    assert sample["seq"] == 5 and sample["rss_bytes"] > 0


def test_samples_on_schedule_then_stops():
    got = []
    sampler = Sampler(got.append, interval_s=0.05)
    sampler.set_active(True)
    time.sleep(0.53)
    sampler.stop()
    assert 8 <= len(got) <= 13, len(got)
    gaps = [b["ts"] - a["ts"] for a, b in zip(got, got[1:])]
    assert max(gaps) < 0.15
    assert [s["seq"] for s in got] == sorted(s["seq"] for s in got)
    assert not _threads()


def test_inactive_sampler_sends_nothing():
    got = []
    sampler = Sampler(got.append, interval_s=0.02)
    sampler.set_active(True)
    time.sleep(0.1)
    sampler.set_active(False)
    time.sleep(0.05)
    count = len(got)
    time.sleep(0.2)
    assert len(got) == count and count > 0
    sampler.stop()


def test_failing_probe_becomes_unavailable_and_thread_lives(monkeypatch):
    def broken():
        raise RuntimeError("driver on fire")

    monkeypatch.setattr(sampler_module, "_gpu_part", broken)
    got = []
    sampler = Sampler(got.append, interval_s=0.02)
    sampler.set_active(True)
    time.sleep(0.15)
    assert sampler.thread.is_alive()
    sampler.stop()
    assert got and got[-1]["gpu"]["status"] == "unavailable"
    assert "driver on fire" in got[-1]["gpu"]["detail"]


def test_failing_send_does_not_kill_the_thread():
    calls = []

    def send(sample):
        calls.append(sample)
        raise OSError("socket closed")

    sampler = Sampler(send, interval_s=0.02)
    sampler.set_active(True)
    time.sleep(0.12)
    alive = sampler.thread.is_alive()
    sampler.stop()
    assert alive and len(calls) >= 3 and sampler.errors == len(calls)


def test_interval_change_takes_effect():
    got = []
    sampler = Sampler(got.append, interval_s=10)
    sampler.set_active(True)
    time.sleep(0.05)
    assert len(got) == 1  # the first tick is immediate, the next one 10 s away
    sampler.set_interval(0.02)
    time.sleep(0.2)
    sampler.stop()
    assert len(got) >= 5

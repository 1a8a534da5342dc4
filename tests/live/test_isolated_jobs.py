"""The kernel's isolated_* events folded into the sidebar's small messages (kerasmagic/live/jobs.py),
and the channel sending them only to frontends that speak protocol 1.1."""

import json
import subprocess
import sys

import pytest

from kerasmagic import events
from kerasmagic.live import jobs as jobs_module
from kerasmagic.live.jobs import IsolatedJobs
from kerasmagic.live.protocol import speaks_at_least, validate

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def started(job_id="j1", label="fold", on="local", node=None, ts=100.0):
    return {"job_id": job_id, "label": label, "on": on, "node": node, "ts": ts}


def sample(job_id="j1", rss=100, gpu=None, ts=100.5):
    gpu_part = gpu if gpu is not None else {"status": "unavailable", "reason": "not_imported", "detail": ""}
    return {"job_id": job_id, "ts": ts, "pid": 4321, "rss_bytes": rss, "gpu": gpu_part,
            "tf": {"status": "unavailable", "reason": "not_imported", "detail": ""}}


def done(job_id="j1", status="ok", **extra):
    # What IsolatedResult.to_dict() carries (the fields we read, plus a few we must drop).
    payload = {"job_id": job_id, "label": "fold", "status": status, "error": None, "wall_s": 2.5, "on": "local",
               "node": {}, "child_rss_peak_bytes": 900, "child_gpu_process_peak_bytes": {},
               "worker_state": "warm", "sent": [{"name": "x", "how": "pickle", "size_bytes": 10**6}],
               "kernel_rss_before_bytes": 1, "agent": {}}
    payload.update(extra)
    return payload


def test_every_message_follows_the_protocol_and_is_small():
    table = IsolatedJobs(clock=Clock())
    messages = [
        table.on_event("isolated_started", started()),
        table.on_event("isolated_sample", sample()),
        table.on_event("isolated_done", done(status="error", error="ValueError: bad item\nsecond line")),
        table.snapshot(),
    ]
    for message in messages:
        assert validate(message, "to_frontend") is message
        assert len(json.dumps(message)) < 600, message  # never the whole report
    assert messages[2]["job"]["error"] == "ValueError: bad item"
    assert "sent" not in json.dumps(messages[2]) and "worker_state" not in messages[2]["job"]


def test_samples_are_throttled_per_job_and_the_peaks_survive_the_dropped_ones():
    clock = Clock()
    table = IsolatedJobs(clock=clock)
    table.on_event("isolated_started", started("a"))
    table.on_event("isolated_started", started("b"))
    sent = []
    for step in range(20):  # 4 Hz for 5 s, two jobs
        clock.now = 1000.0 + step * 0.25
        for job_id, rss in (("a", 100 + step), ("b", 500 - step)):
            message = table.on_event("isolated_sample", sample(job_id, rss=rss))
            if message is not None:
                sent.append(message)
    per_job = {job_id: [m for m in sent if m["job_id"] == job_id] for job_id in "ab"}
    assert [len(v) for v in per_job.values()] == [10, 10]  # 2 a second, each job its own budget
    assert per_job["b"][0]["rss_peak_bytes"] == 500
    # The last sample of "a" (rss 119) was dropped, but the peak it set is in the snapshot.
    assert per_job["a"][-1]["rss_peak_bytes"] == 118
    snapshot = {job["job_id"]: job for job in table.snapshot()["jobs"]}
    assert snapshot["a"]["rss_peak_bytes"] == 119 and snapshot["b"]["rss_peak_bytes"] == 500


def test_gpu_peaks_are_kept_per_device_and_summed():
    clock = Clock()
    table = IsolatedJobs(clock=clock)
    table.on_event("isolated_started", started())
    gpus = [[{"index": 0, "process_used_bytes": 300}, {"index": 1, "process_used_bytes": 50}],
            [{"index": 0, "process_used_bytes": 100}, {"index": 1, "process_used_bytes": 200}]]
    for gpu in gpus:
        clock.now += 1
        message = table.on_event("isolated_sample", sample(gpu=gpu))
    assert message["gpu_peak_bytes"] == 500  # 300 on GPU 0 + 200 on GPU 1
    finished = table.on_event("isolated_done", done(child_gpu_process_peak_bytes={"GPU:0": 310, "GPU:1": 200}))
    assert finished["job"]["gpu_peak_bytes"] == 510  # the result's own peaks win
    table.on_event("isolated_started", started("c"))
    table.on_event("isolated_sample", sample("c", gpu=gpus[0]))
    assert table.on_event("isolated_done", done("c", child_gpu_process_peak_bytes={}))["job"]["gpu_peak_bytes"] == 350


#: The H100's isolated Keras-on-torch fit (benchmarks/results/h100-2026-11-22/gpu_report.json):
#: torch's peak and NVML's figure for the worker.
TORCH_PEAK, NVML_PEAK = 72541184, 851443712


def test_the_workers_allocator_peaks_travel_where_nvml_cannot_see_it():
    clock = Clock()
    table = IsolatedJobs(clock=clock)
    table.on_event("isolated_started", started())
    # In a container NVML has no number for the worker; torch's own counters do.
    not_seen = [{"status": "unavailable", "reason": "not_found", "detail": "no process of this pid"}]
    before_cuda = dict(sample(gpu=not_seen), allocators={
        "torch": {"status": "unavailable", "reason": "not_started", "detail": ""},
        "jax": {"status": "unavailable", "reason": "not_imported", "detail": ""}})
    message = table.on_event("isolated_sample", before_cuda)
    assert "torch_peak_bytes" not in message and "jax_peak_bytes" not in message  # never a 0 not read
    clock.now += 1
    message = table.on_event("isolated_sample", dict(sample(gpu=not_seen), allocators={
        "torch": {"cuda:0": {"peak_allocated_bytes": TORCH_PEAK, "peak_reserved_bytes": 73400320}},
        "jax": {"status": "unavailable", "reason": "not_imported", "detail": ""}}))
    assert message["gpu_peak_bytes"] is None and message["torch_peak_bytes"] == TORCH_PEAK
    assert "jax_peak_bytes" not in message
    assert validate(message, "to_frontend") is message
    # The report's figures win; a report without them (the worker died) keeps the samples'.
    finished = table.on_event("isolated_done", done(
        child_torch_peak_allocated_bytes={"cuda:0": TORCH_PEAK + 1},
        child_jax_peak_bytes={"status": "unavailable", "reason": "not_imported", "detail": ""}))
    assert finished["job"]["torch_peak_bytes"] == TORCH_PEAK + 1 and "jax_peak_bytes" not in finished["job"]
    assert validate(finished, "to_frontend") is finished
    table.on_event("isolated_started", started("dead"))
    clock.now += 1
    table.on_event("isolated_sample", dict(sample("dead"), allocators={"jax": {"gpu:0": {"peak_bytes": 5}}}))
    died = table.on_event("isolated_done", done("dead", status="crash"))["job"]
    assert died["jax_peak_bytes"] == 5 and "torch_peak_bytes" not in died
    assert table.snapshot()["jobs"][0]["jax_peak_bytes"] == 5


def test_done_keeps_the_last_n_finished_newest_first_and_running_first():
    table = IsolatedJobs(keep=3, clock=Clock())
    for index in range(5):
        table.on_event("isolated_started", started(f"j{index}", ts=100.0 + index))
        table.on_event("isolated_done", done(f"j{index}"))
    table.on_event("isolated_started", started("live", ts=200.0))
    jobs = table.snapshot()["jobs"]
    assert [job["job_id"] for job in jobs] == ["live", "j4", "j3", "j2"]
    assert jobs[0]["status"] == "running" and jobs[0]["wall_s"] is None
    assert jobs[1]["started_ts"] == 104.0 and jobs[1]["wall_s"] == 2.5


def test_where_the_job_ran():
    table = IsolatedJobs(clock=Clock())
    node = {"node_id": "abc" * 10, "ip": "10.0.0.12", "hostname": "gpu-node-2", "gpu_ids": ["0"]}
    assert table.on_event("isolated_started", started(on="ray", node=node))["job"]["node"] == \
        {"ip": "10.0.0.12", "hostname": "gpu-node-2"}
    local = table.on_event("isolated_done", done("other", node={}))
    assert local["job"]["node"] is None and local["job"]["on"] == "local"


def test_odd_events_are_ignored_not_raised():
    table = IsolatedJobs(clock=Clock())
    assert table.on_event("isolated_sample", sample("never-started")) is None
    assert table.on_event("isolated_started", {"label": "no id"}) is None
    assert table.on_event("isolated_done", "not a dict") is None
    assert table.on_event("clear_tf", {"job_id": "x"}) is None
    # A done without a started (kerasmagic loaded mid-job) still lists the job.
    message = table.on_event("isolated_done", done("late", status="timeout", wall_s=None,
                                                   child_rss_peak_bytes={"status": "unavailable"}))
    assert validate(message, "to_frontend") and message["job"]["rss_peak_bytes"] is None


def test_running_jobs_are_bounded():
    table = IsolatedJobs(clock=Clock())
    for index in range(jobs_module.RUNNING_LIMIT + 5):
        table.on_event("isolated_started", started(f"j{index}"))
    jobs = table.snapshot()["jobs"]
    assert len(jobs) == jobs_module.RUNNING_LIMIT and jobs[0]["job_id"] == "j5"


def test_only_frontends_that_speak_1_1_get_the_new_messages():
    assert speaks_at_least("1.1.0", 1) and speaks_at_least("1.12.3", 1)
    for old in ("1.0.0", "1", "1.x.0", None, 1.1, "2.1.0", "1." + "1" * 20):
        assert not speaks_at_least(old, 1), old


class FakeComm:
    def __init__(self, comm_id):
        self.comm_id = comm_id
        self.sent = []

    def send(self, data=None, metadata=None):
        self.sent.append(data)


def test_the_channel_routes_isolated_events_to_new_frontends_only():
    from kerasmagic.live.channel import LiveChannel

    channel = LiveChannel(shell=None)
    try:
        new, old, hidden = FakeComm("new"), FakeComm("old"), FakeComm("hidden")
        # Still opening (hello and history not yet sent): it must get nothing before them.
        opening = FakeComm("opening")
        channel._listeners.update({
            "new": {"comm": new, "visible": True, "jobs": True, "ready": True},
            "old": {"comm": old, "visible": True, "jobs": False, "ready": True},
            "hidden": {"comm": hidden, "visible": False, "jobs": True, "ready": True},
            "opening": {"comm": opening, "visible": True, "jobs": True, "ready": False},
        })
        events.publish("isolated_started", started())
        events.publish("isolated_sample", sample())
        events.publish("isolated_done", done())
        events.publish("clear_tf", {"freed_rss_bytes": 5})
        methods = lambda comm: [(m["method"], m.get("kind")) for m in comm.sent]  # noqa: E731
        assert methods(new) == [("isolated_started", None), ("isolated_sample", None), ("isolated_done", None),
                                ("event", "clear_tf")]
        assert methods(old) == [("event", "clear_tf")]  # no isolated_* at all, not even as `event`
        assert methods(hidden) == [("isolated_started", None), ("isolated_done", None), ("event", "clear_tf")]
        assert methods(opening) == []
        assert [j["job_id"] for j in channel.isolated.snapshot()["jobs"]] == ["j1"]
    finally:
        channel.close()


def test_docstring_examples_hold():
    code = ("import doctest, sys, kerasmagic.live.jobs as m; "
            "sys.exit(1 if doctest.testmod(m, optionflags=doctest.ELLIPSIS).failed else 0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]

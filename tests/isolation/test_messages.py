"""Isolation's messages: one typed definition per kind, decoded per channel, anything else refused."""

from __future__ import annotations

import pickle

import pytest

from kerasmagic.isolation import messages
from kerasmagic.isolation.job import Job
from kerasmagic.isolation.messages import (
    CONTROL_CHANNEL,
    EVENT_CHANNEL,
    JOB_CHANNEL,
    Done,
    Final,
    Fork,
    MessageError,
    Output,
    Raised,
    Ready,
    RunJob,
    Sample,
    UnknownMessage,
)

pytestmark = pytest.mark.unit

EXAMPLES = [
    (JOB_CHANNEL, Ready(pid=4, rss_bytes=10, import_s=0.0, forked=True, modules=["numpy"], sender=4)),
    (JOB_CHANNEL, messages.ImportFailed(error="ImportError: no jax", traceback="...")),
    (JOB_CHANNEL, Sample(reading={"pid": 4, "ts": 1.0, "rss_bytes": 10, "tf": {"status": "unavailable"}}, sender=4)),
    (JOB_CHANNEL, messages.Display(data={"text/plain": "3"}, metadata={})),
    (JOB_CHANNEL, Done(outputs={"x": {"format": "pickle", "data": b"", "buffers": []}}, value=None, run_s=1.0,
                       final_sample={"rss_bytes": 1}, first_line_ts=2.0, imported=["pandas"])),
    (JOB_CHANNEL, Raised(stage="code", exc_type="ValueError", exc_message="bad", traceback="...", not_returned={})),
    (CONTROL_CHANNEL, Fork(job_id=1, env={"CUDA_VISIBLE_DEVICES": "0"}, directory="/dev/shm/job")),
    (CONTROL_CHANNEL, messages.Retire()),
    (CONTROL_CHANNEL, messages.Reap(pid=9)),
    (CONTROL_CHANNEL, Ready(pid=3, import_s=4.2, rss_bytes=600, threads=["python"], modules=["tensorflow"])),
    (CONTROL_CHANNEL, messages.Forked(job_id=1, pid=9)),
    (CONTROL_CHANNEL, messages.Refused(job_id=1, reason="a thread started after the imports", retire=True)),
    (CONTROL_CHANNEL, messages.Exited(pid=9, returncode=-9)),
    (EVENT_CHANNEL, messages.Accepted()),
    (EVENT_CHANNEL, messages.Placed(node_id="ab12", gpu_ids=["0"])),
    (EVENT_CHANNEL, messages.NoAgent(node_id="ab12", dead_agent=True)),
    (EVENT_CHANNEL, Output(stream="stdout", text="epoch 1\n")),
    (EVENT_CHANNEL, Final(result=b"report", error=None, done=Done(value=None), files={"v.pickle": b"x"}, agent={})),
]


@pytest.mark.parametrize("channel, message", EXAMPLES, ids=lambda item: getattr(item, "kind", None) or str(item))
def test_every_message_survives_its_channel(channel, message):
    wire = pickle.loads(messages.dumps(message))  # noqa: S301 - our own bytes: what a local channel carries
    assert type(wire) is dict and next(iter(wire)) == "kind" and wire["kind"] == message.kind
    assert channel.decode(wire) == message


def test_a_job_travels_with_its_fields_and_where_it_runs():
    job = Job("code", "/tmp/job", code="y = x * 2", inputs={"x": {"format": "pickle"}}, outputs=["y"], seed=3,
              memory_limit_bytes=1 << 30)
    wire = RunJob(job=job, cwd="/home/me", sys_path=["/lib"]).to_wire()
    assert "memory_limit_bytes" not in wire and "owns_directory" not in wire  # the kernel's, not the worker's
    back = JOB_CHANNEL.decode(wire)
    assert isinstance(back, RunJob) and back.cwd == "/home/me" and back.sys_path == ["/lib"]
    assert (back.job.code, back.job.outputs, back.job.seed, back.job.directory) == ("y = x * 2", ["y"], 3, "/tmp/job")


def test_a_kind_from_another_channel_is_refused_by_name():
    with pytest.raises(UnknownMessage, match="the job channel does not carry 'fork' messages; it carries display, "):
        JOB_CHANNEL.decode(Fork(job_id=1, env={}, directory="/x").to_wire())
    with pytest.raises(UnknownMessage, match="does not carry 'bogus'"):
        EVENT_CHANNEL.decode({"kind": "bogus"})


@pytest.mark.parametrize("wire, words", [
    ({"kind": "exited", "pid": 3}, "the 'exited' message is incomplete"),
    ({"kind": "forked", "job_id": 1, "pid": 2, "extra": 1}, "the 'forked' message has no field 'extra'"),
    (["kind", "ready"], "carries dicts with a 'kind'; got list"),
    ({"pid": 3}, "carries dicts with a 'kind'"),
])
def test_what_is_not_a_message_is_refused_with_what_is_wrong(wire, words):
    with pytest.raises(MessageError, match=words):
        CONTROL_CHANNEL.decode(wire)


def test_every_kind_is_defined_once():
    kinds = [definition.kind for definition in vars(messages).values()
             if isinstance(definition, type) and issubclass(definition, messages.Message) and definition.kind]
    assert len(kinds) == len(set(kinds)) == 18
    on_channels = set(JOB_CHANNEL.kinds) | set(CONTROL_CHANNEL.kinds) | set(EVENT_CHANNEL.kinds)
    assert on_channels == set(kinds)

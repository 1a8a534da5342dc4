"""Records (one wire form from the fields) and the one memory sample (issue 11, items 2 and 3)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kerasmagic import clean
from kerasmagic.clean import CleanReport, CleanStep, clear_tf
from kerasmagic.isolation.child import worker
from kerasmagic.isolation.job import Job
from kerasmagic.isolation.messages import JOB_CHANNEL, RunJob
from kerasmagic.isolation.outcome import record_sample
from kerasmagic.isolation.result import IsolatedResult, ShippedName
from kerasmagic.live import protocol
from kerasmagic.live.widget import _tf_totals
from kerasmagic.measuring import CellMeasurement
from kerasmagic.probes import Unavailable
from kerasmagic.probes import sample as sample_probe
from kerasmagic.records import NOT_WIRE, Record, wire, wire_dict
from kerasmagic.snapshot import MemorySnapshot

pytestmark = pytest.mark.unit


# --- records --------------------------------------------------------------------------------


@dataclasses.dataclass
class _Example(Record):
    a: int
    b: dict = dataclasses.field(default_factory=dict, metadata=wire("bee", then=("double",)))
    kept: object = dataclasses.field(default=None, metadata=NOT_WIRE)
    text: list = dataclasses.field(default_factory=list, metadata=wire(convert=lambda v: ",".join(v)))

    @property
    def double(self) -> int:
        return self.a * 2


def test_wire_dict_follows_the_field_metadata():
    record = _Example(3, {"x": Unavailable("no_device")}, kept=object(), text=["p", "q"])
    assert record.to_dict() == {
        "a": 3, "bee": {"x": {"status": "unavailable", "reason": "no_device", "detail": ""}}, "double": 6,
        "text": "p,q"}
    assert list(record.to_dict()) == ["a", "bee", "double", "text"]  # the declaration order
    raw = wire_dict(record, value=lambda v: v)
    assert raw["bee"]["x"] == Unavailable("no_device")  # as it is, for a pickled channel


@pytest.mark.parametrize("record, not_wire", [
    (IsolatedResult(), {"outputs", "value", "template_threads", "last_output", "first_output_ts", "finished_ts"}),
    (CleanReport(), set()),
    (CleanStep("x"), set()),
    # Which graphs were there before and after: to count a cell's new ops by identity, not by name.
    (CellMeasurement(), {"_graph_ids_before", "_graph_ids_after"}),
    (MemorySnapshot({}, {}, {}, {}, [], None), set()),
    # The kernel (or agent) holds the limit; the settings a warm spare cannot change stay kernel-side.
    (Job("code", "/tmp/job"), {"owns_directory", "memory_limit_bytes", "fixed_settings"}),
])
def test_records_are_dataclasses_marked_where_not_wire(record, not_wire):
    assert dataclasses.is_dataclass(record)
    marked = {f.name for f in dataclasses.fields(record) if f.metadata.get("wire") is False}
    assert marked == not_wire
    if not isinstance(record, Job):
        json.dumps(record.to_dict())  # JSON-able as it is
        assert repr(record).startswith("<") or isinstance(record, CleanStep)  # no field dump in repr


def test_isolated_result_wire_form_keeps_its_names_and_order():
    result = IsolatedResult("job", outputs={"model": object()}, value=object(), worker_state="warm",
                            kernel_rss_before_bytes=10, kernel_rss_after_bytes=25, child_tf_peak={"CPU:0": 7},
                            sent=[ShippedName("x", "pickle", 3)])
    wire_form = result.to_dict()
    assert "outputs" not in wire_form and "value" not in wire_form and "last_output" not in wire_form
    assert wire_form["warm"] is True and wire_form["kernel_rss_delta_bytes"] == 15
    assert wire_form["child_tf_peak_bytes"] == {"CPU:0": 7} and result.child_tf_peak_bytes == 7
    assert wire_form["sent"] == [{"name": "x", "how": "pickle", "size_bytes": 3}]
    keys = list(wire_form)
    assert keys[:9] == ["label", "status", "error", "wall_s", "wait_s", "run_s", "ship_in_s", "ship_out_s", "warm"]
    shipped = keys.index("sent")
    assert keys[shipped:shipped + 3] == ["sent", "returned", "not_returned"]
    assert keys[shipped + 3:] == ["on", "node", "agent", "cluster_note", "job_id"]  # where it ran (Ray), its event id


def test_memory_snapshot_keeps_its_positional_constructor_and_ts_first():
    snapshot = MemorySnapshot({"rss_bytes": 1}, {}, {}, {}, [], None)
    assert snapshot.ts > 0 and list(snapshot.to_dict())[0] == "ts"


def test_job_message_is_the_fields_as_they_are_plus_the_kernel_context():
    job = Job("function", "/tmp/job", call={"args": (1, 2)}, seed=__import__("numpy").int64(4), owns_directory=False)
    message = RunJob.here(job).to_wire()
    assert message["call"] == {"args": (1, 2)}  # a tuple stays a tuple: it travels pickled
    assert message["seed"] == 4 and type(message["seed"]) is int
    assert "owns_directory" not in message and message["kind"] == "job" and "sys_path" in message
    assert Job("code", "/tmp/job", inputs=None).inputs == {}
    back = JOB_CHANNEL.decode(message)  # what the job's process rebuilds: the same job
    assert isinstance(back, RunJob) and back.job.call == {"args": (1, 2)} and back.job.seed == 4


# --- CleanReport: dropped and failing steps -------------------------------------------------


def test_dropped_finds_the_reference_steps_by_name_not_position():
    report = CleanReport(steps=[
        CleanStep("garbage collection", items=["not a reference"]),
        CleanStep(clean.STEP_DROP_HIDDEN, items=["Out[3]"]),
        CleanStep("malloc_trim"),
        CleanStep(clean.STEP_DELETE_NAMED, items=["variable model"]),
    ])
    assert report.dropped == ["Out[3]", "variable model"]


def test_a_failing_step_is_reported_and_the_clean_goes_on(monkeypatch):
    def broken(step, *_):
        raise RuntimeError("backend on fire")

    monkeypatch.setattr(clean, "_clear_jax_caches", broken)
    report = clear_tf(namespace={})
    failed = [step for step in report.steps if step.skipped and step.skipped.startswith("failed")]
    assert [step.skipped for step in failed] == ["failed: RuntimeError: backend on fire"]
    assert report.steps[-1].name == "malloc_trim"  # the steps after it ran
    assert report.to_dict()["steps"][3]["skipped"] == "failed: RuntimeError: backend on fire"


def test_an_interrupt_in_a_step_is_not_swallowed(monkeypatch):
    def interrupted(step, *_):
        raise KeyboardInterrupt

    monkeypatch.setattr(clean, "_clear_jax_caches", interrupted)
    with pytest.raises(KeyboardInterrupt):
        clear_tf(namespace={})


# --- one sample ------------------------------------------------------------------------------


_GPU_SAMPLE = {
    "ts": 1.0, "rss_bytes": 100,
    "tf": {"status": "running", "devices": {
        "CPU:0": {"in_use_bytes": 5, "peak_bytes": 9, "held_unused_min_bytes": 4},
        "GPU:0": {"in_use_bytes": 7, "peak_bytes": 30,
                  "held_unused_min_bytes": {"status": "unavailable", "reason": "error", "detail": "x"}}}},
    "gpu": [{"index": 0, "name": "H100", "used_bytes": 900, "total_bytes": 8000, "utilisation_pct": 3,
             "process_used_bytes": 600},
            {"status": "unavailable", "reason": "error", "detail": "reading GPU 1 failed"}],
}


def test_the_worker_and_the_sidebar_take_the_same_sample():
    live = protocol.validate({"method": "sample", "seq": 1, **sample_probe.memory_sample(), "sample_cost_s": 0.0},
                             "to_frontend")
    in_worker = worker._memory_sample()
    final = worker._final_sample()
    for sample in (in_worker, final):
        protocol.validate({"method": "sample", "seq": 1, "sample_cost_s": 0.0, **sample}, "to_frontend")
        assert set(sample) - set(live) <= {"pid", "rss_peak_bytes", "pss_bytes", "uss_bytes", "allocators"}
        # The worker's own allocator peaks travel beside the sample: no GPU here, so no numbers.
        assert sorted(sample["allocators"]) == ["jax", "torch"]
        assert {view["status"] for view in sample["allocators"].values()} == {"unavailable"}
    assert isinstance(final["rss_peak_bytes"], int) and final["rss_peak_bytes"] >= final["rss_bytes"]
    protocol.validate({"method": "sample", "seq": 2, "sample_cost_s": 0.0, **_GPU_SAMPLE}, "to_frontend")


def test_the_runner_folds_peaks_from_the_protocol_shape():
    result = IsolatedResult()
    record_sample(result, _GPU_SAMPLE)
    smaller = json.loads(json.dumps(_GPU_SAMPLE))
    smaller["tf"]["devices"]["GPU:0"]["peak_bytes"] = 10
    smaller["gpu"][0]["process_used_bytes"] = 1000
    smaller["rss_bytes"] = 50
    record_sample(result, smaller)
    record_sample(result, {"ts": 2.0, "rss_bytes": {"status": "unavailable", "reason": "error"},
                           "tf": {"status": "unavailable", "reason": "not_imported"},
                           "gpu": {"status": "unavailable", "reason": "not_imported"}})
    assert result.samples == 3 and result.child_rss_peak_bytes == 100
    assert result.child_tf_peak == {"CPU:0": 9, "GPU:0": 30}
    assert result.child_gpu_peak == {"GPU:0": 1000}
    assert "GPU:0 peak" in str(result) and "TF GPU:0 peak" in str(result)


def test_one_allocator_total_for_the_clean_and_the_view():
    tf = _GPU_SAMPLE["tf"]
    assert sample_probe.allocator_total(tf) == 12
    assert sample_probe.allocator_total(tf, gpu=False) == 5
    assert sample_probe.allocator_total(tf, "held_unused_min_bytes", gpu=True) is None
    assert _tf_totals(tf, gpu=False) == (5, 4) and _tf_totals(tf, gpu=True) == (7, None)
    assert _tf_totals({"status": "unavailable", "reason": "not_imported"}, gpu=False) == (None, None)
    assert sample_probe.gpu_device_values(_GPU_SAMPLE["gpu"]) == {"GPU:0": 600}

"""The magics on Keras 3's torch backend on a real NVIDIA GPU, checked against torch and NVML.

One notebook-like session (tests/gpu/session_torch.py) runs in its own interpreter with
KERAS_BACKEND=torch; each test reads one scenario of it. Every expected figure comes from
torch's or NVML's own reading at the same moment, never from a constant.
"""

from __future__ import annotations

import re

import pytest
from gpu_suite import UNCHANGED, nvml_sees, part, run_session, skip_unless, tolerance

pytestmark = pytest.mark.gpu

MiB = 2**20


@pytest.fixture(scope="module")
def seen(gpu_facts):
    skip_unless(gpu_facts, "torch")
    return run_session("session_torch.py", "torch", {"KERAS_BACKEND": "torch"})


def _step(report: dict, name: str) -> dict:
    (step,) = [s for s in report["steps"] if s["name"] == name]
    return step


def test_the_session_ran_keras_on_torch_on_the_gpu(seen):
    assert seen["backend"] == "torch"
    assert part(seen, "warm_up")["device"].startswith("cuda")


def test_tf_mem_shows_torchs_allocated_reserved_and_peak_as_torch_reads_them(seen):
    record = part(seen, "tf_mem")
    stats = record["report"]["torch"]["allocator"]["cuda:0"]
    direct = record["torch"]
    assert stats["allocated_bytes"] == direct["allocated"]
    assert stats["reserved_bytes"] == direct["reserved"]
    assert stats["peak_allocated_bytes"] == direct["peak"]
    # The cell allocated exactly 1 GiB that stays and 512 MiB that went back to torch's cache.
    assert direct["allocated"] - record["before"]["allocated"] == 1024 * MiB
    assert stats["held_unused_bytes"] == direct["reserved"] - direct["allocated"] >= 512 * MiB
    for row in ("allocated", "reserved", "peak allocated", "held, unused"):
        assert f"torch cuda:0 {row}" in record["text"]
    assert "%clear_tf hands them back (torch.cuda.empty_cache()), no restart needed" in record["text"]


def test_nvml_this_process_is_torchs_reserved_plus_the_cuda_context(seen):
    record = part(seen, "tf_mem")
    nvml_sees(record["nvml"], record["nvml_before"])
    (device,) = [d for d in record["report"]["nvml"]["devices"] if d["index"] == 0]
    assert abs(device["process_used_bytes"] - record["nvml"]) <= UNCHANGED
    # Before the cell nothing was cached: NVML counted the context (and libraries) alone.
    context = record["nvml_before"] - record["before"]["reserved"]
    assert context > 0
    expected = record["torch"]["reserved"] + context
    assert abs(record["nvml"] - expected) <= tolerance(expected)
    # The report's context line is NVML − reserved: the same context, within the tolerance.
    match = re.search(r"CUDA context and libraries\s+≈ ([\d.]+) (MiB|GiB)\s+NVML this process − torch reserved",
                      record["text"])
    assert match, record["text"]
    shown = float(match.group(1)) * (MiB if match.group(2) == "MiB" else 1024 * MiB)
    assert abs(shown - context) <= tolerance(context)


def test_clear_tf_gives_torchs_cache_back_and_reports_the_gpu_delta(seen):
    record = part(seen, "clear_tf")
    assert record["big_left"] is False
    returned = record["before"]["reserved"] - record["torch"]["reserved"]
    assert returned >= 1536 * MiB  # the 1 GiB tensor it deleted and the 512 MiB cached before
    report = record["report"]
    nvml_sees(record["nvml_before"], record["nvml"])
    dropped = record["nvml_before"] - record["nvml"]
    assert abs(dropped - returned) <= tolerance(returned)
    assert abs(report["gpu_freed_bytes"] - dropped) <= tolerance(dropped)
    # Deleting the tensor only moved it into torch's cache; the cache step handed it back.
    step = _step(report, "return torch's cached GPU blocks")
    assert abs(step["gpu_freed_bytes"] - report["gpu_freed_bytes"]) <= tolerance(dropped)
    title = record["text"].splitlines()[0]
    assert re.search(r"; GPU -[\d.]+ (MiB|GiB) \(.+ → .+, NVML\)", title), title
    assert re.search(r"return torch's cached GPU blocks .*GPU -[\d.]+ (MiB|GiB)", record["text"]), record["text"]


def test_a_model_freed_by_the_cleans_garbage_collection_goes_back_to_the_gpu_too(seen):
    record = part(seen, "clear_tf_after_gc")
    model_bytes = record["model_bytes"]  # its weights and Adam's two slots
    assert record["before"]["allocated"] - record["torch"]["allocated"] >= model_bytes
    assert record["before"]["reserved"] - record["torch"]["reserved"] >= model_bytes
    report = record["report"]
    nvml_sees(record["nvml_before"], record["nvml"])
    assert record["nvml_before"] - record["nvml"] >= model_bytes - tolerance(model_bytes)
    # Emptied after the collection: the cache step, not a later manual empty_cache(), gave it back.
    step = _step(report, "return torch's cached GPU blocks")
    assert step["gpu_freed_bytes"] >= model_bytes - tolerance(model_bytes)


def test_cell_tf_mem_shows_torchs_peak_of_the_cell(seen):
    record = part(seen, "cell_peak")
    peaks = record["report"]["gpu_framework_peak_bytes"]
    assert peaks["torch cuda:0"] == record["inner_peak"]
    assert record["inner_peak"] - record["before"]["allocated"] >= 768 * MiB
    assert re.search(r"torch cuda:0 peak\s+[\d.]+ (MiB|GiB)\s+torch allocator, this cell", record["text"])
    nvml_sees(record["nvml_before"], record["nvml"])
    after = record["report"]["gpu_process_after_bytes"]["GPU 0"]
    before = record["report"]["gpu_process_before_bytes"]["GPU 0"]
    change = record["nvml"] - record["nvml_before"]
    assert abs((after - before) - change) <= tolerance(change)
    assert "GPU 0 change" in record["text"]


def test_load_model_with_its_optimizer_on_the_gpu_is_named_with_the_remedy(seen):
    record = part(seen, "load_model")
    assert record["device"].startswith("cuda")
    (model,) = record["report"]["new_models"]
    assert model["held_by"] == ["loaded"] and model["optimizer_state"] == "restored"
    assert model["optimizer_bytes"] >= 2 * model["weight_bytes"] > 0  # Adam's two slots per weight
    # What the report sizes really arrived on the GPU, by torch's count.
    grown = record["torch"]["allocated"] - record["before"]["allocated"]
    assert grown >= model["weight_bytes"] + model["optimizer_bytes"]
    assert "compile=False" in record["text"]


def test_an_isolated_cell_gives_all_its_gpu_memory_back(seen):
    record = part(seen, "isolate")
    report = record["report"]
    assert report["status"] == "ok" and report["origin"] == "forked"
    assert record["device"].startswith("cuda") and record["worker_reserved"] > 0
    assert record["worker_pid"] == report["worker_pid"]
    peaks = [v for v in report["child_gpu_process_peak_bytes"].values() if isinstance(v, int)]
    nvml_sees(record["kernel_nvml_before"], record["kernel_nvml_after"], *(peaks or [None]))
    assert max(peaks) >= record["worker_reserved"]  # NVML saw the worker on the GPU while it ran
    assert record["worker_gone_from_nvml"] is True
    assert abs(record["kernel_nvml_after"] - record["kernel_nvml_before"]) <= UNCHANGED

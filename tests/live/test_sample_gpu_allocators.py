"""The sample's torch and JAX allocator views (protocol 1.4), from readings recorded on an H100.

No GPU here: NVML, torch and JAX are the stand-ins of tests/gpu_stand_ins.py, answering what
the real ones answered (benchmarks/results/h100-2026-11-22/). What the sample makes of them
(the fields, the held-unused arithmetic, the preallocation setting, what is left out) is ours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kerasmagic.live import protocol
from kerasmagic.live.sampler import Sampler, take_sample
from kerasmagic.probes import nvml

from gpu_stand_ins import StandInNVML, use_jax, use_nvml, use_recorded, use_torch

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parents[1] / "protocol_fixtures"
GPU_READINGS = Path(__file__).parents[2] / "benchmarks/results/h100-2026-11-22/gpu_readings.json"
_XLA_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


@pytest.fixture
def no_framework(monkeypatch):
    """A process where neither torch nor JAX is imported (other tests may have imported JAX)."""
    for name in ("torch", "jax", "jax._src.xla_bridge"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name in _XLA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch
    nvml._init_state = None


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())["data"]


def _gpu_parts(sample: dict) -> dict:
    """What a sample says of the GPU; utilisation was not recorded with the allocator readings."""
    gpu = sample["gpu"]
    if isinstance(gpu, list):
        gpu = [{k: v for k, v in device.items() if k != "utilisation_pct"} for device in gpu]
    return {"gpu": gpu, **{name: sample[name] for name in ("torch", "jax", "gpu_context") if name in sample}}


#: Each fixture built from the H100 recording: the run and moment of allocator_readings.json
#: (or a moment gpu_stand_ins.CONSTRUCTED builds from recorded ones, saying how) and the
#: variables the process had set. KERASMAGIC_WRITE_FIXTURES=1 writes the fixtures' GPU parts
#: from what the kernel sends instead of comparing (a new fixture starts from its template).
RECORDED = [
    ("sample_torch_cached", "torch", "1 GiB more allocated and freed (cached)", {}),
    ("sample_torch_cache_kept", "torch", "everything freed, cache kept", {}),
    ("sample_jax_preallocated", "jax default preallocation", "512 MiB array", {}),
    ("sample_jax_no_preallocation", "jax preallocate=false", "512 MiB array",
     {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    ("sample_jax_grown_pool", "jax preallocate=false", "512 MiB array deleted (constructed)",
     {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
]

#: A new fixture's other fields (seq, ts, RSS, host) and its description.
_NEW_FIXTURES = {
    "sample_jax_grown_pool": ("sample_jax_no_preallocation", 45, (
        "JAX on an H100 with XLA_PYTHON_CLIENT_PREALLOCATE=false after its 512 MiB array was deleted: a pool "
        "that grew and never shrinks. Constructed, not recorded: benchmarks/results/h100-2026-11-22/"
        "allocator_readings.json (run 'jax preallocate=false', moment '512 MiB array') with nothing in use and "
        "the pool and NVML as they were (tests/gpu_stand_ins.py, _jax_array_deleted, says why); utilisation "
        "was not recorded, so the device has none")),
}


def _write_fixture(name: str, sample: dict) -> None:
    """Write what the kernel sent into a fixture's GPU parts (KERASMAGIC_WRITE_FIXTURES=1)."""
    path = FIXTURES / f"{name}.json"
    if path.exists():
        stored = json.loads(path.read_text())
    else:
        template, seq, description = _NEW_FIXTURES[name]
        stored = json.loads((FIXTURES / f"{template}.json").read_text())
        stored["description"] = description
        stored["data"].update(seq=seq, ts=1763800000.0 + seq)
    stored["data"].update(_gpu_parts(sample))
    path.write_text(json.dumps(stored, indent=2, ensure_ascii=False) + "\n")


@pytest.mark.parametrize(("fixture", "run", "moment", "env"), RECORDED, ids=[r[0] for r in RECORDED])
def test_the_protocol_fixtures_are_what_the_kernel_sends_for_the_recorded_readings(no_framework, fixture, run,
                                                                                     moment, env):
    for name, value in env.items():
        no_framework.setenv(name, value)
    use_recorded(no_framework, run, moment)
    sample = take_sample(1)
    assert protocol.validate(sample, "to_frontend") is sample
    if os.environ.get("KERASMAGIC_WRITE_FIXTURES") == "1":
        _write_fixture(fixture, sample)
    assert _gpu_parts(sample) == _gpu_parts(_fixture(fixture))


def test_torch_figures_and_what_its_cache_holds_unused(no_framework):
    use_recorded(no_framework, "torch", "1 GiB more allocated and freed (cached)")
    sample = take_sample(1)
    assert "jax" not in sample
    assert sample["torch"] == {"status": "running", "devices": {"cuda:0": {
        "allocated_bytes": 2 * 2**30, "reserved_bytes": 3 * 2**30, "peak_allocated_bytes": 3 * 2**30,
        "held_unused_bytes": 2**30}}}
    assert sample["gpu"][0]["process_used_bytes"] == 3764387840  # NVML: the pool plus the CUDA context


def test_jax_default_preallocation_is_a_pool_it_does_not_use_and_says_why(no_framework):
    use_recorded(no_framework, "jax default preallocation", "512 MiB array")
    jax = take_sample(1)["jax"]
    stats = jax["devices"]["gpu:0"]
    assert stats["in_use_bytes"] == 512 * 2**20 and stats["pool_bytes"] == 63763906560
    assert stats["held_unused_bytes"] == 63763906560 - 512 * 2**20
    assert jax["preallocation"] == "default: 75 % of each GPU at start"


def test_the_gpu_readings_file_torch_and_nvml_with_utilisation(no_framework):
    readings = json.loads(GPU_READINGS.read_text())
    (device,) = readings["nvml"]["devices"]
    fake = StandInNVML(process_bytes=lambda: device["process_used_bytes"], used_bytes=lambda: device["used_bytes"],
                       total_bytes=device["total_bytes"], name=device["name"])
    fake.nvmlDeviceGetUtilizationRates = lambda handle: type("Rates", (), {"gpu": device["utilisation_pct"]})()
    use_nvml(no_framework, fake)
    torch = readings["torch"]
    use_torch(no_framework, {"allocated": torch["memory_allocated"], "reserved": torch["memory_reserved"],
                             "max_allocated": torch["max_memory_allocated"]})
    sample = take_sample(1)
    expected = _fixture("sample_torch_nvml")
    assert sample["gpu"] == expected["gpu"] == readings["nvml"]["devices"]
    assert sample["torch"] == expected["torch"]


def test_no_field_for_a_framework_that_is_not_imported(no_framework):
    sample = take_sample(1)
    assert "torch" not in sample and "jax" not in sample
    assert protocol.validate(sample, "to_frontend") is sample


def test_the_sampler_thread_never_starts_cuda_or_a_jax_backend(no_framework):
    # The stand-ins fail any device query made before their framework started its GPU side;
    # inside the sampler such a failure would read "error", so "not_started" proves none was made.
    use_torch(no_framework, None)
    use_jax(no_framework, None)
    got: list[dict] = []
    sampler = Sampler(got.append, interval_s=0.05)
    sampler.set_active(True)
    try:
        _wait_for(lambda: len(got) >= 3)
    finally:
        sampler.stop()
    for sample in got:
        assert sample["torch"]["reason"] == "not_started", sample["torch"]
        assert sample["jax"]["reason"] == "not_started", sample["jax"]
        protocol.validate(sample, "to_frontend")


def test_a_real_jax_imported_but_not_started_stays_unstarted_under_the_sampler_thread():
    # A fresh interpreter: here other tests may have started JAX's backend already.
    code = textwrap.dedent("""
        import json, threading
        import jax
        from jax._src import xla_bridge
        from kerasmagic.live.sampler import Sampler
        got, enough = [], threading.Event()
        def send(sample):
            got.append(sample)
            if len(got) >= 3:
                enough.set()
        sampler = Sampler(send, interval_s=0.05)
        sampler.set_active(True)
        enough.wait(120)
        sampler.stop()
        print(json.dumps({"jax": [s.get("jax") for s in got], "started": xla_bridge.backends_are_initialized()}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["jax"]) >= 3
    assert all(jax["reason"] == "not_started" for jax in result["jax"]), result["jax"]
    assert result["started"] is False


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    """Until ``condition()``; generous, since CI's two cores are shared with other test runs."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"condition not met within {timeout_s} s"
        time.sleep(0.01)


@pytest.mark.parametrize(("env", "story", "named"), [
    ({}, "preallocated", ""),
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, "preallocated_off_now", "XLA_PYTHON_CLIENT_PREALLOCATE=false"),
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "0", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, "preallocated_off_now",
     "XLA_PYTHON_CLIENT_PREALLOCATE=0 and XLA_PYTHON_CLIENT_ALLOCATOR=platform"),
    ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, "preallocated_fraction_now", "XLA_PYTHON_CLIENT_MEM_FRACTION=.5"),
])
def test_the_sample_carries_the_jax_story_tf_mem_tells(no_framework, env, story, named):
    """Protocol 1.7: the sidebar words the kernel's story code and never decides it itself, so
    the code must be the one %tf_mem's advice comes from."""
    from kerasmagic.snapshot import jax_advice, tf_mem

    for name, value in env.items():
        no_framework.setenv(name, value)
    use_recorded(no_framework, "jax default preallocation", "512 MiB array")
    sample = take_sample(1)
    device = sample["jax"]["devices"]["gpu:0"]
    assert (device["pool_story"], device["named_now"]) == (story, named)
    why, remedy = jax_advice(device, sample["jax"]["preallocation"])
    assert remedy in " ".join(str(tf_mem()).split())


def test_the_sample_carries_the_cuda_context_tf_mem_prints(no_framework):
    from kerasmagic.snapshot import tf_mem

    use_recorded(no_framework, "torch", "everything freed, cache kept")
    context = take_sample(1)["gpu_context"]
    assert context == {"context_bytes": 543162368, "upper_bound": False, "pools": ["torch_reserved"]}
    (row,) = [line for line in str(tf_mem()).splitlines() if "CUDA context and libraries" in line]
    assert "≈ 518 MiB" in row and "NVML this process − torch reserved" in row


def test_the_cuda_context_is_an_upper_bound_with_tensorflows_pool_and_none_without_nvml():
    from kerasmagic.probes.sample import cuda_context

    torch = {"cuda:0": {"reserved_bytes": 3 * 2**30}}
    tf = {"CPU:0": {"in_use_bytes": 2**40, "held_unused_min_bytes": 0},  # not a GPU's: never subtracted
          "GPU:0": {"in_use_bytes": 2**28, "peak_bytes": 2**28, "held_unused_min_bytes": 0}}
    assert cuda_context(3764387840, torch, None, tf) == {
        "context_bytes": 3764387840 - 3 * 2**30 - 2**28, "upper_bound": True, "pools": ["torch_reserved", "tf_pool"]}
    assert cuda_context(None, torch, None, tf) is None
    assert cuda_context(2**30, torch, None, None) is None  # NVML below the pools: no estimate, never negative
    assert cuda_context(2**30, {}, None, {"CPU:0": {"in_use_bytes": 1}}) is None  # no GPU pool at all

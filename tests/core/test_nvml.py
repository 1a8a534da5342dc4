"""NVML: a fake driver at the edge we cannot have here, and the real thing where a GPU exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from kerasmagic.probes import nvml
from kerasmagic.probes.availability import Unavailable


class FakeNVML:
    """The slice of pynvml's API we call, answering like a 2-GPU machine where we use GPU 1."""

    class NVMLError(Exception):
        pass

    def __init__(self, our_pid: int, fail_utilisation: bool = False):
        self.our_pid = our_pid
        self.other_pid = os.getppid()
        self.fail_utilisation = fail_utilisation
        self.init_calls = 0

    def nvmlInit(self):
        self.init_calls += 1

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=(handle + 1) * 2**30, total=16 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle):
        if self.fail_utilisation:
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(gpu=40 + handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if handle == 0:
            return [SimpleNamespace(pid=self.other_pid, usedGpuMemory=2**30)]
        return [SimpleNamespace(pid=self.our_pid, usedGpuMemory=3 * 2**29)]

    def nvmlDeviceGetName(self, handle):
        return b"Fake GPU"


@pytest.fixture
def fake_nvml(monkeypatch):
    fake = FakeNVML(os.getpid())
    monkeypatch.setattr(nvml, "_pynvml", lambda: fake)
    monkeypatch.setattr(nvml, "_init_state", None)
    yield fake
    monkeypatch.setattr(nvml, "_init_state", None)


@pytest.mark.unit
def test_devices_report_used_total_utilisation_and_our_share(fake_nvml):
    devices = nvml.devices()
    assert [d["name"] for d in devices] == ["Fake GPU", "Fake GPU"]
    assert devices[0]["used_bytes"] == 2**30 and devices[0]["total_bytes"] == 16 * 2**30
    assert devices[0]["utilisation_pct"] == 40
    # GPU 0 is used by another process only: we use none of it.
    assert devices[0]["process_used_bytes"] == 0
    assert devices[1]["process_used_bytes"] == 3 * 2**29
    nvml.devices()
    assert fake_nvml.init_calls == 1, "NVML must be initialised once, lazily"


@pytest.mark.unit
def test_host_pids_in_a_container_make_our_share_unknown_not_zero(fake_nvml):
    fake_nvml.other_pid = 2**22 + 12345  # above pid_max: exists on the host, not here
    fake_nvml.our_pid = 2**22 + 12346
    device = nvml.devices()[0]
    assert isinstance(device["process_used_bytes"], Unavailable)
    assert "container" in device["process_used_bytes"].detail


@pytest.mark.unit
def test_a_failing_nvml_call_becomes_a_reason_not_an_exception(fake_nvml):
    fake_nvml.fail_utilisation = True
    device = nvml.devices()[0]
    assert isinstance(device["utilisation_pct"], Unavailable)
    assert "Not Supported" in device["utilisation_pct"].detail
    assert device["used_bytes"] == 2**30


@pytest.mark.unit
def test_gpu_section_shows_tf_and_nvml_views_side_by_side(fake_nvml):
    from kerasmagic import tf_mem

    text = str(tf_mem())
    assert "GPU 1 (Fake GPU) used, all processes" in text
    assert re.search(r"GPU 1 this process\s+1\.50 GiB\s+NVML", text)


@pytest.mark.unit
def test_no_driver_is_a_clean_no_gpu_state():
    code = (
        "from kerasmagic.probes import nvml; r = nvml.devices(); "
        "print(type(r).__name__, getattr(r, 'reason', 'gpu'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    if out[0] != "Unavailable":
        pytest.skip("this machine has an NVIDIA driver: the real-GPU test covers it")
    assert out[1] == "no_device"


def _has_nvidia_driver() -> bool:
    return not isinstance(nvml.initialise(), Unavailable)


#: Prints why TensorFlow cannot run on a GPU here (nothing where it can).
_TF_GPU_PROBE = """
import importlib.util
if importlib.util.find_spec("tensorflow") is None:
    print("TensorFlow is not installed (tests/gpu covers torch and JAX on the GPU)")
else:
    import tensorflow as tf
    if not tf.config.list_physical_devices("GPU"):
        print(f"TensorFlow {tf.__version__} sees no GPU (a CPU-only build?)")
"""


@pytest.mark.gpu
def test_real_gpu_process_memory_matches_tensorflow():
    """On a machine with a GPU: NVML sees this process's TensorFlow allocation."""
    if not _has_nvidia_driver():
        pytest.skip("needs an NVIDIA GPU and driver (run on a GPU machine: pytest -m gpu)")
    # Asked in a child: TensorFlow's GPU discovery starts the CUDA driver, which this process
    # must not have started (isolation templates fork from a clean process).
    missing = subprocess.run([sys.executable, "-c", _TF_GPU_PROBE], capture_output=True, text=True, timeout=300)
    if missing.returncode != 0 or missing.stdout.strip():
        pytest.skip(missing.stdout.strip() or f"the TensorFlow probe failed: {missing.stderr[-500:]}")
    code = r"""
import json, tensorflow as tf
from kerasmagic.probes import nvml, tensorflow as tfp
x = tf.ones((256, 1024, 1024))  # 1 GiB on GPU:0
devices = nvml.devices()
stats = tfp.allocator_stats()
print(json.dumps({"nvml_ours": devices[0]["process_used_bytes"], "tf_in_use": stats["GPU:0"]["in_use_bytes"]}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    import json

    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["tf_in_use"] >= 2**30
    assert isinstance(data["nvml_ours"], int) and data["nvml_ours"] >= data["tf_in_use"]

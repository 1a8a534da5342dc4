"""The warm spare's rules without forking: when it is on by default, which job may take it, and
one spare per GPU where the GPU has room (NVML stands in, fed with readings from an H100)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from kerasmagic.isolation import pool as pool_module
from kerasmagic.isolation import spare
from kerasmagic.isolation.errors import IsolationUsageError
from kerasmagic.isolation.pool import WorkerPool, configure_pool
from kerasmagic.isolation.spec import WorkerSpec

from gpu_stand_ins import StandInNVML, recorded_moment, use_nvml

pytestmark = pytest.mark.unit


def _spec(**env: str) -> WorkerSpec:
    return WorkerSpec(("numpy", "keras"), tuple(sorted({"KERAS_BACKEND": "torch", **env}.items())))


def test_the_default_rule_is_on_with_a_gpu_or_three_cores_and_off_on_two(monkeypatch):
    monkeypatch.setattr(spare.glob, "glob", lambda pattern: [])
    assert spare.default_rule({}, cores=2)[0] is False
    assert "2 usable cores" in spare.default_rule({}, cores=2)[1]
    assert spare.default_rule({}, cores=3) == (True, "3 usable cores: a core is free beside the running job")
    monkeypatch.setattr(spare.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    assert spare.default_rule({}, cores=2) == (True, "a GPU is visible to the jobs")
    assert spare.default_rule({"CUDA_VISIBLE_DEVICES": "-1"}, cores=2)[0] is False
    assert spare.default_rule({"CUDA_VISIBLE_DEVICES": ""}, cores=2)[0] is False


def test_an_explicit_choice_overrides_the_rule_both_ways(monkeypatch):
    monkeypatch.setattr(pool_module, "default_rule", lambda: (True, "a GPU is visible to the jobs"))
    pool = WorkerPool(size=1)
    try:
        assert pool.spares_on() == (True, "a GPU is visible to the jobs")
        pool.configure(warm_spare=False)
        assert pool.spares_on() == (False, "configure_pool(warm_spare=False)")
        monkeypatch.setattr(pool_module, "default_rule", lambda: (False, "2 usable cores"))
        pool.configure(warm_spare=True)
        assert pool.spares_on()[0] is True
        pool.configure(warm_spare="auto")
        assert pool.spares_on() == (False, "2 usable cores")
    finally:
        pool.shutdown()
    with pytest.raises(IsolationUsageError, match="warm_spare takes True, False or 'auto'"):
        configure_pool(warm_spare="yes")


def test_usable_cores_follow_the_affinity(monkeypatch):
    monkeypatch.setattr(spare.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert spare.usable_cores() == 4 or spare.usable_cores() < 4  # a cgroup quota may cap it
    monkeypatch.setattr(spare.os, "sched_getaffinity", lambda pid: {0})
    assert spare.usable_cores() == 1


def test_a_spare_fits_only_the_same_backend_device_and_runtime_settings():
    base = _spec()
    assert spare.spare_mismatch(base, base) == ""
    assert "the job runs Keras on jax" in spare.spare_mismatch(base, _spec(KERAS_BACKEND="jax"))
    assert "CUDA_VISIBLE_DEVICES=1" in spare.spare_mismatch(_spec(CUDA_VISIBLE_DEVICES="0"),
                                                           _spec(CUDA_VISIBLE_DEVICES="1"))
    assert spare.spare_mismatch(base, _spec(XLA_PYTHON_CLIENT_MEM_FRACTION=".5")).startswith(
        "XLA_PYTHON_CLIENT_MEM_FRACTION differs")
    assert "MY_FLAG" in spare.spare_mismatch(base, _spec(MY_FLAG="1"))


def test_settings_a_warmed_runtime_fixed_are_found_in_code_and_functions():
    assert spare.fixed_settings_in_code("tf.config.set_visible_devices([], 'GPU')") == [
        "the visible devices (tf.config.set_visible_devices)"]
    assert spare.fixed_settings_in_code("model.fit(x, y, epochs=3)") == []

    def setup():
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(2)

    def fold(i):
        setup()
        return i

    assert spare.fixed_settings_in_function(fold) == ["tf.config.threading's thread counts"]
    assert spare.fixed_settings_in_function(len) == []


def test_tensorflow_on_a_gpu_gets_no_spare_unless_its_memory_grows(monkeypatch):
    tf_spec = WorkerSpec(("tensorflow", "keras"), (("KERAS_BACKEND", "tensorflow"),))
    monkeypatch.setattr(spare.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    assert "map most of the GPU" in spare.no_spare_for(tf_spec)
    grows = WorkerSpec(("tensorflow", "keras"),
                       (("KERAS_BACKEND", "tensorflow"), ("TF_FORCE_GPU_ALLOW_GROWTH", "true")))
    assert spare.no_spare_for(grows) == ""
    monkeypatch.setattr(spare.glob, "glob", lambda pattern: [])
    assert spare.no_spare_for(tf_spec) == ""


class _TwoGPUs(StandInNVML):
    """Two H100s whose memory is as NVML reported it at recorded moments."""

    def __init__(self, readings: list[dict]) -> None:
        super().__init__(process_bytes=lambda: 0, total_bytes=readings[0]["total_bytes"])
        self.readings = readings

    def nvmlDeviceGetCount(self):  # noqa: N802 - pynvml's names
        return len(self.readings)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        reading = self.readings[handle]
        return SimpleNamespace(used=reading["used_bytes"], total=reading["total_bytes"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        return []


def _nearly_full(reading: dict) -> dict:
    """Constructed from a recorded moment: JAX's default preallocation (75 %, recorded) with
    ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.97`` instead, i.e. 22 % of the card more in use."""
    return {**reading, "used_bytes": reading["used_bytes"] + int(0.22 * reading["total_bytes"])}


class _Process:
    """A spare's process as the pool ends it."""

    def __init__(self, pid: int, ended: threading.Event) -> None:
        self.pid, self.ended = pid, ended

    def end_group(self) -> None:
        pass

    def kill(self) -> None:
        self.ended.set()

    def poll(self) -> None:
        return None


class _Template:
    """What the pool asks of a template to fork a spare: forks answered at once with a stand-in process."""

    def __init__(self) -> None:
        self.state = "ready"
        self.spare_pids: set[int] = set()
        self.forks: list[dict] = []
        self.ended = threading.Event()

    def fork(self, spec, directory, warm=False, env=None):
        self.forks.append({"device": spec.late_env().get("CUDA_VISIBLE_DEVICES"), "warm": warm})
        future: Future = Future()
        future.set_result(_Process(1000 + len(self.forks), self.ended))
        return future


def test_round_robin_keeps_one_spare_per_gpu_that_has_room(monkeypatch):
    torch_job = recorded_moment("torch", "2 GiB allocated")["nvml"]
    jax_job = recorded_moment("jax default preallocation", "512 MiB array")["nvml"]
    use_nvml(monkeypatch, _TwoGPUs([torch_job, jax_job, _nearly_full(jax_job)]))
    monkeypatch.setattr(pool_module, "gpu_visible", lambda env=None: True)
    pool = WorkerPool(size=3, warm_spare=True)
    template = _Template()
    pool._templates.append(template)
    try:
        for device in ("0", "1", "2", "0", "1", "2"):  # round-robin: each device asked twice
            pool._ask_spare(template, _spec(CUDA_VISIBLE_DEVICES=device))
        assert [fork["device"] for fork in template.forks] == ["0", "1"]  # once each; GPU 2 has no room
        assert all(fork["warm"] for fork in template.forks)
        assert sorted(pool._spares) == ["0", "1"]
        assert spare.gpu_room("2", pool_module.nvml.devices()) == "GPU 2 has 1.7 GiB free, a spare needs 4.0 GiB"
        assert pool.end_spares() == 2 and not pool._spares
        assert template.ended.wait(5)  # their processes were ended
    finally:
        pool._templates.clear()
        pool.shutdown()


def test_the_memory_guard_ends_the_spares_when_it_warns(ipython, monkeypatch):
    from kerasmagic import guard

    readings = iter([900, 900])  # MiB of a 1000 MiB limit: past the warning level, confirmed
    from kerasmagic.limits import MemoryLimit

    monkeypatch.setattr(guard, "memory_limit", lambda: MemoryLimit(
        limit_bytes=1000 * 2**20, source="user", where="a test", rss_bytes=next(readings) * 2**20, cgroup={}))
    pool = WorkerPool(size=1, warm_spare=True)
    template = _Template()
    pool._templates.append(template)
    monkeypatch.setattr(pool_module, "_default_pool", pool)
    monkeypatch.setattr(pool_module, "gpu_visible", lambda env=None: False)
    try:
        pool._ask_spare(template, _spec())
        assert len(pool._spares) == 1
        watcher = guard.MemoryGuard(ipython)
        said: list[str] = []
        monkeypatch.setattr(watcher, "_emit", lambda cell, text: said.append(text))
        watcher._cell = guard._Cell(number=3, first_line="grow()", start_rss=0, parent=None)
        watcher.tick()
        watcher.tick()
        assert len(said) == 1 and not pool._spares
        assert template.ended.wait(5)
    finally:
        pool._templates.clear()
        pool.shutdown()

"""Isolation's API on a real GPU (Keras on torch): forked children on CUDA, round-robin devices, refusal.

One session (tests/gpu/session_isolation.py) in its own interpreter plays the kernel; each
test reads one scenario of it. These were the checks of benchmarks/gpu_isolation_check.py.
"""

from __future__ import annotations

import pytest
from gpu_suite import part, run_session, skip_unless

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def seen(gpu_facts):
    skip_unless(gpu_facts, "torch")
    return run_session("session_isolation.py", "isolation", {"KERAS_BACKEND": "torch"})


def test_in_process_fits_ran_on_cuda_so_the_kernel_had_started_it(seen):
    assert part(seen, "in_process")["device"].startswith("cuda")
    assert seen["kernel_cuda_initialised"] is True


def test_isolated_jobs_fork_from_the_template_train_on_cuda_and_leave_nvml(seen):
    record = part(seen, "isolated")
    assert record["template_warm"] is True
    for job in record["jobs"]:
        assert job["origin"] == "forked", job
        assert job["device"].startswith("cuda"), job
        assert job["gone_from_nvml"] is True, job


def test_round_robin_gives_each_job_one_visible_gpu_in_turn(seen):
    record = part(seen, "round_robin")
    devices = seen["visible_env"].split(",") if seen["visible_env"] else [str(i) for i in range(seen["gpu_count"])]
    assert [v["visible"] for v in record["values"]] == [devices[i % len(devices)] for i in range(4)]
    assert all(v["count"] == 1 and v["device"].startswith("cuda") for v in record["values"])
    assert record["origins"] == ["forked"] * 4
    assert record["gone_from_nvml"] == [True] * 4


def test_a_template_with_an_initialised_cuda_driver_refuses_and_the_job_runs_fresh(seen):
    record = part(seen, "refusal")
    assert record["state"] == "fresh" and record["origin"] == "fresh"
    assert "CUDA driver" in record["note"]
    assert record["x"] == 3.0 and record["device"]

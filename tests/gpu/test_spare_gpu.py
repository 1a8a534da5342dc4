"""The warm spare on a real GPU, torch and JAX: the table of issue 32 through the real pool.

Each backend's session (tests/gpu/session_spare.py) times cold forks, jobs in the warm spare and
in-process fits; its ``table`` is printed by benchmarks/gpu_device_run.sh. Asserted: the spare
is on by default where a GPU is visible, each job after the first took it, and every job's
process and every spare left NVML.
"""

from __future__ import annotations

import pytest
from gpu_suite import part, run_session, skip_unless

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=["torch", "jax"])
def seen(request, gpu_facts):
    skip_unless(gpu_facts, request.param)
    return run_session("session_spare.py", f"spare_{request.param}", {"KERAS_BACKEND": request.param})


def test_cold_forks_say_why_and_leave_nvml(seen):
    for job in part(seen, "cold_fork")["jobs"]:
        assert job["spare"] == "", job  # spares off: nothing to say
        assert job["gone_from_nvml"] is True, job


def test_jobs_take_the_warm_spare_by_default_on_a_gpu_and_give_all_back(seen):
    record = part(seen, "warm_spare")
    assert record["rule"] == [True, "a GPU is visible to the jobs"]
    assert [job["spare"] for job in record["jobs"]] == ["taken"] * len(record["jobs"])
    assert all(job["gone_from_nvml"] for job in record["jobs"])
    assert record["spares_gone_from_nvml"] and all(record["spares_gone_from_nvml"])
    assert len(seen["table"]["warm_spare_s"]) == len(seen["table"]["cold_fork_s"]) > 0

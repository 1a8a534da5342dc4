"""The warm spare (``configure_pool(warm_spare=True)``): a job process forked ahead of its job,
which starts TensorFlow's runtime and runs a tiny Keras fit before the job arrives. Real
templates, real forks, real TensorFlow on CPU: what the job finds, what it must not find (the
warm-up's output, its layer names, its random state), and that a spare never keeps a template
or a process alive."""

from __future__ import annotations

import time

import psutil
import pytest

from kerasmagic.isolation.dispatch import run_job
from kerasmagic.isolation.job import Job
from kerasmagic.isolation.pool import WorkerPool, WorkerSpec, configure_pool, worker_spec
from kerasmagic.isolation.result import IsolatedResult
from kerasmagic.isolation.shipping import make_job_directory

pytestmark = pytest.mark.isolation

pytest.importorskip("keras")

KERAS = WorkerSpec(("numpy", "tensorflow", "keras"), worker_spec().env)

# What the job finds when it starts, then a seeded fit whose weights must not depend on the
# process having warmed up (the spare's fit drew random numbers, and clear_session() ran).
PROBE = """
from tensorflow.python.eager import context
runtime_started = context.context()._context_handle is not None
print("the job's own line")
import keras, numpy as np
keras.utils.set_random_seed(7)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
names = [layer.name for layer in model.layers]
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((16, 3), "float32"), np.ones(16, "float32"), epochs=2, batch_size=8, verbose=0)
weights = [w.tolist() for w in model.get_weights()]
"""
OUTPUTS = ["runtime_started", "names", "weights"]


def _job(pool: WorkerPool) -> IsolatedResult:
    return run_job(Job("code", make_job_directory(), code=PROBE, outputs=OUTPUTS), KERAS, IsolatedResult(),
                   pool=pool, timeout=300, forward_output=False)


def _spare_forked(pool: WorkerPool, template_pid: int, within: float = 60.0) -> int:
    """The spare's pid, once the template has forked it (a fork takes milliseconds; the
    warm-up runs after, in the spare)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        extra = [pid for pid in pool.pids() if pid != template_pid]
        if extra:
            return extra[0]
        time.sleep(0.05)
    raise AssertionError(f"no spare was forked in {within:.0f} s: pool pids {pool.pids()}")


def test_the_next_job_takes_the_warmed_spare_and_finds_what_a_fresh_process_would():
    pool = WorkerPool(size=2, warm_spare=True)
    try:
        pool.prestart(KERAS)
        assert pool.wait_until_warm(KERAS, timeout=300)
        first = _job(pool)
        template_pid = first.template_pid
        assert first.worker_note == "" and first.outputs["runtime_started"] is False
        spare = _spare_forked(pool, template_pid)
        second = _job(pool)
    finally:
        pool.shutdown()
    assert second.worker_pid == spare, (second.worker_pid, spare)
    assert "spare" in second.worker_note
    assert second.outputs["runtime_started"] is True  # warmed: the runtime ran before the job came
    # Nothing of the warm-up shows: Keras' names start over, the seeded fit gives the same
    # weights as in the bare fork, and the job's output is its own.
    assert second.outputs["names"] == first.outputs["names"] == ["dense", "dense_1"]
    assert second.outputs["weights"] == first.outputs["weights"]
    assert second.last_output.strip() == first.last_output.strip() == "the job's own line"


def test_a_spare_keeps_neither_its_template_nor_itself_alive():
    pool = WorkerPool(size=2, idle_timeout=2, warm_spare=True)
    try:
        pool.prestart(KERAS)
        assert pool.wait_until_warm(KERAS, timeout=300)
        first = _job(pool)
        spare = _spare_forked(pool, first.template_pid)
        # The template retires after 2 idle seconds though its spare waits for a job.
        deadline = time.monotonic() + 60
        while pool.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.pids() == []
        for pid in (spare, first.template_pid):
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    finally:
        pool.shutdown()


def test_without_warm_spare_no_process_is_forked_ahead():
    pool = WorkerPool(size=2)
    try:
        pool.prestart(KERAS)
        assert pool.wait_until_warm(KERAS, timeout=300)
        first = _job(pool)
        time.sleep(0.5)
        assert pool.pids() == [first.template_pid]
    finally:
        pool.shutdown()


def test_configure_pool_checks_warm_spare():
    from kerasmagic.isolation.errors import IsolationUsageError

    with pytest.raises(IsolationUsageError, match="warm_spare takes True or False"):
        configure_pool(warm_spare="yes")  # type: ignore[arg-type]

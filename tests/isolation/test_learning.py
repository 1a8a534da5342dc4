"""Templates that learn what jobs import, and preload=[...] (issue 23, part 2).

A driver that imports no framework itself (a script whose job does ``import keras`` inside)
got a template that imported nothing, and every job paid the whole import. After a job
imports a heavy module its template lacked, the next jobs' template imports it first; the
report says what the template had and what the job imported itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from IPython.utils.capture import capture_output

from kerasmagic.isolation import IsolatedCrash, IsolationUsageError, run_isolated
from kerasmagic.isolation.dispatch import run_job
from kerasmagic.isolation.job import Job
from kerasmagic.isolation.pool import WorkerPool, WorkerSpec, worker_spec
from kerasmagic.isolation.result import IsolatedResult
from kerasmagic.isolation.shipping import make_job_directory

pytestmark = pytest.mark.isolation

_USES_NUMPY = "import sys\nhad = 'numpy' in sys.modules\nimport numpy\ntotal = int(numpy.arange(4).sum())"


def _run(pool, spec, code=_USES_NUMPY, outputs=("had", "total")):
    return run_job(Job("code", make_job_directory(), code=code, outputs=list(outputs)), spec, IsolatedResult(),
                   pool=pool, timeout=120)


def test_the_next_jobs_template_has_what_a_job_imported():
    light = WorkerSpec((), worker_spec().env)  # a driver that imported no framework
    pool = WorkerPool(size=1)
    try:
        first = _run(pool, light)
        second = _run(pool, light)
        third = _run(pool, light)
    finally:
        pool.shutdown()
    assert first.outputs == {"had": False, "total": 6}
    assert first.template_modules == [] and first.job_imported == ["numpy"]
    for later in (second, third):
        assert later.outputs["had"] is True and later.origin == "forked"
        assert "numpy" in later.template_modules and later.job_imported == []
    assert third.worker_state == "warm"
    shown = str(first)
    assert "the job imported numpy itself" in shown and "later templates import it first" in shown, shown
    assert "the template had imported numpy" in str(third), str(third)


def test_learning_can_be_turned_off():
    light = WorkerSpec((), worker_spec().env)
    pool = WorkerPool(size=1, learn=False)
    try:
        _run(pool, light)
        again = _run(pool, light)
    finally:
        pool.shutdown()
    assert again.outputs["had"] is False and again.job_imported == ["numpy"]


def test_a_learned_module_that_no_longer_imports_does_not_fail_the_jobs():
    # Learned modules are imported by the next templates if they can be: a module a job
    # managed to import (its own sys.path) must never make every later job fail.
    light = WorkerSpec((), worker_spec().env)
    pool = WorkerPool(size=1)
    try:
        pool.learn(["numpy", "torch_that_is_not_installed"], light)
        job = _run(pool, WorkerSpec((), light.env, learned=("numpy", "sklearn_missing_here")))
    finally:
        pool.shutdown()
    assert job.status == "ok" and job.outputs["had"] is True


def test_preload_asks_for_modules_up_front():
    result = run_isolated("import sys\nhad = 'xml.dom.minidom' in sys.modules", preload=["xml.dom.minidom"],
                          quiet=True)
    assert result.outputs["had"] is True
    assert "xml.dom.minidom" in result.template_modules


@pytest.mark.parametrize("preload, words", [
    ("keras", "a list of module names"),
    (["not a module"], "'not a module' is not a module name"),
    ([3], "3 is not a module name"),
])
def test_a_bad_preload_is_refused_before_anything_runs(preload, words):
    with pytest.raises(IsolationUsageError, match=words):
        run_isolated("x = 1", preload=preload)


def test_a_preload_that_cannot_import_says_so():
    with pytest.raises(IsolatedCrash, match="could not import .*no_such_module_here"):
        run_isolated("x = 1", preload=["no_such_module_here"], timeout=120)


def test_the_magic_takes_preload(shell):
    with capture_output():
        result = shell.run_cell("%%fresh_model -q --isolate --preload xml.dom.minidom\n"
                                "import sys\nhad = 'xml.dom.minidom' in sys.modules")
    assert result.success, result.error_in_exec
    assert shell.user_ns["had"] is True
    refused = shell.run_cell("%%fresh_model --preload json\nx = 1")
    assert "only work with --isolate" in str(refused.error_in_exec or refused.error_before_exec)


_LIGHT_DRIVER = textwrap.dedent("""
    import json, sys
    from kerasmagic.isolation import isolated_map

    def job(k):
        import numpy
        return int(numpy.arange(k + 1).sum())

    assert "numpy" not in sys.modules  # a light driver: it never imports the framework itself
    result = isolated_map(job, range(3), progress=False, timeout=120)
    print(json.dumps({"values": list(result), "summary": str(result),
                      "jobs": [[j.template_modules, j.job_imported] for j in result.jobs]}))
""")


def test_a_light_drivers_map_learns_after_its_first_job():
    done = subprocess.run([sys.executable, "-c", _LIGHT_DRIVER], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["values"] == [0, 1, 3]
    first, *later = report["jobs"]
    assert first == [[], ["numpy"]]
    assert all("numpy" in had and imported == [] for had, imported in later), later
    assert "[0] imported numpy itself" in report["summary"], report["summary"]


def test_a_warm_up_for_another_spec_does_not_kill_the_template_a_job_waits_for(tmp_path):
    # Issue 23, fault 11: a node agent's warm-up (or learn()'s prestart) for another spec came
    # while a job waited on a template that was still importing; that template was killed, and
    # the job failed with "could not import numpy: it printed:" and an empty log. A starting
    # template that a job waits for is retired once that job has its fork, never killed.
    import concurrent.futures
    import time

    site = tmp_path / "slow"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import time\ntime.sleep(1.5)\n")
    base = dict(worker_spec().env)
    slow = WorkerSpec((), tuple(sorted({**base, "PYTHONPATH": str(site)}.items())))
    other = WorkerSpec((), tuple(sorted({**base, "KERASMAGIC_TEST_OTHER_SPEC": "1"}.items())))
    pool = WorkerPool(size=2, learn=False)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            job = executor.submit(_run, pool, slow, "x = 6 * 7", ("x",))
            deadline = time.monotonic() + 30
            while not any(t["state"] == "starting" and t["pid"] for t in pool.template_states()):
                assert time.monotonic() < deadline, "the job's template never started"
                time.sleep(0.02)
            waited_on = pool.template_states()[0]["pid"]
            pool.prestart(other)  # the late warm-up, while the job waits for the import
            result = job.result(timeout=60)
        assert result.status == "ok" and result.outputs == {"x": 42}, str(result)
        assert result.worker_state == "cold" and result.origin == "forked", str(result)
        # Served, the stale template goes; the warm-up's template is the one that stays.
        deadline = time.monotonic() + 10
        while waited_on in pool.pids():
            assert time.monotonic() < deadline, "the stale template outlived its last job"
            time.sleep(0.05)
        assert pool.wait_until_warm(other, timeout=60)
        assert [t["pid"] for t in pool.template_states()] != [waited_on]
    finally:
        pool.shutdown()

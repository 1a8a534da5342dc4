"""Jobs forked from the template: what they share, what they may not leave behind, and when
the template refuses to fork."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest
from process_checks import gone

from kerasmagic.isolation import IsolatedCellError, IsolatedShippingError, IsolatedTimeout, run_isolated
from kerasmagic.isolation.pool import default_pool

pytestmark = pytest.mark.isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _describe(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        return f"{process.status()} ppid {process.ppid()} {' '.join(process.cmdline())[:200]}"
    except psutil.Error as exc:
        return f"({exc})"


def test_a_job_is_a_fork_of_the_template_not_the_template():
    first = run_isolated("import os\npid, ppid = os.getpid(), os.getppid()", quiet=True)
    second = run_isolated("import os\npid, ppid = os.getpid(), os.getppid()", quiet=True)
    assert second.origin == "forked" and second.worker_state == "warm"
    assert second.outputs["ppid"] in default_pool().template_pids()  # its parent is the template
    assert second.outputs["pid"] != first.outputs["pid"]  # a new process per job
    assert second.start_latency_s is not None and second.child_pss_bytes and second.child_uss_bytes
    assert second.child_uss_bytes < second.child_rss_peak_bytes  # it shares the template's pages
    assert "forked from a warm template" in str(second)


def test_the_templates_objects_are_frozen_so_a_jobs_collections_never_touch_them():
    # A full collection in a fork visits every object the template imported (a TF + Keras
    # template has ~400k of them) and so copies every page that holds one: about 0.3 s of CPU
    # and 90 MiB of copy-on-write faults in each job's first fit, where a warm kernel pays nothing.
    code = ("import gc, time\nfrozen = gc.get_freeze_count()\ntracked = len(gc.get_objects())\n"
            "started = time.process_time()\ngc.collect()\nfull_s = time.process_time() - started")
    job = run_isolated(code, quiet=True)
    assert job.origin == "forked"
    assert job.outputs["frozen"] > 10 * job.outputs["tracked"], job.outputs  # the template's, permanent
    assert job.outputs["tracked"] < 20_000, job.outputs  # what the job made itself


def test_the_workers_own_sampling_imports_nothing_during_a_job():
    # A template with a GPU framework (JAX here) makes every sample read NVML; importing pynvml
    # in each job cost 37 ms of CPU and 5k copy-on-write faults inside its first fit.
    from kerasmagic.isolation.dispatch import run_job
    from kerasmagic.isolation.job import Job
    from kerasmagic.isolation.pool import WorkerPool, WorkerSpec, worker_spec
    from kerasmagic.isolation.result import IsolatedResult
    from kerasmagic.isolation.shipping import make_job_directory

    spec = WorkerSpec(("numpy", "jax"), worker_spec().env)
    code = ("import sys, time\nbefore = set(sys.modules)\ntime.sleep(0.8)\n"
            "imported = sorted(set(sys.modules) - before)")
    pool = WorkerPool(size=1)
    try:
        result = run_job(Job("code", make_job_directory(), code=code, outputs=["imported"]), spec,
                         IsolatedResult(), pool=pool, timeout=180)
    finally:
        pool.shutdown()
    assert result.origin == "forked" and result.samples >= 2
    assert result.outputs["imported"] == [], result.outputs["imported"]


def frame_depth():
    import sys

    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def test_a_forked_job_runs_near_the_top_of_the_stack_not_inside_the_templates_loop():
    # TensorFlow records the Python stack of every op it creates (a traced fit creates
    # thousands): 10 frames more cost a lesson-5 fold 3.5k page faults. The fork's child leaves
    # the template's loop before it runs the job.
    job = run_isolated(frame_depth, quiet=True)
    assert job.origin == "forked"
    assert job.value <= 7, job.value


def test_a_subprocess_started_by_the_job_does_not_outlive_it():
    result = run_isolated("import subprocess\nchild = subprocess.Popen(['sleep', '300']).pid", quiet=True)
    assert gone(result.outputs["child"]), "the job's subprocess outlived the job"


def test_a_fork_inside_the_job_cannot_answer_for_it():
    code = textwrap.dedent("""
        import os, time
        pid = os.fork()
        who = "child" if pid == 0 else "parent"
        if pid != 0:
            time.sleep(0.5)  # the forked copy finishes first and sends its own "done"
    """)
    result = run_isolated(code, quiet=True)
    assert result.outputs["who"] == "parent"


def test_an_exception_whose_str_raises_is_the_users_error_not_a_crash():
    code = textwrap.dedent("""
        class Broken(Exception):
            def __str__(self):
                raise RuntimeError("no str")
        raise Broken()
    """)
    with pytest.raises(IsolatedCellError) as info:
        run_isolated(code, quiet=True)
    assert info.value.exc_type == "Broken"
    assert "<str() of Broken raised RuntimeError: no str>" in str(info.value)
    assert "kerasmagic" not in info.value.child_traceback


def test_an_input_that_cannot_be_rebuilt_is_a_shipping_error_not_the_users():
    import types

    module = types.ModuleType("kerasmagic_runtime_only")  # exists in this process alone
    module.Thing = type("Thing", (), {})
    module.Thing.__module__ = module.__name__
    sys.modules[module.__name__] = module
    try:
        with pytest.raises(IsolatedShippingError) as info:
            run_isolated("ran = True", inputs={"thing": module.Thing()}, quiet=True)
    finally:
        del sys.modules[module.__name__]
    message = str(info.value)
    assert info.value.name == "thing" and info.value.exc_type == "ModuleNotFoundError"
    assert "could not be rebuilt there" in message and "the code did not run" in message
    assert "register_keras_serializable" in message


def test_an_import_failure_shows_the_python_exception():
    # A kernel on Keras' TensorFlow backend asks for OpenVINO's, which is not installed (JAX
    # and torch may well be): the user sees Python's exception and the variable that caused
    # it, not TensorFlow's log chatter.
    script = textwrap.dedent("""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the chatter that used to hide the cause
        import keras
        from kerasmagic.isolation import IsolatedCrash, run_isolated
        try:
            run_isolated("x = 1", env={"KERAS_BACKEND": "openvino"}, quiet=True, timeout=120)
        except IsolatedCrash as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO, "KERAS_BACKEND": "tensorflow"})
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert message.startswith("the isolated process could not import"), message
    assert "No module named 'openvino'" in message and "differs from the kernel's in KERAS_BACKEND" in message
    assert "oneDNN" not in message and "absl" not in message


def test_the_timeout_covers_the_wait_for_a_process(tmp_path):
    site = tmp_path / "slow"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    started = time.perf_counter()
    with pytest.raises(IsolatedTimeout) as info:
        run_isolated("x = 1", env={"PYTHONPATH": str(site)}, timeout=2, quiet=True)
    assert time.perf_counter() - started < 10
    assert "no isolated worker was ready within the timeout of 2 s" in str(info.value)
    assert info.value.result.wait_s >= 1.9
    assert default_pool().pids() == default_pool().template_pids()  # the slow template was killed


def test_a_template_whose_runtime_started_refuses_and_the_job_runs_fresh(tmp_path):
    # TensorFlow's runtime started in the template (by a sitecustomize, as an eager import
    # would): a fork would hang, so the template refuses, and the job runs in a fresh
    # interpreter; the report says why.
    site = tmp_path / "eager"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import os
        if os.environ.get("KERASMAGIC_TEST_START_TF"):
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
            import tensorflow as tf
            tf.constant(1.0) + 1
    """))
    env = {"PYTHONPATH": str(site), "KERASMAGIC_TEST_START_TF": "1"}
    result = run_isolated("import os\npid = os.getpid()", env=env, quiet=True, timeout=300)
    assert result.worker_state == "fresh" and result.origin == "fresh"
    assert "TensorFlow's runtime has started in the template" in result.worker_note
    assert "fresh interpreter" in str(result) and result.outputs["pid"] == result.worker_pid


def test_forking_still_works_after_a_fresh_fallback():
    result = run_isolated("x = 1", quiet=True)
    assert result.origin == "forked"


_KERNEL = textwrap.dedent("""
    import sys
    import numpy as np
    from kerasmagic.isolation import run_isolated
    big = np.ones(4 << 20, dtype=np.uint8)  # out of band: a file in the job's folder
    code = ("import subprocess, time\\n"
            "child = subprocess.Popen(['sleep', '300'])\\n"
            "print(child.pid, flush=True)\\n"
            "time.sleep(300)")
    run_isolated(code, inputs={"big": big})
""")


def test_a_killed_kernel_leaves_no_process_folder_or_log():
    kernel = subprocess.Popen([sys.executable, "-c", _KERNEL], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        grandchild = int(kernel.stdout.readline())
        mine = [*glob.glob(f"/dev/shm/kerasmagic-isolated-{kernel.pid}-*"),
                *glob.glob(os.path.join(tempfile.gettempdir(), f"kerasmagic-*-{kernel.pid}-*"))]
        assert any("isolated" in path for path in mine) and any(path.endswith(".log") for path in mine)
        ours = [p.pid for p in psutil.Process(kernel.pid).children(recursive=True)]
        kernel.send_signal(signal.SIGKILL)  # what the OOM killer does
        kernel.wait(10)
        for pid in ours + [grandchild]:
            # A generous deadline: on a loaded machine the watchers need a moment to run.
            assert gone(pid, within=20), f"pid {pid} outlived the killed kernel: {_describe(pid)}"
        deadline = time.time() + 5
        while time.time() < deadline and any(os.path.exists(p) for p in mine):
            time.sleep(0.05)
        assert [p for p in mine if os.path.exists(p)] == []
    finally:
        kernel.kill()
        kernel.stdout.close()


def test_a_new_pool_sweeps_what_dead_kernels_left():
    from kerasmagic.isolation.pool import sweep_orphans

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{dead.pid}-")
    fd, log = tempfile.mkstemp(prefix=f"kerasmagic-worker-{dead.pid}-", suffix=".log")
    os.close(fd)
    alive = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{os.getpid()}-")
    try:
        removed = sweep_orphans()
        assert folder in removed and log in removed
        assert not os.path.exists(folder) and not os.path.exists(log)
        assert os.path.exists(alive)  # this kernel's own folder stays
    finally:
        os.rmdir(alive)


def test_a_deleted_working_directory_is_not_blamed_on_the_oom_killer(tmp_path):
    script = textwrap.dedent(f"""
        import os, glob, tempfile
        os.chdir({str(tmp_path)!r}); os.rmdir({str(tmp_path)!r})
        from kerasmagic.isolation import run_isolated
        result = run_isolated("import os\\nwhere = os.getcwd()", quiet=True)
        logs = glob.glob(os.path.join(tempfile.gettempdir(), f"kerasmagic-worker-{{os.getpid()}}-*"))
        print(result.status, result.outputs["where"] != {str(tmp_path)!r}, logs)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "True", "[]"], done.stdout


def test_the_template_ends_when_its_kernel_is_killed_again_and_again():
    # The template's two ways of seeing its kernel die (the watch pipe's EOF and the
    # parent-death SIGTERM) once raced into a deadlock: 1 kill in 25 left a template behind.
    for _ in range(8):
        kernel = subprocess.Popen([sys.executable, "-c", _KERNEL], stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            int(kernel.stdout.readline())
            ours = [p.pid for p in psutil.Process(kernel.pid).children(recursive=True)]
            kernel.send_signal(signal.SIGKILL)
            kernel.wait(10)
            for pid in ours:
                assert gone(pid, within=20), f"pid {pid} outlived the killed kernel: {_describe(pid)}"
        finally:
            kernel.kill()
            kernel.stdout.close()


def test_each_new_template_sweeps_what_kernels_that_died_since_left():
    # Issue 23, fault 5: only a new pool swept, so what a kernel that died later left stayed.
    import uuid

    from kerasmagic.isolation.pool import default_pool, worker_spec

    pool = default_pool()  # made long ago: its own sweep is over
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tempfile.mkdtemp(prefix=f"kerasmagic-isolated-{dead.pid}-")
    before = set(pool.template_pids())
    # A spec no template has yet: the pool starts a new one.
    spec = worker_spec(env={"KERASMAGIC_SWEEP_TEST": uuid.uuid4().hex})
    pool.prestart(spec)
    assert pool.wait_until_warm(spec, timeout=120)
    assert set(pool.template_pids()) - before, "no new template was started"
    assert not os.path.exists(folder), "the dead kernel's folder outlived a new template's start"

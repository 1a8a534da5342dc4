"""Crashes, timeouts, interrupts and unshippable inputs: clear errors, kernel and namespace intact."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest
from process_checks import gone

from kerasmagic.errors import KerasMagicUsageError
from kerasmagic.isolation import IsolatedCellError, IsolatedCrash, IsolatedTimeout, IsolationUsageError, run_isolated
from kerasmagic.isolation.cell import run_cell_isolated
from kerasmagic.isolation.pool import WorkerPool

pytestmark = pytest.mark.isolation


def test_exit_code_crash_names_the_code_and_last_output():
    with pytest.raises(IsolatedCrash, match="exited with code 3") as info:
        run_isolated("print('about to go', flush=True)\nimport os\nos._exit(3)", quiet=True)
    assert info.value.exit_code == 3
    assert "about to go" in str(info.value) and info.value.last_output == "about to go"
    assert info.value.result.status == "crash"


def test_segfault_names_the_signal():
    with pytest.raises(IsolatedCrash, match="SIGSEGV") as info:
        run_isolated("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert info.value.signal_name == "SIGSEGV"
    assert gone(info.value.result.worker_pid)


def test_timeout_kills_the_worker_quickly():
    started = time.perf_counter()
    with pytest.raises(IsolatedTimeout, match="timeout of 1 s") as info:
        run_isolated("import time\ntime.sleep(60)", timeout=1)
    assert time.perf_counter() - started < 15
    assert isinstance(info.value, TimeoutError)
    assert info.value.result.status == "timeout"
    assert gone(info.value.result.worker_pid)


def test_interrupt_kills_the_worker_and_reraises(sigint_raises):
    from kerasmagic.isolation.pool import default_pool, worker_spec

    default_pool().prestart(worker_spec())
    assert default_pool().wait_until_warm(timeout=120)
    timer = threading.Timer(1.5, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            run_isolated("import time\ntime.sleep(60)")
    finally:
        timer.cancel()
    result = info.value.result
    assert result.status == "interrupted"
    assert gone(result.worker_pid)


def test_user_exception_carries_the_worker_traceback():
    with pytest.raises(IsolatedCellError) as info:
        run_isolated("def divide(a):\n    return a / 0\n\nvalue = divide(1)")
    message = str(info.value)
    assert "ZeroDivisionError: division by zero" in message
    assert "return a / 0" in message and "<isolated cell>" in message
    assert "kerasmagic" not in info.value.child_traceback  # only the user's frames
    assert info.value.exc_type == "ZeroDivisionError" and info.value.result.status == "error"


@pytest.mark.parametrize("make_value, words", [
    (lambda: (i for i in range(3)), "generator objects cannot be pickled"),
    (lambda: threading.Lock(), "lock objects cannot be pickled"),
])
def test_unshippable_input_is_refused_before_anything_runs(isolated_shell, make_value, words):
    from kerasmagic.isolation.pool import default_pool

    isolated_shell.user_ns.update(gen=make_value(), kept=1)
    before = dict(isolated_shell.user_ns)
    pids = default_pool().pids()
    with pytest.raises(IsolationUsageError) as info:
        run_cell_isolated(isolated_shell, "kept = 2\nitems = list(gen)", inputs=None, outputs=None, no_return=False,
                          timeout=None, gpu=None, env={}, seed=None, quiet=False)
    message = str(info.value)
    assert message.startswith("cannot send 'gen' to the isolated process:") and words in message
    assert "build it inside the cell or pass --in" in message
    assert isinstance(info.value, KerasMagicUsageError)
    assert isolated_shell.user_ns == before
    assert default_pool().pids() == pids  # no worker was taken


def test_errors_leave_the_namespace_untouched(isolated_shell):
    isolated_shell.user_ns["x"] = 1
    before = dict(isolated_shell.user_ns)
    with pytest.raises(IsolatedCellError):
        run_cell_isolated(isolated_shell, "x = 5\ny = 1 / 0", inputs=None, outputs=None, no_return=False,
                          timeout=None, gpu=None, env={}, seed=None, quiet=False)
    with pytest.raises(IsolatedCrash):
        run_cell_isolated(isolated_shell, "x = 6\nimport os\nos._exit(1)", inputs=None, outputs=None,
                          no_return=False, timeout=None, gpu=None, env={}, seed=None, quiet=False)
    assert isolated_shell.user_ns == before


@pytest.mark.parametrize("kwargs, match", [
    ({"timeout": 0}, "finite number of seconds > 0"),
    ({"outputs": ["not a name"]}, "not one"),
    ({"env": {"A": 1}}, "string names and values"),
    ({"inputs": {"1bad": 2}}, "'1bad' is not one"),
    ({"inputs": {"class": 2}}, "'class' is not one"),
    ({"gpu": "a b"}, "'a b' is not a GPU"),
    ({"gpu": "0,,1"}, "'' is not a GPU"),
    ({"gpu": True}, "GPU index"),
])
def test_bad_options_are_usage_errors(kwargs, match):
    with pytest.raises(IsolationUsageError, match=match):
        run_isolated("x = 1", **kwargs)


def test_a_bad_gpu_is_refused_for_a_cell_too(isolated_shell):
    with pytest.raises(IsolationUsageError, match="comma-separated indices"):
        run_cell_isolated(isolated_shell, "x = 1", inputs=None, outputs=None, no_return=False,
                          timeout=None, gpu="first", env={}, seed=None, quiet=False)


def test_magics_in_an_isolated_cell_are_refused(isolated_shell):
    with pytest.raises(IsolationUsageError, match="magics"):
        run_cell_isolated(isolated_shell, "%time x = 1", inputs=None, outputs=None, no_return=False,
                          timeout=None, gpu=None, env={}, seed=None, quiet=False)


def test_ipython_shows_the_worker_traceback_not_ours():
    with pytest.raises(IsolatedCellError) as info:
        run_isolated("raise ValueError('bad value')")
    rendered = "\n".join(info.value._render_traceback_())
    assert "ValueError: bad value" in rendered and "runner.py" not in rendered


def test_importing_isolation_is_cheap():
    import subprocess
    import sys

    code = ("import sys, kerasmagic.isolation, kerasmagic\n"
            "assert kerasmagic.run_isolated is kerasmagic.isolation.run_isolated\n"
            "print(sorted(m for m in ('numpy', 'tensorflow', 'keras', 'cloudpickle') if m in sys.modules))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def _run_job_with(pool, code="x = 1"):
    from kerasmagic.isolation.dispatch import run_job
    from kerasmagic.isolation.job import Job
    from kerasmagic.isolation.pool import worker_spec
    from kerasmagic.isolation.result import IsolatedResult
    from kerasmagic.isolation.shipping import make_job_directory

    return run_job(Job("code", make_job_directory(), code=code, outputs=["x"]), worker_spec(), IsolatedResult(),
                   pool=pool)


def test_a_worker_dying_before_it_gets_the_job_is_a_crash_not_a_broken_pipe(dying_pool):
    pool = dying_pool(size=1)
    try:
        with pytest.raises(IsolatedCrash) as info:
            _run_job_with(pool)
    finally:
        pool.shutdown()
    message = str(info.value)
    assert "was killed by signal 9 (SIGKILL) after it was ready, before it received the job" in message
    assert "nothing ran" in message and "run it again" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.signal_name == "SIGKILL" and info.value.result.status == "crash"


def test_a_worker_that_cannot_start_is_a_crash_not_an_os_error(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")  # a venv removed under a running kernel
    pool = WorkerPool(size=1)
    try:
        with pytest.raises(IsolatedCrash) as info:
            _run_job_with(pool)
    finally:
        pool.shutdown()
    message = str(info.value)
    assert message.startswith("could not start an isolated worker (FileNotFoundError")
    assert "nothing ran" in message and "/nonexistent/python3 still runs" in message
    assert info.value.result.status == "crash"


def test_ctrl_c_in_the_magic_shows_only_a_clean_keyboard_interrupt(shell, list_workers, sigint_raises):
    import contextlib
    import io

    from kerasmagic.isolation.pool import default_pool, worker_spec

    default_pool().prestart(worker_spec())
    assert default_pool().wait_until_warm(timeout=120)
    shell.user_ns["kept"] = 1
    before = {k: v for k, v in shell.user_ns.items() if not k.startswith("_") and k not in ("In", "Out")}
    output = io.StringIO()
    # What the kernel does on Ctrl-C / "interrupt kernel": SIGINT to its own process.
    timer = threading.Timer(1.5, os.kill, args=(os.getpid(), signal.SIGINT))
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        timer.start()
        try:
            shell.run_cell("%%fresh_model --isolate\nimport time\nkept = 2\nprint('started', flush=True)\n"
                           "time.sleep(60)")
        finally:
            timer.cancel()
    text = output.getvalue()
    assert "started" in text and "KeyboardInterrupt" in text
    import re

    match = re.search(r"KeyboardInterrupt: interrupted; the isolated worker \(pid (\d+)\) was killed", text)
    assert match, text
    job_pid = int(match.group(1))
    assert job_pid not in default_pool().template_pids()  # the job's own process, not the template
    assert "kerasmagic/isolation" not in text and "selectors.py" not in text, text
    after = {k: v for k, v in shell.user_ns.items() if not k.startswith("_") and k not in ("In", "Out")}
    assert after == before
    assert gone(job_pid)
    assert {p.pid for p in list_workers()} <= set(default_pool().pids())  # only the pool's idle ones


# --- what the messages say (issue 23, fault 9) ------------------------------------------------


def end_in_three_ways(k):
    import os
    import signal

    if k == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if k == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    os._exit(3)


def test_the_map_summary_says_how_each_crashed_job_ended():
    from kerasmagic.isolation import isolated_map

    result = isolated_map(end_in_three_ways, range(3), on_error="collect", progress=False, timeout=120)
    shown = str(result)
    assert "crash: crash" not in shown, shown
    assert "crash: killed by signal 9 (SIGKILL)" in shown, shown
    assert "crash: segmentation fault (signal 11, SIGSEGV)" in shown, shown
    assert "crash: exited with code 3" in shown, shown
    assert "died of a segmentation fault (signal 11, SIGSEGV)" in str(result[1])


def test_a_timeout_shows_the_jobs_own_output_not_the_templates(tmp_path):
    site = tmp_path / "chatty_slow_start"
    site.mkdir()
    (site / "sitecustomize.py").write_text("print('chatter of the start', flush=True)\nimport time\ntime.sleep(6)\n")
    with pytest.raises(IsolatedTimeout) as info:
        run_isolated("x = 1", env={"PYTHONPATH": str(site)}, timeout=2)
    assert "chatter" not in str(info.value) and "chatter" not in info.value.result.last_output
    assert "runpy" not in str(info.value)
    # The template must be ready first: the 2 s are for the job, and a template that learned
    # heavy modules from earlier tests (TF, JAX, pandas…) takes longer than that to start.
    run_isolated("pass", timeout=300)
    with pytest.raises(IsolatedTimeout) as info:
        run_isolated("print('epoch 1 done', flush=True)\nimport time\ntime.sleep(60)", timeout=2)
    assert str(info.value).endswith("its output so far:\nepoch 1 done"), str(info.value)


@pytest.mark.parametrize("fork", [True, False])
@pytest.mark.parametrize("then", ["", "import time\ntime.sleep(30)"])
def test_a_job_that_closes_our_descriptors_is_said_so_without_our_traceback(fork, then):
    pool = WorkerPool(size=1, fork=fork)
    try:
        # The clock starts with a ready pool: a template that learned TF or JAX from earlier
        # tests takes seconds to start on a loaded machine, and that is not what is timed.
        _run_job_with(pool)
        started = time.perf_counter()
        with pytest.raises(IsolatedCrash) as info:
            _run_job_with(pool, f"import os\nos.closerange(3, 4096)\n{then}")
        took = time.perf_counter() - started
    finally:
        pool.shutdown()
    message = str(info.value)
    assert "closed its channel to the kernel" in message and "os.closerange" in message, message
    for internal in ("Traceback", "Bad file descriptor", "code None", "worker.py"):
        assert internal not in message, message
    # Ended after the 2 s grace of a lost channel, not the 10 s one of a finished job (a
    # worker without fork starts afresh for the job, which may take seconds under load).
    assert took < 7 + (0 if fork else 20), took


def test_a_huge_exception_message_is_shown_once_and_shortened():
    with pytest.raises(IsolatedCellError) as info:
        run_isolated("raise ValueError('x' * 20_000_000)", quiet=True)
    shown = str(info.value)
    assert len(shown) < 10_000, len(shown)
    assert "20,000,000 characters" in shown and "ValueError" in shown
    assert shown.count("left out here") == 1, shown[:2000]
    assert len(info.value.exc_message) == 20_000_000  # the whole message is still there
    assert len(info.value.result.error) < 400


def test_the_isolation_api_is_reachable_from_the_top_level_lazily():
    # The README calls prestart_pool() next to kerasmagic.run_isolated(): kerasmagic.prestart_pool
    # must exist, and reaching it still imports no framework.
    import subprocess
    import sys

    code = ("import sys, kerasmagic\n"
            "assert 'kerasmagic.isolation' not in sys.modules\n"
            "import kerasmagic.isolation as iso\n"
            "missing = [n for n in iso.__all__ if getattr(kerasmagic, n, None) is not getattr(iso, n)]\n"
            "assert not missing, missing\n"
            "assert set(iso.__all__) <= set(dir(kerasmagic))\n"
            "print(sorted(m for m in ('numpy', 'tensorflow', 'keras', 'cloudpickle') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

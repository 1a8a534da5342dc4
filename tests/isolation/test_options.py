"""Options and code that cannot work are refused in the kernel, before a process is used."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from kerasmagic.isolation import IsolationUsageError, isolated_map, run_isolated
from kerasmagic.isolation.cell import run_cell_isolated
from kerasmagic.isolation.pool import default_pool

pytestmark = pytest.mark.isolation


@pytest.fixture
def no_job_may_start(monkeypatch):
    """Fail the test if anything asks the pool for a process."""
    def refuse(*args, **kwargs):
        raise AssertionError("a process was asked for")

    monkeypatch.setattr(type(default_pool()), "launch", refuse)


@pytest.mark.parametrize("timeout", [
    float("nan"), float("inf"), True, 0, -1, "10",
    pytest.param(10**400, id="10**400"), pytest.param(-10**400, id="-10**400")])
def test_a_timeout_must_be_a_finite_number_of_seconds(timeout, no_job_may_start):
    with pytest.raises(IsolationUsageError, match="finite number of seconds > 0"):
        run_isolated("x = 1", timeout=timeout)
    with pytest.raises(IsolationUsageError, match="finite number of seconds > 0"):
        isolated_map(abs, [1], timeout=timeout)


def test_a_timeout_too_large_for_a_float_says_so_without_printing_it(no_job_may_start):
    with pytest.raises(IsolationUsageError) as info:
        isolated_map(abs, [1], timeout=10**5000)  # its str() alone would raise past 4300 digits
    assert "too large for a float (about 5001 digits)" in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize("seed", [-3, "abc", 2**32, 1.5, True])
def test_a_bad_seed_is_refused_before_anything_runs(seed, no_job_may_start):
    with pytest.raises(IsolationUsageError, match=r"the seed must be an integer from 0 to 2\*\*32 - 1"):
        run_isolated("x = 1", seed=seed)


@pytest.mark.parametrize("body, words", [
    ("return 5", "'return' outside function"),
    ("yield 1", "'yield' outside function"),
    ("await something()", "top-level await"),
])
def test_code_that_cannot_run_at_the_top_level_is_refused_here(isolated_shell, body, words, no_job_may_start):
    isolated_shell.user_ns["kept"] = 1
    before = dict(isolated_shell.user_ns)
    with pytest.raises(IsolationUsageError, match=words) as info:
        run_cell_isolated(isolated_shell, f"kept = 2\n{body}", inputs=None, outputs=None, no_return=False,
                          timeout=None, gpu=None, env={}, seed=None, quiet=False)
    assert "nothing was run" in str(info.value) and "worker.py" not in str(info.value)
    assert isolated_shell.user_ns == before
    with pytest.raises(IsolationUsageError, match=words):
        run_isolated(f"kept = 2\n{body}")


@pytest.mark.parametrize("line, words", [
    ("--isolate --timeout nan", "finite number of seconds > 0"),
    ("--isolate --seed -3", "the seed must be an integer"),
    ("--seed -3", "the seed must be an integer"),
    # The clean's own options act on the kernel's session; an isolated cell has none to keep.
    ("--isolate --keep-hidden", "--keep-hidden acts on this kernel's own state"),
    ("--isolate --keep-registry", "--keep-registry acts on this kernel's own state"),
    ("--isolate --jax-caches --keep-hidden", "--keep-hidden, --jax-caches act on this kernel's own state"),
])
def test_the_magic_refuses_bad_options_in_one_line(shell, line, words, capsys):
    shell.user_ns["kept"] = 1
    result = shell.run_cell(f"%%fresh_model {line}\nkept = 2")
    assert not result.success
    error = result.error_in_exec or result.error_before_exec
    assert type(error).__name__ == "UsageError" and words in str(error)
    assert shell.user_ns["kept"] == 1


def test_the_shipping_example_leaves_no_folder():
    pattern = "/dev/shm/kerasmagic-isolated-*"
    code = ("import doctest, os, kerasmagic.isolation.shipping as m\n"
            "print(os.getpid())\n"
            "assert doctest.testmod(m).failed == 0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    pid = done.stdout.split()[0]
    assert glob.glob(f"/dev/shm/kerasmagic-isolated-{pid}-*") == [] and \
        glob.glob(os.path.join("/tmp", f"kerasmagic-isolated-{pid}-*")) == [], pattern


def test_numpy_numbers_are_fine_seeds_and_timeouts():
    import numpy as np

    result = run_isolated("import random\nvalue = random.random()", seed=np.int64(3), timeout=np.float64(60.0),
                          quiet=True)
    again = run_isolated("import random\nvalue = random.random()", seed=3, quiet=True)
    assert result.outputs["value"] == again.outputs["value"]


def test_a_usage_error_from_the_api_shows_as_one_line_in_ipython():
    with pytest.raises(IsolationUsageError) as info:
        run_isolated("x = 1", timeout=-1)
    assert info.value._render_traceback_() == [f"IsolationUsageError: {info.value}"]


@pytest.mark.parametrize("name", ["In", "_oh", "get_ipython"])
def test_out_refuses_a_name_ipython_needs(isolated_shell, name, no_job_may_start):
    before = dict(isolated_shell.user_ns)
    with pytest.raises(IsolationUsageError, match=f"'{name}' is IPython's"):
        run_cell_isolated(isolated_shell, f"{name} = 1", inputs=None, outputs=[name], no_return=False,
                          timeout=None, gpu=None, env={}, seed=None, quiet=False)
    assert isolated_shell.user_ns == before


def test_configure_pool_changes_the_live_pool_through_its_public_method(monkeypatch):
    from kerasmagic.isolation import configure_pool
    from kerasmagic.isolation.pool import default_pool

    live = default_pool()
    asked = []
    monkeypatch.setattr(live, "configure", lambda **settings: asked.append(settings))
    configure_pool(idle_timeout=300)
    assert len(asked) == 1 and asked[0]["idle_timeout"] == 300.0 and asked[0]["size"] == live.size


def test_a_pool_is_reconfigured_in_place_and_keeps_what_was_not_given():
    from kerasmagic.isolation.pool import WorkerPool

    pool = WorkerPool(size=1, idle_timeout=30.0)
    try:
        pool.configure(size=3)
        assert (pool.size, pool.idle_timeout, pool.fork) == (3, 30.0, True)
        pool.configure(idle_timeout=5.0, fork=False)
        assert (pool.size, pool.idle_timeout, pool.fork) == (3, 5.0, False)
    finally:
        pool.shutdown()

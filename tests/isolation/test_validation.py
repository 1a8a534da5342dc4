"""Bad options and code that cannot run are refused in the kernel, in one line, before any job.

Each refusal is checked three ways: the error says what to give instead (in the words the
in-process ``%%fresh_model`` path uses for the same mistake), no job was handed to a worker,
and the user's namespace is exactly as it was.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import kerasmagic.isolation.api as isolation_api
import kerasmagic.isolation.cell as isolation_cell
from kerasmagic.isolation import IsolationUsageError, run_isolated

pytestmark = pytest.mark.isolation

TIMEOUT_WORDS = "the timeout must be a finite number of seconds > 0"
SEED_WORDS = "the seed must be an integer from 0 to 2**32 - 1"


@pytest.fixture
def jobs(monkeypatch):
    """Every job handed to a worker, recorded instead of run: the list must stay empty."""
    handed: list = []

    def record(job, *args, **kwargs):
        handed.append(job)
        shutil.rmtree(getattr(job, "directory", None) or "", ignore_errors=True)  # as run_job would
        raise AssertionError("a job was handed to a worker")

    monkeypatch.setattr(isolation_api, "run_job", record)
    monkeypatch.setattr(isolation_cell, "run_job", record)
    return handed


@pytest.fixture
def marker(tmp_path):
    """A file the refused code would write if any of it ran."""
    return tmp_path / "ran"


def _usage_error(shell, cell: str, capsys) -> tuple[str, str]:
    """Run ``cell`` as a user would; its UsageError's message and everything that was shown."""
    capsys.readouterr()
    result = shell.run_cell(cell)
    shown = capsys.readouterr()
    error = result.error_in_exec or result.error_before_exec
    assert type(error).__name__ == "UsageError", repr(error)
    return str(error), (shown.out + shown.err).strip()


def _assert_refused_cleanly(shell, cell: str, capsys, jobs, marker) -> str:
    """The cell fails with one line of UsageError; nothing ran and no variable changed."""
    shell.user_ns["kept"] = 1
    before = dict(shell.user_ns)
    message, shown = _usage_error(shell, cell, capsys)
    assert shown == f"UsageError: {message}", shown  # one line: no traceback, no report
    assert "kerasmagic" not in message and "worker.py" not in message
    assert jobs == [] and not marker.exists()
    assert shell.user_ns == before
    return message


# --- 1. timeout: a finite number of seconds > 0 ------------------------------------------------


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), float("-inf"), True, False, 0, 0.0, -1, "600"])
def test_run_isolated_refuses_a_timeout_that_is_not_a_finite_number_of_seconds(timeout, jobs, marker):
    with pytest.raises(IsolationUsageError) as info:
        run_isolated(f"open({str(marker)!r}, 'w').close()", timeout=timeout)
    assert str(info.value).startswith(TIMEOUT_WORDS) and str(info.value).endswith(f"got {timeout!r}")
    assert jobs == [] and not marker.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "1e999", "0", "-1", "abc"])
def test_the_magic_refuses_a_bad_timeout_with_the_same_line(shell, value, capsys, jobs, marker):
    message = _assert_refused_cleanly(
        shell, f"%%fresh_model --isolate --timeout {value}\nkept = 2\nopen({str(marker)!r}, 'w').close()",
        capsys, jobs, marker)
    assert message.startswith(TIMEOUT_WORDS), message
    # The same words as run_isolated(timeout=...): one rule, one message.
    with pytest.raises(IsolationUsageError) as info:
        run_isolated("x = 1", timeout=float(value) if value != "abc" else value)
    assert message == str(info.value)


# --- 2. seed: checked in the kernel, by the in-process rule -------------------------------------


@pytest.mark.parametrize("seed", [-3, "abc", 2**32, 1.5, True])
def test_run_isolated_refuses_a_bad_seed_before_anything_runs(seed, jobs, marker):
    with pytest.raises(IsolationUsageError) as info:
        run_isolated(f"open({str(marker)!r}, 'w').close()", seed=seed)
    assert str(info.value).startswith(SEED_WORDS), str(info.value)
    assert jobs == [] and not marker.exists()


@pytest.mark.parametrize("seed", ["-3", "4294967296"])
def test_the_magic_refuses_a_bad_seed_in_the_in_process_words(shell, seed, capsys, jobs, marker):
    body = f"kept = 2\nopen({str(marker)!r}, 'w').close()"
    isolated = _assert_refused_cleanly(shell, f"%%fresh_model --isolate --seed {seed}\n{body}", capsys, jobs, marker)
    in_process = _assert_refused_cleanly(shell, f"%%fresh_model --seed {seed}\n{body}", capsys, jobs, marker)
    assert isolated == in_process and isolated.startswith(SEED_WORDS)


# --- 3. return / yield / await at the top level -------------------------------------------------


@pytest.mark.parametrize("statement, words", [
    ("return 5", "'return' outside function"),
    ("yield 5", "'yield' outside function"),
    ("await something()", "'await' outside function"),
])
def test_an_isolated_cell_that_cannot_run_is_refused_in_the_in_process_words(
        shell, statement, words, capsys, jobs, marker):
    body = f"kept = 2\nopen({str(marker)!r}, 'w').close()\n{statement}"
    isolated = _assert_refused_cleanly(shell, f"%%fresh_model --isolate\n{body}", capsys, jobs, marker)
    in_process = _assert_refused_cleanly(shell, f"%%fresh_model\n{body}", capsys, jobs, marker)
    assert in_process.startswith(f"the cell cannot run under %%fresh_model: {words}"), in_process
    # Same start and end as the in-process line; in between, the line the notebook shows
    # (the magic's line is 1, so the statement is on line 4).
    assert isolated.startswith(f"the cell cannot run under %%fresh_model: {words} (line 4)"), isolated
    assert isolated.endswith("; nothing was run")
    if "await" in statement:
        assert "asyncio.run()" in isolated and "asyncio.run()" in in_process


@pytest.mark.parametrize("statement, words", [
    ("return 5", "'return' outside function"),
    ("yield 5", "'yield' outside function"),
    ("await something()", "'await' outside function"),
    ("nonlocal x", "nonlocal declaration not allowed at module level"),
])
def test_isolated_code_that_cannot_run_is_refused_here(statement, words, jobs, marker):
    with pytest.raises(IsolationUsageError) as info:
        run_isolated(f"open({str(marker)!r}, 'w').close()\n{statement}")
    assert str(info.value).startswith(f"the code cannot run under run_isolated(): {words} (line 2)"), str(info.value)
    assert str(info.value).endswith("nothing was run")
    assert jobs == [] and not marker.exists()


def test_a_cell_that_does_not_parse_fails_as_it_does_in_process(shell, capsys, jobs, marker):
    body = f"kept = 2\nopen({str(marker)!r}, 'w').close()\nx = (1,"
    isolated = _assert_refused_cleanly(shell, f"%%fresh_model --isolate\n{body}", capsys, jobs, marker)
    in_process = _assert_refused_cleanly(shell, f"%%fresh_model\n{body}", capsys, jobs, marker)
    assert isolated == in_process
    assert isolated == "the cell does not parse: '(' was never closed (line 4: 'x = (1,'); nothing was run"


@pytest.mark.parametrize("call, words", [
    ("run_isolated('x = 1', timeout=float('nan'))", TIMEOUT_WORDS),
    ("run_isolated('x = 1', seed='abc')", SEED_WORDS),
    ("run_isolated('return 5')", "the code cannot run under run_isolated()"),
    ("run_isolated('x = (1,')", "the code does not parse"),
])
def test_run_isolated_in_a_notebook_ends_with_the_one_line_to_act_on(shell, call, words, capsys, jobs):
    """What the notebook shows ends with our message, never with a worker's traceback."""
    shell.user_ns["kept"] = 1
    shell.run_cell("from kerasmagic.isolation import run_isolated")
    before = dict(shell.user_ns)
    capsys.readouterr()
    result = shell.run_cell(call)
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert isinstance(result.error_in_exec, IsolationUsageError)
    assert str(result.error_in_exec).startswith(words), str(result.error_in_exec)
    assert text.strip().splitlines()[-1] == f"IsolationUsageError: {result.error_in_exec}"
    assert "worker.py" not in text and "runner.py" not in text and "pool.py" not in text
    assert jobs == [] and shell.user_ns == before


def test_good_options_still_run(shell):
    """The checks refuse only what is wrong: a real timeout and seed run the cell and bring y back."""
    shell.user_ns["x"] = 21
    result = shell.run_cell("%%fresh_model --isolate --timeout 600 --seed 0 -q\ny = x * 2")
    assert result.success, result.error_in_exec or result.error_before_exec
    assert shell.user_ns["y"] == 42 and shell.user_ns["x"] == 21


# --- 4. the shipping example cleans up after itself ---------------------------------------------


def _job_folders(pid: int) -> set[str]:
    mine = f"kerasmagic-isolated-{pid}-*"
    return set(glob.glob(os.path.join("/dev/shm", mine))) | set(glob.glob(os.path.join(tempfile.gettempdir(), mine)))


def test_the_shipping_example_leaves_no_job_folder():
    # A fresh interpreter, as tests/core/test_docstring_examples.py runs it (doctest's own
    # displayhook would set builtins._ under this process's shell); its folders carry its pid.
    code = ("import doctest, os, kerasmagic.isolation.shipping as m\n"
            "outcome = doctest.testmod(m, optionflags=doctest.ELLIPSIS)\n"
            "print(os.getpid(), outcome.attempted, outcome.failed)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    pid, attempted, failed = (int(word) for word in done.stdout.split()[-3:])
    assert attempted > 0 and failed == 0, done.stdout
    left = _job_folders(pid)
    for folder in left:  # the test must not leave them either
        shutil.rmtree(folder, ignore_errors=True)
    assert left == set()

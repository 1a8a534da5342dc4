"""``%tf_mem --limit/--guard/--warn-at/--stop-at`` through a real InteractiveShell (issue 18): bad
input is one UsageError line, good input shows the limit, its source and the headroom."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import kerasmagic

from shell_helpers import error_of, run

pytestmark = pytest.mark.shell


@pytest.fixture(autouse=True)
def settings_restored():
    yield
    kerasmagic.set_memory_limit(None)
    kerasmagic.memory_guard(True, warn_pct=85, stop_pct=95)


def usage_error(shell, cell: str) -> str:
    error = error_of(shell.run_cell(cell, store_history=True))
    assert isinstance(error, UsageError), repr(error)
    assert "\n" not in str(error)
    return str(error)


@pytest.mark.parametrize("value, words", [
    ("0", "more than 0 bytes"), ("-3GiB", "more than 0 bytes"), ("nan", "finite"), ("lots", "cannot read 'lots'"),
    ("1KiB", "below what this kernel uses now"),
])
def test_bad_limits_are_refused_in_one_line(shell, value, words):
    assert words in usage_error(shell, f"%tf_mem --limit {value}")
    assert kerasmagic.memory_limit().source != "user"  # nothing was set


@pytest.mark.parametrize("line, words", [
    ("--guard maybe", "--guard takes on or off"), ("--stop-at 120", "at most 100"), ("--warn-at nan", "percentage"),
    ("--warn-at 96", "below the stop level"), ("--limit 3GiB --cells", "without --cells"),
])
def test_bad_guard_options_are_refused_in_one_line(shell, line, words):
    assert words in usage_error(shell, f"%tf_mem {line}")


def test_python_calls_refuse_with_value_error(shell):
    for bad in (0, -1, float("nan"), "lots", 1024):
        with pytest.raises(ValueError):
            kerasmagic.set_memory_limit(bad)


@pytest.mark.parametrize("call, words", [
    ("kerasmagic.set_memory_limit('lots')", "cannot read 'lots' as a memory size"),
    ("kerasmagic.set_memory_limit('1KiB')", "below what this kernel uses now"),
    ("kerasmagic.memory_guard('off')", "enabled is True or False"),
    ("kerasmagic.memory_guard(warn_pct=float('inf'))", "percentage of the limit"),
    ("kerasmagic.memory_guard(warn_pct=99)", "below the stop level"),
])
def test_python_calls_in_a_notebook_show_one_line_not_our_frames(shell, call, words):
    # Issue 33: the magics said one line, the same call from Python showed 15-25 lines of traceback
    # through kerasmagic's checks.
    with capture_output() as shown:
        shell.run_cell(f"import kerasmagic\n{call}", store_history=True)
    lines = [line for line in (shown.stdout + shown.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("KerasMagicUsageError: ") and words in lines[0], lines


def test_a_bad_guard_variable_is_said_in_one_line_and_the_guard_stays_on(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, KERASMAGIC_MEMORY_GUARD="maybe")
    run_ = subprocess.run([sys.executable, "-c", "import kerasmagic; print(kerasmagic.memory_guard().enabled)"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert run_.stdout.strip() == "True", run_
    said = run_.stderr.strip().splitlines()
    assert len(said) == 1 and "KERASMAGIC_MEMORY_GUARD='maybe'" in said[0] and "off" in said[0], said


def test_limit_shows_its_source_and_headroom(shell):
    with capture_output() as shown:
        run(shell, "%tf_mem --limit 20GiB --warn-at 80 --stop-at 90")
    text = shown.stdout + "".join(str(o.data.get("text/plain", "")) for o in shown.outputs)
    row = next(line for line in text.splitlines() if "memory limit" in line)
    limit = kerasmagic.memory_limit()
    if limit.source == "user":
        assert "20.0 GiB" in row and "user: set by you" in row, text
    else:  # a cgroup below 20 GiB stays in force, and the report says so
        assert limit.source == "cgroup" and "cgroup" in row and "above the cgroup's limit" in text, text
    assert "headroom" in text and "warns at 80 % of the limit, stops the running cell at 90 %" in text, text
    with capture_output() as shown:
        run(shell, "%tf_mem --limit off --guard off")
    assert kerasmagic.memory_limit().source in ("cgroup", "host", "environment")
    assert kerasmagic.memory_guard().enabled is False

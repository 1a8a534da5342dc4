"""isolated_map's progress: done / running / failed / left with elapsed and the time left, as a line
in a terminal (here: stderr that is not a tty) and as the widget in a real notebook kernel."""

from __future__ import annotations

import json
import re

import pytest

from kerasmagic.isolation import isolated_map
from kerasmagic.isolation.mapping import _Progress

pytestmark = pytest.mark.isolation


def nap(item):
    import time

    time.sleep(0.3)
    return item


def crash_on_one(item):
    import os
    import signal

    if item == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    return item


def test_each_finished_item_prints_the_counts_and_the_time_left(capsys):
    isolated_map(nap, range(3), workers=1)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("isolated_map: job")]
    assert len(lines) == 3, lines
    assert re.search(r"job \[0\] ok after [\d.]+ s; 1/3 done, 0 running, 0 failed, 2 left; [\d.]+ s, "
                     r"about \d+ s left$", lines[0]), lines[0]
    assert re.search(r"job \[2\] ok after [\d.]+ s; 3/3 done, 0 running, 0 failed, 0 left; [\d.]+ s$", lines[2])


def test_failed_and_retried_items_are_counted_apart(capsys):
    isolated_map(crash_on_one, range(3), workers=1, retries=1, on_error="collect")
    err = capsys.readouterr().err
    # The retry line says why the first attempt ended, as the summary's attempts do.
    # (What follows the signal varies: its last Python frame, in parentheses, where faulthandler's
    # lines arrived in time, and the peak RSS.)
    assert re.search(r"job \[1\] ended after [\d.]+ s \(segmentation fault \(signal 11, SIGSEGV\)[^\n]*\); "
                     r"it runs again; 1/3 done", err), err
    assert re.search(r"job \[1\] crash after [\d.]+ s; 2/3 done, 0 running, 1 failed, 0 left", err), err


def test_the_estimate_uses_finished_items_and_the_workers():
    bar = _Progress(10, enabled=False, at_once=2)
    bar.finished_s = [4.0, 6.0]  # two items done, 5 s each on average
    bar.states = ["over", "over", "running", "running"] + ["queued"] * 6
    # 6 left and 2 half-way at 2 at a time: (6 + 1) * 5 s / 2
    assert bar.text().endswith("about 18 s left"), bar.text()
    assert bar.counts() == {"done": 2, "running": 2, "failed": 0, "left": 6}
    restored = _Progress(4, enabled=False, restored=[True, True, False, False])
    assert restored.counts()["done"] == 2 and restored.counts()["left"] == 2


@pytest.mark.kernel
def test_the_notebook_widget_shows_the_counts(tmp_path):
    from kernel_session import KernelSession

    session = KernelSession(cwd=str(tmp_path))
    try:
        session.execute("from kerasmagic import isolated_map\n"
                        "def nap(item):\n    import time\n    time.sleep(0.2)\n    return item\n")
        session.execute("result = isolated_map(nap, range(3), workers=1)", timeout=120)
    finally:
        session.shutdown()
    states = [msg["content"]["data"].get("state", {}) for msg in session.iopub
              if msg["msg_type"] in ("comm_open", "comm_msg")]
    labels = [state["value"] for state in states if isinstance(state.get("value"), str)]
    assert any("1/3 done, 0 running, 0 failed, 2 left" in label and "s left" in label for label in labels), \
        json.dumps(labels)[:2000]
    assert any("3/3 done, 0 running, 0 failed, 0 left" in label for label in labels)
    assert any(state.get("bar_style") == "success" for state in states)  # the bar turns green at the end

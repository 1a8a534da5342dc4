"""The sidebar when its kernel dies or stalls, in a real JupyterLab and headless Chromium: a
kernel that exits in the middle of a cell (as the OOM killer ends one) is told as a death with
its timeline kept, never as a restart, and the next kernel's kerasmagic says why; a kernel that
cannot sample for seconds (stopped with SIGSTOP) leaves a gap in the chart, not a line."""

import os
import re
import signal
import time

import pytest

from .conftest import wait_kernel_ready
from .test_timeline import SIDEBAR, _chart, _open, _run_and_wait

pytestmark = pytest.mark.ui

CELLS = [
    "%load_ext kerasmagic",
    "grown = b'\\x01' * (150 * 2**20)",
    "import os; os._exit(1)",
    "%load_ext kerasmagic",
]
DEATH = f"{SIDEBAR} .jp-KerasMagic-death"


def _death(page) -> dict:
    return page.evaluate(f"""() => {{
        const box = document.querySelector("{DEATH}");
        const chart = box.querySelector('svg.jp-KerasMagic-chart');
        return {{
            hidden: box.hidden, title: box.querySelector('.jp-KerasMagic-deathTitle').textContent,
            text: box.querySelector('.jp-KerasMagic-deathText').textContent,
            marks: chart ? [...chart.querySelectorAll('.jp-KerasMagic-mark')].map(g => g.dataset.kind) : [],
            rssPoints: chart ? Number(chart.querySelector('path[data-series=rss]')?.dataset.points ?? 0) : 0,
            restarted: document.querySelector("{SIDEBAR}").dataset.restartedAt,
            label: chart ? chart.getAttribute('aria-label') : '',
            spans: chart ? [...chart.querySelectorAll('.jp-KerasMagic-span')].map(g => g.dataset.label) : [],
            geometry: box.querySelector('.jp-KerasMagic-timeline')?.dataset.geometry ?? '',
        }};
    }}""")


def test_a_kernel_that_dies_is_told_as_a_death_with_its_timeline_and_why(lab, page, artifacts):
    _open(lab, page, "dies.ipynb", CELLS)
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    _run_and_wait(page, 1)
    # The cell's change on its span: 150 MiB kept (what the cell allocated, written).
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-span[data-label='[2]'][data-change^='+']", timeout=30_000)
    change = page.get_attribute(f"{SIDEBAR} .jp-KerasMagic-span[data-label='[2]']", "data-change")
    amount = re.fullmatch(r"\+(\d+(?:\.\d+)?) MiB", change)
    assert amount and 140 <= float(amount.group(1)) <= 170, change
    time.sleep(2.5)  # a few samples on the timeline before the death

    page.evaluate("""() => {
        const panel = window.jupyterapp.shell.currentWidget;
        panel.content.activeCellIndex = 2;
        void window.jupyterapp.commands.execute('notebook:run-cell');
    }""")
    page.wait_for_function(f"() => !!document.querySelector('{SIDEBAR}').dataset.death", timeout=60_000)
    died = _death(page)
    assert not died["hidden"]
    # `os._exit` can end the kernel before its IOPub thread sends the cell's execute_input: the
    # page then names the cell it sent after the last one the kernel numbered.
    assert re.fullmatch(r"The kernel died at \d\d:\d\d:\d\d while cell \[3\] ran", died["title"]), died
    assert "not a restart" in died["text"] and "%load_ext kerasmagic" in died["text"], died
    assert died["marks"] == ["death"] and died["rssPoints"] >= 3, died
    assert died["restarted"] == "", died  # never told as a restart
    # Its whole life and its cell runs, not the last minute (issue 31, item 4): the chart spans
    # from its first sample (at least 15 s, MIN_FIT_S) to its death, and [2] is drawn.
    lived = re.fullmatch(r"Memory timeline of this kernel, all (\d+) s the sidebar has", died["label"])
    assert lived and 15 <= int(lived.group(1)) < 60, died
    assert "[2]" in died["spans"], died
    page.locator(DEATH).screenshot(path=str(artifacts / "kernel-died.png"))
    # JupyterLab's own "appears to have died" dialog, closed as a user would.
    page.locator(".jp-Dialog .jp-mod-accept").click()
    # In classroom mode (the dialog closed) the dead chart is drawn as large as the live one,
    # not in the usual chart's text.
    assert died["geometry"] == "normal", died
    page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    page.wait_for_function(
        f"() => document.querySelector('{DEATH} .jp-KerasMagic-timeline').dataset.geometry === 'large'",
        timeout=10_000)
    page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")

    # The server started a new kernel: loading kerasmagic there tells why the old one died.
    wait_kernel_ready(page)
    _run_and_wait(page, 3)
    page.wait_for_function(
        f"""() => document.querySelector("{DEATH} .jp-KerasMagic-deathText").textContent
            .includes('exited unexpectedly')""", timeout=60_000)
    told = _death(page)
    assert "while cell [3] ran (`import os; os._exit(1)`)" in told["text"], told
    # One death, one time (issue 33, item 9): the banner's moment the page noticed gives way to the
    # time the post-mortem tells, its watcher's, in the kernel's clock with its zone.
    assert told["title"] == "The kernel died while cell [3] ran", told
    assert re.search(r"died at \d\d:\d\d:\d\d [A-Za-z0-9+-]+ while cell \[3\]", told["text"]), told
    assert told["marks"] == ["death"], told  # the dead timeline is still there beside it
    page.locator(DEATH).screenshot(path=str(artifacts / "kernel-died-explained.png"))
    page.locator(f"{DEATH} .jp-KerasMagic-deathDismiss").click()
    page.wait_for_function(f"() => document.querySelector('{DEATH}').hidden")
    assert page.get_attribute(SIDEBAR, "data-death") == ""


def test_a_kernel_that_cannot_sample_leaves_a_gap_not_a_line(lab, page):
    _open(lab, page, "stalls.ipynb", ["%load_ext kerasmagic"])
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    page.wait_for_function(
        f"() => Number(document.querySelector('{SIDEBAR} path[data-series=rss]')?.dataset.points) >= 3",
        timeout=30_000)
    pid = int(re.search(r"pid (\d+)", page.text_content(f"{SIDEBAR} .jp-KerasMagic-header")).group(1))
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(6)
    finally:
        os.kill(pid, signal.SIGCONT)
    seq = int(page.get_attribute(SIDEBAR, "data-sample-seq"))
    page.wait_for_function(f"() => Number(document.querySelector('{SIDEBAR}').dataset.sampleSeq) >= {seq + 3}",
                           timeout=30_000)
    path = page.get_attribute(f"{SIDEBAR} path[data-series=rss]", "d")
    assert path.count("M") == 2, path  # two runs of samples, nothing drawn between them
    description = _chart(page)["description"]
    hole = re.search(r"no samples for (\d+) s from \d\d:\d\d:\d\d", description)
    assert hole and 5 <= int(hole.group(1)) <= 9, description

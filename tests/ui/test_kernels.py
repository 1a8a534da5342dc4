"""Two notebooks on two kernels, then a restart: what belongs to one kernel stays with it (the
Clear session report, the last event, the timeline's cell spans and points)."""

import json
import re

import pytest

from .conftest import notebook, open_in_lab, panel_data, run_cell, timeline, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

# A holds 256 MiB (np.ones: every page touched) from before its sampler starts, so every point of
# A's timeline is far above every point of B's, which holds nothing: a point of one kernel drawn
# in the other's timeline moves that timeline's range across the gap.
A_CELLS = [
    "import numpy as np\nx = np.ones((65536, 1024), 'float32')",
    "%load_ext kerasmagic",
    "%clear_tf",
    "a = 4",
]
# B's runs are [1] (the load, which is no span: the cell hooks start with it), [2] and [3];
# A's spans are [3] and [4]: a mix shows a label twice or one the notebook never ran.
B_CELLS = ["%load_ext kerasmagic", "b = 2", "b = 3"]
A_SPANS = ["[3]", "[4]"]
B_SPANS = ["[2]", "[3]"]
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

SIDEBAR = "#kerasmagic-sidebar"


def _current_path(page) -> str:
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.context.path")


def _show(page, path: str) -> None:
    """Make the notebook at `path` the active one (opening it if needed), sidebar kept open."""
    open_in_lab(page, path)
    wait_kernel_ready(page)


def _text(page, selector: str) -> str:
    node = page.locator(f"{SIDEBAR} {selector}")
    return node.text_content() if node.is_visible() else ""


def _rss_range(description: str) -> tuple[float, float]:
    """The kernel RSS range the chart's description gives: "Kernel RSS 300 MiB (from 280 MiB to
    310 MiB)" → (280 MiB, 310 MiB) in bytes."""
    found = re.search(r"Kernel RSS [^(]*\(from ([\d.]+) (\w+) to ([\d.]+) (\w+)\)", description)
    assert found, description
    low, low_unit, high, high_unit = found.groups()
    return float(low) * UNITS[low_unit], float(high) * UNITS[high_unit]


def _wait_spans(page, labels: list[str]) -> dict:
    """Wait until the timeline draws at least `labels` and some points; return what it draws (the
    caller asserts it is exactly that: waiting only for what must be there lets extras show)."""
    page.wait_for_function(
        f"""(labels) => {{
            const drawn = [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-span')].map(g => g.dataset.label);
            return labels.every(l => drawn.includes(l))
                && Number(document.querySelector('{SIDEBAR} path[data-series=rss]')?.dataset.points) >= 2;
        }}""",
        arg=labels,
        timeout=60_000,
    )
    return timeline(page)


# Records, after every task that changed the panel, what it showed: blank or not, the notice,
# the header (its pid) and the RSS it shows.
_WATCH_SWITCH = f"""() => {{
    const panel = document.querySelector('{SIDEBAR}');
    const seen = [];
    const observer = new MutationObserver(() => {{
        const body = panel.querySelector('.jp-KerasMagic-body');
        const notice = panel.querySelector('.jp-KerasMagic-notice');
        seen.push({{
            blank: !body || body.hidden,
            notice: notice && notice.offsetParent !== null ? notice.textContent : '',
            kernel: panel.querySelector('.jp-KerasMagic-kernel').textContent,
            rss: panel.dataset.rssBytes ? Number(panel.dataset.rssBytes) : null,
            // The RSS tile as drawn (issue 31, item 5: once the old kernel's for 36 ms).
            tile: panel.querySelector('[data-headline=rss]').hidden ? ''
                : panel.querySelector('[data-headline=rss] .jp-KerasMagic-headlineValue').textContent,
            // The notebook the user looks at when the panel showed this.
            path: window.jupyterapp.shell.currentWidget?.context?.path ?? '',
            state: panel.dataset.state, updating: panel.dataset.updating,
        }});
    }});
    observer.observe(panel, {{attributes: true, childList: true, subtree: true, characterData: true}});
    window.kerasmagicSwitch = {{observer, seen}};
}}"""


def _pid_of(header: str) -> int | None:
    found = re.search(r"pid (\d+)", header)
    return int(found.group(1)) if found else None


def test_two_kernels_keep_their_own_report_and_a_restart_starts_anew(lab, page, artifacts):
    (lab.root / "a.ipynb").write_text(json.dumps(notebook(A_CELLS)))
    (lab.root / "b.ipynb").write_text(json.dumps(notebook(B_CELLS)))
    page.goto(lab.lab_url("a.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    _show(page, "a.ipynb")
    sidebar = page.locator(SIDEBAR)

    # A: hold an array, load, Clear session (button) and %clear_tf (an event), one more cell.
    run_cell(page, 0)
    wait_idle(page)
    run_cell(page, 1)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    sidebar.locator(".jp-KerasMagic-clear").click()
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-report[data-status='ok']", timeout=60_000)
    run_cell(page, 2)
    wait_idle(page)
    page.wait_for_function(
        "() => document.querySelector('#kerasmagic-sidebar .jp-KerasMagic-event').textContent.includes('clear_tf')",
        timeout=30_000,
    )
    run_cell(page, 3)
    wait_idle(page)
    a_chart = _wait_spans(page, A_SPANS)
    assert a_chart["spans"] == A_SPANS, a_chart
    a_low, a_high = _rss_range(a_chart["description"])
    a_report = _text(page, ".jp-KerasMagic-report")
    assert "Cleaned in" in a_report, a_report
    a_pid = sidebar.locator(".jp-KerasMagic-kernel").text_content()

    # B, on its own kernel: none of A's report, none of A's event, none of A's timeline.
    _show(page, "b.ipynb")
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=60_000)
    b_loaded = page.evaluate("() => Date.now() / 1000")
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    b_pid = sidebar.locator(".jp-KerasMagic-kernel").text_content()
    assert b_pid != a_pid
    for index in (1, 2):
        run_cell(page, index)
        wait_idle(page)
    # B's points only: B's sampler started with B's load, long after A's; and all of them far
    # below A's lowest.
    b_chart = _wait_spans(page, B_SPANS)
    assert b_chart["spans"] == B_SPANS, f"B's timeline shows other cell runs than B's: {b_chart}"
    assert float(panel_data(page)["historySince"]) >= b_loaded - 1, "B's timeline has points from before B's load"
    b_low, b_high = _rss_range(b_chart["description"])
    assert b_high + 128 * 2**20 < a_low, f"B's RSS range {b_chart['description']} reaches A's ({a_low}, {a_high})"
    page.screenshot(path=str(artifacts / "sidebar-kernels-1-b.png"))
    assert _text(page, ".jp-KerasMagic-report") == "", "A's Clear session report shows in B's panel"
    assert _text(page, ".jp-KerasMagic-event") == "", "A's last event shows in B's panel"

    # Back to A: its own report and event again. On the way (issue 19, defect 6), what each
    # task left on screen: A's last view at once, never a blank panel or "Connecting…" (no cell
    # runs), and never one kernel's pid over the other's numbers.
    page.evaluate(_WATCH_SWITCH)
    _show(page, "a.ipynb")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    page.wait_for_timeout(300)
    seen = page.evaluate("() => { window.kerasmagicSwitch.observer.disconnect(); "
                         "return window.kerasmagicSwitch.seen; }")
    assert seen, "the switch changed nothing in the panel"
    a_pid_number, b_pid_number = _pid_of(a_pid), _pid_of(b_pid)
    for view in seen:
        assert not view["blank"], f"the panel went blank while switching: {view}"
        assert "Connecting" not in view["notice"], f"'Connecting…' while no cell runs: {view}"
        pid, rss = _pid_of(view["kernel"]), view["rss"]
        # Issue 31, item 5: "· updating…" with the previous notebook's pid once A is shown.
        if view["path"] == "a.ipynb" and pid is not None:
            assert pid == a_pid_number, f"B's pid while A is the notebook shown: {view}"
        if pid is not None and view["tile"]:
            value, unit = view["tile"].split()
            tile = float(value) * UNITS[unit]
            assert (tile > b_high + 128 * 2**20) == (pid == a_pid_number), f"one kernel's pid, the other's tile: {view}"
        if pid is None or rss is None:
            continue
        if pid == a_pid_number:
            assert rss > b_high + 128 * 2**20, f"A's pid over B's numbers: {view}"
        elif pid == b_pid_number:
            assert rss < a_low - 128 * 2**20, f"B's pid over A's numbers: {view}"
    assert _current_path(page) == "a.ipynb"
    assert _text(page, ".jp-KerasMagic-report") == a_report
    assert "clear_tf" in _text(page, ".jp-KerasMagic-event")
    # A's timeline again: its own spans and only its own points (B's low ones would pull the
    # range down), more of them than before (A kept its history and went on sampling).
    back = _wait_spans(page, A_SPANS)
    assert back["spans"] == A_SPANS, f"A's timeline shows other cell runs than A's: {back}"
    low, _ = _rss_range(back["description"])
    assert low > b_high + 128 * 2**20, f"A's timeline has points as low as B's: {back['description']}"
    assert back["series"]["rss"] >= a_chart["series"]["rss"], (a_chart, back)
    page.screenshot(path=str(artifacts / "sidebar-kernels-2-back-to-a.png"))

    # Restart A (same kernel id) with the sidebar closed, as from the notebook's menu: the
    # report and the event go, the restart is marked, and the history starts again with the
    # new process's samples. The store keeps the restart for a reload (issue 31, item 5), also
    # when no panel drew it: after a page reload the line and the mark are still there.
    page.evaluate("() => window.jupyterapp.shell.collapseRight()")
    restarted = page.evaluate("() => Date.now() / 1000")
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    wait_kernel_ready(page)
    run_cell(page, 1)  # %load_ext kerasmagic
    page.wait_for_function("() => (localStorage.getItem('kerasmagic:restarts') ?? '').includes('a.ipynb')",
                           timeout=60_000)
    page.goto(lab.lab_url("a.ipynb").replace("&reset", ""))
    page.wait_for_function("() => !!window.jupyterapp")
    _show(page, "a.ipynb")
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-mark[data-kind='restart']", timeout=30_000)
    assert _text(page, ".jp-KerasMagic-report") == "", "the old kernel's report survives the restart"
    assert _text(page, ".jp-KerasMagic-event") == "", "the old kernel's event survives the restart"
    note = _text(page, ".jp-KerasMagic-restarted")
    assert note.startswith("restarted "), note
    data = panel_data(page)
    assert float(data["restartedAt"]) >= restarted - 1, data
    # Every point of the history is the new kernel's: none from before the restart.
    assert data["historySince"] and float(data["historySince"]) >= restarted, data
    page.screenshot(path=str(artifacts / "sidebar-kernels-3-restarted.png"))

    # B still has its own history and no restart note. The panel's state attributes were A's a
    # moment before: wait for B's pid in the header (CI once read A's restart line here, under load).
    _show(page, "b.ipynb")
    page.wait_for_function(
        f"(pid) => (document.querySelector('{SIDEBAR} .jp-KerasMagic-kernel')?.textContent ?? '').includes(pid)",
        arg=f"pid {b_pid_number}", timeout=60_000)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    assert _text(page, ".jp-KerasMagic-restarted") == ""
    assert float(panel_data(page)["historySince"]) < restarted

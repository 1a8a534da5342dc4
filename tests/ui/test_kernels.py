"""Two notebooks on two kernels, then a restart: what belongs to one kernel stays with it."""

import json

import pytest

from .conftest import notebook, panel_data, run_cell, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

A_CELLS = [
    "%load_ext kerasmagic",
    "import numpy as np\nx = np.zeros((20000, 256), 'float32')",
    "%clear_tf",
]
B_CELLS = ["%load_ext kerasmagic"]

SIDEBAR = "#kerasmagic-sidebar"


def _current_path(page) -> str:
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.context.path")


def _show(page, path: str) -> None:
    """Make the notebook at `path` the active one (opening it if needed), sidebar kept open."""
    page.evaluate(
        """async (path) => {
            await window.jupyterapp.restored;
            await window.jupyterapp.commands.execute('docmanager:open', {path});
        }""",
        path,
    )
    page.wait_for_function("(path) => window.jupyterapp.shell.currentWidget?.context?.path === path", arg=path)
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")


def _text(page, selector: str) -> str:
    node = page.locator(f"{SIDEBAR} {selector}")
    return node.text_content() if node.is_visible() else ""


def test_two_kernels_keep_their_own_report_and_a_restart_starts_anew(lab, page, artifacts):
    (lab.root / "a.ipynb").write_text(json.dumps(notebook(A_CELLS)))
    (lab.root / "b.ipynb").write_text(json.dumps(notebook(B_CELLS)))
    page.goto(lab.lab_url("a.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    _show(page, "a.ipynb")
    sidebar = page.locator(SIDEBAR)

    # A: load, hold an array, Clear session (button) and %clear_tf (an event).
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    run_cell(page, 1)
    wait_idle(page)
    sidebar.locator(".jp-KerasMagic-clear").click()
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-report[data-status='ok']", timeout=60_000)
    run_cell(page, 2)
    wait_idle(page)
    page.wait_for_function(
        "() => document.querySelector('#kerasmagic-sidebar .jp-KerasMagic-event').textContent.includes('clear_tf')",
        timeout=30_000,
    )
    a_report = _text(page, ".jp-KerasMagic-report")
    assert "Cleaned in" in a_report, a_report
    a_pid = sidebar.locator(".jp-KerasMagic-kernel").text_content()

    # B, on its own kernel: none of A's report, none of A's event.
    _show(page, "b.ipynb")
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=60_000)
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    assert sidebar.locator(".jp-KerasMagic-kernel").text_content() != a_pid
    page.screenshot(path=str(artifacts / "sidebar-kernels-1-b.png"))
    assert _text(page, ".jp-KerasMagic-report") == "", "A's Clear session report shows in B's panel"
    assert _text(page, ".jp-KerasMagic-event") == "", "A's last event shows in B's panel"

    # Back to A: its own report and event again.
    _show(page, "a.ipynb")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    assert _current_path(page) == "a.ipynb"
    assert _text(page, ".jp-KerasMagic-report") == a_report
    assert "clear_tf" in _text(page, ".jp-KerasMagic-event")
    page.screenshot(path=str(artifacts / "sidebar-kernels-2-back-to-a.png"))

    # Restart A (same kernel id): the report and the event go, the restart is marked, and the
    # history starts again with the new process's samples.
    restarted = page.evaluate("() => Date.now() / 1000")
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=60_000)
    wait_kernel_ready(page)
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    assert _text(page, ".jp-KerasMagic-report") == "", "the old kernel's report survives the restart"
    assert _text(page, ".jp-KerasMagic-event") == "", "the old kernel's event survives the restart"
    note = _text(page, ".jp-KerasMagic-restarted")
    assert note.startswith("restarted "), note
    data = panel_data(page)
    assert float(data["restartedAt"]) >= restarted - 1, data
    # Every point of the history is the new kernel's: none from before the restart.
    assert data["historySince"] and float(data["historySince"]) >= restarted, data
    page.screenshot(path=str(artifacts / "sidebar-kernels-3-restarted.png"))

    # B still has its own history and no restart note.
    _show(page, "b.ipynb")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    assert _text(page, ".jp-KerasMagic-restarted") == ""
    assert float(panel_data(page)["historySince"]) < restarted

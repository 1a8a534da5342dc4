"""The sidebar in Jupyter Notebook 7 (issue 12): the same prebuilt extension, in Notebook 7's
right sidebar, opened the way a user does it there (View → Right Sidebar), attached to the
kernel of the notebook that page shows."""

import json
import re

import pytest

from .conftest import LabServer, notebook, run_cell, timeline, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

SIDEBAR = "#kerasmagic-sidebar"
CELLS = [
    "%load_ext kerasmagic",
    "import os\nos.getpid()",
]


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    server = LabServer(tmp_path_factory.mktemp("notebook7"), app="notebook")
    try:
        yield server
    finally:
        server.stop()


def _open_right_sidebar_from_the_view_menu(page) -> None:
    """View → Right Sidebar → Show Keras memory (kerasmagic): the entry Notebook 7 makes for each
    widget of its right area (command `application:toggle-panel`)."""
    page.locator(".lm-MenuBar .lm-MenuBar-itemLabel", has_text=re.compile(r"^View$")).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Right Sidebar$")).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel", has_text="Show Keras memory (kerasmagic)").click()


def test_notebook7_right_sidebar_attaches_to_the_page_notebook(notebook7, page, artifacts):
    (notebook7.root / "nb7.ipynb").write_text(json.dumps(notebook(CELLS)))
    page.goto(notebook7.notebook_url("nb7.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    page.evaluate("() => window.jupyterapp.restored")
    # It is Notebook 7's page: its own shell, one notebook in the main area.
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    wait_kernel_ready(page)

    # The plugin put the panel in Notebook 7's right area, which starts collapsed: the panel
    # exists but nobody sees it until the user opens it.
    page.wait_for_selector(SIDEBAR, state="attached")
    assert not page.locator(SIDEBAR).is_visible()
    _open_right_sidebar_from_the_view_menu(page)
    page.wait_for_selector(SIDEBAR, state="visible")
    assert page.evaluate(
        """() => window.jupyterapp.commands.isToggled('application:toggle-panel', {
            side: 'right', title: 'Show Keras memory (kerasmagic)', id: 'kerasmagic-sidebar'})"""
    )
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=60_000)

    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    run_cell(page, 1)
    wait_idle(page)
    # The panel is attached to this page's kernel: the pid it shows is the one the cell printed.
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.content.widgets[1].model.outputs.length > 0"
    )
    kernel_pid = page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.widgets[1].model.outputs.get(0)"
        ".data['text/plain']"
    )
    header = page.locator(f"{SIDEBAR} .jp-KerasMagic-kernel").text_content()
    assert f"pid {kernel_pid} " in header, (kernel_pid, header)

    # The timeline has points and this page's cell runs as spans.
    page.wait_for_function(
        f"""() => Number(document.querySelector('{SIDEBAR} path[data-series=rss]')?.dataset.points) >= 3
                 && [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-span')]
                        .some(g => g.dataset.label === '[2]')""",
        timeout=60_000,
    )
    chart = timeline(page)
    assert chart["series"].get("rss", 0) >= 3, chart
    assert chart["spans"][-1] == "[2]", chart
    assert float(page.locator(SIDEBAR).get_attribute("data-rss-bytes")) > 0
    # The 1 minute window and ten seconds of samples, so that the line is wide enough to see
    # in the screenshot.
    page.locator(f"{SIDEBAR} .jp-KerasMagic-timeline button[data-minutes='1']").click()
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-timeline[data-window='1']")
    page.wait_for_function(
        f"() => Number(document.querySelector('{SIDEBAR} path[data-series=rss]')?.dataset.points) >= 10",
        timeout=60_000,
    )
    page.screenshot(path=str(artifacts / "notebook7-sidebar.png"))

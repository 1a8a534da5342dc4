"""`%tf_mem --live` in a real browser: ipywidgets 8 in JupyterLab, and where no JupyterLab
extension loads, classic Notebook 6.5 on Colab's pins (IPython 7.34, ipykernel 6.17,
ipywidgets 7.7).

Colab and Kaggle render outputs with their own frontends, which cannot run here; classic
Notebook 6 is the same situation that can (no sidebar, ipywidgets 7, display updates routed by
id). Its server and kernel come from `.venv-colab`, which `./dev.sh test` builds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import JupyterServerProcess, notebook, run_cell, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

COLAB_VENV = Path(__file__).parents[2] / ".venv-colab"


class ClassicNotebookServer(JupyterServerProcess):
    """`jupyter notebook` 6.x from the pinned venv, on a free port, in a temporary folder."""

    name = "classic notebook server"

    def __init__(self, root: Path) -> None:
        python = COLAB_VENV / "bin" / "python"
        if not python.exists():
            pytest.skip("no .venv-colab: `./dev.sh test` builds it (Colab's pins, then the wheel)")
        super().__init__(root)
        home = root / "home"
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
        args = [str(python), "-m", "notebook", "--no-browser", f"--port={self.port}", "--NotebookApp.ip=127.0.0.1",
                f"--NotebookApp.token={self.token}", f"--NotebookApp.notebook_dir={root}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        self._start(args, env)


@pytest.fixture(scope="module")
def classic(tmp_path_factory):
    server = ClassicNotebookServer(tmp_path_factory.mktemp("classic"))
    try:
        yield server
    finally:
        server.stop()


def _run(page, index: int) -> None:
    page.evaluate("(i) => { Jupyter.notebook.select(i); Jupyter.notebook.execute_cell(); }", index)


def _wait_idle(page) -> None:
    page.wait_for_function("() => !Jupyter.notebook.kernel_busy && document.querySelector('#kernel_indicator_icon')"
                           ".classList.contains('kernel_idle_icon')", timeout=120_000)


def _live_text(page, index: int) -> str:
    return page.evaluate("(i) => Jupyter.notebook.get_cell(i).output_area.element[0].textContent", index)


def _wait_text(page, index: int, *needles: str, timeout_ms: int = 30_000) -> str:
    """A cell's output text once it holds every needle. A view's text can be empty for a moment
    while ipywidgets 7 renders it again (seen once in CI, right after the cell went idle): only a
    view that never says it fails."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("([i, needles]) => { const text = Jupyter.notebook.get_cell(i).output_area"
                               ".element[0].textContent || ''; return needles.every(n => text.includes(n)); }",
                               arg=[index, list(needles)], timeout=timeout_ms)
    except PlaywrightTimeout:  # say what the view showed instead
        raise AssertionError(f"cell {index} never showed {needles}: {_live_text(page, index)!r}") from None
    return _live_text(page, index)


def _chart(page, index: int) -> str:
    return page.evaluate("(i) => [...Jupyter.notebook.get_cell(i).output_area.element[0].querySelectorAll('svg')]"
                         ".map(s => s.outerHTML).join('')", index)


def test_live_view_in_classic_notebook_widgets_then_in_place(classic, page, artifacts):
    cells = [
        "%load_ext kerasmagic\nfrom kerasmagic.live import channel\nchannel.active_channel().sampler.set_interval(0.3)",
        "%tf_mem --live",
        "grown = bytearray(96 * 2**20)\nimport time; time.sleep(1.0)",
        "%tf_mem --live display",
    ]
    (classic.root / "live.ipynb").write_text(json.dumps(notebook(cells)))
    page.goto(f"{classic.url}/notebooks/live.ipynb?token={classic.token}")
    page.wait_for_function("() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
                           " && Jupyter.notebook.kernel.is_connected()", timeout=90_000)
    _wait_idle(page)
    _run(page, 0)
    _wait_idle(page)
    _run(page, 1)
    # ipywidgets 7.7.1 renders the view; it says which kind it is and goes on updating after its cell.
    page.wait_for_function("() => (Jupyter.notebook.get_cell(1).output_area.element[0].textContent || '')"
                           ".includes('Kernel memory (RSS)')", timeout=60_000)
    _wait_idle(page)
    _wait_text(page, 1, "kerasmagic live", "widgets: ipywidgets 7.7.1")
    before = _chart(page, 1)
    _run(page, 2)
    _wait_idle(page)
    page.wait_for_function("(before) => [...Jupyter.notebook.get_cell(1).output_area.element[0]"
                           ".querySelectorAll('svg')].map(s => s.outerHTML).join('') !== before", arg=before,
                           timeout=30_000)
    # The cell that ran in between is marked on the chart, as on the sidebar's timeline.
    page.wait_for_function("() => (Jupyter.notebook.get_cell(1).output_area.element[0].textContent || '')"
                           ".includes('[3]')", timeout=30_000)
    page.screenshot(path=str(artifacts / "live-view-classic-widgets.png"))

    _run(page, 3)
    page.wait_for_function("() => (Jupyter.notebook.get_cell(3).output_area.element[0].textContent || '')"
                           ".includes('Kernel memory (RSS)')", timeout=60_000)
    _wait_idle(page)
    _wait_text(page, 3, "kerasmagic live (display: asked for with --live display")
    # The in-place output keeps changing after its cell ended: classic routes updates by display id.
    first = _chart(page, 3)
    page.wait_for_function("(first) => [...Jupyter.notebook.get_cell(3).output_area.element[0]"
                           ".querySelectorAll('svg')].map(s => s.outerHTML).join('') !== first", arg=first,
                           timeout=30_000)
    outputs = page.evaluate("() => Jupyter.notebook.get_cell(3).output_area.outputs.length")
    assert outputs == 1, "updated in place, not appended"
    # One view at a time: the widget view says it stopped.
    page.wait_for_function("() => (Jupyter.notebook.get_cell(1).output_area.element[0].textContent || '')"
                           ".includes('kerasmagic stopped')", timeout=30_000)
    page.screenshot(path=str(artifacts / "live-view-classic-display.png"))
    assert "[3]" in _live_text(page, 3), "the in-place view marks the cells the kernel remembers"


def test_live_widgets_and_the_in_place_view_in_jupyterlab_update_after_the_cell(lab, page):
    cells = [
        "%load_ext kerasmagic\nfrom kerasmagic.live import channel\nchannel.active_channel().sampler.set_interval(0.3)",
        "%tf_mem --live",
        "%tf_mem --live display",
    ]
    (lab.root / "live.ipynb").write_text(json.dumps(notebook(cells)))
    page.goto(lab.lab_url("live.ipynb"))
    wait_kernel_ready(page)
    run_cell(page, 0)
    wait_idle(page)
    run_cell(page, 1)
    view = page.locator(".jp-OutputArea-output .widget-vbox").first
    view.get_by_text("Kernel memory (RSS)").wait_for()
    wait_idle(page)
    import ipywidgets

    assert f"widgets: ipywidgets {ipywidgets.__version__}" in view.text_content()
    chart = view.locator("svg").first.inner_html()
    # The kernel is idle: the sampler thread still redraws the chart.
    page.wait_for_function("(before) => { const svg = document.querySelector('.jp-OutputArea-output .widget-vbox svg');"
                           " return svg && svg.innerHTML !== before; }", arg=chart, timeout=30_000)
    # The in-place view (no widgets) replaces the widget view and goes on after its cell too.
    run_cell(page, 2)
    page.wait_for_function("() => [...document.querySelectorAll('.jp-OutputArea-output')].some(o =>"
                           " o.textContent.includes('kerasmagic live (display'))", timeout=60_000)
    wait_idle(page)
    in_place = ("() => [...document.querySelectorAll('.jp-OutputArea-output')].filter(o =>"
                " o.textContent.includes('kerasmagic live (display')).map(o => o.innerHTML).join('')")
    shown = page.evaluate(in_place)
    page.wait_for_function(f"(before) => ({in_place})() !== before", arg=shown, timeout=30_000)
    assert "kerasmagic stopped" in view.text_content()  # one view at a time

"""The sidebar on the oldest stack we support: JupyterLab 4.0 with ipykernel 6.29, as university
hubs run it (no kernel subshells: a comm message waits for the running cell). No TensorFlow
there: the panel's process figures and the cell spans need none.

`.venv-lab40` is made by dev.sh's `setup_lab40_stack` from the built wheel, installed as users
install it; `./dev.sh test` creates it.
"""

import json
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import LabServer, notebook, open_in_lab, panel_data, run_cell, timeline, wait_kernel_ready

pytestmark = pytest.mark.ui

ROOT = Path(__file__).parents[2]
LAB40_PYTHON = ROOT / ".venv-lab40" / "bin" / "python"
SIDEBAR = "#kerasmagic-sidebar"
MIB = 2**20


@pytest.fixture(scope="module")
def lab40(tmp_path_factory):
    if not LAB40_PYTHON.exists():
        pytest.skip(
            f"no {LAB40_PYTHON.parent.parent} (JupyterLab 4.0.13 + ipykernel 6.29.5 + the kerasmagic "
            "wheel): './dev.sh test' creates it; by hand, build a wheel "
            "('python -m pip wheel --no-deps -w dist .') and run './dev.sh lab40 dist/kerasmagic-*.whl'"
        )
    server = LabServer(tmp_path_factory.mktemp("lab40"), python=str(LAB40_PYTHON))
    try:
        yield server
    finally:
        server.stop()


def _open(page, lab, path: str, navigate: bool = True) -> None:
    """Open `path` in JupyterLab (after a reload too) and show the Keras memory panel."""
    if navigate:
        page.goto(lab.lab_url(path))
    page.wait_for_function("() => !!window.jupyterapp")
    open_in_lab(page, path)


def _stack(page) -> dict:
    """What the page runs on: JupyterLab's version, what the kernel says it supports, and
    whether the page's kernel connection has a subshell API."""
    return page.evaluate(
        """async () => {
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            const info = await kernel.info;
            return {lab: window.jupyterapp.version, features: info.supported_features ?? [],
                    hasSubshellApi: 'subshellId' in kernel};
        }"""
    )


def _notice(page) -> str:
    return page.locator(f"{SIDEBAR} .jp-KerasMagic-notice").text_content()


def test_the_sidebar_attaches_and_goes_live_on_jupyterlab_4_0(lab40, page, artifacts):
    # A cell that touches 200 MiB (bytes of 'x', so the pages are really written): RSS must show it.
    cells = ["%load_ext kerasmagic", f"blob = b'x' * ({200 * MIB})"]
    (lab40.root / "lab40.ipynb").write_text(json.dumps(notebook(cells)))
    _open(page, lab40, "lab40.ipynb")
    wait_kernel_ready(page)
    stack = _stack(page)
    # Proof of where this ran: the oldest JupyterLab, ipykernel 6.29 (its kernel info names
    # IPython's version, not its own: asked of the interpreter the server starts kernels with),
    # no subshells, and a page whose kernel connection has no subshell API (services 7.0).
    assert stack["lab"].startswith("4.0."), stack
    assert "kernel subshells" not in stack["features"], stack
    assert stack["hasSubshellApi"] is False, stack
    ipykernel = subprocess.run([str(LAB40_PYTHON), "-c", "import ipykernel; print(ipykernel.__version__)"],
                               capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert ipykernel.startswith("6.29."), ipykernel

    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=30_000)
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    before = int(panel_data(page)["rssBytes"])
    assert before > 20 * MIB, before

    run_cell(page, 1)
    # Live numbers: a later sample's RSS carries the 200 MiB.
    page.wait_for_function(
        f"() => Number(document.getElementById('kerasmagic-sidebar').dataset.rssBytes) > {before + 150 * MIB}",
        timeout=30_000,
    )
    headline = page.locator(f"{SIDEBAR} [data-headline='rss'] .jp-KerasMagic-headlineValue").text_content()
    assert "MiB" in headline or "GiB" in headline, headline
    # The cell run as a span labelled by its execution count.
    page.wait_for_function(
        """() => [...document.querySelectorAll('#kerasmagic-sidebar svg.jp-KerasMagic-chart .jp-KerasMagic-span')]
                 .some(g => g.dataset.label === '[2]')""",
        timeout=30_000,
    )
    drawn = timeline(page)
    assert "[2]" in drawn["spans"], drawn
    assert drawn["series"].get("rss", 0) >= 2, drawn
    page.screenshot(path=str(artifacts / "sidebar-jupyterlab-4.0.png"))


# Long enough for a reload on a busy 2-core machine to finish well inside it; the asserts below
# prove the cell was still running at each step.
BUSY_S = 30


def test_ipykernel_6_attaching_during_a_cell_names_it_then_goes_live(lab40, page, artifacts):
    cells = ["%load_ext kerasmagic",
             f"import time\ntime.sleep({BUSY_S})\nopen('cell-ended', 'w').close()"]
    (lab40.root / "busy40.ipynb").write_text(json.dumps(notebook(cells)))
    ended = lab40.root / "cell-ended"
    _open(page, lab40, "busy40.ipynb")
    wait_kernel_ready(page)
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=30_000)

    # Both cells at once, as Run All does: once %load_ext has run the panel opens its comm,
    # which ipykernel 6 handles only after the sleeping cell [2]. The page saw [2] start.
    started = time.monotonic()
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_selector(f"{SIDEBAR}[data-state='waiting']", timeout=15_000)
    page.wait_for_function(
        "() => document.querySelector('#kerasmagic-sidebar .jp-KerasMagic-notice').dataset.waitingFor === '2'",
        timeout=10_000,
    )
    text = _notice(page)
    assert "it answers after cell [2] ends" in text, text
    assert "This kernel (ipykernel 6 or older) has no subshells" in text, text
    assert not ended.exists(), "the cell ended before the panel said it waits for it"
    page.screenshot(path=str(artifacts / "sidebar-jupyterlab-4.0-waiting.png"))

    # A reload during the cell: the new page saw no cell start, so it says "the running cell",
    # within seconds, rather than "Connecting…" until the cell ends.
    page.reload()
    _open(page, lab40, "busy40.ipynb", navigate=False)
    # Every state the panel shows from here on: a retry of the unanswered open (the reloaded
    # page thinks the kernel idle) must not flip it back to "Connecting…".
    page.evaluate(
        """() => {
            const panel = document.getElementById('kerasmagic-sidebar');
            window.kmStates = [panel.dataset.state];
            new MutationObserver(() => window.kmStates.push(panel.dataset.state))
                .observe(panel, {attributes: true, attributeFilter: ['data-state']});
        }"""
    )
    page.wait_for_selector(f"{SIDEBAR}[data-state='waiting']", timeout=20_000)
    text = _notice(page)
    assert "it answers after the running cell ends" in text, text
    assert not ended.exists(), (
        f"the cell ended {time.monotonic() - started:.0f} s after it started, before the reloaded page "
        "said it waits for it: this proves nothing"
    )

    # The cell ends, the kernel answers, and the live view replaces the waiting notice.
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=BUSY_S * 1000 + 60_000)
    assert ended.exists(), "connected before the cell ended: on ipykernel 6 that cannot be"
    assert page.locator(f"{SIDEBAR} .jp-KerasMagic-notice").is_hidden()
    states = page.evaluate("() => window.kmStates")
    after = states[states.index("waiting"):]
    assert set(after) <= {"waiting", "connected"}, states
    assert int(panel_data(page)["rssBytes"]) > 20 * MIB

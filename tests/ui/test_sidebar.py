"""The sidebar in a real JupyterLab and headless Chromium: attach, live during fit(), clear, reload."""

import json
import time

import pytest

from .conftest import kernel_status, notebook, panel_data, run_cell, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

CELLS = [
    "%load_ext kerasmagic",
    # ~5 s of fit() on 2 cores: long enough to watch several samples arrive mid-cell.
    "import numpy as np, keras\n"
    "x = np.random.rand(16000, 256).astype('float32'); y = np.random.randint(0, 10, 16000)\n"
    "model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation='relu'),\n"
    "                          keras.layers.Dense(1024, activation='relu'), keras.layers.Dense(10)])\n"
    "model.compile('adam', keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
    "model.fit(x, y, epochs=2, batch_size=64, verbose=0)\n"
    "del model",
]


def test_sidebar_live_during_fit_clear_and_reload(lab, page, artifacts):
    (lab.root / "sidebar.ipynb").write_text(json.dumps(notebook(CELLS)))
    page.goto(lab.lab_url("sidebar.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    # Opened as the docs tell users to: the command palette's entry.
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:activate-command-palette')")
    page.keyboard.type("Keras memory")
    entry = page.locator(".lm-CommandPalette-item", has_text="Show the Keras memory sidebar")
    entry.first.click()
    page.wait_for_selector("#kerasmagic-sidebar:not(.lm-mod-hidden)")
    # ... with the focus in the panel, as the README says (issue 31, item 5: the palette gave
    # it back to the notebook).
    page.wait_for_timeout(500)
    assert page.evaluate("() => document.querySelector('#kerasmagic-sidebar').contains(document.activeElement)"), \
        page.evaluate("() => document.activeElement.outerHTML.slice(0, 200)")
    sidebar = page.locator("#kerasmagic-sidebar")

    # 1. Not loaded yet: the panel says so and shows the line to run.
    page.wait_for_selector("#kerasmagic-sidebar[data-state='not_loaded']")
    assert "%load_ext kerasmagic" in sidebar.locator(".jp-KerasMagic-code").text_content()
    page.screenshot(path=str(artifacts / "sidebar-1-not-loaded.png"))

    # 2. Loading attaches the sidebar without any click.
    run_cell(page, 0)
    page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]")
    tf_line = sidebar.locator("[data-section='tf'] .jp-KerasMagic-sectionTitle").text_content()
    assert tf_line == "TensorFlow not imported", tf_line

    # 3. Numbers move while fit() holds the kernel.
    run_cell(page, 1)
    seen_seq, seen_rss, deadline = set(), set(), time.monotonic() + 120
    while time.monotonic() < deadline:
        busy = kernel_status(page) == "busy"
        data = panel_data(page)
        if busy:
            seen_seq.add(data.get("sampleSeq"))
            seen_rss.add(sidebar.locator("[data-headline='rss'] .jp-KerasMagic-headlineValue").text_content())
            if len(seen_seq) == 3:
                page.screenshot(path=str(artifacts / "sidebar-2-during-fit.png"))
        elif len(seen_seq) > 1:
            break
        time.sleep(0.25)
    assert len(seen_seq) >= 3, f"samples seen while the cell ran: {seen_seq}"
    assert len(seen_rss) >= 2, f"RSS values seen while the cell ran: {seen_rss}"
    wait_idle(page)
    page.wait_for_function(
        "() => document.getElementById('kerasmagic-sidebar').dataset.tfInUseBytes > 0", timeout=20_000
    )
    before = int(panel_data(page)["tfInUseBytes"])
    assert sidebar.locator(".jp-KerasMagic-chip").count() >= 1  # Keras name counters (dense ...)

    # 4. Clear session: report shown, TF's in-use bytes drop (the deleted model was pinned).
    sidebar.locator(".jp-KerasMagic-clear").click()
    page.wait_for_selector("#kerasmagic-sidebar .jp-KerasMagic-report[data-status='ok']", timeout=60_000)
    report = sidebar.locator(".jp-KerasMagic-report").text_content()
    assert report.startswith("Cleaned in") and "Still held (" in report, report
    page.wait_for_function(
        f"() => Number(document.getElementById('kerasmagic-sidebar').dataset.tfInUseBytes) < {before}",
        timeout=20_000,
    )
    after = int(panel_data(page)["tfInUseBytes"])
    page.screenshot(path=str(artifacts / "sidebar-3-after-clear.png"))
    print(f"TF in use before clear {before} B, after {after} B")

    # 5. Reload: the new page re-attaches to the same kernel.
    page.reload()
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]", timeout=30_000)

    # 6. Kernel restart: the panel says "not loaded" again, and re-attaches after %load_ext.
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_selector("#kerasmagic-sidebar[data-state='not_loaded']", timeout=60_000)
    wait_kernel_ready(page)
    run_cell(page, 0)
    page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]", timeout=30_000)

    # 7. Dark theme: the panel uses theme variables only.
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_selector("#jupyterlab-splash", state="detached")  # the theme switch splash
    page.screenshot(path=str(artifacts / "sidebar-4-reloaded-dark.png"))


WIDGET_CELLS = [
    "%load_ext kerasmagic",
    "import ipywidgets\nslider = ipywidgets.IntSlider(value=3)\nslider",
    "import time\nfrom comm import get_comm_manager\ntime.sleep(2)\n"
    "print('widget comm', 'open' if slider.comm is not None and slider.comm.comm_id in get_comm_manager().comms"
    " else 'closed')",
]


def test_a_widget_shown_while_the_sidebar_is_attached_keeps_its_comm(lab, page):
    # The sidebar's comm runs on its own connection to the kernel (on a subshell), which sees
    # every comm the kernel opens: it must leave the widgets' comms to the notebook.
    (lab.root / "widgets.ipynb").write_text(json.dumps(notebook(WIDGET_CELLS)))
    page.goto(lab.lab_url("widgets.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.commands.execute('kerasmagic:open-sidebar')")
    run_cell(page, 0)
    page.wait_for_selector("#kerasmagic-sidebar[data-state='connected']", timeout=60_000)
    subshells = page.evaluate(
        """async () => {
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            const reply = await kernel.requestListSubshell({}).done;
            return reply.content.subshell_id;
        }"""
    )
    assert len(subshells) == 1, f"precondition: the sidebar's comm is on a subshell ({subshells})"
    run_cell(page, 1)
    page.wait_for_selector(".jp-Cell >> nth=1 >> .widget-slider", timeout=60_000)
    wait_idle(page)
    run_cell(page, 2)
    output = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output")
    output.first.wait_for(timeout=60_000)
    assert output.first.text_content().strip() == "widget comm open"

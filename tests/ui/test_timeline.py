"""The sidebar's timeline and headlines in a real JupyterLab and headless Chromium: attached,
during a fit (points and a running cell span), a click on a span shows its cell, Clear session
during a running cell (queued, then the compact summary and a clear mark), 250 px and wide,
dark theme, and a restart (a restart mark and a new history)."""

import json
import re
import time

import pytest

from .conftest import kernel_status, notebook, panel_data, run_cell, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

SIDEBAR = "#kerasmagic-sidebar"
FIT = (
    "import numpy as np, keras\n"
    "x = np.random.rand(16000, 256).astype('float32'); y = np.random.randint(0, 10, 16000)\n"
    "model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation='relu'),\n"
    "                          keras.layers.Dense(1024, activation='relu'), keras.layers.Dense(10)])\n"
    "model.compile('adam', keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
    "history = model.fit(x, y, epochs=2, batch_size=64, verbose=0)"
)
# Enough cells after the fit that showing it means scrolling back up.
FILLER = [f"filler_{i} = {i}" for i in range(40)]
CELLS = ["%load_ext kerasmagic", FIT, *FILLER, "last = 1"]
LAST = len(CELLS) - 1


def _open(lab, page, name: str, cells: list[str]) -> None:
    (lab.root / name).write_text(json.dumps(notebook(cells)))
    page.goto(lab.lab_url(name))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")


def _run_and_wait(page, index: int, timeout_s: float = 180) -> None:
    run_cell(page, index)
    page.wait_for_function(
        "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.executionCount !== null"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
        arg=index, timeout=timeout_s * 1000,
    )


def _chart(page) -> dict:
    """What the timeline shows, read from the DOM."""
    return page.evaluate(f"""() => {{
        const root = document.querySelector('{SIDEBAR} .jp-KerasMagic-timeline');
        const svg = root.querySelector('svg.jp-KerasMagic-chart');
        return {{
            window: root.dataset.window,
            label: svg.getAttribute('aria-label'),
            description: document.getElementById(svg.getAttribute('aria-describedby')).textContent,
            series: Object.fromEntries([...svg.querySelectorAll('path.jp-KerasMagic-series')]
                .map(p => [p.dataset.series, Number(p.dataset.points)])),
            spans: [...svg.querySelectorAll('.jp-KerasMagic-span')].map(g => ({{
                label: g.dataset.label, status: g.dataset.status,
                running: g.classList.contains('jp-mod-running'),
                shown: g.querySelector('.jp-KerasMagic-spanLabel')?.textContent ?? null,
            }})),
            marks: [...svg.querySelectorAll('.jp-KerasMagic-mark')].map(g => ({{
                kind: g.dataset.kind, text: g.querySelector('text').textContent,
            }})),
            ticks: [...svg.querySelectorAll('.jp-KerasMagic-axisLabels text')].map(t => t.textContent),
            legend: [...root.querySelectorAll('.jp-KerasMagic-legendItem')].map(li => li.textContent),
        }};
    }}""")


def _headlines(page) -> dict:
    return page.evaluate(f"""() => Object.fromEntries(
        [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-headline')]
            .filter(h => !h.hidden)
            .map(h => [h.dataset.headline, h.querySelector('.jp-KerasMagic-headlineValue').textContent]))""")


def _set_sidebar_width(page, width: int) -> float:
    """Resize the right sidebar through the shell's split panel; returns the width reached."""
    for _ in range(4):
        reached = page.evaluate(
            """(target) => {
                const shell = window.jupyterapp.shell;
                const split = shell._hsplitPanel;
                const node = document.getElementById('kerasmagic-sidebar');
                const now = node.getBoundingClientRect().width;
                const sizes = split.relativeSizes();
                const last = sizes.length - 1;
                const scale = target / now;
                const right = sizes[last] * scale;
                sizes[1] += sizes[last] - right;
                sizes[last] = right;
                split.setRelativeSizes(sizes);
                split.fit();
                return now;
            }""",
            width,
        )
        time.sleep(0.4)
        reached = page.evaluate("() => document.getElementById('kerasmagic-sidebar').getBoundingClientRect().width")
        if abs(reached - width) <= 8:
            break
    return reached


def _layout_defects(page) -> list[str]:
    """Elements that stick out of the panel sideways, and inner scrollbars below the panel."""
    return page.evaluate(f"""() => {{
        const panel = document.querySelector('{SIDEBAR}');
        const box = panel.getBoundingClientRect();
        const out = [];
        if (panel.scrollWidth > panel.clientWidth + 1)
            out.push('panel scrolls sideways: ' + panel.scrollWidth + ' > ' + panel.clientWidth);
        for (const node of panel.querySelectorAll('*')) {{
            if (node.closest('[hidden]') || node.closest('.jp-KerasMagic-srOnly')) continue;
            const r = node.getBoundingClientRect();
            if (r.width === 0 && r.height === 0) continue;
            if (r.right > box.right + 1 || r.left < box.left - 1)
                out.push('sticks out: ' + (node.className.baseVal ?? node.className)
                         + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
            const style = getComputedStyle(node);
            if (/(auto|scroll)/.test(style.overflowY) && node.scrollHeight > node.clientHeight + 1)
                out.push('inner scrollbar: ' + node.className);
        }}
        return out.slice(0, 10);
    }}""")


def test_timeline_during_a_fit_and_a_click_on_a_cell_span(lab, page, artifacts):
    _open(lab, page, "timeline.ipynb", CELLS)
    sidebar = page.locator(SIDEBAR)
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]")

    # 1. Attached: headlines with numbers, the chart named and described, a legend.
    page.wait_for_function(
        f"() => Number(document.querySelector('{SIDEBAR} path[data-series=rss]')?.dataset.points) >= 2",
        timeout=30_000,
    )
    heads = _headlines(page)
    assert re.fullmatch(r"[\d.]+ (MiB|GiB)", heads["rss"]), heads
    assert "tf" not in heads, f"a TF headline without TensorFlow: {heads}"
    chart = _chart(page)
    # By default the chart fits all the history it has (a short lesson fills it).
    assert re.fullmatch(r"Memory timeline of this kernel, all \d+ s the sidebar has", chart["label"]), chart
    assert chart["window"] == "0"
    assert chart["description"].startswith("Kernel RSS "), chart["description"]
    assert "Kernel RSS" in chart["legend"], chart
    assert any(re.fullmatch(r"\d+(\.\d+)? (KiB|MiB|GiB)", t) for t in chart["ticks"]), chart["ticks"]
    span = re.search(r"all (\d+ s) the sidebar has", chart["label"]).group(1)
    assert chart["ticks"][-2:] == [f"−{span}", "now"], chart["ticks"]
    tf_line = sidebar.locator("[data-section='tf'] .jp-KerasMagic-sectionTitle").text_content()
    assert tf_line == "TensorFlow not imported", tf_line
    assert sidebar.locator("[data-section='keras'] .jp-KerasMagic-sectionTitle").text_content() == "Keras not imported"
    # The %load_ext cell itself is not recorded; the first span is the fit's.
    sidebar.screenshot(path=str(artifacts / "timeline-1-attached.png"))

    # 2. During the fit: a running span [2] and the lines growing while the cell runs.
    run_cell(page, 1)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-span.jp-mod-running[data-label='[2]']", timeout=60_000)
    points_at_start = _chart(page)["series"]["rss"]
    seen_running, deadline = False, time.monotonic() + 120
    while time.monotonic() < deadline and kernel_status(page) == "busy":
        chart = _chart(page)
        running = [s for s in chart["spans"] if s["running"]]
        if running and chart["series"]["rss"] >= points_at_start + 3:
            seen_running = True
            assert running[0]["label"] == "[2]" and running[0]["status"] == "running", running
            sidebar.screenshot(path=str(artifacts / "timeline-2-during-fit.png"))
            break
        time.sleep(0.25)
    assert seen_running, "no running span with new points while the fit ran"
    wait_idle(page)
    page.wait_for_function(
        f"() => !document.querySelector('{SIDEBAR} .jp-KerasMagic-span.jp-mod-running')", timeout=30_000
    )
    # TensorFlow keeps CPU allocator statistics with oneDNN (Intel CPUs) or TF_CPU_ALLOCATOR_USE_BFC=1
    # (the server's default, conftest.py): with them the TF lines and headline appear, without them
    # the TF section says why and gives the remedy.
    allocator = page.evaluate("""() => {
        const tf = [...window.jupyterapp.shell.widgets('right')]
            .find(w => w.id === 'kerasmagic-sidebar').connection.latestSample.tf;
        const cpu = tf.devices && tf.devices['CPU:0'];
        return !!cpu && typeof cpu.in_use_bytes === 'number';
    }""")
    if allocator:
        page.wait_for_function(f"() => document.querySelector('{SIDEBAR}').dataset.tfInUseBytes > 0", timeout=30_000)
    chart = _chart(page)
    [fit_span] = [s for s in chart["spans"] if s["label"] == "[2]"]
    # The span says what the fit did where it has room (issue 19): "[2] +48.0 MiB, peak …".
    assert fit_span["status"] == "ok", fit_span
    assert re.fullmatch(r"\[2\]( [+−][\d.]+ [KMG]?i?B(, peak [\d.]+ [KMG]?i?B)?)?", fit_span["shown"]), fit_span
    with_points = {k for k, v in chart["series"].items() if v > 0}
    heads = _headlines(page)
    tf_lines = sidebar.locator("[data-section='tf'] .jp-KerasMagic-line").all_text_contents()
    assert sidebar.locator("[data-section='tf'] .jp-KerasMagic-sectionTitle").text_content() == "TensorFlow"
    if allocator:
        assert {"rss", "tf_in_use", "tf_held"} <= with_points, chart["series"]
        assert {"Kernel RSS", "TF in use", "TF held"} <= set(chart["legend"]), chart["legend"]
        assert re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)", heads["tf"]), heads
    else:
        assert {"rss"} <= with_points and "tf_in_use" not in with_points, chart["series"]
        assert "tf" not in heads, heads
        assert any("no allocator statistics" in line and "TF_CPU_ALLOCATOR_USE_BFC=1" in line
                   for line in tf_lines), tf_lines
    assert any(line.startswith("Graph: ") for line in tf_lines), tf_lines
    # The fit traced Adam's train step: TensorFlow's CustomGradient entries, counted in every sample,
    # are a line of their own on a count scale labelled at the right (lesson 6's second story).
    assert "custom_gradient_entries" in with_points and "CustomGradient entries" in chart["legend"], chart
    assert any(re.fullmatch(r"\d+ entries", t) for t in chart["ticks"]), chart["ticks"]
    if "cpu_pct" in chart["series"]:
        assert chart["series"]["cpu_pct"] > 0 and "CPU" in chart["legend"], chart
        assert re.fullmatch(r"[\d.]+ %", heads["cpu"]), heads
    # Facts read on the main thread say which cell they are as of.
    as_of = sidebar.locator("[data-section='keras'] .jp-KerasMagic-asOf").text_content()
    assert re.fullmatch(r"as of cell \[2\], \d\d:\d\d:\d\d", as_of), as_of
    # ... at the time cell [2] ended (the kernel's cell_ended_ts), not when the facts were read.
    ended = page.evaluate("""() => {
        const facts = [...window.jupyterapp.shell.widgets('right')]
            .find(w => w.id === 'kerasmagic-sidebar').connection.latestFacts;
        const ts = facts.cell_ended_ts;
        if (typeof ts !== 'number') { return null; }
        const d = new Date(ts * 1000);
        return [d.getHours(), d.getMinutes(), d.getSeconds()].map(p => String(p).padStart(2, '0')).join(':');
    }""")
    assert ended is not None and as_of == f"as of cell [2], {ended}", (as_of, ended)
    assert sidebar.locator("[data-section='keras'] .jp-KerasMagic-subTitle").text_content() == "Live models (1)"
    counters = sidebar.locator("[data-section='keras'] .jp-KerasMagic-counters").text_content()
    assert "dense" in counters and "no layers" not in counters.lower(), counters

    # 3. Hover and keyboard: a crosshair and a readout of every series at that time.
    box = sidebar.locator("svg.jp-KerasMagic-chart").bounding_box()
    # Near the right edge: the history is only seconds long yet, 5 minutes span the chart.
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + 60)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-readout:not([hidden])")
    rows = sidebar.locator(".jp-KerasMagic-readoutRow .jp-KerasMagic-readoutName").all_text_contents()
    assert "Kernel RSS" in rows, rows
    sidebar.screenshot(path=str(artifacts / "timeline-3-hover.png"))
    page.mouse.move(0, 0)
    sidebar.locator("svg.jp-KerasMagic-chart").focus()
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    assert sidebar.locator(".jp-KerasMagic-readout").is_visible()
    assert sidebar.locator(".jp-KerasMagic-timeline").get_attribute("data-cursor") != ""
    page.keyboard.press("Escape")
    assert not sidebar.locator(".jp-KerasMagic-readout").is_visible()

    # 4. The window switch.
    sidebar.locator(".jp-KerasMagic-windowButton[data-minutes='1']").click()
    chart = _chart(page)
    assert chart["window"] == "1" and chart["label"].endswith("last minute"), chart
    assert sidebar.locator(".jp-KerasMagic-windowButton[data-minutes='1']").get_attribute("aria-pressed") == "true"

    # 5. A click on the fit's span scrolls the notebook to that cell and makes it active.
    _run_and_wait(page, LAST)
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.content.activeCellIndex") >= LAST
    sidebar.locator(".jp-KerasMagic-span[data-label='[2]'] .jp-KerasMagic-spanTab").click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.activeCellIndex === 1")
    page.wait_for_function(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            const cell = nb.widgets[1].node.getBoundingClientRect();
            const view = nb.node.getBoundingClientRect();
            return cell.bottom > view.top && cell.top < view.bottom;
        }""",
        timeout=10_000,
    )
    page.screenshot(path=str(artifacts / "timeline-4-span-clicked.png"))


CLEAR_CELLS = [
    "%load_ext kerasmagic",
    FIT + "\nimport time; time.sleep(8)",
]


def test_clear_session_during_a_running_cell_then_widths_dark_and_restart(lab, page, artifacts):
    _open(lab, page, "clear.ipynb", CLEAR_CELLS)
    sidebar = page.locator(SIDEBAR)
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]")

    # 1. Clear session while the cell runs: queued, then the compact summary and a clear mark.
    run_cell(page, 1)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-span.jp-mod-running", timeout=60_000)
    sidebar.locator(".jp-KerasMagic-clear").click()
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-report[data-status='pending']")
    # It names the cell it waits for (the fit, cell [2]).
    assert sidebar.locator(".jp-KerasMagic-report").text_content() == "Queued: clears when cell [2] ends…"
    # The cell still runs (the kernel's own record; with subshells the status can read idle).
    assert sidebar.locator(".jp-KerasMagic-span.jp-mod-running").count() == 1
    sidebar.screenshot(path=str(artifacts / "timeline-5-clear-queued.png"))
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-report[data-status='ok']", timeout=120_000)
    report = sidebar.locator(".jp-KerasMagic-report")
    assert report.locator(".jp-KerasMagic-cleanHead").text_content().startswith("Cleaned in")
    figures = report.locator(".jp-KerasMagic-cleanFigures").text_content()
    assert re.search(r"RSS[−+±]", figures) and "models freed" in figures, figures
    held = report.locator("[data-part='held']").text_content()
    assert held.startswith("Still held ("), held
    details = report.locator("details.jp-KerasMagic-cleanDetails")
    assert details.get_attribute("open") is None
    details.locator("summary").click()
    assert details.get_attribute("open") is not None
    steps = report.locator(".jp-KerasMagic-cleanStep .jp-KerasMagic-cleanName").all_text_contents()
    assert "garbage collection" in steps and "malloc_trim" in steps, steps
    page.wait_for_function(
        f"() => document.querySelector(\"{SIDEBAR} .jp-KerasMagic-mark[data-kind='clear_tf']\") !== null",
        timeout=30_000,
    )
    assert "clear" in [m["text"] for m in _chart(page)["marks"]]
    assert _layout_defects(page) == []
    sidebar.screenshot(path=str(artifacts / "timeline-6-after-clear.png"))

    # 2. 250 px and wide: nothing sticks out, no inner scrollbar.
    wait_idle(page)
    width = _set_sidebar_width(page, 250)
    assert abs(width - 250) <= 8, width
    page.wait_for_timeout(500)
    assert _layout_defects(page) == []
    heads = page.evaluate(f"() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-headline')]"
                          ".filter(h => !h.hidden).map(h => h.getBoundingClientRect().width)")
    assert heads and min(heads) >= 90, heads
    sidebar.screenshot(path=str(artifacts / "timeline-7-250px.png"))
    width = _set_sidebar_width(page, 640)
    assert abs(width - 640) <= 8, width
    page.wait_for_timeout(500)
    assert _layout_defects(page) == []
    svg_width = sidebar.locator("svg.jp-KerasMagic-chart").bounding_box()["width"]
    assert svg_width > 560, svg_width
    sidebar.screenshot(path=str(artifacts / "timeline-8-wide.png"))

    # 3. Dark theme.
    _set_sidebar_width(page, 320)
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_selector("#jupyterlab-splash", state="detached")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]")
    background = page.evaluate(f"() => getComputedStyle(document.querySelector('{SIDEBAR}')).backgroundColor")
    assert background != "rgb(255, 255, 255)", background
    sidebar.screenshot(path=str(artifacts / "timeline-9-dark.png"))

    # 4. Restart: a new history that starts with a restart mark; the old spans and report go.
    restarted = page.evaluate("() => Date.now() / 1000")
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=60_000)
    wait_kernel_ready(page)
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    page.wait_for_function(
        f"() => Number(document.querySelector('{SIDEBAR} path[data-series=rss]')?.dataset.points) >= 2",
        timeout=30_000,
    )
    chart = _chart(page)
    assert [m["kind"] for m in chart["marks"]] == ["restart"], chart["marks"]
    assert chart["spans"] == [], chart["spans"]
    assert float(panel_data(page)["historySince"]) >= restarted - 1
    assert not sidebar.locator(".jp-KerasMagic-report").is_visible()
    sidebar.screenshot(path=str(artifacts / "timeline-10-restarted-dark.png"))

"""The sidebar as a classroom uses it, in a real JupyterLab and headless Chromium: the chart
fits a short lesson's history, fits its cell runs in classroom mode however long the class
then talks, and remembers the window chosen; marks made together are drawn as one counted
mark, a failed cell is drawn in the error colour, the memory limit and the guard's warning and
stop are rows and marks of their own, an empty state loads kerasmagic with one click, the open
command's shortcut puts the focus in the panel, and each headline is one labelled figure for a
screen reader."""

import re
import time

import pytest

from .conftest import run_cell, wait_idle, wait_kernel_ready
from .test_timeline import SIDEBAR, _chart, _open, _run_and_wait

pytestmark = pytest.mark.ui

CELLS = [
    "%load_ext kerasmagic",
    "import time\ntime.sleep(12)  # the lesson's training, as long as the narrowest window",
    "from kerasmagic import events\nfor _ in range(3):\n    events.publish('clear_tf', {'freed_rss_bytes': 1})",
    "raise ValueError('a cell that fails')",
    # After the Run All (which stops at the error): a limit just above the kernel's use, and a
    # cell that grows past it, which the guard warns about and stops (issue 33, item 7).
    "import kerasmagic\nfrom kerasmagic.probes.process import rss_bytes\n"
    "kerasmagic.set_memory_limit(rss_bytes() + 200 * 2**20)",
    "import time\ngrown = []\nfor _ in range(60):\n    grown.append(b'x' * (16 << 20))\n    time.sleep(0.2)",
]
SET_LIMIT, GROW = 4, 5
IDLE_S = 15


def _runs_cover(page) -> float:
    """The share of the plot's width (the chart's, less the axis labels' gutter on its left) from the
    first cell span's left edge to the last span's right edge or the last mark (a Clear session
    after the runs belongs to the lesson)."""
    return page.evaluate(f"""() => {{
        const svg = document.querySelector('{SIDEBAR} svg.jp-KerasMagic-chart');
        const plotLeft = Number(svg.closest('.jp-KerasMagic-timeline').dataset.plotLeft);
        const fills = [...svg.querySelectorAll('.jp-KerasMagic-spanFill')];
        const marks = [...svg.querySelectorAll('.jp-KerasMagic-mark line')].map(l => Number(l.getAttribute('x1')));
        const left = Math.min(...fills.map(r => Number(r.getAttribute('x'))));
        const right = Math.max(...marks,
                               ...fills.map(r => Number(r.getAttribute('x')) + Number(r.getAttribute('width'))));
        return fills.length ? (right - left) / (svg.viewBox.baseVal.width - plotLeft) : 0;
    }}""")


def _check_limit_rows(page) -> None:
    """The limit's rows after the guard stopped the growing cell: what counts against the limit and
    the percentage, the headroom with the guard's levels, whose limit, and the stop with its cell."""
    rows = page.evaluate(f"""() => {{
        const node = document.querySelector("{SIDEBAR} [data-section='limit']");
        const text = cls => node.querySelector('.jp-KerasMagic-' + cls).textContent;
        return {{level: node.dataset.level, pct: Number(node.dataset.usedPct), headline: text('limitHeadline'),
                 headroom: text('limitHeadroom'), where: text('limitWhere'), guard: text('limitGuard')}};
    }}""")
    assert re.fullmatch(r"Memory limit: [\d.]+ (MiB|GiB) of [\d.]+ (MiB|GiB) \(\d+ %\)", rows["headline"]), rows
    assert rows["pct"] >= 85 and rows["level"] in ("warn", "stop"), rows
    assert rows["headroom"].endswith("headroom · the guard warns at 85 %, stops at 95 %"), rows
    assert rows["where"] == "set by you: kerasmagic.set_memory_limit / %tf_mem --limit", rows
    grow_count = page.evaluate(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[{GROW}].model.executionCount")
    assert re.fullmatch(rf"Guard stopped cell \[{grow_count}\] at [\d.]+ (MiB|GiB) \(\d+ %\), \d\d:\d\d:\d\d",
                        rows["guard"]), rows


def _fill(page, selector: str) -> str:
    return page.evaluate(f"""() => getComputedStyle(document.querySelector("{selector}")).fill""")


def test_the_sidebar_in_a_short_lesson(lab, page, artifacts):
    _open(lab, page, "lesson.ipynb", CELLS)
    # Not loaded yet: one click loads it (no cell runs, nothing in the notebook changes).
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded'] .jp-KerasMagic-loadButton", timeout=90_000)
    page.click(f"{SIDEBAR} .jp-KerasMagic-loadButton")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[0].model.executionCount") is None

    time.sleep(4)  # a lesson's first seconds
    # Run All, as a class does: it stops at the failing cell.
    page.evaluate("() => void window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-span[data-status='error']", timeout=90_000)
    wait_idle(page)
    ran_at = time.monotonic()
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-mark[data-count='3']", timeout=30_000)
    chart = _chart(page)
    # A few seconds of history fill the chart: the 'All' window, and the RSS line spans most
    # of its width (the line's path starts in the left third).
    assert chart["window"] == "0", chart
    start = float(re.match(r"M\s*([\d.]+)", page.get_attribute(f"{SIDEBAR} path[data-series=rss]", "d")).group(1))
    width = page.evaluate(f"() => document.querySelector('{SIDEBAR} svg.jp-KerasMagic-chart').viewBox.baseVal.width")
    assert start < width / 3, (start, width)
    assert re.fullmatch(r"Memory timeline of this kernel, all \d+ s the sidebar has", chart["label"]), chart
    # The label and the axis' left end from one reading of the chart (read apart, a redraw between
    # them made "17 s" and "−18 s").
    assert "−" + chart["label"].split("all ")[1].split(" the")[0] in chart["ticks"], chart
    # Three clears in one cell: one mark, counted.
    assert [m for m in chart["marks"] if m["kind"] == "clear_tf"] == [{"kind": "clear_tf", "text": "3× clear"}], chart
    # The failed cell in the error colour, the others not.
    error_tab = _fill(page, f"{SIDEBAR} .jp-KerasMagic-span[data-status='error'] .jp-KerasMagic-spanTab")
    ok_tab = _fill(page, f"{SIDEBAR} .jp-KerasMagic-span[data-status='ok'] .jp-KerasMagic-spanTab")
    assert error_tab != ok_tab, (error_tab, ok_tab)
    # Each headline one labelled figure.
    rss = page.get_attribute(f"{SIDEBAR} [data-headline='rss']", "aria-label")
    # Whose figure (since protocol 1.6): this process, with its PSS once read.
    pss = r"( · PSS \d+(\.\d+)? MiB(, \d+ s ago)?)?"
    assert re.fullmatch(rf"Kernel RSS: \d+(\.\d+)? MiB \(RSS of this process{pss}\)", rss), rss
    page.locator(SIDEBAR).screenshot(path=str(artifacts / "sidebar-short-lesson.png"))

    # Clear session while the kernel is idle: never "Queued", and its report right below the
    # chart, above the sections that grow (Keras' live models, the jobs).
    states = page.evaluate(f"""() => new Promise(resolve => {{
        const seen = [];
        const report = document.querySelector("{SIDEBAR} .jp-KerasMagic-report");
        const observer = new MutationObserver(() => seen.push(report.textContent));
        observer.observe(report, {{childList: true, subtree: true, characterData: true}});
        document.querySelector("{SIDEBAR} .jp-KerasMagic-clear").click();
        const done = () => report.dataset.status === 'ok' || report.dataset.status === 'failed';
        const poll = setInterval(() => {{ if (done()) {{ clearInterval(poll); observer.disconnect();
                                                     resolve(seen); }} }}, 50);
    }})""")
    assert states and not any(text.startswith("Queued") for text in states), states
    order = page.evaluate(f"""() => {{
        const body = document.querySelector("{SIDEBAR} .jp-KerasMagic-body");
        const clear = body.querySelector('.jp-KerasMagic-clear');
        const keras = body.querySelector("[data-section='keras']");
        return !!(clear.compareDocumentPosition(keras) & Node.DOCUMENT_POSITION_FOLLOWING);
    }}""")
    assert order, "the Clear session button comes before the Keras section"

    # Classroom mode, no window picked yet: "Cell runs". After the Run All and the class's
    # talk, the runs still fill the chart ("All" would squeeze them into its right third).
    page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    time.sleep(max(0.0, ran_at + IDLE_S - time.monotonic()))
    page.wait_for_function(f"() => document.querySelector('{SIDEBAR} .jp-KerasMagic-timeline').dataset.window === '-1'")
    assert page.get_attribute(f"{SIDEBAR} .jp-KerasMagic-windowButton[data-minutes='-1']", "aria-pressed") == "true"
    assert page.text_content(f"{SIDEBAR} .jp-KerasMagic-windowButton[data-minutes='-1']") == "Cell runs"
    label = _chart(page)["label"]
    assert re.fullmatch(r"Memory timeline of this kernel, its cell runs from \d\d:\d\d:\d\d to \d\d:\d\d:\d\d",
                        label), label
    covered = _runs_cover(page)
    assert covered >= 0.75, f"the cell runs and their marks fill {covered:.0%} of the chart after {IDLE_S} s idle"
    page.locator(SIDEBAR).screenshot(path=str(artifacts / "sidebar-classroom-cell-runs.png"))
    page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    page.wait_for_function(f"() => document.querySelector('{SIDEBAR} .jp-KerasMagic-timeline').dataset.window === '0'")

    # The window chosen is remembered: after a reload the chart shows the last minute again.
    page.click(f"{SIDEBAR} .jp-KerasMagic-windowButton[data-minutes='1']")
    assert _chart(page)["label"] == "Memory timeline of this kernel, last minute"
    time.sleep(1.0)  # the setting is saved through the server
    page.goto(lab.lab_url("lesson.ipynb").replace("&reset", ""))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    assert _chart(page)["window"] == "1"

    # The limit and the guard: rows under the headlines, marks on the chart (issue 33, item 7:
    # a kernel near its limit showed only the host's free memory).
    quiet = page.evaluate(f"""() => {{
        const node = document.querySelector("{SIDEBAR} [data-section='limit']");
        return {{source: node.dataset.source, quiet: node.dataset.quiet,
                 headline: node.querySelector('.jp-KerasMagic-limitHeadline').hidden,
                 line: node.querySelector('.jp-KerasMagic-limitHeadroom').textContent}};
    }}""")
    if quiet["source"] == "host":
        # The machine's own memory, far from the guard's levels: one line, not the Host memory tile again.
        assert quiet["quiet"] == "true" and quiet["headline"], quiet
        assert quiet["line"] == "Limit: the machine's memory; the guard warns at 85 %, stops at 95 %", quiet
    _run_and_wait(page, SET_LIMIT)
    page.wait_for_selector(f"{SIDEBAR} [data-section='limit'][data-source='user']:not([hidden])", timeout=30_000)
    _run_and_wait(page, GROW, timeout_s=120)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-limitGuard[data-kind='guard_stop']:not([hidden])",
                           timeout=30_000)
    _check_limit_rows(page)
    page.wait_for_function(f"""() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-mark title')]
        .some(t => t.textContent.includes('memory guard stopped the cell'))""", timeout=30_000)
    titles = page.eval_on_selector_all(f"{SIDEBAR} .jp-KerasMagic-mark title", "ts => ts.map(t => t.textContent)")
    said = "\n".join(titles)
    assert "memory guard warned" in said and "guard_" not in said, titles
    page.locator(SIDEBAR).screenshot(path=str(artifacts / "sidebar-memory-guard.png"))

    # The shortcut opens the panel with the focus in it, from the notebook.
    page.evaluate("() => window.jupyterapp.shell.collapseRight()")
    page.click(".jp-Notebook")
    page.keyboard.press("Control+Alt+K")
    page.wait_for_function(f"() => document.querySelector('{SIDEBAR}').contains(document.activeElement)")
    assert page.is_visible(SIDEBAR)


def _pid(page) -> int:
    return int(re.search(r"pid (\d+)", page.text_content(f"{SIDEBAR} .jp-KerasMagic-header")).group(1))


def _restart(page) -> None:
    page.evaluate("async () => await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")


def test_a_notebook_can_load_kerasmagic_by_itself_in_its_new_kernels(lab, page):
    _open(lab, page, "autoload.ipynb", ["x = 1"])
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded'] .jp-KerasMagic-autoload input", timeout=90_000)
    page.check(f"{SIDEBAR} .jp-KerasMagic-autoload input")  # remembers, and loads it now
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    first = _pid(page)
    assert "loads by itself in this notebook's new kernels" in page.text_content(f"{SIDEBAR} .jp-KerasMagic-footer")

    # A restart: the new kernel loads it without a cell typed.
    _restart(page)
    page.wait_for_function(
        f"""(first) => {{
            const panel = document.querySelector("{SIDEBAR}");
            const pid = /pid (\\d+)/.exec(panel.querySelector('.jp-KerasMagic-header').textContent);
            return panel.dataset.state === 'connected' && pid && Number(pid[1]) !== first;
        }}""", arg=first, timeout=90_000)
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[0].model.executionCount") is None
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-mark[data-kind='restart']", timeout=30_000)
    restarted = page.text_content(f"{SIDEBAR} .jp-KerasMagic-restarted")
    assert restarted.startswith("restarted "), restarted

    # After a reload the restart is still marked and said (issue 19, defect 8): the page
    # meets the kernel as if it had always been there, this browser remembers it.
    page.goto(lab.lab_url("autoload.ipynb").replace("&reset", ""))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-mark[data-kind='restart']", timeout=10_000)
    assert page.text_content(f"{SIDEBAR} .jp-KerasMagic-restarted") == restarted

    # Stopped from the footer: the next kernel waits for the user again.
    page.click(f"{SIDEBAR} .jp-KerasMagic-autoloadStop")
    time.sleep(1.0)  # the setting is saved through the server
    _restart(page)
    page.wait_for_selector(f"{SIDEBAR}[data-state='not_loaded']", timeout=90_000)
    time.sleep(3)
    assert page.get_attribute(SIDEBAR, "data-state") == "not_loaded"


def test_live_models_while_a_cell_runs_say_which_cell_they_are_as_of(lab, page):
    # Issue 19, defect 9: "Live models: none" was stated as a fact while a cell was building
    # six. The models are read between cells, so during one the panel says as of which cell.
    cells = ["%load_ext kerasmagic", "import keras", "import time\ntime.sleep(8)"]
    _open(lab, page, "models.ipynb", cells)
    _run_and_wait(page, 0)
    _run_and_wait(page, 1, timeout_s=240)
    title = f"{SIDEBAR} [data-section='keras'] .jp-KerasMagic-subTitle"
    page.wait_for_function(f"""() => document.querySelector("{title}")?.textContent === 'Live models: none'""",
                           timeout=60_000)
    run_cell(page, 2)
    page.wait_for_function(
        f"""() => document.querySelector("{title}").textContent
            === 'Live models: none as of cell [2] (read again when the running cell ends)'""",
        timeout=6_000)
    page.wait_for_function(f"""() => document.querySelector("{title}").textContent === 'Live models: none'""",
                           timeout=60_000)

"""Classroom mode in a real JupyterLab and headless Chromium, on a projector's screen
(1280×720 at a device scale factor of 1.5): the panel's toggle turns on large type and
high-contrast series, the chart grows with the panel's height, the choice is remembered after
a reload, and at 250 px and 500 px wide, light and dark, nothing is cropped or overlaps.

Then lesson 6's demonstration as a teacher runs it (a search with fresh_model, Clear session):
every part the lesson's table names is in the panel, and the whole panel is photographed. With
KERASMAGIC_WRITE_DOCS_IMAGES=1 that photograph is written to docs/images/sidebar-classroom.png,
the screenshot lesson 6 shows, and the same panel with classroom mode off to
docs/images/sidebar-panel.png, the README's."""

import json
import os
import re
import time
from pathlib import Path

import pytest

from .conftest import wait_kernel_ready
from .test_timeline import SIDEBAR, _layout_defects, _open, _run_and_wait, _set_sidebar_width

pytestmark = pytest.mark.ui

ROOT = Path(__file__).parents[2]
DOCS_IMAGE = ROOT / "docs" / "images" / "sidebar-classroom.png"
README_IMAGE = ROOT / "docs" / "images" / "sidebar-panel.png"
LESSON = ROOT / "notebooks" / "06_watching_it_live.ipynb"

# A short lesson without TensorFlow (fast under load): memory that grows per run, a
# fresh_model loop's marks, a clear and a cell that fails.
CELLS = [
    "%load_ext kerasmagic",
    "import time\nimport numpy as np\nheld = []",
    "from kerasmagic import events\n"
    "for _ in range(3):\n"
    "    events.publish('fresh_model', {})\n"
    "    held.append(np.ones((40, 1024, 1024), dtype='uint8'))\n"
    "    time.sleep(1.2)  # a sample per step: the chart shows the staircase",
    "events.publish('clear_tf', {'freed_rss_bytes': 1})\nheld.clear()",
    "raise ValueError('a cell that fails')",
]


# The WCAG contrast ratio of each drawn series' stroke against the panel's background.
_CONTRASTS = f"""() => {{
    const rgb = text => text.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const lum = ([r, g, b]) => {{
        const c = v => {{ v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }};
        return 0.2126 * c(r) + 0.7152 * c(g) + 0.0722 * c(b);
    }};
    const panel = document.querySelector('{SIDEBAR}');
    const back = lum(rgb(getComputedStyle(panel).backgroundColor));
    const ratio = color => {{
        const fore = lum(rgb(color));
        return Math.round((Math.max(fore, back) + 0.05) / (Math.min(fore, back) + 0.05) * 10) / 10;
    }};
    const svg = panel.querySelector('svg.jp-KerasMagic-chart');
    return Object.fromEntries([
        ...[...svg.querySelectorAll('path.jp-KerasMagic-series')]
            .map(path => [path.dataset.series, ratio(getComputedStyle(path).stroke)]),
        // A span's label that does not fit its tab lies on the background.
        ...[...svg.querySelectorAll(".jp-KerasMagic-span[data-label-inside='false'] .jp-KerasMagic-spanLabel")]
            .map(text => ['label ' + text.textContent, ratio(getComputedStyle(text).fill)]),
    ]);
}}"""

# The contrast ratio of the texts a room reads against the panel's background, each colour
# blended over it as drawn (JupyterLab's secondary text is black or white at 54 % opacity:
# 4.6:1 on white, about 6:1 on the dark theme's grey; its primary text is over 12:1 on both).
_TEXT_CONTRASTS = f"""() => {{
    const rgba = text => {{ const v = text.match(/[\\d.]+/g).map(Number); return v.length > 3 ? v : [...v, 1]; }};
    const lum = ([r, g, b]) => {{
        const c = v => {{ v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }};
        return 0.2126 * c(r) + 0.7152 * c(g) + 0.0722 * c(b);
    }};
    const panel = document.querySelector('{SIDEBAR}');
    const back = rgba(getComputedStyle(panel).backgroundColor);
    const ratio = color => {{
        const [r, g, b, a] = rgba(color);
        const fore = lum([r, g, b].map((v, i) => a * v + (1 - a) * back[i]));
        const behind = lum(back);
        return Math.round((Math.max(fore, behind) + 0.05) / (Math.min(fore, behind) + 0.05) * 10) / 10;
    }};
    const found = {{}};
    for (const [name, selector, property] of [
        ['kernel', '.jp-KerasMagic-kernel', 'color'], ['label', '.jp-KerasMagic-headlineLabel', 'color'],
        ['sub', '.jp-KerasMagic-headlineSub', 'color'], ['footer', '.jp-KerasMagic-footer', 'color'],
        ['legend', '.jp-KerasMagic-legend', 'color'], ['as of', '.jp-KerasMagic-asOf', 'color'],
        ['axis', 'svg.jp-KerasMagic-chart .jp-KerasMagic-axisLabels text', 'fill'],
    ]) {{
        const node = panel.querySelector(selector);
        if (node) found[name] = ratio(getComputedStyle(node)[property]);
    }}
    return found;
}}"""

# Sizes in CSS pixels of the panel's texts that a room reads.
_SIZES = f"""() => {{
    const px = selector => {{
        const node = document.querySelector('{SIDEBAR} ' + selector);
        return node ? parseFloat(getComputedStyle(node).fontSize) : null;
    }};
    return {{
        body: px('.jp-KerasMagic-body'), kernel: px('.jp-KerasMagic-kernel'),
        label: px('.jp-KerasMagic-headlineLabel'), value: px('.jp-KerasMagic-headlineValue'),
        section: px('.jp-KerasMagic-sectionTitle'), footer: px('.jp-KerasMagic-footer'),
        legend: px('.jp-KerasMagic-legend'), chart: px('svg.jp-KerasMagic-chart text'),
        chartHeight: document.querySelector('{SIDEBAR} svg.jp-KerasMagic-chart').getBoundingClientRect().height,
    }};
}}"""

# Texts that are cropped or lie over each other: the chart's span and mark labels (each kind
# among its own, and inside the chart), and the headline figures (cut off by their tile).
_OVERLAPS = f"""() => {{
    const panel = document.querySelector('{SIDEBAR}');
    const svg = panel.querySelector('svg.jp-KerasMagic-chart');
    const frame = svg.getBoundingClientRect();
    const out = [];
    const shown = selector => [...svg.querySelectorAll(selector)]
        .filter(t => t.getAttribute('visibility') !== 'hidden')
        .map(t => ({{text: t.textContent, box: t.getBoundingClientRect()}}));
    const overlap = (a, b) => a.box.left < b.box.right - 1 && b.box.left < a.box.right - 1
        && a.box.top < b.box.bottom - 1 && b.box.top < a.box.bottom - 1;
    const axis = shown('.jp-KerasMagic-axisLabels text');
    for (const selector of ['.jp-KerasMagic-spanLabel', '.jp-KerasMagic-markLabel']) {{
        const items = shown(selector);
        items.forEach((a, i) => {{
            if (a.box.left < frame.left - 1 || a.box.right > frame.right + 1)
                out.push('cropped: ' + a.text);
            axis.filter(b => overlap(a, b)).forEach(b => out.push('over the axis: ' + a.text + ' / ' + b.text));
            items.slice(i + 1).forEach(b => {{
                if (a.box.left < b.box.right - 1 && b.box.left < a.box.right - 1
                    && a.box.top < b.box.bottom - 1 && b.box.top < a.box.bottom - 1)
                    out.push('overlap: ' + a.text + ' / ' + b.text);
            }});
        }});
    }}
    for (const value of panel.querySelectorAll('.jp-KerasMagic-headline:not([hidden]) .jp-KerasMagic-headlineValue'))
        if (value.scrollWidth > value.clientWidth + 1) out.push('headline cropped: ' + value.textContent);
    const tiles = [...panel.querySelectorAll('.jp-KerasMagic-headline:not([hidden])')]
        .map(t => t.getBoundingClientRect());
    tiles.forEach((a, i) => tiles.slice(i + 1).forEach(b => {{
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
            out.push('headline tiles overlap');
    }}));
    return out;
}}"""


def _dark(page, on: bool) -> None:
    theme = "JupyterLab Dark" if on else "JupyterLab Light"
    page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{'false' if on else 'true'}'")
    page.wait_for_selector("#jupyterlab-splash", state="detached")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]")


def test_classroom_mode_on_a_projector(lab, projector, artifacts):
    page = projector
    _open(lab, page, "classroom.ipynb", CELLS)
    for index in range(len(CELLS)):
        _run_and_wait(page, index)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-span[data-status='error']", timeout=30_000)
    toggle = page.locator(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    assert toggle.get_attribute("aria-pressed") == "false"
    before = page.evaluate(_SIZES)
    assert before["chartHeight"] == 183, before

    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "true"
    page.wait_for_selector(f"{SIDEBAR}[data-classroom='true']")
    sizes = page.evaluate(_SIZES)
    # Large type: no text the room reads under 16 px, the headline figures larger still.
    for part in ("body", "kernel", "label", "section", "footer", "legend", "chart"):
        assert sizes[part] >= 16, (part, sizes)
    assert sizes["value"] >= 1.5 * sizes["label"], sizes
    # The chart takes a share of the panel's height: taller on a taller screen.
    assert sizes["chartHeight"] > 250, sizes
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.wait_for_function(
        f"(h) => document.querySelector('{SIDEBAR} svg.jp-KerasMagic-chart').getBoundingClientRect().height > h + 80",
        arg=sizes["chartHeight"], timeout=10_000)
    page.set_viewport_size({"width": 1280, "height": 720})
    page.wait_for_function(
        f"(h) => Math.abs(document.querySelector('{SIDEBAR} svg.jp-KerasMagic-chart')"
        ".getBoundingClientRect().height - h) < 2", arg=sizes["chartHeight"], timeout=10_000)

    labels: list[str] = []
    for dark in (False, True):
        theme = "dark" if dark else "light"
        _dark(page, dark)
        # Every drawn series at least 4.5:1 against the background (the CPU line included).
        contrasts = page.evaluate(_CONTRASTS)
        assert {"rss", "cpu_pct"} <= set(contrasts), contrasts
        assert min(contrasts.values()) >= 4.5, (theme, contrasts)
        # No text in 54 % grey (issue 19, defect 3): 7:1 at least, WCAG's enhanced contrast.
        texts = page.evaluate(_TEXT_CONTRASTS)
        assert {"kernel", "label", "footer", "legend", "axis"} <= set(texts), texts
        assert min(texts.values()) >= 7, (theme, texts)
        for width in (250, 500):
            reached = _set_sidebar_width(page, width)
            assert abs(reached - width) <= 8, reached
            page.wait_for_timeout(500)
            page.locator(SIDEBAR).screenshot(path=str(artifacts / f"classroom-{width}px-{theme}.png"))
            assert _layout_defects(page) == [], (theme, width, _layout_defects(page))
            assert page.evaluate(_OVERLAPS) == [], (theme, width)
            labels += page.evaluate(f"() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-spanLabel')]"
                                    ".map(t => t.textContent)")
            page.locator(SIDEBAR).screenshot(path=str(artifacts / f"classroom-{width}px-{theme}.png"))
        page.screenshot(path=str(artifacts / f"classroom-1280x720-{theme}.png"))
    # A span with room says what its cell did (issue 19, defect 5). The chart fits the history,
    # so the newest span's room grows with every second after the lesson's last cell: how much
    # it has at a given moment depends on how fast a loaded machine ran the cells. Waited for,
    # at 500 px, rather than assumed at the moment of the screenshots.
    stated = r"^\[\d+\] [+−][\d.]+ [KMG]?i?B(, peak .+)?$"
    if not any(re.fullmatch(stated[1:-1], label) for label in labels):
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            page.wait_for_function(
                f"(pattern) => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-spanLabel')]"
                ".some(t => new RegExp(pattern).test(t.textContent))", arg=stated, timeout=60_000)
        except PlaywrightTimeout as error:
            shown = page.evaluate(f"() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-spanLabel')]"
                                  ".map(t => t.textContent)")
            raise AssertionError(f"no span states its change after 60 s: {labels} then {shown}") from error

    # Remembered: after a reload the panel opens in classroom mode.
    time.sleep(1.0)  # the setting is saved through the server
    page.goto(lab.lab_url("classroom.ipynb").replace("&reset", ""))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    page.wait_for_selector(f"{SIDEBAR}[data-classroom='true']", timeout=30_000)
    assert page.get_attribute(f"{SIDEBAR} .jp-KerasMagic-classroomToggle", "aria-pressed") == "true"
    # And off again with the same button, back to the usual chart.
    page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    page.wait_for_selector(f"{SIDEBAR}[data-classroom='false']")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    assert page.evaluate(_SIZES)["chartHeight"] == 183


# Lesson 6's demonstration, shortened: three trials with fresh_model (a mark each), then the
# teacher presses Clear session.
LESSON_CELLS = [
    "%load_ext kerasmagic",
    "import time\nimport numpy as np, keras, kerasmagic\n"
    "x = np.random.rand(256, 256).astype('float32'); y = np.random.randint(0, 2, 256)\n"
    "for trial in range(3):\n"
    "    with kerasmagic.fresh_model('model'):\n"
    "        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(2048, activation='relu'),\n"
    "                                  keras.layers.Dense(2)])\n"
    "        model.compile('adam', keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
    "        model.fit(x, y, epochs=1, batch_size=64, verbose=0)\n"
    "    time.sleep(1)  # a sample between trials",
]


def _lesson_parts() -> list[str]:
    """The panel parts lesson 6's table names: the bold first column of its rows (in its first
    markdown cell; the install cell comes before it)."""
    first = next(c for c in json.loads(LESSON.read_text())["cells"] if c["cell_type"] == "markdown")
    text = "".join(first["source"])
    return re.findall(r"^\| \*\*(.+?)\*\* \|", text, re.M)


def _fit_window_to_panel(page) -> None:
    """From the projector's 720 px, make the window just tall enough that nothing of the panel
    is scrolled away (a picture of the whole panel, without a blank tail)."""
    page.set_viewport_size({"width": page.viewport_size["width"], "height": 720})
    page.wait_for_timeout(300)
    for _ in range(8):
        overflow = page.evaluate(f"() => {{ const p = document.querySelector('{SIDEBAR}');"
                                 " return p.scrollHeight - p.clientHeight; }")
        if overflow <= 1:
            break
        size = page.viewport_size
        page.set_viewport_size({"width": size["width"], "height": size["height"] + overflow + 20})
        page.wait_for_timeout(300)
    assert overflow <= 1, overflow


def test_lesson6_demonstration_and_its_screenshot(lab, projector, artifacts):
    page = projector
    parts = _lesson_parts()
    assert len(parts) >= 10, parts
    _open(lab, page, "lesson6.ipynb", LESSON_CELLS)
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    if page.get_attribute(SIDEBAR, "data-classroom") != "true":  # off unless a test left it on
        page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    for index in range(len(LESSON_CELLS)):
        _run_and_wait(page, index, timeout_s=240)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    _dark(page, False)  # the theme is the lab's setting: the test before may have left it dark
    clear_lines = f"""() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-mark title')]
        .flatMap(t => t.textContent.split('\\n')).filter(line => line.startsWith('clear ')).length"""
    clears_before = page.evaluate(clear_lines)
    page.click(f"{SIDEBAR} .jp-KerasMagic-clear")
    page.wait_for_selector(f"{SIDEBAR} .jp-KerasMagic-report[data-status='ok']", timeout=120_000)
    # What Clear session did is in sight on the projector, not below the fold (defect 9).
    page.wait_for_timeout(300)
    fold = page.evaluate(f"""() => {{
        const panel = document.querySelector('{SIDEBAR}').getBoundingClientRect();
        const head = document.querySelector('{SIDEBAR} .jp-KerasMagic-cleanHead').getBoundingClientRect();
        return {{head: [head.top, head.bottom], panel: [panel.top, panel.bottom]}};
    }}""")
    assert fold["panel"][0] <= fold["head"][0] and fold["head"][1] <= fold["panel"][1], fold
    # The Clear session's mark: a line of a mark group's hover (it may share a group with the
    # lesson's own last clean and fresh models, where marks crowd).
    page.wait_for_function(f"() => ({clear_lines})() > {clears_before}", timeout=30_000)
    page.wait_for_selector(f"{SIDEBAR} [data-section='keras'][data-quiet='false']", timeout=30_000)
    # One fresh model mark per trial (each mark's time is a line of its group's hover).
    marks = page.evaluate(f"() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-mark title')]"
                          ".flatMap(t => t.textContent.split('\\n'))")
    assert sum(line.startswith("fresh model ") for line in marks) == 3, marks

    # Every part the lesson's table names is shown by the panel (case as the panel sets it:
    # section titles are upper-cased by CSS).
    shown = page.evaluate(f"() => document.querySelector('{SIDEBAR}').innerText").lower()
    missing = [part for part in parts if part.lower() not in shown]
    assert not missing, (missing, shown[:2000])

    # The whole panel, as the lesson shows it: light theme, a sidebar 500 px wide (the headline
    # tiles two by two), the window made tall enough that nothing of the panel is scrolled away.
    _set_sidebar_width(page, 500)
    _fit_window_to_panel(page)
    assert _layout_defects(page) == [] and page.evaluate(_OVERLAPS) == []
    page.mouse.move(0, 0)  # no hover highlight in the picture
    shot = artifacts / "classroom-lesson6-panel.png"
    page.locator(SIDEBAR).screenshot(path=str(shot))
    if os.environ.get("KERASMAGIC_WRITE_DOCS_IMAGES") == "1":
        DOCS_IMAGE.write_bytes(shot.read_bytes())

    # The same panel as a data scientist keeps it open, classroom mode off: the README's picture.
    page.click(f"{SIDEBAR} .jp-KerasMagic-classroomToggle")
    page.wait_for_selector(f"{SIDEBAR}[data-classroom='false']")
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    _fit_window_to_panel(page)
    assert _layout_defects(page) == [] and page.evaluate(_OVERLAPS) == []
    page.mouse.move(0, 0)
    shot = artifacts / "sidebar-panel.png"
    page.locator(SIDEBAR).screenshot(path=str(shot))
    if os.environ.get("KERASMAGIC_WRITE_DOCS_IMAGES") == "1":
        README_IMAGE.write_bytes(shot.read_bytes())

"""The RSS headline reconciles with its neighbours, in a real JupyterLab and headless Chromium:
it says the figure is this process's, gives its PSS, and, once the kernel has a child process,
the sum with its children as jupyter-resource-usage counts it, checked against psutil's
reading of the same processes; the hover explains the differences from `top` and
jupyter-resource-usage."""

import re
import sys
import time

import psutil
import pytest

from .test_timeline import SIDEBAR, _open, _run_and_wait

pytestmark = [pytest.mark.ui,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PSS and children are read from /proc")]

CELLS = [
    "%load_ext kerasmagic",
    # A child that holds 150 MiB, as the isolation template holds its imports.
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c',\n"
    "    'import time; block = bytearray(150 * 2**20); block[::4096] = b\"x\" * len(block[::4096]); time.sleep(300)'])",
    "child.kill(); child.wait()",
]


def _rss_headline(page) -> dict:
    return page.evaluate(f"""() => {{
        const panel = document.querySelector('{SIDEBAR}');
        const tile = panel.querySelector("[data-headline='rss']");
        return {{sub: tile.querySelector('.jp-KerasMagic-headlineSub').textContent, title: tile.title,
                 aria: tile.getAttribute('aria-label'), rss: Number(panel.dataset.rssBytes),
                 pss: panel.dataset.pssBytes, withChildren: panel.dataset.withChildrenBytes}};
    }}""")


def _kernel_pid(page) -> int:
    return int(re.search(r"pid (\d+)", page.text_content(f"{SIDEBAR} .jp-KerasMagic-header")).group(1))


def test_the_rss_headline_reconciles_with_top_and_jupyter_resource_usage(lab, page, artifacts):
    _open(lab, page, "reconcile.ipynb", CELLS)
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    page.wait_for_function(f"() => !!document.querySelector('{SIDEBAR}').dataset.pssBytes", timeout=30_000)
    alone = _rss_headline(page)
    # Whose figure: this process; its PSS (shared libraries shared out) below its RSS.
    assert alone["sub"].startswith("this process · PSS "), alone
    assert 0 < int(alone["pss"]) < alone["rss"], alone
    assert alone["withChildren"] == "", alone
    assert "top shows for its pid" in alone["title"] and "it has none now" in alone["title"], alone
    assert alone["aria"].startswith("Kernel RSS: ") and "this process" in alone["aria"], alone

    _run_and_wait(page, 1)
    # The tree is read every 5 s at most: the child shows within a few samples.
    page.wait_for_function(f"() => !!document.querySelector('{SIDEBAR}').dataset.withChildrenBytes",
                           timeout=30_000)
    time.sleep(6)  # a reading after the child wrote its 150 MiB
    shown = _rss_headline(page)
    kernel = psutil.Process(_kernel_pid(page))
    # The post-mortem's watcher (death_watch.py, ~10 MiB) is every kernel's child and not the user's:
    # the panel leaves it out, so the sum here does too.
    children = [c for c in kernel.children(recursive=True) if "death_watch.py" not in " ".join(c.cmdline())]
    assert len(children) == 1, children
    # What jupyter-resource-usage sums: the kernel's RSS and its children's (psutil, as it does).
    expected = kernel.memory_info().rss + sum(c.memory_info().rss for c in children)
    assert abs(int(shown["withChildren"]) - expected) < 0.1 * expected, (shown, expected)
    assert int(shown["withChildren"]) - shown["rss"] >= 150 * 2**20, shown
    assert re.search(r"^with 1 child process: \d+(\.\d+)? (MiB|GiB)$", shown["sub"], re.M), shown
    assert "jupyter-resource-usage adds the RSS of the kernel's child processes" in shown["title"], shown
    page.locator(f"{SIDEBAR} .jp-KerasMagic-headlines").screenshot(path=str(artifacts / "rss-reconciled.png"))

    # The child ends: the sum goes with it at the next reading.
    _run_and_wait(page, 2)
    page.wait_for_function(f"() => document.querySelector('{SIDEBAR}').dataset.withChildrenBytes === ''",
                           timeout=30_000)
    assert "with 1 child" not in _rss_headline(page)["sub"]

"""The sidebar's "Isolated jobs" section in a real JupyterLab and headless Chromium: an
isolated_map over 3 items (one raising, on_error="collect") listed live, then 2 done and
1 failed, kept across a page reload, in the light and the dark theme."""

import json
import time

import pytest

from .conftest import kernel_status, notebook, run_cell, wait_kernel_ready

pytestmark = [pytest.mark.ui, pytest.mark.isolation]

CELLS = [
    "%load_ext kerasmagic",
    "from kerasmagic import isolated_map\n"
    "\n"
    "def job(i):\n"
    "    import time\n"
    "    data = bytearray((40 + 20 * i) * 2**20)  # 40, 60, 80 MiB held by the job's process\n"
    "    time.sleep(3)\n"
    "    if i == 1:\n"
    "        raise ValueError(f'item {i} is bad')\n"
    "    return len(data)\n"
    "\n"
    "results = isolated_map(job, range(3), workers=2, on_error='collect', quiet=True, progress=False)\n"
    "print(results.failed)",
]

SECTION = "#kerasmagic-sidebar [data-section='jobs']"


def _section(page) -> dict:
    return page.evaluate(
        f"() => Object.assign({{}}, document.querySelector(\"{SECTION}\").dataset)"
    )


def _rows(page) -> list[dict]:
    return page.evaluate(
        f"""() => Array.from(document.querySelectorAll("{SECTION} .jp-KerasMagic-job")).map(li => ({{
            state: li.dataset.state,
            status: li.dataset.status,
            label: li.querySelector('.jp-KerasMagic-jobLabel').textContent,
            badge: li.querySelector('.jp-KerasMagic-jobState').textContent,
            where: li.querySelector('.jp-KerasMagic-jobWhere').textContent,
            elapsed: li.querySelector('.jp-KerasMagic-jobElapsed').textContent,
            rss: li.querySelector('.jp-KerasMagic-jobRss').textContent,
            gpu: li.querySelector('.jp-KerasMagic-jobGpu').textContent,
            error: (li.querySelector('.jp-KerasMagic-jobError') || {{}}).textContent || null,
            edge: getComputedStyle(li).borderLeftColor,
        }}))"""
    )


def _open(page, lab) -> None:
    page.goto(lab.lab_url("isolated.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")


def test_isolated_map_jobs_are_listed_live_then_done_and_failed(lab, page, artifacts):
    (lab.root / "isolated.ipynb").write_text(json.dumps(notebook(CELLS)))
    _open(page, lab)
    run_cell(page, 0)
    page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]")

    # 1. No job yet: one quiet line, no list.
    page.wait_for_selector(f"{SECTION}[data-empty='true']")
    title = page.locator(f"{SECTION} .jp-KerasMagic-sectionTitle").text_content()
    assert title == "Isolated jobs: none in this kernel yet", title
    assert page.locator(f"{SECTION} .jp-KerasMagic-job").count() == 0
    page.locator("#kerasmagic-sidebar").screenshot(path=str(artifacts / "sidebar-5-isolated-none.png"))

    # 2. While the map runs: running jobs listed first, their elapsed time ticks.
    run_cell(page, 1)
    page.wait_for_function(
        f"() => Number(document.querySelector(\"{SECTION}\").dataset.running) >= 1", timeout=120_000)
    running = [r for r in _rows(page) if r["state"] == "running"]
    assert running and _rows(page)[0]["state"] == "running"
    assert running[0]["badge"] == "▶running" and running[0]["where"] == "this machine"
    first = running[0]["elapsed"]
    time.sleep(1.6)  # no message needed: the panel's own clock ticks
    later = [r for r in _rows(page) if r["label"] == running[0]["label"]][0]
    if later["state"] == "running":
        assert later["elapsed"] != first, (first, later["elapsed"])
        page.screenshot(path=str(artifacts / "sidebar-6-isolated-running.png"))

    # 3. Over: 3 jobs, 2 done and 1 failed, each with its place, time and peak RSS.
    page.wait_for_function(
        f"() => document.querySelector(\"{SECTION}\").dataset.total === '3'"
        f" && document.querySelector(\"{SECTION}\").dataset.running === '0'", timeout=120_000)
    section = _section(page)
    assert (section["done"], section["failed"], section["total"]) == ("2", "1", "3"), section
    rows = _rows(page)
    assert sorted(r["state"] for r in rows) == ["done", "done", "failed"], rows
    assert sorted(r["label"] for r in rows) == [f"isolated_map item [{i}]" for i in range(3)]
    failed = [r for r in rows if r["state"] == "failed"][0]
    assert failed["label"] == "isolated_map item [1]" and failed["status"] == "error"
    assert failed["badge"] == "✗failed" and failed["error"] == "ValueError: item 1 is bad"
    for row in rows:
        assert row["where"] == "this machine"
        assert row["elapsed"].endswith(" s") and float(row["elapsed"].split()[0]) >= 3, row
        assert row["rss"].startswith("RSS peak ") and "MiB" in row["rss"], row
        assert row["gpu"] == "GPU peak –", row  # no GPU here: no number, not a zero
    # Not colour alone, but colour too: the edges differ between done and failed.
    assert len({r["edge"] for r in rows}) == 2
    title = page.locator(f"{SECTION} .jp-KerasMagic-sectionTitle").text_content()
    # The map's own counts (issue 22) follow the list's: done, running, failed and left.
    assert title == "Isolated jobs · 2 done · 1 failed · Map: 2/3 done, 0 running, 1 failed, 0 left", title
    sidebar = page.locator("#kerasmagic-sidebar")
    page.locator(SECTION).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "sidebar-7-isolated-jobs.png"))
    deadline = time.monotonic() + 60
    while kernel_status(page) != "idle" and time.monotonic() < deadline:
        time.sleep(0.2)

    # 4. A reload re-attaches: the kernel sends the recent jobs with its hello.
    page.reload()
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]", timeout=30_000)
    page.wait_for_function(f"() => document.querySelector(\"{SECTION}\").dataset.total === '3'")
    assert sorted(r["state"] for r in _rows(page)) == ["done", "done", "failed"]

    # 5. Dark theme: theme variables only.
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_selector("#jupyterlab-splash", state="detached")
    page.wait_for_function(f"() => document.querySelector(\"{SECTION}\").dataset.total === '3'")
    page.locator(SECTION).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "sidebar-8-isolated-jobs-dark.png"))
    assert sidebar.is_visible()

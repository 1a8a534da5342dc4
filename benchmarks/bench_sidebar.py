"""Sample-to-screen latency of the JupyterLab sidebar with a full timeline, and its bundle's size.

Issue 19's case: 1 Hz, 15 minutes of history and 200 cell spans on screen. Starts a real
`jupyter lab` (tests/ui/conftest.py's LabServer) and headless Chromium, loads kerasmagic in a
notebook's kernel, fills the kernel's record (what the `history` message replays) with 15 minutes
of 1 Hz samples, 200 cell runs (every tenth failed) and 20 marks before the live samples, then
reloads the page: the panel attaches, draws all of it in its default "All" window, and checks it
shows at least 200 spans and 14.5 minutes (the run fails otherwise, so it never times a smaller
chart). For every live sample it reads two times, both on the machine's one clock:

- written: the panel's `data-rendered-ts`, stamped once every section and the timeline show the
  sample, minus `data-sample-ts`, the kernel's time.time() when it took the sample;
- on screen: the first frame after that (a requestAnimationFrame and a task after it, which is
  when Chromium has painted), minus the same sample time.

Measured while the kernel is idle and while a cell holds it busy (numpy in a loop). The bundle's
figure is the production build's (tests/live/production_bundle.py builds it in a scratch folder),
what a release wheel ships; the browser loads whichever build JupyterLab finds.

Usage: python benchmarks/bench_sidebar.py [--seconds 30] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.live.production_bundle import LIMIT_BYTES, build_production_bundle  # noqa: E402
from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS, LabServer, notebook, run_cell, wait_kernel_ready  # noqa: E402

HISTORY_S = 15 * 60
SPANS = 200
MARKS = 20

# Fills the kernel's record the way its hooks do, older than every real sample: the live
# samples that follow continue the same timeline.
FILL_CELL = f"""
import math
from collections import deque
from kerasmagic.live import channel
record = channel.active_channel().history
with record._lock:
    real = list(record._samples)
    first = real[0]["ts"]
    samples = []
    for i in range({HISTORY_S}):
        ts = first - {HISTORY_S} + i
        rss = int(real[-1]["rss_bytes"] + 300 * 2**20 * (1 + math.sin(i / 40)))
        samples.append(dict(real[-1], ts=ts, rss_bytes=rss))
    record._samples = deque(samples + real, maxlen=record._samples.maxlen)
    step = {HISTORY_S} / {SPANS}
    runs = []
    for i in range({SPANS}):
        start = first - {HISTORY_S} + i * step
        runs.append({{"execution_count": 1000 + i, "cell_id": None, "started_ts": start,
                     "ended_ts": start + 0.6 * step, "status": "error" if i % 10 == 9 else "ok",
                     "rss_start_bytes": samples[int(i * step)]["rss_bytes"],
                     "rss_end_bytes": samples[int(i * step + 0.6 * step)]["rss_bytes"],
                     "peak_rss_bytes": max(s["rss_bytes"] for s in samples[int(i * step):int((i + 0.6) * step) + 1]),
                     "peak_exact": False}})
    record._runs = deque(runs + list(record._runs), maxlen=record._runs.maxlen)
    marks = [{{"kind": "fresh_model" if i % 2 else "clear_tf",
               "ts": first - {HISTORY_S} + (i + 0.5) * {HISTORY_S} / {MARKS}}} for i in range({MARKS})]
    record._marks = deque(marks + list(record._marks), maxlen=record._marks.maxlen)
"""

BUSY_CELL = (
    "import numpy as np, time\n"
    "a = np.random.rand(600, 600)\n"
    "end = time.time() + {seconds}\n"
    "while time.time() < end:\n"
    "    a = (a @ a) / a.sum()\n"
)

# In the page: for each sample the panel stamps, the time of the first frame after it.
WATCH_FRAMES = """() => {
    const node = document.getElementById('kerasmagic-sidebar');
    window.kerasmagicOnScreen = {};
    new MutationObserver(() => {
        const seq = node.dataset.sampleSeq, ts = Number(node.dataset.sampleTs);
        if (!seq || seq in window.kerasmagicOnScreen) return;
        window.kerasmagicOnScreen[seq] = null;
        requestAnimationFrame(() => setTimeout(() => {
            window.kerasmagicOnScreen[seq] = Date.now() / 1000 - ts;
        }, 0));
    }).observe(node, {attributes: true, attributeFilter: ['data-sample-seq']});
}"""


def collect(page, seconds: float) -> tuple[list[float], list[float]]:
    written: dict[str, float] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = page.evaluate("() => Object.assign({}, document.getElementById('kerasmagic-sidebar').dataset)")
        seq = data.get("sampleSeq")
        if seq and seq not in written:
            written[seq] = float(data["renderedTs"]) - float(data["sampleTs"])
        time.sleep(0.05)
    time.sleep(0.5)  # the last frame's task
    on_screen = page.evaluate("() => window.kerasmagicOnScreen")
    return list(written.values()), [on_screen[seq] for seq in written if on_screen.get(seq) is not None]


def describe(name: str, values: list[float]) -> str:
    if not values:
        return f"{name:<37} no samples"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"{name:<37}{len(values):>5} samples  median {1000 * statistics.median(values):7.1f} ms  "
            f"p95 {1000 * p95:7.1f} ms  max {1000 * max(values):7.1f} ms")


def check_full_chart(page) -> dict:
    """What the chart shows: it must be issue 19's case, or the figures mean nothing."""
    shown = page.evaluate("""() => {
        const node = document.getElementById('kerasmagic-sidebar');
        const svg = node.querySelector('svg.jp-KerasMagic-chart');
        return {spans: svg.querySelectorAll('.jp-KerasMagic-span').length,
                failed: svg.querySelectorAll(".jp-KerasMagic-span[data-status='error']").length,
                marks: svg.querySelectorAll('.jp-KerasMagic-mark').length,
                since: Number(node.dataset.historySince), now: Date.now() / 1000,
                window: node.querySelector(".jp-KerasMagic-windowButton[aria-pressed='true']")?.textContent};
    }""")
    history_s = shown["now"] - shown["since"]
    if shown["spans"] < SPANS or history_s < HISTORY_S - 30:
        raise SystemExit(f"the chart is not issue 19's case: {shown['spans']} spans over {history_s:.0f} s ({shown})")
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        size = build_production_bundle(Path(scratch))
    verdict = "under" if size.all_bytes < LIMIT_BYTES else "OVER"
    print(f"bundle (production build): {size}; {verdict} {LIMIT_BYTES // 1024} KiB")
    with tempfile.TemporaryDirectory() as tmp:
        server = LabServer(Path(tmp))
        cells = ["%load_ext kerasmagic\nfrom kerasmagic.live import channel\n"
                 f"channel.active_channel().sampler.set_interval({args.interval})",
                 FILL_CELL, BUSY_CELL.format(seconds=args.seconds)]
        (Path(tmp) / "bench.ipynb").write_text(json.dumps(notebook(cells)))
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(90_000)
                page.goto(server.lab_url("bench.ipynb"))
                page.wait_for_function("() => !!window.jupyterapp")
                wait_kernel_ready(page)
                page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
                run_cell(page, 0)
                page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]")
                time.sleep(2 * args.interval)  # a few real samples to continue from
                run_cell(page, 1)
                page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.widgets[1]"
                                       ".model.executionCount !== null")
                # A fresh page: the panel attaches and gets it all through `history`.
                page.goto(server.lab_url("bench.ipynb").replace("&reset", ""))
                page.wait_for_function("() => !!window.jupyterapp")
                wait_kernel_ready(page)
                page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
                page.wait_for_selector("#kerasmagic-sidebar[data-state='connected'][data-sample-seq]")
                shown = check_full_chart(page)
                page.evaluate(WATCH_FRAMES)
                idle = collect(page, args.seconds)
                run_cell(page, 2)
                busy = collect(page, args.seconds)
                shown_after = check_full_chart(page)
                browser.close()
        finally:
            server.stop()
    print(f"chart: {shown['spans']} cell spans ({shown['failed']} failed), {shown['marks']} marks, "
          f"{(shown['now'] - shown['since']) / 60:.1f} min of history in the '{shown['window']}' window "
          f"({shown_after['spans']} spans at the end)")
    print(f"sample-to-screen latency at {1 / args.interval:g} Hz (kernel's time.time() at the sample →):")
    print(describe("kernel idle: DOM written", idle[0]))
    print(describe("kernel idle: on screen (next frame)", idle[1]))
    print(describe("cell running: DOM written", busy[0]))
    print(describe("cell running: on screen (next frame)", busy[1]))
    print("target: median on screen < 50 ms at 1 Hz with 15 min of history and 200 spans (issue 19)")


if __name__ == "__main__":
    main()

"""Sample-to-screen latency of the JupyterLab sidebar, and the size of its bundle.

Starts a real `jupyter lab` (tests/ui/conftest.py's LabServer) and headless Chromium, loads
kerasmagic in a notebook's kernel, and for every sample reads the panel's data attributes:
`data-sample-ts` (the kernel's time.time() when it took the sample) and `data-rendered-ts`
(the browser's clock when the panel wrote the values into the DOM). Same machine, same
clock. Measured while the kernel is idle and while a cell holds it busy (numpy in a loop).

Usage: python benchmarks/bench_sidebar.py [--seconds 20] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS, LabServer, notebook, run_cell, wait_kernel_ready  # noqa: E402

BUSY_CELL = (
    "import numpy as np, time\n"
    "a = np.random.rand(600, 600)\n"
    "end = time.time() + {seconds}\n"
    "while time.time() < end:\n"
    "    a = (a @ a) / a.sum()\n"
)


def bundle_size() -> tuple[int, int, int]:
    static = ROOT / "kerasmagic" / "labextension" / "static"
    files = [p for p in static.iterdir() if p.is_file()]
    raw = sum(p.stat().st_size for p in files)
    js = [p for p in files if p.suffix == ".js"]
    gz = sum(len(gzip.compress(p.read_bytes(), 9)) for p in js)
    return raw, sum(p.stat().st_size for p in js), gz


def collect(page, seconds: float) -> list[float]:
    latencies: dict[str, float] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = page.evaluate("() => Object.assign({}, document.getElementById('kerasmagic-sidebar').dataset)")
        seq = data.get("sampleSeq")
        if seq and seq not in latencies:
            latencies[seq] = float(data["renderedTs"]) - float(data["sampleTs"])
        time.sleep(0.05)
    return list(latencies.values())


def describe(name: str, values: list[float]) -> str:
    if not values:
        return f"{name:<22} no samples"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"{name:<22}{len(values):>5} samples  median {1000 * statistics.median(values):7.1f} ms  "
            f"p95 {1000 * p95:7.1f} ms  max {1000 * max(values):7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    raw, js, gz = bundle_size()
    print(f"bundle: kerasmagic/labextension/static {raw / 1024:.1f} KiB in all, "
          f"JavaScript {js / 1024:.1f} KiB ({gz / 1024:.1f} KiB gzipped)")
    with tempfile.TemporaryDirectory() as tmp:
        server = LabServer(Path(tmp))
        cells = ["%load_ext kerasmagic\nfrom kerasmagic.live import channel\n"
                 f"channel.active_channel().sampler.set_interval({args.interval})",
                 BUSY_CELL.format(seconds=args.seconds)]
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
                idle = collect(page, args.seconds)
                run_cell(page, 1)
                busy = collect(page, args.seconds)
                browser.close()
        finally:
            server.stop()
    print(f"sample-to-screen latency at {1 / args.interval:g} Hz (kernel ts → DOM written):")
    print(describe("kernel idle", idle))
    print(describe("cell running (numpy)", busy))
    print("target: < 1.5 s at 1 Hz")


if __name__ == "__main__":
    main()

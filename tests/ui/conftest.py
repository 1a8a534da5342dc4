"""A real `jupyter lab` (or Jupyter Notebook 7) on a free port in a temp dir, and headless
Chromium driving it."""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"
CHROMIUM = os.environ.get("KERASMAGIC_CHROMIUM", "/usr/bin/chromium")
# What Chromium needs to run headless here (docs/design/sidebar.md): no sandbox as root, no GPU,
# no network side traffic that would stall in an offline container.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def notebook(cells: list[str]) -> dict:
    return {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                   "outputs": [], "source": src} for i, src in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                    "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


class JupyterServerProcess:
    """A Jupyter server process of ours on a free loopback port with a fresh token, its log in
    `root/server.log`: JupyterLab and Notebook 7 (LabServer) or classic Notebook 6
    (tests/ui/test_live_view.py)."""

    name = "jupyter"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"

    def _start(self, args: list[str], env: dict[str, str]) -> None:
        self.log = open(self.root / "server.log", "w")
        self.process = subprocess.Popen(args, cwd=self.root, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {(self.root / 'server.log').read_text()[-3000:]}")
            try:
                # The http:// address of the server this fixture started.
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2) as reply:  # noqa: S310
                    json.load(reply)
                    return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"{self.name} did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class LabServer(JupyterServerProcess):
    """`app="lab"`: JupyterLab; `app="notebook"`: Jupyter Notebook 7, one document per page. Both
    are the same kind of server application (a LabServerApp), so they take the same options under
    their own class name. `python`: the interpreter whose Jupyter runs (this one by default; the
    oldest supported stack's, `.venv-lab40/bin/python`, in tests/ui/test_jupyterlab_40.py). Its
    server starts kernels with its own Python."""

    APPS = {"lab": "LabApp", "notebook": "JupyterNotebookApp"}

    def __init__(self, root: Path, app: str = "lab", python: str = sys.executable) -> None:
        if not Path(CHROMIUM).exists():
            # A missing browser fails (never skips): a green run must mean the sidebar was tested.
            pytest.fail(
                f"no Chromium at {CHROMIUM}: the browser tests need it. Install it with "
                "'sudo apt-get install -y chromium' (./dev.sh test does this when run as root), or "
                "point KERASMAGIC_CHROMIUM at a Chromium binary. Deselect them with -m 'not ui'.",
                pytrace=False,
            )
        super().__init__(root)
        self.app = app
        self.name = f"jupyter {app}"
        app_class = self.APPS[app]
        home = root / "home"
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
                   # The kernels' post-mortem records stay in the test's folder.
                   KERASMAGIC_RECORD_DIR=str(home / "kernel-records"),
                   # The panel's TF rows and headline need TF's CPU allocator statistics. TF keeps
                   # them with oneDNN, on by itself on Intel CPUs but not on AMD ones (CI's machine),
                   # or on any CPU with this set before TF starts: the kernels get it. A run can
                   # pass TF_CPU_ALLOCATOR_USE_BFC=0 (with TF_ENABLE_ONEDNN_OPTS=0) to see the panel
                   # say why and the remedy instead (test_timeline checks both).
                   TF_CPU_ALLOCATOR_USE_BFC=os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "1"))
        args = [python, "-m", "jupyter", app, "--no-browser", f"--port={self.port}",
                "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={root}", f"--{app_class}.expose_app_in_browser=True",
                f"--{app_class}.workspaces_dir={home / 'workspaces'}",
                f"--{app_class}.user_settings_dir={home / 'settings'}",
                "--ServerApp.open_browser=False"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--ServerApp.allow_root=True")
        # No "get notified about news?" toast over the screenshots.
        notification = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        notification.parent.mkdir(parents=True, exist_ok=True)
        notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        self._start(args, env)

    def lab_url(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}&reset"

    def notebook_url(self, path: str) -> str:
        """Notebook 7's page for one notebook (its own page, no tabs)."""
        return f"{self.url}/notebooks/{path}?token={self.token}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = LabServer(tmp_path_factory.mktemp("lab"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so that `page` knows in its teardown whether
    the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"kerasmagic_{report.when}_report", report)


# What the panel and the page knew when a browser test failed: the one account of a failure
# that shows only on a loaded CI machine.
_PANEL_STATE = """() => {
    const panel = document.querySelector('#kerasmagic-sidebar');
    const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
    return {
        panel: panel ? {...panel.dataset} : null,
        text: panel ? panel.innerText.slice(0, 1500) : null,
        kernel: kernel ? {id: kernel.id, status: kernel.status, connection: kernel.connectionStatus,
                          subshell: kernel.subshellId ?? null} : null,
    };
}"""


# The kernel's side of the same: the channel's listeners and its sampler thread, read by a
# silent execute from the page (no history, nothing shown in the notebook).
_KERNEL_STATE_CODE = """
import json, threading
from kerasmagic.live.channel import active_channel as _km_active
_km = _km_active()
print(json.dumps(None if _km is None else {
    "listeners": {k: {"visible": v["visible"]} for k, v in _km._listeners.items()},
    "views": _km.view_count, "sampler_active": _km.sampler.active,
    "thread_alive": bool(_km.sampler.thread and _km.sampler.thread.is_alive()),
    "sample_errors": _km.sampler.errors, "last_error": _km.sampler.last_error,
    "samples_taken": _km.sampler._seq, "threads": [t.name for t in threading.enumerate()]}))
"""
_KERNEL_STATE = """async (code) => {
    const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
    if (!kernel) { return 'no kernel'; }
    let text = '';
    const future = kernel.requestExecute({code, silent: true, store_history: false});
    future.onIOPub = msg => { text += msg.content.text ?? msg.content.evalue ?? ''; };
    const timeout = new Promise(resolve => setTimeout(() => resolve('timeout'), 10000));
    return (await Promise.race([future.done.then(() => 'done'), timeout])) + ': ' + text;
}"""


def _report_failure(request, page, console: list[str]) -> None:
    failed = [getattr(request.node, f"kerasmagic_{when}_report", None) for when in ("setup", "call")]
    if not any(report is not None and report.failed for report in failed):
        return
    from playwright.sync_api import Error as PageError

    try:
        state = page.evaluate(_PANEL_STATE)
    except PageError as error:  # the page itself may be what broke
        state = f"(could not read the page: {error})"
    try:
        kernel_side = page.evaluate(_KERNEL_STATE, _KERNEL_STATE_CODE)
    except PageError as error:
        kernel_side = f"(could not ask the kernel: {error})"
    lines = ["panel and kernel: " + json.dumps(state, indent=1), f"kernel's channel: {kernel_side}",
             "browser console (last 60):", *console[-60:]]
    servers = [value for value in request.node.funcargs.values() if isinstance(value, JupyterServerProcess)]
    server = servers[0] if servers else None
    if server is not None and (server.root / "server.log").exists():
        lines += ["server log (last 4000 characters):", (server.root / "server.log").read_text()[-4000:]]
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"{request.node.name}-failure.txt").write_text("\n".join(lines))
    # Printed too: CI shows a failed test's captured output, and keeps nothing else.
    print("\n".join(lines), file=sys.stderr)


def _browser_page(browser, request, **screen):
    """A page in a context of its own with the `screen` options (viewport, scale factor), its
    console kept for the account of a failure."""
    context = browser.new_context(**screen)
    page = context.new_page()
    page.set_default_timeout(60_000)
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{time.strftime('%H:%M:%S')} {message.type}: {message.text}"))
    page.on("pageerror", lambda error: console.append(f"{time.strftime('%H:%M:%S')} pageerror: {error}"))
    try:
        yield page
        _report_failure(request, page, console)
    finally:
        context.close()


@pytest.fixture
def page(browser, request):
    yield from _browser_page(browser, request, viewport={"width": 1400, "height": 900})


@pytest.fixture
def projector(browser, request):
    """A page on a projector's screen: 1280×720 CSS pixels at a device scale factor of 1.5."""
    yield from _browser_page(browser, request, viewport={"width": 1280, "height": 720}, device_scale_factor=1.5)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def wait_kernel_ready(page) -> None:
    """Wait until the current notebook's kernel is really connected and idle, before a cell runs."""
    page.wait_for_function(
        """() => {
            const app = window.jupyterapp;
            const nb = app && app.shell.currentWidget;
            const ctx = nb && nb.sessionContext;
            return !!(ctx && ctx.isReady && ctx.session && ctx.session.kernel
                      && ctx.session.kernel.connectionStatus === 'connected'
                      && ctx.session.kernel.status === 'idle');
        }""",
        timeout=90_000,
    )


def open_in_lab(page, path: str) -> None:
    """Make the notebook at `path` JupyterLab's current widget (opening it if needed), then
    show the Keras memory panel."""
    page.evaluate(
        """async (path) => {
            await window.jupyterapp.restored;
            await window.jupyterapp.commands.execute('docmanager:open', {path});
        }""",
        path,
    )
    page.wait_for_function("(path) => window.jupyterapp.shell.currentWidget?.context?.path === path", arg=path)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")


def run_cell(page, index: int) -> None:
    """Run one cell of the current notebook through JupyterLab's own command (no waiting)."""
    page.evaluate(
        """async (index) => {
            const app = window.jupyterapp;
            const panel = app.shell.currentWidget;
            panel.content.activeCellIndex = index;
            // Not awaited: the command resolves only when the cell has finished.
            void app.commands.execute('notebook:run-cell');
        }""",
        index,
    )


def kernel_status(page) -> str:
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status")


def wait_idle(page, timeout_s: float = 120) -> None:
    """Wait until the active notebook's kernel is idle (a cell ran to its end)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if kernel_status(page) == "idle":
            return
        time.sleep(0.2)
    raise TimeoutError("kernel stayed busy")


def panel_data(page) -> dict:
    return page.evaluate("() => Object.assign({}, document.getElementById('kerasmagic-sidebar').dataset)")


def timeline(page) -> dict:
    """What the sidebar's timeline draws, read from its DOM: the cell spans' labels (`[N]`) in
    time order, the number of points of each series, and the chart's text description (each
    series' latest value and its range, "Kernel RSS 1.2 GiB (from 300 MiB to 1.2 GiB)")."""
    return page.evaluate("""() => {
        const svg = document.querySelector('#kerasmagic-sidebar svg.jp-KerasMagic-chart');
        if (!svg) return {spans: [], series: {}, description: ''};
        return {
            spans: [...svg.querySelectorAll('.jp-KerasMagic-span')].map(g => g.dataset.label),
            series: Object.fromEntries([...svg.querySelectorAll('path.jp-KerasMagic-series')]
                .map(p => [p.dataset.series, Number(p.dataset.points)])),
            description: document.getElementById(svg.getAttribute('aria-describedby'))?.textContent ?? '',
        };
    }""")

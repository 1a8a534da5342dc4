"""Page reloads: one while a cell runs, where the sidebar attaches at once (over a kernel
subshell), not when the cell ends; and one the user cancels at JupyterLab's prompt."""

import json

import pytest

from .conftest import notebook, open_in_lab, panel_data, run_cell, wait_idle, wait_kernel_ready

pytestmark = pytest.mark.ui

SIDEBAR = "#kerasmagic-sidebar"
# Far longer than every wait below: if the panel attached only after the cell, it would not in time.
BUSY_S = 240
# The cell leaves a file when it ends: the test's proof that it had not ended yet. (The kernel's
# status cannot say: a comm message on a subshell publishes busy/idle too, and JupyterLab shows
# the last one.)
CELLS = ["%load_ext kerasmagic", f"import time\ntime.sleep({BUSY_S})\nopen('cell-ended', 'w').close()"]


def _open_notebook(page, lab, navigate: bool = True) -> None:
    if navigate:
        page.goto(lab.lab_url("busy.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    page.evaluate(
        """async () => {
            await window.jupyterapp.restored;
            await window.jupyterapp.commands.execute('docmanager:open', {path: 'busy.ipynb'});
        }"""
    )
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget?.context?.path === 'busy.ipynb'")
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")


def test_a_reload_while_a_cell_runs_attaches_before_the_cell_ends(lab, page, artifacts):
    (lab.root / "busy.ipynb").write_text(json.dumps(notebook(CELLS)))
    _open_notebook(page, lab)
    wait_kernel_ready(page)
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    before = panel_data(page)

    run_cell(page, 1)
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'busy'")
    page.reload()
    _open_notebook(page, lab, navigate=False)
    # Connected, with live samples, while the kernel is still busy with the same cell: before
    # the fix the comm_open waited behind it and the panel said "Connecting…" until it ended.
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    first = panel_data(page)
    page.wait_for_function(
        "(seq) => Number(document.getElementById('kerasmagic-sidebar').dataset.sampleSeq) > seq",
        arg=int(first["sampleSeq"]), timeout=30_000,
    )
    attached = panel_data(page)
    assert not (lab.root / "cell-ended").exists(), "the cell ended before the panel attached: this proves nothing"
    # The same kernel process: the reloaded page's samples continue its count.
    assert int(attached["sampleSeq"]) > int(first["sampleSeq"]) > int(before["sampleSeq"])
    assert int(attached["rssBytes"]) > 10_000_000, attached
    page.screenshot(path=str(artifacts / "sidebar-reload-while-busy.png"))

    # Stop the cell: the kernel goes on, and the panel stays attached.
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.interrupt()")
    wait_idle(page)
    seq = int(panel_data(page)["sampleSeq"])
    page.wait_for_function(
        "(seq) => Number(document.getElementById('kerasmagic-sidebar').dataset.sampleSeq) > seq",
        arg=seq, timeout=30_000,
    )
    assert panel_data(page)["state"] == "connected"
    # The sidebar deletes its subshell as the page unloads, and on a loaded machine that request
    # can go down with the page (two fresh-clone CI runs on 2026-11-27 kept the old page's
    # subshell for over 15 s). So the unloading page also notes it in sessionStorage, and the
    # reloaded one deletes it again before it makes its own: one subshell is left, the new page's.
    left = page.evaluate(
        """async () => {
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            await kernel.info;
            let ids = [];
            for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
                ids = (await kernel.requestListSubshell({}).done).content.subshell_id;
                if (ids.length <= 1) { break; }
                await new Promise(resolve => setTimeout(resolve, 250));
            }
            return {ids, noted: sessionStorage.getItem('kerasmagic:unloaded-subshells')};
        }"""
    )
    assert len(left["ids"]) == 1, left
    assert left["noted"] == "[]", f"the reloaded page left the old subshell's note in place: {left}"


def test_a_reload_cancelled_at_the_unsaved_changes_prompt_leaves_the_panel_live(lab, page):
    # The sidebar lets go of its comm and subshell at `beforeunload`, but JupyterLab asks "leave
    # this page?" there when a notebook has unsaved changes, and a user may stay: the panel must
    # then attach again, not sit on its last sample.
    (lab.root / "edited.ipynb").write_text(json.dumps(notebook(["%load_ext kerasmagic"])))
    page.goto(lab.lab_url("edited.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    open_in_lab(page, "edited.ipynb")
    wait_kernel_ready(page)
    run_cell(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=60_000)
    # A keystroke, as a user edits: Chromium shows the prompt only to a page the user acted on.
    page.click(".jp-Notebook .jp-Cell .cm-content")
    page.keyboard.type(" # edited")
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.context.model.dirty")

    prompts = []

    def stay(dialog):
        prompts.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", stay)
    page.evaluate("() => { setTimeout(() => location.reload(), 0); }")
    for _ in range(50):
        if prompts:
            break
        page.wait_for_timeout(200)
    page.remove_listener("dialog", stay)
    assert prompts == ["beforeunload"], f"no leave-page prompt came, so this proves nothing: {prompts}"

    seq = int(panel_data(page)["sampleSeq"])
    page.wait_for_function(
        "(seq) => { const d = document.getElementById('kerasmagic-sidebar').dataset;"
        " return d.state === 'connected' && Number(d.sampleSeq) > seq + 1; }",
        arg=seq, timeout=30_000,
    )
    subshells = page.evaluate(
        """async () => {
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            for (const deadline = Date.now() + 5000; ; ) {
                const ids = (await kernel.requestListSubshell({}).done).content.subshell_id;
                if (ids.length <= 1 || Date.now() > deadline) { return ids; }
                await new Promise(resolve => setTimeout(resolve, 250));
            }
        }"""
    )
    assert len(subshells) == 1, f"the page that stayed should have one subshell, its new one: {subshells}"

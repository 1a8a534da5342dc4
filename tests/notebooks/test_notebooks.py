"""Every teaching notebook in ``notebooks/`` runs headless, top to bottom, and its lesson still holds.

Each notebook ends with an assertion cell on what it measured, so a TensorFlow or Keras
release that changes the story fails here (nbclient raises ``CellExecutionError`` on any
error, unless a cell is tagged ``raises-exception`` because failing is its lesson).
The executed copies, with outputs and plots, are written to ``test-artifacts/notebooks/``
for a teacher to look at; the notebooks themselves are stored without outputs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebooks

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
ARTIFACTS = ROOT / "test-artifacts" / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL_NAME = "python3"
#: Per-notebook budget on a 2-core laptop is 60 s; the cell timeout only catches hangs.
CELL_TIMEOUT_S = 300


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6, [p.name for p in NOTEBOOKS]


def test_python3_kernel_is_this_interpreter():
    """The ``python3`` kernelspec must start this interpreter (the venv's), not another Python."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    executable = spec.argv[0]
    # jupyter_client replaces a bare "python"/"python3"/"python3.X" with sys.executable.
    bare = {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"}
    resolved = sys.executable if executable in bare else executable
    assert os.path.abspath(resolved) == os.path.abspath(sys.executable), (spec.resource_dir, spec.argv)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path):
    """Stored without outputs (the repo stays small) and for the ``python3`` kernel."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL_NAME
    dirty = [i for i, cell in enumerate(nb.cells)
             if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"
    last_code = [cell for cell in nb.cells if cell.cell_type == "code"][-1]
    assert "assert" in last_code.source, f"{path.name} must end with a cell that asserts its lesson"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_its_lesson_holds(path, monkeypatch, notebook_durations):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")  # the kernel inherits this environment
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    started = time.perf_counter()
    outcome = "failed"
    try:
        client.execute()
        outcome = "passed"
    finally:
        seconds = time.perf_counter() - started
        notebook_durations[path.name] = (seconds, outcome)
        print(f"{path.name}: {seconds:.1f} s ({outcome})")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, ARTIFACTS / path.name)

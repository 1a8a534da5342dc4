"""Run the TypeScript tests (jest) from pytest, so `./dev.sh test` and CI cover both sides of
the protocol fixtures."""

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]


def test_jest_suite_passes():
    jest = ROOT / "node_modules" / ".bin" / "jest"
    if shutil.which("node") is None or not jest.exists():
        pytest.skip("no Node or node_modules: the editable install (./dev.sh test) sets them up")
    run = subprocess.run([str(jest), "--ci", "--silent"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

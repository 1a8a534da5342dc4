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
    # A missing toolchain fails (never skips): a green run must mean the TypeScript side passed.
    if shutil.which("node") is None:
        pytest.fail("no Node.js on PATH: install it with 'sudo apt-get install -y nodejs' "
                    "(./dev.sh test does this when run as root), then run ./dev.sh test", pytrace=False)
    if not jest.exists():
        pytest.fail(f"no {jest.relative_to(ROOT)}: run ./dev.sh test (its editable install runs jlpm), "
                    "or 'jlpm install' in the repository root", pytrace=False)
    run = subprocess.run([str(jest), "--ci", "--silent"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

"""The README's tour and memory section show what the code prints now: docs/scripts/readme_outputs.py
runs them in a fresh process, and each README block must match its output with the figures masked.

A failure means the reports changed: run ``python docs/scripts/readme_outputs.py --write`` and
commit the README (never edit the outputs by hand)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.frameworks, pytest.mark.isolation]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "scripts" / "readme_outputs.py"
sys.path.insert(0, str(SCRIPT.parent))

import readme_outputs  # noqa: E402


def test_the_readme_outputs_are_what_the_code_prints_now():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    now = json.loads(run.stdout.strip().splitlines()[-1])
    not_made = now.pop("postmortem_not_made", None)
    shown = readme_outputs.readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sorted(shown) == sorted([*(name for name, _, _ in readme_outputs.TOUR), *readme_outputs.MEMORY])
    stale = {name: f"README:\n{shown[name]}\n\nnow:\n{text}" for name, text in now.items()
             if readme_outputs.mask(shown[name]) != readme_outputs.mask(text)}
    assert not stale, "run `python docs/scripts/readme_outputs.py --write`:\n" + "\n\n".join(stale.values())
    if not_made:
        pytest.skip(f"every other output matches; {not_made}")

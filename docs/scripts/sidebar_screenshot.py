"""Retake the sidebar screenshots in docs/images/ from a real JupyterLab in headless Chromium.

The pictures are taken by the browser test that checks them, ``tests/ui/test_classroom_mode.py``
(lesson 6's demonstration: a search with fresh_model, a Clear session), with its JupyterLab
server, its Playwright helpers and Debian's ``/usr/bin/chromium`` (``./dev.sh test`` sets them
up). With ``KERASMAGIC_WRITE_DOCS_IMAGES=1`` the test writes:

- ``docs/images/sidebar-panel.png``: the README's screenshot (classroom mode off);
- ``docs/images/sidebar-classroom.png``: lesson 6's (classroom mode on).

Run it from the repository root, then look at the pictures and commit them::

    .venv/bin/python docs/scripts/sidebar_screenshot.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/ui/test_classroom_mode.py::test_lesson6_demonstration_and_its_screenshot"


def main() -> int:
    env = dict(os.environ, KERASMAGIC_WRITE_DOCS_IMAGES="1")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TEST]
    status = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    if status == 0:
        for name in ("sidebar-panel.png", "sidebar-classroom.png"):
            print(f"retook docs/images/{name}")
    return status


if __name__ == "__main__":
    sys.exit(main())

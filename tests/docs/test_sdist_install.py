"""``pip install`` of the sdist works on a machine without Node: the prebuilt JupyterLab
extension ships inside it, so building the wheel from it runs no JavaScript build, and
JupyterLab then lists the extension as enabled.

The sdist is built from this checkout (whose extension ``./dev.sh test`` has built), then
installed into a fresh virtualenv whose PATH has no ``node``, beside JupyterLab as a user has it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
BUILT_EXTENSION = ROOT / "kerasmagic" / "labextension" / "static" / "style.js"


def _run(args, env=None):
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, f"{' '.join(map(str, args))}:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    return run.stdout + run.stderr


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    if not BUILT_EXTENSION.exists():
        pytest.fail("the extension is not built here: run `jlpm build:prod` (./dev.sh test builds it first)")
    out = tmp_path_factory.mktemp("sdist")
    _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT)])
    return next(out.glob("kerasmagic-*.tar.gz"))


def test_the_sdist_carries_the_prebuilt_extension_and_the_licence(sdist):
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "LICENSE" in names
    assert "kerasmagic/labextension/static/style.js" in names
    assert "kerasmagic/labextension/package.json" in names


def test_the_sdist_installs_without_node_and_jupyterlab_lists_it_enabled(sdist, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    # A PATH with this venv and a few plain tools, none of them node (which lives in /usr/bin).
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("sh", "env", "uname"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    path = f"{venv / 'bin'}{os.pathsep}{tools}"
    assert shutil.which("node", path=path) is None and shutil.which("jlpm", path=path) is None
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTHON", "JUPYTER", "VIRTUAL_ENV"))}
    env["PATH"] = path
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(sdist), "jupyterlab>=4.4,<5"], env=env)
    # Only this venv's Jupyter paths: another environment's kerasmagic must not answer.
    listing = _run([str(venv / "bin" / "jupyter"), "labextension", "list"], env=dict(
        env, JUPYTER_PATH="", JUPYTER_PREFER_ENV_PATH="1", JUPYTER_DATA_DIR=str(venv / "share" / "jupyter"),
        JUPYTER_CONFIG_DIR=str(venv / "etc" / "jupyter")))
    listing = re.sub(r"\x1b\[[0-9;]*m", "", listing)
    assert re.search(r"^\s*kerasmagic v\S+ enabled\s+OK", listing, flags=re.M), listing

"""The examples in our docstrings are code: the ones that can run here must hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

MODULES = [
    "kerasmagic", "kerasmagic.tables", "kerasmagic.events", "kerasmagic.errors", "kerasmagic.ipython_names",
    "kerasmagic.holders",
    "kerasmagic.snapshot", "kerasmagic.measuring", "kerasmagic.leak_watch", "kerasmagic.clean", "kerasmagic.fresh",
    "kerasmagic.registry_purge", "kerasmagic.extension", "kerasmagic.magics", "kerasmagic.demo",
    "kerasmagic.probes.availability", "kerasmagic.probes.process", "kerasmagic.probes.keras",
    "kerasmagic.probes.tensorflow", "kerasmagic.probes.nvml", "kerasmagic.probes.sample", "kerasmagic.records",
    "kerasmagic.live.protocol",
    "kerasmagic.live.channel", "kerasmagic.live.sampler", "kerasmagic.live.widget",
    "kerasmagic.isolation", "kerasmagic.isolation.api", "kerasmagic.isolation.cell_names",
    "kerasmagic.isolation.pool", "kerasmagic.isolation.result", "kerasmagic.isolation.shipping",
    "kerasmagic.isolation.template", "kerasmagic.isolation.mapping", "kerasmagic.isolation.child.worker",
    "kerasmagic.isolation.runner",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    # A fresh interpreter per module: the examples describe a session from its start (e.g.
    # "before `import tensorflow`"), and they must not clean the other tests' shell.
    code = (
        "import doctest, importlib, sys; "
        f"m = importlib.import_module({name!r}); "
        "r = doctest.testmod(m, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE); "
        "sys.exit(1 if r.failed else 0)"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, f"docstring examples in {name} do not hold:\n{completed.stdout[-3000:]}"

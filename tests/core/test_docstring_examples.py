"""The examples in our docstrings are code: the ones that can run here must hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

def _modules_with_examples() -> list[str]:
    """Every kerasmagic module whose docstrings hold an example, found rather than listed: a
    list by hand missed the modules added after it (the GPU probes' examples went unchecked)."""
    import doctest
    import importlib
    import pkgutil

    import kerasmagic

    names = ["kerasmagic"] + [info.name for info in pkgutil.walk_packages(kerasmagic.__path__, "kerasmagic.")]
    finder = doctest.DocTestFinder()
    found = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as missing:
            # A module built on an optional package (the workers' matplotlib backend): one skipped
            # test that names it, not a collection error that stops the run.
            found.append(pytest.param(name, marks=pytest.mark.skip(
                reason=f"{name} needs {missing.name}, which is not installed here")))
            continue
        if any(test.examples for test in finder.find(module)):
            found.append(name)
    return found


MODULES = _modules_with_examples()


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

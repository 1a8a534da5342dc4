"""The examples in our docstrings are code: the ones that can run here must hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytestmark = pytest.mark.unit

MODULES = [
    "kerasmagic", "kerasmagic.tables", "kerasmagic.events", "kerasmagic.errors", "kerasmagic.holders",
    "kerasmagic.snapshot", "kerasmagic.measuring", "kerasmagic.clean", "kerasmagic.fresh",
    "kerasmagic.registry_purge", "kerasmagic.extension", "kerasmagic.magics", "kerasmagic.demo",
    "kerasmagic.probes.availability", "kerasmagic.probes.process", "kerasmagic.probes.keras",
    "kerasmagic.probes.tensorflow", "kerasmagic.probes.nvml", "kerasmagic.live.protocol",
    "kerasmagic.live.channel", "kerasmagic.live.sampler", "kerasmagic.live.widget",
    "kerasmagic.isolation", "kerasmagic.isolation.api", "kerasmagic.isolation.cell_names",
    "kerasmagic.isolation.pool", "kerasmagic.isolation.result", "kerasmagic.isolation.shipping",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) in {name} do not hold"

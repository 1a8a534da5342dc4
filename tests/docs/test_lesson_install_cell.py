"""Every lesson starts with a cell that installs kerasmagic on Colab and does nothing where it
is installed (CI runs the lessons without a network), and says what it teaches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "scripts"))
from readme_outputs import repository_url

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
REPOSITORY = repository_url()


def _cells(path):
    import nbformat

    return nbformat.read(path, as_version=4).cells


@pytest.mark.unit
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_lesson_starts_with_the_install_cell_and_says_what_it_teaches(path):
    install, intro = _cells(path)[:2]
    assert install.cell_type == "code"
    assert 'find_spec("kerasmagic") is None' in install.source
    assert f'%pip install -q "kerasmagic @ git+{REPOSITORY}"' in install.source
    assert intro.cell_type == "markdown" and intro.source.startswith("# ")
    teaches = [line for line in intro.source.splitlines() if line.startswith("**What it teaches:**")]
    assert len(teaches) == 1 and teaches[0].rstrip().endswith("."), teaches


@pytest.mark.shell
def test_the_install_cell_does_nothing_where_kerasmagic_is_installed(shell):
    """Run in a real shell with a stand-in ``%pip`` that records: it must not be called here, and
    with kerasmagic hidden from ``find_spec`` it must be called once, with this repository."""
    calls = []
    real_pip = shell.magics_manager.magics["line"].get("pip")
    shell.register_magic_function(calls.append, magic_kind="line", magic_name="pip")
    try:
        source = _cells(NOTEBOOKS[0])[0].source
        assert shell.run_cell(source).success
        assert calls == []
        shell.run_cell("import importlib.util as _u; _real = _u.find_spec; "
                       "_u.find_spec = lambda name, *a: None if name == 'kerasmagic' else _real(name, *a)")
        try:
            assert shell.run_cell(source).success
        finally:
            shell.run_cell("_u.find_spec = _real")
        assert calls == [f'install -q "kerasmagic @ git+{REPOSITORY}"']
    finally:
        shell.magics_manager.magics["line"]["pip"] = real_pip  # IPython's own, for the tests after this

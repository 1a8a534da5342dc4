"""kerasmagic/compat.py: each older-stack decision, on the IPython that runs the tests.

The same tests run on the newest stack (.venv) and on Colab's pins (.venv-colab, IPython 7.34),
so each shim is exercised both where IPython has the feature and where it does not.
"""

from __future__ import annotations

import IPython
import pytest
from IPython.utils.capture import capture_output

from kerasmagic import compat

from shell_helpers import run

pytestmark = pytest.mark.shell


@pytest.mark.parametrize(("text", "hidden"), [
    ("x;", True), ("x;  # note", True), ("x", False), ("x  # shown;", False), ("f(';')", False), ("", False),
])
def test_the_semicolon_rule_is_ipythons_on_every_ipython(text, hidden):
    assert compat.semicolon_at_end_of_expression(text) is hidden


def test_display_lives_where_compat_says(ipython):
    import importlib

    module = importlib.import_module(compat.display_functions_module())
    assert module.display is IPython.display.display


def test_the_kernel_comm_manager_is_the_kernels_own_where_it_has_one():
    class OldKernel:  # ipykernel < 6.18 keeps its own manager here
        comm_manager = object()

    assert compat.kernel_comm_manager(OldKernel()) is OldKernel.comm_manager


@pytest.mark.parametrize(("versions", "needs"), [
    ({"IPython": "7.33.0"}, "IPython >= 7.34"),
    ({"IPython": "7.34.0", "ipykernel": "5.4.3"}, "ipykernel >= 5.5.6"),
    ({"IPython": "8.0.0rc1", "ipykernel": "6.17.1"}, None),
    ({"IPython": "7.34.0", "ipykernel": "5.5.6"}, None),
])
def test_an_unsupported_stack_is_named_with_what_to_install(versions, needs):
    problem = compat.unsupported_stack(versions)
    assert (problem is None) if needs is None else (needs in problem and "pip install -U" in problem)


def test_load_ext_on_an_unsupported_ipython_is_one_line_and_loads_nothing(ipython, monkeypatch):
    ipython.run_line_magic("unload_ext", "kerasmagic")
    monkeypatch.setattr(IPython, "__version__", "7.33.0")
    with capture_output() as captured:
        result = ipython.run_cell("%load_ext kerasmagic", store_history=True)
    assert result.success, result.error_in_exec
    lines = captured.stderr.strip().splitlines()
    assert lines == ["kerasmagic needs IPython >= 7.34 (this kernel has 7.33.0): pip install -U 'IPython>=7.34' "
                     "and restart"], captured.stderr
    assert ipython.find_magic("tf_mem") is None and "Traceback" not in captured.stdout
    ipython.extension_manager.loaded.discard("kerasmagic")
    monkeypatch.undo()
    # The shell goes on: the user's namespace works and a supported IPython loads it.
    run(ipython, "kept = 41 + 1")
    ipython.run_line_magic("load_ext", "kerasmagic")
    assert ipython.find_magic("tf_mem") is not None and ipython.user_ns["kept"] == 42
    ipython.run_line_magic("unload_ext", "kerasmagic")


def test_a_magic_value_is_hidden_by_a_semicolon_on_this_ipython(shell):
    with capture_output() as captured:
        assert run(shell, "%tf_mem -q -o;") is None
        assert run(shell, "%%tf_mem -q -o\nx = 1;") is None
    assert captured.outputs == []
    assert run(shell, "%tf_mem -q -o") is not None

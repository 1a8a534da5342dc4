"""IPython's own names: one check decides them for --who, --isolate, %clear_tf and --as VAR,
and no magic deletes or overwrites a name the kernel needs."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from kerasmagic.clean import clear_tf
from kerasmagic.errors import KerasMagicUsageError
from kerasmagic.holders import user_variable_names
from kerasmagic.isolation.cell import cell_inputs

from shell_helpers import error_of, run

pytestmark = pytest.mark.shell

#: Names IPython (or Python, for the dunders) puts into a notebook's namespace.
IPYTHON_OWN = ["In", "Out", "_ih", "_oh", "_dh", "_sh", "get_ipython", "exit", "quit", "_", "__", "___",
               "_i", "_ii", "_iii", "_1", "_i1", "__builtins__", "__builtin__", "__name__", "__doc__"]
#: Names a user may define, underscores included.
USERS_OWN = ["model", "_model", "__private", "data_", "_i_am_private", "_1st"]

#: Deleting or overwriting any of these breaks the kernel (or every later magic).
KERNEL_NEEDS = ["_oh", "_dh", "_ih", "_sh", "__name__", "In", "Out", "get_ipython", "exit", "quit", "__builtins__"]


@pytest.mark.parametrize("name", IPYTHON_OWN + USERS_OWN)
def test_who_isolation_and_clear_tf_agree_on_whose_name_it_is(shell, name):
    run(shell, "1 + 1")  # fills _, _1, _i, _i1
    shell.user_ns.setdefault(name, ["a value"])
    # Whether IPython mirrors a name in user_ns_hidden must not matter for its fixed names: a
    # kernel may rebind In/_ih/_oh, and a user's own name is never hidden.
    shell.user_ns_hidden.pop(name, None)
    users = name in USERS_OWN
    assert (name in user_variable_names(shell)) == users, "%tf_mem --who"
    assert cell_inputs(shell, [name], []) == ([name] if users else []), "%%fresh_model --isolate"
    if users or name in ("_", "__", "___", "_1"):  # output-cache names may be deleted: %xdel semantics
        assert clear_tf(name, shell=shell, purge_hidden=False, purge_registry=False).dropped[0].startswith(
            f"variable {name}")
    else:
        with pytest.raises(KerasMagicUsageError, match=f"^refusing to delete {name!r}: IPython needs it"):
            clear_tf(name, shell=shell)


@pytest.mark.parametrize("name", KERNEL_NEEDS)
def test_clear_tf_refuses_a_name_ipython_needs_and_the_kernel_keeps_working(shell, capsys, name):
    run(shell, "precious = [1, 2, 3]")
    run(shell, "1 + 1")
    before = dict(shell.user_ns)
    result = shell.run_cell(f"%clear_tf precious {name}", store_history=True)
    error = error_of(result)
    assert isinstance(error, UsageError), repr(error)
    message = str(error)
    assert message.startswith(f"refusing to delete {name!r}: IPython needs it (") and "%who" in message
    assert "\n" not in message
    assert "Traceback" not in "".join(capsys.readouterr())
    assert set(before) <= set(shell.user_ns), "nothing was deleted"
    assert shell.user_ns["precious"] is before["precious"]
    assert shell.user_ns.get(name) is before.get(name)
    # The kernel still works: a cell with a value, %cd (needs _dh), a magic (needs get_ipython).
    assert run(shell, "2 + 2") == 4
    run(shell, "%cd -q .")
    run(shell, "%tf_mem -q")
    assert shell.user_ns["precious"] == [1, 2, 3]


def test_clear_tf_still_deletes_an_output_cache_name(shell):
    run(shell, "list(range(5))")
    number = shell.execution_count - 1
    report = run(shell, f"%clear_tf _{number} -q -o")
    assert f"_{number}" not in shell.user_ns and number not in shell.user_ns["Out"]
    assert report.dropped[0] == f"variable _{number}"
    assert run(shell, "3 + 3") == 6


OUTPUT_LINES = [
    "%tf_mem -q --as {name}",
    "%%tf_mem -q --as {name}\nprecious.append(4)",
    "%%fresh_model -q --as {name}\nprecious.append(4)",
]


@pytest.mark.parametrize("line", OUTPUT_LINES, ids=["tf_mem", "tf_mem-cell", "fresh_model"])
@pytest.mark.parametrize("name", ["get_ipython", "In", "Out", "_oh", "_", "_i1", "__builtins__", "__name__",
                                  "exit", "def", "None", "lambda"])
def test_as_refuses_a_name_ipython_needs_or_a_keyword(shell, capsys, line, name):
    run(shell, "precious = [1, 2, 3]")
    missing = object()
    before = shell.user_ns.get(name, missing)
    result = shell.run_cell(line.format(name=name), store_history=True)
    error = error_of(result)
    assert isinstance(error, UsageError), repr(error)
    message = str(error)
    assert message.startswith(f"--as needs a new variable name; {name!r} is ") and "e.g. --as report" in message
    assert ("a Python keyword" in message) == (name in ("def", "None", "lambda"))
    assert "\n" not in message
    assert "Traceback" not in "".join(capsys.readouterr())
    assert shell.user_ns.get(name, missing) is before
    assert shell.user_ns["precious"] == [1, 2, 3], "the cell did not run"
    run(shell, "%tf_mem -q")  # every later magic still works
    assert run(shell, "2 + 2") == 4


@pytest.mark.parametrize("line", OUTPUT_LINES, ids=["tf_mem", "tf_mem-cell", "fresh_model"])
def test_as_still_takes_a_private_name(shell, line):
    run(shell, "precious = [1, 2, 3]")
    run(shell, line.format(name="_snap"))
    assert shell.user_ns["_snap"] is not None

"""The magics' options as IPython's own magics have them (issue 11, item 6): ``-o`` returns the
result object in every magic (as ``%timeit -o``), ``--as VAR`` keeps it in a variable, a last
``;`` hides a magic's value (IPython's ``@output_can_be_silenced``), each value is checked by
its argparse ``type=`` in the Python API's words, ``%clear_tf`` and ``%%fresh_model`` share one
option block, and an autocorrected dash is named as such. No framework is needed here."""

from __future__ import annotations

import shutil

import pytest
from IPython.core import magic as ipython_magic
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from kerasmagic.clean import CleanReport
from kerasmagic.fresh import FreshModelResult
from kerasmagic.measuring import CellMeasurement
from kerasmagic.snapshot import MemorySnapshot

from shell_helpers import error_of, run

pytestmark = pytest.mark.shell


def usage_error(shell, cell: str) -> str:
    result = shell.run_cell(cell, store_history=True)
    error = error_of(result)
    assert isinstance(error, UsageError), repr(error)
    assert "\n" not in str(error)
    return str(error)


# --- -o: the result object as the magic's value, in all four -----------------------------------


@pytest.mark.parametrize("cell, kind", [
    ("%tf_mem -o", MemorySnapshot),
    ("%clear_tf -o", CleanReport),
    ("%%tf_mem -o\nvalue = 41\nvalue + 1", CellMeasurement),
    ("%%fresh_model -o\nvalue = 41\nvalue + 1", FreshModelResult),
], ids=["tf_mem", "clear_tf", "tf_mem-cell", "fresh_model"])
def test_dash_o_makes_the_result_object_the_value_shown_once(shell, cell, kind):
    with capture_output() as captured:
        value = run(shell, cell)
    assert isinstance(value, kind)
    assert captured.outputs == [], "with -o the magic does not display the report itself"
    assert "_tf_mem" not in shell.user_ns, "-o stores nothing"
    if cell.startswith("%%"):
        assert shell.user_ns["value"] == 41, "the cell ran"


@pytest.mark.parametrize("cell, kind", [
    ("%tf_mem -q --as kept", MemorySnapshot),
    ("%clear_tf -q --as kept", CleanReport),
    ("%%tf_mem -q --as kept\nvalue = 41\nvalue + 1", CellMeasurement),
    ("%%fresh_model -q --as kept\nvalue = 41\nvalue + 1", FreshModelResult),
], ids=["tf_mem", "clear_tf", "tf_mem-cell", "fresh_model"])
def test_as_keeps_the_result_object_in_a_variable(shell, cell, kind):
    value = run(shell, cell)
    assert isinstance(shell.user_ns["kept"], kind)
    assert value == (42 if cell.startswith("%%") else None), "the cell's own value is still its value"


def test_as_with_dash_o_keeps_and_returns_the_same_object(shell):
    assert run(shell, "%%fresh_model -q -o --as kept\nx = 1") is shell.user_ns["kept"]


@pytest.mark.parametrize("cell, name", [
    ("%tf_mem -o snap", "snap"),
    ("%tf_mem --output=snap", "snap"),
    ("%%tf_mem -q -o m\nx = 1", "m"),
    ("%%fresh_model -q -o model\nx = 1", "model"),
])
def test_dash_o_with_a_name_says_to_write_as_and_touches_nothing(shell, cell, name):
    run(shell, "model = [1, 2, 3]")
    message = usage_error(shell, cell)
    assert message.startswith("-o takes no variable name") and f"write --as {name}" in message
    assert shell.user_ns["model"] == [1, 2, 3], "not read as a variable to delete"
    assert "x" not in shell.user_ns, "the cell did not run"
    assert name == "model" or name not in shell.user_ns


def test_dash_o_still_comes_after_names_to_delete(shell):
    run(shell, "model = [1, 2, 3]")
    assert isinstance(run(shell, "%%fresh_model model -q -o\nx = 1"), FreshModelResult)
    assert "model" not in shell.user_ns


# --- a last `;` hides a magic's value: IPython's @output_can_be_silenced -------------------------


def test_the_magics_use_ipythons_output_can_be_silenced_where_it_has_it(shell):
    # IPython >= 8.10 hides the value itself when the magic carries its mark; IPython 7.34 has
    # no mark, and the magic (compat.output_can_be_silenced) hides it: the next test checks both.
    mark = getattr(ipython_magic, "MAGIC_OUTPUT_CAN_BE_SILENCED", None)
    for name, kind in (("tf_mem", "line"), ("tf_mem", "cell"), ("clear_tf", "line"), ("fresh_model", "cell")):
        magic = shell.find_magic(name, kind)
        if mark is not None:
            assert getattr(magic, mark, False), (name, kind)
        else:
            assert getattr(magic, "__wrapped__", None) is not None, (name, kind)


@pytest.mark.parametrize("cell", [
    "%clear_tf -q -o;",
    "%clear_tf -q -o;  # kept in _ all the same",
    "%tf_mem -o ;",
    "%%fresh_model -q -o\nx = 1;  # note",
    "%%tf_mem -q\n1 + 1;  # hidden",
])
def test_a_last_semicolon_hides_the_value_comment_or_not(shell, cell):
    with capture_output() as captured:
        assert run(shell, cell) is None
    assert captured.outputs == [] and captured.stdout == ""


# --- values checked by their type=, in the Python API's words ------------------------------------


@pytest.mark.parametrize("cell, words", [
    ("%clear_tf --seed forty", "the seed must be an integer from 0 to 2**32 - 1, got 'forty'; e.g. --seed 42"),
    ("%%fresh_model --seed 1.5\nx = 1", "the seed must be an integer from 0 to 2**32 - 1, got '1.5'; e.g. --seed 42"),
    ("%clear_tf 1x", "'1x' is not a variable name; name the variables to delete, e.g. model history"),
    ("%%fresh_model --isolate --timeout 0\nx = 1", "the timeout must be a finite number of seconds > 0"),
    ("%%fresh_model --isolate --env =1\nx = 1", "--env takes KEY=VALUE pairs, got '=1'"),
    ("%%fresh_model --isolate --gpu one\nx = 1", "gpu='one': 'one' is not a GPU"),
])
def test_a_bad_value_is_one_usage_error_in_the_apis_words(shell, cell, words):
    message = usage_error(shell, cell)
    assert message.startswith(words), message
    assert "clear_tf('model')" not in message, "the Python API's example has no place in a magic's answer"
    assert "x" not in shell.user_ns


def test_clear_tf_and_fresh_model_share_one_option_block(shell):
    def options(name, kind):
        parser = shell.find_magic(name, kind).parser
        return {action.dest: (tuple(action.option_strings), action.nargs, action.type, type(action))
                for action in parser._actions}

    clean, fresh = options("clear_tf", "line"), options("fresh_model", "cell")
    shared = ["names", "seed", "keep_hidden", "keep_registry", "quiet", "output", "store_as"]
    assert {dest: clean[dest] for dest in shared} == {dest: fresh[dest] for dest in shared}
    # -q, -o and --as mean the same in %tf_mem as well.
    mem = options("tf_mem", "line")
    assert {dest: mem[dest] for dest in ("quiet", "output", "store_as")} == \
        {dest: clean[dest] for dest in ("quiet", "output", "store_as")}


# --- an autocorrected dash -----------------------------------------------------------------------------


@pytest.mark.parametrize("cell, token, meant", [
    ("%%fresh_model \u2014seed 1\nx = 1", "\u2014seed", "--seed"),
    ("%%fresh_model --isolate \u2013timeout 5\nx = 1", "\u2013timeout", "--timeout"),
    ("%clear_tf model \u2014keep-hidden", "\u2014keep-hidden", "--keep-hidden"),
    ("%tf_mem \u2014who", "\u2014who", "--who"),
    ("%tf_mem \u2013q", "\u2013q", "-q"),
])
def test_an_autocorrected_dash_is_named_and_the_option_meant_given(shell, cell, token, meant):
    run(shell, "model = [1, 2, 3]")
    message = usage_error(shell, cell)
    assert message.startswith(f"{token!r} is not an option: it starts with an ") and message.endswith(
        f"you meant {meant}"), message
    assert f"(U+{ord(token[0]):04X})" in message
    assert shell.user_ns["model"] == [1, 2, 3] and "x" not in shell.user_ns


# --- --on / --address: where an isolated cell runs -------------------------------------------------------


@pytest.mark.parametrize("cell, words", [
    ("%%fresh_model --isolate --on cloud\nx = 1",
     "argument --on: invalid choice: 'cloud' (choose from 'local', 'ray', 'ray-local')"),
    ("%%fresh_model --on ray\nx = 1", "--on only work with --isolate; add --isolate to the line"),
    ("%%fresh_model --on ray --address 10.0.0.5:6379\nx = 1",
     "--on, --address only work with --isolate; add --isolate to the line"),
    ("%%fresh_model --isolate --address 10.0.0.5:6379\nx = 1",
     "--address is the Ray cluster to connect to: use it with --on ray"),
    ("%%fresh_model --isolate --on ray-local --address 10.0.0.5:6379\nx = 1",
     "--address is the Ray cluster to connect to: use it with --on ray"),
    ("%%fresh_model --isolate --on ray --gpu 0\nx = 1",
     "--gpu picks this machine's GPUs; on a Ray cluster Ray assigns"),
])
def test_ray_options_are_refused_before_anything_runs(shell, monkeypatch, cell, words):
    import kerasmagic.isolation.cell as isolation_cell

    monkeypatch.setattr(isolation_cell, "run_job", _no_job)
    message = usage_error(shell, cell)
    assert message.startswith(words), message
    assert "x" not in shell.user_ns


def _no_job(*args, **kwargs):
    raise AssertionError("a job was handed to a worker")


@pytest.mark.parametrize("line, address, local", [
    ("--on ray --address 10.0.0.5:6379", "10.0.0.5:6379", False),
    ("--on ray-local", None, True),
    ("--on local", None, None),
])
def test_on_and_address_reach_the_runner(shell, monkeypatch, line, address, local):
    import kerasmagic.isolation.cell as isolation_cell

    handed = {}

    def record(job, spec, result, **options):
        handed.update(options)
        shutil.rmtree(job.directory, ignore_errors=True)  # as run_job would
        return result

    monkeypatch.setattr(isolation_cell, "run_job", record)
    run(shell, f"%%fresh_model -q --isolate {line}\nx = 1")
    target = handed["on"]
    if local is None:
        assert target is None
    else:
        assert (target.address, target.local) == (address, local)

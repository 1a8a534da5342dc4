"""What `%tf_mem --who` reports and `%clear_tf` drops: the same hidden holders, odd user objects
that must not break the report, and a bad ``namespace`` told in words."""

from __future__ import annotations

import operator
import sys
import warnings

import pytest

from kerasmagic.clean import clear_tf
from kerasmagic.errors import KerasMagicUsageError
from kerasmagic.fresh import fresh_model
from kerasmagic.holders import find_holders

from shell_helpers import run

pytestmark = pytest.mark.shell

#: Every place `%clear_tf` drops the last exception from that can keep its frames (and so a
#: large local) alive; ``sys.last_type`` is dropped too but holds only the class.
EXCEPTION_HOLDERS = [
    "sys.last_exc",
    "sys.last_value",
    "sys.last_traceback",
    "shell.InteractiveTB.tb",
    "shell.SyntaxTB.tb",
    "shell.SyntaxTB.last_syntax_error",
    "shell.last_execution_result.error_in_exec",
]

RAISES = """
def load():
    big = np.ones(2**18)  # 2 MiB: large enough for --who
    raise ValueError('bad shape')
load()
"""


def _owner(shell, where: str):
    owner_name, attribute = where.rsplit(".", 1)
    owner = sys if owner_name == "sys" else operator.attrgetter(owner_name.removeprefix("shell."))(shell)
    return owner, attribute


def _exception_places(shell) -> list[list[str]]:
    """For each frame local of the last exception --who reports: the holders it names."""
    report = find_holders(shell, census=False).to_dict()
    return [
        holder["where"].split(" via ")[1].split(", ")
        for item in report["objects"]
        for holder in item["holders"]
        if holder["kind"] == "exception" and "local 'big'" in holder["where"]
    ]


def test_the_list_above_is_the_table_clear_tf_and_who_share():
    from kerasmagic.holders import LAST_EXCEPTION_HOLDERS

    assert {f"{owner}.{attribute}" for owner, attribute in LAST_EXCEPTION_HOLDERS} == {
        *EXCEPTION_HOLDERS, "sys.last_type"}


@pytest.mark.parametrize("where", EXCEPTION_HOLDERS)
def test_each_exception_holder_clear_tf_drops_is_one_who_reports(shell, where):
    run(shell, "import numpy as np")
    result = shell.run_cell(RAISES, store_history=True)
    error = result.error_in_exec
    assert isinstance(error, ValueError)
    # Leave the exception in `where` only.
    for other in EXCEPTION_HOLDERS + ["sys.last_type"]:
        owner, attribute = _owner(shell, other)
        if owner is sys:
            if hasattr(sys, attribute):
                delattr(sys, attribute)
        else:
            setattr(owner, attribute, None)
    owner, attribute = _owner(shell, where)
    setattr(owner, attribute, error.__traceback__ if attribute in ("tb", "last_traceback") else error)
    del error, result

    assert _exception_places(shell) == [[where]], "--who names the one holder keeping the array"
    report = clear_tf(shell=shell, purge_registry=False)
    assert where in report.dropped
    assert _exception_places(shell) == []
    assert getattr(owner, attribute, None) is None


def test_every_output_cache_holder_clear_tf_drops_is_one_who_reports(shell):
    run(shell, "import numpy as np")
    run(shell, "np.ones(2**18)")  # displayed: Out[n], _n, _, the hidden copies, the display hook
    report = find_holders(shell, census=False).to_dict()
    (array,) = [item for item in report["objects"] if item["label"].startswith("ndarray")]
    reported = {holder["where"] for holder in array["holders"]}
    dropped = clear_tf(shell=shell, purge_registry=False).steps[1].items
    assert dropped and set(dropped) <= reported, set(dropped) - reported
    assert not find_holders(shell, census=False).objects


RAISING_CLASS = """
class Lazy:
    @property
    def __class__(self):
        raise RuntimeError('not loaded yet')
"""


@pytest.mark.frameworks
def test_who_and_clear_tf_survive_an_object_whose_class_raises(shell, capsys):
    run(shell, "import numpy as np, keras\n" + RAISING_CLASS)
    run(shell, "lazy = Lazy(); box = [Lazy()]; table = {'k': Lazy()}; big = np.ones(2**18)\n"
               "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])")
    run(shell, "Lazy()")  # in the output cache too
    capsys.readouterr()  # IPython's own formatter prints a traceback for it: not ours
    snap = run(shell, "%tf_mem --who -o")
    text = str(snap)
    assert "Traceback" not in "".join(capsys.readouterr())
    assert "ndarray[262144]" in text and "big" in text
    assert "Sequential" in text and "model" in text
    assert [m["name"] for m in snap.models] == [shell.user_ns["model"].name], "the models section too"
    report = run(shell, "%clear_tf -q -o")
    assert all(step.skipped is None or not step.skipped.startswith("failed") for step in report.steps), [
        step.skipped for step in report.steps]
    assert any("ndarray" in line for line in report.still_held)


@pytest.mark.parametrize("namespace, kind", [(5, "int"), ("globals", "str"), ([("x", 1)], "list"), (object, "type")])
def test_a_bad_namespace_is_told_in_words(namespace, kind):
    expected = rf"^namespace must be a dict of variables, e\.g\. globals\(\); got {kind}$"
    with pytest.raises(KerasMagicUsageError, match=expected):
        clear_tf("x", namespace=namespace)
    with pytest.raises(KerasMagicUsageError, match=expected):
        with fresh_model("x", namespace=namespace):
            pass


def test_who_scan_prints_no_warning_of_objects_it_looks_at(shell, capfd):
    # An object that warns on any attribute access, as torch's deprecated
    # torch.distributed.reduce_op does: isinstance() reads its __class__.
    run(shell, "import warnings\n"
               "class Deprecated:\n"
               "    def __getattribute__(self, name):\n"
               "        warnings.warn('reduce_op is deprecated', FutureWarning)\n"
               "        return object.__getattribute__(self, name)\n"
               "reduce_op = Deprecated()")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")  # as in a fresh kernel: every warning is shown once
        report = run(shell, "%tf_mem --who -q -o")
    assert report.holders is not None
    assert not [str(w.message) for w in shown if "deprecated" in str(w.message)]
    assert "deprecated" not in capfd.readouterr().err
    run(shell, "del reduce_op, Deprecated")


def test_who_says_when_a_tensor_lives_on_a_gpu(shell):
    # torch is not installed here: a stand-in that answers as a CUDA tensor does.
    run(shell, "class Tensor:\n"
               "    __module__ = 'torch'\n"
               "    shape = (4096, 4096)\n"
               "    device = 'cuda:1'\n"
               "    def nelement(self): return 4096 * 4096\n"
               "    def element_size(self): return 4\n"
               "on_gpu = Tensor()\n"
               "import numpy as np\non_host = np.ones((4096, 4096), dtype=np.float32)")
    text = str(run(shell, "%tf_mem --who -q -o"))
    assert "Tensor[4096, 4096] on cuda:1" in text
    assert "ndarray[4096, 4096] " in text and "ndarray[4096, 4096] on" not in text
    run(shell, "del on_gpu, on_host, Tensor")


def test_a_tensorflow_tensor_on_the_cpu_names_no_device(shell):
    run(shell, "import tensorflow as tf\nbig = tf.ones((2048, 2048))")
    report = run(shell, "%tf_mem --who -q -o")
    (item,) = [o for o in report.holders.to_dict()["objects"] if "big" in str(o["holders"])]
    assert item["device"] is None and " on " not in item["label"]
    run(shell, "del big")


def test_a_failed_frame_holding_the_namespace_is_not_named_for_every_variable(shell):
    from kerasmagic.holders import exception_holders

    shell.user_ns["helper_shell"] = shell
    shell.run_cell("big = bytearray(2**20)\n"
                   "def step():\n"
                   "    namespace = helper_shell.user_ns   # as a magic's frame holds it\n"
                   "    own = [1]\n"
                   "    raise ValueError('boom')\n"
                   "step()")
    named = [where for where, _ in exception_holders(shell)]
    assert any("local 'own'" in where for where in named), named
    assert not any("local 'namespace'" in where for where in named), named

"""One holder search for `%tf_mem --who` and `%clear_tf`: every path from the notebook's roots to
each large object, through attributes, partials, closures, bound methods and containers; what
`%clear_tf` drops and lists as still held is what that search found.

Every figure is checked against something the search does not compute: weak references (the
object really died, or really lives), `gc.get_referrers` (the holder it names really refers to
the object) and the arrays' own `nbytes`.
"""

from __future__ import annotations

import gc
import sys
import types

import numpy as np
import pytest

from kerasmagic.clean import clear_tf
from kerasmagic.holders import HolderSearch, find_holders, iter_namespace_references

from shell_helpers import run

pytestmark = pytest.mark.shell

#: An object holding a 4 MiB array in an attribute, a partial, a closure and a bound method.
HOLDERS = """
import functools, weakref
import numpy as np

class Experiment:
    def __init__(self, data):
        self.data = data
    def score(self):
        return float(self.data[0])

def make_loader(array):
    def load():
        return array
    return load

exp = Experiment(np.ones(2**19))           # exp.data
step = functools.partial(print, np.ones(2**19) * 2)
loader = make_loader(np.ones(2**19) * 3)
score = Experiment(np.ones(2**19) * 4).score
refs = {name: weakref.ref(value) for name, value in [
    ("attribute", exp.data), ("partial", step.args[0]), ("closure", loader()), ("method", score.__self__.data)]}
"""


def _places(report, nbytes: int) -> list[list[str]]:
    """The holders of each listed object of ``nbytes`` bytes."""
    return [[h["where"] for h in item["holders"]] for item in report.to_dict()["objects"] if item["bytes"] == nbytes]


def test_who_follows_attributes_partials_closures_and_bound_methods(shell):
    run(shell, HOLDERS)
    report = find_holders(shell, census=False)
    wheres = {where for places in _places(report, 2**22) for where in places}
    assert {"exp.data", "step.args[0]", "loader (closure variable 'array')", "score.__self__.data"} <= wheres, wheres
    # Independent check: the object each path names is the array, and it really refers to it.
    ns = shell.user_ns
    assert ns["exp"].data is ns["refs"]["attribute"]()
    assert any(cell.cell_contents is ns["refs"]["closure"]() for cell in ns["loader"].__closure__)
    assert ns["step"].args in gc.get_referrers(ns["refs"]["partial"]())


def test_clear_tf_lists_what_the_search_found_and_deleting_the_root_frees_it(shell):
    run(shell, HOLDERS)
    report = clear_tf(shell=shell, purge_registry=False)
    held = "\n".join(report.still_held)
    for where in ("exp.data", "step.args[0]", "loader (closure variable 'array')", "score.__self__.data"):
        assert where in held, (where, held)
    refs = shell.user_ns["refs"]
    assert all(ref() is not None for ref in refs.values()), "clear_tf never deletes what it was not named"
    clear_tf("exp", "step", "loader", "score", shell=shell, purge_registry=False)
    assert [name for name, ref in refs.items() if ref() is not None] == []


def test_a_displayed_object_holding_an_array_in_an_attribute_is_dropped_from_the_cache(shell):
    run(shell, HOLDERS)
    number = shell.run_cell("Experiment(np.ones(2**19) * 5)", store_history=True).execution_count  # Out[n] holds it
    # Out[n], not `_`: IPython stops updating `_` once a test before this one in the same shell
    # left `_` differing from its displayhook's copy (seen under xdist's file order), and Out[n]
    # is what this test is about.
    run(shell, f"kept = weakref.ref(Out[{number}].data)")
    report = find_holders(shell, census=False)
    (places,) = [p for p in _places(report, 2**22) if any(w.endswith("].data") for w in p)]
    assert any(w.startswith("Out[") and w.endswith("].data") for w in places), places
    clean = clear_tf(shell=shell, purge_registry=False)
    assert any(item.startswith("Out[") for item in clean.dropped), clean.dropped
    assert shell.user_ns["kept"]() is None, "the array died with the cache entry"


def test_a_displayed_dataframe_left_after_del_is_reported_and_freed(shell):
    pd = pytest.importorskip("pandas", reason="pandas is not installed in this environment")
    run(shell, "import weakref\nimport numpy as np\nimport pandas as pd\n"
               "df = pd.DataFrame({c: np.ones(2**19) for c in 'abcd'})")  # 16 MiB of columns
    run(shell, "df")
    run(shell, "kept = weakref.ref(df); column_bytes = sum(df[c].to_numpy().nbytes for c in df)\ndel df")
    assert isinstance(shell.user_ns["kept"](), pd.DataFrame), "precondition: Out[] keeps it alive"
    report = find_holders(shell, census=False)
    (frame,) = [item for item in report.to_dict()["objects"] if item["label"].startswith("DataFrame")]
    assert frame["label"] == "DataFrame[524288x4]"
    # pandas' memory_usage counts the index too: at least the columns, within 1 MiB of them.
    assert 0 <= frame["bytes"] - shell.user_ns["column_bytes"] < 2**20, frame["bytes"]
    assert any(h["where"].startswith("Out[") for h in frame["holders"])
    clear_tf(shell=shell, purge_registry=False)
    assert shell.user_ns["kept"]() is None


def test_a_script_namespace_is_searched_the_same_way():
    import functools

    import numpy as np

    array = np.ones(2**19)
    namespace = {"job": functools.partial(sum, [array]), "__name__": "__main__"}
    assert [h.where for h in iter_namespace_references(namespace)] == ["job.args[0][0]"]


def test_every_root_holding_an_object_is_named_and_each_path_is_real(shell):
    run(shell, HOLDERS)
    run(shell, "alias = exp; pair = [exp.data, exp]")
    search = HolderSearch(shell)
    (item,) = [item for item in search.heavy if item.obj is shell.user_ns["exp"].data]
    wheres = [h.where for h in item.holders]
    assert {"exp.data", "alias.data", "pair[0]"} <= set(wheres), wheres
    assert search.root_variables(item.obj)[:3] == ["exp", "alias", "pair"]


def test_a_search_past_its_budget_says_it_stopped(shell):
    run(shell, "import numpy as np\nnested = [[[[np.ones(2**18)]]]]")
    assert HolderSearch(shell).heavy, "found within the budget"
    search = HolderSearch(shell, budget=2)
    assert search.truncated and not search.heavy
    report = find_holders(shell, census=False)
    assert report.search["truncated"] is False and report.search["visited"] >= 4


def test_a_module_global_aliasing_the_notebooks_namespace_adds_no_second_holder(shell, monkeypatch):
    # The H200 run (tests/gpu/session_*.py start IPython from a script whose __main__ keeps
    # `ns = shell.user_ns`): one model, one variable, listed as ['loaded', "__main__.ns['loaded']"].
    script = types.ModuleType("__main__")
    script.ns = shell.user_ns
    script.settings = {"ns": shell.user_ns}  # reached again one step further down
    monkeypatch.setitem(sys.modules, "__main__", script)
    run(shell, "import numpy as np\nkept = np.ones(2**19)")
    assert _places(find_holders(shell, census=False), 2**22) == [["kept"]]
    # The module's own globals still count where they hold something of their own.
    script.own = np.ones(2**19) * 2
    places = sorted(_places(find_holders(shell, census=False), 2**22))
    assert places == [["__main__.own"], ["kept"]], places


def test_the_namespace_reached_from_the_notebook_itself_adds_no_second_holder(shell):
    run(shell, "import numpy as np, types\nkept = np.ones(2**19)\nme = get_ipython().user_ns\n"
               "box = types.SimpleNamespace(scope=globals(), data=kept)")
    places = _places(find_holders(shell, census=False), 2**22)
    assert places == [["kept", "box.data"]], places
    assert shell.user_ns["me"] is shell.user_ns and shell.user_ns["box"].scope is shell.user_ns  # really aliases

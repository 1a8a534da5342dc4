"""Shared fixtures: a real IPython shell with kerasmagic loaded, and clean state between tests."""

from __future__ import annotations

import os

import pytest

# TensorFlow's C++ logging is noise in test output; set before anything imports it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="session")
def ipython():
    """The process's one real ``InteractiveShell`` (IPython allows a single instance)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    # An in-memory history database: tests must not write to ~/.ipython.
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    shell.colors = "nocolor"
    return shell


@pytest.fixture
def shell(ipython):
    """A shell with kerasmagic loaded and an empty namespace, output cache and last exception."""
    import sys

    ipython.reset(new_session=False)
    for attribute in ("last_exc", "last_value", "last_traceback", "last_type"):
        if hasattr(sys, attribute):
            delattr(sys, attribute)
    ipython.run_line_magic("load_ext", "kerasmagic")
    yield ipython
    ipython.run_line_magic("unload_ext", "kerasmagic")
    ipython.reset(new_session=False)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt during the test, as in a kernel running a cell.

    A process started in the background by a non-interactive shell (CI's runner, `cmd &`)
    inherits SIGINT *ignored*, and Python then installs no handler: a test that interrupts
    itself would wait for nothing. ipykernel, likewise, ignores SIGINT between cells and
    installs ``default_int_handler`` while one runs; this does what it does for a cell.
    """
    import signal

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


@pytest.fixture(scope="session", autouse=True)
def nothing_of_ours_outlives_the_session():
    """At the end of the run no kerasmagic thread and no child process may be left alive.

    Set up first, torn down last: the isolation pool and the kernels of the other layers'
    fixtures are gone by then, so whatever remains leaked.
    """
    import threading

    import psutil

    yield
    threads = [t.name for t in threading.enumerate() if t.name.startswith("kerasmagic")]
    children = []
    for process in psutil.Process().children(recursive=True):
        try:
            children.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
        except psutil.Error:
            continue  # exited while we looked
    assert not threads and not children, f"left running: threads {threads}, processes {children}"


@pytest.fixture
def keras_shell(shell):
    """The `shell` with `make_model(width)`, `x` and `y` defined (shell_helpers.MAKE_MODEL)."""
    from shell_helpers import MAKE_MODEL, run

    run(shell, MAKE_MODEL)
    return shell


# --- how two xdist workers share the suite (`./dev.sh test`: -n 2 --dist loadfile) -------------
# Files go to workers whole, so a module fixture (a Ray cluster, a JupyterLab server) starts once.
# Left to itself xdist hands out the files with the most tests first, and the few-test, long
# files (the lessons, the Ray cluster, the browser tests) came last, leaving one worker idle at
# the end. So the long ones go first. The Ray tests and the lessons are one unit of work, run
# one after another on one worker: Ray gives a starting node 30 s to register (hard-coded in
# ray/_private/node.py), and lesson 1's five training processes at once on the other worker
# made the test cluster, or lesson 7's, miss that on CI's 2 cores.
RAY_AND_LESSONS = ("tests/cluster/", "tests/notebooks/")
# Then the few-test files that each take a minute or more: the sdist install, the README's
# regenerated outputs, the advice corpus, the model loop per strategy.
LONG_RUNNING_FIRST = (*RAY_AND_LESSONS, "tests/ui/", "tests/docs/", "tests/core/test_advice_corpus.py",
                      "tests/stacks/test_model_loop_per_tensorflow.py")


def _long_running_rank(nodeid: str) -> int:
    return next((rank for rank, folder in enumerate(LONG_RUNNING_FIRST) if nodeid.startswith(folder)),
                len(LONG_RUNNING_FIRST))


def pytest_collection_modifyitems(config, items):
    # A stable sort: within a rank the files and their tests keep pytest's order.
    items.sort(key=lambda item: _long_running_rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist (the GPU machine) it is never called
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class RayAndLessonsTogetherScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "ray-and-lessons" if nodeid.startswith(RAY_AND_LESSONS) else super()._split_scope(nodeid)

    if config.getvalue("dist") != "loadfile":
        return None  # another --dist was asked for: xdist's own
    return RayAndLessonsTogetherScheduling(config, log)


#: The layer markers (pyproject.toml): every test carries at least one, so that a marker
#: expression such as the fast tier's ``-m "unit or shell"`` and the full run together miss none.
LAYER_MARKERS = ("unit", "shell", "frameworks", "kernel", "gpu", "ui", "notebooks", "isolation",
                 "cluster", "stacks", "packaging")
_unmarked: list[str] = []


def pytest_itemcollected(item):
    # Before -m deselects anything: an unmarked test would otherwise vanish from every tier.
    if not any(item.get_closest_marker(name) for name in LAYER_MARKERS):
        _unmarked.append(item.nodeid)


def pytest_collection_finish(session):
    if _unmarked:
        raise pytest.UsageError(
            f"{len(_unmarked)} test(s) carry no layer marker ({', '.join(LAYER_MARKERS)}); add "
            f"`pytestmark = pytest.mark.<layer>` to the file: {', '.join(_unmarked[:10])}")

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

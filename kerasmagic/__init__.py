"""kerasmagic: session hygiene for Keras/TensorFlow notebooks.

Importing this package is cheap and imports no ML framework: the public names below are
loaded on first use.

Example:
    >>> import kerasmagic
    >>> report = kerasmagic.tf_mem()          # what this process holds, and whose number it is
    >>> with kerasmagic.fresh_model(seed=0) as run:   # clean, then measure the block
    ...     pass
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY_EXPORTS = {
    "tf_mem": "kerasmagic.snapshot",
    "MemorySnapshot": "kerasmagic.snapshot",
    "measure": "kerasmagic.measuring",
    "CellMeasurement": "kerasmagic.measuring",
    "find_holders": "kerasmagic.holders",
    "HolderReport": "kerasmagic.holders",
    "clear_tf": "kerasmagic.clean",
    "CleanReport": "kerasmagic.clean",
    "cell_growth": "kerasmagic.leak_watch",
    "CellGrowthReport": "kerasmagic.leak_watch",
    "fresh_model": "kerasmagic.fresh",
    "FreshModelResult": "kerasmagic.fresh",
    # The whole isolation API (kerasmagic.isolation.__all__): the README calls prestart_pool()
    # beside kerasmagic.run_isolated(), and a loop catches kerasmagic.IsolatedTimeout.
    "run_isolated": "kerasmagic.isolation",
    "isolated_map": "kerasmagic.isolation",
    "IsolatedMapResult": "kerasmagic.isolation",
    "IsolatedResult": "kerasmagic.isolation",
    "IsolatedHistory": "kerasmagic.isolation",
    "configure_pool": "kerasmagic.isolation",
    "prestart_pool": "kerasmagic.isolation",
    "shutdown_default_pool": "kerasmagic.isolation",
    "IsolationUsageError": "kerasmagic.isolation",
    "IsolatedShippingError": "kerasmagic.isolation",
    "IsolatedTimeout": "kerasmagic.isolation",
    "IsolatedCrash": "kerasmagic.isolation",
    "IsolatedOutOfMemory": "kerasmagic.isolation",
    "IsolatedCellError": "kerasmagic.isolation",
    "IsolatedInterrupt": "kerasmagic.isolation",
    "IsolationWarning": "kerasmagic.isolation",
    "memory_limit": "kerasmagic.limits",
    "set_memory_limit": "kerasmagic.limits",
    "MemoryLimit": "kerasmagic.limits",
    "memory_guard": "kerasmagic.guard",
    "GuardSettings": "kerasmagic.guard",
    "KernelMemoryLimitError": "kerasmagic.errors",
    "KernelMemoryLimitInterrupt": "kerasmagic.errors",
    "OnRay": "kerasmagic.isolation.cluster.target",
    "close_cluster_session": "kerasmagic.isolation.cluster.remote",
}

__all__ = [
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
    *_LAZY_EXPORTS,
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'kerasmagic' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


def load_ipython_extension(ipython) -> None:
    """``%load_ext kerasmagic``: register the magics (and the live channel in a kernel).

    On a stack older than kerasmagic supports it prints one line saying what to install and
    loads nothing: no traceback from our internals, and the kernel goes on as it was. IPython
    counts the extension as loaded all the same, so the line asks for a restart after the upgrade.
    """
    import sys  # noqa: PLC0415 - only %load_ext needs it

    from .compat import unsupported_stack  # noqa: PLC0415

    problem = unsupported_stack()
    if problem is None:
        # The magics and the channel load with %load_ext, not with `import kerasmagic`.
        try:
            from .extension import load  # noqa: PLC0415
        except ImportError as exc:  # an API an untested stack lacks: say so in one line
            problem = (f"kerasmagic could not load here ({exc}); it is tested on IPython >= 7.34 "
                       "and ipykernel >= 6.17: pip install -U kerasmagic, or report your versions")
    if problem is not None:
        print(problem, file=sys.stderr)
        return
    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext kerasmagic``: undo everything ``%load_ext`` did."""
    from .extension import unload  # noqa: PLC0415 - as in load_ipython_extension

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "kerasmagic"}]

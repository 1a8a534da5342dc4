"""Run code in a fresh process that gives every byte back: ``%%fresh_model --isolate``.

Only the end of a process returns TensorFlow's GPU memory and its CPU pool. This package
runs a cell (or a function, or a function over many items) in a child forked from a warm
template process that already imported the kernel's frameworks, ships its inputs in and its
results out, streams its output, and lets the process end. Importing it is cheap: no TensorFlow, no numpy.

How it is built (docs/design/isolation.md): the API (``api``, ``cell``, ``mapping``) prepares jobs and
hands them to ``dispatch``, the one place that decides where they run; one loop (``runner``)
drives them on a backend (``local``: this machine's pool; ``cluster.remote``: a Ray cluster),
their output goes to a sink (``sink``) and how they end is told by ``outcome``; below that,
starting processes (``spec``, ``pool``, ``template``, ``processes``, ``lifeline``, ``leftovers``)
and what travels (``job``, ``messages``, ``shipping``, ``result``).

Example:
    >>> from kerasmagic.isolation import run_isolated, configure_pool
    >>> configure_pool(size=1, idle_timeout=600)
    >>> result = run_isolated("import numpy as np; s = float(np.ones(4).sum())")   # doctest: +SKIP
    >>> result.outputs["s"]                                                         # doctest: +SKIP
    4.0
"""

from __future__ import annotations

from .api import run_isolated
from .errors import (
    IsolatedCellError,
    IsolatedCrash,
    IsolatedInterrupt,
    IsolatedOutOfMemory,
    IsolatedShippingError,
    IsolatedTimeout,
    IsolationUsageError,
    IsolationWarning,
)
from .mapping import IsolatedMapResult, isolated_map
from .pool import configure_pool, prestart_pool, shutdown_default_pool
from .result import IsolatedHistory, IsolatedResult

__all__ = [
    "run_isolated",
    "isolated_map",
    "IsolatedMapResult",
    "IsolatedShippingError",
    "IsolatedResult",
    "IsolatedHistory",
    "IsolationUsageError",
    "IsolatedTimeout",
    "IsolatedCrash",
    "IsolatedOutOfMemory",
    "IsolatedCellError",
    "IsolatedInterrupt",
    "IsolationWarning",
    "configure_pool",
    "prestart_pool",
    "shutdown_default_pool",
]

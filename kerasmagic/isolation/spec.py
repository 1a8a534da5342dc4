"""What a job's process must have imported and in which environment (:class:`WorkerSpec`), and
importing it (:func:`preload`): the kernel asks, the template and a fresh worker do.

A template's environment is the kernel's, less the variables that change by themselves
(:data:`VOLATILE_ENV`); the variables that no framework reads before its runtime starts
(:data:`LATE_ENV`) are set in the forked child, so a job that changes only those needs no
template of its own. The heavy modules a template imports are those the kernel has imported
among :data:`PRELOADABLE`, those ``preload=[...]`` asks for, and those earlier jobs imported
themselves (the pool learns them).

Example:
    >>> spec = worker_spec(gpu="1", preload=check_preload(["json"]))
    >>> spec.late_env()["CUDA_VISIBLE_DEVICES"], "json" in spec.modules()
    ('1', True)
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..compat import display_functions_module
from .errors import IsolationUsageError

__all__ = [
    "LATE_ENV", "PRELOADABLE", "VOLATILE_ENV", "WorkerSpec", "check_preload", "detect_preload", "env_overrides",
    "imported_since", "keras_backend", "modules_present", "preload", "worker_spec",
]

#: Environment variables that no framework reads at import time, only when its runtime or
#: device starts, i.e. in the child after the fork. A job that sets only these can be forked
#: from the kernel's own template instead of needing a template of its own.
LATE_ENV = frozenset({
    "CUDA_VISIBLE_DEVICES", "TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH",
    "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF",
})
#: Variables that change by themselves (pytest sets one per test) and mean nothing to TF: a
#: template started under another value of these is still the right template. A process of
#: ours still gets the kernel's values of them (:func:`~kerasmagic.isolation.processes.process_env`).
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST", "_", "OLDPWD", "PWD", "COLUMNS", "LINES"})
#: The heavy modules a template imports when the kernel has them (or a job imported them: the
#: pool learns), in the order it imports them; what a job imports of these is in its report.
PRELOADABLE = ("numpy", "pandas", "tensorflow", "tf_keras", "keras", "jax", "torch", "matplotlib.pyplot", "sklearn")
#: ``preload=[...]``: dotted module names.
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class WorkerSpec:
    """What a job's process must have: the kernel's frameworks and its whole environment.

    The variables in :data:`LATE_ENV` (``CUDA_VISIBLE_DEVICES``, allocator settings) are read
    only when a runtime starts, so the forked child sets them; every other variable is read at
    import time, and a job that changes one needs a template of its own.

    ``preload`` must import (the kernel's frameworks, ``preload=[...]``); ``learned`` are what
    earlier jobs imported themselves (:meth:`~kerasmagic.isolation.pool.WorkerPool.learn`),
    imported where they can be.

    Example:
        >>> spec = WorkerSpec(("numpy",), (("CUDA_VISIBLE_DEVICES", "1"), ("HOME", "/root")))
        >>> spec.template_env(), spec.late_env()
        ((('HOME', '/root'),), {'CUDA_VISIBLE_DEVICES': '1'})
    """

    preload: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    learned: tuple[str, ...] = ()

    def template_env(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in self.env if k not in LATE_ENV)

    def late_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env if k in LATE_ENV}

    def can_run(self, needed: WorkerSpec) -> bool:
        """Same import-time environment: a template that lacks a module lets the job import it."""
        return self.template_env() == needed.template_env()

    def covers(self, needed: WorkerSpec) -> bool:
        """Same import-time environment and every module the job needs (its kernel's, those asked
        for, those learned) is imported."""
        return self.can_run(needed) and set(self.modules()) >= set(needed.modules())

    def modules(self) -> tuple[str, ...]:
        """Everything a template for this spec imports: ``preload``, then ``learned``."""
        return (*self.preload, *(m for m in self.learned if m not in self.preload))


def keras_backend(keras: Any) -> str | None:
    """The backend an imported ``keras`` runs on (None for a half-imported or legacy Keras).

    Example:
        >>> keras_backend(None) is None
        True
    """
    try:
        return str(keras.config.backend())
    except Exception:  # noqa: BLE001 - a half-imported or legacy keras has no config.backend()
        return None


def _kernel_keras_backend() -> str | None:
    keras = sys.modules.get("keras")
    return keras_backend(keras) if keras is not None else None


def detect_preload() -> tuple[str, ...]:
    """The heavy modules this kernel has imported (the template imports the same ones).

    Example:
        >>> detect_preload()     # in a kernel that ran `import keras`           # doctest: +SKIP
        ('numpy', 'tensorflow', 'keras')
    """
    modules = [name for name in PRELOADABLE if name in sys.modules]
    backend = _kernel_keras_backend()
    if backend in ("jax", "torch", "tensorflow") and backend not in modules:
        modules.insert(modules.index("keras"), backend)  # keras imports its backend; do it first
    return tuple(modules)


def check_preload(preload: Any) -> tuple[str, ...]:
    """``preload=[...]``: module names a template must import before it forks (empty: None).

    Example:
        >>> check_preload(["keras", "sklearn.ensemble"])
        ('keras', 'sklearn.ensemble')
        >>> check_preload("keras")
        Traceback (most recent call last):
        ...
        kerasmagic.isolation.errors.IsolationUsageError: preload takes a list of module names, e.g.
        preload=['keras']; got 'keras'
    """
    if preload is None:
        return ()
    if isinstance(preload, str) or not isinstance(preload, (list, tuple)):
        raise IsolationUsageError(f"preload takes a list of module names, e.g. preload=['keras']; got {preload!r}")
    for name in preload:
        if not isinstance(name, str) or not _MODULE_NAME.match(name):
            raise IsolationUsageError(f"preload takes module names as `import` takes them (e.g. 'keras', "
                                      f"'sklearn.ensemble'); {name!r} is not a module name")
    return tuple(dict.fromkeys(preload))


def worker_spec(gpu: str | None = None, env: dict[str, str] | None = None,
                preload: tuple[str, ...] = ()) -> WorkerSpec:
    """The spec a job needs now: this kernel's environment, its frameworks (and ``preload``, already
    checked by :func:`check_preload`), plus overrides.

    Example:
        >>> worker_spec(gpu="1", env={"TF_GPU_ALLOCATOR": "cuda_malloc_async"}).late_env()["CUDA_VISIBLE_DEVICES"]
        '1'
    """
    environment = dict(os.environ)
    backend = _kernel_keras_backend()
    if backend:
        environment["KERAS_BACKEND"] = backend  # set_backend() in the kernel must hold in the worker
    environment.update(env or {})
    if gpu is not None:
        environment["CUDA_VISIBLE_DEVICES"] = str(gpu)
    stable = {k: v for k, v in environment.items() if k not in VOLATILE_ENV}
    return WorkerSpec(tuple(dict.fromkeys((*detect_preload(), *preload))), tuple(sorted(stable.items())))


def env_overrides(spec: WorkerSpec) -> dict[str, str]:
    """The variables in which ``spec``'s environment differs from this process's (``env=``,
    ``gpu=``), counting the kernel's Keras backend as the same.

    Example:
        >>> env_overrides(worker_spec(env={"MY_SETTING": "1"}))
        {'MY_SETTING': '1'}
    """
    backend = _kernel_keras_backend()
    return {key: value for key, value in spec.env if os.environ.get(key) != value
            and not (key == "KERAS_BACKEND" and value == backend)}


# --- importing what a spec asks (in a template, or a fresh worker) ------------------------


def preload(modules: list[str], learned: list[str] | tuple[str, ...] = ()) -> float:
    """Import the frameworks; their chatter goes to the log that fd 1 and 2 point at.

    ``modules`` (the kernel's, and what ``preload=`` asked for) must import; ``learned`` (what
    earlier jobs imported themselves) are imported if they can be: one that fails is left to
    the job, with a line in the log, and never fails the template.
    """
    started = time.perf_counter()
    # Loaded (and timed) with the frameworks, their chatter in the log: display() is patched per job.
    import IPython.core.formatters  # noqa: F401, PLC0415

    __import__(display_functions_module())

    for name in modules:
        __import__(name)
    for name in learned:
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 - a learned module is a hint, not a requirement
            print(f"kerasmagic: learned module {name} did not import here ({type(exc).__name__}: {exc}); "
                  "the jobs import what they need themselves", file=sys.stderr)
    _preload_worker_probes()
    return time.perf_counter() - started


def modules_present(asked: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The heavy modules (and those ``asked`` for) this process has imported: what a template
    had for its jobs, what a job found when it started.

    Example:
        >>> "numpy" in modules_present() or "numpy" not in sys.modules
        True
    """
    return [name for name in dict.fromkeys((*PRELOADABLE, *asked)) if name in sys.modules]


def imported_since(before: set[str] | frozenset[str]) -> list[str]:
    """The heavy modules imported since ``before`` (a copy of ``sys.modules``' keys) was taken.

    Example:
        >>> imported_since(set(sys.modules))
        []
    """
    return [name for name in PRELOADABLE if name in sys.modules and name not in before]


def _preload_worker_probes() -> None:
    """What a job's own sampling imports, imported once here instead of in every job.

    With TensorFlow, torch or JAX imported, each sample of a job reads NVML, and the first
    one imported ``pynvml`` (a large module of ctypes structures): 37 ms of CPU and 5k
    copy-on-write page faults inside every job's first fit, measured on 2 cores. Importing
    it loads no library and starts nothing (``nvmlInit`` stays the job's).
    """
    from ..probes.sample import gpu_framework_imported  # noqa: PLC0415 - after the frameworks, as a job asks

    if gpu_framework_imported():
        try:
            import pynvml  # noqa: F401
        except ImportError:
            pass  # the job's sample says NVML is not installed, as it would anyway

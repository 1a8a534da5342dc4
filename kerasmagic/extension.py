"""Loading and unloading the IPython extension; the two are exact mirrors."""

from __future__ import annotations

import atexit
import logging
import sys
import time

from . import guard, leak_watch, oom, postmortem, session_runs
from .live import channel
from .magics import KerasMagics

__all__ = ['load', 'unload']

logger = logging.getLogger(__name__)


def load(shell) -> None:
    """Register the magics and the sidebar channel on ``shell`` (what ``%load_ext kerasmagic`` does).

    Loading twice is a no-op, so re-running a notebook's first cell is safe.

    Example:
        >>> load(get_ipython())           # doctest: +SKIP
    """
    if getattr(shell, "_kerasmagic_magics", None) is not None:
        return  # %load_ext twice is a no-op, as IPython does for its own extensions
    magics = KerasMagics(shell)
    shell.register_magics(magics)
    shell._kerasmagic_magics = magics
    # The leak watch (per-cell growth) first: the channel's post_run_cell reads what it recorded.
    leak_watch.start(shell)
    # TensorFlow 1's Session.run timed per cell (wrapped only once TF is imported; put back on unload).
    session_runs.start(shell)
    # Out-of-memory errors explained below the error IPython shows (TensorFlow, torch, JAX).
    oom.start(shell)
    # The live channel (sidebar) registers itself only inside a kernel; a no-op elsewhere.
    channel.register(shell)
    if getattr(shell, "kernel", None) is not None:
        _start_guard(shell)


def _start_guard(shell) -> None:
    """The memory guard and the kernel's post-mortem record; first, the previous kernel's death, if any."""
    record = None
    identity = postmortem.notebook_identity(shell)
    if identity is not None:
        folder = postmortem.record_folder()
        try:
            deaths = postmortem.previous_deaths(folder, identity)
            if deaths:
                explanation = postmortem.explain(deaths[0])
                print(f"kerasmagic: {explanation}")
                _tell_the_sidebar(deaths[0], explanation)
            for death in deaths:  # said once: the next kernel must not say it again
                postmortem.forget(death["path"])
            postmortem.sweep(folder)
        except Exception:  # a record folder we cannot read must not stop %load_ext
            logger.debug("kerasmagic: reading the previous kernels' records failed", exc_info=True)
        record = postmortem.KernelRecord(folder, identity)
        record.watch()
        # A kernel that exits (shutdown, restart, exit()) ends cleanly: only a death leaves a record.
        atexit.register(record.close_clean)
    guard.start(shell, record)


def _tell_the_sidebar(death: dict, explanation: str) -> None:
    """The sidebar of this kernel says it too (protocol 1.5's ``postmortem``), beside the
    dead kernel's timeline where the page saw the death, alone where it was reloaded since."""
    live = channel.active_channel()
    if live is None:
        return
    cell = death.get("cell")
    number = cell.get("execution_count") if isinstance(cell, dict) else None
    # The time of death the sentence tells, so that the banner tells the same; only where the watcher
    # saw the death: a record's last write is a last sign of life, and the page's own time is closer.
    died, witnessed = postmortem.death_time(death)
    live.note_previous_death({
        "method": "postmortem", "ts": time.time(),
        "died_ts": died if witnessed else None,
        "execution_count": number if isinstance(number, int) else None,
        "text": explanation,
    })


def unload(shell) -> None:
    """Undo :func:`load`: magics, channel, sampler thread, isolation pool and NVML all go.

    Example:
        >>> unload(get_ipython())         # doctest: +SKIP
    """
    magics = getattr(shell, "_kerasmagic_magics", None)
    running_guard = guard.active_guard()
    guard.stop()
    if running_guard is not None and running_guard.record is not None:
        running_guard.record.close_clean()
        atexit.unregister(running_guard.record.close_clean)
    leak_watch.stop()
    session_runs.stop()
    oom.stop()
    live_channel = sys.modules.get("kerasmagic.live.channel")
    if live_channel is not None:
        live_channel.unregister(shell)
    isolation_pool = sys.modules.get("kerasmagic.isolation.pool")
    if isolation_pool is not None:
        isolation_pool.shutdown_default_pool()
    if magics is None:
        return
    for kind, names in magics.magics.items():
        for name in names:
            shell.magics_manager.magics[kind].pop(name, None)
    shell.magics_manager.registry.pop(type(magics).__name__, None)
    shell._kerasmagic_magics = None

"""Loading and unloading the IPython extension; the two are exact mirrors."""

from __future__ import annotations

import sys

from . import leak_watch
from .live import channel
from .magics import KerasMagics

__all__ = ['load', 'unload']


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
    # The live channel (sidebar) registers itself only inside a kernel; a no-op elsewhere.
    channel.register(shell)


def unload(shell) -> None:
    """Undo :func:`load`: magics, channel, sampler thread, isolation pool and NVML all go.

    Example:
        >>> unload(get_ipython())         # doctest: +SKIP
    """
    magics = getattr(shell, "_kerasmagic_magics", None)
    leak_watch.stop()
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

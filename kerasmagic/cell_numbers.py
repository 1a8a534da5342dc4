"""The ``In[n]`` number of the cell IPython is running, on every IPython we support.

IPython 9.8 moved the moment ``execution_count`` counts up: from the end of a cell (8.x up to
9.7) to its start, before ``pre_run_cell``. Reading ``execution_count - 1`` labelled every
report and timeline span one low on the older versions, and ``execution_count`` alone would
do so on the newer ones, so the one place that knows which is this module.

Importing it imports nothing of IPython's.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ['counts_up_at_start', 'running_cell_number']

#: The first IPython that counts ``execution_count`` up as a cell starts.
COUNTS_UP_AT_START_SINCE = (9, 8)


def counts_up_at_start(version_info: tuple[Any, ...] | None = None) -> bool:
    """Whether this IPython (or the one whose ``version_info`` is given) counts up as a cell starts.

    Example:
        >>> counts_up_at_start((8, 37, 0, "")), counts_up_at_start((9, 7, 0, "")), counts_up_at_start((9, 18, 1, ""))
        (False, False, True)
    """
    if version_info is None:
        ipython = sys.modules.get("IPython")
        version_info = getattr(ipython, "version_info", None)
        if version_info is None:  # no IPython, no cell: the newer behaviour is as good a guess as any
            return True
    numbers = tuple(part for part in version_info[:2] if isinstance(part, int))
    return numbers >= COUNTS_UP_AT_START_SINCE


def running_cell_number(shell: Any) -> int:
    """The number ``In[n]`` of the cell ``shell`` is running now (from its ``pre_run_cell`` on).

    Example:
        >>> from IPython import get_ipython
        >>> running_cell_number(get_ipython())       # doctest: +SKIP
        7
    """
    count = int(getattr(shell, "execution_count", 1) or 1)
    return max(count - 1, 1) if counts_up_at_start() else max(count, 1)

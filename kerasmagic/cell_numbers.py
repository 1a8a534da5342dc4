"""The ``In[n]`` number of the cell IPython is running, on every IPython we support.

IPython 9.8 moved the moment ``execution_count`` counts up: from the end of a cell (7.x up to
9.7) to its start, before ``pre_run_cell``. Reading ``execution_count - 1`` labelled every
report and timeline span one low on the older versions, and ``execution_count`` alone would
do so on the newer ones. Which IPython does which is a compatibility decision
(:func:`kerasmagic.compat.counts_up_at_start`); this module turns it into cell numbers.

Importing it imports nothing of IPython's.
"""

from __future__ import annotations

from typing import Any

from .compat import counts_up_at_start

__all__ = ['running_cell_number']


def running_cell_number(shell: Any) -> int:
    """The number ``In[n]`` of the cell ``shell`` is running now (from its ``pre_run_cell`` on).

    Example:
        >>> from IPython import get_ipython
        >>> running_cell_number(get_ipython())       # doctest: +SKIP
        7
    """
    count = int(getattr(shell, "execution_count", 1) or 1)
    return max(count - 1, 1) if counts_up_at_start() else max(count, 1)

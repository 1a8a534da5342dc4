"""kerasmagic's isolation template in the reports of the kernel that started it (issue 20).

After an isolated map the template stays up until its idle timeout, holding what it imported
(684 MiB in a seed notebook); ``%tf_mem`` and ``%clear_tf`` read only the kernel's own RSS and so
never said so. Checked through a real InteractiveShell against an independent reading of the
kernel's child processes (psutil).
"""

from __future__ import annotations

import sys

import psutil
import pytest

from kerasmagic import shutdown_default_pool

from shell_helpers import run

pytestmark = [pytest.mark.shell,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child processes are read from /proc")]


def _children_rss() -> tuple[int, int]:
    count = rss = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            rss += child.memory_info().rss
            count += 1
        except psutil.Error:
            continue
    return count, rss


def test_the_template_an_isolated_job_left_is_in_tf_mem_and_clear_tf_until_it_is_shut_down(shell):
    try:
        run(shell, "from kerasmagic import run_isolated\nanswer = run_isolated(sum, args=([1, 2],), quiet=True).value")
        assert shell.user_ns["answer"] == 3
        snapshot = run(shell, "%tf_mem -q -o")
        count, rss = _children_rss()
        assert count >= 1, "precondition: the template outlives its job"
        children = snapshot.to_dict()["children"]
        assert children["count"] >= 1 and children["isolation_count"] >= 1, children
        # Read a moment apart from psutil's reading (a job process may end in between): the same
        # memory, within what a few pages move.
        assert abs(children["rss_bytes"] - rss) < 8 * 2**20, (children, rss)
        text = str(snapshot)
        assert "child processes" in text and "isolation template holds" in text, text
        assert "shutdown_default_pool()" in text
        clean = run(shell, "%clear_tf -q -o")
        assert any("isolation template holds" in line for line in clean.still_held), clean.still_held
    finally:
        shutdown_default_pool()
    assert _children_rss()[0] == 0
    text = str(run(shell, "%tf_mem -q -o"))
    assert "child processes" not in text and "isolation template" not in text, text
    assert not any("isolation template" in line for line in run(shell, "%clear_tf -q -o").still_held)

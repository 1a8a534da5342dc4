"""What a ``%%fresh_model`` cell frees is handed back to the OS when the cell ends (issue 20).

A Keras ``fit`` frees most of what it allocated, but glibc keeps freed heap resident until
something calls ``malloc_trim``; the clean trims before the cell, so without a trim after it that
heap stayed in RSS until the next clean: growth per cell that no model explains. Checked through a
real InteractiveShell against an independent reading: a ``malloc_trim(0)`` of our own right after
the cell finds almost nothing left to hand back, and glibc's own count of free heap (``mallinfo2``).
"""

from __future__ import annotations

import ctypes
import sys

import pytest

from kerasmagic.fresh import TRIM_NOTE_MIN_BYTES
from kerasmagic.probes.process import rss_bytes

from shell_helpers import run

pytestmark = [pytest.mark.shell, pytest.mark.frameworks,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's (Linux)")]

#: A fit big enough that its freed working memory is well above RSS noise (a few MiB).
FIT_CELL = (
    "%%fresh_model model -q -o\n"
    "model = make_model(512)\n"
    "model.fit(np.repeat(x, 16, axis=0), np.repeat(y, 16, axis=0), epochs=2, batch_size=32, verbose=0)\n"
    "ran = True"
)


def _heap_left_to_trim() -> int:
    """RSS that a malloc_trim(0) of our own hands back now."""
    libc = ctypes.CDLL("libc.so.6")
    before = rss_bytes()
    libc.malloc_trim(0)
    return max(before - rss_bytes(), 0)


def test_the_heap_a_fit_cell_freed_is_handed_back_when_the_cell_ends(keras_shell):
    shell = keras_shell
    run(shell, FIT_CELL)  # the first fit of the process sets up what later ones reuse
    reports, left = [], []
    for _ in range(3):
        _heap_left_to_trim()  # start each run from a trimmed heap, as the clean leaves it
        reports.append(run(shell, FIT_CELL))
        left.append(_heap_left_to_trim())
    # Without the trim after the cell a fit left 1-6 MiB here each time; with it, only what the
    # report's own reading and the shell allocated after it.
    assert max(left) < 512 * 1024, left
    trimmed = [report.heap_trimmed_bytes for report in reports]
    assert all(isinstance(b, int) for b in trimmed), trimmed
    assert max(trimmed) >= TRIM_NOTE_MIN_BYTES, trimmed
    shown = next(report for report in reports if report.heap_trimmed_bytes >= TRIM_NOTE_MIN_BYTES)
    assert "heap returned" in str(shown) and "malloc_trim" in str(shown), str(shown)
    assert shown.to_dict()["heap_trimmed_bytes"] == shown.heap_trimmed_bytes


def test_a_cell_that_frees_little_says_nothing_about_the_heap(keras_shell):
    shell = keras_shell
    report = run(shell, "%%fresh_model -q -o\nvalue = sum(range(10))")
    assert report.heap_trimmed_bytes is not None and report.heap_trimmed_bytes < TRIM_NOTE_MIN_BYTES
    assert "heap returned" not in str(report)

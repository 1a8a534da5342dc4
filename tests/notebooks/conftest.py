"""Collects each notebook's execution time and prints them at the end of the run."""

from __future__ import annotations

import pytest

NOTEBOOK_DURATIONS: dict[str, tuple[float, str]] = {}


@pytest.fixture
def notebook_durations() -> dict[str, tuple[float, str]]:
    return NOTEBOOK_DURATIONS


def pytest_terminal_summary(terminalreporter) -> None:
    if not NOTEBOOK_DURATIONS:
        return
    terminalreporter.section("notebook durations")
    total = 0.0
    for name, (seconds, outcome) in sorted(NOTEBOOK_DURATIONS.items()):
        total += seconds
        terminalreporter.write_line(f"{seconds:6.1f} s  {outcome:6s}  {name}")
    terminalreporter.write_line(f"{total:6.1f} s  total")

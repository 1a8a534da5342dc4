"""Fail unless every pin of a stack's pins file is what is installed: run by `./dev.sh test`
with the pinned venv's Python after a plain `pip install` of the built wheel, so a dependency
floor that would move one of Colab's pins (and break its kernel) fails CI.

Usage: .venv-colab/bin/python tests/stacks/check_pins.py tests/stacks/colab-pins.txt
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def moved_pins(pins_file: Path) -> list[str]:
    """Each pin whose installed version differs, as 'name: pinned X, installed Y'.

    Example:
        >>> moved_pins(Path("tests/stacks/colab-pins.txt"))   # in the pinned venv  # doctest: +SKIP
        []
    """
    moved = []
    for line in pins_file.read_text().splitlines():
        name, _, pinned = line.partition("==")
        if line.startswith("#") or not pinned:
            continue
        try:
            installed = version(name.strip())
        except PackageNotFoundError:
            installed = "nothing"
        if installed != pinned.strip():
            moved.append(f"{name.strip()}: pinned {pinned.strip()}, installed {installed}")
    return moved


if __name__ == "__main__":
    problems = moved_pins(Path(sys.argv[1]))
    for problem in problems:
        print(f"pin moved: {problem}", file=sys.stderr)
    print(f"{len(problems)} of the pins in {sys.argv[1]} moved")
    sys.exit(1 if problems else 0)

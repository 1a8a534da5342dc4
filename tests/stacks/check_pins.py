"""Fail unless a plain `pip install` of the wheel left a stack as its users have it: run by
`./dev.sh test` with the pinned venv's Python right after that install.

- Every pin of the pins file is still the installed version: a dependency floor that moved one
  of Colab's pins (IPython above all) would break Colab's kernel.
- With ``--before FREEZE`` (``pip freeze --all`` taken just before the install): nothing was
  upgraded or downgraded, and nothing was added but kerasmagic and what it alone needs.

Usage: .venv-colab/bin/python tests/stacks/check_pins.py tests/stacks/colab-pins.txt [--before FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

#: What installing kerasmagic may add to Colab's stack: itself, and NVML's bindings (Colab has
#: no nvidia-ml-py; everything else kerasmagic needs is there already).
MAY_ADD = {"kerasmagic", "nvidia-ml-py"}


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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


def changes_since(freeze: str) -> list[str]:
    """What differs from a ``pip freeze --all`` text, beyond :data:`MAY_ADD` being added.

    Example:
        >>> changes_since("pip==24.0\\n")   # doctest: +SKIP
        []
    """
    before = {}
    for line in freeze.splitlines():
        name, sep, pinned = line.partition("==")
        if sep:
            before[_key(name)] = pinned.strip()
    now = {_key(d.metadata["Name"]): d.version for d in distributions()}
    changes = [f"{name}: {before[name]} -> {now.get(name, 'removed')}"
               for name in sorted(before) if now.get(name) != before[name]]
    changes += [f"{name}: added {now[name]}" for name in sorted(set(now) - set(before) - MAY_ADD)]
    return changes


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("pins", type=Path)
    parser.add_argument("--before", type=Path)
    args = parser.parse_args()
    problems = [f"pin moved: {p}" for p in moved_pins(args.pins)]
    if args.before is not None:
        problems += [f"changed by the install: {c}" for c in changes_since(args.before.read_text())]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{args.pins}: {len(problems)} pin(s) moved or package(s) changed by installing kerasmagic")
    sys.exit(1 if problems else 0)

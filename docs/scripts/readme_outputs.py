"""The README's tour outputs, produced by the current code in a real ``InteractiveShell``.

The README shows one output per command of its five-minute tour. They are never typed by hand:
this script runs the tour's cells (a small Keras model on random data, CPU) and prints, writes
or checks each output; ``tests/docs/test_readme.py`` fails when the README's copy no longer
matches what the code prints now, numbers masked (they vary from run to run and machine to
machine).

Run it from the repository root with the package's test extras installed::

    python docs/scripts/readme_outputs.py            # print the outputs
    python docs/scripts/readme_outputs.py --write    # put them into README.md
    python docs/scripts/readme_outputs.py --json     # {name: output}, what the test reads

In README.md each output is the code block after a ``<!-- readme-output: NAME -->`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

import kerasmagic

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

SETUP = """\
import numpy as np, keras
x = np.random.default_rng(0).random((2048, 256), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 2048)

def make_model():
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

histories = []
"""
#: The cell a user re-runs, keeping every fit's History (and with it every model).
LEAKY_CELL = "model = make_model()\nhistories.append(model.fit(x, y, epochs=1, verbose=0))"
FIT = "model = make_model()\nhistory = model.fit(x, y, epochs=2, batch_size=256, verbose=0)"

#: (name, the cell run, what the README keeps of its report: (section title, a regex its lines
#: must match, or None for all of them); the report's first line always stays, "…" marks a cut).
#: The README has room for about 1 KiB per output: the docs' guide has the full reports.
TOUR = [
    ("cells", "%tf_mem --cells",
     [("Cells that grew on each of their last 3+ re-runs (flagged from the 4th run on)", None)]),
    ("who", "%tf_mem --who",
     [("Process", r"^  RSS"), ("TensorFlow", r"CPU:0 in use"),
      ("Models, arrays, tables and graphs, largest first", r"ndarray|'sequential_4'|'sequential'")]),
    ("clear", "%clear_tf histories model",
     [("Steps", r"purge|malloc"), ("Result", None), ("Still held", None)]),
    ("fresh", "%%fresh_model --seed 0\n" + FIT,
     [("Process", None), ("TensorFlow allocator", None)]),
    ("isolate", "%%fresh_model --isolate\n" + FIT,
     [("Time", r"waiting|running"), ("Worker process (gone now: all of it was given back)", None),
      ("Kernel", r"RSS change")]),
]
LEAKY_RUNS = 5
MARKER = "<!-- readme-output: {} -->"


def repository_url() -> str:
    """The repository's address, as pyproject.toml's ``[project.urls]`` declares it (read as text:
    ``tomllib`` is not in Python 3.10).

    Example:
        >>> repository_url().startswith("https://github.com/")
        True
    """
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^Repository = "([^"]+)"', pyproject, flags=re.M).group(1)


def run_tour() -> dict[str, str]:
    """Run the tour in a fresh ``InteractiveShell``; each output with its input as ``In:`` lines.

    Run it in a process of its own (``main``): it sets TensorFlow's environment and imports it.
    """
    # TensorFlow keeps CPU allocator statistics on every CPU only with this (set before it
    # starts): the outputs then have the same rows on a CPU with oneDNN and one without.
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    shell.colors = "nocolor"

    def run(cell: str) -> str:
        with capture_output() as captured:
            result = shell.run_cell(cell, store_history=True)
        if not result.success:
            raise RuntimeError(f"the tour's cell failed: {result.error_in_exec or result.error_before_exec!r}\n{cell}")
        shown = [output.data.get("text/plain", "") for output in captured.outputs]
        return (captured.stdout + "\n".join(shown)).rstrip()

    run("%load_ext kerasmagic")
    run(SETUP)
    for _ in range(LEAKY_RUNS):
        run(LEAKY_CELL)
    outputs = {}
    try:
        for name, cell, keep in TOUR:
            if "--isolate" in cell:
                run(cell)  # the first isolated job starts the template (the frameworks' import)
            lines = cell.splitlines()
            prompt = "\n".join(["In: " + lines[0], *("    " + line for line in lines[1:])])
            outputs[name] = prompt + "\n" + excerpt(run(cell), keep)
    finally:
        kerasmagic.shutdown_default_pool()
        run("%unload_ext kerasmagic")
    return outputs


def excerpt(report: str, keep: list[tuple[str, str | None]]) -> str:
    """The report's first line and the kept sections' lines, "…" where lines were left out.

    Example:
        >>> print(excerpt("kerasmagic: a\\nA\\n  a1\\n  a2\\nB\\n  b1", [("A", "a2")]))
        kerasmagic: a
        A
        …
          a2
        …
    """
    lines = report.splitlines()
    kept, section, cut = [lines[0]], None, False
    wanted = dict(keep)
    for line in lines[1:]:
        if not line.startswith(" "):
            section = line
            show = section in wanted
        else:
            pattern = wanted.get(section or "", "")
            show = section in wanted and (pattern is None or re.search(pattern, line) is not None)
        if show:
            if cut and kept[-1] != "…":
                kept.append("…")
            kept.append(line)
            cut = False
        else:
            cut = True
    if cut:
        kept.append("…")
    return "\n".join(kept)


def mask(text: str) -> str:
    """The output with what varies between runs made equal: figures with their signs and units,
    and the spaces that align them. The words, the rows and their order must stay.

    Example:
        >>> mask("RSS change   +9.46 MiB  647 MiB → 656 MiB") == mask("RSS change ±0 B  1006 MiB → 1.01 GiB")
        True
        >>> mask("models freed  1 of 2") == mask("models freed  2 of 2 (one left)")
        False
    """
    text = re.sub(r"[+±−-]?\d+(?:[.,]\d+)*(?:\s?(?:[KMGT]i?B|B|ms|s|%)(?![\w]))?", "#", text)
    return "\n".join(re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip())


def readme_blocks(readme: str) -> dict[str, str]:
    """``{name: the text of the code block after its marker}`` in README.md."""
    pattern = re.compile(r"<!-- readme-output: (\w+) -->\n```[a-z]*\n(.*?)\n```", re.S)
    return {match.group(1): match.group(2) for match in pattern.finditer(readme)}


def write_readme(outputs: dict[str, str]) -> None:
    readme = README.read_text(encoding="utf-8")
    for name, text in outputs.items():
        pattern = re.compile(r"(" + re.escape(MARKER.format(name)) + r"\n```[a-z]*\n)(.*?)(\n```)", re.S)
        readme, count = pattern.subn(lambda m, text=text: m.group(1) + text + m.group(3), readme)
        if count != 1:
            sys.exit(f"README.md has {count} blocks marked {MARKER.format(name)} (want 1)")
    README.write_text(readme, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="put the outputs into README.md")
    mode.add_argument("--json", action="store_true", help="print {name: output} as JSON")
    args = parser.parse_args()
    outputs = run_tour()
    if args.write:
        write_readme(outputs)
    elif args.json:
        print(json.dumps(outputs))
    else:
        for name, text in outputs.items():
            print(f"{MARKER.format(name)}\n{text}\n")


if __name__ == "__main__":
    main()

"""The README's tour outputs, produced by the current code in a real ``InteractiveShell``.

The README shows one output per command of its five-minute tour, and what its memory section
says happens when memory runs out. They are never typed by hand: this script runs the tour's
cells (a small Keras model on random data, CPU) and prints, writes or checks each output;
``tests/docs/test_readme_outputs.py`` fails when the README's copy no longer matches what the
code prints now, numbers masked (they vary from run to run and machine to machine).

The memory section's outputs are real too: the guard stops a growing cell in the tour's shell
(under a limit set just above its use), and two processes that keep a kernel's post-mortem
record, with its watcher, die in a 256 MiB memory cgroup made for them, one by the real
out-of-memory killer and one by SIGKILL between cells, and are told as the notebook's next
kernel tells them. The cgroup needs root and cgroup v1's memory controller; elsewhere those two
outputs are not made, and the script says why.

Run it from the repository root with the package's test extras installed::

    python docs/scripts/readme_outputs.py            # print the outputs
    python docs/scripts/readme_outputs.py --write    # put them into README.md
    python docs/scripts/readme_outputs.py --json     # {name: output}, what the test reads

In README.md each output is the code block after a ``<!-- readme-output: NAME -->`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

import kerasmagic
from kerasmagic import death_watch, guard, postmortem
from kerasmagic.probes import Unavailable
from kerasmagic.probes.cgroup import memory_cgroup

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
     [("Process", r"^  RSS"),
      ("Models, arrays, tables and graphs, largest first", r"ndarray|'sequential_4'|'sequential'")]),
    ("clear", "%clear_tf histories model",
     [("Steps", r"malloc"), ("Result", None), ("Still held", None)]),
    ("fresh", "%%fresh_model --seed 0\n" + FIT,
     [("Process", None)]),
    ("isolate", "%%fresh_model --isolate\n" + FIT,
     [("Worker process (gone now: all of it was given back)", r"RSS peak|PSS"), ("Kernel", r"RSS change")]),
]
LEAKY_RUNS = 5
MARKER = "<!-- readme-output: {} -->"
#: The memory section's cell: it grows until the guard stops it (the limit is set 300 MiB above use).
GROW = "for step in range(100):\n    chunks.append(bytearray(16 << 20)); time.sleep(0.05)"
#: The memory section's outputs, besides the tour's.
MEMORY = ["stop", "postmortem"]
#: A process that keeps a kernel's post-mortem record as a kernel with kerasmagic loaded does
#: (the record, its watcher, the guard's samples), then grows until killed (``grow``) or sleeps
#: between cells until it is killed with SIGKILL (``wait``). argv: folder, cgroup folder, mode.
DYING = """\
import sys, time
folder, cgroup, mode = sys.argv[1:4]
with open(cgroup + "/cgroup.procs", "w") as procs:
    procs.write("0")  # into the cgroup before anything is allocated or started (the watcher too)
from kerasmagic import postmortem
from kerasmagic.limits import memory_limit
record = postmortem.KernelRecord(folder, "readme.ipynb")
record.watch()
def sample():
    limit = memory_limit()
    record.sample(time.time(), limit.used_bytes, limit.to_dict(), near=True)
if mode == "grow":
    record.cell_started(7, "chunks.append(bytearray(16 << 20))")
    chunks = []
    while True:
        chunks.append(bytearray(16 << 20))
        sample()
        time.sleep(0.02)
record.cell_started(8, "x = 1")
record.cell_ended()
sample()
print("between cells", flush=True)
time.sleep(60)
"""


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
            outputs[name] = _prompt(cell) + "\n" + excerpt(run(cell), keep)
        outputs["stop"] = _stopped(shell, run)
    finally:
        kerasmagic.shutdown_default_pool()
        run("%unload_ext kerasmagic")
    return outputs


def _prompt(cell: str) -> str:
    lines = cell.splitlines()
    return "\n".join(["In: " + lines[0], *("    " + line for line in lines[1:])])


def _stopped(shell: InteractiveShell, run) -> str:
    """The guard's stop of GROW, under a limit 300 MiB above the shell's use (its warning, printed
    before, is left out). The guard starts with a kernel (``%load_ext`` in a notebook); a plain
    shell has none, so it is started here."""
    # The limit as KERASMAGIC_MEMORY_LIMIT: the stop's words for it are the shortest.
    run("import os, time, kerasmagic\nfrom kerasmagic.probes.process import rss_bytes\n"
        "os.environ['KERASMAGIC_MEMORY_LIMIT'] = f'{rss_bytes() // 2**20 + 300}MiB'\nchunks = []")
    guard.start(shell)
    try:
        with capture_output():
            result = shell.run_cell(GROW, store_history=True)
        error = result.error_in_exec
        if error is None:
            raise RuntimeError("the guard did not stop the growing cell")
        return f"{_prompt(GROW)}\n{type(error).__name__}: {error}"
    finally:
        guard.stop()
        run("del chunks, os.environ['KERASMAGIC_MEMORY_LIMIT']")


def run_deaths() -> str:
    """Two deaths in a memory cgroup of their own, as the notebook's next kernel tells them.

    Raises:
        RuntimeError: no memory cgroup can be made here (not root, no cgroup v1 memory controller).
    """
    told = []
    with _memory_cgroup(256 * 2**20) as cgroup, tempfile.TemporaryDirectory() as folder:
        for mode in ("grow", "wait"):
            child = subprocess.Popen([sys.executable, "-c", DYING, folder, cgroup, mode], stdout=subprocess.PIPE,
                                     text=True)
            try:
                if mode == "wait":
                    if child.stdout is None or child.stdout.readline().strip() != "between cells":
                        raise RuntimeError("the process that waits between cells did not start")
                    time.sleep(1.5)  # its last reading, a second and more before the kill
                    os.kill(child.pid, signal.SIGKILL)
                deadline = time.monotonic() + 60
                # Not reaped before the watcher has read its exit status (a zombie's /proc/<pid>/stat).
                while not any(name.endswith(".death") for name in os.listdir(folder)):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the {mode} process's watcher wrote nothing within 60 s")
                    time.sleep(0.05)
                deaths = postmortem.previous_deaths(folder, "readme.ipynb")
                told.append("kerasmagic: " + postmortem.explain(deaths[0]))
                for death in deaths:
                    postmortem.forget(death["path"])
                    with contextlib.suppress(OSError):
                        os.unlink(death_watch.death_path(death["path"]))
            finally:
                child.kill()
                child.wait()
    return "\n".join(told)


@contextlib.contextmanager
def _memory_cgroup(limit_bytes: int):
    """A cgroup v1 memory child of this process's own, with ``limit_bytes``; removed after."""
    memory = memory_cgroup()
    if os.geteuid() != 0 or isinstance(memory, Unavailable) or memory.version != 1:
        raise RuntimeError("the post-mortem's outputs need root and a cgroup v1 memory controller (CI has both)")
    parent = os.path.dirname(memory.oom_kill_file)
    folder = os.path.join(parent, f"kerasmagic-readme-{uuid.uuid4().hex[:8]}")
    os.mkdir(folder)
    try:
        Path(folder, "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield folder
    finally:
        deadline = time.monotonic() + 30
        while True:
            try:
                os.rmdir(folder)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                for pid in Path(folder, "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        Path(parent, "cgroup.procs").write_text(pid)
                time.sleep(0.2)


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
    try:
        outputs["postmortem"] = run_deaths()
    except RuntimeError as exc:
        if args.write:
            sys.exit(f"cannot write the README's post-mortem: {exc}")
        outputs["postmortem_not_made"] = str(exc)
    if args.write:
        write_readme(outputs)
    elif args.json:
        print(json.dumps(outputs))
    else:
        for name, text in outputs.items():
            print(f"{MARKER.format(name)}\n{text}\n")


if __name__ == "__main__":
    main()

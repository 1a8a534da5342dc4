"""The sidebar's GPU rows in a real JupyterLab and headless Chromium, from readings recorded on
an H100 (benchmarks/results/h100-2026-11-22/allocator_readings.json).

This machine has no GPU: a cell installs tests/gpu_stand_ins.py in the kernel (NVML, torch and
JAX answering what the real ones answered there). Everything past that edge is real: the
sampler thread reads them through the probes, the kernel sends protocol 1.4 samples, and the
panel renders them.
"""

import json
from pathlib import Path

import pytest

from .conftest import notebook, wait_kernel_ready
from .test_timeline import SIDEBAR, _chart, _layout_defects, _run_and_wait, _set_sidebar_width

pytestmark = pytest.mark.ui

TESTS = Path(__file__).parents[1]
GPU_LINES = f"{SIDEBAR} [data-section='gpu'] .jp-KerasMagic-gpuLine"
_INSTALL = (
    "import os, sys\n"
    f"sys.path.insert(0, {str(TESTS)!r})\n"
    "import pytest, gpu_stand_ins\n"
    "for name in ('XLA_PYTHON_CLIENT_PREALLOCATE', 'XLA_PYTHON_CLIENT_MEM_FRACTION', 'XLA_CLIENT_MEM_FRACTION',\n"
    "             'XLA_PYTHON_CLIENT_ALLOCATOR'):\n"
    "    os.environ.pop(name, None)\n"
)
CELLS = [
    "%load_ext kerasmagic",
    _INSTALL + "stand_ins = pytest.MonkeyPatch()\n"
    "gpu_stand_ins.use_recorded(stand_ins, 'torch', '1 GiB more allocated and freed (cached)')",
    # The JAX run of the recording in place of the torch one; NVML's device name carries markup,
    # which the panel must show as text.
    "stand_ins.undo()\nstand_ins = pytest.MonkeyPatch()\n"
    "gpu_stand_ins.use_recorded(stand_ins, 'jax default preallocation', '512 MiB array')\n"
    "from kerasmagic.probes import nvml\n"
    "stand_ins.setattr(nvml._pynvml(), 'name', '<img src=x onerror=\"window.__injected = 1\">H100')",
    # JAX without preallocation after its array was deleted: a pool that grew and stays
    # (constructed from the recorded run, tests/gpu_stand_ins.py says how).
    "stand_ins.undo()\nstand_ins = pytest.MonkeyPatch()\n"
    "stand_ins.setenv('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')\n"
    "gpu_stand_ins.use_recorded(stand_ins, 'jax preallocate=false', '512 MiB array deleted (constructed)')",
]


def _gpu_lines(page) -> list[dict]:
    return page.evaluate(f"""() => [...document.querySelectorAll("{GPU_LINES}")]
        .map(n => ({{line: n.dataset.line, whose: n.dataset.whose, text: n.textContent, hint: n.title,
                    elements: [...n.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
                    code: [...n.querySelectorAll('code')].map(c => c.textContent)}}))""")


def _gpu_tile(page) -> dict:
    return page.evaluate(f"""() => {{
        const tile = document.querySelector("{SIDEBAR} [data-headline='gpu']");
        return {{hidden: tile.hidden, value: tile.querySelector('.jp-KerasMagic-headlineValue').textContent,
                 sub: tile.querySelector('.jp-KerasMagic-headlineSub').textContent}};
    }}""")


def _wait_for_line(page, whose: str, text: str) -> None:
    page.wait_for_function(
        f"""([whose, text]) => [...document.querySelectorAll("{GPU_LINES}")]
            .some(n => n.dataset.whose === whose && n.textContent === text)""",
        arg=[whose, text], timeout=90_000,
    )


def _shoot(page, artifacts: Path, name: str) -> None:
    """The panel at 250 px and wide, the GPU section scrolled into view; nothing may stick out."""
    sidebar = page.locator(SIDEBAR)
    for width in (250, 640):
        reached = _set_sidebar_width(page, width)
        assert abs(reached - width) <= 8, reached
        page.locator(f"{SIDEBAR} [data-section='gpu']").scroll_into_view_if_needed()
        assert _layout_defects(page) == []
        sidebar.screenshot(path=str(artifacts / f"gpu-rows-{name}-{width}px.png"))


def test_gpu_rows_from_the_recorded_h100_readings(lab, page, artifacts):
    (lab.root / "gpu.ipynb").write_text(json.dumps(notebook(CELLS)))
    page.goto(lab.lab_url("gpu.ipynb"))
    page.wait_for_function("() => !!window.jupyterapp")
    wait_kernel_ready(page)
    page.evaluate("() => window.jupyterapp.shell.activateById('kerasmagic-sidebar')")
    _run_and_wait(page, 0)
    page.wait_for_selector(f"{SIDEBAR}[data-state='connected'][data-sample-seq]", timeout=90_000)
    # No GPU here, and no framework: one quiet line.
    page.wait_for_selector(f"{SIDEBAR} [data-section='gpu'][data-quiet='true']")
    assert _gpu_tile(page)["hidden"] is True

    # 1. torch: 2 GiB allocated, 1 GiB more allocated and freed into its cache.
    _run_and_wait(page, 1)
    _wait_for_line(page, "torch", "torch cuda:0: 2.00 GiB allocated, 3.00 GiB reserved (1.00 GiB held, unused)")
    lines = _gpu_lines(page)
    assert [(line["line"], line["whose"]) for line in lines] == [
        ("device", "nvml"), ("allocator", "torch"), ("remedy", "torch"), ("context", "context")], lines
    assert lines[0]["text"] == "GPU 0 NVIDIA H100 80GB HBM3: 3.98 GiB of 79.6 GiB used, this kernel 3.51 GiB (NVML)"
    assert lines[2]["text"] == ("torch keeps 1.00 GiB of freed blocks cached on cuda:0: Clear session empties "
                                "torch's cache (torch.cuda.empty_cache()), no restart needed.")
    # NVML this kernel − torch reserved = what NVML read after empty_cache() on the H100 (518 MiB).
    assert lines[3]["text"] == "CUDA context and libraries ≈ 518 MiB", lines[3]
    assert lines[3]["hint"] == "NVML this kernel − torch reserved"
    assert "peak allocated 3.00 GiB" in lines[1]["hint"]
    assert lines[2]["code"] == ["torch.cuda.empty_cache()"]
    assert _gpu_tile(page) == {"hidden": False, "value": "3.51 GiB", "sub": "torch 2.00 GiB"}
    page.wait_for_function(
        f"() => document.querySelector('{SIDEBAR}').dataset.gpuAllocInUseBytes === String(2 * 2 ** 30)")
    page.wait_for_function(f"""() => Number(document.querySelector(
        "{SIDEBAR} path.jp-KerasMagic-series[data-series='gpu_allocators_in_use']")?.dataset.points) >= 2""")
    chart = _chart(page)
    assert any(item.startswith("GPU in use (torch)") for item in chart["legend"]), chart["legend"]
    _shoot(page, artifacts, "1-torch")

    # 2. JAX with its default preallocation: a 512 MiB array in a 59.4 GiB pool.
    _run_and_wait(page, 2)
    _wait_for_line(page, "jax", "JAX gpu:0: 512 MiB in use of a 59.4 GiB pool")
    lines = _gpu_lines(page)
    assert [(line["line"], line["whose"]) for line in lines] == [
        ("device", "nvml"), ("allocator", "jax"), ("unused", "jax"), ("remedy", "jax"),
        ("context", "context")], lines
    assert lines[2]["text"] == (
        "JAX gpu:0 held, unused: 58.9 GiB (preallocated when JAX started: the pool is its whole limit)")
    assert lines[3]["text"] == (
        "XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used (XLA_PYTHON_CLIENT_MEM_FRACTION=.25 still "
        "preallocates, a quarter of the GPU instead of 75 %), but only if set before JAX starts: restart the kernel "
        "with it set, or run the work with %%fresh_model --isolate.")
    assert lines[3]["code"] == ["XLA_PYTHON_CLIENT_PREALLOCATE=false", "XLA_PYTHON_CLIENT_MEM_FRACTION=.25",
                                "%%fresh_model --isolate"]
    assert lines[4]["text"] == "CUDA context and libraries ≈ 550 MiB"
    # Kernel strings are text: the device name's markup is shown, never parsed. Only our own
    # remedies have elements: the code font, and where a long variable name may break.
    assert lines[0]["text"].startswith('GPU 0 <img src=x onerror="window.__injected = 1">H100: '), lines[0]
    assert all(line["elements"] == [] for line in lines if line["line"] != "remedy"), lines
    assert set(lines[3]["elements"]) == {"code", "wbr"}, lines[3]
    assert page.evaluate("() => window.__injected === undefined")
    assert _gpu_tile(page) == {"hidden": False, "value": "59.9 GiB", "sub": "JAX 512 MiB"}
    page.wait_for_function(f"""() => [...document.querySelectorAll('{SIDEBAR} .jp-KerasMagic-legendItem')]
        .some(item => item.textContent.startsWith('GPU in use (JAX)'))""")
    page.wait_for_function(
        f"() => document.querySelector('{SIDEBAR}').dataset.gpuAllocInUseBytes === String(512 * 2 ** 20)")
    _shoot(page, artifacts, "2-jax")

    # 3. JAX without preallocation, its array deleted: the pool's high-water mark, and not the
    # variable this kernel already has as the remedy.
    _run_and_wait(page, 3)
    _wait_for_line(page, "jax", "JAX gpu:0: 0 B in use of a 514 MiB pool")
    lines = _gpu_lines(page)
    assert [(line["line"], line["whose"]) for line in lines] == [
        ("device", "nvml"), ("allocator", "jax"), ("unused", "jax"), ("remedy", "jax"),
        ("context", "context")], lines
    assert lines[2]["text"] == (
        "JAX gpu:0 held, unused: 514 MiB (the pool's high-water mark: it grew on demand and never shrinks)")
    assert lines[3]["text"] == (
        "XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory when arrays are deleted (allocations get slower), but "
        "only in a new process: restart the kernel with it set, or run the work with %%fresh_model --isolate.")
    assert lines[3]["code"] == ["XLA_PYTHON_CLIENT_ALLOCATOR=platform", "%%fresh_model --isolate"]
    assert _gpu_tile(page)["sub"] == "JAX 0 B"
    _shoot(page, artifacts, "3-jax-grown")

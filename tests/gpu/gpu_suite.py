"""Helpers of the `gpu` suite: kerasmagic on a real NVIDIA GPU, Keras 3 on torch and on JAX.

A plain module beside the tests (conftest modules are not importable by name), as
tests/shell_helpers.py is.

Whether a GPU, torch with CUDA and JAX with CUDA exist is asked once, in a child process:
``torch.cuda.is_available()`` can initialise the CUDA driver, and nothing in the test process
may do that (a process whose driver started cannot fork isolation templates, and the sessions
must start from a clean process as a notebook kernel does). Each session runs in its own child
interpreter too: Keras picks its backend once per process.

``KERASMAGIC_GPU_RECORD_DIR``: where set (benchmarks/gpu_device_run.sh sets it), each session's
readings are also written there as ``gpu_session_<name>.json``, to be kept as fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]

PROBE = r'''
import importlib.metadata as metadata, json, os
facts = {}
try:
    import pynvml
    pynvml.nvmlInit()
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
    facts["nvml"] = {"gpus": [n.decode() if isinstance(n, bytes) else n for n in names],
                     "driver": str(pynvml.nvmlSystemGetDriverVersion())}
except Exception as exc:
    facts["nvml"] = {"gpus": [], "why": f"{type(exc).__name__}: {exc}"}
try:
    import torch
except Exception as exc:
    facts["torch"] = {"why": f"torch is not importable ({type(exc).__name__}: {exc})"}
else:
    cuda = torch.cuda.is_available()
    why = None if cuda else (f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() "
                             f"is False; built for CUDA {torch.version.cuda})")
    facts["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "why": why}
try:
    import jax
except Exception as exc:
    facts["jax"] = {"why": f"JAX is not importable ({type(exc).__name__}: {exc})"}
else:
    try:
        gpus = [str(d) for d in jax.devices("gpu")]
        why = None if gpus else "JAX lists no GPU device"
    except RuntimeError as exc:
        gpus, why = [], f"JAX {jax.__version__} has no GPU backend ({str(exc).splitlines()[0][:200]})"
    facts["jax"] = {"version": jax.__version__, "gpus": gpus, "why": why}
for name in ("keras", "ipython"):
    try:
        facts[name] = {"version": metadata.version(name), "why": None}
    except metadata.PackageNotFoundError:
        facts[name] = {"why": f"{name} is not installed (benchmarks/fetch_gpu_wheels.sh carries it to a GPU machine)"}
print(json.dumps(facts))
'''


def probe() -> dict[str, Any]:
    """What this machine has: NVML's GPUs, torch's and JAX's CUDA, Keras and IPython (asked in a child)."""
    # The probe's JAX must not take 75 % of the GPU for the moment it lives.
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        pytest.fail(f"the GPU probe itself failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def skip_unless(facts: dict[str, Any], framework: str) -> None:
    """Skip, saying what is missing, unless a GPU, ``framework`` on it, Keras and IPython are all here."""
    if not facts["nvml"]["gpus"]:
        pytest.skip(f"no NVIDIA GPU (NVML: {facts['nvml'].get('why')}); run on a GPU machine, see README 'Testing'")
    for name in (framework, "keras", "ipython"):
        if facts[name]["why"]:
            pytest.skip(facts[name]["why"])


def run_session(script: str, record_as: str, env: dict[str, str], unset: tuple[str, ...] = (),
                timeout: float | None = None) -> dict[str, Any]:
    """Run ``tests/gpu/<script>`` in its own interpreter; what it saw (its ``SEEN`` line).

    ``timeout`` defaults to ``KERASMAGIC_GPU_SESSION_TIMEOUT_S`` (420 s): the device runner
    sets less, so that three sessions and the readings fit the GPU machine's 10 minutes a
    command and a stalled one fails its tests instead of costing the whole report.
    """
    if timeout is None:
        timeout = float(os.environ.get("KERASMAGIC_GPU_SESSION_TIMEOUT_S", "420"))
    try:
        done = _run_script(script, env, unset, timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script} did not finish within {timeout:.0f} s (KERASMAGIC_GPU_SESSION_TIMEOUT_S)")
    return _seen(script, record_as, done)


def _run_script(script: str, env: dict[str, str], unset: tuple[str, ...], timeout: float
                ) -> subprocess.CompletedProcess:
    child_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore", **env)
    for name in unset:
        child_env.pop(name, None)
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, str(HERE / script)], capture_output=True, text=True, timeout=timeout,
                          env=child_env, cwd=ROOT)


def _seen(script: str, record_as: str, done: subprocess.CompletedProcess) -> dict[str, Any]:
    lines = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
    if done.returncode != 0 or not lines:
        pytest.fail(f"{script} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    seen = json.loads(lines[-1].removeprefix("SEEN "))
    folder = os.environ.get("KERASMAGIC_GPU_RECORD_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"gpu_session_{record_as}.json").write_text(json.dumps(seen, indent=1))
    return seen


def part(seen: dict[str, Any], name: str) -> dict[str, Any]:
    """One scenario's record; a scenario that raised fails the test with its traceback."""
    if name not in seen:
        pytest.fail(f"the session recorded no scenario {name!r} (it has {sorted(seen)})")
    record = seen[name]
    if isinstance(record, dict) and "error" in record:
        pytest.fail(f"scenario {name!r} raised in the session:\n{record['error']}")
    return record


def nvml_sees(*readings: Any) -> None:
    """Skip where NVML could not name this process (a container's PID namespace: host pids)."""
    if any(reading is None for reading in readings):
        pytest.skip("NVML does not list this process's pid (a container PID namespace?): "
                    "its per-process figures cannot be checked here")


#: How far two readings of a process that did nothing on the GPU in between may differ.
UNCHANGED = 32 * 2**20


def tolerance(*readings: int) -> int:
    """How far two readings of GPU memory may differ: 32 MiB or 2 % of the larger, whichever is more.

    NVML counts the CUDA context and libraries, which grow when new kernels load lazily, and
    rounds to the driver's page size; on an H100 the two agreed to the byte, so this is slack
    for other drivers and GPUs, far below what the tests compare (hundreds of MiB to GiB).
    """
    return max(32 * 2**20, int(0.02 * max(abs(r) for r in readings)))

#!/usr/bin/env bash
# The whole GPU run in one command, on a machine with an NVIDIA GPU, torch and JAX: the `gpu`
# test suite, then the raw readings kept as CI fixtures. Run from anywhere:
#
#   benchmarks/gpu_device_run.sh OUT_DIR
#
# Where Keras or IPython are missing and nothing can be downloaded (the workplace's GPU machine),
# first run benchmarks/fetch_gpu_wheels.sh on a machine with PyPI and bring .gpu-wheels/ along:
# this installs them with `pip install --no-index`. kerasmagic itself runs from this checkout.
#
# OUT_DIR receives (at most 8 files, flat, as the device tool brings back):
#   environment.json          versions, GPU, driver, and whether NVML sees this PID namespace's pids
#   junit.xml, pytest.log     `pytest -m gpu tests/gpu tests/core/test_nvml.py`
#   gpu_session_torch.json    what each torch / JAX / isolation session saw (tests/gpu/session_*.py)
#   gpu_session_jax.json
#   gpu_session_isolation.json
#   gpu_spare_table.json      the warm spare's table (tests/gpu/session_spare.py, torch and JAX), also printed
#   allocator_readings.json   benchmarks/gpu_readings.py (the fixture tests/core/test_gpu_allocators.py reads)
#   fork_probe.json           benchmarks/gpu_fork_probe.py, only with GPU_RUN_FORK_PROBE=1: its six
#                             framework imports add about a minute to a run that must end within
#                             the device tool's 10 minutes, and benchmarks/results/ already has it
# Exits with pytest's status; the readings are taken even when a test fails.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT_DIR=${1:?usage: benchmarks/gpu_device_run.sh OUT_DIR}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

WHEELS=${GPU_WHEELS:-.gpu-wheels}
if [ -d "$WHEELS" ]; then
  echo "[gpu-run] installing the carried wheels from $WHEELS (no index)"
  # Resolved against what the machine has: a carried wheel is taken only where it is missing
  # or too old there, and a gap in the set fails here, loudly, rather than as skipped tests.
  "$PY" -m pip install -q --no-index --no-cache-dir --find-links "$WHEELS" keras ipython comm ipywidgets \
    || { echo "[gpu-run] the carried wheels did not install" >&2; exit 3; }
fi

"$PY" - "$OUT_DIR/environment.json" <<'EOF'
import json, os, platform, subprocess, sys
from importlib.metadata import PackageNotFoundError, version
facts = {"python": sys.version.split()[0], "machine": platform.machine(), "kernel": platform.release()}
for name in ("torch", "jax", "jaxlib", "keras", "ipython", "nvidia-ml-py", "numpy", "pytest", "tensorflow"):
    try:
        facts[name] = version(name)
    except PackageNotFoundError:
        facts[name] = None
try:
    facts["nvidia-smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
except (OSError, subprocess.SubprocessError) as exc:
    facts["nvidia-smi"] = f"{type(exc).__name__}: {exc}"
with open("/proc/self/status") as status:
    facts["nspid"] = next((line.split()[1:] for line in status if line.startswith("NSpid:")), None)
json.dump(facts, open(sys.argv[1], "w"), indent=1)
print("[gpu-run]", json.dumps(facts))
EOF

echo "[gpu-run] pytest -m gpu"
# 150 s a session at most: five of them (isolation, torch, JAX, the spare's torch and JAX), the install
# and the readings must fit the 600 s of one command; sessions usually end far sooner.
KERASMAGIC_GPU_SESSION_TIMEOUT_S=${KERASMAGIC_GPU_SESSION_TIMEOUT_S:-150} \
KERASMAGIC_GPU_RECORD_DIR="$OUT_DIR" "$PY" -m pytest -m gpu tests/gpu tests/core/test_nvml.py \
  -v -rs -p no:cacheprovider --junitxml="$OUT_DIR/junit.xml" 2>&1 | tee "$OUT_DIR/pytest.log"
status=${PIPESTATUS[0]}

echo "[gpu-run] the warm spare's table (issue 32): job time from its start to the end of its fit"
# The two sessions' records become one file: the device tool brings back at most 8.
"$PY" - "$OUT_DIR" <<'EOF'
import json, os, statistics, sys
out, table = sys.argv[1], {}
for backend in ("torch", "jax"):
    path = os.path.join(out, f"gpu_session_spare_{backend}.json")
    if os.path.exists(path):
        table[backend] = json.load(open(path))
        os.unlink(path)
json.dump(table, open(os.path.join(out, "gpu_spare_table.json"), "w"), indent=1)
print("| backend | cold fork | warm spare | in-process, warm | spare / in-process |")
print("|---|---|---|---|---|")
for backend, seen in table.items():
    row = seen.get("table", {})
    cells = [", ".join(f"{v:.2f}" for v in row.get(k, [])) + " s" for k in ("cold_fork_s", "warm_spare_s", "in_process_s")]
    ratio = (statistics.median(row["warm_spare_s"]) / statistics.median(row["in_process_s"])
             if row.get("warm_spare_s") and row.get("in_process_s") else float("nan"))
    print(f"| {backend} | {' | '.join(cells)} | {ratio:.2f}x |")
EOF

echo "[gpu-run] readings"
"$PY" benchmarks/gpu_readings.py "$OUT_DIR/allocator_readings.json" >/dev/null \
  || echo "[gpu-run] gpu_readings.py failed" >&2
if [ "${GPU_RUN_FORK_PROBE:-0}" = 1 ]; then
  "$PY" benchmarks/gpu_fork_probe.py "$OUT_DIR/fork_probe.json" >/dev/null \
    || echo "[gpu-run] gpu_fork_probe.py failed" >&2
fi

ls -l "$OUT_DIR"
echo "[gpu-run] pytest exit status $status"
exit "$status"

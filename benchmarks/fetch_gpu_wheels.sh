#!/usr/bin/env bash
# Download, here, the wheels the GPU machine lacks for the `gpu` test suite, into .gpu-wheels/
# (git-ignored). That machine has Python 3.12 with torch, JAX, nvidia-ml-py, psutil, numpy,
# cloudpickle and pytest but no Keras or IPython, and no network: benchmarks/gpu_device_run.sh
# installs these with `pip install --no-index --find-links .gpu-wheels`.
#
# Usage: benchmarks/fetch_gpu_wheels.sh [DIR]   (default .gpu-wheels; about 13 MB)
# GPU_PYTHON_VERSION=3.11 fetches for another Python (to rehearse the install on this machine).
#
# Versions are those of this checkout's .venv where it has the package (the versions CI tests),
# so the GPU run tests the same Keras and IPython; a package missing there is taken at its
# newest version.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${1:-.gpu-wheels}
PYVER=${GPU_PYTHON_VERSION:-3.12}
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python

# What the device lacks: Keras with the two dependencies the device has not (namex, optree);
# IPython with its pure-Python dependencies; comm and ipywidgets, which kerasmagic requires.
# Keras' other needs (absl-py, numpy, rich, h5py, ml-dtypes, packaging) and pygments are there.
PACKAGES=(
  keras namex optree
  ipython ipython-pygments-lexers decorator jedi parso matplotlib-inline traitlets pexpect ptyprocess
  prompt-toolkit wcwidth stack-data executing asttokens pure-eval
  comm ipywidgets widgetsnbextension jupyterlab-widgets
  # The device has these, at versions nobody recorded, and the wheels above ask for floors
  # (IPython: psutil>=7, pygments>=2.14; optree: typing-extensions>=4.10): pip takes a carried
  # one only where the device's copy falls short (0.4 MB and 1.2 MB).
  psutil pygments typing-extensions
)

# The Python packages the device's image holds (/work/.library/device/KINDS.md, read 2026-11-17):
# a requirement of a carried wheel must be one of these or carried itself.
DEVICE_HAS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-ml-py onnx onnxruntime opencv-python-headless optax opt-einsum orbax-checkpoint packaging pandas
pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pytest pytest-timeout pytest-xdist python-dateutil pyyaml regex
requests rich safetensors scipy setuptools six sortedcontainers sympy tabulate tensorstore threadpoolctl toolz
torch tqdm triton typing-extensions urllib3 werkzeug wheel wrapt xarray zipp"

pins=$("$PYTHON" - "${PACKAGES[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        print(name)
EOF
)

rm -rf "$DIR"
mkdir -p "$DIR"
# --no-deps: the list above is the whole set (checked below); a resolver run would also fetch
# numpy, h5py and the rest the device already has. The platforms are the device's (x86-64 glibc).
# shellcheck disable=SC2086 # one requirement per word
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR" $pins

# Every requirement of every carried wheel (for that Python, on Linux) must be carried, or on
# the device with no version asked for: a gap would only show on the GPU machine, where
# nothing can be fetched.
"$PYTHON" - "$DIR" "$DEVICE_HAS" "$PYVER" <<'EOF'
import re, sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

folder, device = Path(sys.argv[1]), {canonicalize_name(n) for n in sys.argv[2].split()}
environment = {"python_version": sys.argv[3], "python_full_version": sys.argv[3] + ".0", "sys_platform": "linux",
               "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
               "platform_machine": "x86_64", "platform_python_implementation": "CPython", "extra": ""}
carried, needs, floors = set(), {}, {}
for wheel in sorted(folder.glob("*.whl")):
    carried.add(canonicalize_name(re.split(r"-\d", wheel.name, maxsplit=1)[0]))
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        for line in archive.read(metadata).decode().splitlines():
            if line.startswith("Requires-Dist:"):
                requirement = Requirement(line.split(":", 1)[1].strip())
                if requirement.marker is None or requirement.marker.evaluate(environment):
                    needs.setdefault(canonicalize_name(requirement.name), []).append(wheel.name)
                    if requirement.specifier:
                        floors.setdefault(canonicalize_name(requirement.name), []).append(str(requirement))
missing = {name: by for name, by in needs.items() if name not in carried | device}
missing.update({name: asked for name, asked in floors.items() if name not in carried})
total = sum(w.stat().st_size for w in folder.glob("*.whl"))
print(f"{len(carried)} wheels, {total / 2**20:.1f} MiB in {folder}/")
if missing:
    sys.exit(f"not carried, and not on the device or there at an unknown version: {missing}")
EOF

#!/usr/bin/env bash
# One entry point for people and CI: `./dev.sh demo` and `./dev.sh test` set everything up
# (a virtualenv in .venv, the package with its test extras, the JupyterLab extension and a
# headless Chromium where the tests need them) and then run.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv

# What runs again on Colab's pins: every test of a layer an older IPython, ipykernel or
# ipywidgets changes (the magics, the holders, the comm channel, the live views, an isolated
# cell, the memory guard), and the stack's own end-to-end tests: 3 min 51 s on two workers on
# CI's 2 cores (6 min 11 s one at a time).
COLAB_STACK_TESTS=(
  tests/stacks tests/core/test_compat.py tests/core/test_magics.py tests/core/test_magic_options.py
  tests/core/test_hidden_holders.py tests/core/test_holder_search.py tests/core/test_holder_search_models.py
  tests/live/test_kernel_channel.py tests/live/test_live_widget.py
  tests/live/test_kernel_timeline.py tests/live/test_kernel_record.py tests/isolation/test_cell.py
  tests/core/test_memory_limit_magic.py tests/live/test_kernel_memory_guard.py
  tests/core/test_oom.py tests/live/test_kernel_oom.py tests/core/test_fresh_first_run.py tests/core/test_advice_corpus.py
)

# The next TensorFlow (issue 28): 2.22 carries the upstream custom_gradient fix, so there
# clear_session() alone stops the registry growth and our purge stands down. Its stage runs the
# stacks' end-to-end tests (a real kernel, the seed-001 model loop per strategy) and the core
# files that read TensorFlow's and Keras' internals, from the wheel, with the Keras that pip picks
# for it (keras-nightly 3.16 for the rc) and without JAX, tf-keras and matplotlib, whose tests
# must skip with their reason. Move the pin to the 2.22 release once there is one.
NEXT_TENSORFLOW=${KERASMAGIC_NEXT_TENSORFLOW:-tensorflow-cpu==2.22.0rc0}
NEXT_STACK_TESTS=(
  tests/stacks tests/core/test_magics.py tests/core/test_registry.py tests/core/test_leak_watch.py
  tests/core/test_hidden_holders.py tests/core/test_holder_search_models.py tests/core/test_tf_cpu_figures.py
  tests/core/test_tf_stack_traces.py tests/core/test_new_models.py tests/core/test_fresh_first_run.py
  tests/core/test_legacy_and_bare.py tests/core/test_keras_on_jax.py tests/core/test_docstring_examples.py
  tests/core/test_unit.py
)

log() { printf '\033[1m[dev] %s\033[0m\n' "$*" >&2; }

setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # The editable install builds the JupyterLab extension (hatch-jupyter-builder runs jlpm), so
  # a fresh clone needs Node; a warm tree skips the build when labextension/ is older than the
  # output.
  if ! command -v node >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      log "installing Node.js for the JupyterLab extension build"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
    else
      log "Node.js is missing: run 'sudo apt-get install -y nodejs' (needed to build the sidebar)"
    fi
  fi
  log "installing kerasmagic with its test extras (TensorFlow CPU build; first run takes a few minutes)"
  PATH="$PWD/$VENV/bin:$PATH" "$VENV/bin/python" -m pip install -q -e ".[test]"
  # JupyterLab finds the editable extension through a link to kerasmagic/labextension.
  if [ ! -L "$VENV/share/jupyter/labextensions/kerasmagic" ]; then
    log "linking the sidebar extension into JupyterLab"
    PATH="$PWD/$VENV/bin:$PATH" "$VENV/bin/jupyter" labextension develop --overwrite . >/dev/null
  fi
  # tf-keras (the legacy graph-mode path we also test) depends on the full `tensorflow`
  # package, which would install a second TensorFlow over tensorflow-cpu: take it without
  # dependencies, matched to the installed TensorFlow's minor version.
  local tf_minor
  tf_minor=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(".".join(version("tensorflow-cpu").split(".")[:2]))')
  "$VENV/bin/python" -m pip install -q --no-deps "tf-keras==${tf_minor}.*"
}

# A wheel of this checkout for the pinned stacks, built as a release is: with the production
# bundle (minified JS and CSS, no source maps; what tests/live/test_bundle_size.py weighs). The
# wheel's build hook skips the build where one exists, so it is rebuilt here first; the
# editable install and the browser tests on .venv then load that same production build.
# Prints the wheel's path.
build_wheel() {
  rm -rf dist
  PATH="$PWD/$VENV/bin:$PATH" jlpm build:prod >&2
  "$VENV/bin/python" -m pip wheel -q --no-deps -w dist . >&2
  ls dist/kerasmagic-*.whl
}

# Python 3.12, Colab's (TF 2.19 has no 3.13 build): $COLAB_PYTHON, python3.12, or pyenv's; the
# default python3 where none is found (TF 2.19 runs on 3.11 too; the log says which was used).
colab_python() {
  local candidate
  for candidate in ${COLAB_PYTHON:-} python3.12 "$(command -v pyenv >/dev/null 2>&1 && pyenv root)"/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import venv' >/dev/null 2>&1; then echo "$candidate"; return; fi
  done
  echo "$PYTHON"
}

# Colab's stack (tests/stacks/colab-pins.txt) in .venv-colab, then the built wheel with a plain
# `pip install`, as a Colab user runs it: it must install only what is missing and move no pin.
setup_colab_stack() {
  local wheel=$1 venv=.venv-colab
  if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv with Colab's pins ($(colab_python); TensorFlow 2.19: first run takes a few minutes)"
    "$(colab_python)" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q -r tests/stacks/colab-pins.txt
  # Not Colab's: the test runner's second worker, as for the main suite (execnet is its one need).
  "$venv/bin/python" -m pip install -q "pytest-xdist==3.8.0"
  "$venv/bin/python" -m pip uninstall -q -y kerasmagic tf-keras >/dev/null 2>&1 || true
  "$venv/bin/python" -m pip freeze --all > "$venv/before-wheel.txt"
  log "installing the wheel beside Colab's pins with a plain pip install ($("$venv/bin/python" -V))"
  "$venv/bin/python" -m pip install -q "$wheel"
  "$venv/bin/python" tests/stacks/check_pins.py tests/stacks/colab-pins.txt --before "$venv/before-wheel.txt"
  "$venv/bin/python" -m pip check
  # Colab has tf_keras too; like .venv's, without the full `tensorflow` it depends on.
  "$venv/bin/python" -m pip install -q --no-deps "tf-keras==2.19.*"
}

# The next TensorFlow in .venv-next, then the built wheel with a plain `pip install`; only the
# test runners besides (pytest, xdist, a kernel client, nbclient for the kernel helpers).
setup_next_stack() {
  local wheel=$1 venv=.venv-next
  if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv with $NEXT_TENSORFLOW (first run takes a few minutes)"
    "$PYTHON" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "$NEXT_TENSORFLOW"
  "$venv/bin/python" -m pip install -q "pytest>=8" "pytest-xdist==3.8.0" "ipykernel>=6.29" "jupyter_client>=8" "nbclient>=0.10" \
    "nbformat>=5.10"
  "$venv/bin/python" -m pip uninstall -q -y kerasmagic >/dev/null 2>&1 || true
  log "installing the wheel beside $NEXT_TENSORFLOW with a plain pip install"
  "$venv/bin/python" -m pip install -q "$wheel"
  "$venv/bin/python" -m pip check
  log "next stack: $("$venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(tensorflow[-_]cpu|keras|keras-nightly) ' | tr -s ' ' | paste -sd ',')"
}

setup_browser() {
  if [ -x /usr/bin/chromium ]; then return; fi
  if [ "$(id -u)" = 0 ]; then
    log "installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    log "chromium is missing: run 'sudo apt-get install -y chromium' for the browser tests"
  fi
}

# The oldest stack the sidebar supports, as university hubs run it: JupyterLab 4.0 with
# ipykernel 6 (no kernel subshells: the panel's comm waits for a running cell). No TensorFlow:
# the browser test there (tests/ui/test_jupyterlab_40.py) checks the extension and the comm.
# The wheel goes in with a plain `pip install`, as users install it, so a dependency range
# that pulls a newer JupyterLab or ipykernel, or a bundle that asks for one, fails here.
LAB40_VENV=.venv-lab40
LAB40_JUPYTERLAB=4.0.13  # the newest 4.0.x
LAB40_IPYKERNEL=6.29.5   # the newest 6.29, what the hubs run

setup_lab40_stack() {
  local wheel=${1:-}
  if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
    log "setup_lab40_stack: no kerasmagic wheel at '${wheel}' (usage: setup_lab40_stack dist/kerasmagic-*.whl)"
    return 1
  fi
  if [ ! -x "$LAB40_VENV/bin/python" ]; then
    log "creating $LAB40_VENV (JupyterLab $LAB40_JUPYTERLAB, ipykernel $LAB40_IPYKERNEL)"
    "$PYTHON" -m venv "$LAB40_VENV"
  fi
  local py="$LAB40_VENV/bin/python"
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install -q "jupyterlab==$LAB40_JUPYTERLAB" "ipykernel==$LAB40_IPYKERNEL"
  # Uninstalled first: a rebuilt wheel keeps its version number, and pip would keep the old one.
  "$py" -m pip uninstall -q -y kerasmagic >/dev/null 2>&1 || true
  log "installing $wheel into $LAB40_VENV"
  "$py" -m pip install -q "$wheel"
  # The wheel's dependencies must not have moved the stack we mean to test.
  local versions
  versions=$("$py" -c 'from importlib.metadata import version as v; print(v("jupyterlab"), v("ipykernel"))')
  if [ "$versions" != "$LAB40_JUPYTERLAB $LAB40_IPYKERNEL" ]; then
    log "FAILED: installing kerasmagic changed $LAB40_VENV to jupyterlab, ipykernel $versions (want $LAB40_JUPYTERLAB $LAB40_IPYKERNEL)"
    return 1
  fi
  # JupyterLab compares the extension's dependencies with its own and prints "X" and a list
  # of incompatible packages where they do not overlap; the extension must read "enabled OK".
  # Only this environment's Jupyter paths: a user's or another venv's kerasmagic must not answer.
  local listing
  listing=$(JUPYTER_DATA_DIR="$PWD/$LAB40_VENV/share/jupyter" JUPYTER_CONFIG_DIR="$PWD/$LAB40_VENV/etc/jupyter" \
    JUPYTER_PATH= JUPYTER_PREFER_ENV_PATH=1 "$LAB40_VENV/bin/jupyter" labextension list 2>&1 | sed 's/\x1b\[[0-9;]*m//g') || true
  if ! grep -Eq '^[[:space:]]*kerasmagic v[^ ]+ enabled +OK' <<<"$listing"; then
    log "FAILED: JupyterLab $LAB40_JUPYTERLAB does not list kerasmagic as enabled OK:"
    printf '%s\n' "$listing" >&2
    return 1
  fi
  log "JupyterLab $LAB40_JUPYTERLAB: $(grep -E '^[[:space:]]*kerasmagic v' <<<"$listing" | sed 's/^[[:space:]]*//')"
}

# The sidebar's TypeScript and CSS: ESLint, Prettier and Stylelint, configured as the JupyterLab
# extension template does (package.json, labextension/eslint.config.mjs). Needs setup_python
# first: jlpm comes with JupyterLab, node_modules with the extension build.
check_typescript_style() {
  log "checking the style of the sidebar's TypeScript and CSS (jlpm lint:check)"
  # An editable install that found its build up to date ran no `jlpm install`: a tree from
  # before the linters were added has none.
  if [ ! -x node_modules/.bin/eslint ]; then
    PATH="$PWD/$VENV/bin:$PATH" jlpm install
  fi
  PATH="$PWD/$VENV/bin:$PATH" jlpm lint:check
}

# The package's Python: ruff (tests and benchmarks too) and mypy, configured in pyproject.toml.
check_python_style() {
  log "checking the Python (ruff check, mypy)"
  "$VENV/bin/ruff" check kerasmagic tests benchmarks
  "$VENV/bin/mypy" kerasmagic
}

# Every style check: `./dev.sh lint` runs it alone, `./dev.sh test` before the tests.
lint() {
  check_python_style
  check_typescript_style
}

# The fast tier, `./dev.sh check`: lint and types, then the tests that need no kernel, browser,
# cluster, worker process or TensorFlow fit (markers `unit` and `shell`, less `frameworks`: the
# shell tests that train models took 24 min with them on a loaded 2-core machine; tests/conftest.py
# makes every test carry a marker), on two workers. Meant to take under 5 minutes on CI's 2
# cores, so a broken commit fails in minutes; `./dev.sh test` runs it first and every other test
# after it. Prints its own duration.
FAST_TIER="(unit or shell) and not frameworks"
check() {
  local started=$SECONDS status=0
  lint
  "$VENV/bin/ruff" check docs/conf.py docs/scripts
  log "the fast tier: the unit and shell tests"
  "$VENV/bin/python" -m pytest -m "$FAST_TIER" -n "${KERASMAGIC_TEST_WORKERS:-2}" --dist loadfile \
    --no-loadscope-reorder --durations=10 || status=$?
  log "./dev.sh check took $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s"
  return $status
}

# The documentation site (docs/conf.py) into build/docs, warnings as errors: a broken link or a
# docstring that no longer renders fails here (and in `./dev.sh test`).
build_docs() {
  log "building the docs into build/docs (sphinx -W)"
  rm -rf build/docs
  "$VENV/bin/python" -m sphinx -W --keep-going -q -b html docs build/docs
  log "docs: build/docs/index.html"
}

# The sdist beside the wheel build_wheel made, and twine's check of both (what PyPI would refuse:
# metadata, the README's rendering). The sdist carries the prebuilt extension (pyproject's sdist
# artifacts), so installing it needs no Node (tests/docs/test_sdist_install.py).
check_distributions() {
  "$VENV/bin/python" -m build --sdist -o dist . >&2
  log "twine check $(ls dist | tr '\n' ' ')"
  "$VENV/bin/twine" check --strict dist/*
}

case "${1:-}" in
  demo)
    setup_python
    shift
    exec "$VENV/bin/python" -m kerasmagic.demo "$@"
    ;;
  test)
    setup_python
    setup_browser
    shift
    # With pytest arguments, only those tests, on the newest stack; without, every stack, the
    # fast tier first (lint included), the docs, the distributions, then every other test.
    stacks=$([ $# -eq 0 ] && echo 1 || echo 0)
    if [ "$stacks" = 1 ]; then
      check
      build_docs
      wheel=$(build_wheel)
      check_distributions
      setup_colab_stack "$wheel"
      setup_next_stack "$wheel"
      setup_lab40_stack "$wheel"
    else
      lint
    fi
    status=0
    if [ "$stacks" = 1 ]; then
      # Two workers (pytest-xdist), each taking whole test files, so a file's module fixtures (a
      # JupyterLab server, a Ray cluster) start once: about half the serial 44 min on CI's 2
      # cores, as many tests wait on kernels, browsers and clusters. The long files go first and
      # the Ray tests and the lessons run on one worker, one after another (tests/conftest.py).
      # The slowest 25 are listed.
      "$VENV/bin/python" -m pytest -m "not ($FAST_TIER)" -n "${KERASMAGIC_TEST_WORKERS:-2}" \
        --dist loadfile --no-loadscope-reorder --durations=25 || status=$?
    else
      "$VENV/bin/python" -m pytest "$@" || status=$?
    fi
    if [ "$stacks" = 1 ]; then
      log "Colab's pinned stack (.venv-colab: IPython 7.34, ipykernel 6.17, ipywidgets 7.7, TF 2.19)"
      KERASMAGIC_STACK=colab .venv-colab/bin/python -m pytest -p no:cacheprovider \
        -n "${KERASMAGIC_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "${COLAB_STACK_TESTS[@]}" || status=$?
      log "the next TensorFlow (.venv-next: $NEXT_TENSORFLOW)"
      KERASMAGIC_STACK=next .venv-next/bin/python -m pytest -p no:cacheprovider -m "not gpu" \
        -n "${KERASMAGIC_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "${NEXT_STACK_TESTS[@]}" || status=$?
    fi
    exit $status
    ;;
  lint)
    setup_python
    lint
    ;;
  check)
    setup_python
    check
    ;;
  docs)
    setup_python
    build_docs
    ;;
  lab40)
    # The oldest supported stack from a wheel you built (`./dev.sh test` builds and sets it up).
    shift
    setup_lab40_stack "${1:-}"
    ;;
  lab)
    setup_python
    shift
    lab_args=()
    # Jupyter refuses to run as root without being told (containers, CI machines).
    if [ "$(id -u)" = 0 ]; then lab_args+=(--allow-root); fi
    exec "$VENV/bin/jupyter" lab notebooks/ "${lab_args[@]}" "$@"
    ;;
  *)
    echo "usage: ./dev.sh demo | test [pytest args] | check | docs | lint | lab | lab40 WHEEL" >&2
    exit 2
    ;;
esac

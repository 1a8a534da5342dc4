"""The warm spare with real forks (CPU, Keras on TensorFlow): taken, refused with a reason, replaced,
ended on Ctrl-C, on idle and with its kernel; its warm-up never prints into a cell; and the JAX
compilation cache the pool owns, found by a second job and gone with its kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from process_checks import gone

from kerasmagic import tf_mem
from kerasmagic.isolation import run_isolated
from kerasmagic.isolation.child import warmup
from kerasmagic.isolation.pool import WorkerPool, configure_pool, default_pool
from kerasmagic.live.jobs import IsolatedJobs
from kerasmagic.live.protocol import validate

pytestmark = pytest.mark.isolation

FIT = textwrap.dedent("""
    import keras, numpy as np
    print("only mine", flush=True)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.zeros((32, 4), "float32"), np.zeros(32, "float32"), epochs=1, verbose=0)
    first_layer = model.layers[0].name
""")


def _ready_spare(within: float = 90.0) -> dict:
    """The default pool's spare, once its warm-up is over."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready = [s for s in default_pool().spare_states() if s["state"] == "ready"]
        if ready:
            return ready[0]
        time.sleep(0.1)
    raise AssertionError(f"no spare finished its warm-up in {within} s: {default_pool().spare_states()}")


@pytest.fixture(scope="module")
def spares_on():
    """Spares forced on (this 2-core machine's default is off); the first job asks for one."""
    import keras  # noqa: F401 - the template imports what the kernel has: the spare warms Keras up

    configure_pool(warm_spare=True)
    first = run_isolated(FIT, outputs=["first_layer"], quiet=True)
    yield first
    configure_pool(warm_spare="auto")
    default_pool().end_spares()
    # A spare ends on a thread of its own (its exit status comes through the template's reader).
    for thread in threading.enumerate():
        if thread.name.startswith("kerasmagic-isolation-release-"):
            thread.join(timeout=10)


def test_the_first_job_says_no_spare_was_waiting_and_the_next_takes_the_warmed_one(spares_on, capsys):
    assert spares_on.spare.startswith("a cold fork: no spare was waiting")
    spare = _ready_spare()
    result = run_isolated(FIT, outputs=["first_layer"])
    assert result.spare == "taken" and result.worker_pid == spare["pid"]
    assert result.spare_warm_up_s > 0
    assert "the pool's warm spare" in str(result)
    # Its warm-up cleared Keras' session: names start afresh, as in a cold fork.
    assert result.outputs["first_layer"] == "dense"
    # Only the job's own output reached the cell and the report.
    assert capsys.readouterr().out == "only mine\n"
    assert result.last_output == "only mine"
    # Replaced: the next job's spare is another process, warming up already.
    replaced = default_pool().spare_states()
    assert replaced and all(s["pid"] != spare["pid"] for s in replaced)
    assert gone(spare["pid"], within=10)
    # Its cost, where users look: the report, %tf_mem and the sidebar's finished job.
    assert [s["pid"] for s in result.pool_spares] == [replaced[0]["pid"]] and result.pool_spares[0]["rss_bytes"] > 0
    assert "warm spare" in str(result)
    snapshot = str(tf_mem())
    assert "warm spare" in snapshot and f"pid {replaced[0]['pid']}" in snapshot
    message = IsolatedJobs().on_event("isolated_done", result.to_dict())
    validate(message, "to_frontend")
    assert message["job"]["spare"] == "taken" and message["job"]["spares"][0]["pid"] == replaced[0]["pid"]


def test_the_warm_up_writes_nothing_to_the_jobs_pipes():
    read, write = os.pipe()
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(write, 1)
        os.dup2(write, 2)
        warmup._quietly(lambda: (print("python's", flush=True), os.write(1, b"C's"), os.write(2, b"stderr")))
        os.write(1, b"after")
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, write):
            os.close(fd)
    with os.fdopen(read, "rb") as pipe:
        assert pipe.read() == b"after"


def test_a_job_that_sets_threads_gets_a_cold_fork_and_its_report_says_why(spares_on):
    spare = _ready_spare()
    code = "import tensorflow as tf\ntf.config.threading.set_intra_op_parallelism_threads(1)\nset_ok = True"
    result = run_isolated(code, outputs=["set_ok"], quiet=True)
    assert result.outputs["set_ok"] is True  # a warmed runtime would have raised RuntimeError
    assert result.spare.startswith("a cold fork: the job sets tf.config.threading's thread counts")
    assert "tf.config.threading's thread counts" in str(result)
    assert result.worker_pid != spare["pid"]
    assert spare["pid"] in [s["pid"] for s in default_pool().spare_states()]  # kept for the next job


def test_a_job_with_another_runtime_setting_ends_the_spare_and_says_which(spares_on):
    spare = _ready_spare()
    result = run_isolated(FIT, outputs=["first_layer"], quiet=True, env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert "XLA_PYTHON_CLIENT_PREALLOCATE differs from the spare's" in result.spare
    assert result.worker_pid != spare["pid"]
    assert gone(spare["pid"], within=10)  # no job like the old one is coming


def test_ctrl_c_ends_the_spare(spares_on, sigint_raises):
    _ready_spare()
    timer = threading.Timer(1.5, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_isolated("import time\ntime.sleep(60)", quiet=True)
    finally:
        timer.cancel()
    pids = [s["pid"] for s in default_pool().spare_states()]
    assert not pids, f"spares left after Ctrl-C: {pids}"


def test_an_idle_pool_ends_its_spare_with_its_template(spares_on):
    """Last here: the template goes, and the next test file pays for a new one."""
    run_isolated(FIT, quiet=True)
    spare = _ready_spare()
    pool = default_pool()
    pool.configure(idle_timeout=0.5)
    try:
        assert gone(spare["pid"], within=30)
        assert not pool.spare_states()
    finally:
        pool.configure(idle_timeout=300)


def test_the_jax_cache_folder_is_the_pools_and_goes_with_it():
    pool = WorkerPool(size=1)
    folder = pool.jax_cache_folder()
    assert os.path.isdir(folder) and os.path.basename(folder).startswith(f"kerasmagic-isolated-{os.getpid()}-")
    assert not os.environ.get("JAX_COMPILATION_CACHE_DIR") or os.environ["JAX_COMPILATION_CACHE_DIR"] != folder
    pool.shutdown()
    assert not os.path.exists(folder)


_JAX_KERNEL = """\
import json, os, time
os.environ["KERAS_BACKEND"] = "jax"
import keras
from kerasmagic import tf_mem
from kerasmagic.isolation import run_isolated
from kerasmagic.isolation.pool import configure_pool, default_pool
configure_pool(warm_spare=True, size=1)
# Pure JAX: a Keras fit on JAX imports TensorFlow for its data, and the pool would learn it and
# start a second template (a minute here); the spare's warm-up is a Keras fit all the same.
code = '''
import jax, jax.numpy as jnp, os, time
started = time.perf_counter()
@jax.jit
def step(w, x):
    loss = lambda w: jnp.mean((jnp.tanh(x @ w[0]) @ w[1]) ** 2)
    return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, w, jax.grad(loss)(w))
w = (jnp.ones((8, 16)), jnp.ones((16, 1)))
for _ in range(3):
    w = step(w, jnp.ones((64, 8)))
jax.block_until_ready(w)
fit_s = time.perf_counter() - started
entries = len(os.listdir(os.environ["KERASMAGIC_JAX_CACHE_DIR"]))
'''
# Without the spare first: its warm-up would compile (and cache) before the second job.
configure_pool(warm_spare=False)
jobs = [run_isolated(code, outputs=["fit_s", "entries"], quiet=True).outputs for _ in range(2)]
configure_pool(warm_spare=True)
run_isolated(code, quiet=True)  # asks for a spare: warming or ready, it must go with the kernel
print(json.dumps({"jobs": jobs, "folder": default_pool().jax_cache_folder(),
                  "bytes": default_pool().jax_cache_bytes(), "spares": default_pool().spare_states(),
                  "pids": default_pool().pids()}), flush=True)
time.sleep(600)
"""


def _our_files(pid: int) -> list[str]:
    found = []
    for folder in ("/tmp", "/dev/shm"):
        if os.path.isdir(folder):
            found += [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("kerasmagic-")
                      and f"-{pid}-" in n]
    return found


def test_jax_jobs_find_the_cache_and_a_killed_kernel_takes_spare_and_cache_along():
    kernel = subprocess.Popen([sys.executable, "-c", _JAX_KERNEL], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, text=True)
    try:
        line = kernel.stdout.readline()
        assert line, "the kernel script died"
        found = json.loads(line)
    finally:
        kernel.kill()
        kernel.wait()
    first, second = found["jobs"]
    assert first["entries"] > 0, "the first JAX job cached nothing"
    assert second["entries"] == first["entries"], "the second job of the same shapes compiled anew"
    assert found["bytes"] > 0 and found["folder"].startswith("/tmp/kerasmagic-isolated-")
    assert len(found["spares"]) == 1 and found["spares"][0]["pid"] in found["pids"], found["spares"]
    # Killed: its template, its spare and every file of its (the JAX cache included) go.
    for pid in found["pids"]:
        assert gone(pid, within=15), f"process {pid} outlived its kernel"
    deadline = time.monotonic() + 15
    while _our_files(kernel.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _our_files(kernel.pid)

"""Isolation, measured (prints figures; not a test): how close a fresh process per job comes
to in-process speed now that each job is a fork of a warm template.

- a light driver (a script whose jobs import Keras themselves): the first job's import, the
  template the pool learns from it, and ``preload=["keras"]``, against the same fit in-process;
- back-to-back small Keras fits, side by side in one run: in-process vs isolated (target:
  isolated <= 1.15x) vs a bare ``os.fork()`` of a process with the same imports (what our
  worker adds), each with the fit's wall time, CPU and page faults measured inside; with
  oneDNN as TF chooses for this CPU and again with it off (CI's AMD CPUs run without it);
- from asking for a process to the job's first line (target <= 50 ms);
- lesson 5's fold (the demo's cv_fold: a fit and an evaluate): in-process vs isolated_map,
  alternating (target <= 1.2x);
- 4 jobs at once: memory of template + 4 forked children (PSS) vs 4 fresh interpreters;
- the warm spare: isolated with a spare (back to back, and after a pause) vs without vs in-process;
- a 20-fold isolated_map cross-validation: the kernel's RSS growth (target <= 5 MB);
- 100 back-to-back forked jobs: no hang, and no process, job folder or log file left;
- a cold multiprocessing spawn per job (what users write by hand) and a large array sent
  through our out-of-band files vs a pickle through a pipe.

    $ python benchmarks/bench_isolation.py [--repeats 6] [--folds 20] [--jobs 100] [--array-mib 512]
          [--onednn {as-is,off,both}] [--only back-to-back ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import pickle
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def fit_small(seed: int) -> float:
    """One small fit (about a second on two cores); the job every variant runs."""
    import keras
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.random((4096, 64), dtype=np.float32)
    y = (x.sum(axis=1, keepdims=True) > 32).astype("float32")
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    history = model.fit(x, y, epochs=3, batch_size=64, verbose=0)
    return float(history.history["loss"][-1])


def hold_memory(seconds: float) -> int:
    """A job that allocates 64 MiB of its own and holds it while the others run."""
    import time

    import numpy as np

    block = np.ones(64 << 20, dtype=np.uint8)
    time.sleep(seconds)
    return int(block[::4096].sum())


def _spawn_target(seed: int, results) -> None:
    results.put(fit_small(seed))


def _pipe_target(conn) -> None:
    conn.send_bytes(b"ready")
    array = pickle.loads(conn.recv_bytes())  # noqa: S301 - bytes from this benchmark's own parent
    conn.send_bytes(str(array.shape).encode())


def cold_spawn(seed: int) -> float:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_spawn_target, args=(seed, results))
    process.start()
    value = results.get(timeout=300)
    process.join(60)
    return value


def _timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def timed_fit(seed: int) -> dict[str, float]:
    """:func:`fit_small`, timed from inside the process that runs it: the fit's wall time, and
    the process's CPU time and page faults so far (in a forked child: since the fork)."""
    import resource

    started = time.perf_counter()
    loss = fit_small(seed)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"loss": loss, "fit_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
            "faults": usage.ru_minflt}


def _bare_forker(modules: str) -> None:
    """``--bare-forker numpy,tensorflow,...``: import what the template imports, run no op, then
    for each seed read from stdin fork a child that runs :func:`timed_fit` and prints its JSON.
    A bare ``os.fork()``: none of the pool's machinery (no channel, sampler, shipping); with a
    second number 1, the child freezes the garbage collector's objects first, as our template does."""
    import gc
    import json

    for name in modules.split(","):
        __import__(name)
    for line in sys.stdin:
        seed, freeze = (int(word) for word in line.split())
        pid = os.fork()
        if pid == 0:
            if freeze:  # as our template does: the fork's collections skip the imported heap
                gc.freeze()
            print(json.dumps(timed_fit(seed)), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)


class BareForker:
    """The driver's end of :func:`_bare_forker`."""

    def __init__(self, modules: list[str]) -> None:
        import subprocess

        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--bare-forker", ",".join(modules)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, seed: int, freeze: bool = False) -> dict[str, float]:
        import json

        assert self.process.stdin is not None and self.process.stdout is not None
        started = time.perf_counter()
        self.process.stdin.write(f"{seed} {int(freeze)}\n")
        self.process.stdin.flush()
        figures = json.loads(self.process.stdout.readline())
        return {**figures, "wall_s": time.perf_counter() - started}

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(60)


def _in_process(seed: int) -> dict[str, float]:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    figures = timed_fit(seed)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {**figures, "wall_s": time.perf_counter() - started, "faults": after.ru_minflt - before.ru_minflt,
            "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)}


def _isolated(seed: int) -> dict[str, float]:
    from kerasmagic.isolation import run_isolated

    started = time.perf_counter()
    result = run_isolated(timed_fit, args=(seed,), quiet=True)
    wall = time.perf_counter() - started
    assert result.origin == "forked", result.worker_note
    return {**result.value, "wall_s": wall, "wait_s": result.wait_s, "ship_s": result.ship_in_s + result.ship_out_s,
            "took": float(result.spare == "taken")}


def _onednn_label() -> str:
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0":
        return "oneDNN off"
    try:
        from tensorflow.python.util import _pywrap_util_port  # TF's own answer, private

        return "oneDNN on" if _pywrap_util_port.IsMklEnabled() else "oneDNN off (TF's choice for this CPU)"
    except Exception:  # noqa: BLE001 - a TF without it: say what was asked
        return "oneDNN as TF chose"


def back_to_back(repeats: int, extras: bool = True) -> list[tuple[str, str, str]]:
    """Small fits back to back, side by side in one run: in-process (warm), isolated (each a
    fork of the warm template), and a bare ``os.fork()`` of a process that imported the same
    frameworks (as it is, and with its objects frozen as our template freezes them); each round
    runs all four, in a rotating order, so that the machine's load falls on each alike. Inside
    each: the fit's wall time, and the process's CPU time and page faults (a child's since its
    fork, the job's decoding included; in-process, the fit's alone)."""
    from kerasmagic.isolation import run_isolated
    from kerasmagic.isolation.pool import default_pool

    default_pool().prestart()
    assert default_pool().wait_until_warm(timeout=300)
    preload = default_pool().template_states()[0]["preload"]
    bare = BareForker(preload)
    try:
        bare.run(0)  # its imports, before the clock
        run_isolated(timed_fit, args=(0,), quiet=True)
        fit_small(0)  # this process's TF runtime starts here, as in a kernel that already trained once
        kinds = {"in-process": _in_process, "isolated": _isolated, "bare fork": bare.run,
                 "bare fork, frozen": lambda seed: bare.run(seed, freeze=True)}
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        order = list(kinds)
        for i in range(1, repeats + 1):
            for kind in order:
                runs[kind].append(kinds[kind](i))
            order = order[1:] + order[:1]
    finally:
        bare.close()
    latency = [run_isolated("x = 1", quiet=True).start_latency_s for _ in range(repeats * 2)] if extras else []
    cold = [_timed(cold_spawn, i) for i in range(min(repeats, 3))] if extras else []

    def median(kind: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[kind])

    base, base_cpu = median("in-process", "wall_s"), median("in-process", "cpu_s")
    label = _onednn_label()
    rows = []
    for kind, what in (("in-process", "in-process small fit (warm)"), ("isolated", "isolated small fit"),
                       ("bare fork", "bare os.fork(), same imports"),
                       ("bare fork, frozen", "bare os.fork(), gc.freeze()")):
        ratio = "" if kind == "in-process" else f"{median(kind, 'wall_s') / base:.2f}x in-process; "
        cpu_ratio = "" if kind == "in-process" else f" ({median(kind, 'cpu_s') / base_cpu:.2f}x)"
        target = " (target <= 1.15x)" if kind == "isolated" else ""
        each = ", ".join(f"{run['wall_s']:.2f}" for run in runs[kind])
        rows.append((f"{what}, {label}", f"{median(kind, 'wall_s'):.2f} s",
                     f"{ratio}median of {repeats}{target}; fit {median(kind, 'fit_s'):.2f} s, "
                     f"CPU {median(kind, 'cpu_s'):.2f} s{cpu_ratio}, {median(kind, 'faults') / 1000:.1f}k page faults; "
                     f"runs {each}"))
    overhead = median("isolated", "wall_s") - median("isolated", "fit_s")
    rows.append((f"isolated job around its fit, {label}", f"{overhead * 1000:.0f} ms",
                 f"wait for the fork {median('isolated', 'wait_s') * 1000:.0f} ms, shipping "
                 f"{median('isolated', 'ship_s') * 1000:.0f} ms, the rest: the job's start, its end, the report"))
    if not extras:
        return rows
    rows += [
        ("ask for a process -> job's first line", f"{statistics.median(latency) * 1000:.0f} ms",
         f"median of {len(latency)} trivial jobs, max {max(latency) * 1000:.0f} ms (target <= 50 ms)"),
        ("cold multiprocessing spawn per fit", f"{statistics.median(cold):.2f} s",
         f"{statistics.median(cold) / base:.1f}x in-process: the hand-written recipe"),
    ]
    return rows


def _isolated_with_spare(seed: int, wait_for_spare: bool) -> dict[str, float]:
    from kerasmagic.isolation.pool import default_pool

    if wait_for_spare:  # as between cells run by hand: the spare has had its time
        deadline = time.monotonic() + 60
        while not any(s["state"] == "ready" for s in default_pool().spare_states()) and time.monotonic() < deadline:
            time.sleep(0.05)
    return _isolated(seed)


def warm_spare(repeats: int) -> list[tuple[str, str, str]]:
    """Small fits: in-process (warm) vs isolated without a spare (alternating), then with the warm
    spare, back to back (its warm-up runs beside the job before) and after a pause (once it is
    ready, as between cells a person runs by hand), each block followed by in-process fits."""
    from kerasmagic.isolation import run_isolated
    from kerasmagic.isolation.pool import configure_pool, default_pool

    rule = default_pool().spares_on()
    default_pool().prestart()
    assert default_pool().wait_until_warm(timeout=300)
    configure_pool(warm_spare=False)
    run_isolated(timed_fit, args=(0,), quiet=True)
    fit_small(0)  # this process's runtime up, as in a kernel that already trained once
    runs: dict[str, list[dict[str, float]]] = {"in-process": [], "isolated, no spare": [],
                                               "isolated, spare, back to back": [],
                                               "isolated, spare, after a pause": []}
    for i in range(1, repeats + 1):
        runs["in-process"].append(_in_process(i))
        runs["isolated, no spare"].append(_isolated(i))
    configure_pool(warm_spare=True)
    run_isolated(timed_fit, args=(0,), quiet=True)  # asks the first spare
    for kind, pause in (("isolated, spare, back to back", False), ("isolated, spare, after a pause", True)):
        for i in range(1, repeats + 1):
            runs[kind].append(_isolated_with_spare(i, pause))
        for i in range(1, repeats + 1):
            runs["in-process"].append(_in_process(i))
    configure_pool(warm_spare="auto")
    default_pool().end_spares()
    base = statistics.median(run["wall_s"] for run in runs["in-process"])
    base_fit = statistics.median(run["fit_s"] for run in runs["in-process"])
    rows = [("the default here", "on" if rule[0] else "off", rule[1])]
    for kind, kind_runs in runs.items():
        wall = statistics.median(run["wall_s"] for run in kind_runs)
        fit = statistics.median(run["fit_s"] for run in kind_runs)
        took = sum(run.get("took", 0.0) for run in kind_runs)
        spare = f"; took the spare {took:.0f} of {len(kind_runs)}" if "spare," in kind else ""
        rows.append((kind, f"{wall:.2f} s",
                     f"{wall / base:.2f}x in-process; fit {fit:.2f} s ({fit / base_fit:.2f}x){spare}; "
                     "runs " + ", ".join(f"{run['wall_s']:.2f}" for run in kind_runs)))
    rows.append(("(all of it with)", "", _onednn_label()))
    return rows

def timed_cv_fold(fold: int) -> dict[str, float]:
    """The demo's ``cv_fold`` (lesson 5: a fit and an evaluate), timed as :func:`timed_fit` is."""
    import resource

    from kerasmagic.demo import cv_fold

    started = time.perf_counter()
    cv_fold(fold)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"fit_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime}


def light_driver(repeats: int, preload: bool) -> list[tuple[str, str, str]]:
    """``--light-driver``: this process never imports Keras at the top, as a script whose jobs
    import it themselves: ``repeats`` back-to-back isolated fits (the pool learns from the
    first), or with ``prestart_pool(preload=["keras"])`` first; then the same fit in-process."""
    from kerasmagic.isolation import prestart_pool, run_isolated
    from kerasmagic.isolation.pool import default_pool

    assert "keras" not in sys.modules and "tensorflow" not in sys.modules
    if preload:
        prestart_pool(preload=["keras"])
        assert default_pool().wait_until_warm(timeout=300)
    jobs = []
    for i in range(1, repeats + 1):
        started = time.perf_counter()
        result = run_isolated(timed_fit, args=(i,), quiet=True)
        jobs.append((time.perf_counter() - started, result))
    first_in_process = _timed(fit_small, 0)  # this process imports Keras and starts TF here
    warm = statistics.median(_in_process(i)["wall_s"] for i in range(1, repeats + 1))
    how = "prestart_pool(preload=['keras'])" if preload else "learning"
    walls = ", ".join(f"{wall:.2f} ({result.worker_state})" for wall, result in jobs)
    if preload:
        median = statistics.median(wall for wall, _ in jobs)
        return [(f"light driver, {how}: every job", f"{median:.2f} s",
                 f"{median / warm:.2f}x in-process warm (target <= 1.15x); runs {walls}")]
    later = statistics.median(wall for wall, _ in jobs[2:]) if len(jobs) > 2 else float("nan")
    return [
        ("light driver, no preload: job 1", f"{jobs[0][0]:.2f} s",
         f"imported {', '.join(jobs[0][1].job_imported) or 'nothing'} itself; the pool learned them"),
        ("light driver: job 2", f"{jobs[1][0]:.2f} s", "waited for the template that imports them"),
        ("light driver: jobs 3 and later", f"{later:.2f} s",
         f"{later / warm:.2f}x in-process warm (target <= 1.15x; before learning: each job as job 1); "
         f"runs {walls}"),
        ("light driver, in-process: first fit / warm", f"{first_in_process:.2f} s / {warm:.2f} s",
         "the first one imports Keras and starts TensorFlow"),
    ]


def _light_run(args: argparse.Namespace, preload: bool) -> list[tuple[str, str, str]]:
    """:func:`light_driver` in a fresh interpreter (this one imported Keras)."""
    import json
    import subprocess

    command = [sys.executable, os.path.abspath(__file__), "--light-driver", "--repeats", str(args.repeats)]
    done = subprocess.run(command + (["--preload-keras"] if preload else []), capture_output=True, text=True,
                          check=True)
    return [tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1])]


def lesson5_fold() -> list[tuple[str, str, str]]:
    """Lesson 5's fold in-process (``clear_session()`` before each) and as an ``isolated_map``
    job, one of each per round (the load falls on both alike)."""
    import resource

    import keras

    from kerasmagic.demo import CV_FOLDS, cv_fold
    from kerasmagic.isolation import isolated_map
    from kerasmagic.isolation.pool import default_pool

    default_pool().prestart()
    assert default_pool().wait_until_warm(timeout=300)
    cv_fold(0)
    in_process, isolated = [], []
    for fold in range(CV_FOLDS):
        keras.backend.clear_session()
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        cv_fold(fold)
        after = resource.getrusage(resource.RUSAGE_SELF)
        in_process.append({"wall_s": time.perf_counter() - started,
                           "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)})
        job = isolated_map(timed_cv_fold, [fold], quiet=True, progress=False)
        isolated.append({"wall_s": job.jobs[0].wall_s, "cpu_s": job[0]["cpu_s"]})

    def median(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    ratio = median(isolated, "wall_s") / median(in_process, "wall_s")
    cpu_ratio = median(isolated, "cpu_s") / median(in_process, "cpu_s")
    return [("lesson 5 fold, in-process (clear_session)", f"{median(in_process, 'wall_s'):.2f} s",
             f"median of {CV_FOLDS}; CPU {median(in_process, 'cpu_s'):.2f} s"),
            ("lesson 5 fold, isolated_map", f"{median(isolated, 'wall_s'):.2f} s",
             f"{ratio:.2f}x in-process (target <= 1.2x); the job's process: CPU {median(isolated, 'cpu_s'):.2f} s "
             f"({cpu_ratio:.2f}x)")]


def concurrent_memory(jobs: int) -> list[tuple[str, str, str]]:
    from kerasmagic.isolation import configure_pool, isolated_map, shutdown_default_pool
    from kerasmagic.isolation.pool import default_pool

    rows = []
    for fork in (True, False):
        configure_pool(size=jobs, fork=fork)
        shutdown_default_pool()
        default_pool().prestart()
        default_pool().wait_until_warm(timeout=300)
        templates = default_pool().template_pids()
        during: list[int] = []
        # The template's PSS while the children share its pages (they end after 3 s).
        timer = threading.Timer(1.5, lambda pids, into: into.append(sum(_pss(pid) for pid in pids)),
                                args=(templates, during))
        timer.start()
        result = isolated_map(hold_memory, [3.0] * jobs, workers=jobs, quiet=True, progress=False, timeout=600)
        timer.join()
        template_pss = during[0]
        children = sum(job.child_pss_bytes or 0 for job in result.jobs)
        total = children + template_pss
        label = f"{jobs} jobs at once, forked from a template" if fork else f"{jobs} jobs at once, fresh interpreters"
        rows.append((label, f"{total / 2**20:.0f} MiB",
                     f"PSS: children {children / 2**20:.0f} MiB + template {template_pss / 2**20:.0f} MiB"))
    configure_pool(size=os.cpu_count() or 1, fork=True)
    shutdown_default_pool()
    return rows


def cross_validation(folds: int) -> list[tuple[str, str, str]]:
    from kerasmagic.isolation import isolated_map
    from kerasmagic.probes.process import rss_bytes

    isolated_map(fit_small, range(2), quiet=True, progress=False)  # the template, warm
    before = rss_bytes()
    result = isolated_map(fit_small, range(folds), quiet=True, progress=False)
    growth = rss_bytes() - before
    return [(f"{folds}-fold isolated_map CV, kernel RSS growth", f"{growth / 2**20:+.1f} MB",
             f"target <= 5 MB; {result.wall_s:.1f} s in all, {result.wall_s / folds:.2f} s per fold")]


def many_jobs(count: int) -> list[tuple[str, str, str]]:
    import psutil

    from kerasmagic.isolation import run_isolated
    from kerasmagic.isolation.pool import default_pool

    started = time.perf_counter()
    for _ in range(count):
        run_isolated("import os\nx = os.getpid()", quiet=True, timeout=60)
    wall = time.perf_counter() - started
    pid = os.getpid()
    ours = set(default_pool().template_pids())
    left = []
    for process in psutil.Process().children(recursive=True):
        try:
            # multiprocessing's resource tracker (from the spawn comparison) is not ours
            if process.pid not in ours and "kerasmagic" in " ".join(process.cmdline()):
                left.append(process.pid)
        except psutil.Error:
            continue
    folders = glob.glob(f"/dev/shm/kerasmagic-isolated-{pid}-*") + \
        glob.glob(os.path.join(tempfile.gettempdir(), f"kerasmagic-isolated-{pid}-*"))
    logs = [p for p in glob.glob(os.path.join(tempfile.gettempdir(), f"kerasmagic-*-{pid}-*.log"))
            if "template" not in p]
    return [(f"{count} back-to-back forked jobs", f"{wall:.1f} s",
             f"{wall / count * 1000:.0f} ms each; left behind: {len(left)} processes, {len(folders)} job folders, "
             f"{len(logs)} worker logs (the template's own log stays while it lives)")]


def array_transfer(mib: int) -> list[tuple[str, str, str]]:
    import multiprocessing

    import numpy as np

    from kerasmagic.isolation import run_isolated

    array = np.ones(mib * 2**20 // 8)
    result = run_isolated(np.shape, args=(array,), quiet=True)
    ours = result.ship_in_s + result.run_s
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_pipe_target, args=(child,))
    process.start()
    parent.recv_bytes()  # the child is up: time the transfer alone
    started = time.perf_counter()
    parent.send_bytes(pickle.dumps(array, protocol=5))
    parent.recv_bytes()
    piped = time.perf_counter() - started
    process.join(60)
    return [(f"{mib} MiB array into a job, out-of-band files", f"{ours:.2f} s",
             f"encode {result.ship_in_s:.2f} s + decode/run {result.run_s:.2f} s"),
            (f"{mib} MiB array, pickle through a pipe", f"{piped:.2f} s", "pickle.dumps + send + recv + loads")]


def _off_run(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """The back-to-back figures again in a fresh interpreter with ``TF_ENABLE_ONEDNN_OPTS=0`` (TF
    reads it at import): what CI's AMD CPUs, where TF leaves oneDNN off, run."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--only", "back-to-back", "--onednn", "off",
                           "--repeats", str(args.repeats), "--rows-json"],
                          env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"}, capture_output=True, text=True, check=True)
    return [tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1])]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--folds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--array-mib", type=int, default=512)
    parser.add_argument("--only", nargs="*", help="run only these sections (e.g. --only memory)")
    parser.add_argument("--onednn", choices=("as-is", "off", "both"), default="both",
                        help="back-to-back fits with oneDNN as TF chooses for this CPU, off, or both (default)")
    parser.add_argument("--light-driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--preload-keras", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare-forker", help=argparse.SUPPRESS)
    parser.add_argument("--rows-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_forker:
        _bare_forker(args.bare_forker)
        return
    if args.light_driver:  # before `import keras`: that is the point
        import json

        from kerasmagic.isolation import shutdown_default_pool as shutdown

        try:
            print(json.dumps(light_driver(args.repeats, args.preload_keras)))
        finally:
            shutdown()
        return
    if args.onednn == "off":
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"

    import keras  # as in a notebook: the kernel uses Keras, so the template preloads it

    from kerasmagic.isolation import shutdown_default_pool
    from kerasmagic.isolation.pool import default_pool

    if args.rows_json:  # one section's rows for _off_run, as JSON on the last line
        import json

        try:
            print(json.dumps(back_to_back(args.repeats, extras=False)))
        finally:
            shutdown_default_pool()
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores ({_cpu_model()}), keras {keras.__version__}")
    sections = [("Back-to-back jobs", lambda: back_to_back(args.repeats, extras=args.onednn != "off")
                 + (_off_run(args) if args.onednn == "both" else [])),
                ("Warm spare (isolated with a spare vs in-process)", lambda: warm_spare(args.repeats)),
                ("Light driver (a script that never imports Keras itself)",
                 lambda: _light_run(args, preload=False) + _light_run(args, preload=True)),
                ("Lesson 5", lesson5_fold),
                ("Cross-validation", lambda: cross_validation(args.folds)),
                ("Many jobs", lambda: many_jobs(args.jobs)),
                ("Memory of concurrent jobs", lambda: concurrent_memory(args.concurrent)),
                ("Shipping", lambda: array_transfer(args.array_mib))]
    if args.only:
        sections = [(t, m) for t, m in sections if any(word.lower() in t.lower() for word in args.only)]
    try:
        for title, measure in sections:
            print(f"\n{title}", flush=True)
            for name, figure, note in measure():
                print(f"  {name:<46} {figure:>9}   {note}", flush=True)
        idle, rss = default_pool().idle_cost()
        print(f"\nPool cost: {idle} template(s) waiting, RSS {rss / 2**20:.0f} MiB")
    finally:
        shutdown_default_pool()


if __name__ == "__main__":
    main()

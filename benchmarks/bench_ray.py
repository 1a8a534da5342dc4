"""Isolated jobs on a Ray cluster, measured (prints figures; not a test).

On a local two-node cluster (``ray.cluster_utils.Cluster``: a head and a second node, one
CPU each, on this machine), 8 small Keras fits run

- with ``on="ray"``: each a fork of a warm template on the node Ray picks;
- as ``@ray.remote(max_calls=1)`` tasks: Ray's own "new process per task", which imports
  TensorFlow and Keras again every time;
- with local isolation (``isolated_map`` on this machine), for comparison;

and the per-job overhead of each is the job's wall time minus the same fit in a warm
process (goal: ``on="ray"`` at least 5x less than ``max_calls=1``). Also: the time from
connecting to the first job's result (agents start, templates import the frameworks).

Run twice by default, each in an interpreter of its own: with a heavy driver (a notebook that
imported Keras, so the templates import it from the start) and with a light one (a script or Ray
driver whose jobs ``import keras`` inside the function, as Ray users write them: the driver never
imports a framework, the templates learn Keras from the first job, and the in-process baseline
is taken in a separate warm process).

    $ python benchmarks/bench_ray.py [--jobs 8] [--driver {heavy,light,both}]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from importlib.metadata import version

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_isolation import _cpu_model, fit_small  # the same job as the local isolation benchmark

_OBJECT_STORE_BYTES = 80 * 1024 * 1024


def _sequential(run_one, jobs: int) -> list[float]:
    """Wall time of each job, one after another (what one job costs, without queueing)."""
    times = []
    for seed in range(jobs):
        started = time.perf_counter()
        run_one(seed)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--driver", choices=("heavy", "light", "both"), default="both",
                        help="heavy: the driver imports Keras first; light: it never does")
    args = parser.parse_args()
    if args.driver == "both":
        for driver in ("heavy", "light"):
            subprocess.run([sys.executable, os.path.abspath(__file__), "--jobs", str(args.jobs), "--driver", driver],
                           check=True)
        return
    light = args.driver == "light"
    if not light:
        import keras  # noqa: F401 - the kernel's frameworks decide what the templates import
    import ray
    from ray.cluster_utils import Cluster

    from kerasmagic import close_cluster_session, isolated_map, run_isolated

    print(f"\n== {args.driver} driver: {'never imports Keras (its jobs do)' if light else 'imported Keras first'} ==")
    print(f"kerasmagic on Ray: {args.jobs} small Keras fits (Python {sys.version.split()[0]}, Ray {ray.__version__}, "
          f"Keras {version('keras')}, {os.cpu_count()} CPUs, {_cpu_model()}; "
          f"load average {os.getloadavg()[0]:.1f} at the start)")
    started = time.perf_counter()
    node = {"num_cpus": 1, "object_store_memory": _OBJECT_STORE_BYTES, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**node)
    cluster_s = time.perf_counter() - started
    started = time.perf_counter()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    connect_s = time.perf_counter() - started
    try:
        # Warm: the in-process baseline is a fit in a process that already ran one; a light
        # driver takes it in another process, so that it never imports Keras itself.
        in_process = _in_process_elsewhere() if light else _in_process_here()

        started = time.perf_counter()
        run_isolated(fit_small, args=(0,), on="ray", quiet=True)
        first_ray_s = time.perf_counter() - started
        isolated_map(fit_small, range(2), workers=2, on="ray", quiet=True, progress=False)  # both nodes warm
        ray_each = _sequential(lambda s: run_isolated(fit_small, args=(s,), on="ray", quiet=True), args.jobs)
        started = time.perf_counter()
        isolated_map(fit_small, range(args.jobs), workers=2, on="ray", quiet=True, progress=False)
        ray_map_s = time.perf_counter() - started

        fresh_task = ray.remote(max_calls=1, num_cpus=1)(fit_small)
        ray.get(fresh_task.remote(0))  # Ray's worker pool is up; each task still starts a new process
        fresh_each = _sequential(lambda s: ray.get(fresh_task.remote(s)), min(args.jobs, 4))
        started = time.perf_counter()
        ray.get([fresh_task.remote(s) for s in range(args.jobs)])
        fresh_map_s = time.perf_counter() - started

        run_isolated(fit_small, args=(0,), quiet=True)  # the local template is warm
        local_each = _sequential(lambda s: run_isolated(fit_small, args=(s,), quiet=True), args.jobs)
        started = time.perf_counter()
        isolated_map(fit_small, range(args.jobs), workers=2, quiet=True, progress=False)
        local_map_s = time.perf_counter() - started
    finally:
        close_cluster_session()
        ray.shutdown()
        cluster.shutdown()
    if light:
        assert "keras" not in sys.modules and "tensorflow" not in sys.modules, "the light driver imported a framework"

    def overhead(times: list[float]) -> float:
        return statistics.median(times) - in_process

    rows = [
        ("in-process (a warm process)", in_process, 0.0, None),
        ('on="ray" (fork of a warm template on a node)', statistics.median(ray_each), overhead(ray_each), ray_map_s),
        ("@ray.remote(max_calls=1) (a new process per task)", statistics.median(fresh_each), overhead(fresh_each),
         fresh_map_s),
        ("local isolation (fork on this machine)", statistics.median(local_each), overhead(local_each), local_map_s),
    ]
    print(f"\nlocal 2-node cluster started in {cluster_s:.1f} s, ray.init {connect_s:.1f} s; "
          f"first on=\"ray\" job after connecting: {first_ray_s:.1f} s (agents start, templates import Keras"
          f"{', learned from this first job' if light else ''})")
    print(f"\n{'how each fit runs':<52} {'s/job':>7} {'overhead/job':>13} {f'{args.jobs} jobs, 2 at a time':>22}")
    for label, each, extra, total in rows:
        total_text = f"{total:.2f} s" if total is not None else "-"
        print(f"{label:<52} {each:>7.2f} {extra:>+12.2f}s {total_text:>22}")
    ratio = overhead(fresh_each) / max(overhead(ray_each), 1e-3)
    print(f"\nper-job overhead: on=\"ray\" {overhead(ray_each) * 1000:.0f} ms vs max_calls=1 "
          f"{overhead(fresh_each) * 1000:.0f} ms: {ratio:.0f}x less (goal: at least 5x)")


def _in_process_here() -> float:
    fit_small(0)
    return statistics.median(_sequential(fit_small, 3))


def _in_process_elsewhere() -> float:
    """The same warm in-process figure, taken in a separate interpreter (the light driver's own
    process must not import Keras)."""
    code = ("import sys, statistics; sys.path.insert(0, sys.argv[1]); import bench_ray as b; "
            "print(b._in_process_here())")
    done = subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__))],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()

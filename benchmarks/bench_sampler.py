"""What the live sampler costs the kernel: CPU at 1 Hz and 10 Hz, and with no sidebar open.

Runs the real Sampler with the real probes (process RSS, TF allocator, NVML) in this
process, with TensorFlow imported and its runtime started (the realistic case), and sends
each sample through json.dumps as the comm would. Two measures per phase:
- the sampler thread's own CPU time (/proc/self/task/<tid>/stat, 10 ms ticks), and
- the whole process's CPU time (includes TF's idle threads; the "no sidebar" phase is the
  baseline it is compared against).

Usage: python benchmarks/bench_sampler.py [--seconds 60] [--no-tf]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time


def _thread_cpu_s(native_id: int) -> float:
    with open(f"/proc/self/task/{native_id}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def _start_tf() -> str:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.constant([1.0]) + 1  # start the runtime so the allocator probe does real work
    return tf.__version__


def _phase(name: str, interval_s: float | None, seconds: float) -> dict:
    from kerasmagic.live.sampler import THREAD_NAME, Sampler

    sent = []

    def send(sample):
        sent.append(len(json.dumps(sample)))

    sampler = Sampler(send, interval_s=interval_s or 1.0)
    # Start the thread, then put it to sleep for the "no sidebar" phase: it must cost nothing.
    sampler.set_active(True)
    while not sent:
        time.sleep(0.01)
    if interval_s is None:
        sampler.set_active(False)
    thread = next(t for t in threading.enumerate() if t.name == THREAD_NAME)
    time.sleep(0.2)
    sent.clear()
    thread_before = _thread_cpu_s(thread.native_id)
    process_before = time.process_time()
    wall_before = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - wall_before
    process_cpu = time.process_time() - process_before
    thread_cpu = _thread_cpu_s(thread.native_id) - thread_before
    samples = len(sent)
    sampler.stop()
    return {
        "phase": name,
        "samples": samples,
        "thread_cpu_pct": 100 * thread_cpu / wall,
        "process_cpu_pct": 100 * process_cpu / wall,
        "per_sample_ms": 1000 * thread_cpu / samples if samples else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase (default 60)")
    parser.add_argument("--no-tf", action="store_true", help="do not import TensorFlow")
    args = parser.parse_args()
    tf_version = "not imported" if args.no_tf else _start_tf()
    from kerasmagic.live.sampler import take_sample

    cost = [take_sample(i)["sample_cost_s"] for i in range(200)]
    size = len(json.dumps(take_sample(0)))
    print(f"TensorFlow {tf_version}; one sample: median probe cost {1000 * sorted(cost)[100]:.3f} ms, "
          f"{size} bytes of JSON; {os.cpu_count()} CPUs; {args.seconds:.0f} s per phase")
    print(f"{'phase':<14}{'samples':>8}{'sampler thread CPU':>20}{'process CPU':>13}{'per sample':>12}")
    for name, interval in (("no sidebar", None), ("1 Hz", 1.0), ("10 Hz", 0.1)):
        row = _phase(name, interval, args.seconds)
        print(f"{row['phase']:<14}{row['samples']:>8}{row['thread_cpu_pct']:>19.3f}%"
              f"{row['process_cpu_pct']:>12.3f}%{row['per_sample_ms']:>10.2f} ms")
    print("target: ≤ 0.5% of one core at 1 Hz, zero with no sidebar open. The thread column counts "
          "10 ms kernel ticks (coarse); the process column is exact and includes TF's idle threads.")


if __name__ == "__main__":
    main()

"""What the memory guard costs the kernel: its thread's CPU at 1 Hz (far from the limit) and at
10 Hz (nearing it, the post-mortem record rewritten on every reading).

Runs the real guard thread (kerasmagic.guard.MemoryGuard) on a real IPython shell in this
process, with a real record file in a temporary folder. "Nearing the limit" is made by setting
the limit (set_memory_limit) to 1.25× this process's RSS, so RSS sits at 80 % of it: the guard
reads ten times a second; no cell runs, so it never warns or stops. The thread's CPU time is
read through its own CPU clock (pthread_getcpuclockid: nanoseconds, not /proc's 10 ms ticks).

Usage: python benchmarks/bench_guard.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import tempfile
import time


def _phase(name: str, seconds: float, near: bool, folder: str) -> dict:
    from IPython.core.interactiveshell import InteractiveShell

    from kerasmagic import guard, limits, postmortem
    from kerasmagic.probes.process import rss_bytes

    shell = InteractiveShell.instance()
    if near:
        limits.set_memory_limit(int(rss_bytes() * 1.25))
    else:
        limits.set_memory_limit(None)
    record = postmortem.KernelRecord(folder, f"/bench/{name}.ipynb")
    running = guard.MemoryGuard(shell, record)
    running.start()
    thread = running.thread
    assert thread is not None and thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    time.sleep(1.5)  # past the first readings, the imports they trigger and the first record write
    cpu_before, readings_before, writes_before = time.clock_gettime(clock), running.readings, record.writes
    wall_before = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - wall_before
    cpu = time.clock_gettime(clock) - cpu_before
    readings, writes = running.readings - readings_before, record.writes - writes_before
    level = running.level
    running.stop()
    record.close_clean()
    limits.set_memory_limit(None)
    return {
        "phase": name,
        "level": level,
        "readings_per_s": readings / wall,
        "record_writes": writes,
        "thread_cpu_pct": 100 * cpu / wall,
        "per_reading_us": 1e6 * cpu / readings if readings else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = [_phase("far from the limit (1 Hz)", args.seconds, False, folder),
                _phase("nearing the limit (10 Hz, record each reading)", args.seconds, True, folder)]
    print(f"memory guard cost, {args.seconds:g} s per phase (thread CPU clock)")
    print(f"{'phase':48} {'level':6} {'readings/s':>10} {'writes':>7} {'CPU % of a core':>16} {'µs/reading':>11}")
    for row in rows:
        print(f"{row['phase']:48} {row['level']:6} {row['readings_per_s']:10.2f} {row['record_writes']:7d} "
              f"{row['thread_cpu_pct']:16.4f} {row['per_reading_us']:11.1f}")
    budget = rows[0]["thread_cpu_pct"]
    print(f"budget at 1 Hz: <= 0.1 % of a core; measured {budget:.4f} % -> {'ok' if budget <= 0.1 else 'OVER'}")


if __name__ == "__main__":
    main()

"""What ``isolated_map(checkpoint=...)`` costs (prints figures; not a test). Issue 22's targets:

- checkpointing adds <= 5 ms per item for values under 1 MiB: measured two ways, the
  checkpoint's own work per item (storing the value, checking it loads, appending the record)
  timed directly, and whole maps with and without a checkpoint, alternating, side by side
  (noisier: a forked job itself takes tens of ms);
- resuming a 1,000-item run with 999 done starts the last item in under 1 s: the time from
  the call to the last item's first line (the item notes ``time.time()`` as it starts).

    $ python benchmarks/bench_map_checkpoint.py [--items 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = {"1 KiB": 1 << 10, "100 KiB": 100 << 10, "1000 KiB": 1000 << 10}


def make_value(size: int):
    """A value like a fold's result: a dict with a score and an array of ``size`` bytes."""
    import numpy as np

    return {"score": 0.9, "weights": np.ones(size, dtype=np.uint8)}


def started_at(item):
    """The item's start time (epoch seconds), taken as its first line runs."""
    import time

    return time.time()


def direct_cost(size: int, count: int) -> float:
    """Milliseconds per item of the checkpoint's own work, on the kernel side (``count`` records
    back to back: a burst far denser than a map's, whose items take seconds each)."""
    from kerasmagic.isolation.checkpoint import Checkpoint, ItemRecord, fingerprint_call, store_value
    from kerasmagic.isolation.result import IsolatedResult
    from kerasmagic.isolation.retries import attempt_record

    value = make_value(size)
    with tempfile.TemporaryDirectory() as folder:
        book = Checkpoint.open(os.path.join(folder, "b.kmrun"), fingerprint_call(make_value, list(range(count))))
        job = IsolatedResult("x", wall_s=1.0, child_rss_peak_bytes=123 << 20, last_output="epoch 3/3 - loss 0.1\n" * 6)
        started = time.perf_counter()
        for index in range(count):
            tries = [attempt_record(1, job, None, timeout=None)]
            book.write(ItemRecord(index, "ok", None, {"wall_s": 1.0}, job.last_output, tries, time.time()),
                       store_value(value))
        elapsed = time.perf_counter() - started
        book.close()
    return elapsed / count * 1000


def map_per_item(size: int, items: int, checkpoint: str | None) -> float:
    from kerasmagic.isolation import isolated_map

    if checkpoint and os.path.exists(checkpoint):
        os.remove(checkpoint)
    started = time.perf_counter()
    isolated_map(make_value, [size] * items, workers=1, checkpoint=checkpoint, progress=False, quiet=True)
    return (time.perf_counter() - started) / items * 1000


def resume_latency(total: int = 1000) -> tuple[float, float]:
    """(seconds from the call to the last item's start, seconds to write the 999 records)."""
    from kerasmagic.isolation import isolated_map
    from kerasmagic.isolation.checkpoint import Checkpoint, ItemRecord, fingerprint_call, store_value

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "cv.kmrun")
        items = list(range(total))
        # The 999 finished items are written through the checkpoint's own API (a real 1,000-fork run
        # would take minutes here): the same records a map writes, with a small value each.
        started = time.perf_counter()
        book = Checkpoint.open(path, fingerprint_call(started_at, items))
        for index in items[:-1]:
            book.write(ItemRecord(index, "ok", None, {"wall_s": 0.02, "child_rss_peak_bytes": 60 << 20},
                                  "done\n", [{"attempt": 1, "status": "ok", "cause": "ok"}], time.time()),
                       store_value(time.time()))
        book.close()
        written = time.perf_counter() - started
        called = time.time()
        result = isolated_map(started_at, items, checkpoint=path, progress=False, quiet=True)
        assert result.restored.count(True) == total - 1
        return result[-1] - called, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from kerasmagic.isolation import configure_pool, prestart_pool

    configure_pool(size=1)
    prestart_pool()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.items} items per map, "
          f"{args.rounds} rounds, medians")
    print(f"{'value':>10}  {'checkpoint work':>16}  {'map, no ckpt':>13}  {'map, ckpt':>10}  {'difference':>10}")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "bench.kmrun")
        map_per_item(SIZES["1 KiB"], 5, None)  # warm the template
        for name, size in SIZES.items():
            direct = statistics.median(direct_cost(size, args.items) for _ in range(args.rounds))
            plain, kept = [], []
            for _ in range(args.rounds):  # alternating: the machine's load hits both alike
                plain.append(map_per_item(size, args.items, None))
                kept.append(map_per_item(size, args.items, path))
            p, k = statistics.median(plain), statistics.median(kept)
            verdict = "ok" if direct <= 5 else "OVER the 5 ms target"
            print(f"{name:>10}  {direct:>13.2f} ms  {p:>10.1f} ms  {k:>7.1f} ms  {k - p:>+7.1f} ms   "
                  f"(target <= 5 ms per item: {verdict})")
    latencies = []
    for _ in range(args.rounds):
        latency, written = resume_latency()
        latencies.append(latency)
    latency = statistics.median(latencies)
    print(f"resume of 1,000 items with 999 done: the last item started {latency * 1000:.0f} ms after the call "
          f"(median of {args.rounds}; target < 1 s: {'ok' if latency < 1 else 'OVER'}); writing the 999 records "
          f"took {written:.2f} s")


if __name__ == "__main__":
    main()

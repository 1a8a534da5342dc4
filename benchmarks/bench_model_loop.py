"""Benchmark 1: the 40-model loop, four ways, each in its own fresh process.

Prints RSS growth per model (least-squares slope over models 10-40), time per model for
the first and last five, and the last layer name. Target: fresh_model() <= 1 MB/model.

    python benchmarks/bench_model_loop.py [--models 40]
"""

from __future__ import annotations

import argparse
import platform

from kerasmagic.demo import STRATEGIES, format_table, run_in_subprocess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--strategies", nargs="+", default=["nothing", "del+gc", "clear_session", "fresh_model"],
                        choices=list(STRATEGIES))
    args = parser.parse_args()
    import importlib.metadata as md

    print(f"# {args.models} small CNNs per strategy; TF {md.version('tensorflow-cpu')}, Keras {md.version('keras')}, "
          f"Python {platform.python_version()}")
    results = [run_in_subprocess(strategy, args.models) for strategy in args.strategies]
    print(format_table(results, slope_from=9))


if __name__ == "__main__":
    main()

"""Run-time benchmark: every example at its size, compiled stitch vs numpy eager vs the bandwidth bound.

Prints a markdown table: kernels, global/compulsory bytes, median times of
stitch (outputs reused via out=, and fresh outputs each call) and numpy eager
(the reference interpreter),
the bandwidth bound (compulsory bytes / bandwidth measured in this run with
numpy's c = a + b on 256 MiB), and the ratios. Threads: OMP_NUM_THREADS as set
for this process (default: all cores). Run: python3 bench/run_speed.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

import stitch
from stitch.engine.interp import evaluate, random_inputs

HERE = Path(__file__).resolve().parent


def bandwidth(runs: int) -> float:
    """Bytes per second of c = a + b on 64 Mi float32 (256 MiB per array), pages touched beforehand."""
    a = np.ones(64 * 2**20, np.float32)
    b = np.ones_like(a)
    c = np.zeros_like(a)
    np.add(a, b, out=c)
    times = []
    for _ in range(max(runs, 3)):
        t = time.perf_counter()
        np.add(a, b, out=c)
        times.append(time.perf_counter() - t)
    return 3 * a.nbytes / min(times)


def median_time(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    bw = bandwidth(args.runs)
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"bandwidth {bw / 1e9:.1f} GB/s (numpy add, 256 MiB); threads {threads}; "
          f"median of {args.runs}\n")
    print("| program | kernels | global/compulsory | stitch ms | stitch fresh ms | numpy ms | bound ms | "
          "stitch/bound | stitch/numpy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted((HERE.parent / "examples").glob("*.ir")):
        f = stitch.compile(path)
        inputs = random_inputs(f.graph, 0)
        out = [np.empty(t.shape, np.dtype(o.dtype)) for t, o in zip(f.graph.output_types, f(**inputs))]
        t_stitch = median_time(lambda: f(out=out, **inputs), args.runs)
        t_fresh = median_time(lambda: f(**inputs), args.runs)  # new output arrays each call: page faults
        t_numpy = median_time(lambda: evaluate(f.graph, inputs), max(1, args.runs // 2))
        cost = f.compiled.cost
        bound = cost.compulsory_bytes / bw
        print(f"| {path.stem} | {len(f.compiled.schedule.kernels)} | "
              f"{cost.global_bytes / cost.compulsory_bytes:.2f} | {t_stitch * 1e3:.3f} | {t_fresh * 1e3:.3f} | "
              f"{t_numpy * 1e3:.3f} | "
              f"{bound * 1e3:.3f} | {t_stitch / bound:.1f} | {t_stitch / t_numpy:.2f} |")


if __name__ == "__main__":
    main()

"""Run-time benchmark: every example at its size, compiled stitch vs numpy eager, torch.compile and the bandwidth bound.

Prints a markdown table: kernels, global/compulsory bytes, median times of
stitch (outputs reused via out=, and fresh outputs each call), numpy eager
(the reference interpreter), torch.compile (Inductor; outputs reused, see
peers.py) when torch is importable, the bandwidth bound (compulsory bytes /
bandwidth measured in this run with numpy's c = a + b on 256 MiB arrays split
across the same threads), and the ratios. One thread count for everything:
--threads (default: all cores), set before numpy, OpenBLAS or torch start
(OMP_NUM_THREADS) and as stitch's pool size (stitch.set_num_threads).
stitch (both columns) and torch.compile are timed interleaved, --runs rounds of
a block of 5 calls each after an untimed call of their own
(peers.interleaved_medians), so a drift of the machine's speed hits them
alike; numpy eager, up to 0.5 s a call, is timed on its own.
Run: python3 bench/run_speed.py [--runs N] [--threads T] [--no-torch]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"  # the source tree's, wherever stitch is installed
BLOCK = 5  # timed calls in a row per engine and round


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-torch", action="store_true", help="skip the torch.compile column")
    return ap.parse_args()


def bandwidth(runs: int, threads: int) -> float:
    """Bytes per second of c = a + b on 64 Mi float32 (256 MiB per array), split across `threads` threads.

    numpy releases the GIL inside the ufunc, so the slices run in parallel:
    the bound uses as many cores as stitch does. Pages are touched beforehand. The median of
    the runs: on the 2-vCPU Zen 4 machine one run in a few dozen took half the time of the
    others (65 GB/s against 36-38), never twice in a row.
    """
    import numpy as np

    a = np.ones(64 * 2**20, np.float32)
    b = np.ones_like(a)
    c = np.zeros_like(a)
    parts = [slice(i * a.size // threads, (i + 1) * a.size // threads) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        def add_all():
            list(pool.map(lambda s: np.add(a[s], b[s], out=c[s]), parts))

        add_all()
        times = []
        for _ in range(max(runs, 3)):
            t = time.perf_counter()
            add_all()
            times.append(time.perf_counter() - t)
    return 3 * a.nbytes / statistics.median(times)


def median_time(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    args = parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # read once, when each library starts: before any is imported
    import numpy as np

    import stitch
    from stitch.engine.interp import evaluate, np_dtype, random_inputs

    stitch.set_num_threads(args.threads)

    sys.path.insert(0, str(HERE))
    from peers import importable, interleaved_medians, torch_compiled

    use_torch = not args.no_torch and importable("torch")
    bw = bandwidth(args.runs, args.threads)
    print(f"bandwidth {bw / 1e9:.1f} GB/s (numpy add, 256 MiB arrays, {args.threads} threads); "
          f"threads {args.threads} for stitch (its pool), numpy (OpenBLAS) and torch; median of {args.runs}; "
          f"torch.compile: {'Inductor, outputs reused' if use_torch else 'not run'}; "
          f"TVM: {'importable but not wired in' if importable('tvm') else 'not importable here'}\n")
    print("| program | kernels | global/compulsory | stitch ms | stitch fresh ms | numpy ms | torch.compile ms | "
          "bound ms | stitch/bound | torch/bound | stitch/numpy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(EXAMPLES.glob("*.ir")):
        f = stitch.compile(path)
        inputs = random_inputs(f.graph, 0)
        out = [np.empty(t.shape, np_dtype(t.dtype)) for t in f.graph.output_types]
        engines = {"stitch": lambda: f(out=out, **inputs),
                   "fresh": lambda: f(**inputs)}  # new output arrays each call: page faults
        if use_torch:
            engines["torch"] = torch_compiled(f.graph, inputs, args.threads)
        t = interleaved_medians(engines, args.runs, pause=0, block=BLOCK)
        t_stitch, t_fresh, t_torch = t["stitch"], t["fresh"], t.get("torch")
        t_numpy = median_time(lambda: evaluate(f.graph, inputs), max(1, args.runs // 2))
        cost = f.compiled.cost
        bound = cost.compulsory_bytes / bw
        torch_cells = (f"{t_torch * 1e3:.3f}", f"{t_torch / bound:.1f}") if t_torch else ("-", "-")
        print(f"| {path.stem} | {len(f.compiled.schedule.kernels)} | "
              f"{cost.global_bytes / cost.compulsory_bytes:.2f} | {t_stitch * 1e3:.3f} | {t_fresh * 1e3:.3f} | "
              f"{t_numpy * 1e3:.3f} | {torch_cells[0]} | {bound * 1e3:.3f} | {t_stitch / bound:.1f} | "
              f"{torch_cells[1]} | {t_stitch / t_numpy:.2f} |", flush=True)


if __name__ == "__main__":
    main()

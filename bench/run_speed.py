"""Run-time benchmark: every example at its size, compiled stitch vs numpy eager, torch.compile and the bandwidth bound.

Prints a markdown table: kernels, global/compulsory bytes, median times of
stitch (outputs reused via out=, and fresh outputs each call), numpy eager
(the reference interpreter), torch.compile (Inductor; outputs reused, see
peers.py) when torch is importable, the bandwidth bound (compulsory bytes /
bandwidth of numpy's c = a + b on 256 MiB arrays split across the same
threads), and the ratios. One thread count for everything: --threads
(default: all cores), set before numpy, OpenBLAS or torch start
(OMP_NUM_THREADS) and as stitch's pool size (stitch.set_num_threads).
stitch (both columns), torch.compile and the bandwidth probe are timed
interleaved, --runs rounds of a block of 5 calls each after an untimed call
of their own (peers.interleaved_times), so a drift of the machine's speed
hits them alike; numpy eager, up to 0.5 s a call, is timed on its own.
The bound of each round comes from that round's probe, and stitch/bound and
torch/bound are the medians of the rounds' ratios: on the 2-vCPU Zen 4 VM
the probe's bandwidth switches between about 37 and 65 GB/s for tens of
seconds at a time, so a probe timed in other seconds than the program put
its ratio off by up to 1.8x.
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


class BandwidthProbe:
    """c = a + b on 64 Mi float32 (256 MiB per array, random values), split across `threads` threads.

    numpy releases the GIL inside the ufunc, so the slices run in parallel: the bound uses as many
    cores as stitch does. Pages are touched when the arrays are filled. Each call is one add; its
    bytes (two arrays read, one written) over its seconds is the bandwidth.
    """

    def __init__(self, threads: int):
        import numpy as np

        rng = np.random.default_rng(0)
        self.a, self.b = rng.random(64 * 2**20, np.float32), rng.random(64 * 2**20, np.float32)
        self.c = np.empty_like(self.a)
        n = self.a.size
        self.parts = [slice(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
        self.pool = ThreadPoolExecutor(threads)
        self.bytes = 3 * self.a.nbytes

    def __call__(self) -> None:
        import numpy as np

        list(self.pool.map(lambda s: np.add(self.a[s], self.b[s], out=self.c[s]), self.parts))


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
    from stitch.engine.ir.interp import evaluate, np_dtype, random_inputs

    stitch.set_num_threads(args.threads)

    sys.path.insert(0, str(HERE))
    from peers import importable, interleaved_times, medians, torch_compiled

    use_torch = not args.no_torch and importable("torch")
    probe = BandwidthProbe(args.threads)
    print(f"bandwidth: numpy add, 256 MiB arrays, {args.threads} threads, timed in each program's rounds; "
          f"threads {args.threads} for stitch (its pool), numpy (OpenBLAS) and torch; {args.runs} rounds of "
          f"{BLOCK} calls; torch.compile: {'Inductor, outputs reused' if use_torch else 'not run'}; "
          f"TVM: {'importable but not wired in' if importable('tvm') else 'not importable here'}\n")
    print("| program | kernels | global/compulsory | stitch ms | stitch fresh ms | numpy ms | torch.compile ms | "
          "GB/s | bound ms | stitch/bound | torch/bound | stitch/numpy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(EXAMPLES.glob("*.ir")):
        f = stitch.compile(path)
        inputs = random_inputs(f.graph, 0)
        out = [np.empty(t.shape, np_dtype(t.dtype)) for t in f.graph.output_types]
        engines = {"stitch": lambda: f(out=out, **inputs),
                   "fresh": lambda: f(**inputs)}  # new output arrays each call: page faults
        if use_torch:
            engines["torch"] = torch_compiled(f.graph, inputs, args.threads)
        engines["probe"] = probe
        rounds = interleaved_times(engines, args.runs, pause=0, block=BLOCK)
        t = medians(rounds)
        t_stitch, t_fresh, t_torch = t["stitch"], t["fresh"], t.get("torch")
        t_numpy = median_time(lambda: evaluate(f.graph, inputs), max(1, args.runs // 2))
        cost = f.compiled.cost
        bw = [probe.bytes / statistics.median(r) for r in rounds["probe"]]
        bound = cost.compulsory_bytes / statistics.median(bw)

        def over_bound(name: str) -> float:
            """The median, over the rounds, of the engine's time over the bound at that round's bandwidth."""
            return statistics.median(statistics.median(r) * b / cost.compulsory_bytes
                                     for r, b in zip(rounds[name], bw))

        torch_cells = (f"{t_torch * 1e3:.3f}", f"{over_bound('torch'):.1f}") if t_torch else ("-", "-")
        print(f"| {path.stem} | {len(f.compiled.schedule.kernels)} | "
              f"{cost.global_bytes / cost.compulsory_bytes:.2f} | {t_stitch * 1e3:.3f} | {t_fresh * 1e3:.3f} | "
              f"{t_numpy * 1e3:.3f} | {torch_cells[0]} | {statistics.median(bw) / 1e9:.1f} | {bound * 1e3:.3f} | "
              f"{over_bound('stitch'):.1f} | {torch_cells[1]} | {t_stitch / t_numpy:.2f} |", flush=True)


if __name__ == "__main__":
    main()
